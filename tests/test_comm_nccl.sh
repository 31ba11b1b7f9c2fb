#!/usr/bin/env bash
# test_comm_nccl.sh: builds tests/test_comm_nccl.cu (the device backends:
# llmc/comm_nccl.cuh and llmc/comm_staged.cuh, with MPI when the build has it) with nvcc -- so the
# backends compile and link wherever CUDA and NCCL are installed -- and runs
# it: on one process, and on 2 ranks under mpirun when the node has 2 GPUs.
# The program SKIPs without a GPU; this script SKIPs without nvcc or NCCL, and
# in sanitizer builds (which leave CUDA out).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NCCL_HOME=${NCCL_HOME:-$CUDA_HOME}
NVCC=$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")
NCCL_LIB=$NCCL_HOME/lib
[ -d "$NCCL_LIB" ] || NCCL_LIB=$NCCL_HOME/lib64
case "$BUILD" in build-*) echo "SKIP: device_comm_backends_build (sanitizer build)"; exit 0;; esac
if [ ! -x "$NVCC" ] || [ ! -f "$NCCL_HOME/include/nccl.h" ]; then
    echo "SKIP: device_comm_backends_build (no nvcc or nccl.h)"
    exit 0
fi
mpi_flags=() mpi_libs=()
if [ "${HAVE_MPI:-}" = yes ]; then
    read -r -a mpi_flags <<<"-DLLMC_MPI $(mpicc --showme:compile)"
    read -r -a mpi_libs <<<"$(mpicc --showme:link)"
fi
bin=$BUILD/tests/test_comm_nccl
mkdir -p "$BUILD/tests"
if "$NVCC" -O2 -std=c++17 -arch="${CUDA_ARCH:-sm_90}" -I. -I"$NCCL_HOME/include" -Werror all-warnings \
    -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-function,-Wno-implicit-fallthrough "${mpi_flags[@]}" \
    tests/test_comm_nccl.cu -o "$bin" -L"$NCCL_LIB" -Xlinker -rpath="$NCCL_LIB" -lnccl "${mpi_libs[@]}" \
    >"$bin.log" 2>&1; then
    echo "PASS: device_comm_backends_build"
else
    echo "FAIL: device_comm_backends_build ($(head -c 400 "$bin.log"))"
    exit 1
fi
"$bin"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${HAVE_MPI:-}" = yes ] && [ "$ngpu" -ge 2 ] && command -v mpirun >/dev/null 2>&1; then
    mpirun --allow-run-as-root --oversubscribe -np 2 "$bin"
fi
