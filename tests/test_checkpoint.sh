#!/usr/bin/env bash
# test_checkpoint.sh: checkpoints of the CPU trainer (llmc/checkpoint.h), one
# process. A run stopped at step k and resumed equals the uninterrupted run to
# the last bit (losses, gradient norms, validation losses, samples, final
# weights), with --shuffle, gradient accumulation, an epoch boundary inside the
# resumed part and one before it, evaluation and sampling; --ckpt-keep; the
# JSON log's stall records and each checkpoint's cost record against the step
# lines; scripts/bench_ckpt.sh at its tiny size; bad checkpoints (a checksum, a missing or truncated
# file, another model or version, a conflicting flag) are one line and exit 2; --resume auto skips a damaged newest one; the
# writer killed at each write boundary, or the whole run killed from outside,
# resumes to the same final weights; a failed write stops the run and leaves
# the previous checkpoint; the data file's O_DIRECT write and its buffered
# fallback (and /dev/shm) give the same bytes. The one-process runs have the writer thread make each staging copy
# (--ckpt-writer-cores 1), the 2-rank runs the AdamW update (0); tests/test_ckpt_cost.sh compares the two. The
# corpus is this repository's own source.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN="$BUILD/train_gpt"
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0

# 3000 training tokens: 93 samples of 32, 23 batches of 4, so an epoch ends inside step 12 (2 micro-steps a step)
byte_corpus "$tmp/data" src 2000 <(head -c 5000 train_gpt.c)
RUN=(--data-train "$tmp/data/src_train_*.bin" --data-val "$tmp/data/src_val_*.bin" --n-layer 2 --n-embd 64 --n-head 4
     --vocab-size 257 --max-seq-len 64 --seq-len 32 --batch-size 4 --total-batch-tokens 256 --peak-tflops 0.1
     --steps 16 --lr 1e-3 --weight-decay 0.1 --shuffle 1 --eval-every 3 --eval-batches 2 --sample-every 5
     --sample-tokens 8 --ckpt-writer-cores 1)  # (one process: the writer thread makes each copy; DIST below: the update)

# --- the uninterrupted run, checkpointing every 4 steps, keeping all ---
"$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/ck" --ckpt-every 4 --ckpt-keep 0 --log-json "$tmp/full.json" \
    --save-model "$tmp/full.bin" >"$tmp/full.log" 2>&1
rc=$?
check "uninterrupted run with checkpoints exits 0" '[ $rc -eq 0 ]' "rc=$rc: $(tail -2 "$tmp/full.log")"
dirs=$(cd "$tmp/ck" 2>/dev/null && ls | tr '\n' ' ')
check "a checkpoint every 4 steps and 'latest' ($dirs)" \
    '[ "$dirs" = "latest lock step_00000004 step_00000008 step_00000012 step_00000016 " ] && [ "$(cat "$tmp/ck/latest")" = step_00000016 ]'
epochs=$(grep -ao '"epoch": [0-9]*' "$tmp/ck/step_00000016/manifest.json")
check "the run crossed an epoch boundary ($epochs at step 16)" '[ "$epochs" = "\"epoch\": 1" ]'
progress='"elapsed_s":[0-9.]*,"tokens_seen":[0-9]*}$'  # (as every record but the run's first)
nstaged=$(grep -c '^{"step":[0-9]*,"ckpt":"staged","stall_ms":[0-9.]*,'"$progress" "$tmp/full.json")
ncommit=$(grep -c '^{"step":[0-9]*,"ckpt":"committed","bytes":[0-9]*,"seconds":[0-9.]*,'"$progress" "$tmp/full.json")
check "the JSON log records each checkpoint's stall and commit, with elapsed time and tokens seen" \
    '[ "$nstaged" -eq 4 ] && [ "$ncommit" -eq 4 ]' "$nstaged staged, $ncommit committed records"
staged_at=$(grep -an 'checkpoint step_00000004 staged' "$tmp/full.log" | cut -d: -f1)
committed_at=$(grep -an 'checkpoint .*step_00000004 committed' "$tmp/full.log" | cut -d: -f1)
check "'staged' is logged before 'committed', and nothing says 'saved' before then" \
    '[ -n "$staged_at" ] && [ -n "$committed_at" ] && [ "$staged_at" -lt "$committed_at" ] && ! grep -aqi "checkpoint.*saved" "$tmp/full.log"'

