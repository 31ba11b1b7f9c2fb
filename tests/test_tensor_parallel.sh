#!/usr/bin/env bash
# test_tensor_parallel.sh: tensor parallelism on the CPU trainer (llmc/gpt_cpu.h,
# llmc/tensor_parallel.h) under mpirun, with up to 8 ranks, against the
# single-process run of the same global batch over 10 steps (losses, gradient
# norms and final weights to 1e-5 relative: the row-parallel products and the
# vocabulary's softmax add their partial sums in another order; --eps 1e-4 as
# in tests/test_distributed_gpu.sh, since AdamW would turn the rounding noise of
# gradients that are zero but for it, the key bias's, into full steps): tp 2, tp 4,
# tp 2 with sequence parallel, tp 2 x pp 2, data 2 x tp 2 x pp 2 at ZeRO-1
# and ZeRO-3 (sequence parallel, zb1p); evaluation losses and samples on tp 4
# and tp 2 x pp 2 are the single process's. Each communication pattern on its own
# (build/tests/test_tp_layers on 2 and 4 ranks). Checkpoints written on one
# layout resume on another (tp 2 to one process and back, tp 2 x pp 2 to data
# 4) following the uninterrupted run to 1e-5, and a tp 2 one on tp 2 bit for
# bit; --save-model from any layout writes the whole llm.c file (compared
# above). The memory line's activations are docs/distributed.md's formula. Layouts
# that do not fit end with one line and exit 2. SKIPs without MPI.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN=$BUILD/train_gpt
P=tp_
need_mpi "tensor parallel" 120

byte_corpus "$tmp" d 20000 llmc/*.h
# 4 layers of 4 heads; global batch 4 x 32 tokens x 4 micro-batches
COMMON=(--data-train "$tmp/d_train_*.bin" --n-layer 4 --n-embd 64 --n-head 4 --vocab-size 257 --max-seq-len 64
        --seq-len 32 --total-batch-tokens 512 --steps 10 --lr 1e-3 --eps 1e-4 --weight-decay 0.1 --seed 5
        --peak-tflops 1 --comm-timeout 60)

for n in 2 4; do
    "${MPIRUN[@]}" -np $n "$BUILD/tests/test_tp_layers" >"$tmp/layers$n.log" 2>&1
    rc=$?
    npass=$(grep -c '^PASS' "$tmp/layers$n.log")
    check "layers_on_${n}_ranks" "[ $rc -eq 0 ] && [ $npass -eq $((12 * n)) ] && ! grep -q '^FAIL' '$tmp/layers$n.log'" \
        "exit $rc, $npass PASS lines: $(grep -m2 '^FAIL' "$tmp/layers$n.log" | tr '\n' ' ')"
done

# evaluation and sampling (on some layouts): vocabulary-parallel losses and draws
EVAL=(--data-val "$tmp/d_val_*.bin" --eval-every 5 --eval-batches 2 --sample-every 5 --sample-tokens 16)
"$TRAIN" "${COMMON[@]}" "${EVAL[@]}" --batch-size 4 --log-json "$tmp/ref.json" --save-model "$tmp/ref.bin" >"$tmp/ref.log" 2>&1 ||
    { fail reference_run "$(tail -2 "$tmp/ref.log")"; exit 1; }

compare_layout tp2 2 1e-5 --batch-size 4 --tp 2
compare_layout tp4 4 1e-5 --batch-size 4 --tp 4 "${EVAL[@]}"
eval_matches tp4
compare_layout tp2_sp 2 1e-5 --batch-size 4 --tp 2 --sequence-parallel 1
compare_layout tp2_pp2 4 1e-5 --batch-size 4 --tp 2 --pp 2 "${EVAL[@]}"
eval_matches tp2_pp2
compare_layout dp2_tp2_pp2_zero1 8 1e-5 --batch-size 2 --tp 2 --pp 2 --zero 1
compare_layout dp2_tp2_pp2_zero3_sp_zb1p 8 1e-5 --batch-size 2 --tp 2 --pp 2 --zero 3 --sequence-parallel 1 --pp-schedule zb1p
python3 tests/step_times.py "$tmp/tp2.json" "${P}tp2" --steps 10 --ranks 2 --part fwd --part bwd --part comm
check says_its_layout "grep -aq '^ranks: 8 (mpirun launch, MPI on) | data parallel 2 x tensor 2 x pipeline 2' '$tmp/dp2_tp2_pp2_zero1.log'"

# the memory line's activations (what the trainer allocates) are the formula of docs/distributed.md: per
# layer N C + 2 Nl + 3 N C/tp + N C/tp + B (NH/tp) T^2 + Nl C + N C + 2 Nl + 8 N C/tp + Nl C floats, once
# Nl C + N C + 2 Nl + N Vp/tp + N + N C + Nl C + N C + 4 N C/tp + 3 N C/tp + N C/tp + N C, and the attention
# scratch T^2 a thread (Nl = N/tp under sequence parallel, else N; N = B T)
act_mb() { sed -n 's/.*| activations \([0-9.]*\) MB.*/\1/p' "$1" | head -1; }
formula_mb() {  # TP SP
    awk -v tp="$1" -v sp="$2" 'BEGIN { B = 4; T = 32; N = B * T; C = 64; NH = 4; L = 4; Vp = 384
        Nl = sp ? N / tp : N
        layer = N*C + 2*Nl + 3*N*C/tp + N*C/tp + B*(NH/tp)*T*T + Nl*C + N*C + 2*Nl + 8*N*C/tp + Nl*C
        once = Nl*C + N*C + 2*Nl + N*Vp/tp + N + N*C + Nl*C + N*C + 4*N*C/tp + 3*N*C/tp + N*C/tp + N*C
        printf "%.3f", 4 * (L * layer + once + T * T) / 1e6 }'
}
for run in "tp2 2 0" "tp2_sp 2 1" "tp4 4 0"; do
    set -- $run
    check "memory_line_activations_${1}_are_the_formula" "[ '$(act_mb "$tmp/$1.log")' = '$(formula_mb $2 $3)' ]" \
        "printed $(act_mb "$tmp/$1.log") MB, the formula $(formula_mb $2 $3) MB"
