#!/usr/bin/env bash
# bench_cpu.sh (make bench): the CPU trainer with each matmul backend side by
# side, OpenBLAS and our native kernel (llmc/cpu_matmul.h), on this machine's
# cores:
#   1. train_gpt on GPT-2 124M (d12) at batch 4 x 64 tokens and on make run's
#      small model (4 layers, 256 channels, 2048-token vocabulary) at batch
#      8 x 256, the two backends alternating ROUNDS times (default 2): per run
#      ms/step (median of the steps after the first), tokens/s, achieved model
#      GFLOP/s, that over the OpenBLAS sgemm peak train_gpt measures at start-up
#      in the same run, and native's speed as a share of OpenBLAS's;
#   2. build/dev/perf/bench_matmul_cpu: the two sgemms alone at both
#      configurations' matmul shapes, interleaved.
# The first lines name the native kernel (its vector width and register tile:
# the build's instruction set, make bench CPU_ISA=avx2 for a narrower one) and
# the kernel OpenBLAS picked for this CPU (OPENBLAS_CORETYPE=Haswell, SkylakeX
# ... overrides it). llm.c's CPU reference (train_gpt2.c, ~9.4 s/step for d12
# here) is quoted from the issue, not measured. STEPS=N sets the d12 steps
# (default 6; the small model runs 4x as many).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
steps=${STEPS:-6}
rounds=${ROUNDS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for prog in train_gpt tokenize dev/perf/bench_matmul_cpu; do
    [ -x "$BUILD/$prog" ] || { echo "error: $BUILD/$prog is missing: run make bench" >&2; exit 2; }
done
# any valid token ids do for timing: the bytes of this repository's sources
cat llmc/*.h train_gpt.c > "$tmp/corpus.txt"
"$BUILD/tokenize" --bytes 1 --out-dir "$tmp" --name bench "$tmp/corpus.txt" >/dev/null

d12=(--model d12 --batch-size 4 --seq-len 64 --steps "$steps")
small=(--n-layer 4 --n-embd 256 --n-head 4 --vocab-size 2048 --max-seq-len 256 --batch-size 8 --seq-len 256
       --steps $((4 * steps)))

# run NAME BACKEND ARGS...: one training run; prints its row and appends "NAME BACKEND ms" to $tmp/ms
run() {
    local name=$1 backend=$2
    shift 2
    local log=$tmp/run.log
    if ! "$BUILD/train_gpt" --data-train "$tmp/bench_train_*.bin" "$@" --matmul "$backend" --log-json "$tmp/run.jsonl" \
        >"$log" 2>&1; then
        echo "$name $backend: $(tail -1 "$log")"; return
    fi
    local line peak gflop kernel tokens ms
    line=$(grep -m1 '^compute:' "$log")
    peak=$(sed -n 's/.*peak \([0-9.]*\) GFLOP\/s.*/\1/p' <<<"$line")
    gflop=$(sed -n 's/.*, \([0-9.]*\) GFLOP\/step.*/\1/p' <<<"$line")
    kernel=$(sed -n 's/.*matmul \(.*\), peak.*/\1/p' <<<"$line")
    tokens=$(( $(sed -n 's/.*--batch-size \([0-9]*\).*/\1/p' <<<"$*") * $(sed -n 's/.*--seq-len \([0-9]*\).*/\1/p' <<<"$*") ))
    ms=$(grep -v '^{"step":1,\|^{"run"' "$tmp/run.jsonl" | grep -o '"ms":[0-9.]*' | cut -d: -f2 | sort -g |
        awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
    echo "$name $backend $ms" >>"$tmp/ms"
    awk -v n="$name" -v k="$kernel" -v ms="$ms" -v gf="$gflop" -v peak="$peak" -v tok="$tokens" 'BEGIN{
        achieved = gf / (ms / 1000); printf "%-6s %-24s %9.1f %9.0f %8.1f %9.1f %7.1f%%\n",
        n, k, ms, tok / (ms / 1000), achieved, peak, 100 * achieved / peak }'
}

echo "== train_gpt, each backend in turn ($rounds rounds; $(nproc) cores, OMP_NUM_THREADS=${OMP_NUM_THREADS:-all})"
printf '%-6s %-24s %9s %9s %8s %9s %8s\n' model "matmul backend" ms/step tok/s GFLOP/s sgemm_GF "% sgemm"
for r in $(seq "$rounds"); do
    for backend in blas native; do run d12 "$backend" "${d12[@]}"; done
    for backend in blas native; do run small "$backend" "${small[@]}"; done
done
# native's speed as a share of OpenBLAS's: the ratio of the median step times over all rounds
median() { sort -g | awk '{a[NR]=$1} END{if (NR) print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
for model in d12 small; do
    blas=$(awk -v m="$model" '$1 == m && $2 == "blas" {print $3}' "$tmp/ms" | median)
    native=$(awk -v m="$model" '$1 == m && $2 == "native" {print $3}' "$tmp/ms" | median)
    [ -n "$blas" ] && [ -n "$native" ] || continue
    awk -v m="$model" -v b="$blas" -v n="$native" 'BEGIN{
        printf "%s: native at %.0f%% of openblas'\''s speed (median step %.1f vs %.1f ms)%s\n", m, 100 * b / n, n, b,
            m == "d12" ? sprintf("; llm.c'\''s 9.4 s/step (quoted) is %.1fx native'\''s", 9400 / n) : "" }'
done

echo
echo "== sgemm alone at the trainer's shapes (build/dev/perf/bench_matmul_cpu)"
"$BUILD/dev/perf/bench_matmul_cpu" d12 4 64 3
echo
"$BUILD/dev/perf/bench_matmul_cpu" small 8 256 3
