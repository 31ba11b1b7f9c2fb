#!/usr/bin/env bash
# test_ckpt_model.sh: a checkpoint as --model (docs/models.md#a-checkpoint-as-the-model). A short
# run writes a checkpoint directory and its llm.c model file (--out-dir): --model with the
# checkpoint directory or its step directory gives the model file's weights bit for bit (--steps 0
# --save-model), the same --generate text (greedy, and drawn with a seed) and the same first
# training steps; the emulated GPU trainer reads the same weights and generates the same greedy
# text. A run at dp 2 likewise: its checkpoint read on one process (and at tp 2: resharded) is its
# model file, and the text drawn on 2 ranks or one is the model file's. A directory holding no
# model, a checkpoint with a truncated data file or an edited manifest: one line naming it, exit
# 2. MPI parts SKIP without MPI.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN=$BUILD/train_gpt
P=ckmodel_
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 OMPI_MCA_rmaps_base_oversubscribe=1
tokenize_sources "$tmp/data" llmc/model.h llmc/sampler.h
ONLY=(--seq-len 32 --peak-tflops 1)  # (a run of the model alone)
RUN=(--data-train "$tmp/data/src_train_*.bin" --n-layer 2 --n-embd 64 --n-head 2 --vocab-size 257 --max-seq-len 32
     --lr 1e-2 --total-batch-tokens 64 --steps 8 "${ONLY[@]}")
GEN=(--generate --temperature 0 --max-new-tokens 24 --prompt "static inline" "${ONLY[@]}")
DRAW=(--generate --temperature 1 --seed 5 --max-new-tokens 48 "${ONLY[@]}")  # (varied text: the weights' every bit counts)

"$TRAIN" "${RUN[@]}" --batch-size 2 --ckpt-dir "$tmp/ck" --out-dir "$tmp/out" >"$tmp/train.log" 2>&1 ||
    fail "an 8-step run with --ckpt-dir and --out-dir" "$(tail -1 "$tmp/train.log")"
"$TRAIN" --model "$tmp/ck" --steps 0 "${ONLY[@]}" --save-model "$tmp/from_ck.bin" >"$tmp/conv.log" 2>&1
check "--model CKPT_DIR --steps 0 --save-model: the run's model file, bit for bit" \
    'cmp -s "$tmp/from_ck.bin" "$tmp/out/model_final.bin"' "$(tail -1 "$tmp/conv.log")"
"$TRAIN" --model "$tmp/out/model_final.bin" "${GEN[@]}" >"$tmp/g_bin.log" 2>&1
"$TRAIN" --model "$tmp/out/model_final.bin" "${DRAW[@]}" >"$tmp/d_bin.log" 2>&1
for m in ck ck/step_00000008; do
    "$TRAIN" --model "$tmp/$m" "${GEN[@]}" >"$tmp/g.log" 2>&1
    "$TRAIN" --model "$tmp/$m" "${DRAW[@]}" >"$tmp/d.log" 2>&1
    check "--generate from --model ${m/ck/CKPT_DIR}: the model file's text, greedy and drawn at temperature 1" \
        '[ -n "$(generated "$tmp/g_bin.log")" ] && [ "$(generated "$tmp/g.log")" = "$(generated "$tmp/g_bin.log")" ] && [ "$(generated "$tmp/d.log")" = "$(generated "$tmp/d_bin.log")" ]' \
        "$(tail -2 "$tmp/g.log" | tr '\n' ' ')"
done
check "... naming the step it took" 'grep -q "from $tmp/ck/step_00000008$" "$tmp/g.log"' "$(grep '^model:' "$tmp/g.log")"
# training starts from the same weights (a fresh optimizer, at step 0)
"$TRAIN" "${RUN[@]}" --batch-size 2 --steps 2 --model "$tmp/ck" --log-json "$tmp/ft_ck.json" >/dev/null 2>&1
"$TRAIN" "${RUN[@]}" --batch-size 2 --steps 2 --model "$tmp/out/model_final.bin" --log-json "$tmp/ft_bin.json" \
    >/dev/null 2>&1
steps_of() { grep '^{"step":[0-9]*,"loss"' "$1" 2>/dev/null | sed 's/,"ms".*//'; }
check "training from --model CKPT_DIR: the same steps as from the model file" \
    '[ -n "$(steps_of "$tmp/ft_ck.json")" ] && [ "$(steps_of "$tmp/ft_ck.json")" = "$(steps_of "$tmp/ft_bin.json")" ]'

