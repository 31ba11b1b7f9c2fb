#!/usr/bin/env bash
# test_bench.sh: scripts/bench.sh on a small sweep of the CPU trainer (two
# batch sizes, one and two ranks, a pipeline layout): every run succeeds, the
# CSV has a row a run with positive tokens/s and MFU in (0, 1], the step's
# parts add up to the step (5%), and the plots are written (when matplotlib
# is there; bench.sh installs it with pip otherwise). SKIPs without MPI.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
. tests/checks.sh
P=bench_
if [ "${HAVE_MPI:-}" != yes ] || ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIP: bench (built without MPI or no mpirun)"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export ASAN_OPTIONS=detect_leaks=0  # (the multi-rank runs: MPI's own allocations are not ours)
TRAINER=$BUILD/train_gpt TOKENIZE=$BUILD/tokenize OUT="$tmp/out" bash scripts/bench.sh --steps 3 --models 2:64:2 \
    --batches 2,4 --seqs '' --zeros 1 --layouts 1x1x2:1f1b >"$tmp/bench.log" 2>&1
rc=$?
check sweep_runs "[ $rc -eq 0 ]" "exit $rc: $(tail -3 "$tmp/bench.log" | tr '\n' ' ')"
check csv_has_a_row_a_run_with_its_figures "python3 - '$tmp/out/bench.csv' <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
parts = ['data', 'fwd', 'bwd', 'comm', 'bubble', 'opt', 'ckpt']
ok = [r['sweep'] for r in rows] == ['model', 'batch', 'batch', 'zero', 'layout'] and all(
    r['status'] == '0' and float(r['tok_per_s']) > 0 and 0 < float(r['mfu']) <= 1 and float(r['peak_mem_mb']) > 0
    and abs(sum(float(r[p + '_ms']) for p in parts) - float(r['step_ms'])) <= 0.05 * float(r['step_ms'])
    for r in rows)
sys.exit(0 if ok else 1)
PY" "$(cat "$tmp/out/bench.csv" 2>/dev/null | head -3)"
if python3 -c "import matplotlib" 2>/dev/null; then
    check plots_written "[ -s '$tmp/out/batch.png' ] && [ -s '$tmp/out/layout.png' ] && [ -s '$tmp/out/breakdown.png' ]" \
        "$(ls "$tmp/out")"
else
    echo "SKIP: ${P}plots (matplotlib missing)"
fi
