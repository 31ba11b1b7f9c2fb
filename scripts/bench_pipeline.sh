#!/usr/bin/env bash
# bench_pipeline.sh: the pipeline against the other layouts on the same cores,
# its schedules against the simulator, and the case a pipeline is for.
#
# Every row gets PP x THREADS cores (PP default 2, THREADS default 1): one
# process of PP x THREADS OpenMP threads; data parallel over PP ranks of
# THREADS threads (ZeRO-1); each schedule (gpipe, 1f1b, interleaved over 2
# chunks, zb1p) on PP stages of THREADS threads. Each trains the same global
# batch of the same model (MODEL_FLAGS, BATCH_FLAGS; default 8 layers of 256
# channels, 4096 tokens a step: 8 micro-batches of 4 x 128) for STEPS steps
# (default 6); step ms is the mean over the steps after the first. A pipeline
# row adds its pipeline part (the step's forwards and backwards, without the
# gradient reductions and AdamW) measured, and simulated (llmc/pp_schedule.h,
# fed the same run's mean F, B and W of each rank) with its error, and each
# rank's idle fraction of that part, measured/simulated; transfers are free in
# the simulation and idle in the measurement.
# Last, a model whose weights, gradients and AdamW state exceed a rank's
# --mem-limit-mb MEM_LIMIT_MB (MEM_MODEL_FLAGS, MEM_BATCH_FLAGS; default 8
# layers of 512 channels, 408 MB of them, against 350 MB): one process is
# refused before allocating (its line is printed) and PP stages (1f1b) under
# the same budget train, with their step and largest peak RSS.
#
#   bash scripts/bench_pipeline.sh                 # PP=2 THREADS=1 STEPS=6 MODEL_FLAGS='--n-layer 8 ...'
#   TINY=1 bash scripts/bench_pipeline.sh          # every row on a tiny model in seconds (a plumbing check)
# mpirun runs with --bind-to none, so every row's threads are placed by the OS alike.
set -euo pipefail
cd "$(dirname "$0")/.."
pp=${PP:-2}
threads=${THREADS:-1}
# each knob's default: full size, or at TINY=1 tiny (the same rows in seconds)
size() { if [ "${TINY:-0}" = 1 ]; then echo "$2"; else echo "$1"; fi; }
steps=${STEPS:-$(size 6 2)}
model=${MODEL_FLAGS:-$(size "--n-layer 8 --n-embd 256 --n-head 4 --vocab-size 257 --max-seq-len 128" \
                            "--n-layer 4 --n-embd 64 --n-head 4 --vocab-size 257 --max-seq-len 32")}
batch=${BATCH_FLAGS:-$(size "--seq-len 128 --batch-size 4 --total-batch-tokens 4096" \
                            "--seq-len 32 --batch-size 2 --total-batch-tokens 512")}
mem_model=${MEM_MODEL_FLAGS:-$(size "--n-layer 8 --n-embd 512 --n-head 8 --vocab-size 257 --max-seq-len 128" \
                                    "--n-layer 4 --n-embd 64 --n-head 4 --vocab-size 257 --max-seq-len 32")}
mem_batch=${MEM_BATCH_FLAGS:-$(size "--seq-len 128 --batch-size 1 --total-batch-tokens 512" \
                                    "--seq-len 32 --batch-size 1 --total-batch-tokens 128")}
