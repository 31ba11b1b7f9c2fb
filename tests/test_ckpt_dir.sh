#!/usr/bin/env bash
# test_ckpt_dir.sh: the checkpoint directory is the run's own (llmc/ckpt_dir.h, docs/checkpoints.md).
# Symbolic links in it are never followed (a victim directory's files survive each case: a stale
# step_N.tmp, an old step_N pruned by --ckpt-keep, a step_N -> step_M that --resume auto must not take
# and a commit must not empty, `latest.tmp.*` leftovers), a step directory holding something the writer
# does not write never wedges the directory, an old checkpoint that cannot be deleted is a warning, a
# damaged `latest` is a warning, a failed `latest` write exits 1, the lock refuses a second run (also one
# of 2 ranks under mpirun) and a killed run leaves none behind, an unwritable --ckpt-dir fails before
# training. CPU trainer, a tiny model.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN=$BUILD/train_gpt pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done  # (a trainer checkpoints and exits; mpirun passes it on)
    chattr -R -i "$tmp" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0
tokenize_sources "$tmp/data" llmc/checkpoint.h llmc/ckpt_*.h
RUN=(--data-train "$tmp/data/src_train_*.bin" --n-layer 2 --n-embd 32 --n-head 2 --vocab-size 257 --max-seq-len 16
     --seq-len 16 --batch-size 2 --peak-tflops 0.1 --steps 8 --ckpt-every 2 --ckpt-keep 0)
# train NAME ARGS...: a run, its stdout in $tmp/NAME.out, stderr in $tmp/NAME.err, its exit status in $rc
train() { local name=$1; shift; timeout -s KILL 60 "$TRAIN" "${RUN[@]}" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; rc=$?; }
# warned NAME REGEX: the run's stderr is exactly one line, a warning matching REGEX
warned() { [ "$(wc -l <"$tmp/$1.err")" -eq 1 ] && grep -q "^warning: .*$2" "$tmp/$1.err"; }
why() { echo "rc=$rc: $(head -c 400 "$tmp/$1.err")"; }

# the checkpoints the cases start from (steps 2, 4, 6 of 8) and a victim directory that must survive every case
train base --ckpt-dir "$tmp/ck"
[ $rc -eq 0 ] || { fail "the checkpoints the cases start from" "$(why base)"; exit 1; }
rm -r "$tmp/ck/step_00000008"; echo step_00000006 >"$tmp/ck/latest"
mkdir -p "$tmp/victim/sub"
echo keep >"$tmp/victim/a"; echo keep >"$tmp/victim/sub/b"; cp "$tmp/ck/step_00000004/manifest.json" "$tmp/victim/"
victim_ok() { [ "$(cat "$tmp/victim/a" 2>/dev/null)" = keep ] && [ "$(cat "$tmp/victim/sub/b" 2>/dev/null)" = keep ] &&
              [ -f "$tmp/victim/manifest.json" ]; }
fresh() { rm -rf "$tmp/$1"; cp -a "$tmp/ck" "$tmp/$1"; }  # a copy of the checkpoints

# --- a stale step_N.tmp that is a symbolic link: renamed aside, never followed ---
mkdir "$tmp/c1"; ln -s ../victim "$tmp/c1/step_00000004.tmp"
train c1 --ckpt-dir "$tmp/c1"
check "a stale step_N.tmp -> victim: the victim's files survive, the link is renamed aside, the run goes on" \
    'victim_ok && [ $rc -eq 0 ] && [ -L "$tmp/c1/step_00000004.tmp.foreign" ] && [ -d "$tmp/c1/step_00000008" ] &&
     warned c1 "step_00000004.tmp is a symbolic link: renamed to step_00000004.tmp.foreign"' "$(why c1)"

# --- --ckpt-keep never deletes through a symbolic link: an old step_N -> victim stays, named once ---
mkdir "$tmp/c2"; ln -s ../victim "$tmp/c2/step_00000001"
train c2 --ckpt-dir "$tmp/c2" --ckpt-keep 1
dirs=$(cd "$tmp/c2" && ls | tr '\n' ' ')
check "--ckpt-keep 1 with an old step_N -> victim: the victim survives, the link stays, the run's own are pruned ($dirs)" \
    'victim_ok && [ $rc -eq 0 ] && [ "$dirs" = "latest lock step_00000001 step_00000008 " ] && [ -L "$tmp/c2/step_00000001" ] &&
     warned c2 "step_00000001 is a symbolic link: not a checkpoint of this run"' "$(why c2)"

