#!/usr/bin/env bash
# bench_ckpt.sh: what an asynchronous checkpoint costs the training loop.
# Trains d12 (MODEL=...) for STEPS steps (default 6) with a checkpoint every
# EVERY steps (default 3: the writer finishes between two), on the CPU trainer (and on the GPU trainer when a GPU is there), and
# prints per trainer: the loop's stall per checkpoint (median of the JSON
# log's stall_ms: the staging, and the next update's wait for the copy), the time a synchronous write of the same bytes takes (dd
# of the checkpoint's data file with fsync, the page cache dropped from the
# comparison by writing a new file), the stall as a % of that (the issue's
# target: under 5%), the writer thread's MB/s, the median step time with and
# without checkpoints, and the zstd ratio of the data at level 3.
# Run from anywhere: bash scripts/bench_ckpt.sh
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-d12}
steps=${STEPS:-6}
every=${EVERY:-3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_ckpt.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
make --no-print-directory -s train_gpt tokenize >/dev/null
cat llmc/*.h train_gpt.c >"$tmp/corpus.txt"
./tokenize --bytes 1 --out-dir "$tmp" --name bench "$tmp/corpus.txt" >/dev/null
median() { sort -g | awk '{a[NR]=$1} END{if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

trainers=(./train_gpt)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' && [ -x ./train_gptcu ]; then
    trainers+=(./train_gptcu)
fi
printf '%-12s %10s %12s %8s %10s %12s %12s %8s\n' trainer stall_ms sync_write_ms "stall%" writer_MB/s \
    step_ms_ckpt step_ms_none zstd3
for trainer in "${trainers[@]}"; do
    name=$(basename "$trainer")
    common=(--data-train "$tmp/bench_train_*.bin" --model "$model" --batch-size "${BATCH:-1}" --seq-len 64
            --steps "$steps" --peak-tflops 1)
    "$trainer" "${common[@]}" --log-json "$tmp/none.json" >"$tmp/none.log" 2>&1 ||
        { echo "$name: $(tail -1 "$tmp/none.log")"; continue; }
    "$trainer" "${common[@]}" --ckpt-dir "$tmp/ck" --ckpt-every "$every" --ckpt-keep 1 --log-json "$tmp/ck.json" \
        >"$tmp/ck.log" 2>&1 || { echo "$name: $(tail -1 "$tmp/ck.log")"; continue; }
    stall=$(grep -o '"stall_ms":[0-9.]*' "$tmp/ck.json" | cut -d: -f2 | median)
    data=$(ls "$tmp"/ck/step_*/rank_00000.bin | tail -1)
    bytes=$(stat -c %s "$data")
    t0=$(date +%s.%N)
    dd if="$data" of="$tmp/sync.bin" bs=8M conv=fsync status=none
    t1=$(date +%s.%N)
    sync_ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", (b - a) * 1e3}')
    writer=$(grep -ao 'rank 0 wrote at [0-9]* MB/s' "$tmp/ck.log" | grep -o '[0-9]* MB' | cut -d' ' -f1 | median)
    step_ck=$(tail -n +2 "$tmp/ck.json" | grep -o '"ms":[0-9.]*' | cut -d: -f2 | median)
    step_none=$(tail -n +2 "$tmp/none.json" | grep -o '"ms":[0-9.]*' | cut -d: -f2 | median)
    ratio=nan
    if command -v zstd >/dev/null 2>&1; then
        zbytes=$(zstd -3 -c -q "$data" | wc -c)
        ratio=$(awk -v a="$bytes" -v b="$zbytes" 'BEGIN{printf "%.3f", a / b}')
    fi
    awk -v n="$name" -v s="$stall" -v w="$sync_ms" -v mb="$writer" -v a="$step_ck" -v b="$step_none" -v z="$ratio" 'BEGIN{
        printf "%-12s %10.2f %12.1f %7.2f%% %10s %12.1f %12.1f %8s\n", n, s, w, 100 * s / w, mb, a, b, z}'
    echo "  ($name: $model, $((bytes / 1000000)) MB per checkpoint on rank 0, $steps steps, a checkpoint every $every steps)"
    rm -rf "$tmp/ck" "$tmp/sync.bin"
done
