#!/usr/bin/env bash
# test_slurm.sh: the CPU trainer under a real Slurm: a one-node cluster brought
# up by hand from Debian's packages (munge, slurmctld, slurmd, slurm-client;
# .ci/run installs them), its daemons, state and sockets all under a scratch
# directory, torn down on any exit. Checks: srun --mpi=pmix runs data, pipeline
# and tensor parallel layouts with mpirun's losses; salloc + mpirun likewise;
# scripts/train_slurm.sbatch submitted as docs/distributed.md gives it (the
# job's shape from sbatch's flags, --comm mpi for ./train_gpt) completes with
# mpirun's losses; the time limit's SIGUSR1 (--signal) makes the trainer exit 75
# and the script requeue the job, which resumes from the checkpoint; a plain
# scancel cancels a running job at once (no requeue); preemption under
# PreemptMode=REQUEUE (Slurm requeues) and PreemptMode=CANCEL (Slurm signals
# the step; the script requeues on exit 75) leaves a checkpoint and a pending
# job. SKIPs without MPI, without the packages, when not root (slurmd runs
# jobs as their users), or when the daemons do not start. The normal build
# only (tests/run_all.sh): the trainer's code runs under the sanitizers in the
# mpirun tests.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN=$BUILD/train_gpt
skip() { echo "SKIP: slurm ($1)"; exit 0; }
have_mpi || skip "built without MPI or no mpirun"
for p in munged slurmctld slurmd srun sbatch salloc scontrol squeue; do
    command -v $p >/dev/null 2>&1 || skip "$p is not installed (.ci/run installs munge, slurmctld, slurmd, slurm-client)"
done
[ "$(id -u)" -eq 0 ] || skip "not root: slurmd must run as root"

