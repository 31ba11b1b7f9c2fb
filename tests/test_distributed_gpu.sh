#!/usr/bin/env bash
# test_distributed_gpu.sh: the GPU trainer's ZeRO stages. On one process (the
# device self backend, no MPI needed): ZeRO 1, 2 and 3 -- sharded state,
# gradient slots, weights gathered into slots -- match ZeRO-0 over 10 steps.
# Under mpirun -np 2 on one GPU (--comm mpi: MPI staged through host memory;
# also --comm nccl with two GPUs, as NCCL wants one per rank), for ZeRO 0-3
# (over MPI ZeRO 0 and 3 alone when NCCL runs them all):
# the loss and gradient norm of 10 steps and the final weights match the
# single-process run of the same global batch (the micro-batches and the
# gradient sums differ in order: 1e-3 and 5e-4, see below), ZeRO 1-3 match
# ZeRO-0 closely (same batches, sums in another order: losses and norms to
# 5e-4, as the emulated run shows 8.8e-5 at ZeRO 2-3, which add a rank's
# running shard in before each micro-step's reduce-scatter; weights to 1e-4),
# only rank 0 prints, and the memory line follows the ZeRO
# formula; scripts/run_multi_gpu.sh and scripts/train_slurm.sbatch (through an
# srun that is mpirun) give the same run (2 steps of it); over NCCL, a rank that hangs or dies
# ends the job (--comm-timeout: comm_nccl.cuh's watchdog); emulated, two ranks
# on a node of one GPU are refused at start over NCCL. SKIPs without
# train_gptcu, a GPU, or MPI (build or mpirun).
# EMULATED=1 (tests/run_tests.sh, every build): the same checks on the
# emulated trainer (tests/gpu_trainer.sh).
# --eps 1e-4, not the default 1e-8: some gradients are zero but for rounding
# (the key bias's: softmax ignores a shift of a query's scores), and in bf16
# that noise is ~1e-7, above 1e-8, so AdamW turns it into full lr steps whose
# signs depend on the last bit of every sum. ZeRO 2-3 sum in another order
# than ZeRO-0 and the stochastic rounding turns a last-bit difference of a
# master weight into a bf16 one now and then, after which those weights walk
# apart by up to 2 x sum(lr) = 3e-3 while the losses agree to 1e-6 (the CPU
# trainer shows it with --eps 1e-20: 1.5e-3 between ZeRO-0 and ZeRO-2 on 2
# ranks; 1.7e-6 with the noise at 1% of eps). With eps = 1e-4 the noise moves
# a weight by under 1e-2 lr a step.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
. tests/zero_memory_check.sh
. tests/gpu_trainer.sh distributed_gpu

