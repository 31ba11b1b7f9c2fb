#!/usr/bin/env bash
# test_dataloader.sh: every defective data input makes the loader exit 2 with
# one line on stderr naming the file (or the pattern). The shards are written
# by build/tests/test_dataloader --write-bad; --load reads one epoch.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
BIN=$BUILD/tests/test_dataloader
dir=$tmp
"$BIN" --write-bad "$dir" || { echo "FAIL: dataloader_write_bad (exit $?)"; exit 1; }

# expect_exit2 NAME PATTERN T WANT: loading PATTERN exits 2, one stderr line containing WANT
expect_exit2() {
    local name=$1 pattern=$2 T=$3 want=$4
    "$BIN" --load "$pattern" "$T" 50257 >"$dir/out" 2>"$dir/err"
    local rc=$? lines
    lines=$(wc -l <"$dir/err")
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && grep -qF -- "$want" "$dir/err"; then
        echo "PASS: dataloader_error_$name"
    else
        echo "FAIL: dataloader_error_$name (exit $rc, $lines stderr lines: $(head -c 300 "$dir/err"))"
    fi
}

if "$BIN" --load "$dir/good.bin" 64 50257 >"$dir/out" 2>"$dir/err" && grep -q '^read 15 batches' "$dir/out"; then
    echo "PASS: dataloader_good_shard_loads"
else
    echo "FAIL: dataloader_good_shard_loads ($(cat "$dir/out" "$dir/err" | head -c 300))"
fi
if "$BIN" --load "$dir/[gs]*.bin" 64 50257 >"$dir/out" 2>"$dir/err" && grep -q '^read 15 batches' "$dir/out"; then
    echo "PASS: dataloader_skips_shard_without_sample"
else
    echo "FAIL: dataloader_skips_shard_without_sample ($(cat "$dir/out" "$dir/err" | head -c 300))"
fi
expect_exit2 empty_glob "$dir/nothing_*.bin" 64 "$dir/nothing_*.bin"
expect_exit2 no_full_sample "$dir/short.bin" 64 "$dir/short.bin"
expect_exit2 bad_magic "$dir/badmagic.bin" 64 "$dir/badmagic.bin"
expect_exit2 bad_version "$dir/badversion.bin" 64 "$dir/badversion.bin"
expect_exit2 truncated "$dir/truncated.bin" 64 "$dir/truncated.bin"
expect_exit2 out_of_vocab "$dir/oov.bin" 64 "$dir/oov.bin"
if [ -f "$dir/corrupt_zstd.bin" ]; then
    expect_exit2 corrupt_zstd "$dir/corrupt_zstd.bin" 64 "$dir/corrupt_zstd.bin"
else
    echo "SKIP: dataloader_error_corrupt_zstd (built without libzstd)"
fi