sl=$tmp/slurm
mkdir -p "$sl/state" "$sl/spool"
export SLURM_CONF=$sl/slurm.conf OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0
# teardown: the jobs, then the daemons this test started (by their pid files), then the files
stop_pid() { local pid; pid=$(cat "$1" 2>/dev/null) && [ -n "$pid" ] && kill "$pid" 2>/dev/null; }
teardown() {
    scancel --full --quiet --user root 2>/dev/null
    for _ in $(seq 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
    stop_pid "$sl/slurmd.pid"; stop_pid "$sl/slurmctld.pid"; stop_pid "$sl/munged.pid"
    for _ in $(seq 200); do  # (slurmd takes seconds to stop on a loaded machine)
        alive=0
        for f in "$sl"/slurmd.pid "$sl"/slurmctld.pid "$sl"/munged.pid; do
            pid=$(cat "$f" 2>/dev/null) && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && alive=1
        done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    rm -rf "$tmp"
}
trap teardown EXIT

# --- the cluster: munged on a private socket, one node advertising 8 CPUs (config_overrides), three partitions:
# low (PreemptMode=REQUEUE, the default), lowc (PreemptMode=CANCEL with 20 s of grace) and high, whose jobs
# preempt theirs ---
host=$(hostname -s)
port=$((20000 + $$ % 20000))
head -c 1024 /dev/urandom >"$sl/munge.key" && chmod 600 "$sl/munge.key"
munged --force --socket="$sl/munge.sock" --key-file="$sl/munge.key" --pid-file="$sl/munged.pid" \
    --log-file="$sl/munged.log" --seed-file="$sl/munge.seed" >"$sl/munged.out" 2>&1 ||
    skip "munged did not start: $(tail -1 "$sl/munged.out")"
cat >"$SLURM_CONF" <<EOF
ClusterName=test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sl/munge.sock
CredType=cred/munge
StateSaveLocation=$sl/state
SlurmdSpoolDir=$sl/spool
SlurmctldPidFile=$sl/slurmctld.pid
SlurmdPidFile=$sl/slurmd.pid
SlurmctldLogFile=$sl/slurmctld.log
SlurmdLogFile=$sl/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=20
MinJobAge=600
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=low Nodes=$host Default=YES MaxTime=INFINITE State=UP PriorityTier=1 OverSubscribe=NO
PartitionName=lowc Nodes=$host MaxTime=INFINITE State=UP PriorityTier=1 OverSubscribe=NO PreemptMode=CANCEL GraceTime=20
PartitionName=high Nodes=$host MaxTime=INFINITE State=UP PriorityTier=2 OverSubscribe=NO
EOF
slurmctld -i >"$sl/ctld.out" 2>&1 || skip "slurmctld did not start: $(tail -1 "$sl/ctld.out")"
slurmd >"$sl/slurmd.out" 2>&1 || skip "slurmd did not start: $(tail -1 "$sl/slurmd.out")"
for _ in $(seq 200); do [ "$(sinfo -h -o %t -p low 2>/dev/null)" = idle ] && break; sleep 0.1; done
[ "$(sinfo -h -o %t -p low 2>/dev/null)" = idle ] ||
    skip "the node did not come up: $(tail -1 "$sl/slurmd.log" 2>/dev/null) $(tail -1 "$sl/slurmctld.log" 2>/dev/null)"

head -c 20000 train_gpt.c >"$tmp/corpus.txt"
"$BUILD/tokenize" --bytes 1 --out-dir "$tmp/data" --name src --val-tokens 2000 "$tmp/corpus.txt" >"$tmp/tok.log" 2>&1 ||
    { fail "tokenize test corpus" "$(tail -1 "$tmp/tok.log")"; exit 1; }
cat llmc/*.h | head -c 120000 >"$tmp/val.txt"  # (a validation set whose evaluation takes seconds)
"$BUILD/tokenize" --bytes 1 --out-dir "$tmp/val" --name v --val-tokens 100000 "$tmp/val.txt" >"$tmp/tok.log" 2>&1 ||
    { fail "tokenize validation corpus" "$(tail -1 "$tmp/tok.log")"; exit 1; }
TINY=(--data-train "$tmp/data/src_train_*.bin" --n-layer 2 --n-embd 32 --n-head 2 --vocab-size 257 --max-seq-len 32
      --seq-len 16 --batch-size 2 --total-batch-tokens 64 --lr 1e-3 --peak-tflops 0.1 --seed 3)
LONG=("${TINY[@]}" --steps 1000000 --log-every 1000)  # runs until a signal stops it
losses() { grep -a '^step ' "$1" | sed 's/.*| loss \([^ ]*\) .*/\1/' | tr '\n' ' '; }
job_field() { scontrol show job "$1" 2>/dev/null | grep -o "$2=[^ ]*" | head -1 | cut -d= -f2; }
ended() { case "$(job_field "$1" JobState)" in FAILED|COMPLETED|CANCELLED) return 0;; esac; return 1; }  # (a wait stops early)
wait_for() {  # wait_for SECONDS CONDITION [JOB]: no wait when JOB (given) is not a job id (sbatch refused it)
    [ $# -ge 3 ] && ! [[ $3 =~ ^[0-9]+$ ]] && return 1
    local n=$(($1 * 10))
    for _ in $(seq $n); do eval "$2" && return 0; sleep 0.1; done
    return 1
}
SBATCH=(env TRAINER="$TRAIN" CKPT_EVERY=100000 sbatch --parsable --nodes 1 --ntasks-per-node 2)

# --- the time limit: submitted first (slurmctld looks at time limits every 30 s), with the docs' sbatch line, a
# one-minute limit and the signal due at once; its step 0 evaluation is slow, to see the resume: line in the
# job's output before it (100000 batches of the tiny model: 12 s idle; on a loaded machine the job's output can reach the file seconds late) ---
tl=$("${SBATCH[@]}" --time 1 --signal USR1@59 --output "$tmp/tl.out" scripts/train_slurm.sbatch "${LONG[@]}" \
     --ckpt-dir "$tmp/tl.ck" --data-val "$tmp/val/v_val_*.bin" --eval-every 1000000 --eval-batches 100000 2>&1)
early_resume=no
# (the wait is long because a loaded machine's slurmctld may start the job late; it ends at the line)
wait_for 120 'grep -q "^resume: " "$tmp/tl.out" 2>/dev/null' "$tl" && ! grep -q 'val loss\|^step ' "$tmp/tl.out" && early_resume=yes
tl_started="submitted $(job_field "$tl" SubmitTime), started $(job_field "$tl" StartTime), seen $(date +%FT%T)"

# --- srun --mpi=pmix: data, pipeline and tensor parallel, each with mpirun's losses ---
for layout in "dp:--zero 1" "pp:--pp 2" "tp:--tp 2"; do
    name=${layout%%:*}
    read -r -a flags <<<"${layout#*:}"
    timeout 120 srun --mpi=pmix -n 2 "$TRAIN" "${TINY[@]}" --steps 6 "${flags[@]}" >"$tmp/srun_$name.log" 2>&1
    rc=$?
    timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS -x ASAN_OPTIONS "$TRAIN" \
        "${TINY[@]}" --steps 6 "${flags[@]}" >"$tmp/mpirun_$name.log" 2>&1
    a=$(losses "$tmp/srun_$name.log"); b=$(losses "$tmp/mpirun_$name.log")
    check "srun --mpi=pmix -n 2 ($name: ${flags[*]}): slurm launch, 6 steps, mpirun's losses" \
        '[ $rc -eq 0 ] && grep -q "^ranks: 2 (slurm launch, MPI on)" "$tmp/srun_$name.log" && [ "$(echo $a | wc -w)" -eq 6 ] && [ "$a" = "$b" ]' \
        "exit $rc, srun: $a, mpirun: $b $(grep -a -m1 error "$tmp/srun_$name.log")"
done

# --- salloc, then mpirun inside the allocation ---
timeout 120 salloc -n 2 mpirun --allow-run-as-root -np 2 -x OMP_NUM_THREADS -x ASAN_OPTIONS "$TRAIN" "${TINY[@]}" \
    --steps 6 --zero 1 >"$tmp/salloc.log" 2>&1
rc=$?
a=$(losses "$tmp/salloc.log"); b=$(losses "$tmp/mpirun_dp.log")
check "salloc -n 2 mpirun: mpirun's losses" '[ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ]' \
    "exit $rc, salloc: $a, mpirun: $b $(grep -a -m1 error "$tmp/salloc.log")"

# --- the sbatch script as the docs give it (2 tasks on the node, no GPUs: ./train_gpt --comm mpi) ---
job=$("${SBATCH[@]}" --output "$tmp/sb.out" scripts/train_slurm.sbatch "${TINY[@]}" --steps 6 --ckpt-dir "$tmp/sb.ck" 2>&1)
wait_for 60 '[ "$(job_field "$job" JobState)" = COMPLETED ] || [ "$(job_field "$job" JobState)" = FAILED ]' "$job"
a=$(losses "$tmp/sb.out"); b=$(losses "$tmp/mpirun_dp.log")
check "sbatch --nodes 1 --ntasks-per-node 2 scripts/train_slurm.sbatch: COMPLETED, $TRAIN --comm mpi, mpirun's losses" \
    '[ "$(job_field "$job" JobState)" = COMPLETED ] && grep -q "2 tasks on 1 nodes.*--comm mpi$" "$tmp/sb.out" &&
     [ -n "$a" ] && [ "$a" = "$b" ]' \
    "job $job $(job_field "$job" JobState): $(grep -a -m2 'error\|srun' "$tmp/sb.out" | tr '\n' ' ') sbatch: $a, mpirun: $b"

# --- the time limit's signal: exit 75, the script requeues; released, the job resumes; a plain scancel then
# cancels it at once ---
# (requeued, the job passes through COMPLETING before it is PENDING again: Restarts is 1 before the state settles)
wait_for 40 '{ [ "$(job_field "$tl" Restarts)" = 1 ] && [ "$(job_field "$tl" JobState)" != COMPLETING ]; } || ended "$tl"' "$tl"
how=$(grep -a -o 'checkpointing at step [0-9]*\|signal received before the first step: no checkpoint written' "$tmp/tl.out")
check "time limit: SIGUSR1 from --signal, the trainer stops ($how), exits 75, the script requeues the job" \
    '[ "$(job_field "$tl" Restarts)" = 1 ] && [ "$(job_field "$tl" JobState)" = PENDING ] && [ -n "$how" ] &&
     grep -q "Exited with exit code 75" "$tmp/tl.out" && grep -q "requeueing job $tl" "$tmp/tl.out"' \
    "job $tl $(job_field "$tl" JobState) restarts $(job_field "$tl" Restarts): $(grep -a 'error\|srun\|train_slurm' "$tmp/tl.out" | tail -3 | tr '\n' ' ')"
check "the resume: line is in the job's output before the first evaluation ends" '[ $early_resume = yes ]' \
    "$tl_started: $(grep -a -m2 '^resume\|val loss' "$tmp/tl.out" | tr '\n' ' ')"
scontrol update JobId="$tl" StartTime=now TimeLimit=10 >/dev/null 2>&1
at=$(echo "$how" | grep -o '[0-9]*$')
wait_for 30 "grep -q 'resume: continuing at step ${at:-0} \|resume: no checkpoint' '$tmp/tl.out' || ended $tl" "$tl"
check "the requeued job resumes where the signal stopped it (${at:-before step 1})" \
    "grep -q 'resume: continuing at step ${at:-0} \|resume: no checkpoint' '$tmp/tl.out' && [ -n '$how' ]" \
    "$(grep -a '^resume' "$tmp/tl.out" | tr '\n' ' ')"
scancel "$tl"

# --- a plain scancel of a running job cancels it at once: no requeue ---
job=$("${SBATCH[@]}" --output "$tmp/sc.out" scripts/train_slurm.sbatch "${LONG[@]}" --ckpt-dir "$tmp/sc.ck" 2>&1)
wait_for 30 'grep -q "^step " "$tmp/sc.out" 2>/dev/null || ended "$job"' "$job"
scancel "$job"
start=$SECONDS
wait_for 30 '[ -z "$(squeue -h -j "$job" -t RUNNING,COMPLETING 2>/dev/null)" ]' "$job"
check "a plain scancel cancels the job ($(job_field "$job" JobState) after $((SECONDS - start)) s, restarts $(job_field "$job" Restarts))" \
    '[ "$(job_field "$job" JobState)" = CANCELLED ] && [ "$(job_field "$job" Restarts)" = 0 ] && ! grep -q "requeueing job" "$tmp/sc.out"' \
    "job $job: $(grep -a 'train_slurm\|srun' "$tmp/sc.out" | tail -2 | tr '\n' ' ')"

# --- preemption: a job in partition high takes the node's 8 CPUs from a running job of low (PreemptMode=REQUEUE:
# Slurm signals and requeues it) or of lowc (PreemptMode=CANCEL: Slurm signals the step; the script requeues on
# the trainer's exit 75); either way a checkpoint is committed and the job is pending again ---
for part in low lowc; do
    job=$("${SBATCH[@]}" -p $part --output "$tmp/$part.out" scripts/train_slurm.sbatch "${LONG[@]}" \
          --ckpt-dir "$tmp/$part.ck" 2>&1)
    wait_for 30 'grep -q "^step " "$tmp/$part.out" 2>/dev/null || ended "$job"' "$job"
    high=$(sbatch --parsable -p high -n 8 --output "$tmp/high_$part.out" --wrap true 2>&1)
    wait_for 40 '{ [ "$(job_field "$high" JobState)" = COMPLETED ] && [ "$(job_field "$job" JobState)" = PENDING ]; } || ended "$job"' "$job"
    at=$(grep -a -o 'checkpointing at step [0-9]*' "$tmp/$part.out" | grep -o '[0-9]*$')
    check "preemption in partition $part ($(scontrol show partition $part | grep -o 'PreemptMode=[A-Z]*')): the trainer checkpoints (step ${at:-none}), the job is requeued" \
        '[ "$(job_field "$high" JobState)" = COMPLETED ] && [ "$(job_field "$job" JobState)" = PENDING ] &&
         [ "$(job_field "$job" Restarts)" = 1 ] && [ -n "$at" ] && grep -q "step_0*$at committed" "$tmp/$part.out"' \
        "job $job $(job_field "$job" JobState) restarts $(job_field "$job" Restarts), high $(job_field "$high" JobState): $(grep -a 'error\|srun\|train_slurm' "$tmp/$part.out" | tail -3 | tr '\n' ' ')"
    scancel "$job"
done
