# lib.sh: the set-up every test script shares. A script starts
#     set -u
#     cd "$(dirname "$0")/.."
#     . tests/lib.sh
# and then has: BUILD (default build); sanitizer_build (1 in a build-*/ directory, the sanitizer and
# coverage builds, where scripts take CI's cuts); tmp, a scratch directory removed at exit (a script that
# sets its own EXIT trap removes it there); the PASS:/FAIL: helpers of tests/checks.sh; and the functions
# below.
set -u
BUILD=${BUILD:-build}
sanitizer_build=0
case "$BUILD" in build-*) sanitizer_build=1 ;; esac
. tests/checks.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CPU=$BUILD/train_gpt CMP=$BUILD/tests/test_zero  # the CPU trainer; the comparison of logs and model files

# have_mpi: the build has MPI and mpirun is there
have_mpi() { [ "${HAVE_MPI:-}" = yes ] && command -v mpirun >/dev/null 2>&1; }
# need_mpi NAME [TIMEOUT_S]: without MPI, "SKIP: NAME (built without MPI or no mpirun)" and exit 0. Else
# MPIRUN, the launcher's words (each job under `timeout TIMEOUT_S` when given), and the environment of the
# ranks: one OpenMP thread each, and no LeakSanitizer (MPI's own allocations are not ours)
need_mpi() {
    if ! have_mpi; then
        echo "SKIP: $1 (built without MPI or no mpirun)"
        exit 0
    fi
    export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 OMPI_MCA_rmaps_base_oversubscribe=1
    MPIRUN=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS -x ASAN_OPTIONS)
    [ -n "${2:-}" ] && MPIRUN=(timeout "$2" "${MPIRUN[@]}")
    return 0
}
# generated LOG: what a --generate run printed between its "---- generate" and "----------------" lines
generated() { sed -n '/^---- generate/,/^----------------$/p' "$1" | sed '1d;$d' | head -c -1; }
# comm_for RANKS: the --comm a GPU run of RANKS ranks takes here: nccl on the emulated trainer (its NCCL is
# MPI underneath), or with a GPU a rank and a build with NCCL; else mpi (staged through host memory)
comm_for() {
    if [ "${EMULATED:-0}" = 1 ] ||
        { [ "$(gpu_count)" -ge "$1" ] && grep -q -- '-DLLMC_NCCL' "$BUILD/flags.stamp" 2>/dev/null; }; then
        echo nccl
    else
        echo mpi
    fi
}
# activation_sets_held NAME STAGES: the pipeline run $tmp/NAME.log (at least 2 steps) reports for each of its
# STAGES ranks that its runtime held at most, of each chunk, the activation sets it allocated, and rank 0's
# are the count its memory line says ("at the schedule's peak: sets 4+2": both trainers' and the planner's
# count, pp_schedule.h's pp_rank_sets); the check is ${LAYOUT_PREFIX}activation_sets_NAME_are_what_the_runtime_held
activation_sets_held() {
    local log=$tmp/$1.log ok=1 line held
    line=$(grep -ao "the schedule's peak: sets [0-9+]*" "$log" | sed 's/.* sets //')
    held=$(grep -ao 'activation sets held at most [0-9+]* of [0-9+]*$' "$log" | sed 's/.* most //')
    [ -n "$line" ] && [ "$(grep -c . <<<"$held")" = "$2" ] && [ "$(head -1 <<<"$held")" = "$line of $line" ] &&
        ! grep -qv '^\([0-9+]*\) of \1$' <<<"$held" || ok=0
    check "${LAYOUT_PREFIX:-}activation_sets_$1_are_what_the_runtime_held" "[ $ok = 1 ]" \
        "memory line: sets ${line:-?}; held of allocated: $(tr '\n' ' ' <<<"$held")"
}
# compare_layout NAME RANKS TOL FLAGS...: trains $TRAIN with ${COMMON[@]} and FLAGS on RANKS ranks under
# ${MPIRUN[@]} and compares its losses, gradient norms and final weights with the reference run's
# ($tmp/ref.json, $tmp/ref.bin) to TOL; the checks are named ${P}${LAYOUT_PREFIX}NAME_..._match_${LAYOUT_REF}
# (LAYOUT_PREFIX default empty, LAYOUT_REF default one_process)
compare_layout() {
    local name=$1 np=$2 tol=$3 rc; shift 3
    local check_name=${P}${LAYOUT_PREFIX:-}$name ref=${LAYOUT_REF:-one_process}
    "${MPIRUN[@]}" -np "$np" "$TRAIN" "${COMMON[@]}" "$@" --log-json "$tmp/$name.json" --save-model "$tmp/$name.bin" \
        >"$tmp/$name.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then fail "${name}_runs" "exit $rc: $(grep -a -m2 -i 'error' "$tmp/$name.log" | tr '\n' ' ')"; return; fi
    "$CMP" --compare-logs "$tmp/ref.json" "$tmp/$name.json" "$tol" "${check_name}_loss_and_norm_match_$ref"
    "$CMP" --compare-models "$tmp/ref.bin" "$tmp/$name.bin" "$tol" "${check_name}_weights_match_$ref"
}
# eval_matches NAME: compare_layout's run NAME logged the reference's 3 evaluation losses (to 1e-5) and its 3
# samples (the same text), as $tmp/ref.json and $tmp/ref.log have them
val_losses() { grep -o '"val_loss":[0-9.]*' "$1" | cut -d: -f2; }
eval_matches() {
    check "${1}_eval_losses_match_one_process" \
        "[ \$(val_losses '$tmp/ref.json' | wc -l) = 3 ] && paste <(val_losses '$tmp/ref.json') <(val_losses '$tmp/$1.json') | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (NF != 2 || d > 1e-5 * \$1) bad = 1 } END { exit bad }'"
    check "${1}_samples_match_one_process" \
        "[ \$(grep -ac -- '---- sample' '$tmp/$1.log') = 3 ] && diff <(grep -a -A2 -- '---- sample' '$tmp/ref.log') <(grep -a -A2 -- '---- sample' '$tmp/$1.log') >/dev/null"
}
# ckpt_run NAME RANKS FLAGS...: ${COMMON[@]} (10 steps) and FLAGS on RANKS ranks, checkpointing every 5 steps into
# $tmp/NAME.ck
ckpt_run() {
    local name=$1 np=$2; shift 2
    "${MPIRUN[@]}" -np "$np" "$TRAIN" "${COMMON[@]}" "$@" --ckpt-dir "$tmp/$name.ck" --ckpt-every 5 \
        --log-json "$tmp/$name.json" --save-model "$tmp/$name.bin" >"$tmp/$name.log" 2>&1 ||
        fail "${name}_runs" "$(grep -a -m2 -i error "$tmp/$name.log" | tr '\n' ' ')"
}
# resume_run NAME FROM RANKS FLAGS...: resumes FROM's step 5 checkpoint (of ckpt_run) likewise, and checks that it
# resumed at step 5
resume_run() {
    local name=$1 from=$2 np=$3; shift 3
    mkdir -p "$tmp/$name.ck" && cp -r "$tmp/$from.ck/step_00000005" "$tmp/$name.ck/"
    "${MPIRUN[@]}" -np "$np" "$TRAIN" "${COMMON[@]}" "$@" --ckpt-dir "$tmp/$name.ck" --resume auto \
        --log-json "$tmp/$name.json" --save-model "$tmp/$name.bin" >"$tmp/$name.log" 2>&1
    check "${name}_resumes_at_step_5" "grep -aq 'resume: continuing at step 5' '$tmp/$name.log'" \
        "$(grep -a -m2 -i 'error\|resume' "$tmp/$name.log" | tr '\n' ' ')"
}
