#!/usr/bin/env bash
# bench_ckpt.sh: what an asynchronous checkpoint costs a run, as the training
# time it takes away. Trains MODEL (default d12) for STEPS steps twice, with a
# checkpoint every EVERY steps and without, and prints per trainer:
#   lost_ms    (the with-run's wall time of steps 2..STEPS-1 - the same steps
#              without) / the checkpoints staged in them: what one costs the run
#              (the first step, the warm-up, and the last, whose final
#              checkpoint the run waits for, are left out of both; so each
#              checkpoint counted has EVERY steps after it for its writer)
#   log_lost   the median of the JSON log's own figure ("ckpt":"cost" records'
#              lost_ms: its steps' time less as many median steps before it)
#   stall_ms   the median hand-over (the loop's stall at the step boundary)
#   sync_ms    a synchronous write of the same bytes (dd with fsync of the
#              checkpoint's data file into a new file)
#   lost%      lost_ms / sync_ms
#   step_none  the median step time without checkpoints
#   after_ms   the median time of the first step after each checkpoint's
#              commit (it should be step_none's)
#   MB/s       the writer's (its log line), cpu_s the writer thread's CPU
#              seconds a checkpoint (its log line: its copy when it makes
#              it, the CRC32C, the writes), zstd3 the data's zstd ratio
# and the trainer's line on the cores it leaves the writer. Every figure is
# the machine's at the time: run it on a quiet one.
# Env: MODEL STEPS (30, a multiple of EVERY) EVERY (10) BATCH (1) SEQ (64);
# THREADS: a list of OpenMP thread counts a rank, each measured in turn (on 2
# cores "2 1": no core spare for the writer, then one; default: as
# OMP_NUM_THREADS says); WRITER_CORES: a list of --ckpt-writer-cores values,
# each measured in turn (THREADS=1 WRITER_CORES="0 1": the update's copy, then
# the writer's, with the same core spare; default: the trainer counts); BEFORE=path: another build's trainer (an older
# commit's) measured beside this tree's, each case before then after;
# TRAIN=path: that trainer binary only; TINY=1: a 2-layer model, 12 steps,
# every 4 (the tests' plumbing check).
# Run from anywhere: bash scripts/bench_ckpt.sh
#   BEFORE=/path/to/old/train_gpt THREADS="2 1" bash scripts/bench_ckpt.sh   (the figures of docs/checkpoints.md)
#   THREADS=1 WRITER_CORES="0 1" bash scripts/bench_ckpt.sh   (who makes the copy, with a core spare)
set -euo pipefail
cd "$(dirname "$0")/.."
model=(--model "${MODEL:-d12}")
steps=${STEPS:-30}
every=${EVERY:-10}
if [ "${TINY:-0}" = 1 ]; then
    model=(--n-layer 2 --n-embd 32 --n-head 2 --vocab-size 257 --max-seq-len 64)
    steps=${STEPS:-12}
    every=${EVERY:-4}
fi
if [ "$every" -lt 1 ] || [ "$steps" -lt $((2 * every)) ] || [ $((steps % every)) -ne 0 ]; then
    echo "bench_ckpt.sh: STEPS ($steps) must be a multiple of EVERY ($every), at least 2 x EVERY: each checkpoint counted gets EVERY steps for its writer, the last is the run's final one" >&2
    exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_ckpt.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tokenize=${TOKENIZE:-./tokenize}
if [ -n "${TRAIN:-}" ]; then
    trainers=("$TRAIN")
else
    make --no-print-directory -s train_gpt >/dev/null
    trainers=(${BEFORE:+"$BEFORE"} ./train_gpt)
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' && [ -x ./train_gptcu ]; then
        trainers+=(./train_gptcu)
    fi
fi
[ -n "${TOKENIZE:-}" ] || make --no-print-directory -s tokenize >/dev/null
cat llmc/*.h train_gpt.c >"$tmp/corpus.txt"
"$tokenize" --bytes 1 --out-dir "$tmp" --name bench "$tmp/corpus.txt" >/dev/null
median() { sort -g | awk '{a[NR]=$1} END{if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# steps_done_offset LOG: 1 when the log's step records count steps done (its first record is the run's), 0 for an
# older trainer's 0-based step records
steps_done_offset() { if grep -q '^{"run"' "$1"; then echo 1; else echo 0; fi; }
# "step ms" of each step line of a JSON log, the step 0-based
step_ms() {
    grep '"loss"' "$1" | sed 's/^{"step":\([0-9]*\),.*"ms":\([0-9.]*\),.*/\1 \2/' |
        awk -v o="$(steps_done_offset "$1")" '{print $1 - o, $2}'
}

printf '%-16s %10s %10s %10s %10s %8s %10s %10s %7s %6s %7s\n' trainer lost_ms log_lost stall_ms sync_ms "lost%" \
    step_none after_ms MB/s cpu_s zstd3
