#!/usr/bin/env bash
# test_crash_resume.sh: crash consistency, measured. A run that checkpoints every step is SIGKILLed at
# random moments (start-up, a step, a checkpoint's write or commit, the final save) and restarted with
# --resume auto until it finishes; its final model file must equal the uninterrupted run's byte for byte
# (cmp). Layouts: one process, 2 ranks at ZeRO-1 and --pp 2 (mpirun: a random rank is killed, as a node
# would die, and mpirun ends the other). At least 10 kills in all in the normal build, 4 in the sanitizer
# builds (their runs are slower, and a sanitizer report fails the test too). The kill moments come from a
# seeded RNG whose seed is printed: CRASH_SEED=N replays the same schedule (the same delays and ranks; the
# moment in the run they hit still depends on the machine's speed).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN="$BUILD/train_gpt"
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 OMPI_MCA_rmaps_base_oversubscribe=1  # (MPI's own allocations are not ours)

SEED=${CRASH_SEED:-$(( $(date +%s%N) % 1000000 ))}
RANDOM=$SEED
echo "crash schedule seed $SEED (replay: CRASH_SEED=$SEED bash tests/test_crash_resume.sh)"
# kills per layout: one process, 2 ranks ZeRO-1, --pp 2
kills=(4 3 3)
[ $sanitizer_build = 1 ] && kills=(2 1 1)

tokenize_sources "$tmp/data" llmc/model.h llmc/utils.h llmc/args.h
RUN=(--data-train "$tmp/data/src_train_*.bin" --n-layer 2 --n-embd 32 --n-head 2 --vocab-size 257 --max-seq-len 32
     --seq-len 16 --total-batch-tokens 128 --steps 32 --lr 1e-3 --weight-decay 0.1 --shuffle 1 --peak-tflops 0.1
     --comm-timeout 60 --ckpt-every 1 --ckpt-keep 2)

mpi=0
have_mpi && mpi=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS -x ASAN_OPTIONS)

# start NAME LAUNCH... : runs the trainer (LAUNCH: nothing or mpirun's words) in the background on $tmp/NAME.ck,
# resuming what is there; $job is its pid, its output goes to $tmp/NAME.N.log
start() {
    local name=$1; shift
    runs=$((runs + 1))
    log="$tmp/$name.$runs.log"
    "$@" "$TRAIN" "${RUN[@]}" "${layout_flags[@]}" --ckpt-dir "$tmp/$name.ck" --resume auto \
        --save-model "$tmp/$name.bin" >"$log" 2>&1 &
    job=$!
    started=$(date +%s%N)
}
# alive PID: the process runs (neither gone nor a zombie)
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null); [ -n "$s" ] && [ "${s#Z}" = "$s" ]; }
# kill_at MS: SIGKILLs the job MS ms after its start (under mpirun: one of its ranks, at random), unless it
# finished first; $killed_what says which. Status 0 when it sent the kill
kill_at() {
    local ms=$1 rank victim=$job pids
    rank=$((RANDOM % 2))
    killed_what=process
    sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    if [ $mpi_layout = 1 ]; then
        victim=""
        killed_what="rank $rank"
        while alive $job; do  # (mpirun may still be starting its ranks)
            pids=($(ps -o pid=,comm= --ppid $job | awk '$2 == "train_gpt" {print $1}'))
            [ ${#pids[@]} -eq 2 ] && { victim=${pids[$rank]}; break; }
            sleep 0.01
        done
    fi
    [ -n "$victim" ] && alive "$victim" && kill -KILL "$victim" 2>/dev/null
}
# wait_job: waits for $job, its status into rc. Under mpirun after a kill, once no rank is left running,
# mpirun gets 30 s to end: Open MPI 4.1's mpirun can hang in its own teardown after aborting the job (it
# prints the abort, then "PMIX ERROR: UNREACHABLE" and waits on a futex for good, the killed rank left a
# zombie). It is then killed, and the run counts as the killed run it was.
wait_job() {
    local idle=0
    while [ $mpi_layout = 1 ] && [ $sent = 0 ] && alive $job; do
        if ps -o stat=,comm= --ppid $job | awk '$2 == "train_gpt" && $1 !~ /^Z/ {up = 1} END {exit !up}'; then
            idle=0
        elif [ $((idle += 1)) -ge 300 ]; then
            echo "  $name: mpirun still up 30 s after its ranks ended (Open MPI's teardown hang): killed"
            kill -KILL $job 2>/dev/null
            break
        fi
        sleep 0.1
    done
    wait $job 2>/dev/null
    rc=$?
}

# layout NAME KILLS LAUNCH_MPI FLAGS...: the uninterrupted run, then series of killed-and-resumed runs until
# KILLS kills landed, each at a time drawn uniformly over a whole run's (the uninterrupted one's, or the last
# whole run's); each series ends in a finished run whose model must equal the uninterrupted one
layout() {
    local name=$1 want=$2 rc t0 ms done_kills=0 series=0 rounds=0 from last sent launch=() bad=""
    mpi_layout=$3; shift 3
    layout_flags=("$@")
    [ $mpi_layout = 1 ] && launch=("${MPIRUN[@]}")
    runs=0
    t0=$(date +%s%N)
    "${launch[@]}" "$TRAIN" "${RUN[@]}" "${layout_flags[@]}" --ckpt-dir "$tmp/$name.ref.ck" \
        --save-model "$tmp/$name.ref.bin" >"$tmp/$name.ref.log" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000 + 1))
    if [ $rc -ne 0 ]; then fail "$name: the uninterrupted run" "exit $rc: $(grep -m1 -a error "$tmp/$name.ref.log")"; return; fi
    while [ $done_kills -lt "$want" ] && [ $rounds -lt $((want * 4 + 4)) ]; do
        series=$((series + 1))
        rm -rf "$tmp/$name.ck"
        while :; do  # one series: kill, resume, ... until a run finishes
            rounds=$((rounds + 1))
            start "$name" "${launch[@]}"
            local delay=$((RANDOM % ms))
            sent=1
            [ $done_kills -lt "$want" ] && kill_at $delay && sent=0
            wait_job
            # finished, or failed (the check below says which); under mpirun the other rank may fail first, so any
            # non-zero exit of a run that got the kill counts as the kill
            [ $sent -ne 0 ] || [ $rc -eq 0 ] && break
            done_kills=$((done_kills + 1))
            from=$(grep -ao 'continuing at step [0-9]*\|starting fresh' "$log" | head -1)
            last=$(grep -ao '^step *[0-9]*' "$log" | tail -1 | tr -s ' ')
            echo "  $name: kill $done_kills ($killed_what) at $delay ms of ~$ms (series $series, run $runs: ${from:-killed before its resume point}${last:+, last logged $last})"
        done
        from=$(grep -ao 'continuing at step [0-9]*\|starting fresh' "$log" | head -1)
        # a whole run that finished before its kill: the kills to come are drawn over its time (the machine's load
        # changes, and a draw past every run's end lands no kill)
        [ $rc -eq 0 ] && [ "$from" = "starting fresh" ] && ms=$((($(date +%s%N) - started) / 1000000 + 1))
        if [ $rc -ne 0 ] || ! cmp -s "$tmp/$name.bin" "$tmp/$name.ref.bin"; then
            bad="series $series: the finishing run (${from:-?}) exit $rc, final model $(cmp "$tmp/$name.bin" "$tmp/$name.ref.bin" 2>&1 | head -1): $(grep -m1 -a 'error' "$log")"
            break
        fi
    done
    local reports
    reports=$(grep -l -a 'ERROR: AddressSanitizer\|runtime error:\|ERROR: LeakSanitizer' "$tmp/$name".*.log 2>/dev/null | head -3)
    [ -n "$reports" ] && bad="a sanitizer report in $(basename "$reports"): $(grep -m1 -a 'Sanitizer\|runtime error' $reports)"
    check "$name: $done_kills SIGKILLs at random moments, --resume auto each time: every finished run's model equals the uninterrupted run's byte for byte ($series series, $runs runs)" \
        '[ -z "$bad" ] && [ $done_kills -ge "$want" ]' "${bad:-only $done_kills kills landed in $rounds runs}"
}

