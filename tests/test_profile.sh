#!/usr/bin/env bash
# test_profile.sh: scripts/profile.sh. Its Nsight Systems and Nsight Compute
# command lines (DRY=1: printed, not run; they need a GPU) capture the run's
# --profile-steps range through the CUDA profiler API; with perf on this
# machine (when perf can record here) it profiles steps 3-5 of a small CPU
# run for real, through perf's control FIFO, and reports symbols. Bad use:
# the usage text and exit 2.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
P=profile_

bash scripts/profile.sh >"$tmp/usage" 2>&1
rc=$?
check usage_without_a_command "[ $rc -eq 2 ] && grep -q 'scripts/profile.sh nsys' '$tmp/usage'" "exit $rc"

out=$(DRY=1 OUT="$tmp/o" bash scripts/profile.sh nsys -- ./train_gptcu --model d12 --steps 8)
check nsys_captures_the_profile_steps_through_the_cuda_profiler_api \
    "grep -q -- '--capture-range cudaProfilerApi --capture-range-end stop' <<<\"\$out\" &&
     grep -q -- '--trace cuda,nvtx,cublas,cudnn,osrt' <<<\"\$out\" &&
     grep -q -- './train_gptcu --model d12 --steps 8 --profile-steps 3:5' <<<\"\$out\" &&
     grep -q -- 'nsys stats --report cuda_gpu_kern_sum,nvtx_sum' <<<\"\$out\"" "$out"
out=$(DRY=1 STEPS=4:4 OUT="$tmp/o" bash scripts/profile.sh ncu -- ./train_gptcu --model d12 --steps 8)
check ncu_profiles_the_hot_kernels_of_one_step \
    "grep -q -- '--profile-from-start off --set full --nvtx' <<<\"\$out\" &&
     grep -q -- '--steps 8 --profile-steps 4:4' <<<\"\$out\"" "$out"

if ! command -v perf >/dev/null 2>&1 || ! perf record -o "$tmp/probe.data" -- true >/dev/null 2>&1 ||
    ! perf record --help 2>/dev/null | grep -q -- '--control'; then
    echo "SKIP: ${P}perf (perf missing, not allowed to record here, or without --control)"
    exit 0
fi
tokenize_sources "$tmp/data" llmc/*.h
OUT="$tmp/perf" bash scripts/profile.sh perf -- "$BUILD/train_gpt" --data-train "$tmp/data/src_train_*.bin" \
    --n-layer 2 --n-embd 64 --n-head 2 --vocab-size 257 --max-seq-len 64 --seq-len 32 --batch-size 4 \
    --steps 6 >"$tmp/perf.log" 2>&1
rc=$?
check perf_records_steps_3_to_5_of_a_cpu_run \
    "[ $rc -eq 0 ] && grep -q '^profile: capturing steps 3-5$' '$tmp/perf.log' && [ -s '$tmp/perf/perf.data' ] &&
     grep -q '%' '$tmp/perf.log'" "exit $rc: $(grep -m3 -i 'error\|profile' "$tmp/perf.log" | tr '\n' ' ')"
