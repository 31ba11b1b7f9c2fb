#!/usr/bin/env bash
# coverage.sh: checks that the sanitizer builds' subset of the suite (tests/sanitizer_tests.txt) still
# compiles and runs every source file. Builds everything with gcov counters (make COVERAGE=1, in
# build-coverage/), runs that subset there as run_all.sh runs it in the sanitizer builds (the scripts see a
# build-* directory and take their sanitizer-build cuts), then lists every .c/.cu/.h/.cuh file git tracks
# with its executed lines out of its executable ones, as gcov counts them over every program. Exit 1 when a
# file was not compiled into any program or none of its lines ran, but for those sanitizer_tests.txt names as
# not run, with the reason. Not part of the suite (a whole build and
# a run: about as long as a sanitizer build's); run it after changing the subset or adding a source file:
#   bash tests/coverage.sh [--count-only]      (HAVE_MPI is the Makefile's)
set -u
cd "$(dirname "$0")/.."
BUILD=build-coverage
subset=$(grep -v '^#' tests/sanitizer_tests.txt | grep . | paste -sd'|')
if [ "${1:-}" != --count-only ]; then  # (--count-only: the counts the last runs left, without running again)
    mkdir -p "$BUILD" && find "$BUILD" -name "*.gcda" -delete
    make --no-print-directory -j"$(nproc)" COVERAGE=1 test TESTS="^($subset)\$" >"$BUILD/suite.log" 2>&1 ||
        echo "note: the subset had failures or the build stopped (see $BUILD/suite.log); counting what ran"
    grep -E '^[0-9]+ passed, [0-9]+ failed' "$BUILD/suite.log"
fi
# gcov -n: per source file, "File 'NAME'" then "Lines executed:P% of N" (or "No executable lines"); the
# same header in many programs: the most lines any one program ran
counts=$(mktemp)
trap 'rm -f "$counts"' EXIT
find "$BUILD" -name '*.gcno' -print0 | xargs -0 -r -n 20 gcov -n 2>/dev/null |
    awk '/^File /{ f = substr($2, 2, length($2) - 2); next }
         /^Lines executed:/{ split($2, a, ":"); pct = a[2] + 0; n = $NF; ran = int(pct * n / 100 + 0.5)
                             if (!(f in tot) || ran > done[f]) { done[f] = ran; tot[f] = n } ; next }
         /^No executable lines/{ if (!(f in tot)) { done[f] = 0; tot[f] = 0 } }
         END { for (f in tot) print f, done[f], tot[f] }' >"$counts"
# the files the subset is known not to run, each with its reason in sanitizer_tests.txt ("# not run: FILE ...")
exempt=" $(sed -n 's/^# not run: \([^ ]*\).*/\1/p' tests/sanitizer_tests.txt | tr '\n' ' ')"
status=0
printf '%-44s %s\n' "file" "lines run / executable (the best program)"
for f in $(git ls-files '*.c' '*.cu' '*.h' '*.cuh'); do
    line=$(awk -v f="$f" '$1 == f || $1 == "./" f' "$counts" | sort -k2 -n | tail -1)
    if [ -z "$line" ] && grep -rqs --include='*.d' -- " $f\( \|$\)" "$BUILD"; then
        printf '%-44s %s\n' "$f" "compiled, no executable lines"  # (data tables)
    elif [ -z "$line" ]; then
        printf '%-44s %s\n' "$f" "NOT COMPILED into any program of the build"; status=1
    else
        read -r _ ran n <<<"$line"
        if [ "$n" -gt 0 ] && [ "$ran" -eq 0 ] && [[ "$exempt" == *" $f "* ]]; then
            printf '%-44s %s\n' "$f" "not run (0 / $n): named in tests/sanitizer_tests.txt"
        elif [ "$n" -gt 0 ] && [ "$ran" -eq 0 ]; then
            printf '%-44s %s\n' "$f" "NOT RUN (0 / $n)"; status=1
        else
            printf '%-44s %s\n' "$f" "$ran / $n"
        fi
    fi
done
[ $status -eq 0 ] && echo "every source file compiled, and ran in the subset but those tests/sanitizer_tests.txt names" ||
    echo "some source files did not run in the subset: add a test that runs them to tests/sanitizer_tests.txt"
exit $status
