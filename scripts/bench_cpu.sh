#!/usr/bin/env bash
# bench_cpu.sh (make bench): the CPU trainer at small sizes, then with each
# matmul backend side by side, OpenBLAS and our native kernel
# (llmc/cpu_matmul.h), on this machine's cores:
#   0. two small models, where the step is not only matmuls: L 4, C 128, NH 4,
#      V 65 at batch 12 x 64 on 2 threads, and L 2, C 64, NH 4 with GPT-2's
#      vocabulary (50257) at 8 x 32 (the size of most tests) on the cores
#      OMP_NUM_THREADS gives; per run ms/step (median of the steps after the
#      first), tokens/s, model GFLOP/s and that over the sgemm peak (the best
#      of every run's start-up probes, themselves the best of several: a step
#      never reads above 100%), and where the threads sat (rt: their cache-line
#      round trip before and after the run, build/dev/perf/thread_round_trip).
#      TRAIN_OLD=PATH (another build of train_gpt,
#      e.g. main's) runs alternately with this build's, ROUNDS times, and each
#      case ends with new's speed-up over it. MATMUL=tuned (or another --matmul
#      value) sets this build's backend there (default auto; TRAIN_OLD runs
#      with its own default). CASES=small stops after this part;
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
# (default 6; the small model runs 4x as many). OpenBLAS 0.3.21 does not
# recognise every CPU (it picks its SSE3 kernel on some AVX-512 Xeons):
# OPENBLAS_CORETYPE=SkylakeX (or Haswell) names the kernel to use.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
steps=${STEPS:-6}
rounds=${ROUNDS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for prog in train_gpt tokenize dev/perf/bench_matmul_cpu dev/perf/thread_round_trip; do
    [ -x "$BUILD/$prog" ] || { echo "error: $BUILD/$prog is missing: run make bench" >&2; exit 2; }
done
# any valid token ids do for timing: the bytes of this repository's sources
cat llmc/*.h train_gpt.c > "$tmp/corpus.txt"
"$BUILD/tokenize" --bytes 1 --out-dir "$tmp" --name bench "$tmp/corpus.txt" >/dev/null

# measure LABEL DATA COMMAND...: one training run of COMMAND (its flags name --batch-size and --seq-len)
# on the shards DATA; sets peak, gflop and kernel (from its compute: line), tokens (a step's) and ms
# (the median step after the first); on failure prints LABEL and the log's last line and returns 1
measure() {
    local label=$1 data=$2
    shift 2
    local log=$tmp/run.log line
    if ! "$@" --data-train "$data" --log-json "$tmp/run.jsonl" >"$log" 2>&1; then
        echo "$label: $(tail -1 "$log")"; return 1
    fi
    line=$(grep -m1 '^compute:' "$log")
    peak=$(sed -n 's/.*peak \([0-9.]*\) GFLOP\/s.*/\1/p' <<<"$line")
    gflop=$(sed -n 's/.*, \([0-9.]*\) GFLOP\/step.*/\1/p' <<<"$line")
    kernel=$(sed -n 's/.*matmul \(.*\), peak.*/\1/p' <<<"$line")
    tokens=$(( $(sed -n 's/.*--batch-size \([0-9]*\).*/\1/p' <<<"$*") * $(sed -n 's/.*--seq-len \([0-9]*\).*/\1/p' <<<"$*") ))
    ms=$(grep -v '^{"step":1,\|^{"run"' "$tmp/run.jsonl" | grep -o '"ms":[0-9.]*' | cut -d: -f2 | median)
}
# small_run NAME BINARY THREADS ARGS...: one run of a small model; prints its row (achieved GFLOP/s, the
# threads' round trip before and after it; the share of the peak is added at the end) and appends
# "NAME BINARY ms gflop peak tokens" to $tmp/small
small_run() {
    local name=$1 bin=$2 threads=$3 rt0 rt1
    shift 3
    [ "$bin" = "$BUILD/train_gpt" ] && set -- "$@" --matmul "${MATMUL:-auto}"
    rt0=$(OMP_NUM_THREADS="$threads" "$BUILD/dev/perf/thread_round_trip")
    measure "$name $bin" "$tmp/${name}_train_*.bin" env OMP_NUM_THREADS="$threads" "$bin" "$@" || return 0
    rt1=$(OMP_NUM_THREADS="$threads" "$BUILD/dev/perf/thread_round_trip")
    echo "$name $bin $ms $gflop $peak $tokens" >>"$tmp/small"
    awk -v n="$name" -v b="$bin" -v th="$threads" -v ms="$ms" -v gf="$gflop" -v tok="$tokens" -v rt="$rt0/$rt1" 'BEGIN{
        printf "%-5s %-32s %3d %9.2f %9.0f %8.1f %9s\n", n, b, th, ms, tok / (ms / 1000), gf / (ms / 1000), rt }'
}
median() { sort -g | awk '{a[NR]=$1} END{if (NR) print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# token shards for the small models: ids below 65 (the bytes mod 65), and byte tokens (GPT-2's vocabulary)
python3 -c 'import struct, sys
data = open(sys.argv[1], "rb").read()[:300000]
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(data), *[0] * 253))
    f.write(struct.pack("<%dH" % len(data), *[b % 65 for b in data]))' "$tmp/corpus.txt" "$tmp/v65_train_000001.bin"
