#!/usr/bin/env bash
# bench_pipeline.sh: each pipeline schedule's step on CPU ranks against the
# simulator's prediction (llmc/pp_schedule.h) for the F, B and W times the same
# run measured. Trains an 8-layer model (C 256, T 128, B 4, 8 micro-batches a
# step; MODEL_FLAGS=... to change it) for STEPS steps (default 6) on PP ranks
# (default 2) of THREADS OpenMP threads each (default 1), once per schedule
# (gpipe, 1f1b, interleaved over 2 chunks, zb1p), and once on one process for
# the same global batch; prints per schedule the whole step (mean over the
# steps after the first), the pipeline's part of it (its forwards and
# backwards) measured and simulated, and each rank's idle fraction in that
# part, measured and simulated. Transfers count as
# free in the simulation and as idle in the measurement.
# Run from anywhere: bash scripts/bench_pipeline.sh
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-6}
pp=${PP:-2}
threads=${THREADS:-1}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_pipeline.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
make --no-print-directory -s train_gpt tokenize >/dev/null
cat llmc/*.h train_gpt.c >"$tmp/corpus.txt"
./tokenize --bytes 1 --out-dir "$tmp" --name bench "$tmp/corpus.txt" >/dev/null
read -r -a model <<<"${MODEL_FLAGS:---n-layer 8 --n-embd 256 --n-head 4 --vocab-size 257 --max-seq-len 128}"
common=(--data-train "$tmp/bench_train_*.bin" "${model[@]}" --seq-len 128 --batch-size 4 --total-batch-tokens 4096
        --steps "$steps" --peak-tflops 1)
cores=$(nproc)
export OMP_NUM_THREADS=$threads
# mean of a --log-json's step times after the first
mean_ms() { grep -o '"ms":[0-9.]*' "$1" | tail -n +2 | cut -d: -f2 | awk '{s += $1} END {printf "%.1f", s / NR}'; }
./train_gpt "${common[@]}" --log-json "$tmp/one.json" >"$tmp/one.log" 2>&1
echo "one process: $(mean_ms "$tmp/one.json") ms a step; $pp ranks x $threads thread(s) on $cores cores"
printf '%-12s %9s %12s %12s   %s\n' schedule step_ms pipeline_ms simulated_ms "idle of each rank: measured/simulated"
for schedule in gpipe 1f1b interleaved zb1p; do
    extra=()
    [ $schedule = interleaved ] && extra=(--virtual-stages 2)
    mpirun --allow-run-as-root --oversubscribe -np "$pp" -x OMP_NUM_THREADS ./train_gpt "${common[@]}" --pp "$pp" \
        --pp-schedule $schedule "${extra[@]}" --log-json "$tmp/$schedule.json" >"$tmp/$schedule.log" 2>&1 ||
        { echo "$schedule: $(tail -1 "$tmp/$schedule.log")"; continue; }
    line=$(grep -a '^pipeline timing' "$tmp/$schedule.log")
    measured=$(sed 's/.*step \([0-9.]*\) measured.*/\1/' <<<"$line")
    simulated=$(sed 's/.*measured, \([0-9.]*\) simulated.*/\1/' <<<"$line")
    idle=$(grep -a '^  rank [0-9]*: F' "$tmp/$schedule.log" |
        sed 's/^  rank \([0-9]*\):.*idle \([0-9.]*\)% measured, \([0-9.]*\)% simulated/r\1 \2\/\3%/' | paste -sd' ')
    printf '%-12s %9s %12s %12s   %s\n' "$schedule" "$(mean_ms "$tmp/$schedule.json")" "$measured" "$simulated" "$idle"
done
