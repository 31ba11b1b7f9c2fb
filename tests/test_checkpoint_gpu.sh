#!/usr/bin/env bash
# test_checkpoint_gpu.sh: checkpoints of the GPU trainer (EMULATED=1: the CPU
# emulation, see tests/gpu_trainer.sh), one process. A run stopped at step k
# and resumed equals the uninterrupted run to the last bit (losses, norms,
# validation losses, samples, final weights) with --shuffle, accumulation,
# evaluation and sampling: the staging copy runs on a side stream and the bf16
# weights are rebuilt as the last AdamW step rounded them. Between trainers: a
# checkpoint of the CPU trainer continues on the GPU trainer and the other way
# round, following the other trainer's uninterrupted run to bf16 tolerance.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
. tests/gpu_trainer.sh checkpoint_gpu
export OMP_NUM_THREADS=1

byte_corpus "$tmp/data" src 2000 <(head -c 5000 train_gpt.c)
# head size 32 (the flash kernels take 32 and 64); 2 micro-steps a step
RUN=(--data-train "$tmp/data/src_train_*.bin" --data-val "$tmp/data/src_val_*.bin" --n-layer 2 --n-embd 64 --n-head 2
     --vocab-size 257 --max-seq-len 64 --seq-len 32 --batch-size 4 --total-batch-tokens 256 --peak-tflops 0.1
     --steps 6 --lr 1e-3 --shuffle 1 --eval-every 2 --eval-batches 1 --sample-every 3 --sample-tokens 4)

"$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/g" --ckpt-every 3 --log-json "$tmp/g.json" --save-model "$tmp/g.bin" \
    >"$tmp/g.log" 2>&1
rc1=$?
"$TRAIN" "${RUN[@]}" --resume "$tmp/g/step_00000003" --log-json "$tmp/gr.json" --save-model "$tmp/gr.bin" \
    >"$tmp/gr.log" 2>&1
rc2=$?
check "GPU trainer resumed at step 3: the same final weights, to the bit" \
    '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && cmp -s "$tmp/g.bin" "$tmp/gr.bin"' \
    "rc1=$rc1 rc2=$rc2 $(grep -ah error "$tmp/g.log" "$tmp/gr.log" | head -1)"
check "GPU trainer resumed at step 3: the same losses, norms and validation losses, to the bit" \
    'cmp -s <(records_from "$tmp/g.json" 3) <(records_from "$tmp/gr.json" 0) && [ -s "$tmp/gr.json" ]'
check "GPU trainer resumed at step 3: the same samples" \
    'cmp -s <(samples_from "$tmp/g.log" 3) <(samples_from "$tmp/gr.log" 0)'
check "the GPU trainer logs its staging copy and the commit" \
    'grep -q "staged .*copying to host memory" "$tmp/g.log" && grep -q "step_00000003 committed" "$tmp/g.log"'

# --- between trainers (the manifest says which wrote it; the format is the same). Not in the sanitizer
# build (quick: CI's time): it runs the same reader and writer as the resumes above and below ---
[ "$quick" = 1 ] || {
"$CPU" "${RUN[@]}" --ckpt-dir "$tmp/c" --ckpt-every 3 --log-json "$tmp/c.json" >"$tmp/c.log" 2>&1
"$TRAIN" "${RUN[@]}" --resume "$tmp/c/step_00000003" --log-json "$tmp/c2g.json" >"$tmp/c2g.log" 2>&1
rc=$?
records_from "$tmp/c.json" 3 >"$tmp/c_tail.json"
records_from "$tmp/g.json" 3 >"$tmp/g_tail.json"
if [ $rc -eq 0 ]; then
    "$CMP" --compare-logs "$tmp/c_tail.json" "$tmp/c2g.json" 1e-2 "${P}cpu_checkpoint_continues_on_the_gpu_trainer"
else
    fail "cpu_checkpoint_continues_on_the_gpu_trainer" "exit $rc: $(grep -a error "$tmp/c2g.log" | head -1)"
fi
"$CPU" "${RUN[@]}" --resume "$tmp/g/step_00000003" --log-json "$tmp/g2c.json" >"$tmp/g2c.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
    "$CMP" --compare-logs "$tmp/g_tail.json" "$tmp/g2c.json" 1e-2 "${P}gpu_checkpoint_continues_on_the_cpu_trainer"
else
    fail "gpu_checkpoint_continues_on_the_cpu_trainer" "exit $rc: $(grep -a error "$tmp/g2c.log" | head -1)"
fi
}

# --- 2 ranks (MPI staged through host memory): ZeRO-1 resumes bit-exact, and continues at ZeRO-3 and on 1 rank ---
need_mpi "${P}checkpoints on 2 ranks" 300
MPIRUN+=(-np 2)
DIST=("${RUN[@]}" --steps 4 --eval-every 0 --sample-every 0 --comm mpi)
"${MPIRUN[@]}" "$TRAIN" "${DIST[@]}" --batch-size 2 --zero 1 --ckpt-dir "$tmp/d" --ckpt-every 2 \
    --log-json "$tmp/d.json" --save-model "$tmp/d.bin" >"$tmp/d.log" 2>&1
rc1=$?
"${MPIRUN[@]}" "$TRAIN" "${DIST[@]}" --batch-size 2 --zero 1 --resume "$tmp/d/step_00000002" \
    --log-json "$tmp/dr.json" --save-model "$tmp/dr.bin" >"$tmp/dr.log" 2>&1
rc2=$?
check "GPU trainer, ZeRO-1 on 2 ranks: a resume at step 2 is bit-exact" \
    '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && cmp -s "$tmp/d.bin" "$tmp/dr.bin" &&
     cmp -s <(records_from "$tmp/d.json" 2) <(records_from "$tmp/dr.json" 0)' \
    "rc1=$rc1 rc2=$rc2 $(grep -ah error "$tmp/d.log" "$tmp/dr.log" | head -1)"
records_from "$tmp/d.json" 2 >"$tmp/d_tail.json"
"${MPIRUN[@]}" "$TRAIN" "${DIST[@]}" --batch-size 2 --zero 3 --resume "$tmp/d/step_00000002" \
    --log-json "$tmp/d3.json" --save-model "$tmp/d3.bin" >"$tmp/d3.log" 2>&1
"$CMP" --compare-logs "$tmp/d_tail.json" "$tmp/d3.json" 1e-5 "${P}gpu_zero1_np2_to_zero3_np2_losses_follow"
"$CMP" --compare-models "$tmp/d.bin" "$tmp/d3.bin" 1e-5 "${P}gpu_zero1_np2_to_zero3_np2_final_weights_match"
[ "$quick" = 1 ] && exit 0  # (the sanitizer build: the 2-rank checkpoint's continuation on one rank is the normal build's)
"$TRAIN" "${DIST[@]}" --batch-size 4 --resume "$tmp/d/step_00000002" --log-json "$tmp/d1.json" \
    --save-model "$tmp/d1.bin" >"$tmp/d1.log" 2>&1
"$CMP" --compare-logs "$tmp/d_tail.json" "$tmp/d1.json" 1e-5 "${P}gpu_zero1_np2_to_one_process_losses_follow"