# each checkpoint's cost record adds up to the step lines (its steps, their summed "ms", the baseline, lost_ms,
# the stall: tests/ckpt_cost_check.py)
check "the JSON log's cost record of each checkpoint adds up to the step lines" \
    'python3 tests/ckpt_cost_check.py "$tmp/full.json" 4 8 12 16' \
    "cost records: $(grep -a '"ckpt":"cost"' "$tmp/full.json" | tr '\n' ' ')"

# --- stopped at step k and resumed: bit-exact ---
for k in 4 8 12; do
    "$TRAIN" "${RUN[@]}" --resume "$tmp/ck/$(printf step_%08d $k)" --log-json "$tmp/res$k.json" --save-model "$tmp/res$k.bin" \
        >"$tmp/res$k.log" 2>&1 || k=$k  # (the checks below say what went wrong)
    check "resumed at step $k: the same final weights, to the bit" 'cmp -s "$tmp/full.bin" "$tmp/res$k.bin"' \
        "$(grep -a error "$tmp/res$k.log" | head -1)"
    check "resumed at step $k: the same losses, norms and validation losses, to the bit" \
        'cmp -s <(records_from "$tmp/full.json" $k) <(records_from "$tmp/res$k.json" 0) && [ -s "$tmp/res$k.json" ]'
    check "resumed at step $k: the same samples" \
        'cmp -s <(samples_from "$tmp/full.log" $k) <(samples_from "$tmp/res$k.log" 0)'
done
check "the log comparison sees a difference (step 4 vs step 8 records)" \
    '! cmp -s <(records_from "$tmp/full.json" 4) <(records_from "$tmp/full.json" 8)'

# --- --ckpt-keep 2: only the newest two remain; compression ---
"$TRAIN" "${RUN[@]}" --steps 10 --ckpt-dir "$tmp/keep" --ckpt-every 2 --ckpt-keep 2 --ckpt-compress 3 >"$tmp/keep.log" 2>&1
dirs=$(cd "$tmp/keep" 2>/dev/null && ls | tr '\n' ' ')
check "--ckpt-keep 2 keeps the newest two ($dirs)" '[ "$dirs" = "latest lock step_00000008 step_00000010 " ]'
if grep -q '"compression": "zstd"' "$tmp/keep/step_00000010/manifest.json" 2>/dev/null; then
    "$TRAIN" "${RUN[@]}" --steps 10 --resume "$tmp/keep/step_00000008" --save-model "$tmp/keep.bin" >"$tmp/keep2.log" 2>&1
    "$TRAIN" "${RUN[@]}" --steps 10 --save-model "$tmp/ten.bin" >/dev/null 2>&1
    check "a zstd-compressed checkpoint resumes bit-exact" 'cmp -s "$tmp/keep.bin" "$tmp/ten.bin"'
else
    echo "SKIP: zstd-compressed checkpoints (built without zstd)"
fi

# --- bad checkpoints: one line naming the file, exit 2 ---
bad() { rm -rf "$tmp/bad"; cp -r "$tmp/ck/step_00000008" "$tmp/bad"; }
bad; printf 'X' | dd of="$tmp/bad/rank_00000.bin" bs=1 seek=1000 conv=notrunc 2>/dev/null
expect_usage_error "a data file whose checksum does not match" "rank_00000.bin: CRC32C" \
    "$TRAIN" "${RUN[@]}" --resume "$tmp/bad"
bad; truncate -s 1000 "$tmp/bad/rank_00000.bin"
expect_usage_error "a truncated data file" "rank_00000.bin: 1000 bytes, the manifest says" \
    "$TRAIN" "${RUN[@]}" --resume "$tmp/bad"
