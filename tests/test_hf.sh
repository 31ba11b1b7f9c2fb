#!/usr/bin/env bash
# test_hf.sh: models in and out (docs/models.md). Hugging Face files, checked
# with numpy (tests/hf_check.py; the safetensors package reads them where
# installed, transformers' from_pretrained where torch is): --save-hf's tensor
# names, shapes, dtypes and config.json are GPT-2's and a numpy GPT-2 forward
# on the file gives the trainer's validation loss (1e-5); an F32, BF16, F16
# file (with and without "transformer.", with the mask buffers and lm_head)
# imported and exported again is bit for bit the same, also through tp 2;
# a dp 2 x tp 2 x pp 2 checkpoint exports the same file as one process, also
# as --model; hostile safetensors files end in one line, exit 2. --generate at
# temperature 0: the numpy forward's greedy tokens, the same from the llm.c file
# and on the emulated GPU trainer; --top-k 1 is greedy; --top-k 3 draws among
# the numpy forward's 3 most likely; --temperature 0.0001 is greedy; a seed
# repeats a sample; a prompt longer than the context is cut to its last
# --seq-len tokens; the GPT-2 tokenizer's files go with the export and encode
# the prompt. SKIPs without numpy (MPI parts without MPI).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN=$BUILD/train_gpt
P=hf_
if ! python3 -c "import numpy" 2>/dev/null; then
    echo "SKIP: Hugging Face files (python3 with numpy not found)"
    exit 0
fi
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 OMPI_MCA_rmaps_base_oversubscribe=1
HF=(python3 tests/hf_check.py)

# --- export after training: GPT-2's names, shapes, config; the numpy forward's loss is ours ---
tokenize_sources "$tmp/data" llmc/model.h llmc/sampler.h llmc/json.h
TINY=(--n-layer 2 --n-embd 32 --n-head 2 --vocab-size 257 --max-seq-len 64 --seq-len 32 --batch-size 2)
"$TRAIN" --data-train "$tmp/data/src_train_*.bin" --data-val "$tmp/data/src_val_*.bin" "${TINY[@]}" --steps 3 \
    --eval-every 3 --eval-batches 1 --save-hf "$tmp/hf" --log-json "$tmp/run.json" >"$tmp/run.log" 2>&1
check "train and --save-hf" '[ $? -eq 0 ] && grep -q "saved $tmp/hf (Hugging Face GPT-2, fp32" "$tmp/run.log"' \
    "$(tail -2 "$tmp/run.log")"
"${HF[@]}" export "$tmp/hf" "$tmp/run.json" "$(ls "$tmp"/data/src_val_*.bin)" 32 2 | sed "s/^\(PASS\|FAIL\): /\1: $P/"

# --- import -> export round trips, bit for bit (no data: --steps 0 converts) ---
for case in F32:transformer.:fp32 BF16:transformer.:bf16 F16::fp32; do
    IFS=: read -r dtype prefix save <<<"$case"
    "${HF[@]}" make "$tmp/in_$dtype" "$dtype" "$prefix" 2 64 2 257 64
    "$TRAIN" --model "$tmp/in_$dtype" --steps 0 --save-hf "$tmp/out_$dtype" --save-dtype "$save" >"$tmp/rt.log" 2>&1 ||
        fail "import $dtype" "$(tail -1 "$tmp/rt.log")"
    "${HF[@]}" same "$tmp/in_$dtype" "$tmp/out_$dtype" | sed "s/^\(PASS\|FAIL\): /\1: $P/"
done
# a lone .safetensors file: --n-head stands for config.json
cp "$tmp/in_F32/model.safetensors" "$tmp/lone.safetensors"
"$TRAIN" --model "$tmp/lone.safetensors" --n-head 2 --steps 0 --save-hf "$tmp/out_lone" >"$tmp/lone.log" 2>&1
check "a lone .safetensors with --n-head imports" 'cmp -s "$tmp/out_lone/model.safetensors" "$tmp/out_F32/model.safetensors"' \
    "$(tail -1 "$tmp/lone.log")"

