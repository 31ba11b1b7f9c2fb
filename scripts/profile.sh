#!/usr/bin/env bash
# profile.sh: a training run's steps under a profiler, in one command. The run
# itself brackets the steps (--profile-steps A:B, appended here), so warm-up
# and the end of the run stay out of the capture.
#
#   scripts/profile.sh nsys -- ./train_gptcu FLAGS...   Nsight Systems: the timeline of steps 3-5 (CUDA,
#                                                        NVTX ranges: step, data, forward, backward, each
#                                                        layer; cuBLAS, cuDNN, NCCL, OS runtime), then its
#                                                        kernel and NVTX summaries
#   scripts/profile.sh ncu -- ./train_gptcu FLAGS...    Nsight Compute: the hot kernels (matmuls, attention,
#                                                        LayerNorm, GELU, classifier, AdamW, ...) of step 3,
#                                                        full section set, then the per-kernel summary
#   scripts/profile.sh perf -- ./train_gpt FLAGS...     perf record (call graphs) of steps 3-5 of the CPU
#                                                        trainer, through perf's control FIFO
#                                                        (llmc/perf_control.h), then perf report's top
#
# STEPS=A:B picks the steps (defaults above; the run needs --steps >= B).
# OUT=DIR (default /tmp/llmc_profile) holds the reports. DRY=1 prints the
# commands without running them. Several ranks: run the profiler per rank,
# e.g. mpirun -np 2 nsys profile -o out.%q{OMPI_COMM_WORLD_RANK} ... (see docs/benchmarks.md).
set -u
usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 3 ] || usage
mode=$1
shift
[ "$1" = "--" ] || usage
shift
OUT=${OUT:-/tmp/llmc_profile}
DRY=${DRY:-0}
mkdir -p "$OUT"

# runs (or with DRY=1 prints, each word that needs it in single quotes) a command
run() {
    if [ "$DRY" = 1 ]; then
        local w line=""
        for w in "$@"; do
            if [[ "$w" =~ ^[A-Za-z0-9_./:,=%+@-]+$ ]]; then line+="$w "; else line+="'$w' "; fi
        done
        echo "${line% }"
        return 0
    fi
    "$@"
}

case "$mode" in
nsys)
    steps=${STEPS:-3:5}
    run nsys profile -o "$OUT/nsys" --force-overwrite true --trace cuda,nvtx,cublas,cudnn,osrt \
        --capture-range cudaProfilerApi --capture-range-end stop --cuda-memory-usage true \
        "$@" --profile-steps "$steps" || exit
    run nsys stats --report cuda_gpu_kern_sum,nvtx_sum --format table "$OUT/nsys.nsys-rep"
    ;;
ncu)
    steps=${STEPS:-3:3}
    run ncu --profile-from-start off --set full --nvtx --kernel-name-base demangled \
        --kernel-name 'regex:flash|attention|layernorm|gemm|sm90|cutlass|gelu|classifier|encoder|adamw|norm|tp_' \
        --launch-count 60 -o "$OUT/ncu" -f "$@" --profile-steps "$steps" || exit
    run ncu --import "$OUT/ncu.ncu-rep" --print-summary per-kernel
    ;;
perf)
    steps=${STEPS:-3:5}
    ctl=$OUT/perf.ctl ack=$OUT/perf.ack
    [ "$DRY" = 1 ] || { rm -f "$ctl" "$ack" && mkfifo "$ctl" "$ack"; } || exit
    run env LLMC_PERF_CTL="$ctl" LLMC_PERF_ACK="$ack" perf record -g -D -1 --control "fifo:$ctl,$ack" \
        -o "$OUT/perf.data" -- "$@" --profile-steps "$steps" || exit
    run perf report -i "$OUT/perf.data" --stdio --no-children --percent-limit 1 --sort symbol
    ;;
*) usage ;;
esac