bad; rm "$tmp/bad/rank_00000.bin"
expect_usage_error "a missing data file" "rank_00000.bin: missing" "$TRAIN" "${RUN[@]}" --resume "$tmp/bad"
bad; rm "$tmp/bad/manifest.json"
expect_usage_error "a checkpoint without its manifest" "manifest.json: cannot read" "$TRAIN" "${RUN[@]}" --resume "$tmp/bad"
bad; sed -i 's/"version": 3,/"version": 4,/' "$tmp/bad/manifest.json"
expect_usage_error "a manifest of another format version" "format version 4" "$TRAIN" "${RUN[@]}" --resume "$tmp/bad"
bad; sed -i 's/"channels": 64}/"channels": 64,}/' "$tmp/bad/manifest.json"
expect_usage_error "a manifest that is not JSON" "manifest.json: JSON error" "$TRAIN" "${RUN[@]}" --resume "$tmp/bad"
expect_usage_error "a checkpoint of another model config" "a model with num_layers 2, this run's has 3" \
    "$TRAIN" "${RUN[@]}" --n-layer 3 --resume "$tmp/ck/step_00000008"
expect_usage_error "a checkpoint whose flags conflict with the command line, with the flag that matches" \
    "written with --lr 0.00100000005, this run has --lr 0.00200000009 (a resume keeps it: resume with --lr 0.00100000005)" \
    "$TRAIN" "${RUN[@]}" --lr 2e-3 --resume "$tmp/ck/step_00000008"
expect_usage_error "a checkpoint of another total batch, with the flag that matches" \
    "total batch of 256 tokens, this run has 128: resume with --total-batch-tokens 256" \
    "$TRAIN" "${RUN[@]}" --total-batch-tokens 128 --resume "$tmp/ck/step_00000008"
expect_usage_error "--resume auto without --ckpt-dir" "--ckpt-dir" "$TRAIN" "${RUN[@]}" --resume auto

# --- --resume auto: none (fresh, said), a damaged newest (skipped, said) ---
"$TRAIN" "${RUN[@]}" --steps 2 --ckpt-dir "$tmp/empty" --resume auto >"$tmp/fresh.log" 2>&1
check "--resume auto with no checkpoint starts fresh and says so" 'grep -q "no checkpoint in .*starting fresh" "$tmp/fresh.log"'
rm -rf "$tmp/auto"; cp -r "$tmp/ck" "$tmp/auto"
printf 'X' | dd of="$tmp/auto/step_00000016/rank_00000.bin" bs=1 seek=5000 conv=notrunc 2>/dev/null
rm "$tmp/auto/step_00000012/manifest.json"
"$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/auto" --resume auto --save-model "$tmp/auto.bin" >"$tmp/auto.log" 2>&1
nskip=$(grep -c '^resume: skipping .*step_000000\(16\|12\)' "$tmp/auto.log")
check "--resume auto skips a corrupt and an incomplete newest, one line each" '[ "$nskip" -eq 2 ]' "$nskip skip lines"
check "--resume auto takes the newest whole one and finishes bit-exact" \
    'grep -q "continuing at step 8" "$tmp/auto.log" && cmp -s "$tmp/auto.bin" "$tmp/full.bin"' "$(grep -a 'resume\|error' "$tmp/auto.log" | head -3)"

# --- the writer killed at each write boundary: --resume auto finishes with the same weights ---
for point in after-data before-manifest after-manifest after-rename; do
    rm -rf "$tmp/kill"
    (LLMC_TEST_CKPT_FAULT=$point:8 "$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/kill" --ckpt-every 4 >"$tmp/kill1.log" 2>&1; exit $?) \
        2>/dev/null  # (the shell's 'Killed' line)
    rc1=$?
    "$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/kill" --ckpt-every 4 --resume auto --save-model "$tmp/kill.bin" \
        >"$tmp/kill2.log" 2>&1
    rc2=$?
    from=$(grep -ao 'continuing at step [0-9]*' "$tmp/kill2.log")
    check "killed $point the step-8 checkpoint: resumes ($from) to the same final weights" \
        '[ $rc1 -eq 137 ] && [ $rc2 -eq 0 ] && cmp -s "$tmp/kill.bin" "$tmp/full.bin"' \
        "rc1=$rc1 rc2=$rc2 $(grep -a error "$tmp/kill2.log" | head -1)"
done