for threads in ${THREADS:-${OMP_NUM_THREADS:-default}}; do
for writer_cores in ${WRITER_CORES:-counted}; do
[ "$threads" = default ] || export OMP_NUM_THREADS=$threads
for trainer in "${trainers[@]}"; do
    name=$(basename "$trainer")
    [ "$trainer" = "${BEFORE:-}" ] && name=before
    [ -n "${BEFORE:-}" ] && [ "$trainer" = ./train_gpt ] && name=after
    [ -z "${THREADS:-}" ] || name="$name ${threads}t"
    writer_flag=()
    [ "$writer_cores" = counted ] || { writer_flag=(--ckpt-writer-cores "$writer_cores"); name="$name w$writer_cores"; }
    common=(--data-train "$tmp/bench_train_*.bin" "${model[@]}" --batch-size "${BATCH:-1}" --seq-len "${SEQ:-64}"
            --steps "$steps" --peak-tflops 1 "${writer_flag[@]}")
    "$trainer" "${common[@]}" --log-json "$tmp/none.json" >"$tmp/none.log" 2>&1 ||
        { echo "$name: $(tail -1 "$tmp/none.log")"; continue; }
    "$trainer" "${common[@]}" --ckpt-dir "$tmp/ck" --ckpt-every "$every" --ckpt-keep 1 --log-json "$tmp/ck.json" \
        >"$tmp/ck.log" 2>&1 || { echo "$name: $(tail -1 "$tmp/ck.log")"; continue; }
    # steps 1..steps-2 (0-based) of each run; the checkpoints staged in them
    none_ms=$(step_ms "$tmp/none.json" | awk -v n="$steps" '$1 >= 1 && $1 <= n - 2 {s += $2} END {print s}')
    ck_ms=$(step_ms "$tmp/ck.json" | awk -v n="$steps" '$1 >= 1 && $1 <= n - 2 {s += $2} END {print s}')
    taken=$(grep -o '"step":[0-9]*,"ckpt":"staged"' "$tmp/ck.json" | grep -o '[0-9]*' |
            awk -v n="$steps" '$1 >= 2 && $1 <= n - 1' | wc -l)
    log_lost=$({ grep -o '"ckpt":"cost".*"lost_ms":[-0-9.]*' "$tmp/ck.json" || true; } | # (none: an older trainer)
               { grep -o '"lost_ms":[-0-9.]*' || true; } | cut -d: -f2 | median)
    stall=$(grep -o '"stall_ms":[0-9.]*' "$tmp/ck.json" | cut -d: -f2 | median)
    step_none=$(step_ms "$tmp/none.json" | awk -v n="$steps" '$1 >= 1 && $1 <= n - 2 {print $2}' | median)
    # the step after each commit: the first step line after a "committed" record (before the last step)
    after=$(awk -v n="$steps" -v o="$(steps_done_offset "$tmp/ck.json")" '/"ckpt":"committed"/ {want = 1; next}
            want && /"loss"/ {split($0, a, /[:,]/); if (a[2] - o <= n - 2) {sub(/.*"ms":/, ""); sub(/,.*/, ""); print}; want = 0}' \
            "$tmp/ck.json" | median)
    data=$(ls "$tmp"/ck/step_*/rank_00000.bin | tail -1)
    bytes=$(stat -c %s "$data")
    t0=$(date +%s.%N)
    dd if="$data" of="$tmp/sync.bin" bs=8M conv=fsync status=none
    t1=$(date +%s.%N)
    sync_ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", (b - a) * 1e3}')
    writer=$(grep -ao 'rank 0 wrote at [0-9]* MB/s' "$tmp/ck.log" | grep -o '[0-9]* MB' | cut -d' ' -f1 | median)
    cpu=$({ grep -ao "writer's CPU time [0-9.]*" "$tmp/ck.log" || true; } | awk '{print $NF}' | median)  # (nan: an older trainer)
    if [ -z "${ratio:-}" ]; then  # (once: every case trains the same model on the same data)
        ratio=nan
        if command -v zstd >/dev/null 2>&1; then
            zbytes=$(zstd -3 -c -q "$data" | wc -c)
            ratio=$(awk -v a="$bytes" -v b="$zbytes" 'BEGIN{printf "%.3f", a / b}')
        fi
    fi
    awk -v n="$name" -v c="$ck_ms" -v z0="$none_ms" -v k="$taken" -v l="$log_lost" -v s="$stall" -v w="$sync_ms" \
        -v b="$step_none" -v a="$after" -v mb="$writer" -v cpu="$cpu" -v zr="$ratio" 'BEGIN{
        lost = k > 0 ? (c - z0) / k : 0
        printf "%-16s %10.1f %10s %10.2f %10.1f %7.1f%% %10.1f %10s %7s %6s %7s\n", n, lost, l, s, w, 100 * lost / w, b, a,
               mb, cpu, zr}'
    echo "  ($name: ${model[*]}, $((bytes / 1000000)) MB per checkpoint on rank 0, $steps steps, a checkpoint every" \
         "$every steps, $taken counted)"
    grep -a '^checkpoint: .*core' "$tmp/ck.log" | sed 's/^/  /' || true
    if grep -aq 'waits for step_' "$tmp/ck.log"; then
        echo "  note: a checkpoint waited for the one before: its writer needs more than $every steps here (raise EVERY)"
    fi
    rm -rf "$tmp/ck" "$tmp/sync.bin"
done
done
done
