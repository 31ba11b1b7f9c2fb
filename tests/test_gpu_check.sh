#!/usr/bin/env bash
# test_gpu_check.sh: scripts/gpu_check.sh itself, on the CPU emulation
# (EMULATED=1), so that its plumbing works before a lent GPU's minutes are
# spent on it: it builds, runs the first-run checks first (the trainer starting
# on the device, cuDNN's plans for the benchmark's shapes, then the two-rank
# communication test), runs a kernel check, trains every benchmark model with
# both attention kinds where it should, profiles a step, and ends with the
# checks, the table and the profile lines; CHECKS_SKIP lists steps as not run,
# and a spent budget leaves every step "not run (time budget)" with the table
# still printed. The other steps' programs have tests of their own. Runs in the
# normal build only (the script is the same in the sanitizer builds).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
if [ "$BUILD" != build ]; then
    echo "SKIP: gpu_check_emulated (runs in the normal build only)"
    exit 0
fi
if [ ! -x build/emu/train_gptcu ] || ! python3 -c "import numpy" 2>/dev/null; then
    echo "SKIP: gpu_check_emulated (needs build/emu programs and numpy)"
    exit 0
fi

# one OpenMP thread, as tests/run_tests.sh gives the emulated programs (a second one spins between matmuls)
export OMP_NUM_THREADS=1
# every dev check but one, test_gpt_cu and the test scripts are run elsewhere in the suite
skip='test_gpt_cu|dev_(adamw|attention|classifier|encoder|global_norm|layernorm|matmul|tensor_parallel)|test_train_gpu|test_distributed_gpu|test_comm_nccl|test_pipeline_gpu|test_tensor_parallel_gpu|bench_sweep'
EMULATED=1 STEPS=6 OUT="$tmp/run" CHECKS_SKIP="$skip" bash scripts/gpu_check.sh >"$tmp/run.log" 2>&1
rc=$?
summary=$(sed -n '/^== checks/,/^== ceilings/p' "$tmp/run.log")
check "gpu_check.sh exits 0" '[ $rc -eq 0 ]' "exit $rc: $(tail -3 "$tmp/run.log" | tr '\n' ' ')"
first=$(grep -E '^[a-z_0-9]+ +([0-9]+ passed|not run)' <<<"$summary" | head -3 | awk '{print $1}' | tr '\n' ' ')
check "gpu_check.sh runs the first-run checks first: the device's code, cuDNN's d12 plans, two ranks' communication" \
    '[ "$first" = "device_code cudnn_plan_d12 test_comm_nccl " ]' "first steps: $first"
check "gpu_check.sh's trainer starts on the device and builds cuDNN's plans" \
    'grep -Eq "^device_code +1 passed +0 failed +exit 0" <<<"$summary" &&
     grep -Eq "^cudnn_plan_d12 +1 passed +0 failed +exit 0" <<<"$summary"' "$(head -3 <<<"$summary")"
check "gpu_check.sh runs the kernel check it is not told to skip" \
    'grep -Eq "^dev_gelu +[1-9][0-9]* passed +0 failed +exit 0" <<<"$summary"' "$(grep dev_gelu <<<"$summary")"
skipped=$(grep -c 'not run (CHECKS_SKIP)' <<<"$summary")
check "gpu_check.sh lists the CHECKS_SKIP steps as not run" '[ "$skipped" -eq 15 ]' "$skipped of 15"
rows=$(grep -Ec '^d(12|24|36|48) +(flash|cudnn) +[0-9]+ +[0-9.]+ +[0-9.]+% +[0-9.]+%' "$tmp/run.log")
check "gpu_check.sh's table has d12 with both attentions, then d48, d24 and d36" '[ "$rows" -eq 5 ]' \
    "$rows rows: $(sed -n '/^model/,/^== where/p' "$tmp/run.log" | tr '\n' '|')"
check "gpu_check.sh takes the faster attention (cudnn runs here) for the larger models" \
    'grep -Eq "^d48 +cudnn +[0-9]" "$tmp/run.log"'
profiles=$(sed -n '/^== where/,$p' "$tmp/run.log" | grep -c '^BENCH profile_step')
check "gpu_check.sh ends with the step profile of each attention" '[ "$profiles" -eq 2 ]' "$profiles lines"

BUDGET_S=0 EMULATED=1 OUT="$tmp/none" bash scripts/gpu_check.sh >"$tmp/none.log" 2>&1
rc=$?
not_run=$(grep -c 'not run (time budget)' "$tmp/none.log")
check "gpu_check.sh with its budget spent lists every step as not run and still prints the table" \
    '[ $rc -eq 0 ] && [ "$not_run" -eq 25 ] && grep -q "^model  attn" "$tmp/none.log"' \
    "exit $rc, $not_run of 25 steps not run"
