#!/usr/bin/env bash
# test_fuzz.sh: the fuzz targets (tests/fuzz/, see tests/fuzz/README.md). In every build each
# target's committed corpus (every input that ever failed, and seeds) replays through
# $BUILD/fuzz/replay_NAME; where the build has libFuzzer (the normal build, with clang), each
# target then fuzzes for FUZZ_SECONDS (default 3; 0: skip) from a copy of that corpus, and the
# executions and coverage are printed. A finding fails with the input saved next to the log.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
seconds=${FUZZ_SECONDS:-3}
for src in tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c); name=${name#fuzz_}
    [ "$name" = replay_main ] && continue
    corpus=tests/fuzz/corpus/$name
    replay=$BUILD/fuzz/replay_$name
    if [ ! -x "$replay" ]; then fail "fuzz target $name replays its corpus" "$replay was not built"; continue; fi
    n=$(ls "$corpus" | wc -l)
    out=$("$replay" "$corpus" 2>&1 >/dev/null); rc=$?
    check "fuzz target $name: its corpus of $n inputs replays with no finding" '[ $rc -eq 0 ]' \
        "rc=$rc: $(grep -v '^error:' <<<"$out" | head -c 400)"
    fuzzer=$BUILD/fuzz/libfuzzer_$name
    if [ "$seconds" = 0 ] || [ ! -x "$fuzzer" ]; then
        echo "SKIP: fuzz target $name: no libFuzzer run (${fuzzer} not built in this build, or FUZZ_SECONDS=0)"
        continue
    fi
    mkdir -p "$tmp/$name" && cp "$corpus"/* "$tmp/$name/"
    "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$tmp/$name-" "$tmp/$name" >"$tmp/$name.log" 2>&1; rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$tmp/$name.log" | grep -o '[0-9]*$')
    cov=$(grep -o 'cov: [0-9]*' "$tmp/$name.log" | tail -1 | grep -o '[0-9]*')
    found=$(ls "$tmp/$name"-* 2>/dev/null | head -1)
    if [ $rc -eq 0 ] && [ -z "$found" ]; then
        pass "fuzz target $name: ${seconds} s of libFuzzer, ${execs:-?} executions, coverage ${cov:-?} edges, no finding"
    else
        fail "fuzz target $name: libFuzzer found an input" "rc=$rc; $(grep -E 'ERROR|fuzz harness|SUMMARY' "$tmp/$name.log" | head -3 | tr '\n' ' ') input: ${found:-none} (copy it into $corpus/)"
        [ -n "$found" ] && mkdir -p "$BUILD/fuzz/findings" && cp "$found" "$BUILD/fuzz/findings/"
    fi
done
