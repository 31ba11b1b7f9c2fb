#!/usr/bin/env bash
# run_multi_gpu.sh: data-parallel training on every GPU of one node: one
# process per GPU under mpirun (each picks its GPU by local rank), NCCL for
# the gradients. Trainer flags pass through; the defaults below train d12 on
# the FineWeb shards of dev/data/fineweb.sh.
# Usage: scripts/run_multi_gpu.sh [NGPU] [-- trainer flags...]
#   NGPU: GPUs to use (default: all that nvidia-smi lists)
#   env: TRAINER (default ./train_gptcu; ./train_gpt runs the CPU trainer over
#        MPI the same way), ZERO (default 1; 0-3), THREADS
#        (OpenMP threads a rank), TIME_LIMIT (seconds: mpirun ends the whole
#        job then, as Slurm's --time would; default none)
# Hangs: a hung collective ends the job after --comm-timeout (the waiting ranks
# say why, exit 3); a rank stuck or stopped in MPI's start-up or shut-down is
# killed by its watchdog process after --comm-timeout. mpirun ends the job as
# soon as one rank exits non-zero or is killed (Open MPI's default,
# orte_abort_on_non_zero_status), so no rank is left waiting.
set -eu
cd "$(dirname "$0")/.."
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ $# -gt 0 ] && [ "$1" != "--" ]; then NGPU=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
[ "${NGPU:-0}" -ge 1 ] || { echo "error: no GPU found (give NGPU)" >&2; exit 2; }
TRAINER=${TRAINER:-./train_gptcu}
ZERO=${ZERO:-1}
THREADS=${THREADS:-$(( $(nproc) / NGPU > 0 ? $(nproc) / NGPU : 1 ))}
[ -x "$TRAINER" ] || { echo "error: $TRAINER not built (make)" >&2; exit 2; }
if [ $# -eq 0 ]; then
    set -- --data-train 'dev/data/fineweb10B/*train*.bin' --data-val 'dev/data/fineweb10B/*val*.bin' --model d12 \
        --batch-size 32 --seq-len 1024 --total-batch-tokens 524288 --lr 6e-4 --warmup-steps 700 --steps 18865 \
        --eval-every 250 --out-dir out/d12
fi
opts=()
[ "$(id -u)" -eq 0 ] && opts+=(--allow-run-as-root)
[ -n "${TIME_LIMIT:-}" ] && opts+=(--timeout "$TIME_LIMIT")
# NCCL inside one node: NVLink/PCIe peer-to-peer, shared memory; no network needed
exec mpirun "${opts[@]}" -np "$NGPU" --bind-to none -x OMP_NUM_THREADS="$THREADS" -x NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
    "$TRAINER" --zero "$ZERO" "$@"
