#!/usr/bin/env bash
# run_all.sh (make test-all): the test suite in three builds: normal,
# AddressSanitizer and UndefinedBehaviorSanitizer. Prints each build's tally and
# a closing line "N passed, N failed, N skipped" over all three; exit 1 if any
# build or test failed.
set -u
cd "$(dirname "$0")/.."
tp=0; tf=0; ts=0; status=0
log=$(mktemp)
for cfg in "" "SANITIZER=address" "SANITIZER=undefined"; do
    echo "==== make test $cfg"
    # MPI's own allocations are reported by LeakSanitizer; they are not ours. The programs build on
    # every core (the tests themselves then run one after another)
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} make --no-print-directory -j"$(nproc)" test $cfg 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    tally=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    if [ -z "$tally" ]; then
        echo "FAIL: make test $cfg did not finish (exit $rc)"
        tf=$((tf + 1)); status=1; continue
    fi
    read -r p _ f _ s _ <<<"$(echo "$tally" | tr -d ',')"
    tp=$((tp + p)); tf=$((tf + f)); ts=$((ts + ${s:-0}))
    [ "$rc" -ne 0 ] && status=1
done
rm -f "$log"
echo
echo "==== all builds (normal, address, undefined)"
echo "$tp passed, $tf failed, $ts skipped"
[ "$status" -eq 0 ] && [ "$tf" -eq 0 ]