# --- --resume auto with step_6 -> step_4: not resumed; the commit of step 6 leaves step_4 whole ---
fresh c3; rm -r "$tmp/c3/step_00000006"; ln -s step_00000004 "$tmp/c3/step_00000006"; cp -a "$tmp/c3/step_00000004" "$tmp/c3_keep4"
train c3 --ckpt-dir "$tmp/c3" --resume auto
check "--resume auto with step_6 -> step_4: resumes step_4 itself, commits steps 6 and 8, step_4 is untouched" \
    '[ $rc -eq 0 ] && grep -q "continuing at step 4 " "$tmp/c3.out" && diff -r "$tmp/c3_keep4" "$tmp/c3/step_00000004" >/dev/null &&
     [ -d "$tmp/c3/step_00000006" ] && [ ! -L "$tmp/c3/step_00000006" ] && [ -L "$tmp/c3/step_00000006.foreign" ] &&
     [ -f "$tmp/c3/step_00000008/manifest.json" ] && grep -q "step_00000006 is a symbolic link" "$tmp/c3.err"' "$(why c3)"

# --- foreign entries inside step directories: the re-commit after a resume renames them aside; later starts work ---
fresh c4; mkdir "$tmp/c4/step_00000004/notes"; echo mine >"$tmp/c4/step_00000004/notes/x"; echo mine >"$tmp/c4/step_00000006/README"
train c4 --ckpt-dir "$tmp/c4" --resume "$tmp/c4/step_00000002"
check "a sub-directory and a file the writer did not write in step_4, step_6: the re-commits rename them aside, exit 0" \
    '[ $rc -eq 0 ] && [ "$(cat "$tmp/c4/step_00000004.foreign/notes/x")" = mine ] &&
     [ "$(cat "$tmp/c4/step_00000006.foreign/README")" = mine ] && [ -f "$tmp/c4/step_00000006/manifest.json" ] &&
     [ ! -e "$tmp/c4/step_00000006/README" ] && ! ls "$tmp/c4" | grep -q "\.tmp$"' "$(why c4)"
train c4b --ckpt-dir "$tmp/c4" --resume auto
check "... and the next start on that directory resumes (exit 0)" \
    '[ $rc -eq 0 ] && grep -q "continuing at step 8 " "$tmp/c4b.out" && [ ! -s "$tmp/c4b.err" ]' "$(why c4b)"
fresh c5; mkdir "$tmp/c5/step_00000006/notes"
train c5 --ckpt-dir "$tmp/c5" --resume auto
check "--resume auto skips a step directory holding a sub-directory, named in one line, and resumes the one before" \
    '[ $rc -eq 0 ] && grep -q "continuing at step 4 " "$tmp/c5.out" && [ -d "$tmp/c5/step_00000006.foreign/notes" ] &&
     [ "$(grep -c "step_00000006 holds .notes.* not a checkpoint of this run" "$tmp/c5.err")" -eq 1 ]' "$(why c5)"

# --- an old checkpoint that cannot be deleted (immutable): a warning, the run goes on and saves its model ---
fresh c6; rm -r "$tmp/c6/step_00000004" "$tmp/c6/step_00000006"; echo step_00000002 >"$tmp/c6/latest"
if chattr +i "$tmp/c6/step_00000002" 2>/dev/null; then  # (the tests run as root: permissions would not stop it)
    train c6 --ckpt-dir "$tmp/c6" --resume auto --ckpt-keep 1 --save-model "$tmp/c6.bin"
    chattr -i "$tmp/c6/step_00000002"
    check "an old checkpoint that cannot be deleted under --ckpt-keep: one warning, exit 0, the model saved" \
        '[ $rc -eq 0 ] && [ -s "$tmp/c6.bin" ] && [ -f "$tmp/c6/step_00000002/manifest.json" ] && [ ! -e "$tmp/c6/step_00000006" ] &&
         [ "$(grep -c "^warning: checkpoint: cannot delete the old checkpoint .*step_00000002" "$tmp/c6.err")" -eq 3 ]' "$(why c6)"
else
    echo "SKIP: an old checkpoint that cannot be deleted (chattr +i is not allowed here)"
fi

# --- latest.tmp.XXXXXX leftovers of a killed run: removed at start-up, a link among them never followed ---
mkdir "$tmp/c7"; echo junk >"$tmp/c7/latest.tmp.AbC123"; ln -s ../victim/a "$tmp/c7/latest.tmp.dEf456"
train c7 --ckpt-dir "$tmp/c7"
check "latest.tmp.XXXXXX leftovers (a file, a link to a victim) are removed at start-up; the victim survives" \
    'victim_ok && [ $rc -eq 0 ] && ! ls "$tmp/c7" | grep -q "^latest\.tmp"' "$(why c7)"