# --- a SIGKILL from outside in the middle of a run that checkpoints every step ---
rm -rf "$tmp/ext"
"$TRAIN" "${RUN[@]}" --steps 60 --ckpt-dir "$tmp/ext" --ckpt-every 1 --ckpt-keep 2 >"$tmp/ext1.log" 2>&1 &
pid=$!
# (up to 60 s: a sanitizer build on a loaded machine starts slowly)
for _ in $(seq 1200); do [ -f "$tmp/ext/latest" ] && grep -q 'step_000000[2-9]' "$tmp/ext/latest" && break; sleep 0.05; done
kill -KILL $pid 2>/dev/null
wait $pid 2>/dev/null
rc1=$?
"$TRAIN" "${RUN[@]}" --steps 60 --ckpt-dir "$tmp/ext" --ckpt-every 1 --resume auto --save-model "$tmp/ext.bin" \
    >"$tmp/ext2.log" 2>&1
"$TRAIN" "${RUN[@]}" --steps 60 --save-model "$tmp/ext_ref.bin" >/dev/null 2>&1
from=$(grep -ao 'continuing at step [0-9]*' "$tmp/ext2.log")
check "SIGKILL from outside mid-run ($from): resumes to the same final weights" \
    '[ $rc1 -eq 137 ] && [ -n "$from" ] && cmp -s "$tmp/ext.bin" "$tmp/ext_ref.bin"' "rc1=$rc1 $(grep -a error "$tmp/ext2.log" | head -1)"

# --- preemption: SIGTERM, SIGUSR1 or SIGINT (Ctrl-C) checkpoints at the next step boundary, waits for the commit,
# exits 75 (CKPT_EXIT_SIGNAL: what a job script requeues on) ---
for sig in TERM USR1 INT; do
    rm -rf "$tmp/pre" "$tmp/pre1.log"  # (the wait below must not read the last round's log)
    "$TRAIN" "${RUN[@]}" --steps 60 --ckpt-dir "$tmp/pre" --ckpt-every 50 >"$tmp/pre1.log" 2>&1 &
    pid=$!
    # the signal only once the handlers are in place (step 5 logged; up to 60 s on a loaded machine)
    for _ in $(seq 3000); do grep -q '^step    *5/60' "$tmp/pre1.log" 2>/dev/null && break; sleep 0.02; done
    kill -$sig $pid 2>/dev/null
    wait $pid
    rc1=$?
    at=$(grep -ao 'preemption signal received: checkpointing at step [0-9]*' "$tmp/pre1.log" | grep -o '[0-9]*$')
    "$TRAIN" "${RUN[@]}" --steps 60 --ckpt-dir "$tmp/pre" --ckpt-every 50 --resume auto --save-model "$tmp/pre.bin" \
        >"$tmp/pre2.log" 2>&1
    check "SIG$sig: checkpoints at the next step boundary ($at), commits, exits 75; --resume auto finishes bit-exact" \
        '[ $rc1 -eq 75 ] && [ -n "$at" ] && grep -q "step_0*$at committed" "$tmp/pre1.log" &&
         grep -q "continuing at step $at " "$tmp/pre2.log" && cmp -s "$tmp/pre.bin" "$tmp/ext_ref.bin"' \
        "rc1=$rc1 at=$at $(grep -a error "$tmp/pre1.log" "$tmp/pre2.log" | head -1)"
done

# --- a second Ctrl-C while the first one's checkpoint is written (the writer made slow) exits at once: the
# default SIGINT death (status 130), a line on stderr, no checkpoint claimed ---
rm -rf "$tmp/int2"
LLMC_TEST_CKPT_FAULT=slow-20000:1 "$TRAIN" "${RUN[@]}" --steps 60 --ckpt-dir "$tmp/int2" --ckpt-every 50 \
    >"$tmp/int2.log" 2>"$tmp/int2.err" &
pid=$!
for _ in $(seq 3000); do grep -q '^step    *5/60' "$tmp/int2.log" 2>/dev/null && break; sleep 0.02; done
kill -INT $pid 2>/dev/null
for _ in $(seq 3000); do grep -q 'staged' "$tmp/int2.log" 2>/dev/null && break; sleep 0.02; done
start=$SECONDS
kill -INT $pid 2>/dev/null
wait $pid
rc1=$?
check "a second SIGINT during the first one's checkpoint exits at once (status $rc1 after $((SECONDS - start)) s)" \
    '[ $rc1 -eq 130 ] && [ $((SECONDS - start)) -lt 10 ] && grep -q "interrupted again: exiting at once" "$tmp/int2.err" &&
     grep -q "Ctrl-C again exits at once" "$tmp/int2.log" && ! grep -q committed "$tmp/int2.log"' \
    "$(tail -c 300 "$tmp/int2.err")"