MPI=0
have_mpi && MPI=1
MPIRUN=(timeout 120 mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -x ASAN_OPTIONS)
if [ $MPI = 1 ]; then
    "${MPIRUN[@]}" -np 2 "$TRAIN" --model "$tmp/in_F32" --steps 0 --tp 2 --save-hf "$tmp/out_tp" >"$tmp/tp.log" 2>&1
    check "import and export at tp 2: bit for bit" 'cmp -s "$tmp/out_tp/model.safetensors" "$tmp/out_F32/model.safetensors"' \
        "$(tail -2 "$tmp/tp.log")"
    # a checkpoint written at data 2 x tensor 2 x pipeline 2 exports (a resume with --steps at its step) what one process does
    CK=(--data-train "$tmp/data/src_train_*.bin" --n-layer 2 --n-embd 32 --n-head 2 --vocab-size 257 --max-seq-len 16
        --seq-len 16 --batch-size 1 --total-batch-tokens 64 --steps 2 --peak-tflops 1 --comm-timeout 60)
    "${MPIRUN[@]}" -np 8 "$TRAIN" "${CK[@]}" --tp 2 --pp 2 --zero 1 --ckpt-dir "$tmp/ck" >"$tmp/ck.log" 2>&1
    "$TRAIN" "${CK[@]}" --resume "$tmp/ck/step_00000002" --save-hf "$tmp/ck_one" --total-batch-tokens 64 \
        >"$tmp/ck1.log" 2>&1
    "${MPIRUN[@]}" -np 8 "$TRAIN" "${CK[@]}" --tp 2 --pp 2 --resume "$tmp/ck/step_00000002" --save-hf "$tmp/ck_eight" \
        >"$tmp/ck8.log" 2>&1
    check "a dp 2 x tp 2 x pp 2 checkpoint exports the same file on 8 ranks and on one process" \
        '[ -s "$tmp/ck_one/model.safetensors" ] && cmp -s "$tmp/ck_one/model.safetensors" "$tmp/ck_eight/model.safetensors"' \
        "$(tail -1 "$tmp/ck.log") | $(tail -1 "$tmp/ck1.log") | $(tail -1 "$tmp/ck8.log")"
    "$TRAIN" --model "$tmp/ck/step_00000002" --steps 0 --seq-len 16 --save-hf "$tmp/ck_model" >"$tmp/ckm.log" 2>&1
    check "... and as --model on one process (--steps 0, no data)" \
        'cmp -s "$tmp/ck_one/model.safetensors" "$tmp/ck_model/model.safetensors"' "$(tail -1 "$tmp/ckm.log")"
else
    echo "SKIP: ${P}tp 2 import and the dp 2 x tp 2 x pp 2 export (no MPI)"
fi

