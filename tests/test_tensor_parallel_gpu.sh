#!/usr/bin/env bash
# test_tensor_parallel_gpu.sh: tensor parallelism on the GPU trainer
# (llmc/gpt_gpu.cuh with llmc/tensor_parallel.cuh) under mpirun, against the
# one-GPU run of the same global batch: tp 2 and tp 2 with sequence parallel,
# each over the staged MPI backend and over NCCL, sequence parallel with
# --recompute full, data 2 x tp 2 at ZeRO-3 (NCCL) and at ZeRO-1 with sequence
# parallel (MPI), tp 2 x pp 2 (zb1p, NCCL): losses, gradient norms and
# final weights. To 1e-3: bf16 activations, and a row-parallel layer's
# partial sums are fp32 and rounded to bf16 once summed over the group where
# one GPU rounds its one product (and --eps 1e-4 as in
# tests/test_distributed_gpu.sh). Evaluation losses and samples (drawn
# over the vocabulary slices) on tp 2 and tp 2 x pp 2 are the one GPU's. A checkpoint written at tp 2
# resumes on one GPU. The memory line's activations of a layer are
# docs/distributed.md's formula (with and without sequence parallel and
# recompute). Layouts that do not divide the model end with one line and
# exit 2. EMULATED=1 (tests/run_tests.sh, every build): on the emulated trainer
# (tests/gpu_trainer.sh); the sanitizer builds run the first layout alone
# (CI's time). SKIPs without train_gptcu, a GPU, or MPI.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
. tests/gpu_trainer.sh tensor_parallel_gpu
need_mpi "${P}tensor_parallel_gpu" 300
# NCCL wants a GPU per rank: with fewer, those runs go over --comm mpi
nccl2=$(comm_for 2) nccl4=$(comm_for 4)

# the data, COMMON, EVAL (the first layout's runs: vocabulary-parallel losses and draws), the one-GPU run
layout_reference tp_
# layouts that do not fit: one line, exit 2
expect_usage_error tp_n_head_not_divisible 'n-head is not a multiple of the tensor-parallel size' \
    "$TRAIN" "${COMMON[@]}" --tp 3
expect_usage_error tp_sequence_parallel_seq_len "seq-len 30 is not a multiple of --tp 4" \
    "$TRAIN" "${COMMON[@]}" --n-head 4 --tp 4 --sequence-parallel 1 --seq-len 30 --total-batch-tokens 0

# NAME: its evaluation losses and samples are the one GPU's
val_losses() { grep -o '"val_loss":[0-9.]*' "$1" | cut -d: -f2; }
eval_matches() {
    check "tp_${1}_eval_losses_match_one_gpu" \
        "[ \$(val_losses '$tmp/ref.json' | wc -l) = 3 ] && paste <(val_losses '$tmp/ref.json') <(val_losses '$tmp/$1.json') | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (NF != 2 || d > 1e-3 * \$1) bad = 1 } END { exit bad }'"
    check "tp_${1}_samples_match_one_gpu" \
        "[ \$(grep -ac -- '---- sample' '$tmp/$1.log') = 2 ] && diff <(grep -a -A2 -- '---- sample' '$tmp/ref.log') <(grep -a -A2 -- '---- sample' '$tmp/$1.log') >/dev/null"
}
compare_layout tp2_mpi 2 1e-3 --tp 2 --comm mpi "${EVAL[@]}"
eval_matches tp2_mpi
[ $quick = 1 ] && exit 0
compare_layout tp2_nccl 2 1e-3 --tp 2 --comm $nccl2
compare_layout tp2_sp_mpi 2 1e-3 --tp 2 --sequence-parallel 1 --comm mpi
compare_layout tp2_sp_nccl 2 1e-3 --tp 2 --sequence-parallel 1 --comm $nccl2 --ckpt-dir "$tmp/ck" --ckpt-every 2
compare_layout tp2_sp_recompute_full 2 1e-3 --tp 2 --sequence-parallel 1 --recompute full --comm $nccl2
compare_layout dp2_tp2_zero3 4 1e-3 --tp 2 --zero 3 --batch-size 2 --comm $nccl4
compare_layout tp2_pp2_zb1p 4 1e-3 --tp 2 --pp 2 --pp-schedule zb1p --comm $nccl4 "${EVAL[@]}"
eval_matches tp2_pp2_zb1p
compare_layout dp2_tp2_sp_zero1_mpi 4 1e-3 --tp 2 --sequence-parallel 1 --zero 1 --batch-size 2 --comm mpi
# the memory line's activations of a layer (what gpu_gpt_init lays out) are the formula of
# docs/distributed.md: 2 bytes x (ln1, ln2: N C each; qkv 3 N C/tp; atty N C/tp; residual2, residual3:
# Nl C each; fch 4 N C/tp; fch_gelu 4 N C/tp unless --recompute selective) + 4 bytes x (LayerNorm means
# and rstds 4 Nl; the attention's log-sum-exp B (NH/tp) T); under --recompute full only residual3;
# Nl = N/tp under sequence parallel, else N; N = B T
layer_mb() { sed -n 's/.*(a layer \([0-9.]*\) MB.*/\1/p' "$1" | head -1; }
layer_formula_mb() {  # TP SP RECOMPUTE
    awk -v tp="$1" -v sp="$2" -v rc="$3" 'BEGIN { B = 4; T = 32; N = B * T; C = 64; NH = 2
        Nl = sp ? N / tp : N; gelu = rc == "none" ? 4 * N * C / tp : 0
        layer = 2 * (2 * N * C + 3*N*C/tp + N*C/tp + 2*Nl*C + 4*N*C/tp + gelu) + 4 * (4*Nl + B*(NH/tp)*T)
        printf "%.3f", (rc == "full" ? 2 * Nl * C : layer) / 1e6 }'
}
for run in "ref 1 0 none" "tp2_mpi 2 0 none" "tp2_sp_mpi 2 1 none" "tp2_sp_recompute_full 2 1 full"; do
    set -- $run
    check "tp_memory_line_layer_activations_${1}_are_the_formula" \
        "[ '$(layer_mb "$tmp/$1.log")' = '$(layer_formula_mb $2 $3 $4)' ]" \
        "printed $(layer_mb "$tmp/$1.log") MB, the formula $(layer_formula_mb $2 $3 $4) MB"
done
check tp_says_its_layout "grep -aq '^ranks: 2 (mpirun launch, MPI on) | data parallel 1 x tensor 2 x pipeline 1' '$tmp/tp2_mpi.log'"

# the tp 2 checkpoint at step 2, resumed on one GPU: its weights follow the one-GPU run
resumed_on_one_gpu tp_ckpt_tp2