mem_limit=${MEM_LIMIT_MB:-$(size 350 3.5)}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_pipeline.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
TRAIN=${TRAIN:-./train_gpt}
TOKENIZE=${TOKENIZE:-./tokenize}
# (built here unless given as programs that exist: TRAIN=build/train_gpt TOKENIZE=build/tokenize)
[ -x "$TRAIN" ] || make --no-print-directory -s "$(basename "$TRAIN")" >/dev/null
[ -x "$TOKENIZE" ] || make --no-print-directory -s tokenize >/dev/null
cat llmc/*.h train_gpt.c >"$tmp/corpus.txt"
"$TOKENIZE" --bytes 1 --out-dir "$tmp" --name bench "$tmp/corpus.txt" >/dev/null
read -r -a model_flags <<<"$model"
read -r -a batch_flags <<<"$batch"
read -r -a mem_flags <<<"$mem_model $mem_batch"
common=(--data-train "$tmp/bench_train_*.bin" --steps "$steps" --peak-tflops 1)
cores=$((pp * threads))
per_rank="$threads thread$([ "$threads" = 1 ] || echo s)"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS)

# from a --log-json: the mean step after the first (the summary's), the largest peak RSS over the ranks
step_ms() { grep -o '"step":{"mean":[0-9.]*' "$1" | cut -d: -f3 | awk '{ printf "%.1f", $1 }'; }
peak_mb() { grep -o '"peak_memory_mb":\[[0-9., ]*' "$1" | cut -d[ -f2 | tr ', ' '\n\n' | sort -g | tail -1; }
# NAME RANKS THREADS FLAGS...: trains (one process when RANKS is 1); the log is $tmp/NAME.log
run() {
    local name=$1 ranks=$2 launch=()
    [ "$ranks" -gt 1 ] && launch=("${MPIRUN[@]}" -np "$ranks")
    OMP_NUM_THREADS=$3 "${launch[@]}" "$TRAIN" "${common[@]}" "${@:4}" --log-json "$tmp/$name.json" \
        >"$tmp/$name.log" 2>&1
}
status=0  # 1 once a run that should train failed
failed() {
    echo "$1: failed: $(grep -a -m1 'error' "$tmp/$1.log" || tail -1 "$tmp/$1.log")"
    status=1
}

echo "every row on $cores cores ($pp ranks x $per_rank, or one process of $cores threads; this machine" \
     "has $(nproc)), $steps steps of the same global batch: $model $batch"
[ "$cores" -gt "$(nproc)" ] && echo "(more threads than cores: the rows compare oversubscribed runs)"
echo "(pipeline: the step's forwards and backwards; error: (simulated - measured) / measured)"
row() { printf '%-36s %5s %9s %12s %12s %7s   %s\n' "$@"; }
row layout cores step_ms pipeline_ms simulated_ms error "idle of each rank: measured/simulated"
if run one 1 "$cores" "${model_flags[@]}" "${batch_flags[@]}"; then
    row "one process, $cores threads" "$cores" "$(step_ms "$tmp/one.json")" - - - -
else failed one; fi
if run dp "$pp" "$threads" "${model_flags[@]}" "${batch_flags[@]}" --zero 1; then
    row "dp $pp ranks x $per_rank, ZeRO-1" "$cores" "$(step_ms "$tmp/dp.json")" - - - -
else failed dp; fi
for schedule in gpipe 1f1b interleaved zb1p; do
    extra=()
    [ $schedule = interleaved ] && extra=(--virtual-stages 2)
    if ! run "$schedule" "$pp" "$threads" "${model_flags[@]}" "${batch_flags[@]}" --pp "$pp" --pp-schedule $schedule \
        "${extra[@]}"; then failed "$schedule"; continue; fi
    line=$(grep -a '^pipeline timing' "$tmp/$schedule.log")
    measured=$(sed 's/.*step \([0-9.]*\) measured.*/\1/' <<<"$line")
    simulated=$(sed 's/.*measured, \([0-9.]*\) simulated.*/\1/' <<<"$line")
    idle=$(grep -a '^  rank [0-9]*: F' "$tmp/$schedule.log" |
        sed 's/^  rank \([0-9]*\):.*idle \([0-9.]*\)% measured, \([0-9.]*\)% simulated/r\1 \2\/\3%/' | paste -sd' ')
    row "pp $pp ranks x $per_rank, $schedule" "$cores" "$(step_ms "$tmp/$schedule.json")" "$measured" "$simulated" \
        "$(awk -v m="$measured" -v s="$simulated" 'BEGIN { printf "%+.1f%%", 100 * (s - m) / m }')" "$idle"
done

echo
echo "a model over one rank's budget (--mem-limit-mb $mem_limit): $mem_model $mem_batch"
if run mem_one 1 "$cores" "${mem_flags[@]}" --mem-limit-mb "$mem_limit"; then
    echo "one process, $cores threads: not refused (step $(step_ms "$tmp/mem_one.json") ms): raise the model or lower MEM_LIMIT_MB"
    status=1
else
    echo "one process, $cores threads: $(grep -a -m1 'error' "$tmp/mem_one.log" || tail -1 "$tmp/mem_one.log")"
fi
if run mem_pp "$pp" "$threads" "${mem_flags[@]}" --mem-limit-mb "$mem_limit" --pp "$pp"; then
    echo "pp $pp ranks x $per_rank, 1f1b, same budget: step $(step_ms "$tmp/mem_pp.json") ms, peak RSS of the largest" \
         "rank $(peak_mb "$tmp/mem_pp.json") MB"
else failed mem_pp; fi
exit $status