# --- a damaged `latest`: a hint; one warning, the newest complete checkpoint resumed ---
fresh c8; printf 'step_00000009\n' >"$tmp/c8/latest"
train c8 --ckpt-dir "$tmp/c8" --resume auto
check "a 'latest' naming a step directory that is not there: one warning, resumes step 6" \
    '[ $rc -eq 0 ] && grep -q "continuing at step 6 " "$tmp/c8.out" && warned c8 "ignoring .*latest" &&
     [ "$(cat "$tmp/c8/latest")" = step_00000008 ]' "$(why c8)"
fresh c9; head -c 8000 /dev/urandom >"$tmp/c9/latest"
train c9 --ckpt-dir "$tmp/c9" --resume auto
check "a 'latest' of binary junk: one warning, resumes step 6" \
    '[ $rc -eq 0 ] && grep -q "continuing at step 6 " "$tmp/c9.out" && warned c9 "ignoring .*latest"' "$(why c9)"
fresh c10; rm "$tmp/c10/latest"; mkdir "$tmp/c10/latest"; echo mine >"$tmp/c10/latest/x"
train c10 --ckpt-dir "$tmp/c10" --resume auto
check "a 'latest' that is a directory: renamed aside at start-up (its file kept), resumes step 6, 'latest' written" \
    '[ $rc -eq 0 ] && grep -q "continuing at step 6 " "$tmp/c10.out" && [ "$(cat "$tmp/c10/latest.foreign/x")" = mine ] &&
     [ "$(cat "$tmp/c10/latest")" = step_00000008 ]' "$(why c10)"

# --- a failed `latest` write is a failed checkpoint write: one line, exit 1 (the step directory is complete) ---
rm -rf "$tmp/c11"
LLMC_TEST_CKPT_FAULT=latest-error:4 train c11 --ckpt-dir "$tmp/c11"
check "a failed 'latest' write: one line naming it, exit 1, step_4 complete, no latest.tmp.* left" \
    '[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/c11.err")" -eq 1 ] && grep -q "^error: checkpoint: writing .*c11/latest. failed: No space left" "$tmp/c11.err" &&
     [ -f "$tmp/c11/step_00000004/manifest.json" ] && [ "$(cat "$tmp/c11/latest")" = step_00000002 ] &&
     ! ls "$tmp/c11" | grep -q "^latest\.tmp"' "$(why c11)"

# --- mid-run: a step_N.tmp planted as a link (never written through), a directory that turned immutable (the
# .tmp cannot be made): the run stops at that checkpoint with one line, exit 1, and does not hang ---
# midrun NAME ACTION: a run of 1000 steps checkpointing at 500; ACTION is eval'd once step 2 is logged
midrun() {
    rm -rf "$tmp/$1"
    timeout -s KILL 60 "$TRAIN" "${RUN[@]}" --steps 1000 --ckpt-every 500 --ckpt-dir "$tmp/$1" >"$tmp/$1.out" 2>"$tmp/$1.err" &
    local run=$!
    for _ in $(seq 600); do grep -q "^step  *2/" "$tmp/$1.out" 2>/dev/null && break; sleep 0.05; done
    eval "$2"
    wait $run
    rc=$?
}
midrun c13 'ln -s ../victim "$tmp/c13/step_00000500.tmp"'
check "a step_N.tmp -> victim planted mid-run: not written through; one line, exit 1" \
    'victim_ok && [ ! -e "$tmp/victim/rank_00000.bin" ] && [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/c13.err")" -eq 1 ] &&
     grep -q "creating .*step_00000500.tmp. failed: File exists" "$tmp/c13.err"' "$(why c13)"
if mkdir "$tmp/imm" && chattr +i "$tmp/imm" 2>/dev/null; then
    chattr -i "$tmp/imm"
    midrun c14 'chattr +i "$tmp/c14"'
    chattr -i "$tmp/c14"
    check "a --ckpt-dir that turned immutable mid-run: one line, exit 1, no hang" \
        '[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/c14.err")" -eq 1 ] && grep -q "creating .*step_00000500.tmp. failed" "$tmp/c14.err"' \
        "$(why c14)"
else
    echo "SKIP: a --ckpt-dir that turns immutable mid-run (chattr +i is not allowed here)"
fi

