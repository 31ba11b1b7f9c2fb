#!/usr/bin/env bash
# test_train.sh: the CPU trainer end to end: --help, every kind of bad flag or
# file (one line on stderr, exit status 2), a short training run whose loss
# falls, the JSON log's keys and step-time breakdown (tests/step_times.py), determinism, gradient accumulation against a
# bigger micro-batch, and model files saved by one run and loaded by the next.
# The corpus is this repository's own source (no ../shared needed).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN="$BUILD/train_gpt"
TOKENIZE="$BUILD/tokenize"

tokenize_sources "$tmp/data" llmc/*.h train_gpt.c
TINY=(--data-train "$tmp/data/src_train_*.bin" --data-val "$tmp/data/src_val_*.bin" --n-layer 2 --n-embd 64 --n-head 4
      --vocab-size 257 --max-seq-len 64 --seq-len 32 --batch-size 4 --peak-tflops 0.1)

# a JSON log's records without the run record, timings, elapsed time or the summary
strip() { grep -v '^{"summary"\|^{"run"' "$1" | sed 's/,"ms".*//; s/,"elapsed_s".*//'; }

# --- help and bad input ---
"$TRAIN" --help >"$tmp/help" 2>&1; rc=$?
missing=$(for f in data-train data-val model batch-size seq-len total-batch-tokens steps lr min-lr-frac warmup-steps \
    lr-schedule weight-decay grad-clip beta1 beta2 seed eval-every eval-batches sample-every log-json out-dir; do
    grep -q -- "--$f " "$tmp/help" || echo "$f"; done)
check "--help exits 0 and lists every flag" '[ $rc -eq 0 ] && [ -z "$missing" ]' "rc=$rc missing: $missing"

sections=$(grep -E '^[A-Za-z].*:$' "$tmp/help" | tr '\n' ',')
check "--help groups the flags by section and marks the GPU-only ones" \
    '[ "$sections" = "model:,data and batch:,schedule:,optimizer:,evaluation and sampling:,logging:,checkpoints and model files:,compute and memory:,GPU only (train_gpt.cu: the CPU trainer accepts and ignores these):,parallelism:," ]' \
    "sections: $sections"

expect_usage_error "an unknown flag" "--bogus" "$TRAIN" "${TINY[@]}" --bogus 1
expect_usage_error "a misspelt flag, with the one meant" "unknown flag '--batch_size' (did you mean --batch-size?)" \
    "$TRAIN" "${TINY[@]}" --batch_size 4
expect_usage_error "a short flag, with the long ones it may mean" \
    "unknown flag '-b': flags are long, --name VALUE (did you mean --batch-size, --beta1, --beta2 or --bucket-mb?)" \
    "$TRAIN" "${TINY[@]}" -b 4
expect_usage_error "--tp 2 on one process, with how to launch it" "launch it with mpirun -np 2" \
    "$TRAIN" "${TINY[@]}" --tp 2
"$TRAIN" "${TINY[@]}" --steps 2 --shuffle --eval-every 2 --eval-batches 1 >"$tmp/bare.log" 2>&1; rc=$?
check "a bare boolean flag means 1 and the next flag is read as a flag" \
    '[ $rc -eq 0 ] && grep -q "^step     2 | val loss" "$tmp/bare.log"' "rc=$rc: $(tail -2 "$tmp/bare.log")"
expect_usage_error "a non-integer value" "--steps" "$TRAIN" "${TINY[@]}" --steps ten
expect_usage_error "an out-of-range value" "--batch-size" "$TRAIN" "${TINY[@]}" --batch-size 0
expect_usage_error "a flag without its value" "--lr" "$TRAIN" "${TINY[@]}" --lr
expect_usage_error "a bad schedule name" "--lr-schedule" "$TRAIN" "${TINY[@]}" --lr-schedule exp
expect_usage_error "a profile range past the run" "--profile-steps '3:9'" "$TRAIN" "${TINY[@]}" --steps 5 \
    --profile-steps 3:9
