#!/usr/bin/env bash
# run_tests.sh: runs every test program (build/tests/test_*), test script
# (tests/test_*.sh) and emulated GPU program (build/emu/), tallies their PASS:/FAIL:/SKIP: lines, and prints the
# closing line "N passed, N failed, N skipped". A test that exits non-zero
# without printing FAIL counts as one failure. Exit status 1 on any failure.
set -u
BUILD=${BUILD:-build}
export BUILD
cd "$(dirname "$0")/.."
passed=0; failed=0; skipped=0
log=$(mktemp)
run_one() {
    local name=$1; shift
    echo "== $name"
    "$@" >"$log" 2>&1
    local rc=$?
    cat "$log"
    local p f s
    p=$(grep -c '^PASS: ' "$log"); f=$(grep -c '^FAIL: ' "$log"); s=$(grep -c '^SKIP: ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL: $name exited with status $rc"
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
}
only=${TESTS:-}
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue;; esac
    [ -n "$only" ] && ! [[ "$(basename "$t")" =~ $only ]] && continue
    run_one "$(basename "$t")" "$t"
done
for t in tests/test_*.sh; do
    [ -f "$t" ] || continue
    [ -n "$only" ] && ! [[ "$(basename "$t")" =~ $only ]] && continue
    run_one "$(basename "$t")" bash "$t"
done
# the GPU programs on the CPU (train_gpt.cu and tests/test_gpt.cu compiled for
# tests/cuda_emulator.h; the Makefile's EMU_BINS)
# (the scripts SKIP without their emulated program)
emulated() {
    local name=$1; shift
    [ -n "$only" ] && ! [[ "$name" =~ $only ]] && return
    run_one "$name" "$@"
}
[ -x "$BUILD/emu/test_gpt_cu" ] && emulated test_gpt_cu_emulated "$BUILD/emu/test_gpt_cu"
emulated test_train_gpu_emulated env EMULATED=1 bash tests/test_train_gpu.sh
emulated test_distributed_gpu_emulated env EMULATED=1 bash tests/test_distributed_gpu.sh
emulated test_comm_nccl_emulated env EMULATED=1 bash tests/test_comm_nccl.sh
rm -f "$log"
echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