# --- the lock: a second run on the directory is refused with the holder's pid and host; a killed run leaves none ---
rm -rf "$tmp/lk"
"$TRAIN" "${RUN[@]}" --steps 20000 --ckpt-every 0 --ckpt-dir "$tmp/lk" >"$tmp/lk1.out" 2>&1 &
holder=$!; pids+=("$holder")
for _ in $(seq 600); do grep -q "^step  *2/" "$tmp/lk1.out" 2>/dev/null && break; sleep 0.05; done
expect_usage_error "a second run on a --ckpt-dir in use, naming the holder's pid and host" \
    "--ckpt-dir '$tmp/lk' is in use by another run (pid $holder on host $(hostname)" timeout -s KILL 20 "$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/lk"
kill -KILL "$holder"; wait "$holder" 2>/dev/null
train lk3 --ckpt-dir "$tmp/lk" --resume auto
check "after the holder is SIGKILLed, a new run on the directory starts and finishes" \
    '[ $rc -eq 0 ] && [ -d "$tmp/lk/step_00000008" ] && grep -q "pid [0-9]* on host" "$tmp/lk/lock"' "$(why lk3)"
if command -v flock >/dev/null 2>&1; then
    flock -s "$tmp/lk/lock" sleep 60 &
    sharer=$!; pids+=("$sharer")
    for _ in $(seq 100); do [ -n "$(ps -o pid= --ppid "$sharer")" ] && break; sleep 0.05; done
    expect_usage_error "a run while another process shares the lock (a rank of a live job)" "is in use by another run" \
        timeout -s KILL 20 "$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/lk"
    kill -KILL "$sharer" $(ps -o pid= --ppid "$sharer") 2>/dev/null; wait "$sharer" 2>/dev/null
else
    echo "SKIP: a run while another process shares the lock (no flock(1))"
fi
mkdir "$tmp/c12"; ln -s ../victim/a "$tmp/c12/lock"
expect_usage_error "a lock file that is a symbolic link (never followed)" "cannot create the lock file .*c12/lock" \
    timeout -s KILL 20 "$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/c12"
check "... and the file it points to is untouched" 'victim_ok'

# --- an unwritable --ckpt-dir fails at start-up, before any step ---
if [ -d /sys/kernel ] && ! touch /sys/kernel/llmc_probe 2>/dev/null; then
    expect_usage_error "--ckpt-dir /sys/kernel, at start-up" "--ckpt-dir: .*/sys/kernel" \
        timeout -s KILL 20 "$TRAIN" "${RUN[@]}" --ckpt-dir /sys/kernel
    check "... before any step" '! grep -q "^step " "$tmp/stdout"'
else
    echo "SKIP: --ckpt-dir /sys/kernel (no /sys/kernel, or it is writable here)"
fi

# --- under mpirun: rank 0 holds the lock for its job; a second 2-rank job is refused ---
need_mpi "the lock under mpirun"
MPIRUN+=(-np 2)
rm -rf "$tmp/mk"
"${MPIRUN[@]}" "$TRAIN" "${RUN[@]}" --batch-size 1 --steps 20000 --ckpt-every 0 --ckpt-dir "$tmp/mk" --comm-timeout 30 \
    >"$tmp/mk1.out" 2>&1 &
job=$!; pids+=("$job")
for _ in $(seq 600); do grep -q "^step  *2/" "$tmp/mk1.out" 2>/dev/null && break; sleep 0.05; done
timeout 60 "${MPIRUN[@]}" "$TRAIN" "${RUN[@]}" --batch-size 1 --ckpt-dir "$tmp/mk" >"$tmp/mk2.out" 2>&1
rc=$?
check "2 ranks: a second 2-rank job on the directory is refused at start, naming the first job's rank 0" \
    '[ $rc -ne 0 ] && [ "$(grep -c "in use by another run (pid [0-9]* on host" "$tmp/mk2.out")" -eq 1 ] && ! grep -q "^step " "$tmp/mk2.out"' \
    "rc=$rc: $(grep -m1 error "$tmp/mk2.out")"
kill -KILL "$(awk '{print $2}' "$tmp/mk/lock")" 2>/dev/null
wait "$job" 2>/dev/null
timeout 60 "${MPIRUN[@]}" "$TRAIN" "${RUN[@]}" --batch-size 1 --ckpt-dir "$tmp/mk" >"$tmp/mk3.out" 2>&1
rc=$?
check "2 ranks: once the first job is killed, a new job runs to the end" \
    '[ $rc -eq 0 ] && [ -f "$tmp/mk/step_00000008/manifest.json" ]' "rc=$rc: $(grep -m1 error "$tmp/mk3.out")"
