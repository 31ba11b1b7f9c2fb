#!/usr/bin/env bash
# test_build.sh: the Makefile's build variables (docs/build.md) build the product where they say: plain
# `make SANITIZER=address`, `SANITIZER=undefined`, both at once (`SANITIZER=address,undefined`, the build
# make test-all runs) and (x86-64) `CPU_ISA=avx2` build train_gpt, tokenize,
# plan (and train_gptcu where nvcc is found) under their build directory and link nothing at the top level
# (no fallback to make's built-in rules). A dry run (make -n) into a scratch build directory: nothing compiles.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh

variants=("SANITIZER=address" "SANITIZER=undefined" "SANITIZER=address,undefined")
case "$(${CC:-gcc} -dumpmachine 2>/dev/null)" in x86_64*) variants+=("CPU_ISA=avx2");; esac
for v in "${variants[@]}"; do
    dir="$tmp/$(echo "${v#*=}" | tr , -)"
    make -n --no-print-directory "$v" BUILD="$dir" >"$tmp/plan.txt" 2>&1
    rc=$?
    top=$(grep -oE -- '-o (train_gpt|tokenize|plan|train_gptcu)( |$)' "$tmp/plan.txt" | tr '\n' ' ')
    missing=""
    for p in train_gpt tokenize plan; do grep -q -- "-o $dir/$p " "$tmp/plan.txt" || missing+=" $p"; done
    check "make $v builds the programs under its build directory and nothing at the top level" \
        '[ $rc -eq 0 ] && [ -z "$top" ] && [ -z "$missing" ]' \
        "rc=$rc, links at the top level: ${top:-none}, not planned:${missing:- none} $(grep -m1 '^make' "$tmp/plan.txt")"
done

# The combined sanitizer build's own directory: one name, no comma in it
make -n -B --no-print-directory SANITIZER=address,undefined >"$tmp/plan.txt" 2>&1  # (-B: whatever is built already)
check "make SANITIZER=address,undefined builds into build-address-undefined/ with both sanitizers" \
    'grep -q -- "-o build-address-undefined/train_gpt " "$tmp/plan.txt" && grep -q -- "-fsanitize=address,undefined" "$tmp/plan.txt"' \
    "$(grep -m2 -- '-o build' "$tmp/plan.txt")"
