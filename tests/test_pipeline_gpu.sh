#!/usr/bin/env bash
# test_pipeline_gpu.sh: pipeline parallel on the GPU trainer (llmc/pipeline_gpu.cuh
# over llmc/pipeline.h's runtime) under mpirun, against the single-process run
# of the same global batch (4 micro-batches a step): pp 2 with 1f1b over the
# staged MPI backend, zb1p and 1f1b over NCCL (their fused lists), interleaved
# over 2 chunks over MPI, and data 2 x pipeline 2 at ZeRO-1 and (zb1p) ZeRO-3
# over NCCL: the losses, gradient norms and final weights. Emulated, every
# message is longer than NCCL's buffer (NCCL_BUFFSIZE=2048, which the
# emulation reads as NCCL does), as a real run's activations are (megabytes):
# a send completes only once its receive has started, so a communication
# group whose sends and receives are not one NCCL group deadlocks, and the
# emulator's watchdog ends the run naming the calls. The runtime executes
# what --print-schedule prints (fused over NCCL); evaluation and sampling go
# through the stages; a checkpoint written at pp 2 resumes there bit for bit
# and on one process to tolerance; interleaved over NCCL, whose fused lists
# deadlock, is refused.
# Tolerances (1e-4): with the pipeline the arithmetic is one process's (the
# bf16 rounding of each weight is seeded by its global index) but for the
# order in which the tied wte's two gradients add up and in which the
# gradient norm's squares add (each stage its own, then over the stages): a
# last-bit change of the clip scale that the bf16 rounding of the weights
# makes visible after a few steps (1e-5 to 2e-5 here, depending on the
# compiler's code); with 2 data ranks the micro-batches' gradients also sum in
# another order.
# EMULATED=1 (tests/run_tests.sh, every build): on the emulated trainer
# (tests/gpu_trainer.sh); the sanitizer builds run the first layout alone (CI's
# time). SKIPs without train_gptcu, a GPU, or MPI.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
. tests/gpu_trainer.sh pipeline_gpu
need_mpi "${P}pipeline_gpu" 300
[ "$EMULATED" = 1 ] && export NCCL_BUFFSIZE=2048 && MPIRUN+=(-x NCCL_BUFFSIZE)
# NCCL wants a GPU per rank: on a machine with fewer, a layout's NCCL runs go over --comm mpi
nccl2=$(comm_for 2) nccl4=$(comm_for 4)