expect_usage_error "a missing --data-train" "--data-train" "$TRAIN" --steps 1
expect_usage_error "seq-len above max-seq-len" "max-seq-len" "$TRAIN" "${TINY[@]}" --seq-len 65
expect_usage_error "a total batch that is not a multiple of B*T" "total-batch-tokens" "$TRAIN" "${TINY[@]}" --total-batch-tokens 200
expect_usage_error "n-embd not divisible by n-head" "n-head" "$TRAIN" "${TINY[@]}" --n-head 5
expect_usage_error "a missing model file" "nope.bin" "$TRAIN" "${TINY[@]}" --model "$tmp/nope.bin"
expect_usage_error "an empty data glob" "$tmp/none" "$TRAIN" "${TINY[@]}" --data-train "$tmp/none*.bin"
expect_usage_error "--eval-every without --data-val" "data-val" "$TRAIN" --data-train "$tmp/data/src_train_*.bin" --n-layer 2 \
    --n-embd 64 --n-head 4 --vocab-size 257 --max-seq-len 64 --seq-len 32 --eval-every 5
head -c 3000 "$tmp/data/src_train_000001.bin" > "$tmp/trunc_train.bin"
expect_usage_error "a truncated data shard" "trunc_train.bin" "$TRAIN" "${TINY[@]}" --data-train "$tmp/trunc_train.bin"
expect_usage_error "tokens outside the vocabulary" "vocab size 100" "$TRAIN" "${TINY[@]}" --vocab-size 100

# --- a short training run ---
"$TRAIN" "${TINY[@]}" --steps 40 --lr 3e-3 --warmup-steps 5 --eval-every 20 --eval-batches 4 \
    --log-json "$tmp/run.jsonl" --save-model "$tmp/model.bin" >"$tmp/run.log" 2>&1
