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
# shards over data x context), cp 2 x tp 2 over NCCL, and cp 2 x pp 2 (each
# micro-batch in flight keeping its own gathered K and V): 1f1b over NCCL's
# fused lists with evaluation and sampling, zb1p at ZeRO-1 with --recompute
# full over MPI, and (4 layers, against their own one-GPU run) interleaved
# over 2 chunks over MPI; cp 2 over MPI with --attention cudnn (each chunk one
# cuDNN graph, the causal mask bottom-right aligned) with evaluation and
# samples. The start line names the layout. The cp 2 run's checkpoint at step
# 2 resumes on one GPU. A sequence that does not split into 2 x cp chunks ends
# with one line and exit 2. EMULATED=1 (tests/run_tests.sh): on the emulated trainer
# (tests/gpu_trainer.sh; every NCCL message longer than its buffer, as in
# tests/test_pipeline_gpu.sh, so that a pipeline's sends and receives outside
# one NCCL group deadlock); the sanitizer builds run the first layout alone.
# SKIPs without train_gptcu, a GPU, or MPI.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
. tests/gpu_trainer.sh context_parallel_gpu
need_mpi "${P}context_parallel_gpu" 300
[ "$EMULATED" = 1 ] && export NCCL_BUFFSIZE=2048 && MPIRUN+=(-x NCCL_BUFFSIZE)
# NCCL wants a GPU per rank: with fewer, those runs go over --comm mpi
nccl4=$(comm_for 4)

# the data, COMMON (cp 2: chunks of 8 positions, off the kernels' 64-row tiles), EVAL, the one-GPU run
layout_reference cp_
expect_usage_error cp_seq_len_not_divisible 'seq-len 30 is not a multiple of 2 x cp = 4' "$TRAIN" "${COMMON[@]}" --cp 2 \
    --seq-len 30 --total-batch-tokens 0

# eval_matches_one_gpu NAME: the run's 3 evaluation losses within 1e-3 of the one GPU's, its 2 samples the same text
eval_matches_one_gpu() {
    check "cp_${1}_eval_losses_match_one_gpu" \
        "[ \$(val_losses '$tmp/ref.json' | wc -l) = 3 ] && paste <(val_losses '$tmp/ref.json') <(val_losses '$tmp/$1.json') | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (NF != 2 || d > 1e-3 * \$1) bad = 1 } END { exit bad }'"
    check "cp_${1}_samples_match_one_gpu" \
        "[ \$(grep -ac -- '---- sample' '$tmp/$1.log') = 2 ] && diff <(grep -a -A2 -- '---- sample' '$tmp/ref.log') <(grep -a -A2 -- '---- sample' '$tmp/$1.log') >/dev/null"
}
compare_layout cp2_mpi 2 1e-3 --cp 2 --comm mpi "${EVAL[@]}" --ckpt-dir "$tmp/ck" --ckpt-every 2
eval_matches_one_gpu cp2_mpi
check cp_says_its_layout "grep -aq '^ranks: 2 .* x context 2 |' '$tmp/cp2_mpi.log' && grep -aq '^context parallel: 2 ranks a sequence, each 16 positions' '$tmp/cp2_mpi.log'"
[ $quick = 1 ] && exit 0
# cuDNN's attention: each chunk one graph of its 8 queries against the keys up to its end (8 to 32, the mask
# bottom-right aligned), dK | dV merged in fp32; with evaluation and sampling
compare_layout cp2_cudnn 2 1e-3 --cp 2 --comm mpi --attention cudnn "${EVAL[@]}"
eval_matches_one_gpu cp2_cudnn
compare_layout dp2_cp2_zero3 4 1e-3 --cp 2 --zero 3 --batch-size 2 --comm $nccl4
compare_layout cp2_tp2 4 1e-3 --cp 2 --tp 2 --comm $nccl4
compare_layout cp2_pp2_1f1b 4 1e-3 --cp 2 --pp 2 --comm $nccl4 "${EVAL[@]}"
eval_matches_one_gpu cp2_pp2_1f1b
compare_layout cp2_pp2_zb1p_zero1_rcfull 4 1e-3 --cp 2 --pp 2 --pp-schedule zb1p --zero 1 --recompute full --comm mpi

# --mem-limit-mb counts context parallel's device buffers: a cp 2 rank needs what one GPU needs at its shape
# (seq-len 16) and each layer's gathered K and V (4 x 32 positions x 2 x 64 bf16: 32768 B) and the shared
# buffers (the pieces in bf16, dK | dV in fp32 in both orders: 5 x 32768 B; the rank's wpe rows, bf16 and fp32:
# 16 x 64 x 6 B; the positions: 80 ints): 235840 B over 2 layers. A limit 0.02 MB under the cp 2 figure
# refuses it (every rank, exit 2) and lets the one-GPU run of that shape train.
needs_mb() { grep -ao 'needs [0-9.]* MB' "$1" | head -1 | awk '{ print $2 }'; }
"${MPIRUN[@]}" -np 2 "$TRAIN" "${COMMON[@]}" --cp 2 --comm mpi --mem-limit-mb 1 >"$tmp/mem_cp2.log" 2>&1
timeout 300 "$TRAIN" "${COMMON[@]}" --seq-len 16 --mem-limit-mb 1 >"$tmp/mem_one.log" 2>&1
cp_mb=$(needs_mb "$tmp/mem_cp2.log") one_mb=$(needs_mb "$tmp/mem_one.log")
check cp_memory_check_counts_context_buffers \
    "[ -n '$cp_mb' ] && [ -n '$one_mb' ] && awk 'BEGIN { d = $cp_mb - $one_mb - 0.235840; exit !(d < 0.011 && d > -0.011) }'" \
    "cp 2 needs ${cp_mb:-?} MB, one GPU at seq-len 16 ${one_mb:-?} MB"
limit=$(awk "BEGIN { print ${cp_mb:-0} - 0.02 }")
"${MPIRUN[@]}" -np 2 "$TRAIN" "${COMMON[@]}" --cp 2 --comm mpi --mem-limit-mb "$limit" >"$tmp/mem_cp2_under.log" 2>&1
rc=$?
check cp_memory_limit_under_the_figure_refused \
    "[ $rc -ne 0 ] && [ \$(grep -ac 'needs [0-9.]* MB on the GPU but --mem-limit-mb' '$tmp/mem_cp2_under.log') = 2 ]" \
    "exit $rc: $(head -c 300 "$tmp/mem_cp2_under.log")"
timeout 300 "$TRAIN" "${COMMON[@]}" --seq-len 16 --steps 1 --mem-limit-mb "$limit" >"$tmp/mem_one_under.log" 2>&1
rc=$?
check cp_memory_limit_under_the_figure_takes_one_gpu "[ $rc -eq 0 ]" "exit $rc: $(grep -a -m1 -i error "$tmp/mem_one_under.log")"

# the cp 2 checkpoint at step 2, resumed on one GPU: its weights follow the one-GPU run
resumed_on_one_gpu cp_ckpt_cp2

# interleaved (2 chunks a rank: 4 layers), against the one-GPU run of the 4-layer model
COMMON+=(--n-layer 4)
timeout 300 "$TRAIN" "${COMMON[@]}" --log-json "$tmp/ref.json" --save-model "$tmp/ref.bin" >"$tmp/ref4.log" 2>&1 ||
    fail reference_run_4_layers "$(tail -2 "$tmp/ref4.log")"
compare_layout cp2_pp2_interleaved 4 1e-3 --cp 2 --pp 2 --pp-schedule interleaved --virtual-stages 2 --comm mpi
