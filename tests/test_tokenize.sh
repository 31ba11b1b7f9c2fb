#!/usr/bin/env bash
# test_tokenize.sh: the `tokenize` command: --raw ids equal GPT-2's reference
# ids on every fixture (SKIP without ../shared/data), --threads 2 output equals
# 1 thread, --train-vocab writes a vocabulary that compresses its corpus, shard
# layout (val split, shard size, EOT before each document, --doc-sep, stdin,
# zstd, uint32 ids above 65536 tokens), and every bad input exits 2 with one
# stderr line naming the file or flag.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
BIN=$BUILD/tokenize
DATA=${REPO:-.}/../shared/data
dir=$tmp

P=tokenize_
# header_ints FILE: the first three int32 of a shard header
header_ints() { od -A n -t d4 -N 12 "$1" | tr -s ' ' | sed 's/^ //'; }

# --- GPT-2 fixtures, raw ids
if [ -d "$DATA/gpt2/fixtures" ]; then
    n=0
    for txt in "$DATA"/gpt2/fixtures/*.txt; do
        name=$(basename "$txt" .txt)
        for th in 1 2; do
            if "$BIN" --gpt2 "$DATA/gpt2" --raw "$txt" "$dir/$name.$th.u16" --threads $th >"$dir/out" 2>&1 &&
                cmp -s "$dir/$name.$th.u16" "$DATA/gpt2/fixtures/$name.u16"; then
                pass "gpt2_fixture_${name}_threads$th"
            else
                fail "gpt2_fixture_${name}_threads$th" "$(head -c 300 "$dir/out")"
            fi
        done
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] && pass "gpt2_fixtures_found_$n" || fail gpt2_fixtures_found "no *.txt in $DATA/gpt2/fixtures"
else
    echo "SKIP: tokenize_gpt2_fixtures ($DATA/gpt2/fixtures not found)"
fi

# --- a corpus: tinyshakespeare's first 300 kB, or generated lines
if [ -f "$DATA/tinyshakespeare.txt" ]; then
    head -c 300000 "$DATA/tinyshakespeare.txt" >"$dir/corpus.txt"
else
    awk 'BEGIN { srand(3); n = split("th e ki ng qu een sh all spe ak ou ar t my lo rd of yo rk is", w, " ");
                 for (i = 0; i < 60000; i++) { k = 1 + int(rand() * 3); for (j = 0; j < k; j++) printf "%s", w[int(rand() * n) + 1];
                                               printf "%s", (rand() < 0.15 ? "\n" : " ") } }' >"$dir/corpus.txt"
fi
bytes=$(wc -c <"$dir/corpus.txt")

# --- trainer
if "$BIN" --train-vocab 1024 --out-dir "$dir/voc" "$dir/corpus.txt" >"$dir/out" 2>&1 &&
    [ -s "$dir/voc/encoder.json" ] && [ -s "$dir/voc/vocab.bpe" ] && [ -s "$dir/voc/tokenizer.bin" ]; then
    pass train_vocab_writes_files
else
    fail train_vocab_writes_files "$(head -c 300 "$dir/out")"
fi
merges=$(($(wc -l <"$dir/voc/vocab.bpe") - 1))
[ "$merges" -eq 767 ] && pass train_vocab_767_merges || fail train_vocab_767_merges "vocab.bpe has $merges merges"
"$BIN" --gpt2 "$dir/voc" --raw "$dir/corpus.txt" "$dir/c1.u16" >"$dir/out" 2>&1
"$BIN" --gpt2 "$dir/voc" --raw "$dir/corpus.txt" "$dir/c2.u16" --threads 2 >>"$dir/out" 2>&1
tokens=$(($(wc -c <"$dir/c1.u16") / 2))
if [ "$tokens" -gt 0 ] && [ $((tokens * 2)) -lt "$bytes" ]; then
    pass "trained_vocab_compresses_${bytes}_bytes_to_${tokens}_tokens"
else
    fail trained_vocab_compresses "$bytes bytes -> $tokens tokens: $(head -c 300 "$dir/out")"
fi
cmp -s "$dir/c1.u16" "$dir/c2.u16" && pass trained_vocab_threads2_equals_threads1 || fail trained_vocab_threads2_equals_threads1 "outputs differ"

# --- shards: bytes tokenizer, documents split at "%" lines
printf 'ab\n%%\ncd e\n%%\n\n%%\nx' >"$dir/fort.txt"   # documents "ab\n" "cd e\n" "\n" "x": 10 bytes + 4 EOT
if "$BIN" --bytes --doc-sep % --val-tokens 5 --shard-tokens 4 --out-dir "$dir/sh" --name f "$dir/fort.txt" >"$dir/out" 2>&1; then
    got="$(header_ints "$dir/sh/f_val_000000.bin")|$(header_ints "$dir/sh/f_train_000001.bin")|$(header_ints "$dir/sh/f_train_000002.bin")|$(header_ints "$dir/sh/f_train_000003.bin")"
    want="20240520 1 5|20240520 1 4|20240520 1 4|20240520 1 1"
    [ "$got" = "$want" ] && pass shard_split_val5_shards4 || fail shard_split_val5_shards4 "headers '$got', want '$want'"
    ids=$(for f in val_000000 train_000001 train_000002 train_000003; do od -A n -t u2 -j 1024 "$dir/sh/f_$f.bin"; done | tr -s ' \n' ' ' | sed 's/^ //;s/ $//')
    want="256 97 98 10 256 99 100 32 101 10 256 10 256 120"
    [ "$ids" = "$want" ] && pass shard_docs_eot_first || fail shard_docs_eot_first "ids '$ids', want '$want'"
    [ ! -e "$dir/sh/f_train_000004.bin" ] && [ "$(ls "$dir/sh" | wc -l)" -eq 4 ] && pass shard_count_4 || fail shard_count_4 "$(ls "$dir/sh")"
else
    fail shard_run "$(head -c 300 "$dir/out")"
fi
printf 'hi' | "$BIN" --bytes --out-dir "$dir/stdin" >"$dir/out" 2>&1
[ "$(header_ints "$dir/stdin/data_train_000001.bin" 2>/dev/null)" = "20240520 1 3" ] && pass stdin_one_document || fail stdin_one_document "$(head -c 300 "$dir/out")"
# two input files are two documents (16 bytes + EOT each); the val shard takes them whole here
"$BIN" --bytes --val-tokens 100 --out-dir "$dir/two" "$dir/fort.txt" "$dir/fort.txt" >"$dir/out" 2>&1
[ "$(header_ints "$dir/two/data_val_000000.bin" 2>/dev/null)" = "20240520 1 34" ] && pass two_files_two_documents || fail two_files_two_documents "$(head -c 300 "$dir/out")"

# --- a vocabulary above 65536 tokens (bytes + 65300 unused tokens + EOT): uint32 ids
mkdir -p "$dir/big"
awk 'BEGIN { n = 0; printf "{";
    for (b = 0; b < 256; b++) {
        cp = ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) ? b : 256 + n++;
        printf "%s\"%s\": %d", (b ? ", " : ""), (cp == 34 ? "\\\"" : cp == 92 ? "\\\\" : sprintf("\\u%04x", cp)), b }
    for (i = 0; i < 65300; i++) printf ", \"tok%d\": %d", i, 256 + i;
    printf ", \"<|endoftext|>\": %d}", 256 + 65300 }' >"$dir/big/encoder.json"
echo '#version: 0.2' >"$dir/big/vocab.bpe"
if "$BIN" --gpt2 "$dir/big" --raw "$dir/fort.txt" "$dir/big.u32" >"$dir/out" 2>&1 &&
    "$BIN" --gpt2 "$dir/big" --out-dir "$dir/bigsh" "$dir/fort.txt" >>"$dir/out" 2>&1; then
    ids=$(od -A n -t u4 "$dir/big.u32" | tr -s ' \n' ' ' | sed 's/^ //;s/ $//')
    first=$(od -A n -t u4 -j 1024 -N 8 "$dir/bigsh/data_train_000001.bin" | tr -s ' ' | sed 's/^ //')
    got="$(header_ints "$dir/bigsh/data_train_000001.bin")|$first|${ids%% *}|$(wc -c <"$dir/big.u32")"
    [ "$got" = "20240801 7 17|65556 97|97|64" ] && pass vocab_above_65536_uint32 || fail vocab_above_65536_uint32 "$got"
else
    fail vocab_above_65536_uint32 "$(head -c 300 "$dir/out")"
fi

# --- zstd shards (needs a build with libzstd)
if "$BIN" --bytes --zstd 3 --out-dir "$dir/z" "$dir/corpus.txt" >"$dir/out" 2>&1; then
    magic=$(header_ints "$dir/z/data_train_000001.bin" | cut -d' ' -f1)
    [ "$magic" = 20241101 ] && [ "$(wc -c <"$dir/z/data_train_000001.bin")" -lt "$bytes" ] && pass zstd_shard || fail zstd_shard "magic $magic"
elif grep -q 'libzstd' "$dir/out"; then
    echo "SKIP: tokenize_zstd_shard (built without libzstd)"
else
    fail zstd_shard "$(head -c 300 "$dir/out")"
fi

# --- GPT-2 shards of one file: token count = raw ids + 1 EOT
if [ -d "$DATA/gpt2/fixtures" ]; then
    txt="$DATA/gpt2/fixtures/mixed.txt"
    "$BIN" --gpt2 "$DATA/gpt2" --out-dir "$dir/g" --val-tokens 10 --threads 2 "$txt" >"$dir/out" 2>&1
    raw=$(($(wc -c <"$DATA/gpt2/fixtures/mixed.u16") / 2))
    first=$(od -A n -t u2 -j 1024 -N 2 "$dir/g/data_val_000000.bin" 2>/dev/null | tr -d ' ')
    got="$(header_ints "$dir/g/data_val_000000.bin" 2>/dev/null)|$(header_ints "$dir/g/data_train_000001.bin" 2>/dev/null)|$first"
    [ "$got" = "20240520 1 10|20240520 1 $((raw + 1 - 10))|50256" ] && pass gpt2_shards || fail gpt2_shards "$got: $(head -c 300 "$dir/out")"
fi

# --- bad inputs: exit 2, one stderr line containing WANT
expect_exit2() {
    local name=$1 want=$2; shift 2
    "$BIN" "$@" >"$dir/out" 2>"$dir/err" </dev/null
    local rc=$? lines
    lines=$(wc -l <"$dir/err")
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$dir/err"; then
        pass "error_$name"
    else
        fail "error_$name" "exit $rc, $lines stderr lines: $(head -c 300 "$dir/err")"
    fi
}
mkdir -p "$dir/badjson" "$dir/badbpe" "$dir/gapjson" "$dir/nobpe"
echo 'not json' >"$dir/badjson/encoder.json"; cp "$dir/voc/vocab.bpe" "$dir/badjson/"
cp "$dir/voc/encoder.json" "$dir/badbpe/"; printf '#version: 0.2\nzq\xc4\xa0 Q\n' >"$dir/badbpe/vocab.bpe"
sed 's/"\\u0100": 0, //' "$dir/voc/encoder.json" >"$dir/gapjson/encoder.json"; cp "$dir/voc/vocab.bpe" "$dir/gapjson/"
cp "$dir/voc/encoder.json" "$dir/nobpe/"
touch "$dir/afile"
expect_exit2 missing_input "$dir/nope.txt" --bytes --out-dir "$dir/o" "$dir/nope.txt"
expect_exit2 input_is_dir "$dir/voc" --bytes --out-dir "$dir/o" "$dir/voc"
expect_exit2 missing_raw_in "$dir/nope.txt" --bytes --raw "$dir/nope.txt" "$dir/x.u16"
expect_exit2 raw_out_unwritable "$dir/no/dir/x.u16" --bytes --raw "$dir/fort.txt" "$dir/no/dir/x.u16"
expect_exit2 raw_one_value "--raw" --bytes --raw "$dir/fort.txt"
expect_exit2 missing_gpt2_dir "$dir/nodir/encoder.json" --gpt2 "$dir/nodir" --raw "$dir/fort.txt" "$dir/x.u16"
expect_exit2 bad_encoder_json "$dir/badjson/encoder.json" --gpt2 "$dir/badjson" --raw "$dir/fort.txt" "$dir/x.u16"
expect_exit2 encoder_json_gap "$dir/gapjson/encoder.json" --gpt2 "$dir/gapjson" --raw "$dir/fort.txt" "$dir/x.u16"
expect_exit2 bad_vocab_bpe "$dir/badbpe/vocab.bpe" --gpt2 "$dir/badbpe" --raw "$dir/fort.txt" "$dir/x.u16"
expect_exit2 missing_vocab_bpe "$dir/nobpe/vocab.bpe" --gpt2 "$dir/nobpe" --raw "$dir/fort.txt" "$dir/x.u16"
expect_exit2 out_dir_is_file "$dir/afile" --bytes --out-dir "$dir/afile" "$dir/fort.txt"
expect_exit2 no_tokenizer "--gpt2 DIR or --bytes" --out-dir "$dir/o" "$dir/fort.txt"
expect_exit2 two_tokenizers "--gpt2 DIR or --bytes" --bytes --gpt2 "$dir/voc" --out-dir "$dir/o" "$dir/fort.txt"
expect_exit2 no_out_dir "--out-dir" --bytes "$dir/fort.txt"
expect_exit2 train_vocab_too_small "--train-vocab" --train-vocab 100 --out-dir "$dir/o" "$dir/fort.txt"
expect_exit2 bad_threads "--threads" --bytes --threads 0 --out-dir "$dir/o" "$dir/fort.txt"
expect_exit2 unknown_flag "--frobnicate" --bytes --frobnicate 1

# --- progress on a terminal: bytes done, MB/s, an ETA while it runs; nothing when stderr is a file ---
if command -v script >/dev/null 2>&1; then
    head -c 24000000 /dev/zero | tr '\0' 'a' >"$dir/long.txt"
    script -qec "'$BIN' --bytes --out-dir '$dir/long' '$dir/long.txt'" /dev/null 2>&1 | tr '\r' '\n' >"$dir/tty.out"
    "$BIN" --bytes --out-dir "$dir/long2" "$dir/long.txt" >/dev/null 2>"$dir/notty.err"
    check progress_on_a_terminal \
        'grep -Eq "^tokenize: [0-9.]+ of 24.0 MB \([0-9]+%\) \| [0-9.]+ MB/s \| ETA [0-9.ms]+ *$" "$dir/tty.out" &&
         grep -Eq "^tokenize: 24.0 of 24.0 MB \(100%\) \| [0-9.]+ MB/s *$" "$dir/tty.out" && [ ! -s "$dir/notty.err" ] &&
         cmp -s "$dir/long/data_train_000001.bin" "$dir/long2/data_train_000001.bin"' "$(head -c 300 "$dir/tty.out")"
    rm -rf "$dir/long" "$dir/long2" "$dir/long.txt"
else
    echo "SKIP: tokenize progress (no script(1) for a terminal)"
fi

# --- the README's data patterns match the shards of the download script and of ./tokenize by hand ---
pats=$(grep -o "'dev/data/tinyshakespeare/[^']*'" README.md | tr -d "'" | tr '\n' ' ')
printf 'First Citizen:\nBefore we proceed any further, hear me speak.\n' >"$dir/input.txt"
"$BIN" --bytes --out-dir "$dir/by_hand/dev/data/tinyshakespeare" --name tiny_shakespeare --val-tokens 10 "$dir/input.txt" \
    >/dev/null 2>&1
mkdir -p "$dir/script/dev/data/tinyshakespeare"
touch "$dir/script/dev/data/tinyshakespeare/tiny_shakespeare_train.bin" "$dir/script/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"
matches() { (cd "$1" && for p in $pats; do compgen -G "$p" >/dev/null || echo "$p"; done); }
check readme_data_patterns_match_both_layouts \
    '[ -n "$pats" ] && [ -z "$(matches "$dir/by_hand")" ] && [ -z "$(matches "$dir/script")" ]' \
    "patterns '$pats': unmatched by hand: $(matches "$dir/by_hand"), by the script: $(matches "$dir/script")"

"$BIN" --help >"$dir/out" 2>&1 && grep -q -- '--train-vocab' "$dir/out" && grep -q -- '--doc-sep' "$dir/out" && pass help || fail help "$(head -c 200 "$dir/out")"