layout one_process "${kills[0]}" 0
if [ $mpi = 1 ]; then
    layout zero1_np2 "${kills[1]}" 1 --batch-size 2 --zero 1
    layout pp2 "${kills[2]}" 1 --pp 2
else
    echo "SKIP: 2 ranks at ZeRO-1 and --pp 2 (built without MPI or no mpirun)"
fi

# --- a preemption signal during start-up, before the training loop (here while the rank is stopped in MPI's
# start-up: LLMC_TEST_FAULT=stop-start, then SIGTERM, then SIGCONT): with --ckpt-dir it is caught from the start of
# main, so the run stops before its first step, says that it wrote no checkpoint (and writes none), and exits 75
# (CKPT_EXIT_SIGNAL); --resume auto then starts afresh and finishes the same model ---
if [ $mpi = 1 ]; then
    LLMC_TEST_FAULT=stop-start:0 mpirun --allow-run-as-root -np 1 -x OMP_NUM_THREADS -x ASAN_OPTIONS "$TRAIN" \
        "${RUN[@]}" --ckpt-dir "$tmp/early.ck" >"$tmp/early1.log" 2>&1 &
    job=$!
    rank=""
    for _ in $(seq 3000); do  # (up to 60 s: a sanitizer build starts slowly)
        rank=$(ps -o pid=,stat= --ppid $job | awk '$2 ~ /^T/ {print $1}')
        [ -n "$rank" ] || ! alive $job && break
        sleep 0.02
    done
    [ -n "$rank" ] && kill -TERM "$rank" && kill -CONT "$rank"
    wait $job 2>/dev/null
    rc1=$?
    left=$(ls "$tmp/early.ck" 2>/dev/null | tr '\n' ' ')
    "$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/early.ck" --resume auto --save-model "$tmp/early.bin" >"$tmp/early2.log" 2>&1
    rc2=$?
    check "SIGTERM during start-up: stops before the first step, no checkpoint written or claimed, exit 75; --resume auto finishes with the uninterrupted run's model" \
        '[ -n "$rank" ] && [ $rc1 -eq 75 ] && grep -q "signal received before the first step: no checkpoint written" "$tmp/early1.log" &&
         ! grep -q "^step \|staged\|committed" "$tmp/early1.log" && [ "$left" = "lock " ] &&
         [ $rc2 -eq 0 ] && grep -q "no checkpoint in .*: starting fresh" "$tmp/early2.log" && cmp -s "$tmp/early.bin" "$tmp/one_process.ref.bin"' \
        "rank ${rank:-not found stopped}, exit $rc1 then $rc2, left in the directory: $left: $(grep -a -m1 'error\|exited\|signal' "$tmp/early1.log" "$tmp/early2.log")"
fi
