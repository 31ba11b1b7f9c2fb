#!/usr/bin/env bash
# test_ckpt_cost.sh: the CPU trainer's two ways of making a checkpoint's staging copy (llmc/ckpt_writer.h,
# docs/checkpoints.md): with no core spare for the writer (--ckpt-writer-cores 0) the AdamW update writes it;
# with one (1) the writer thread copies the state beside the next step, and the next update waits for that copy.
# Each way: the start-up line says which; the checkpoints have the same bytes (every data file and manifest; one
# process, and 2 ranks at ZeRO-1 and ZeRO-3); a resume is bit-exact; each checkpoint's cost record adds up to the
# step lines (tests/ckpt_cost_check.py). A writer whose copy is held back (copy-MS, a writer that lost its core)
# makes the next update wait: the same bytes, the wait in the stall.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0  # (one training thread: the two ways differ only by the flag)
byte_corpus "$tmp/data" src 0 <(head -c 5000 train_gpt.c)
RUN=(--data-train "$tmp/data/src_train_*.bin" --n-layer 2 --n-embd 64 --n-head 4 --vocab-size 257 --max-seq-len 64
     --seq-len 32 --batch-size 4 --total-batch-tokens 256 --peak-tflops 0.1 --steps 12 --lr 1e-3 --weight-decay 0.1
     --shuffle 1)
# same_checkpoints A B: A's step directories (one at least) are in B, each file (data and manifest) the same bytes
same_checkpoints() {
    [ -n "$(ls "$1" | grep '^step_')" ] &&
        for d in "$1"/step_*; do diff -r "$d" "$2/${d##*/}" >/dev/null || return 1; done
}

# --- one process, each way: 3 checkpoints, their cost records, a resume at step 4 ---
line0="checkpoint: no core spare beside 1 training thread a rank (--ckpt-writer-cores 0; [0-9]* cores): the writer runs at nice 19, on their idle time; the AdamW update makes each checkpoint's copy"
line1="checkpoint: the writer has 1 core beside 1 training thread a rank (--ckpt-writer-cores 1; [0-9]* cores): it copies each checkpoint beside the next step"
for cores in 0 1; do
    "$CPU" "${RUN[@]}" --ckpt-writer-cores $cores --ckpt-dir "$tmp/ck$cores" --ckpt-every 4 --ckpt-keep 0 \
        --log-json "$tmp/c$cores.json" --save-model "$tmp/c$cores.bin" >"$tmp/c$cores.log" 2>&1
    rc=$?
    line=line$cores
    check "--ckpt-writer-cores $cores: the run exits 0 and its start-up line says who makes the copy" \
        '[ $rc -eq 0 ] && grep -aq "^${!line}\$" "$tmp/c$cores.log"' \
        "rc=$rc: $(grep -a '^checkpoint: .*core\|error' "$tmp/c$cores.log" | head -2)"
    check "--ckpt-writer-cores $cores: each checkpoint's cost record adds up to the step lines" \
        'python3 tests/ckpt_cost_check.py "$tmp/c$cores.json" 4 8 12' \
        "cost records: $(grep -a '"ckpt":"cost"' "$tmp/c$cores.json" | tr '\n' ' ')"
    "$CPU" "${RUN[@]}" --ckpt-writer-cores $cores --resume "$tmp/ck$cores/step_00000004" \
        --save-model "$tmp/r$cores.bin" >"$tmp/r$cores.log" 2>&1
    check "--ckpt-writer-cores $cores: a resume at step 4 ends on the same weights, to the bit" \
        'cmp -s "$tmp/c$cores.bin" "$tmp/r$cores.bin"' "$(grep -a error "$tmp/r$cores.log" | head -1)"
done
check "the update's copy and the writer's copy: the same checkpoints, byte for byte (steps 4, 8, 12)" \
    'same_checkpoints "$tmp/ck0" "$tmp/ck1"'

# --- the writer's copy held back 1.5 s: the next update waits for it (the same bytes; the wait is in the stall of
# steps 4 and 8; the last checkpoint's copy and write are waited for whole, by design) ---
LLMC_TEST_CKPT_FAULT=copy-1500:0 "$CPU" "${RUN[@]}" --ckpt-writer-cores 1 --ckpt-dir "$tmp/held" \
    --ckpt-every 4 --log-json "$tmp/held.json" >"$tmp/held.log" 2>&1
rc=$?
stalls=$(grep -ao '"ckpt":"staged","stall_ms":[0-9.]*' "$tmp/held.json" | cut -d: -f3 | tr '\n' ' ')
check "a held-back writer copy: the update waits for it (stalls $stalls ms), the checkpoints the same bytes" \
    '[ $rc -eq 0 ] && same_checkpoints "$tmp/held" "$tmp/ck0" &&
     awk -v s="$stalls" "BEGIN {exit !(split(s, a, \" \") == 3 && a[1] >= 1000 && a[2] >= 1000)}"' \
    "rc=$rc $(grep -a 'error' "$tmp/held.log" | head -1)"

# --- 2 ranks, ZeRO-1 and ZeRO-3 (the weights in each rank's shard), each way: the same bytes ---
need_mpi "checkpoints on 2 ranks, each way" 120
for zero in 1 3; do
    for cores in 0 1; do
        "${MPIRUN[@]}" -np 2 "$CPU" "${RUN[@]}" --batch-size 2 --bucket-mb 0.02 --zero $zero --steps 8 \
            --ckpt-writer-cores $cores --ckpt-dir "$tmp/z$zero.$cores" --ckpt-every 4 >"$tmp/z$zero.$cores.log" 2>&1
    done
    check "ZeRO-$zero on 2 ranks: the update's copy and the writer's copy write the same checkpoints, byte for byte" \
        'same_checkpoints "$tmp/z$zero.0" "$tmp/z$zero.1" && [ -f "$tmp/z$zero.1/step_00000008/rank_00001.bin" ]' \
        "$(grep -ah 'error' "$tmp/z$zero.0.log" "$tmp/z$zero.1.log" | head -1)"
done
