#!/usr/bin/env bash
# test_pipeline.sh: pipeline parallel on the CPU trainer (llmc/pipeline_cpu.h)
# under mpirun. Each layout trains 10 steps of the same global batch (8
# micro-batches a step) as one process: pp 2 with every schedule, pp 4 (1f1b
# and zb1p), pp 2 interleaved over 2 chunks, pp 2 with --pp-layers, and data 2
# x pipeline 2; the losses, gradient norms and final weights equal the single
# process to 1e-5 (the tied wte's two gradients are summed in another order,
# so the weights are not bit-identical). Evaluation and sampling through the
# stages give the same validation losses and samples. --pp-trace records what
# each rank executed, which must be the list --print-schedule prints.
# Checkpoints written on a pipeline resume on it bit for bit and on another
# layout (one process, or from one process onto 4 stages) to 1e-5. Layouts
# that do not fit end with one line and exit 2; a model over one process's
# --mem-limit-mb is refused there and starts on pp 2 under the same budget.
# SKIPs without MPI.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN=$BUILD/train_gpt
P=pipeline_
need_mpi pipeline 120

byte_corpus "$tmp" d 20000 llmc/*.h
# 4 layers; global batch 4 x 32 tokens x 8 micro-batches
COMMON=(--data-train "$tmp/d_train_*.bin" --n-layer 4 --n-embd 64 --n-head 4 --vocab-size 257 --max-seq-len 64
        --seq-len 32 --total-batch-tokens 1024 --steps 10 --lr 3e-4 --weight-decay 0.1 --seed 5 --peak-tflops 1
        --comm-timeout 60)
EVAL=(--data-val "$tmp/d_val_*.bin" --eval-every 5 --eval-batches 2 --sample-every 5 --sample-tokens 16)

"$TRAIN" "${COMMON[@]}" --batch-size 4 --log-json "$tmp/ref.json" --save-model "$tmp/ref.bin" >"$tmp/ref.log" 2>&1 ||
    { fail reference_run "$(tail -2 "$tmp/ref.log")"; exit 1; }

for schedule in 1f1b gpipe zb1p; do compare_layout "pp2_$schedule" 2 1e-5 --batch-size 4 --pp 2 --pp-schedule $schedule; done
compare_layout pp4_1f1b 4 1e-5 --batch-size 4 --pp 4
compare_layout pp4_zb1p 4 1e-5 --batch-size 4 --pp 4 --pp-schedule zb1p
compare_layout pp2_interleaved_v2 2 1e-5 --batch-size 4 --pp 2 --pp-schedule interleaved --virtual-stages 2
compare_layout pp2_layers_1_3 2 1e-5 --batch-size 4 --pp 2 --pp-layers 1,3
compare_layout dp2_pp2 4 1e-5 --batch-size 2 --pp 2
compare_layout dp2_pp2_zero1 4 1e-5 --batch-size 2 --pp 2 --zero 1
compare_layout dp2_pp2_interleaved_zero1 4 1e-5 --batch-size 2 --pp 2 --pp-schedule interleaved --virtual-stages 2 --zero 1
compare_layout dp2_pp2_zero2 4 1e-5 --batch-size 2 --pp 2 --zero 2
compare_layout dp2_pp2_zb1p_zero3 4 1e-5 --batch-size 2 --pp 2 --pp-schedule zb1p --zero 3
# the activation sets each rank's runtime held at most, of each chunk, are those it allocated, and rank 0's are the
# memory line's (the trainers' and the planner's count, pp_schedule.h's pp_rank_sets): every schedule, and pp 4
# interleaved over 2 chunks of 8 layers (2 steps: the end-of-run report needs one after the first)
"${MPIRUN[@]}" -np 4 "$TRAIN" "${COMMON[@]}" --n-layer 8 --steps 2 --batch-size 4 --pp 4 --pp-schedule interleaved \
    --virtual-stages 2 >"$tmp/pp4_interleaved_v2.log" 2>&1
for run in pp2_1f1b pp2_gpipe pp2_zb1p pp2_interleaved_v2 dp2_pp2_interleaved_zero1; do activation_sets_held $run 2; done
for run in pp4_1f1b pp4_zb1p pp4_interleaved_v2; do activation_sets_held $run 4; done
check dp2_pp2_says_its_layout "grep -aq '^ranks: 4 (mpirun launch, MPI on) | data parallel 2 x tensor 1 x pipeline 2' '$tmp/dp2_pp2.log'"
# where the steps' time goes: waiting for the neighbouring stage is bubble, the data group's reductions comm
python3 tests/step_times.py "$tmp/dp2_pp2_zero2.json" "${P}dp2_pp2_zero2" --steps 10 --ranks 4 --part fwd --part bwd \
    --part bubble --part comm

# evaluation and sampling run the stages in order: the same losses and text as one process
"$TRAIN" "${COMMON[@]}" "${EVAL[@]}" --batch-size 4 --log-json "$tmp/eval_ref.json" >"$tmp/eval_ref.log" 2>&1
"${MPIRUN[@]}" -np 2 "$TRAIN" "${COMMON[@]}" "${EVAL[@]}" --batch-size 4 --pp 2 --pp-schedule interleaved \
    --virtual-stages 2 --log-json "$tmp/eval_pp.json" --pp-trace "$tmp/trace" >"$tmp/eval_pp.log" 2>&1
# (to 1e-5: wte's two gradients add in another order, so the weights differ in the last bits)
check eval_losses_match_one_process \
    "[ \$(val_losses '$tmp/eval_ref.json' | wc -l) = 3 ] && paste <(val_losses '$tmp/eval_ref.json') <(val_losses '$tmp/eval_pp.json') | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (NF != 2 || d > 1e-5 * \$1) bad = 1 } END { exit bad }'"
check samples_match_one_process \
    "[ \$(grep -ac -- '---- sample' '$tmp/eval_pp.log') = 3 ] && diff <(grep -a -A2 -- '---- sample' '$tmp/eval_ref.log') <(grep -a -A2 -- '---- sample' '$tmp/eval_pp.log') >/dev/null"

# the runtime executed the lists --print-schedule prints, every step
"$TRAIN" "${COMMON[@]}" --batch-size 4 --pp 2 --pp-schedule interleaved --virtual-stages 2 --print-schedule 1 \
    >"$tmp/schedule.txt" 2>&1
for r in 0 1; do
    want=$(sed -n "s/^  actions rank $r://p" "$tmp/schedule.txt")
    steps=$(sed "s/^step [0-9]* rank $r://" "$tmp/trace.rank$r" | sort -u)
    check "trace_of_rank_${r}_is_its_list" "[ -n \"\$want\" ] && [ \"\$steps\" = \"\$want\" ] && [ \$(wc -l <'$tmp/trace.rank$r') = 10 ]" \
        "the executed actions differ from --print-schedule's: $(head -c 200 <<<"$steps")"
done
check print_schedule_bubble "grep -q 'bubble 0.0588 (theory 0.0588)' '$tmp/schedule.txt'"

# checkpoints: written at one layout, resumed at step 5 on the same layout (bit for bit against the
# uninterrupted run) and on another (to 1e-5 against the single process)
ckpt_run ck_pp2 2 --batch-size 4 --pp 2 --pp-schedule zb1p
resume_run ck_pp2_again ck_pp2 2 --batch-size 4 --pp 2 --pp-schedule zb1p
check ckpt_pp2_resumes_at_pp2_bit_for_bit "cmp -s '$tmp/ck_pp2.bin' '$tmp/ck_pp2_again.bin'"
check ckpt_pp2_resumed_losses_equal_uninterrupted \
    "[ -n \"\$(records_from '$tmp/ck_pp2_again.json' 5)\" ] && diff <(records_from '$tmp/ck_pp2.json' 5) <(records_from '$tmp/ck_pp2_again.json' 5) >/dev/null"
resume_run ck_pp2_to_pp1 ck_pp2 1 --batch-size 4
"$CMP" --compare-models "$tmp/ref.bin" "$tmp/ck_pp2_to_pp1.bin" 1e-5 "${P}ckpt_pp2_resumed_at_pp1_matches_one_process"
ckpt_run ck_dp2_pp2 4 --batch-size 2 --pp 2 --pp-schedule interleaved --virtual-stages 2 --zero 1
resume_run ck_dp2_pp2_again ck_dp2_pp2 4 --batch-size 2 --pp 2 --pp-schedule interleaved --virtual-stages 2 --zero 1
check ckpt_dp2_pp2_zero1_resumes_bit_for_bit "cmp -s '$tmp/ck_dp2_pp2.bin' '$tmp/ck_dp2_pp2_again.bin'"
ckpt_run ck_one 1 --batch-size 4
resume_run ck_one_to_pp4 ck_one 4 --batch-size 4 --pp 4
"$CMP" --compare-models "$tmp/ref.bin" "$tmp/ck_one_to_pp4.bin" 1e-5 "${P}ckpt_one_process_resumed_at_pp4_matches"

# layouts that do not fit: one line, exit 2
expect_usage_error more_stages_than_layers 'more than the model.s 4 layers' \
    "$TRAIN" "${COMMON[@]}" --pp 8 --print-schedule 1
expect_usage_error pp_layers_that_do_not_add_up "adds up to 3 layers; the model has 4" \
    "$TRAIN" "${COMMON[@]}" --pp 2 --pp-layers 1,2 --print-schedule 1
expect_usage_error interleaved_micro_batches 'multiple of --pp' \
    "$TRAIN" "${COMMON[@]}" --pp 2 --pp-schedule interleaved --virtual-stages 2 --total-batch-tokens 384 --batch-size 4 \
    --print-schedule 1
"${MPIRUN[@]}" -np 3 "$TRAIN" "${COMMON[@]}" --batch-size 4 --pp 2 >"$tmp/np3.log" 2>&1
rc=$?
check rejects_world_not_data_times_pipeline "[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -aq '3 ranks do not split into tensor-parallel 1 x pipeline-parallel 2' '$tmp/np3.log'" \
    "exit $rc: $(grep -a -m1 error "$tmp/np3.log")"
expect_usage_error pipeline_flags_without_pp 'need --pp 2 or more' "$TRAIN" "${COMMON[@]}" --virtual-stages 2

# the case a pipeline is for: at B 1 the weights, gradients and AdamW state alone (3.65 MB) exceed a 3.5 MB
# --mem-limit-mb, so one process is refused before it allocates; each of pp 2's ranks needs at most 2.93 MB
# with its activations, so pp 2 under the same budget starts (--steps 0: set up, allocated, no step)
BUDGET=(--batch-size 1 --total-batch-tokens 128 --mem-limit-mb 3.5 --steps 0)
expect_usage_error one_process_over_its_mem_limit \
    'the run needs 4.40 MB of memory per rank .* but --mem-limit-mb 3.5 allows 3.50 MB; .*--pp' \
    "$TRAIN" "${COMMON[@]}" "${BUDGET[@]}"
"${MPIRUN[@]}" -np 2 "$TRAIN" "${COMMON[@]}" "${BUDGET[@]}" --pp 2 >"$tmp/pp2_budget.log" 2>&1
rc=$?
check pp2_starts_under_the_mem_limit_one_process_exceeds \
    "[ $rc -eq 0 ] && grep -aq '^memory per rank' '$tmp/pp2_budget.log'" \
    "exit $rc: $(grep -a -m1 error "$tmp/pp2_budget.log")"