EMU=$BUILD/emu/train_gptcu
if [ -x "$EMU" ]; then
    "$EMU" --model "$tmp/ck" --steps 0 "${ONLY[@]}" --save-model "$tmp/emu.bin" >"$tmp/emu.log" 2>&1
    check "the emulated GPU trainer reads the checkpoint's weights bit for bit" \
        'cmp -s "$tmp/emu.bin" "$tmp/out/model_final.bin"' "$(tail -1 "$tmp/emu.log")"
    "$EMU" --model "$tmp/ck" "${GEN[@]}" >"$tmp/g_emu.log" 2>&1
    check "... and generates the CPU trainer's greedy text from it" \
        '[ "$(generated "$tmp/g_emu.log")" = "$(generated "$tmp/g_bin.log")" ]' "$(tail -2 "$tmp/g_emu.log" | tr '\n' ' ')"
else
    echo "SKIP: ${P}generate on the emulated GPU trainer (no $EMU: built without CUDA, or a sanitizer build)"
fi

if have_mpi; then
    MPIRUN=(timeout 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -x ASAN_OPTIONS)
    "${MPIRUN[@]}" -np 2 "$TRAIN" "${RUN[@]}" --batch-size 1 --ckpt-dir "$tmp/ck2" --out-dir "$tmp/out2" \
        >"$tmp/train2.log" 2>&1 || fail "an 8-step run at dp 2" "$(tail -1 "$tmp/train2.log")"
    "$TRAIN" --model "$tmp/ck2" --steps 0 "${ONLY[@]}" --save-model "$tmp/from_ck2.bin" >"$tmp/conv2.log" 2>&1
    check "a dp 2 checkpoint read on one process: its run's model file, bit for bit" \
        'cmp -s "$tmp/from_ck2.bin" "$tmp/out2/model_final.bin"' "$(tail -1 "$tmp/conv2.log")"
    "${MPIRUN[@]}" -np 2 "$TRAIN" --model "$tmp/ck2" --tp 2 --steps 0 "${ONLY[@]}" --save-model "$tmp/from_ck2_tp.bin" \
        >"$tmp/conv2tp.log" 2>&1
    check "... and read at tp 2 (each rank its slices)" 'cmp -s "$tmp/from_ck2_tp.bin" "$tmp/out2/model_final.bin"' \
        "$(tail -1 "$tmp/conv2tp.log")"
    "$TRAIN" --model "$tmp/out2/model_final.bin" "${DRAW[@]}" >"$tmp/g2_bin.log" 2>&1
    "$TRAIN" --model "$tmp/ck2" "${DRAW[@]}" >"$tmp/g2_one.log" 2>&1
    "${MPIRUN[@]}" -np 2 "$TRAIN" --model "$tmp/ck2" "${DRAW[@]}" >"$tmp/g2_two.log" 2>&1
    check "the text drawn from the dp 2 checkpoint, on one process and on 2 ranks: its model file's" \
        '[ -n "$(generated "$tmp/g2_bin.log")" ] && [ "$(generated "$tmp/g2_one.log")" = "$(generated "$tmp/g2_bin.log")" ] && [ "$(generated "$tmp/g2_two.log")" = "$(generated "$tmp/g2_bin.log")" ]' \
        "$(tail -1 "$tmp/g2_one.log") | $(tail -1 "$tmp/g2_two.log")"
else
    echo "SKIP: ${P}a dp 2 checkpoint as the model (no MPI)"
fi

# bad input: one line naming it, exit 2
expect_usage_error "a directory holding no model" "the directory '$tmp/data' holds no model" \
    "$TRAIN" --model "$tmp/data" "${GEN[@]}"
mkdir -p "$tmp/short" && cp -r "$tmp/ck/step_00000008" "$tmp/short/"
truncate -s -4 "$tmp/short/step_00000008/rank_00000.bin"
expect_usage_error "a checkpoint with a truncated data file" "rank_00000.bin: .* bytes, the manifest says" \
    "$TRAIN" --model "$tmp/short" "${GEN[@]}"
mkdir -p "$tmp/edited" && cp -r "$tmp/ck/step_00000008" "$tmp/edited/"
sed -i 's/"num_layers": 2/"num_layers": 3/' "$tmp/edited/step_00000008/manifest.json"
expect_usage_error "a checkpoint whose manifest was edited" "step_00000008/manifest.json: .*damaged or edited" \
    "$TRAIN" --model "$tmp/edited/step_00000008" "${GEN[@]}"