# --- a write that fails: one line naming the file, the .tmp removed, the previous checkpoint kept, exit != 0 ---
rm -rf "$tmp/full_disk"
LLMC_TEST_CKPT_FAULT=write-error:8 "$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/full_disk" --ckpt-every 4 >"$tmp/wf.out" 2>"$tmp/wf.err"
rc=$?
check "a failed write: one line naming the file and the error, exit non-zero" \
    '[ $rc -ne 0 ] && [ "$(wc -l <"$tmp/wf.err")" -eq 1 ] && grep -q "step_00000008.tmp/rank_00000.bin.*No space left" "$tmp/wf.err"' \
    "rc=$rc: $(head -c 300 "$tmp/wf.err")"
dirs=$(cd "$tmp/full_disk" 2>/dev/null && ls | tr '\n' ' ')
check "a failed write leaves the previous checkpoint and no .tmp ($dirs)" '[ "$dirs" = "latest lock step_00000004 " ]'

# --- a slow disk: the writer takes 800 ms (or more, below) more per checkpoint; the steps that run while it writes take what
# they take without checkpoints (the same steps of a run without --ckpt-dir; a loop that waited for the writer
# would add the 800 ms to one of them), and the commit is logged steps after the staging ---
# mean and max "ms" of steps 11..19 (the step-10 checkpoint is in flight; step 20 waits for it by design, and that
# wait is its ckpt time)
step_ms() { awk -F'"ms":' '/"loss"/ && !/"ckpt":"/ {split($1, a, "[:,]"); if (a[2] >= 11 && a[2] <= 19) {split($2, b, ","); s += b[1]; n++; if (b[1] > m) m = b[1]}} END {if (n) printf "%.1f %.1f %d", s / n, m, n}' "$1"; }
"$TRAIN" "${RUN[@]}" --steps 20 --log-json "$tmp/nock.json" >"$tmp/nock.log" 2>&1
# the writer's delay: 800 ms, or twice what steps 11-19 take without checkpoints where that is longer (a
# sanitizer build's steps), so the commit comes after step 19 whatever the build's speed
read -r base_mean base_max base_n <<<"$(step_ms "$tmp/nock.json")"
slow_ms=$(awk -v m="${base_mean:-0}" -v n="${base_n:-0}" 'BEGIN {d = int(2 * m * n); print (d > 800 ? d : 800)}')
LLMC_TEST_CKPT_FAULT=slow-$slow_ms:0 "$TRAIN" "${RUN[@]}" --steps 20 --ckpt-dir "$tmp/slow" --ckpt-every 10 \
    --log-json "$tmp/slow.json" >"$tmp/slow.log" 2>&1
rc=$?
read -r slow_mean slow_max slow_n <<<"$(step_ms "$tmp/slow.json")"
staged=$(grep -an 'checkpoint step_00000010 staged' "$tmp/slow.log" | cut -d: -f1)
last_in_flight=$(grep -an '^step  *19/20' "$tmp/slow.log" | cut -d: -f1)
committed=$(grep -an 'checkpoint .*step_00000010 committed' "$tmp/slow.log" | cut -d: -f1)
check "a slow writer ($slow_ms ms): steps 11-19 run while it writes, as fast as without checkpoints (mean ${slow_mean:-?} ms, max ${slow_max:-?} vs mean ${base_mean:-?}, max ${base_max:-?})" \
    '[ $rc -eq 0 ] && [ "${slow_n:-0}" -eq 9 ] && [ "${base_n:-0}" -eq 9 ] &&
     [ -n "$staged" ] && [ -n "$last_in_flight" ] && [ -n "$committed" ] &&
     [ "$staged" -lt "$last_in_flight" ] && [ "$last_in_flight" -lt "$committed" ] &&
     awk -v s="$slow_max" -v x="$base_max" "BEGIN {exit !(s < 2 * x + 300)}"' \
    "rc=$rc staged line ${staged:-none}, step 19 line ${last_in_flight:-none}, committed line ${committed:-none}"