byte_corpus "$tmp" d 0 llmc/*.h
# global batch 2 x 64 tokens x 2 accumulation steps (np 2: 1 x 64 a rank; the emulated trainer's time goes
# with the tokens); small buckets: many, the last one uneven; 3 layers: the layers take turns in the slots
# (2 for gradients, 3 for weights)
COMMON=(--data-train "$tmp/d_train_*.bin" --n-layer 3 --n-embd 128 --n-head 2 --vocab-size 257 --max-seq-len 64
        --seq-len 64 --total-batch-tokens 256 --steps 10 --lr 3e-4 --eps 1e-4 --weight-decay 0.1 --seed 5
        --peak-tflops 1 --bucket-mb 0.05 --comm-timeout 120)

timeout 300 "$TRAIN" "${COMMON[@]}" --batch-size 2 --log-json "$tmp/ref.json" --save-model "$tmp/ref.bin" \
    >"$tmp/ref.log" 2>&1 || { echo "FAIL: ${P}distributed_gpu_reference_run (exit $?: $(tail -2 "$tmp/ref.log"))"; exit 1; }
for zero in 1 2 3; do
    name="${P}gpu_zero${zero}_one_process"
    if timeout 300 "$TRAIN" "${COMMON[@]}" --batch-size 2 --zero "$zero" --log-json "$tmp/$name.json" \
            --save-model "$tmp/$name.bin" >"$tmp/$name.log" 2>&1; then
        "$CMP" --compare-logs "$tmp/ref.json" "$tmp/$name.json" 1e-4 "${name}_loss_and_norm_match_zero0"
        "$CMP" --compare-models "$tmp/ref.bin" "$tmp/$name.bin" 1e-4 "${name}_weights_match_zero0"
    else
        echo "FAIL: ${name}_runs ($(tail -3 "$tmp/$name.log" | tr '\n' ' '))"
    fi
done

need_mpi "${P}distributed_gpu_np2"
MPIRUN+=(-np 2)
# NCCL wants a GPU per rank: two GPUs, or the emulator's (whose NCCL is MPI underneath)
COMMS=(mpi)
[ "$(comm_for 2)" = nccl ] && COMMS+=(nccl)
# quick (the emulated trainer in a sanitizer build, run by hand: CI's sanitizer builds leave this script to
# the normal build): the NCCL set alone, at ZeRO 0 and 3 (the whole buffer's all-reduce; sharded weights
# gathered into slots and gradients reduce-scattered out of them, which covers stage 2's path too); the
# normal build runs every stage over NCCL, and ZeRO 0 and 3 over staged MPI where NCCL runs too (between them every
# collective the stages use: the ZeRO logic above the backend is the same for both)
for comm in "${COMMS[@]}"; do
sfx=$([ "$comm" = nccl ] && echo _nccl)
ZEROS=(0 1 2 3)
{ [ $quick = 1 ] || { [ "$comm" = mpi ] && [ ${#COMMS[@]} -gt 1 ]; }; } && ZEROS=(0 3)
[ $quick = 1 ] && [ "$comm" = mpi ] && continue
for zero in "${ZEROS[@]}"; do
    name="${P}gpu_zero${zero}_np2$sfx"
    out=$tmp/$name
    timeout 300 "${MPIRUN[@]}" "$TRAIN" "${COMMON[@]}" --batch-size 1 --zero "$zero" --comm "$comm" \
        --log-json "$out.json" --save-model "$out.bin" >"$out.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAIL: ${name}_runs (exit $rc: $(tail -3 "$out.log" | tr '\n' ' '))"
        continue
    fi
    # weights: max |difference| / max |weight| (1, the LayerNorm weights): no weight moves more than
    # sum(lr) = 1.5e-3 in these 10 steps, so 1e-2 passed a rank that never updated its shard; 5e-4
    # fails it (half the weights move more, the most 1.49e-3 on the CPU trainer), while the
    # micro-batch shapes move a weight by under 1e-6 (a bf16 flip of one activation changes a
    # 256-term gradient sum by ~2.5e-4 relative: 2.5e-4 x sum(lr)); the CPU trainer here: 1.2e-7
    "$CMP" --compare-logs "$tmp/ref.json" "$out.json" 1e-3 "${name}_loss_and_norm_match_one_process"
    "$CMP" --compare-models "$tmp/ref.bin" "$out.bin" 5e-4 "${name}_weights_match_one_process"
    if [ "$(grep -c '^model:' "$out.log")" -eq 1 ] && grep -q '^ranks: 2 (mpirun launch, MPI on)' "$out.log"; then
        echo "PASS: ${name}_only_rank_0_prints"
    else
        echo "FAIL: ${name}_only_rank_0_prints ($(grep -c '^model:' "$out.log") model lines)"
    fi
    check_zero_memory_line "$name" "$out.log" "$zero" 2 2 4 12  # bf16 params, fp32 grads, master + m + v
    [ "$zero" -eq 0 ] && continue
    z0=$tmp/${P}gpu_zero0_np2$sfx
    if [ -f "$z0.json" ]; then
        "$CMP" --compare-logs "$z0.json" "$out.json" 5e-4 "${name}_matches_zero0_np2$sfx"
        "$CMP" --compare-models "$z0.bin" "$out.bin" 1e-4 "${name}_weights_match_zero0_np2$sfx"
    fi
done
done

# A rank that hangs at its first collective (ZeRO-3: the first layer's all-gather, in the forward): the
# other's compute stream waits for that gather on the device and its host blocks reading the loss back,
# where no comm_wait looks at the deadline; comm_nccl.cuh's watchdog still ends the job after
# --comm-timeout, naming the rank and the operation. A rank that dies ends the job too.
if [[ " ${COMMS[*]} " == *" nccl "* ]]; then
    expect_job_ends gpu_zero3_np2_nccl_rank_that_hangs_ends_job \
        'rank 0: all-gather of [0-9]* bytes on the data group (2 ranks) did not complete within 3 s' \
        env LLMC_TEST_FAULT=hang:1 "${MPIRUN[@]}" -x LLMC_TEST_FAULT "$TRAIN" "${COMMON[@]}" --batch-size 1 --zero 3 \
        --comm nccl --comm-timeout 3
    expect_job_ends gpu_zero3_np2_nccl_rank_that_dies_ends_job '' \
        env LLMC_TEST_FAULT=die:1 "${MPIRUN[@]}" -x LLMC_TEST_FAULT "$TRAIN" "${COMMON[@]}" --batch-size 1 --zero 3 \
        --comm nccl --comm-timeout 3
fi

# More ranks on the node than GPUs (the emulator's LLMC_EMU_DEVICES=1): NCCL takes a GPU a rank, so its
# set-up is refused at start, every rank in one line naming both counts (--comm mpi shares the GPU: the
# runs above over MPI on one GPU)
if [ "$EMULATED" = 1 ] && [ $quick = 0 ]; then
    LLMC_EMU_DEVICES=1 timeout 60 "${MPIRUN[@]}" -x LLMC_EMU_DEVICES "$TRAIN" "${COMMON[@]}" --batch-size 1 \
        --comm nccl >"$tmp/ranks.log" 2>&1
    rc=$?
    said=$(grep -o 'rank [01]: 2 ranks on this node but 1 GPU: NCCL needs a GPU for each rank' "$tmp/ranks.log" |
        sort -u | wc -l)
    check "gpu_np2_nccl_on_one_gpu_refused_at_start" '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$said" -eq 2 ] &&
        ! grep -q "^step" "$tmp/ranks.log"' "exit $rc, $said ranks said so: $(head -c 300 "$tmp/ranks.log")"
fi

# The run scripts with these flags give the one-process run of them: scripts/run_multi_gpu.sh (mpirun, one rank
# a GPU, NCCL) and scripts/train_slurm.sbatch (its srun line, through an srun that starts the ranks with
# mpirun: the flags it passes and its environment, not Slurm). 2 steps (the scripts' flags are what is checked;
# the runs above check the 10 steps' arithmetic), against the one-process run of 2 steps
if [ "$EMULATED" = 1 ] || [ "$(gpu_count)" -ge 2 ]; then
    [ $quick = 1 ] && exit 0  # (CI's time: the normal build runs them)
    COMMON+=(--steps 2)
    timeout 300 "$TRAIN" "${COMMON[@]}" --batch-size 2 --log-json "$tmp/ref2.json" >"$tmp/ref2.log" 2>&1 ||
        fail distributed_gpu_reference_run_2_steps "$(tail -2 "$tmp/ref2.log")"
    mkdir -p "$tmp/bin"
    printf '#!/bin/sh\necho "$*" >"%s/srun.args"\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec mpirun --allow-run-as-root --oversubscribe -np 2 "$@"\n' \
        "$tmp" >"$tmp/bin/srun"
    chmod +x "$tmp/bin/srun"
    for script in run_multi_gpu train_slurm; do
        name="${P}${script}_script_np2"
        if [ $script = run_multi_gpu ]; then
            TRAINER=$TRAIN ZERO=1 THREADS=1 TIME_LIMIT=280 timeout 300 scripts/run_multi_gpu.sh 2 -- "${COMMON[@]}" --batch-size 1 \
                --log-json "$tmp/$name.json" >"$tmp/$name.log" 2>&1
        else
            PATH="$tmp/bin:$PATH" TRAINER=$TRAIN ZERO=1 SLURM_CPUS_PER_TASK=1 CKPT_DIR="$tmp/ckpt" timeout 300 bash scripts/train_slurm.sbatch \
                "${COMMON[@]}" --batch-size 1 --log-json "$tmp/$name.json" >"$tmp/$name.log" 2>&1
        fi
        rc=$?
        if [ $rc -eq 0 ] && grep -q '^ranks: 2 (mpirun launch, MPI on) | data parallel 2 x tensor 1 x pipeline 1 x context 1 | ZeRO-1 | comm nccl' "$tmp/$name.log"; then
            "$CMP" --compare-logs "$tmp/ref2.json" "$tmp/$name.json" 1e-3 "${name}_matches_one_process"
        else
            echo "FAIL: ${name}_runs (exit $rc: $(grep -m1 '^ranks:' "$tmp/$name.log") $(tail -2 "$tmp/$name.log" | tr '\n' ' '))"
        fi
    done
    # a rank that exits badly ends the others at once; whatever is left ends COMM_TIMEOUT + 60 s after the first exit
    if grep -q -- "--kill-on-bad-exit=1 --wait=660 " "$tmp/srun.args" 2>/dev/null; then
        echo "PASS: ${P}train_slurm_script_srun_ends_the_job_when_a_rank_fails_and_660_s_after_the_first_exits"
    else
        echo "FAIL: ${P}train_slurm_script_srun_ends_the_job_when_a_rank_fails_and_660_s_after_the_first_exits (srun got: $(cat "$tmp/srun.args" 2>/dev/null))"
    fi
fi