done

# checkpoints across layouts (tests/lib.sh's ckpt_run and resume_run); resumed runs follow the single process:
# NAME FROM RANKS FLAGS...: resume_run, then its losses from step 5 and its final weights against the reference's
resume_follows() {
    resume_run "$@"
    grep '"loss"' "$tmp/ref.json" | awk -F'[:,]' '$2 > 5' >"$tmp/ref_from_5.json"  # (steps done: 6..)
    "$CMP" --compare-logs "$tmp/ref_from_5.json" "$tmp/$1.json" 1e-5 "${P}$1_losses_follow"
    "$CMP" --compare-models "$tmp/ref.bin" "$tmp/$1.bin" 1e-5 "${P}$1_weights_match"
}
ckpt_run ck_tp2 2 --batch-size 4 --tp 2
resume_follows ck_tp2_again ck_tp2 2 --batch-size 4 --tp 2
check ckpt_tp2_resumes_at_tp2_bit_for_bit "cmp -s '$tmp/ck_tp2.bin' '$tmp/ck_tp2_again.bin'"
resume_follows ck_tp2_to_tp1 ck_tp2 1 --batch-size 4
ckpt_run ck_tp1 1 --batch-size 4
resume_follows ck_tp1_to_tp2 ck_tp1 2 --batch-size 4 --tp 2 --sequence-parallel 1
ckpt_run ck_tp2_pp2 4 --batch-size 4 --tp 2 --pp 2 --zero 1
resume_follows ck_tp2_pp2_to_dp4 ck_tp2_pp2 4 --batch-size 1 --zero 3
# a manifest whose file layout does not split this model: one line, exit 2
mkdir -p "$tmp/bad.ck" && cp -r "$tmp/ck_tp2.ck/step_00000005" "$tmp/bad.ck/"
python3 tests/ckpt_edit.py "$tmp/bad.ck/step_00000005" '"tp": 2, "tp_rank": 1' '"tp": 3, "tp_rank": 1'
expect_usage_error a_file_layout_that_does_not_split_the_model "layout does not split this model" \
    "$TRAIN" "${COMMON[@]}" --batch-size 4 --resume "$tmp/bad.ck/step_00000005"

# layouts that do not fit: one line, exit 2
expect_usage_error n_head_not_divisible_by_tp 'n-head is not a multiple of the tensor-parallel size' \
    "$TRAIN" "${COMMON[@]}" --tp 3 --print-schedule 0
expect_usage_error sequence_parallel_seq_len "seq-len 30 is not a multiple of --tp 4" \
    "$TRAIN" "${COMMON[@]}" --tp 4 --sequence-parallel 1 --seq-len 30 --total-batch-tokens 0
expect_usage_error sequence_parallel_without_tp 'needs --tp 2 or more' "$TRAIN" "${COMMON[@]}" --sequence-parallel 1
"${MPIRUN[@]}" -np 6 "$TRAIN" "${COMMON[@]}" --batch-size 4 --tp 4 >"$tmp/np6.log" 2>&1
rc=$?
check rejects_world_not_data_times_tensor_times_pipeline \
    "[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -aq '6 ranks do not split into tensor-parallel 4 x pipeline-parallel 1' '$tmp/np6.log'" \
    "exit $rc: $(grep -a -m1 error "$tmp/np6.log")"
