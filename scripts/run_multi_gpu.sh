#!/usr/bin/env bash
# run_multi_gpu.sh: data-parallel training on every GPU of one node: one
# process per GPU under mpirun (each picks its GPU by local rank), NCCL for
# the gradients. Trainer flags pass through; the defaults below train d12 on
# the FineWeb shards of dev/data/fineweb.sh.
# Usage: scripts/run_multi_gpu.sh [NGPU] [-- trainer flags...]
#   NGPU: GPUs to use (default: all that nvidia-smi lists)
#   env: TRAINER (default ./train_gptcu; ./train_gpt runs the CPU trainer over
#        MPI the same way), ZERO (default 1; 0-3), THREADS
#        (OpenMP threads a rank)
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
root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
# NCCL inside one node: NVLink/PCIe peer-to-peer, shared memory; no network needed
exec mpirun "${root[@]}" -np "$NGPU" --bind-to none -x OMP_NUM_THREADS="$THREADS" -x NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
    "$TRAINER" --zero "$ZERO" "$@"
