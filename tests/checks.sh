# checks.sh (sourced by tests/lib.sh): the PASS:/FAIL: lines tests/run_tests.sh
# counts. P (optional) prefixes every check name; expect_usage_error writes its
# scratch files under $tmp.
P=${P:-}
pass() { echo "PASS: $P$1"; }
fail() { echo "FAIL: $P$1 ($2)"; }
# check NAME CONDITION [WHY]: CONDITION is eval'd; WHY replaces it in the FAIL line
check() { if eval "$2"; then pass "$1"; else fail "$1" "${3:-condition false: $2}"; fi; }
# expect_usage_error NAME REGEX COMMAND...: COMMAND exits 2 with exactly one
# line on stderr, which matches REGEX (bad input: one clear line, no crash)
expect_usage_error() {
    local name=$1 want=$2; shift 2
    "$@" >"$tmp/stdout" 2>"$tmp/err"
    local rc=$? lines
    lines=$(wc -l <"$tmp/err")
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$want" "$tmp/err"; then pass "rejects $name"
    else fail "rejects $name" "rc=$rc, $lines stderr lines: $(head -c 300 "$tmp/err")"; fi
}
# expect_job_ends NAME REGEX COMMAND...: a job with a faulty rank (LLMC_TEST_FAULT) ends by itself: COMMAND
# exits non-zero within 40 s (not by the 60 s timeout), and its output matches REGEX (empty: anything);
# the output is kept in $tmp/NAME.log
expect_job_ends() {
    local name=$1 want=$2 start rc took; shift 2
    start=$(date +%s)
    timeout 60 "$@" >"$tmp/$name.log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 40 ] && { [ -z "$want" ] || grep -q -- "$want" "$tmp/$name.log"; }; then
        pass "$name (exit $rc after $took s)"
    else
        fail "$name" "exit $rc after $took s: $(grep -m2 -i 'error\|abort' "$tmp/$name.log" | tr '\n' ' ')"
    fi
}
# the GPUs nvidia-smi lists (0 without a driver)
gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }
# byte_corpus OUT_DIR NAME VAL_TOKENS FILE...: the files (this repository's sources) as byte-level shards
# OUT_DIR/NAME_val_*.bin (the first VAL_TOKENS tokens; 0: none) and NAME_train_*.bin, through
# $BUILD/tokenize via $tmp/corpus.txt; on failure a FAIL line and exit
byte_corpus() {
    local out=$1 name=$2 val=$3; shift 3
    cat "$@" >"$tmp/corpus.txt"
    "$BUILD/tokenize" --bytes 1 --out-dir "$out" --name "$name" --val-tokens "$val" "$tmp/corpus.txt" \
        >"$tmp/tok.log" 2>&1 || { fail "tokenize test corpus" "$(tail -1 "$tmp/tok.log")"; exit 1; }
}
# tokenize_sources OUT_DIR FILE...: byte_corpus OUT_DIR src 20000 FILE...
tokenize_sources() { local out=$1; shift; byte_corpus "$out" src 20000 "$@"; }
# records_from LOG K: what a run resumed at step K logs: a JSON log's step records after K steps (steps done)
# and its validation records from K on, without timings, elapsed time, the run, checkpoint or summary records
records_from() { grep -v '^{"step":[0-9]*,"ckpt"\|^{"summary"\|^{"run"' "$1" | sed 's/,"ms".*/}/; s/,"elapsed_s".*/}/' |
    awk -v k="$2" -F'[:,]' '$3 == "\"val_loss\"" ? $2 >= k : $2 > k'; }
# samples_from LOG K: the samples a trainer's output printed at steps >= K (the loop's step numbers)
samples_from() { awk -v k="$2" '/^step +[0-9]+\/[0-9]+ /{split($2, a, "/"); s = a[1] + 0} /^---- sample/{p = s >= k} p; /^----------------$/{p = 0}' "$1"; }
