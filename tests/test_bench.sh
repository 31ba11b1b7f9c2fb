#!/usr/bin/env bash
# test_bench.sh: scripts/bench.sh on a small sweep of the CPU trainer (two
# batch sizes, one and two ranks, a pipeline layout): every run succeeds on
# the same 2 cores (ranks x threads), the CSV has a row a point (the median of
# 2 runs, between their min and max) with positive tokens/s and MFU in (0, 1], the step's
# parts add up to the step (5%), and the plots are written (when matplotlib
# is there; bench.sh installs it with pip otherwise), titled with the base model and batch. Then scripts/bench_pipeline.sh
# at its tiny size: every row present, on the same cores, the memory case.
# SKIPs without MPI; before that, the threads' round-trip probe that
# scripts/bench_cpu.sh prints beside its small runs: a positive number of ns on
# 2 threads, "-" on 1.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
P=bench_
rt2=$(OMP_NUM_THREADS=2 "$BUILD/dev/perf/thread_round_trip" 2000) rt1=$(OMP_NUM_THREADS=1 "$BUILD/dev/perf/thread_round_trip")
check thread_round_trip_ns_on_2_threads_none_on_1 '[[ "$rt2" =~ ^[0-9]+$ ]] && [ "$rt2" -gt 0 ] && [ "$rt1" = - ]' \
    "2 threads: '$rt2', 1 thread: '$rt1'"
need_mpi bench
TRAINER=$BUILD/train_gpt TOKENIZE=$BUILD/tokenize OUT="$tmp/out" bash scripts/bench.sh --steps 3 --models 2:64:2 \
    --batches 2,4 --seqs '' --zeros '' --layouts 1x1x2:1f1b --cores 2 --repeats 2 >"$tmp/bench.log" 2>&1
rc=$?
check sweep_runs "[ $rc -eq 0 ]" "exit $rc: $(tail -3 "$tmp/bench.log" | tr '\n' ' ')"
# (each row that fails says why, above the FAIL line)
check csv_has_a_row_a_run_with_its_figures "python3 - '$tmp/out/bench.csv' <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
parts = ['data', 'fwd', 'bwd', 'comm', 'bubble', 'opt', 'ckpt']
def why_not(r):
    if r['status'] != '0': return 'exit ' + r['status']
    if int(r['ranks']) * int(r['threads']) != 2: return 'not on 2 cores'
    if not (float(r['tok_per_s']) > 0 and 0 < float(r['mfu']) <= 1 and float(r['peak_mem_mb']) > 0):
        return 'tokens/s, MFU or memory out of range'
    if abs(sum(float(r[p + '_ms']) for p in parts) - float(r['step_ms'])) > 0.05 * float(r['step_ms']):
        return 'the parts do not add up to the step'
    if r['repeats'] != '2' or not (float(r['tok_per_s_min']) <= float(r['tok_per_s']) <= float(r['tok_per_s_max'])):
        return 'not the median of 2 runs between their min and max'
bad = [r for r in rows if why_not(r)]
for r in bad:
    print(r['sweep'], r['value'] + ':', why_not(r), {k: v for k, v in r.items() if k != 'flags'})
sys.exit(0 if [r['sweep'] for r in rows] == ['model', 'batch', 'batch', 'layout'] and not bad else 1)
PY" "$(cut -d, -f1-3 "$tmp/out/bench.csv" 2>/dev/null | tr '\n' ' ')"
if python3 -c "import matplotlib" 2>/dev/null; then
    check plots_written "[ -s '$tmp/out/batch.png' ] && [ -s '$tmp/out/layout.png' ] && [ -s '$tmp/out/breakdown.png' ]" \
        "$(ls "$tmp/out")"
    check plot_titles_name_the_model_and_batch_and_the_median \
        "grep -q '^plot: .*/batch.png: batch sweep | model 4:128:4, seq 64, accum 2 | median of 2 runs, whiskers min-max$' '$tmp/bench.log' &&
         grep -q '^plot: .*/breakdown.png: .*model 4:128:4, batch 4, seq 64' '$tmp/bench.log'" "$(grep '^plot' "$tmp/bench.log")"
else
    echo "SKIP: ${P}plots (matplotlib missing)"
fi

# scripts/bench_pipeline.sh's plumbing on its tiny model: a row for one process, data parallel and each
# schedule, every one on the same cores (PP 2 x THREADS 1), the pipeline rows with the simulator's figure
# and error; one process refused over its --mem-limit-mb, pp 2 training under it
TINY=1 PP=2 THREADS=1 TRAIN=$BUILD/train_gpt TOKENIZE=$BUILD/tokenize OMP_WAIT_POLICY=passive bash scripts/bench_pipeline.sh \
    >"$tmp/pipeline.log" 2>&1
rc=$?
check pipeline_bench_runs "[ $rc -eq 0 ]" "exit $rc: $(tail -3 "$tmp/pipeline.log" | tr '\n' ' ')"
check pipeline_bench_says_its_cores "grep -q '^every row on 2 cores (2 ranks x 1 thread, or one process of 2 threads' '$tmp/pipeline.log'"
check pipeline_bench_has_every_row_on_2_cores "python3 - '$tmp/pipeline.log' <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r'(one process, 2 threads|dp 2 ranks x 1 thread, ZeRO-1|pp 2 ranks x 1 thread, (\w+))\s+(\d+)\s+([\d.]+)\s+(\S+)\s+(\S+)\s+(\S+)', line)
    if m:
        rows[m.group(2) or m.group(1)] = m.groups()[2:]
want = ['one process, 2 threads', 'dp 2 ranks x 1 thread, ZeRO-1', 'gpipe', '1f1b', 'interleaved', 'zb1p']
ok = sorted(rows) == sorted(want) and all(r[0] == '2' and float(r[1]) > 0 for r in rows.values()) and all(
    float(rows[s][2]) > 0 and float(rows[s][3]) > 0 and re.fullmatch(r'[+-][\d.]+%', rows[s][4]) for s in want[2:])
sys.exit(0 if ok else 1)
PY" "$(grep -A7 '^layout' "$tmp/pipeline.log" | tr '\n' '|')"
check pipeline_bench_one_process_refused_over_the_budget \
    "grep -q '^one process, 2 threads: error: the run needs .* but --mem-limit-mb 3.5 allows' '$tmp/pipeline.log'"
check pipeline_bench_pp2_trains_under_the_budget \
    "grep -q '^pp 2 ranks x 1 thread, 1f1b, same budget: step [0-9.]* ms' '$tmp/pipeline.log'"