byte_corpus "$tmp" d 20000 llmc/*.h
# 4 layers (head size 32); global batch 2 x 32 tokens x 4 micro-batches (as many as a 2-stage schedule needs
# to fill and drain, and the emulated trainer's time goes with the tokens); 4 steps: a checkpoint at step 3
# resumed for the last one
COMMON=(--data-train "$tmp/d_train_*.bin" --n-layer 4 --n-embd 64 --n-head 2 --vocab-size 257 --max-seq-len 64
        --seq-len 32 --total-batch-tokens 256 --steps 4 --lr 1e-3 --eps 1e-4 --weight-decay 0.1 --seed 5
        --peak-tflops 1 --comm-timeout 120)

timeout 300 "$TRAIN" "${COMMON[@]}" --batch-size 2 --log-json "$tmp/ref.json" --save-model "$tmp/ref.bin" \
    >"$tmp/ref.log" 2>&1 || { fail reference_run "$(tail -2 "$tmp/ref.log")"; exit 1; }

# (compare_layout: the checks are named pipeline_NAME_..._match_one_process)
LAYOUT_PREFIX=pipeline_
compare_layout pp2_1f1b_mpi 2 1e-4 --batch-size 2 --pp 2 --comm mpi
python3 tests/step_times.py "$tmp/pp2_1f1b_mpi.json" "${P}pipeline_pp2_1f1b_mpi" --steps 4 --ranks 2 --part fwd \
    --part bwd --part bubble
[ $quick = 1 ] && exit 0
compare_layout pp2_zb1p_nccl 2 1e-4 --batch-size 2 --pp 2 --pp-schedule zb1p --comm $nccl2 --pp-trace "$tmp/trace"
compare_layout pp2_1f1b_nccl 2 1e-4 --batch-size 2 --pp 2 --comm $nccl2
compare_layout pp2_interleaved_mpi 2 1e-4 --batch-size 2 --pp 2 --pp-schedule interleaved --virtual-stages 2 --comm mpi
compare_layout dp2_pp2_zero1_nccl 4 1e-4 --batch-size 1 --pp 2 --zero 1 --comm $nccl4
compare_layout dp2_pp2_zb1p_zero3_nccl 4 1e-4 --batch-size 1 --pp 2 --pp-schedule zb1p --zero 3 --comm $nccl4
# the activation sets each rank held at most are those it allocated and its memory line counts (fused lists too)
for run in pp2_zb1p_nccl pp2_1f1b_nccl pp2_interleaved_mpi dp2_pp2_zero1_nccl; do activation_sets_held $run 2; done
[ $nccl2 = nccl ] &&
    check pipeline_says_its_schedule "grep -aq '^pipeline: 2 stages over 2 ranks | schedule zb1p (receives fused: NCCL)' '$tmp/pp2_zb1p_nccl.log'"

# the runtime executed the fused lists --print-schedule prints for NCCL, every step
"$TRAIN" "${COMMON[@]}" --batch-size 2 --pp 2 --pp-schedule zb1p --comm $nccl2 --print-schedule 1 >"$tmp/schedule.txt" 2>&1
for r in 0 1; do
    want=$(sed -n "s/^  actions rank $r://p" "$tmp/schedule.txt")
    steps=$(sed "s/^step [0-9]* rank $r://" "$tmp/trace.rank$r" 2>/dev/null | sort -u)
    check "pipeline_trace_of_rank_${r}_is_its_fused_list" \
        "[ -n \"\$want\" ] && [ \"\$steps\" = \"\$want\" ] && [ \$(wc -l <'$tmp/trace.rank$r') = 4 ]" \
        "the executed actions differ from --print-schedule's: $(head -c 200 <<<"$steps")"
done

# evaluation and sampling through the stages: the single process's losses and text
EVAL=(--data-val "$tmp/d_val_*.bin" --eval-every 2 --eval-batches 2 --sample-every 2 --sample-tokens 16)
"$TRAIN" "${COMMON[@]}" "${EVAL[@]}" --batch-size 2 --log-json "$tmp/eval_ref.json" >"$tmp/eval_ref.log" 2>&1
"${MPIRUN[@]}" -np 2 "$TRAIN" "${COMMON[@]}" "${EVAL[@]}" --batch-size 2 --pp 2 --comm $nccl2 \
    --log-json "$tmp/eval_pp.json" >"$tmp/eval_pp.log" 2>&1
check "pipeline_eval_losses_match_one_process" \
    "[ \$(val_losses '$tmp/eval_ref.json' | wc -l) = 3 ] && paste <(val_losses '$tmp/eval_ref.json') <(val_losses '$tmp/eval_pp.json') | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (NF != 2 || d > 1e-5 * \$1) bad = 1 } END { exit bad }'"
check "pipeline_samples_match_one_process" \
    "[ \$(grep -ac -- '---- sample' '$tmp/eval_pp.log') = 3 ] && diff <(grep -a -A2 -- '---- sample' '$tmp/eval_ref.log') <(grep -a -A2 -- '---- sample' '$tmp/eval_pp.log') >/dev/null"

# checkpoints: written at pp 2 every 3 steps, resumed at step 3 there (bit for bit against the
# uninterrupted run) and on one process (to the single process's weights)
"${MPIRUN[@]}" -np 2 "$TRAIN" "${COMMON[@]}" --batch-size 2 --pp 2 --pp-schedule zb1p --comm $nccl2 \
    --ckpt-dir "$tmp/ck.ck" --ckpt-every 3 --save-model "$tmp/ck.bin" --log-json "$tmp/ck.json" >"$tmp/ck.log" 2>&1 ||
    fail ckpt_pp2_runs "$(grep -a -m2 -i error "$tmp/ck.log" | tr '\n' ' ')"
for to in pp2 pp1; do
    mkdir -p "$tmp/$to.ck" && cp -r "$tmp/ck.ck/step_00000003" "$tmp/$to.ck/" 2>/dev/null
    if [ $to = pp2 ]; then
        "${MPIRUN[@]}" -np 2 "$TRAIN" "${COMMON[@]}" --batch-size 2 --pp 2 --pp-schedule zb1p --comm $nccl2 \
            --ckpt-dir "$tmp/$to.ck" --resume auto --save-model "$tmp/$to.bin" --log-json "$tmp/$to.json" >"$tmp/$to.log" 2>&1
    else
        "$TRAIN" "${COMMON[@]}" --batch-size 2 --ckpt-dir "$tmp/$to.ck" --resume auto --save-model "$tmp/$to.bin" \
            --log-json "$tmp/$to.json" >"$tmp/$to.log" 2>&1
    fi
    check "pipeline_ckpt_${to}_resumes_at_step_3" "grep -aq 'resume: continuing at step 3' '$tmp/$to.log'" \
        "$(grep -a -m2 -i 'error\|resume' "$tmp/$to.log" | tr '\n' ' ')"
done
check "pipeline_ckpt_pp2_resumes_at_pp2_bit_for_bit" "cmp -s '$tmp/ck.bin' '$tmp/pp2.bin'"
"$CMP" --compare-models "$tmp/ref.bin" "$tmp/pp1.bin" 1e-4 "${P}pipeline_ckpt_pp2_resumed_on_one_process_matches"

# interleaved over NCCL: its fused lists deadlock; refused in one line a rank
"${MPIRUN[@]}" -np 2 "$TRAIN" "${COMMON[@]}" --batch-size 2 --pp 2 --pp-schedule interleaved --virtual-stages 2 \
    --comm nccl >"$tmp/inl.log" 2>&1
rc=$?
check "pipeline_refuses_interleaved_over_nccl" \
    "[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -aqE 'interleaved over NCCL: .* deadlock|built without NCCL' '$tmp/inl.log'" \
    "exit $rc: $(grep -a -m1 error "$tmp/inl.log")"
