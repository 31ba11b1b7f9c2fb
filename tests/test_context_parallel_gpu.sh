#!/usr/bin/env bash
# test_context_parallel_gpu.sh: context parallelism on the GPU trainer (--cp,
# llmc/context_parallel.cuh: each rank holds chunks i and 2cp-1-i of every
# sequence, K and V all-gathered for our flash attention with query offsets,
# dK and dV reduce-scattered) under mpirun, against the one-GPU run of the same
# global batch over 4 steps (2 micro-batches a step): losses, gradient norms
# and final weights to 1e-3 (bf16 activations; dK and dV summed in fp32 over
# the ranks and rounded once, K and V gathered exactly, as in
# tests/test_tensor_parallel_gpu.sh): cp 2 over the staged MPI backend with
# evaluation losses and samples, data 2 x cp 2 at ZeRO-3 over NCCL (ZeRO's
# shards over data x context), cp 2 x tp 2 over NCCL. The start line names the
# layout. The cp 2 run's checkpoint at step 2 resumes on one GPU. --attention cudnn and --pp with --cp, and a sequence that does not
# split into 2 x cp chunks, end with one line and exit 2. EMULATED=1
# (tests/run_tests.sh): on the emulated trainer (tests/gpu_trainer.sh); the
# sanitizer builds run the first layout alone. SKIPs without train_gptcu, a
# GPU, or MPI.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
. tests/gpu_trainer.sh context_parallel_gpu
need_mpi "${P}context_parallel_gpu" 300
# NCCL wants a GPU per rank: with fewer, those runs go over --comm mpi
nccl4=$(comm_for 4)

# the data, COMMON (cp 2: chunks of 8 positions, off the kernels' 64-row tiles), EVAL, the one-GPU run
layout_reference cp_
expect_usage_error cp_cudnn_refused '--attention cudnn has no query offset here' "$TRAIN" "${COMMON[@]}" --cp 2 \
    --attention cudnn
expect_usage_error cp_pp_refused "the GPU trainer's pipeline does not run context parallel yet" "$TRAIN" \
    "${COMMON[@]}" --cp 2 --pp 2
expect_usage_error cp_seq_len_not_divisible 'seq-len 30 is not a multiple of 2 x cp = 4' "$TRAIN" "${COMMON[@]}" --cp 2 \
    --seq-len 30 --total-batch-tokens 0

compare_layout cp2_mpi 2 1e-3 --cp 2 --comm mpi "${EVAL[@]}" --ckpt-dir "$tmp/ck" --ckpt-every 2
check cp_cp2_eval_losses_match_one_gpu \
    "[ \$(val_losses '$tmp/ref.json' | wc -l) = 3 ] && paste <(val_losses '$tmp/ref.json') <(val_losses '$tmp/cp2_mpi.json') | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (NF != 2 || d > 1e-3 * \$1) bad = 1 } END { exit bad }'"
check cp_cp2_samples_match_one_gpu \
    "[ \$(grep -ac -- '---- sample' '$tmp/cp2_mpi.log') = 2 ] && diff <(grep -a -A2 -- '---- sample' '$tmp/ref.log') <(grep -a -A2 -- '---- sample' '$tmp/cp2_mpi.log') >/dev/null"
check cp_says_its_layout "grep -aq '^ranks: 2 .* x context 2 |' '$tmp/cp2_mpi.log' && grep -aq '^context parallel: 2 ranks a sequence, each 16 positions' '$tmp/cp2_mpi.log'"
[ $quick = 1 ] && exit 0
compare_layout dp2_cp2_zero3 4 1e-3 --cp 2 --zero 3 --batch-size 2 --comm $nccl4
compare_layout cp2_tp2 4 1e-3 --cp 2 --tp 2 --comm $nccl4

# the cp 2 checkpoint at step 2, resumed on one GPU: its weights follow the one-GPU run
resumed_on_one_gpu cp_ckpt_cp2
