# gpu_trainer.sh (sourced by the GPU trainer's test scripts): picks the binary
# and the check-name prefix, and SKIPs (exit 0) when there is nothing to test.
#   EMULATED=1: $BUILD/emu/train_gptcu, train_gpt.cu compiled for
#               tests/cuda_emulator.h (kernels, cuBLASLt, streams and copies on
#               the CPU; no GPU needed); check names start with "emulated_".
#   otherwise:  $BUILD/train_gptcu on the machine's GPU.
# Sets TRAIN, P (the helpers of tests/checks.sh prefix their names with it) and
# quick; takes the suite's name ($1) for the SKIP lines. Sourced after tests/lib.sh.
EMULATED=${EMULATED:-0}
# quick: the emulated trainer in a sanitizer build (tests/lib.sh's sanitizer_build), where scripts run
# their first layouts only (CI's time)
quick=0
[ "$EMULATED" = 1 ] && [ "${sanitizer_build:-0}" = 1 ] && quick=1
if [ "$EMULATED" = 1 ]; then
    TRAIN=$BUILD/emu/train_gptcu P=emulated_
    # one OpenMP thread: the emulated kernels run on the calling thread, and a second OpenMP thread (OpenBLAS's,
    # for the emulated cuBLASLt) spends the time between matmuls spinning (a third of the run's CPU time)
    export OMP_NUM_THREADS=1
else
    TRAIN=$BUILD/train_gptcu P=
fi
if [ ! -x "$TRAIN" ]; then
    echo "SKIP: $P$1 (no $TRAIN: built without CUDA, or a sanitizer build)"
    exit 0
fi
if [ "$EMULATED" != 1 ] && [ "$(gpu_count)" -eq 0 ]; then
    echo "SKIP: $1 (no GPU)"
    exit 0
fi

# layout_reference PREFIX: the set-up of the scripts that check a layout against one GPU
# (test_tensor_parallel_gpu.sh, test_context_parallel_gpu.sh): the data, a committed fixture's bytes,
# which do not change with the sources (a layout's logits differ from one GPU's in their last bf16 bits,
# so a draw that falls at a token's boundary could differ; on fixed data the sample checks are
# deterministic); COMMON: 2 layers of 2 heads of 32 (the flash kernels' head size), a global batch of 4 x
# 32 tokens x 2 micro-batches, 4 steps; EVAL: evaluation and sampling; the one-GPU run of both
# ($tmp/ref.json, ref.bin, ref.log); compare_layout's checks named PREFIXNAME_..._match_one_gpu
layout_reference() {
    byte_corpus "$tmp" d 20000 tests/fixtures/tiny_model.bin
    COMMON=(--data-train "$tmp/d_train_*.bin" --n-layer 2 --n-embd 64 --n-head 2 --vocab-size 257 --max-seq-len 64
            --seq-len 32 --total-batch-tokens 256 --steps 4 --lr 1e-3 --eps 1e-4 --weight-decay 0.1 --seed 5
            --peak-tflops 1 --comm-timeout 120 --batch-size 4)
    EVAL=(--data-val "$tmp/d_val_*.bin" --eval-every 2 --eval-batches 1 --sample-every 4 --sample-tokens 16)
    timeout 300 "$TRAIN" "${COMMON[@]}" "${EVAL[@]}" --log-json "$tmp/ref.json" --save-model "$tmp/ref.bin" \
        >"$tmp/ref.log" 2>&1 || { fail reference_run "$(tail -2 "$tmp/ref.log")"; exit 1; }
    LAYOUT_PREFIX=$1 LAYOUT_REF=one_gpu
}

# resumed_on_one_gpu NAME: the layout's checkpoint at step 2 ($tmp/ck/step_00000002) resumed on one GPU,
# its weights following the one-GPU run of layout_reference: checks NAME_resumes_on_one_gpu and
# NAME_resumed_on_one_gpu_matches
resumed_on_one_gpu() {
    mkdir -p "$tmp/one.ck" && cp -r "$tmp/ck/step_00000002" "$tmp/one.ck/"
    timeout 300 "$TRAIN" "${COMMON[@]}" --ckpt-dir "$tmp/one.ck" --resume auto --save-model "$tmp/one.bin" \
        >"$tmp/one.log" 2>&1
    check "$1_resumes_on_one_gpu" "grep -aq 'resume: continuing at step 2' '$tmp/one.log'" \
        "$(grep -a -m2 -i 'error\|resume' "$tmp/one.log" | tr '\n' ' ')"
    "$CMP" --compare-models "$tmp/ref.bin" "$tmp/one.bin" 1e-3 "${P}$1_resumed_on_one_gpu_matches"
}
