#!/usr/bin/env bash
# test_extend.sh: a finished run continued for more steps (docs/checkpoints.md#extending-a-run):
# 20 steps, then --resume with --steps 30, against a straight 30-step run whose
# schedule is the extended one (--lr-decay-steps 20: the cosine keeps its 20
# steps, the steps after it run at its last rate): the same step records and
# final weights bit for bit, and the JSON log's resume record says the
# schedule's length and where it came from; --lr-decay-steps 30 on the resume
# re-fits the decay instead; a --steps below the checkpoint's step is refused
# in one line saying what to give.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN=$BUILD/train_gpt
P=extend_
steps_from() { grep '^{"step":' "$1" | records_from /dev/stdin 20; }  # the step records of steps 21-30
lr_at() { grep "^{\"step\":$2,\"loss\"" "$1" | sed 's/.*"lr":\([^,]*\),.*/\1/'; }
export OMP_NUM_THREADS=1
tokenize_sources "$tmp/data" llmc/model.h llmc/sampler.h
RUN=(--data-train "$tmp/data/src_train_*.bin" --n-layer 2 --n-embd 32 --n-head 2 --vocab-size 257 --max-seq-len 32
     --seq-len 32 --batch-size 2 --lr 1e-3 --warmup-steps 3 --min-lr-frac 0.1 --lr-schedule cosine --shuffle 1
     --peak-tflops 1)
"$TRAIN" "${RUN[@]}" --steps 20 --ckpt-dir "$tmp/ck" >"$tmp/a.log" 2>&1 || fail "20-step run" "$(tail -1 "$tmp/a.log")"
"$TRAIN" "${RUN[@]}" --steps 30 --resume "$tmp/ck/step_00000020" --save-model "$tmp/ext.bin" --log-json "$tmp/ext.json" \
    >"$tmp/ext.log" 2>&1
check "--resume with --steps 30 continues a 20-step run" '[ $? -eq 0 ] && [ -s "$tmp/ext.bin" ]' "$(tail -1 "$tmp/ext.log")"
"$TRAIN" "${RUN[@]}" --steps 30 --lr-decay-steps 20 --save-model "$tmp/straight.bin" --log-json "$tmp/straight.json" \
    >"$tmp/straight.log" 2>&1
check "it equals a straight 30-step run of the extended schedule (--lr-decay-steps 20), weights bit for bit" \
    'cmp -s "$tmp/ext.bin" "$tmp/straight.bin"'
check "... and its step records 21-30 (loss, lr, norm) too" \
    '[ "$(steps_from "$tmp/ext.json")" = "$(steps_from "$tmp/straight.json")" ] && [ "$(steps_from "$tmp/ext.json" | wc -l)" -eq 10 ]'
lr_last=$(lr_at "$tmp/ext.json" 30)
check "the steps after the schedule run at its last rate (1e-4)" 'awk "BEGIN{exit !($lr_last == 1e-4)}"' "lr $lr_last"
check "the JSON log records the extension" \
    'grep -q "^{\"resume\":{\"step\":20,\"steps\":30,\"lr_decay_steps\":20,\"from\":\"checkpoint\"" "$tmp/ext.json"' \
    "$(grep resume "$tmp/ext.json")"
"$TRAIN" "${RUN[@]}" --steps 30 --resume "$tmp/ck/step_00000020" --lr-decay-steps 30 --log-json "$tmp/refit.json" \
    >"$tmp/refit.log" 2>&1
lr_refit=$(lr_at "$tmp/refit.json" 21)
check "--lr-decay-steps 30 on the resume re-fits the decay to the new end" \
    'grep -q "\"lr_decay_steps\":30,\"from\":\"flag\"" "$tmp/refit.json" && awk "BEGIN{exit !($lr_refit > 0.0002)}"' \
    "lr at step 21: $lr_refit"
expect_usage_error "--steps below the checkpoint's step" "at step 20, past this run's --steps 10: give --steps 20 or more" \
    "$TRAIN" "${RUN[@]}" --steps 10 --resume "$tmp/ck/step_00000020"