# --- hostile files: one line, exit 2 ---
"${HF[@]}" bad "$tmp/in_F32"
for f in "$tmp"/in_F32/bad_*.safetensors; do
    name=${f##*/bad_}
    expect_usage_error "safetensors ${name%.safetensors}" "safetensors\|tensor\|shape" "$TRAIN" --model "$f" --n-head 2 --steps 0
done
expect_usage_error "a lone .safetensors without --n-head" "give --n-head" "$TRAIN" --model "$tmp/lone.safetensors" --steps 0
expect_usage_error "--n-head against config.json" "disagrees with the model's config.json" \
    "$TRAIN" --model "$tmp/in_F32" --n-head 4 --steps 0
expect_usage_error "--save-hf into the model's directory" "lies inside --model" \
    "$TRAIN" --model "$tmp/in_F32" --steps 0 --save-hf "$tmp/in_F32"
expect_usage_error "training without --data-train" "data-train is required to train" "$TRAIN" --model "$tmp/in_F32"
expect_usage_error "--prompt without a tokenizer" "give --tokenizer" \
    "$TRAIN" --model d12 --n-layer 1 --n-embd 32 --n-head 2 --generate --prompt "hi"

# --- generate: greedy = the numpy forward's, from either file, on either trainer ---
"${HF[@]}" greedy "$tmp/in_F32" 32 12 "$tmp/numpy.gen"
GEN=(--generate --temperature 0 --max-new-tokens 12 --seq-len 32)
"$TRAIN" --model "$tmp/in_F32" "${GEN[@]}" >"$tmp/g.log" 2>&1
generated "$tmp/g.log" >"$tmp/ours.gen"
check "--generate --temperature 0 continues as the numpy forward's argmax" 'cmp -s "$tmp/ours.gen" "$tmp/numpy.gen"' \
    "$(tail -3 "$tmp/g.log" | tr '\n' ' ')"
"${HF[@]}" torch "$tmp/out_F32" "$tmp/ours.gen" 32 12 | sed "s/^\(PASS\|FAIL\|SKIP\): /\1: $P/"
"$TRAIN" --model "$tmp/in_F32" --steps 0 --save-model "$tmp/in.bin" >/dev/null 2>&1
"$TRAIN" --model "$tmp/in.bin" "${GEN[@]}" >"$tmp/gbin.log" 2>&1
check "the same from its llm.c model file" '[ "$(generated "$tmp/gbin.log")" = "$(generated "$tmp/g.log")" ]'
"$TRAIN" --model "$tmp/in_F32" "${GEN[@]}" --temperature 1 --top-k 1 >"$tmp/gk1.log" 2>&1
check "--top-k 1 is greedy at any temperature" '[ "$(generated "$tmp/gk1.log")" = "$(generated "$tmp/g.log")" ]'
"$TRAIN" --model "$tmp/in_F32" "${GEN[@]}" --temperature 1.5 --seed 3 >"$tmp/gt1.log" 2>&1
"$TRAIN" --model "$tmp/in_F32" "${GEN[@]}" --temperature 1.5 --seed 3 >"$tmp/gt2.log" 2>&1
"$TRAIN" --model "$tmp/in_F32" "${GEN[@]}" --temperature 1.5 --seed 4 >"$tmp/gt3.log" 2>&1
check "--temperature 1.5: a seed repeats its sample, another seed draws another" \
    '[ "$(generated "$tmp/gt1.log")" = "$(generated "$tmp/gt2.log")" ] && [ "$(generated "$tmp/gt1.log")" != "$(generated "$tmp/gt3.log")" ] && [ "$(generated "$tmp/gt1.log")" != "$(generated "$tmp/g.log")" ]'
"$TRAIN" --model "$tmp/in_F32" "${GEN[@]}" --temperature 100 --top-k 3 --seed 3 >"$tmp/gk3.log" 2>&1
generated "$tmp/gk3.log" >"$tmp/k3.gen"
"${HF[@]}" topk "$tmp/in_F32" 32 3 "$tmp/k3.gen" | sed "s/^\(PASS\|FAIL\): /\1: $P/"
long=$(head -c 100 llmc/model.h | tr -d '\n')
"$TRAIN" --model "$tmp/in_F32" "${GEN[@]}" --prompt "$long" >"$tmp/glong.log" 2>&1
check "a prompt longer than --seq-len: its first tokens dropped, said so" \
    '[ $? -eq 0 ] && grep -q "its first $((${#long} + 1 - 32)) tokens are not seen" "$tmp/glong.log"' "$(tail -2 "$tmp/glong.log")"
"$TRAIN" --model "$tmp/in_F32" "${GEN[@]}" --prompt "${long: -32}" >"$tmp/gtail.log" 2>&1
g_long=$(generated "$tmp/glong.log") g_tail=$(generated "$tmp/gtail.log")
check "... and continues as its last --seq-len tokens alone do" \
    '[ -n "${g_long#"$long"}" ] && [ "${g_long#"$long"}" = "${g_tail#"${long: -32}"}" ]'
"$TRAIN" --model "$tmp/in_F32" "${GEN[@]}" --temperature 0.0001 --seed 9 >"$tmp/gcold.log" 2>&1
check "--temperature 0.0001 draws the greedy tokens (softmax(logits / T) at its limit)" \
    '[ "$(generated "$tmp/gcold.log")" = "$(generated "$tmp/g.log")" ]'
EMU=$BUILD/emu/train_gptcu
if [ -x "$EMU" ]; then
    "$EMU" --model "$tmp/in_F32" "${GEN[@]}" --peak-tflops 1 >"$tmp/gemu.log" 2>&1
    check "the emulated GPU trainer generates the same greedy tokens" '[ "$(generated "$tmp/gemu.log")" = "$(generated "$tmp/g.log")" ]' \
        "$(tail -2 "$tmp/gemu.log" | tr '\n' ' ')"
else
    echo "SKIP: ${P}generate on the emulated GPU trainer (no $EMU: built without CUDA, or a sanitizer build)"
fi

# --- GPT-2's tokenizer: its files go with the export, and a Hugging Face directory brings its own ---
GPT2=../shared/data/gpt2
if [ -f "$GPT2/encoder.json" ]; then
    "${HF[@]}" make "$tmp/v50k" F32 transformer. 1 32 2 50257 32
    "$TRAIN" --model "$tmp/v50k" --steps 0 --seq-len 32 --tokenizer "$GPT2" --save-hf "$tmp/v50k_out" >"$tmp/tok.log" 2>&1
    check "--save-hf with a GPT-2 --tokenizer writes vocab.json, merges.txt, tokenizer_config.json" \
        'cmp -s "$tmp/v50k_out/vocab.json" "$GPT2/encoder.json" && cmp -s "$tmp/v50k_out/merges.txt" "$GPT2/vocab.bpe" && grep -q GPT2Tokenizer "$tmp/v50k_out/tokenizer_config.json" && grep -q "\"eos_token_id\": 50256" "$tmp/v50k_out/config.json"' \
        "$(tail -1 "$tmp/tok.log")"
    "$TRAIN" --model "$tmp/v50k_out" --generate --prompt "Hello, world" --max-new-tokens 4 --seq-len 32 >"$tmp/gtok.log" 2>&1
    check "--generate encodes the prompt with the model directory's own tokenizer" \
        'generated "$tmp/gtok.log" | grep -q "^Hello, world"' "$(tail -2 "$tmp/gtok.log")"
else
    echo "SKIP: ${P}GPT-2 tokenizer files (no $GPT2)"
fi