# --- a long write says how far it got: a 20 MB data file (3 chunks of 8 MB) on a disk that takes 2.6 s a chunk:
# before the second chunk, 5.2 s in, the line with the 8 MB written ---
LLMC_TEST_CKPT_FAULT=crawl-2600:0 "$TRAIN" "${RUN[@]}" --n-embd 256 --n-head 4 --steps 1 --ckpt-dir "$tmp/crawl" \
    >"$tmp/crawl.log" 2>&1
rc=$?
check "a checkpoint write that takes seconds says how far it got (rank 0's file, MB and percent)" \
    '[ $rc -eq 0 ] && grep -aq "^checkpoint: writing .*/rank_00000.bin: 8 of 20 MB (41%) after 5 s$" "$tmp/crawl.log"' \
    "rc=$rc $(grep -a 'checkpoint' "$tmp/crawl.log" | tr '\n' ' ')"

# --- O_DIRECT: the raw data file goes direct where the file system takes it (its last partial block buffered); one
# that takes the flag but refuses the write (direct-refused) gets that chunk and the rest buffered; /dev/shm (tmpfs),
# where there is one, whichever it does: the same bytes each way, and each resumes ---
"$TRAIN" "${RUN[@]}" --steps 4 --ckpt-dir "$tmp/direct" >"$tmp/direct.log" 2>&1
rc1=$?
LLMC_TEST_CKPT_FAULT=direct-refused:0 "$TRAIN" "${RUN[@]}" --steps 4 --ckpt-dir "$tmp/refused" >"$tmp/refused.log" 2>&1
rc2=$?
"$TRAIN" "${RUN[@]}" --steps 5 --resume "$tmp/refused/step_00000004" >"$tmp/refused_resume.log" 2>&1
rc3=$?
how=$(grep -ao '(O_DIRECT;\|(through the page cache;' "$tmp/direct.log" | head -1)
check "the data file goes with O_DIRECT ($how), buffered where the write is refused, the same bytes, and resumes" \
    '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ "$how" = "(O_DIRECT;" ] &&
     grep -aq "(through the page cache;" "$tmp/refused.log" &&
     cmp -s "$tmp/direct/step_00000004/rank_00000.bin" "$tmp/refused/step_00000004/rank_00000.bin" &&
     cmp -s "$tmp/direct/step_00000004/manifest.json" "$tmp/refused/step_00000004/manifest.json"' \
    "rc=$rc1,$rc2,$rc3 $(grep -a 'committed\|error' "$tmp/direct.log" "$tmp/refused.log" "$tmp/refused_resume.log" | tr '\n' ' ')"
if [ -d /dev/shm ] && [ -w /dev/shm ] && shm=$(mktemp -d /dev/shm/llmc_ckpt.XXXXXX); then
    "$TRAIN" "${RUN[@]}" --steps 4 --ckpt-dir "$shm/ck" >"$tmp/shm.log" 2>&1
    rc1=$?
    "$TRAIN" "${RUN[@]}" --steps 5 --resume "$shm/ck/step_00000004" >"$tmp/shm_resume.log" 2>&1
    rc2=$?
    same=$(cmp -s "$tmp/direct/step_00000004/rank_00000.bin" "$shm/ck/step_00000004/rank_00000.bin" && echo yes)
    rm -rf "$shm"
    check "a checkpoint on /dev/shm (tmpfs: $(grep -ao '(O_DIRECT;\|(through the page cache;' "$tmp/shm.log" | head -1)) has the same bytes, and resumes" \
        '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$same" = yes ]' "rc=$rc1,$rc2 $(tail -1 "$tmp/shm.log")"
else
    echo "SKIP: a checkpoint on /dev/shm (none writable here)"
fi

