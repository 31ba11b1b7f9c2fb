#!/usr/bin/env bash
# bench_cpu.sh (make bench): trains GPT-2 124M (d12) at batch 4 x 64 tokens on
# this machine's cores with each matmul backend (OpenBLAS, our native kernel)
# and prints, per backend, ms/step (median of the steps after the first),
# tokens/s, achieved model GFLOP/s, and that figure over the OpenBLAS sgemm
# peak that train_gpt measures at start-up in the same run. llm.c's CPU
# reference (train_gpt2.c) is quoted from the issue: ~9.4 s/step on this kind
# of machine, not measured here. STEPS=N changes the number of steps (default 6).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make --no-print-directory -s train_gpt tokenize >/dev/null
# any valid token ids do for timing: the bytes of this repository's sources
cat llmc/*.h train_gpt.c > "$tmp/corpus.txt"
./tokenize --bytes 1 --out-dir "$tmp" --name bench "$tmp/corpus.txt" >/dev/null

printf '%-8s %10s %10s %10s %12s %10s %12s\n' backend ms/step tok/s GFLOP/s sgemm_GF/s "% sgemm" "x llm.c"
for backend in blas native; do
    if ! ./train_gpt --data-train "$tmp/bench_train_*.bin" --model d12 --batch-size 4 --seq-len 64 --steps "$steps" \
        --matmul "$backend" --log-json "$tmp/$backend.jsonl" >"$tmp/$backend.log" 2>&1; then
        echo "$backend: $(tail -1 "$tmp/$backend.log")"; continue
    fi
    peak=$(sed -n 's/.*peak \([0-9.]*\) GFLOP\/s.*/\1/p' "$tmp/$backend.log")
    gflop=$(sed -n 's/.*, \([0-9.]*\) GFLOP\/step.*/\1/p' "$tmp/$backend.log")
    ms=$(tail -n +2 "$tmp/$backend.jsonl" | grep -o '"ms":[0-9.]*' | cut -d: -f2 | sort -g |
        awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
    awk -v b="$backend" -v ms="$ms" -v gf="$gflop" -v peak="$peak" 'BEGIN{
        achieved = gf / (ms / 1000); printf "%-8s %10.1f %10.1f %10.1f %12.1f %9.1f%% %12.2f\n",
        b, ms, 256 / (ms / 1000), achieved, peak, 100 * achieved / peak, 9400 / ms }'
done
