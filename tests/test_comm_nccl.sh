#!/usr/bin/env bash
# test_comm_nccl.sh: builds tests/test_comm_nccl.cu (the device backends:
# llmc/comm_nccl.cuh and llmc/comm_staged.cuh, with MPI when the build has it) with nvcc -- so the
# backends compile and link wherever CUDA and NCCL are installed -- and runs
# it: on one process, and on 2 ranks under mpirun when the build has MPI and
# the node a GPU (the staged MPI backend always; NCCL only with a GPU per
# rank, the program SKIPs it otherwise). A run that crashes, hangs (timeout)
# or exits non-zero without a FAIL line is a FAIL. The program SKIPs without a
# GPU; this script SKIPs without nvcc or NCCL, and in sanitizer builds (which
# leave CUDA out). EMULATED=1 (every build, CI included): the Makefile's
# build/emu/test_comm_nccl instead (tests/cuda_emulator.h, NCCL emulated over
# MPI by tests/emu_include/nccl.h, 8 emulated devices), on one process and on
# 2 and 4 ranks, and on 4 ranks as 2-way tensor x 2-way data parallel (--tp 2),
# where it also counts the NCCL communicators (one per distinct set of ranks);
# then the emulation's own strictness on 2 ranks (build/emu/test_nccl_emulator,
# NCCL_BUFFSIZE=4096: what NCCL allows completes, and the emulator reports
# each planted mistake in one line before the timeout: an ungrouped
# cross-send, the same with each rank waiting for its send, two communicators
# used in different orders), and an asynchronous NCCL error planted on rank 1
# (EMU_NCCL_FAULT), which the backend must end by aborting its communicators
# (not exit(), whose CUDA teardown would wait for the failed kernel).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
build_with_nvcc() {  # sets bin; SKIPs or FAILs (and exits) when it cannot
    CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    NCCL_HOME=${NCCL_HOME:-$CUDA_HOME}
    NVCC=$(command -v nvcc || echo "$CUDA_HOME/bin/nvcc")
    NCCL_LIB=$NCCL_HOME/lib
    [ -d "$NCCL_LIB" ] || NCCL_LIB=$NCCL_HOME/lib64
    [ $sanitizer_build = 1 ] && { echo "SKIP: device_comm_backends_build (sanitizer build)"; exit 0; }
    if [ ! -x "$NVCC" ] || [ ! -f "$NCCL_HOME/include/nccl.h" ]; then
        echo "SKIP: device_comm_backends_build (no nvcc or nccl.h)"
        exit 0
    fi
    mpi_flags=() mpi_libs=()
    if [ "${HAVE_MPI:-}" = yes ]; then
        read -r -a mpi_flags <<<"-DLLMC_MPI $(mpicc --showme:compile)"
        read -r -a mpi_libs <<<"$(mpicc --showme:link)"
    fi
    # not build/tests/test_*: run_tests.sh runs every program there (this one would run twice, once stale)
    rm -f "$BUILD/tests/test_comm_nccl" "$BUILD/tests/test_comm_nccl.log"
    bin=$BUILD/tests/comm_nccl/test_comm_nccl
    mkdir -p "$(dirname "$bin")"
    # the machine's GPUs' architecture (an A100's sm_80 as well as an H100's sm_90); sm_90 without one
    local arch=sm_90
    [ "$(gpu_count)" -ge 1 ] && arch=native
    if "$NVCC" -O2 -std=c++17 -arch="$arch" -I. -I"$NCCL_HOME/include" -Werror all-warnings \
        -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-function,-Wno-implicit-fallthrough "${mpi_flags[@]}" \
        tests/test_comm_nccl.cu -o "$bin" -L"$NCCL_LIB" -Xlinker -rpath="$NCCL_LIB" -lnccl "${mpi_libs[@]}" \
        >"$bin.log" 2>&1; then
        echo "PASS: device_comm_backends_build"
    else
        echo "FAIL: device_comm_backends_build ($(head -c 400 "$bin.log"))"
        exit 1
    fi
}
if [ "${EMULATED:-0}" = 1 ]; then
    bin=$BUILD/emu/test_comm_nccl ngpu=8
    [ -x "$bin" ] || { echo "SKIP: emulated_device_comm_backends (no $bin)"; exit 0; }
else
    build_with_nvcc
    ngpu=$(gpu_count)
fi
status=0
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0  # LeakSanitizer: MPI's own allocations are not ours
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() {  # $1 name; the command after it. Its output, and a FAIL when it ends badly without saying so.
    local name=$1 rc
    shift
    timeout 180 "$@" >"$out" 2>&1
    rc=$?
    cat "$out"
    if [ $rc -ne 0 ]; then
        status=1
        grep -q '^FAIL: ' "$out" ||
            echo "FAIL: device_comm_backends_$name (exit $rc$([ $rc -eq 124 ] && echo ', timed out after 180 s'))"
    fi
}
# $1 name, $2 the line (a regex) a failing run must print, before the timeout and without the
# emulator's complaint about exit() (the command after them)
reported() {
    local name=$1 want=$2 rc
    shift 2
    timeout 120 "$@" >"$out" 2>&1
    rc=$?
    local line
    line=$(grep -a -m1 -E "$want" "$out")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -n "$line" ] && ! grep -aq 'called exit() while' "$out"; then
        echo "PASS: emulated_nccl_$name (${line:0:300}...)"
    else
        status=1
        echo "FAIL: emulated_nccl_$name (exit $rc: $(grep -a -m2 'error' "$out" | cut -c1-400 | tr '\n' ' '))"
    fi
}
run one_process "$bin"
if [ "$ngpu" -ge 1 ]; then
    if have_mpi; then
        run np2 mpirun --allow-run-as-root --oversubscribe -np 2 "$bin"
        if [ "${EMULATED:-0}" = 1 ]; then
            run np4 mpirun --allow-run-as-root --oversubscribe -np 4 "$bin"
            # 2-way tensor x 2-way data parallel: world, data and tensor groups of different ranks
            run np4_tp2 mpirun --allow-run-as-root --oversubscribe -np 4 "$bin" --tp 2
            emu=(mpirun --allow-run-as-root --oversubscribe -x NCCL_BUFFSIZE=4096 -np 2 "$BUILD/emu/test_nccl_emulator")
            run emulator_allows "${emu[@]}"
            reported emulator_reports_cross_send "deadlock, found by the emulator's watchdog: .*rank [01]'s ncclSend.*rank [01]'s ncclSend" "${emu[@]}" cross-send
            reported emulator_reports_send_wait "deadlock, found by the emulator's watchdog: .*host thread waits" "${emu[@]}" send-wait
            reported emulator_reports_order_across_communicators "communicators issued in different orders by their ranks.*rank [01] issued ncclAllReduce.*rank [01] issued ncclAllReduce" "${emu[@]}" order
            EMU_NCCL_FAULT=async-error:1 reported async_error_aborts_every_communicator "error: rank 1: NCCL on the [a-z/]* group failed: unhandled system error; aborting every communicator" mpirun --allow-run-as-root --oversubscribe -x EMU_NCCL_FAULT -np 2 "$bin"
        fi
    else
        echo "SKIP: device_comm_backends_np2 (built without MPI or no mpirun)"
    fi
fi
exit $status
