#!/usr/bin/env bash
# run_tests.sh: runs every test program (build/tests/test_*), test script (tests/test_*.sh) and emulated GPU
# program (build/emu/), tallies their PASS:/FAIL:/SKIP: lines, prints each test's CPU time (user + sys of it and
# of every process it started: what a loaded machine does not inflate) and wall time, and closes with the ten
# slowest by CPU time and the line "N passed, N failed, N skipped". A test that exits non-zero without printing
# FAIL counts as one failure. Exit status 1 on any failure.
set -u
BUILD=${BUILD:-build}
export BUILD
cd "$(dirname "$0")/.."
passed=0; failed=0; skipped=0
times=()  # "CPU_SECONDS NAME (WALL s wall)" per test, for the closing list of the slowest
log=$(mktemp)
cpu_log=$(mktemp)
# children_cpu: the CPU seconds (user + sys) of every finished child of this shell so far, from bash's `times`
# (called directly, not in $(...), whose subshell would count its own children)
children_cpu() {
    times >"$cpu_log"
    children_cpu=$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, a, "m"); s += a[1] * 60 + a[2] } printf "%.2f", s }' "$cpu_log")
}
run_one() {
    local name=$1; shift
    echo "== $name"
    local start=$SECONDS cpu0 cpu
    children_cpu; cpu0=$children_cpu
    "$@" >"$log" 2>&1
    local rc=$?
    children_cpu; cpu=$(awk -v a="$cpu0" -v b="$children_cpu" 'BEGIN { printf "%.1f", b - a }')
    cat "$log"
    echo "== $name: $cpu s CPU (user+sys), $((SECONDS - start)) s wall"
    times+=("$cpu $name ($((SECONDS - start)) s wall)")
    local p f s
    p=$(grep -c '^PASS: ' "$log"); f=$(grep -c '^FAIL: ' "$log"); s=$(grep -c '^SKIP: ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL: $name exited with status $rc"
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
}
only=${TESTS:-}
# TESTS_ONLY=REGEX: the tests that do not match it are not run, each listed as a SKIP (run_all.sh's sanitizer
# builds: the subset tests/sanitizer_tests.txt names)
subset=${TESTS_ONLY:-}
excluded() {
    [ -n "$subset" ] && ! [[ "$1" =~ $subset ]] && { echo "SKIP: $1 (not in tests/sanitizer_tests.txt: normal build only)"; skipped=$((skipped + 1)); }
}
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue;; esac
    [ -n "$only" ] && ! [[ "$(basename "$t")" =~ $only ]] && continue
    excluded "$(basename "$t")" && continue
    run_one "$(basename "$t")" "$t"
done
for t in tests/test_*.sh; do
    [ -f "$t" ] || continue
    [ -n "$only" ] && ! [[ "$(basename "$t")" =~ $only ]] && continue
    excluded "$(basename "$t")" && continue
    run_one "$(basename "$t")" bash "$t"
done
# the GPU programs on the CPU (train_gpt.cu and tests/test_gpt.cu compiled for
# tests/cuda_emulator.h; the Makefile's EMU_BINS)
# (the scripts SKIP without their emulated program)
emulated() {
    local name=$1; shift
    [ -n "$only" ] && ! [[ "$name" =~ $only ]] && return
    excluded "$name" && return
    run_one "$name" "$@"
}
[ -x "$BUILD/emu/test_gpt_cu" ] && emulated test_gpt_cu_emulated "$BUILD/emu/test_gpt_cu"
[ -x "$BUILD/emu/test_gpu_libs" ] && emulated test_gpu_libs_emulated "$BUILD/emu/test_gpu_libs"
emulated test_train_gpu_emulated env EMULATED=1 bash tests/test_train_gpu.sh
emulated test_distributed_gpu_emulated env EMULATED=1 bash tests/test_distributed_gpu.sh
emulated test_checkpoint_gpu_emulated env EMULATED=1 bash tests/test_checkpoint_gpu.sh
emulated test_pipeline_gpu_emulated env EMULATED=1 bash tests/test_pipeline_gpu.sh
emulated test_tensor_parallel_gpu_emulated env EMULATED=1 bash tests/test_tensor_parallel_gpu.sh
emulated test_context_parallel_gpu_emulated env EMULATED=1 bash tests/test_context_parallel_gpu.sh
emulated test_comm_nccl_emulated env EMULATED=1 bash tests/test_comm_nccl.sh
# the GPU step profiler (dev/perf/profile_step_gpu.cu) on the emulated model: it runs with either
# attention, and the FLOPs its wrappers count call by call add up to the model's formula (a matmul or
# attention call it does not time fails this; its times mean nothing on the emulator)
profile_counts() {
    local attn out
    for attn in flash cudnn; do
        out=$("$BUILD/emu/profile_step_gpu" tiny 2 32 "$attn" 1 3 2>&1)
        if grep -q "the model's formula .*: equal" <<<"$out"; then
            echo "PASS: profile_step_gpu --attention $attn counts every matmul and attention call"
        else
            echo "FAIL: profile_step_gpu --attention $attn: $(tail -2 <<<"$out" | tr '\n' ' ')"
        fi
    done
}
[ -x "$BUILD/emu/profile_step_gpu" ] && emulated profile_step_gpu_emulated profile_counts
# the dev/cuda kernel checkers' validation at small shapes (no benchmarks: they SKIP them)
for f in dev/cuda/*.cu; do
    t=$BUILD/emu/dev_$(basename "$f" .cu)
    [ -x "$t" ] && emulated "$(basename "$t")_emulated" "$t"
done
rm -f "$log" "$cpu_log"
echo
echo "the ten slowest tests, CPU seconds (user+sys):"
printf '%s\n' "${times[@]}" | sort -rn | head -10 | sed 's/^/  /'
printf '%s\n' "${times[@]}" | awk 'NF { s += $1; n++ } END { printf "all %d tests: %.0f s CPU\n", n, s }'
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
