#!/usr/bin/env bash
# bench_comm.sh: communication benchmarks on this machine.
#  1. bus bandwidth of all-reduce, reduce-scatter and all-gather, 1 KB .. 1 GB
#     (dev/perf/bench_comm.c; nccl-tests definitions of algbw and busbw; sizes are
#     capped so NP buffers fit in half the memory), over MPI on host buffers;
#  2. the step-time overhead of ZeRO-1/2/3 against ZeRO-0 for d12 (GPT-2
#     124M) in a short CPU run: STEPS steps at B=1 T=64 per rank, the mean of
#     every step after the first, with rank 0's peak RSS.
# Usage: scripts/bench_comm.sh [NP] (default 2); env: MAX_BYTES, STEPS, THREADS
# (OpenMP threads per rank), MPIRUN_ARGS (extra mpirun flags, e.g. a hostfile).
set -eu
cd "$(dirname "$0")/.."
NP=${1:-2}
MAX_BYTES=${MAX_BYTES:-1073741824}
STEPS=${STEPS:-3}
THREADS=${THREADS:-1}
make build/dev/perf/bench_comm build/train_gpt build/tokenize >/dev/null
MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS=$THREADS ${MPIRUN_ARGS:-})
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)

echo "== collectives: $NP ranks"
"${MPIRUN[@]}" -np "$NP" build/dev/perf/bench_comm --max-bytes "$MAX_BYTES"

echo "== ZeRO step time, d12, $NP ranks, B=1 T=64, $STEPS steps"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat llmc/*.h > "$tmp/corpus.txt"
build/tokenize --bytes 1 --out-dir "$tmp" --name d "$tmp/corpus.txt" >/dev/null
printf "%-6s %14s %12s %22s\n" zero "step_ms" "vs_zero0" "rank0_peak_rss_MB"
base=
for zero in 0 1 2 3; do
    "${MPIRUN[@]}" -np "$NP" build/train_gpt --data-train "$tmp/d_train_*.bin" --model d12 --batch-size 1 \
        --seq-len 64 --steps "$STEPS" --zero "$zero" --peak-tflops 1 --log-json "$tmp/z$zero.json" >"$tmp/z$zero.log" 2>&1 ||
        { echo "zero $zero failed:"; tail -5 "$tmp/z$zero.log"; exit 1; }
    ms=$(awk -F'"ms":' '/"loss"/ && !/^{"step":1,/ { split($2, a, ","); s += a[1]; n++ } END { printf "%.1f", s / n }' \
        "$tmp/z$zero.json")  # (step 1: the warm-up)
    rss=$(grep -o '"peak_memory_mb":\[[0-9.]*' "$tmp/z$zero.json" | cut -d'[' -f2)
    [ -z "$base" ] && base=$ms
    printf "%-6s %14s %11sx %22s\n" "$zero" "$ms" "$(awk -v a="$ms" -v b="$base" 'BEGIN { printf "%.3f", a / b }')" "$rss"
done
grep '^memory per rank' "$tmp"/z*.log | sed 's/^[^:]*z\([0-3]\)\.log:/zero \1: /'