# --- scripts/bench_ckpt.sh at its tiny size: a row with the lost time per checkpoint, the synchronous write
# and their ratio, the log's own figure, and the cores left to the writer (plumbing: no speed asserted) ---
TINY=1 TRAIN=$TRAIN TOKENIZE=$BUILD/tokenize TMPDIR=$tmp bash scripts/bench_ckpt.sh >"$tmp/bench.log" 2>&1
rc=$?
check "bench_ckpt.sh (TINY=1): lost time per checkpoint beside the synchronous write, 2 checkpoints counted" \
    "[ $rc -eq 0 ] && grep -q '^trainer  *lost_ms  *log_lost  *stall_ms  *sync_ms  *lost%' '$tmp/bench.log' &&
     grep -Eq '^train_gpt +-?[0-9.]+ +-?[0-9.]+ +[0-9.]+ +[0-9.]+ +-?[0-9.]+% +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9.]+ ' \
         '$tmp/bench.log' &&
     grep -q '12 steps, a checkpoint every 4 steps, 2 counted' '$tmp/bench.log' &&
     grep -Eq '^  checkpoint: (the writer has [0-9]+ cores? beside|no core spare beside) 1 training thread a rank' '$tmp/bench.log'" \
    "rc=$rc: $(tr '\n' '|' <"$tmp/bench.log")"

# --- 2 ranks under mpirun: every ZeRO stage resumes bit-exact on its own layout; a ZeRO-1 checkpoint of 2 ranks
# continues on 1 and 4 ranks and at ZeRO 0 and 3 (the same global batch) to 1e-5 of the uninterrupted run ---
need_mpi "checkpoints on several ranks" 120
DIST=("${RUN[@]}" --bucket-mb 0.02 --comm-timeout 60 --ckpt-writer-cores 0)
for zero in 0 1 2 3; do
    "${MPIRUN[@]}" -np 2 "$TRAIN" "${DIST[@]}" --batch-size 2 --zero $zero --ckpt-dir "$tmp/z$zero" --ckpt-every 4 \
        --log-json "$tmp/z$zero.json" --save-model "$tmp/z$zero.bin" >"$tmp/z$zero.log" 2>&1
    rc1=$?
    "${MPIRUN[@]}" -np 2 "$TRAIN" "${DIST[@]}" --batch-size 2 --zero $zero --resume "$tmp/z$zero/step_00000008" \
        --log-json "$tmp/z${zero}r.json" --save-model "$tmp/z${zero}r.bin" >"$tmp/z${zero}r.log" 2>&1
    rc2=$?
    nfiles=$(ls "$tmp/z$zero/step_00000008" 2>/dev/null | grep -c '^rank_0000[01].bin$')
    check "ZeRO-$zero on 2 ranks: each rank writes its shard, and a resume at step 8 is bit-exact" \
        '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$nfiles" -eq 2 ] && cmp -s "$tmp/z$zero.bin" "$tmp/z${zero}r.bin" &&
         cmp -s <(records_from "$tmp/z$zero.json" 8) <(records_from "$tmp/z${zero}r.json" 0)' \
        "rc1=$rc1 rc2=$rc2 files=$nfiles $(grep -ah error "$tmp/z$zero.log" "$tmp/z${zero}r.log" | head -1)"
done
records_from "$tmp/z1.json" 8 >"$tmp/z1_tail.json"
for layout in "1 4 1" "4 1 1" "2 2 0" "2 2 3"; do
    read -r np B zero <<<"$layout"
    name="zero1_np2_to_zero${zero}_np${np}"
    launch=("${MPIRUN[@]}" -np "$np")
    [ "$np" -eq 1 ] && launch=()
    "${launch[@]}" "$TRAIN" "${DIST[@]}" --batch-size "$B" --zero "$zero" --resume "$tmp/z1/step_00000008" \
        --log-json "$tmp/$name.json" --save-model "$tmp/$name.bin" >"$tmp/$name.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        fail "${name}_resumes" "exit $rc: $(grep -a error "$tmp/$name.log" | head -1)"
        continue
    fi
    check "${name}: the data continues at the same global sample" \
        'grep -q "continuing at step 8 (epoch 0, global sample 64)" "$tmp/$name.log"'
    "$CMP" --compare-logs "$tmp/z1_tail.json" "$tmp/$name.json" 1e-5 "${name}_losses_follow_the_uninterrupted_run"
    "$CMP" --compare-models "$tmp/z1.bin" "$tmp/$name.bin" 1e-5 "${name}_final_weights_match"
done
