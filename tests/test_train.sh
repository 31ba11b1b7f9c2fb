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

# --- help and bad input ---
"$TRAIN" --help >"$tmp/help" 2>&1; rc=$?
missing=$(for f in data-train data-val model batch-size seq-len total-batch-tokens steps lr min-lr-frac warmup-steps \
    lr-schedule weight-decay grad-clip beta1 beta2 seed eval-every eval-batches sample-every log-json out-dir; do
    grep -q -- "--$f " "$tmp/help" || echo "$f"; done)
check "--help exits 0 and lists every flag" '[ $rc -eq 0 ] && [ -z "$missing" ]' "rc=$rc missing: $missing"

expect_usage_error "an unknown flag" "--bogus" "$TRAIN" "${TINY[@]}" --bogus 1
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
    '^{"step":[0-9]*,"loss":[-0-9.e+]*,"lr":[-0-9.e+]*,"grad_norm":[-0-9.e+]*,"tokens":128,"ms":[-0-9.e+]*,"tok_per_s":[-0-9.e+]*,"mfu":[-0-9.e+]*,"time":{"data":[0-9.]*,"fwd":[0-9.]*,"bwd":[0-9.]*,"comm":[0-9.]*,"bubble":[0-9.]*,"opt":[0-9.]*,"ckpt":[0-9.]*}}$')
check "JSON log has one well-formed step record per step" '[ "$keys_ok" -eq 40 ]' "$keys_ok of 40 records match"
# where each step's time goes (llmc/step_time.h): the parts add up, the summary at the end
python3 tests/step_times.py "$tmp/run.jsonl" cpu_run --steps 40 --part fwd --part bwd --part opt
check "the run ends with the summary table" "grep -q '^summary over steps 2-40 (step 1 is warm-up)' '$tmp/run.log' && grep -q '^  step ' '$tmp/run.log'"
nval=$(grep -c '^{"step":[0-9]*,"val_loss":[0-9.]*}$' "$tmp/run.jsonl")
check "JSON log has val_loss records at steps 0, 20, 40" '[ "$nval" -eq 3 ]' "$nval val records"

# --- --profile-steps 2:3: perf's control FIFO (scripts/profile.sh's) gets "enable" before step 2, "disable"
# after step 3; a reader here stands in for perf ---
mkfifo "$tmp/perf.ctl"
{ timeout 60 cat "$tmp/perf.ctl"; timeout 60 cat "$tmp/perf.ctl"; } >"$tmp/perf.got" &
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
strip() { grep -v '^{"summary"' "$1" | sed 's/,"ms".*//'; }
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