rc=$?
check "training run exits 0" '[ $rc -eq 0 ]' "rc=$rc: $(tail -3 "$tmp/run.log")"
first=$(grep '"loss"' "$tmp/run.jsonl" | head -1 | sed 's/.*"loss":\([0-9.]*\).*/\1/')
last=$(grep '"loss"' "$tmp/run.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.]*\).*/\1/')
check "training loss falls by > 1.5 nats in 40 steps ($first -> $last)" \
    "awk -v a=$first -v b=$last 'BEGIN{exit !(a - b > 1.5)}'"
keys_ok=$(grep '"loss"' "$tmp/run.jsonl" | grep -c \
    '^{"step":[0-9]*,"loss":[-0-9.e+]*,"lr":[-0-9.e+]*,"grad_norm":[-0-9.e+]*,"tokens":128,"ms":[-0-9.e+]*,"elapsed_s":[0-9.]*,"tokens_seen":[0-9]*,"tok_per_s":[-0-9.e+]*,"mfu":[-0-9.e+]*,"time":{"data":[0-9.]*,"fwd":[0-9.]*,"bwd":[0-9.]*,"comm":[0-9.]*,"bubble":[0-9.]*,"opt":[0-9.]*,"ckpt":[0-9.]*}}$')
check "JSON log has one well-formed step record per step" '[ "$keys_ok" -eq 40 ]' "$keys_ok of 40 records match"
# where each step's time goes (llmc/step_time.h): the parts add up, the summary at the end
python3 tests/step_times.py "$tmp/run.jsonl" cpu_run --steps 40 --part fwd --part bwd --part opt
check "the run ends with the summary table, rank 0's, peak memory once" \
    "grep -q \"^summary: rank 0's ms a step over steps 2-40 (step 1 is warm-up)\" '$tmp/run.log' && grep -q '^  step ' '$tmp/run.log' &&
     [ \$(grep -c 'peak memory' '$tmp/run.log') -eq 1 ]"
nval=$(grep -c '^{"step":[0-9]*,"val_loss":[0-9.]*,"elapsed_s":[0-9.]*,"tokens_seen":[0-9]*}$' "$tmp/run.jsonl")
check "JSON log has val_loss records at steps 0, 20, 40" '[ "$nval" -eq 3 ]' "$nval val records"

# --- the JSON log: a first record with every setting, a record for every step whatever --log-every says,
# steps counted as steps done, elapsed seconds and tokens seen; step lines with elapsed time and ETA ---
"$TRAIN" "${TINY[@]}" --steps 4 --log-every 2 --eval-every 2 --eval-batches 1 --log-json "$tmp/every.jsonl" \
    --tensorboard "$tmp/tb" >"$tmp/every.log" 2>&1
steps=$(grep -o '^{"step":[0-9]*,"loss"' "$tmp/every.jsonl" | grep -o '[0-9]*' | tr '\n' ' ')
check "JSON log: a record per step (steps done 1..4) with --log-every 2, and a step line every 2 steps" \
    '[ "$steps" = "1 2 3 4 " ] && [ "$(grep -c "^step  *[0-9]*/4 " "$tmp/every.log")" -eq 2 ]' "steps: $steps"
check "JSON log: every record has elapsed_s and tokens_seen (steps done x 128)" \
    '[ "$(grep -c "\"elapsed_s\":[0-9.]*,\"tokens_seen\":" "$tmp/every.jsonl")" -eq 7 ] &&
     grep -q "^{\"step\":3,\"loss\".*\"tokens_seen\":384," "$tmp/every.jsonl" &&
     grep -q "^{\"step\":2,\"val_loss\":[0-9.]*,\"elapsed_s\":[0-9.]*,\"tokens_seen\":256}" "$tmp/every.jsonl"'
check "JSON log: the first record holds the program, version, layout and every setting" \
    'head -1 "$tmp/every.jsonl" | grep -q "^{\"run\":{\"program\":\"train_gpt\",\"version\":\"[^\"]*\",\"start_step\":0,\"settings\":{\"model\":\"d12\",\"n-layer\":2,.*\"log-every\":2,.*},\"layout\":{\"ranks\":1,\"dp\":1,\"tp\":1,\"pp\":1,\"zero\":0}"' \
    "$(head -c 300 "$tmp/every.jsonl")"
check "step lines show the elapsed time and an ETA; the model line its parameters" \
    'grep -q "^step     2/4 | .* | [0-9.]*s, ETA [0-9.]*s$" "$tmp/every.log" && grep -q "^step     4/4 | .* | [0-9.]*s$" "$tmp/every.log" &&
     grep -q "^model: .* | 0.13M parameters$" "$tmp/every.log"' "$(grep -m3 "^step\|^model" "$tmp/every.log")"

# --- scripts/plot_log.py: two runs' logs on one PNG; a log that is not one: one line, exit 2 ---
if python3 -c 'import matplotlib' 2>/dev/null; then
    python3 scripts/plot_log.py "$tmp/run.jsonl" "$tmp/every.jsonl" -o "$tmp/runs.png" >"$tmp/plot.log" 2>&1; rc=$?
    check "plot_log.py draws two runs to a PNG" \
        '[ $rc -eq 0 ] && [ "$(head -c 8 "$tmp/runs.png" | od -A n -t x1 | tr -d " ")" = 89504e470d0a1a0a ]' \
        "rc=$rc: $(tail -2 "$tmp/plot.log")"
else
    echo "SKIP: plot_log.py draws two runs to a PNG (no matplotlib)"
fi
echo 'not json' >"$tmp/bad.jsonl"
expect_usage_error "plot_log.py on a file that is not a JSON log" "bad.jsonl:1: not a JSON record" \
    python3 scripts/plot_log.py "$tmp/bad.jsonl" -o "$tmp/bad.png"

# --- MFU against the measured CPU peak (the best of sgemm probes of several sizes): named on the compute line,
# every step's within (0, 100%] ---
"$TRAIN" "${TINY[@]}" --peak-tflops 0 --steps 3 --log-json "$tmp/mfu.jsonl" >"$tmp/mfu.log" 2>&1
mfus=$(grep '"loss"' "$tmp/mfu.jsonl" | grep -o '"mfu":[-0-9.e+]*' | cut -d: -f2 | tr '\n' ' ')
check "MFU against the measured peak (the best of sgemm probes) is within (0, 100%] ($mfus)" \
    'grep -q "^compute: .*, peak [0-9.]* GFLOP/s (measured: the best of [a-z ]* sgemm probes)" "$tmp/mfu.log" &&
     [ "$(echo $mfus | wc -w)" -eq 3 ] && awk "BEGIN { split(\"$mfus\", m, \" \"); for (i in m) if (!(m[i] > 0 && m[i] <= 1)) exit 1 }"' \
    "$(grep "^compute" "$tmp/mfu.log")"

# --- --matmul auto: OpenBLAS unless the kernel it picked for this CPU is narrower than the native one (the SSE3
# "Prescott" it falls back to on CPUs it does not know) or built for the other vendor's cores and no wider;
# OPENBLAS_CORETYPE stands in for the kernel OpenBLAS picks (its AVX2 kernels: Haswell, Intel's; Zen, AMD's) ---
if grep -q -- '-DLLMC_MATMUL_AUTO_BLAS' "$BUILD/flags.stamp" 2>/dev/null; then
    echo "SKIP: --matmul auto's choice (a sanitizer build: auto is OpenBLAS there, the Makefile says why)"
elif grep -q -- '-DLLMC_BLAS' "$BUILD/flags.stamp" 2>/dev/null && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    if grep -q '^vendor_id.*AuthenticAMD' /proc/cpuinfo; then own=Zen other=Haswell; else own=Haswell other=Zen; fi
    OPENBLAS_CORETYPE=Prescott "$TRAIN" "${TINY[@]}" --steps 1 >"$tmp/mm_sse.log" 2>&1
    OPENBLAS_CORETYPE=$own "$TRAIN" "${TINY[@]}" --steps 1 >"$tmp/mm_avx2.log" 2>&1
    OPENBLAS_CORETYPE=$other "$TRAIN" "${TINY[@]}" --steps 1 >"$tmp/mm_other.log" 2>&1
    check "--matmul auto takes the native kernel over OpenBLAS's SSE3 one and over its AVX2 one for the other vendor's cores ($other), and OpenBLAS's AVX2 one for this CPU's ($own) over native" \
        'grep -q "^compute: .*matmul native (" "$tmp/mm_sse.log" &&
         grep -q "^compute: .*matmul native (" "$tmp/mm_other.log" &&
         grep -q "^compute: .*matmul openblas ($own)" "$tmp/mm_avx2.log"' \
        "$(grep -h "^compute" "$tmp/mm_sse.log" "$tmp/mm_avx2.log" "$tmp/mm_other.log" | tr '\n' ' ')"
    # the peak is the machine's: the best of both backends' probes whichever backend the run takes (against
    # the SSE3 kernel's probes alone MFU read 105-116% at 4 x 256; against the AVX-512 kernel's, 5-10% high)
    OPENBLAS_CORETYPE=Prescott "$TRAIN" "${TINY[@]}" --peak-tflops 0 --steps 2 --matmul blas >"$tmp/mm_blas_sse.log" 2>&1
    OPENBLAS_CORETYPE=Haswell "$TRAIN" "${TINY[@]}" --peak-tflops 0 --steps 1 --matmul blas >"$tmp/mm_blas_avx2.log" 2>&1
    "$TRAIN" "${TINY[@]}" --peak-tflops 0 --steps 1 --matmul native >"$tmp/mm_native_peak.log" 2>&1
    check "the peak is the best of both backends' probes under --matmul blas (SSE3 and AVX2 kernels) and native; MFU within (0, 100%]" \
        'grep -q "^compute: .*matmul openblas (Prescott), peak [0-9.]* GFLOP/s (measured: the best of native and openblas sgemm probes)" "$tmp/mm_blas_sse.log" &&
         grep -q "^compute: .*matmul openblas (Haswell), peak [0-9.]* GFLOP/s (measured: the best of native and openblas sgemm probes)" "$tmp/mm_blas_avx2.log" &&
         grep -q "^compute: .*matmul native (.*), peak [0-9.]* GFLOP/s (measured: the best of native and openblas sgemm probes)" "$tmp/mm_native_peak.log" &&
         grep "^step .*MFU" "$tmp/mm_blas_sse.log" | sed "s/.*MFU \([0-9.]*\)%.*/\1/" | awk "{ if (!(\$1 > 0 && \$1 <= 100)) bad = 1 } END { exit bad || NR != 2 }"' \
        "$(grep -h "^compute\|^step " "$tmp/mm_blas_sse.log" "$tmp/mm_blas_avx2.log" "$tmp/mm_native_peak.log" | tr '\n' ' ')"
else
    echo "SKIP: --matmul auto's choice and --matmul blas's peak (a build without OpenBLAS, or a CPU without AVX2)"
fi

# --- --matmul tuned: each product shape of the layers is timed on both backends at its first use and runs on
# the faster from then on; the end line names the 15 shapes of this model (forward, input and weight gradient
# of the 4 linear layers and the classifier), and the losses follow a native run's (the backends round apart) ---
if grep -q -- '-DLLMC_BLAS' "$BUILD/flags.stamp" 2>/dev/null; then
    "$TRAIN" "${TINY[@]}" --steps 3 --matmul tuned --log-json "$tmp/tuned.jsonl" >"$tmp/tuned.log" 2>&1
    "$TRAIN" "${TINY[@]}" --steps 3 --matmul native --log-json "$tmp/native.jsonl" >"$tmp/native.log" 2>&1
    check "--matmul tuned picks a backend for each of the model's 15 product shapes, once" \
        'grep -q "^compute: .*matmul tuned per shape: native (.*) or openblas (.*), else " "$tmp/tuned.log" &&
         [ "$(grep -c "^matmul tuned per shape (15 shapes;" "$tmp/tuned.log")" = 1 ] &&
         [ "$(grep "^matmul tuned per shape" "$tmp/tuned.log" | grep -o " [0-9]*x[0-9]*x[0-9]* [NT][NT] " | sort -u | wc -l)" = 15 ]' \
        "$(grep "^matmul tuned\|^compute" "$tmp/tuned.log" || tail -2 "$tmp/tuned.log")"
    "$CMP" --compare-logs "$tmp/native.jsonl" "$tmp/tuned.jsonl" 1e-5 "--matmul tuned's losses follow native's"
else
    echo "SKIP: --matmul tuned (a build without OpenBLAS: native is the only backend)"
fi

# --- --tensorboard DIR: an event file whose records (framing, CRCs) read back to the JSON log's values; and
# TensorBoard's own reader reads the same, where the tensorboard package is installed ---
python3 tests/tb_events.py "$tmp/tb" >"$tmp/tb.txt" 2>&1
# the losses against the JSON log's, to float32's precision (the event file's scalars are float32: at 6 digits a
# value near a rounding boundary prints differently)
tb_losses=$(python3 -c '
import json, sys
want = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r: want[("train/loss", r["step"])] = r["loss"]
    if "val_loss" in r: want[("val/loss", r["step"])] = r["val_loss"]
got = {}
for line in open(sys.argv[2]):
    tag, step, value = line.split()
    if tag in ("train/loss", "val/loss"): got[(tag, int(step))] = float(value)
bad = [k for k in want if k not in got or abs(got[k] - want[k]) > 1e-5 * abs(want[k])] + [k for k in got if k not in want]
print(len(want), " ".join("%s@%d" % k for k in sorted(bad)))' "$tmp/every.jsonl" "$tmp/tb.txt")
check "--tensorboard writes an event file of the run's losses (read back: $(wc -l <"$tmp/tb.txt") scalars)" \
    '[ "$tb_losses" = "7 " ] && [ "$(grep -c "^train/lr \|^train/grad_norm \|^perf/tokens_per_s " "$tmp/tb.txt")" -eq 12 ]' \
    "losses in the JSON log, and those that differ: $tb_losses"
python3 tests/tb_events.py "$tmp/tb" --package >"$tmp/tb_pkg.txt" 2>"$tmp/tb_pkg.err"; rc=$?
if [ $rc -eq 3 ]; then
    echo "SKIP: TensorBoard's own reader on the event file (the tensorboard Python package is not installed)"
else
    check "TensorBoard's own reader reads the event file's scalars" '[ $rc -eq 0 ] && cmp -s "$tmp/tb.txt" "$tmp/tb_pkg.txt"' \
        "rc=$rc: $(tail -2 "$tmp/tb_pkg.err")"
fi

# --- --config FILE: the flags as TOML settings; the command line overrides them; the run record's settings,
# written back as a file, repeat the run ---
cat >"$tmp/run.toml" <<EOF
# a torchtitan-style job file
[model]
n_layer = 2
n-embd = 64      # channels
n_head = 4
vocab_size = 257
max_seq_len = 64
[training]
data_train = "$tmp/data/src_train_*.bin"
seq_len = 32
batch_size = 4
steps = 9
lr_schedule = 'constant'
shuffle = true
EOF
"$TRAIN" --config "$tmp/run.toml" --steps 3 --peak-tflops 0.1 --log-json "$tmp/cfg.jsonl" >"$tmp/cfg.log" 2>&1; rc=$?
check "--config FILE sets the flags and the command line overrides them" \
    '[ $rc -eq 0 ] && grep -q "^step     3/3 | .* | lr 3.000e-04 " "$tmp/cfg.log" &&
     head -1 "$tmp/cfg.jsonl" | grep -q "\"steps\":3,.*\"lr-schedule\":\"constant\",.*\"shuffle\":1,"' \
    "rc=$rc: $(tail -2 "$tmp/cfg.log")"
head -1 "$tmp/cfg.jsonl" | python3 -c '
import json, sys
for k, v in json.loads(sys.stdin.read())["run"]["settings"].items():
    if k != "log-json": print(k, "=", json.dumps(v))' >"$tmp/again.toml"
"$TRAIN" --config "$tmp/again.toml" --log-json "$tmp/again.jsonl" >/dev/null 2>&1
check "the run record's settings as a --config file repeat the run" \
    '[ -s "$tmp/again.jsonl" ] && cmp -s <(strip "$tmp/cfg.jsonl") <(strip "$tmp/again.jsonl")'
printf 'steps = 3\nlr = fast\n' >"$tmp/bad.toml"
expect_usage_error "a bad value in a --config file, by file:line" "bad.toml:2: --lr: 'fast' is not a number" \
    "$TRAIN" "${TINY[@]}" --config "$tmp/bad.toml"
printf '[model]\nn_layers = 3\n' >"$tmp/bad2.toml"
expect_usage_error "an unknown key in a --config file, with the one meant" \
    "bad2.toml:2: unknown setting 'n_layers' (did you mean --n-layer?)" "$TRAIN" "${TINY[@]}" --config "$tmp/bad2.toml"
printf 'data_train = "x\n' >"$tmp/bad3.toml"
expect_usage_error "an unclosed quote in a --config file" "bad3.toml:1: data-train: the value's \" is not closed" \
    "$TRAIN" "${TINY[@]}" --config "$tmp/bad3.toml"
expect_usage_error "a missing --config file" "--config: cannot read" "$TRAIN" --config "$tmp/none.toml"

# --- --profile-steps 2:3: perf's control FIFO (scripts/profile.sh's) gets "enable" before step 2, "disable"
# after step 3; a reader here stands in for perf (it reads until "disable": both words come in one read when the
# second write finds the first read's FIFO still open) ---
mkfifo "$tmp/perf.ctl"
: >"$tmp/perf.got"
for _ in 1 2; do timeout 60 cat "$tmp/perf.ctl" >>"$tmp/perf.got"; grep -q disable "$tmp/perf.got" && break; done &
reader=$!
LLMC_PERF_CTL="$tmp/perf.ctl" "$TRAIN" "${TINY[@]}" --steps 4 --profile-steps 2:3 >"$tmp/prof.log" 2>&1
wait $reader
order=$(grep -E '^profile|^step +[0-9]' "$tmp/prof.log" | sed 's/ |.*//' | tr -s ' ' | tr '\n' ',')
check "--profile-steps 2:3 enables perf before step 2 and disables it after step 3" \
    '[ "$(tr "\n" " " <"$tmp/perf.got")" = "enable disable " ] &&
     [ "$order" = "step 1/4,profile: capturing steps 2-3,step 2/4,step 3/4,profile: capture of steps 2-3 ended,step 4/4," ]' \
    "FIFO got '$(tr '\n' ' ' <"$tmp/perf.got")', log order $order"

# --- determinism: the same run twice gives the same losses ---
"$TRAIN" "${TINY[@]}" --steps 40 --lr 3e-3 --warmup-steps 5 --eval-every 20 --eval-batches 4 \
    --log-json "$tmp/run2.jsonl" >/dev/null 2>&1
check "two identical runs log identical losses" 'cmp -s <(strip "$tmp/run.jsonl") <(strip "$tmp/run2.jsonl")'

# --- --shuffle: another data order, the same on every run ---
"$TRAIN" "${TINY[@]}" --steps 5 --shuffle 1 --log-json "$tmp/sh1.jsonl" >/dev/null 2>&1
"$TRAIN" "${TINY[@]}" --steps 5 --shuffle 1 --log-json "$tmp/sh2.jsonl" >/dev/null 2>&1
"$TRAIN" "${TINY[@]}" --steps 5 --log-json "$tmp/sh0.jsonl" >/dev/null 2>&1
check "--shuffle 1 is reproducible and differs from the file order" \
    'cmp -s <(strip "$tmp/sh1.jsonl") <(strip "$tmp/sh2.jsonl") && ! cmp -s <(strip "$tmp/sh1.jsonl") <(strip "$tmp/sh0.jsonl")'

# --- a saved model loads and evaluates to the same validation loss ---
"$TRAIN" "${TINY[@]}" --model "$tmp/model.bin" --steps 0 --eval-every 1 --eval-batches 4 \
    --log-json "$tmp/reload.jsonl" >"$tmp/reload.log" 2>&1
v1=$(grep val_loss "$tmp/run.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
v2=$(grep val_loss "$tmp/reload.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
check "saved model reloads to the same val loss ($v1 vs $v2)" '[ -n "$v1" ] && [ "$v1" = "$v2" ]'
expect_usage_error "a model flag that disagrees with the model file" "n-layer" "$TRAIN" "${TINY[@]}" --model "$tmp/model.bin" \
    --n-layer 3
head -c 5000 "$tmp/model.bin" > "$tmp/trunc_model.bin"
expect_usage_error "a truncated model file" "trunc_model.bin" "$TRAIN" "${TINY[@]}" --model "$tmp/trunc_model.bin"
printf 'not a model file at all, just some text that is long enough to have a header.....' > "$tmp/bad_model.bin"
expect_usage_error "a file that is not a model" "bad_model.bin" "$TRAIN" "${TINY[@]}" --model "$tmp/bad_model.bin"

# --- gradient accumulation: 2 x B=2 equals 1 x B=4 ---
"$TRAIN" "${TINY[@]}" --steps 5 --lr 1e-3 --log-json "$tmp/b4.jsonl" >/dev/null 2>&1
"$TRAIN" "${TINY[@]}" --steps 5 --lr 1e-3 --batch-size 2 --total-batch-tokens 128 --log-json "$tmp/b2x2.jsonl" \
    >/dev/null 2>&1
worst=$(paste -d' ' <(grep -o '"loss":[0-9.]*' "$tmp/b4.jsonl" | cut -d: -f2) \
    <(grep -o '"loss":[0-9.]*' "$tmp/b2x2.jsonl" | cut -d: -f2) |
    awk 'NF==2{d=($1-$2)/$1; if(d<0)d=-d; if(d>w)w=d; n++} END{if(n!=5)print 1; else print w+0}')
check "gradient accumulation 2 x B=2 matches B=4 over 5 steps (worst rel diff $worst)" \
    "awk -v w=$worst 'BEGIN{exit !(w < 1e-5)}'"

# --- zstd shards train exactly like plain ones ---
if "$TOKENIZE" --bytes 1 --zstd 3 --out-dir "$tmp/zdata" --name src --val-tokens 20000 "$tmp/corpus.txt" \
    >"$tmp/ztok.log" 2>&1; then
    "$TRAIN" "${TINY[@]}" --steps 5 --log-json "$tmp/plain.jsonl" >/dev/null 2>&1
    "$TRAIN" "${TINY[@]}" --data-train "$tmp/zdata/src_train_*.bin" --data-val "$tmp/zdata/src_val_*.bin" --steps 5 \
        --log-json "$tmp/zstd.jsonl" >/dev/null 2>&1
    check "training on zstd shards logs the same losses as on plain shards" \
        '[ -s "$tmp/zstd.jsonl" ] && cmp -s <(strip "$tmp/plain.jsonl") <(strip "$tmp/zstd.jsonl")'
else
    echo "SKIP: zstd shards ($(tail -1 "$tmp/ztok.log"))"
fi

# --- --out-dir and sampling ---
"$TRAIN" "${TINY[@]}" --steps 2 --sample-every 2 --sample-tokens 16 --out-dir "$tmp/out" >"$tmp/sample.log" 2>&1
check "--out-dir writes model_final.bin and sampling prints samples" \
    '[ -s "$tmp/out/model_final.bin" ] && [ "$(grep -c -- "---- sample ----" "$tmp/sample.log")" -eq 2 ]'

# --- under mpirun: an error every rank finds is printed once (rank 0), every rank exits 2 ---
if [ "${HAVE_MPI:-}" = yes ] && command -v mpirun >/dev/null 2>&1; then
    timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$TRAIN" "${TINY[@]}" --seq-len 65 >"$tmp/np2.out" \
        2>"$tmp/np2.err"; rc=$?
    check "under mpirun -np 2 a bad flag value is one error line, exit 2" \
        '[ $rc -eq 2 ] && [ "$(grep -c "^error:" "$tmp/np2.err")" -eq 1 ] && grep -q "^error: --seq-len 65 exceeds" "$tmp/np2.err"' \
        "rc=$rc: $(grep -m3 . "$tmp/np2.err" | tr '\n' ' ')"
else
    echo "SKIP: one error line under mpirun (built without MPI or no mpirun)"
fi

# --- git ignores what the README's runs write: checkpoints, JSON logs, TensorBoard runs, the default data ---
if git rev-parse --git-dir >/dev/null 2>&1; then
    unignored=$(for f in ckpt/step_00000001/manifest.json run.jsonl runs/events.out.tfevents.1 \
        data/default/fortunes_train_000001.bin; do git check-ignore -q "$f" || echo "$f"; done)
    check "git ignores what runs write" '[ -z "$unignored" ]' "not ignored: $unignored"
else
    echo "SKIP: git ignores what runs write (not a git checkout)"
fi