cp "$tmp/bench_train_000001.bin" "$tmp/gpt2v_train_000001.bin"
small_v65=(--n-layer 4 --n-embd 128 --n-head 4 --vocab-size 65 --max-seq-len 64 --batch-size 12 --seq-len 64 --steps 30)
small_gpt2v=(--n-layer 2 --n-embd 64 --n-head 4 --vocab-size 50257 --max-seq-len 32 --batch-size 8 --seq-len 32
             --steps 20)
bins=("$BUILD/train_gpt")
[ -n "${TRAIN_OLD:-}" ] && bins=("$TRAIN_OLD" "$BUILD/train_gpt")
echo "== small models: v65 = L4 C128 NH4 V65 at 12 x 64 on 2 threads; gpt2v = L2 C64 NH4 V50257 at 8 x 32" \
    "($rounds rounds, binaries alternating)"
echo "(rt: threads 0 and 1's cache-line round trip in ns just before / after the run, dev/perf/thread_round_trip.c:"
echo " about 50 when their cores share an L3, hundreds when they do not, which slows these steps by a quarter or more)"
printf '%-5s %-32s %3s %9s %9s %8s %9s\n' case binary thr ms/step tok/s GFLOP/s rt
for r in $(seq "$rounds"); do
    for bin in "${bins[@]}"; do small_run v65 "$bin" 2 "${small_v65[@]}"; done
    for bin in "${bins[@]}"; do small_run gpt2v "$bin" "${OMP_NUM_THREADS:-$(nproc)}" "${small_gpt2v[@]}"; done
done
# the peak: the best of every run's probes (the peak with 2 threads for v65, the default threads' for gpt2v)
for name in v65 gpt2v; do
    peak=$(awk -v n="$name" '$1 == n && $5 > p {p = $5} END{print p + 0}' "$tmp/small")
    for bin in "${bins[@]}"; do
        ms=$(awk -v n="$name" -v b="$bin" '$1 == n && $2 == b {print $3}' "$tmp/small" | median)
        [ -n "$ms" ] || continue
        awk -v n="$name" -v b="$bin" -v ms="$ms" -v peak="$peak" -v gf="$(awk -v n="$name" '$1 == n {print $4; exit}' "$tmp/small")" \
            -v tok="$(awk -v n="$name" '$1 == n {print $6; exit}' "$tmp/small")" 'BEGIN{
            printf "%s %s: median step %.2f ms, %.0f tokens/s, %.1f GFLOP/s = %.1f%% of the sgemm peak %.1f GFLOP/s\n",
                n, b, ms, tok / (ms / 1000), gf / (ms / 1000), 100 * gf / (ms / 1000) / peak, peak }'
    done
    if [ ${#bins[@]} -eq 2 ]; then
        old=$(awk -v n="$name" -v b="${bins[0]}" '$1 == n && $2 == b {print $3}' "$tmp/small" | median)
        new=$(awk -v n="$name" -v b="${bins[1]}" '$1 == n && $2 == b {print $3}' "$tmp/small" | median)
        [ -n "$old" ] && [ -n "$new" ] && awk -v n="$name" -v o="$old" -v w="$new" 'BEGIN{
            printf "%s: new at %.2fx the speed of old (median step %.2f vs %.2f ms)\n", n, o / w, w, o }'
    fi
done
[ "${CASES:-all}" = small ] && exit 0
echo

d12=(--model d12 --batch-size 4 --seq-len 64 --steps "$steps")
small=(--n-layer 4 --n-embd 256 --n-head 4 --vocab-size 2048 --max-seq-len 256 --batch-size 8 --seq-len 256
       --steps $((4 * steps)))

# run NAME BACKEND ARGS...: one training run; prints its row and appends "NAME BACKEND ms" to $tmp/ms
run() {
    local name=$1 backend=$2
    shift 2
    measure "$name $backend" "$tmp/bench_train_*.bin" "$BUILD/train_gpt" "$@" --matmul "$backend" || return 0
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
