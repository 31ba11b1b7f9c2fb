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
# TEST_JOBS tests run at once (default 2): on 2 cores most tests leave a core idle part of the time (waits
# for a rank, a writer, a timeout), and two at a time fill it. Each test's output is held in its own file
# and printed whole when it ends, with its times. MPI ranks yield the core while they poll
# (mpi_yield_when_idle) so that ranks of two tests on one core do not spin against each other.
jobs_max=${TEST_JOBS:-2}
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
# Tests that mostly wait (on Slurm's daemons, a --comm-timeout, a stopped rank, a checkpoint writer: in the
# runner's lines their CPU time is a fifth of their wall time or less) run beside the TEST_JOBS others rather than
# in one of their places, unless TEST_JOBS=1
waiting='^(test_slurm|test_hostile_input|test_checkpoint|test_crash_resume)\.sh$|^test_comm_nccl_emulated$'
[ "$jobs_max" -le 1 ] && waiting='^$'
out=$(mktemp -d)
n_started=0; running=()  # indices of the tests in flight
# places_taken: how many tests in flight hold one of the TEST_JOBS places
places_taken() {
    local i n=0
    for i in "${running[@]}"; do [[ "$(cat "$out/$i.name")" =~ $waiting ]] || n=$((n + 1)); done
    echo $n
}
# run_bg NAME CMD...: the test in a subshell of its own (whose `times` counts only the test's processes),
# its output, exit status, CPU and wall seconds left in $out/INDEX.*
run_bg() {
    local i=$n_started; n_started=$((n_started + 1))
    echo "$1" >"$out/$i.name"
    (
        start=$SECONDS
        "${@:2}" >"$out/$i.log" 2>&1
        echo $? >"$out/$i.rc"
        times >"$out/$i.times"
        echo $((SECONDS - start)) >"$out/$i.wall"
        touch "$out/$i.done"
    ) </dev/null &
    running+=("$i")
    while [ "$(places_taken)" -ge "$jobs_max" ]; do wait -n 2>/dev/null; collect; done
}
# collect: prints and tallies every test that has ended, in the order they end
collect() {
    local i still=()
    for i in "${running[@]}"; do
        if [ ! -f "$out/$i.done" ]; then still+=("$i"); continue; fi
        local name cpu wall rc p f s
        name=$(cat "$out/$i.name"); rc=$(cat "$out/$i.rc"); wall=$(cat "$out/$i.wall")
        # the second line of `times`: the user and system time of the subshell's children (the test)
        cpu=$(awk 'NR == 2 { for (k = 1; k <= 2; k++) { split($k, a, "m"); t += a[1] * 60 + a[2] } printf "%.1f", t }' "$out/$i.times")
        echo "== $name"
        cat "$out/$i.log"
        echo "== $name: $cpu s CPU (user+sys), $wall s wall"
        times+=("$cpu $name ($wall s wall)")
        p=$(grep -c '^PASS: ' "$out/$i.log"); f=$(grep -c '^FAIL: ' "$out/$i.log"); s=$(grep -c '^SKIP: ' "$out/$i.log")
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            echo "FAIL: $name exited with status $rc"
            f=1
        fi
        passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    done
    running=("${still[@]}")
}
only=${TESTS:-}
# TESTS_ONLY=REGEX: the tests that do not match it are not run, each listed as a SKIP (run_all.sh's sanitizer
# builds: the subset tests/sanitizer_tests.txt names)
subset=${TESTS_ONLY:-}
excluded() {
    [ -n "$subset" ] && ! [[ "$1" =~ $subset ]] && { echo "SKIP: $1 (not in tests/sanitizer_tests.txt: normal build only)"; skipped=$((skipped + 1)); }
}
# run NAME CMD...: the test, unless TESTS or TESTS_ONLY leave it out
run() {
    [ -n "$only" ] && ! [[ "$1" =~ $only ]] && return
    excluded "$1" && return
    run_bg "$@"
}
# the GPU programs on the CPU first, the longest tests (train_gpt.cu and tests/test_gpt.cu compiled for
# tests/cuda_emulator.h; the Makefile's EMU_BINS; the scripts SKIP without their emulated program). The programs
# and scripts (tests/gpu_trainer.sh, tests/test_gpu_check.sh) run one OpenMP thread: the emulated kernels run on
# the calling thread, and a second OpenMP thread spends the time between OpenBLAS's matmuls spinning
one_thread=(env OMP_NUM_THREADS=1)
[ -x "$BUILD/emu/test_gpt_cu" ] && run test_gpt_cu_emulated "${one_thread[@]}" "$BUILD/emu/test_gpt_cu"
run test_checkpoint_gpu_emulated env EMULATED=1 bash tests/test_checkpoint_gpu.sh
run test_distributed_gpu_emulated env EMULATED=1 bash tests/test_distributed_gpu.sh
run test_pipeline_gpu_emulated env EMULATED=1 bash tests/test_pipeline_gpu.sh
run test_tensor_parallel_gpu_emulated env EMULATED=1 bash tests/test_tensor_parallel_gpu.sh
run test_context_parallel_gpu_emulated env EMULATED=1 bash tests/test_context_parallel_gpu.sh
run test_train_gpu_emulated env EMULATED=1 bash tests/test_train_gpu.sh
run test_comm_nccl_emulated env EMULATED=1 bash tests/test_comm_nccl.sh
[ -x "$BUILD/emu/test_gpu_libs" ] && run test_gpu_libs_emulated "${one_thread[@]}" "$BUILD/emu/test_gpu_libs"
# the GPU step profiler (dev/perf/profile_step_gpu.cu) on the emulated model: it runs with either
# attention, and the FLOPs its wrappers count call by call add up to the model's formula (a matmul or
# attention call it does not time fails this; its times mean nothing on the emulator)
profile_counts() {
    local attn out
    for attn in flash cudnn; do
        out=$("${one_thread[@]}" "$BUILD/emu/profile_step_gpu" tiny 2 32 "$attn" 1 3 2>&1)
        if grep -q "the model's formula .*: equal" <<<"$out"; then
            echo "PASS: profile_step_gpu --attention $attn counts every matmul and attention call"
        else
            echo "FAIL: profile_step_gpu --attention $attn: $(tail -2 <<<"$out" | tr '\n' ' ')"
        fi
    done
}
[ -x "$BUILD/emu/profile_step_gpu" ] && run profile_step_gpu_emulated profile_counts
# the dev/cuda kernel checkers' validation at small shapes (no benchmarks: they SKIP them)
for f in dev/cuda/*.cu; do
    t=$BUILD/emu/dev_$(basename "$f" .cu)
    [ -x "$t" ] && run "$(basename "$t")_emulated" "${one_thread[@]}" "$t"
done
for t in tests/test_*.sh; do
    [ -f "$t" ] && run "$(basename "$t")" bash "$t"
done
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue;; esac
    run "$(basename "$t")" "$t"
done
while [ ${#running[@]} -gt 0 ]; do wait -n 2>/dev/null; collect; done
rm -rf "$out"
echo
echo "the ten slowest tests, CPU seconds (user+sys):"
printf '%s\n' "${times[@]}" | sort -rn | head -10 | sed 's/^/  /'
printf '%s\n' "${times[@]}" | awk 'NF { s += $1; n++ } END { printf "all %d tests: %.0f s CPU\n", n, s }'
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
