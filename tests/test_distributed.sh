#!/usr/bin/env bash
# test_distributed.sh: the CPU trainer under mpirun on 2 and 4 ranks. For each
# ZeRO stage 0..3, the loss and gradient norm of 10 steps and the final weights
# equal the single-process run of the same global batch (to 1e-5 relative);
# the memory line follows the ZeRO formula; a rank that hangs ends the job by
# --comm-timeout with a message naming the rank and the operation, and a rank
# that dies ends it too. SKIPs without MPI (build or mpirun).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
. tests/zero_memory_check.sh
TRAIN=$BUILD/train_gpt
need_mpi distributed

byte_corpus "$tmp" d 0 llmc/*.h
# global batch 4 x 32 tokens x 2 accumulation steps; small buckets: many per segment
COMMON=(--data-train "$tmp/d_train_*.bin" --n-layer 2 --n-embd 64 --n-head 4 --vocab-size 257 --max-seq-len 64
        --seq-len 32 --total-batch-tokens 256 --steps 10 --lr 3e-4 --weight-decay 0.1 --seed 5 --peak-tflops 1
        --bucket-mb 0.02 --comm-timeout 60)

"$TRAIN" "${COMMON[@]}" --batch-size 4 --log-json "$tmp/ref.json" --save-model "$tmp/ref.bin" >"$tmp/ref.log" 2>&1 ||
    { echo "FAIL: distributed_reference_run ($(tail -2 "$tmp/ref.log"))"; exit 1; }

for np in 2 4; do
    for zero in 0 1 2 3; do
        name="zero${zero}_np${np}"
        out=$tmp/$name
        timeout 120 "${MPIRUN[@]}" -np "$np" "$TRAIN" "${COMMON[@]}" --batch-size $((4 / np)) --zero "$zero" \
            --log-json "$out.json" --save-model "$out.bin" >"$out.log" 2>&1
        rc=$?
        if [ $rc -ne 0 ]; then
            echo "FAIL: ${name}_runs (exit $rc: $(tail -3 "$out.log" | tr '\n' ' '))"
            continue
        fi
        "$CMP" --compare-logs "$tmp/ref.json" "$out.json" 1e-5 "${name}_loss_and_norm_match_one_process"
        "$CMP" --compare-models "$tmp/ref.bin" "$out.bin" 1e-5 "${name}_weights_match_one_process"
        check_zero_memory_line "$name" "$out.log" "$zero" "$np" 4 4 8  # fp32 params, grads; AdamW m, v
    done
done

# a rank that hangs: the others give up after --comm-timeout, naming themselves and the operation
expect_job_ends hung_rank_ends_job_within_comm_timeout \
    'rank 0: all-reduce of [0-9]* bytes on the data group (2 ranks) did not complete within 3 s' \
    env LLMC_TEST_FAULT=hang:1 "${MPIRUN[@]}" -x LLMC_TEST_FAULT -np 2 "$TRAIN" "${COMMON[@]}" --batch-size 2 \
    --comm-timeout 3
# a rank that dies: the job ends with an error instead of hanging
expect_job_ends dead_rank_ends_job '' \
    env LLMC_TEST_FAULT=die:1 "${MPIRUN[@]}" -x LLMC_TEST_FAULT -np 2 "$TRAIN" "${COMMON[@]}" --batch-size 2 \
    --comm-timeout 10

# launcher variables without an MPI runtime behind them: a clear error, not a hang
WORLD_SIZE=2 RANK=0 timeout 30 "$TRAIN" "${COMMON[@]}" --batch-size 2 >"$tmp/env.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q 'RANK says rank 0 of 2, but MPI sees rank 0 of 1' "$tmp/env.log"; then
    echo "PASS: launcher_env_without_mpi_runtime_is_a_usage_error"
else
    echo "FAIL: launcher_env_without_mpi_runtime_is_a_usage_error (exit $rc: $(tail -2 "$tmp/env.log"))"
fi
