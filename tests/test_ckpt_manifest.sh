#!/usr/bin/env bash
# test_ckpt_manifest.sh: a checkpoint's manifest is sealed and cross-checked on resume
# (llmc/ckpt_manifest.h, llmc/checkpoint.h), and its data set is the run's (llmc/dataloader.h's
# identity). One small checkpoint is made; each edit of a copy (re-sealed by tests/ckpt_edit.py,
# so that the check named is the one that must refuse it) is one line naming the field and the
# file, exit 2: the step against the directory's name and against the data position, the sample,
# a range's offset at another state's bytes, a gap and an element overlap between ranges, the
# states' name, shape and dtype, a parameter's shape, invalid UTF-8 (a bad byte, an overlong form,
# a surrogate), an edit without re-sealing (the CRC), more JSON values or ranges than a manifest
# may have, a manifest of a million ranges read in bounded memory. The same tokens reversed are
# refused, and accepted with --resume-data-changed 1 and a warning; shards appended are named as
# such, and a run continued on them writes checkpoints that resume; the data moved to another
# directory, an unchanged checkpoint and a version-2 one (read with a note) resume bit-exact.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN="$BUILD/train_gpt"
export OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0

# 1400 training tokens: 43 samples of 32, 8 (2 micro-batches of 4) a step; epoch 1 begins in step 6 (3 dropped)
tokenize_sources "$tmp/data" <(cat llmc/checkpoint.h llmc/ckpt_*.h | head -c 21400)
COMMON=(--n-layer 2 --n-embd 32 --n-head 2 --vocab-size 257 --max-seq-len 64 --seq-len 32 --batch-size 4
        --total-batch-tokens 256 --peak-tflops 0.1 --steps 12 --shuffle 1)
RUN=(--data-train "$tmp/data/src_train_*.bin" "${COMMON[@]}")
"$TRAIN" "${RUN[@]}" --ckpt-dir "$tmp/ck" --ckpt-every 4 --ckpt-keep 0 --save-model "$tmp/full.bin" >"$tmp/full.log" 2>&1 ||
    { fail "a run with checkpoints for the cases below" "$(tail -2 "$tmp/full.log")"; exit 1; }
ck4=$tmp/ck/step_00000004 ck8=$tmp/ck/step_00000008
check "step 8 is in epoch 1, 3 samples dropped" 'grep -q "\"epoch\": 1, \"sample\": 24, \"dropped\": 3," "$ck8/manifest.json"'

# --- unchanged: bit-exact ---
"$TRAIN" "${RUN[@]}" --resume "$ck4" --save-model "$tmp/res.bin" >"$tmp/res.log" 2>&1
check "an unchanged checkpoint resumes to the same final weights, to the bit" 'cmp -s "$tmp/full.bin" "$tmp/res.bin"' \
    "$(grep -a error "$tmp/res.log" | head -1)"

# --- each edit (re-sealed): one line naming the field, exit 2 ---
e=$tmp/e/step_00000004
edited() {  # edited OLD NEW ...: a copy of step 4 with the edits, re-sealed
    rm -rf "$tmp/e" && mkdir -p "$tmp/e" && cp -r "$ck4" "$tmp/e/" && python3 tests/ckpt_edit.py "$e" "$@"
}
refused() {  # refused NAME REGEX: resuming $e is one line matching REGEX, exit 2
    expect_usage_error "$1" "$2" "$TRAIN" "${RUN[@]}" --resume "$e"
}
edited '"step": 4,' '"step": 5,'
refused "a manifest whose step is not its directory's" "$e/manifest.json: 'step' 5 is not the step of its directory step_00000004"
mv "$e" "$tmp/e/copy"
expect_usage_error "the step of a copy (another name) that the data position disagrees with" \
    "copy/manifest.json: 'step' 5 and the data position ('epoch' 0, 'sample' 32, 'dropped' 0) disagree: 5 steps of 8 samples read 40" \
    "$TRAIN" "${RUN[@]}" --resume "$tmp/e/copy"
edited '"sample": 32,' '"sample": 36,'
refused "a sample that is another multiple of B x ranks" "'step' 4 and the data position ('epoch' 0, 'sample' 36"
rm_off=$(grep -o '"tensor": "adam_m", "lo": 0, "hi": [0-9]*, "offset": [0-9]*' "$ck4/manifest.json")
rv_off=$(grep -o '"tensor": "adam_v", "lo": 0, "hi": [0-9]*, "offset": [0-9]*' "$ck4/manifest.json")
N=$(grep -o '"shape": \[[0-9]*\]' "$ck4/manifest.json" | head -1 | grep -o '[0-9]*')
edited "$rm_off" "${rm_off% *} 0"
refused "a range offset pointing at another state's bytes" "'ranges' of 'rank_00000.bin': its .* at byte 0 overlaps another"
edited && python3 tests/ckpt_edit.py "$e" --insert-data "${rm_off##* }" 4 &&
    python3 tests/ckpt_edit.py "$e" "$rm_off" "${rm_off% *} $((${rm_off##* } + 4))" "$rv_off" "${rv_off% *} $((${rv_off##* } + 4))"
refused "ranges with a gap between them" "its adam_m range \[0, $N) at byte $((${rm_off##* } + 4)) leaves a gap"
h=$((N / 2))
edited "{\"tensor\": \"params\", \"lo\": 0, \"hi\": $N, \"offset\": 0}" \
    "{\"tensor\": \"params\", \"lo\": 0, \"hi\": $h, \"offset\": 0}, {\"tensor\": \"params\", \"lo\": $((h - 100)), \"hi\": $((N - 100)), \"offset\": $((4 * h))}"
refused "ranges of one state that overlap (their bytes tiling the file)" "its params ranges \[0, $h) and \[$((h - 100)), $((N - 100))) overlap"
edited '{"name": "adam_m", "shape"' '{"name": "adam_x", "shape"'
refused "a state's name" "'tensors' entry 1 is not named 'adam_m'"
edited "\"shape\": [$N]" "\"shape\": [$((N + 1))]"
refused "a state's shape" "'tensors' entry 0 (params) has not the 'shape' \[$N\]"
edited '"dtype": "f32"' '"dtype": "f16"'
refused "a state's dtype" "'tensors' entry 0 (params) has not the 'dtype' \"f32\""
edited '"wte.weight", "shape": [384, 32]' '"wte.weight", "shape": [32, 384]'
refused "a parameter's shape" "parameter 0 (wte.weight) has not the 'shape' \[384, 32\]"
for bad in '\xff' '\xc0\xaf' '\xed\xa0\x80'; do
    edited '"trainer": "train_gpt"' "\"trainer\": \"train_gpt$bad\""
    refused "invalid UTF-8 in a string ($bad)" "manifest.json: JSON error at byte [0-9]* (in \"trainer\"): invalid UTF-8 in a string"
done
rm -rf "$tmp/e" && mkdir -p "$tmp/e" && cp -r "$ck4" "$tmp/e/" && sed -i 's/"trainer": "train_gpt"/"trainer": "train_gpu"/' "$e/manifest.json"
refused "an edit without re-sealing (the manifest's CRC32C)" \
    "$e/manifest.json: its CRC32C [0-9]* does not match its 'manifest_crc32c' [0-9]* (damaged or edited)"

# --- limits: JSON values, ranges; a manifest of a million ranges read in bounded memory ---
big() {  # big PYTHON-EXPR: $e/manifest.json with the member "pad": EXPR (bytes) before "sample_rng"
    rm -rf "$tmp/e" && mkdir -p "$tmp/e" && cp -r "$ck4" "$tmp/e/" &&
        python3 - "$e/manifest.json" "$1" <<'EOF'
import sys
path, pad = sys.argv[1], eval(sys.argv[2])
text = open(path, 'rb').read()
at = text.index(b'  "sample_rng"')
open(path, 'wb').write(text[:at] + b'  "pad": ' + pad + b',\n' + text[at:])
EOF
}
big "b'[' + b'0,' * 2200000 + b'0]'"
refused "more JSON values than a manifest may have" "JSON error at byte [0-9]* (in \"pad\"): more than 2097152 values"
more_ranges() {  # more_ranges N: $e/manifest.json with N more ranges in its file (unsealed)
    python3 - "$e/manifest.json" "$ck4/manifest.json" "$1" <<'EOF'
import re, sys
text = open(sys.argv[2], 'rb').read()
one = b', {"tensor": "adam_v", "lo": 0, "hi": 1, "offset": 0}'
text = re.sub(rb'("offset": \d+)\}\]\}', lambda m: m.group(1) + b'}' + one * int(sys.argv[3]) + b']}', text, count=1)
open(sys.argv[1], 'wb').write(text)
EOF
}
more_ranges 270000
refused "more ranges than a checkpoint may have" "its 'files' list 270003 'ranges', more than the 262144"
more_ranges 1000000
size_mb=$(($(wc -c <"$e/manifest.json") / 1000000))
/usr/bin/time -f %M -o "$tmp/rss" "$TRAIN" "${RUN[@]}" --resume "$e" >"$tmp/stdout" 2>"$tmp/err"
rc=$?
rss_mb=$(($(tail -1 "$tmp/rss") / 1000))
check "a manifest of a million ranges ($size_mb MB) is refused in bounded memory (peak RSS $rss_mb MB, at most 250)" \
    '[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "more than 2097152 values" "$tmp/err" && [ "$rss_mb" -le 250 ]' \
    "rc=$rc: $(head -c 300 "$tmp/err")"

# --- the data set's identity ---
mkdir -p "$tmp/rev" "$tmp/more" "$tmp/moved"
shard=$(ls "$tmp"/data/src_train_*.bin)
python3 - "$shard" "$tmp/rev/$(basename "$shard")" <<'EOF'
import sys
data = open(sys.argv[1], 'rb').read()
tokens = data[1024:]
rev = b''.join(tokens[i:i + 2] for i in range(len(tokens) - 2, -1, -2))
open(sys.argv[2], 'wb').write(data[:1024] + rev)
EOF
expect_usage_error "the same tokens reversed (the same sample count)" \
    "$ck4/manifest.json: the shards of '$tmp/rev/src_train_\*.bin' have the names and sizes of the checkpoint's data set but other contents (--resume-data-changed 1 continues on it anyway)" \
    "$TRAIN" --data-train "$tmp/rev/src_train_*.bin" "${COMMON[@]}" --resume "$ck4"
"$TRAIN" --data-train "$tmp/rev/src_train_*.bin" "${COMMON[@]}" --resume "$ck4" --resume-data-changed 1 \
    >"$tmp/stdout" 2>"$tmp/err"
rc=$?
check "... accepted with --resume-data-changed 1, with one warning line" \
    '[ $rc -eq 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^warning: .*other contents; continuing on it (--resume-data-changed 1) at global sample 32 of epoch 0" "$tmp/err"' \
    "rc=$rc: $(head -c 300 "$tmp/err")"
cp "$shard" "$tmp/more/" && cp "$shard" "$tmp/more/src_train_000002.bin"
MORE=(--data-train "$tmp/more/src_train_*.bin" "${COMMON[@]}")
expect_usage_error "a data set with a shard appended, named as such" \
    "'$tmp/more/src_train_\*.bin' is the checkpoint's data set with 1 shard appended" "$TRAIN" "${MORE[@]}" --resume "$ck8"
"$TRAIN" "${MORE[@]}" --resume "$ck8" --resume-data-changed 1 --ckpt-dir "$tmp/ck2" >"$tmp/more1.log" 2>&1 &&
    "$TRAIN" "${MORE[@]}" --resume "$tmp/ck2/step_00000012" >"$tmp/more2.log" 2>&1
rc=$?
check "... continued on from epoch 1 with --resume-data-changed 1, its next checkpoint resumes on that data" \
    '[ $rc -eq 0 ] && grep -q "continuing at step 12" "$tmp/more2.log" 2>/dev/null' \
    "rc=$rc: $(grep -ah error "$tmp/more1.log" "$tmp/more2.log" | head -1)"
cp "$shard" "$tmp/moved/"
"$TRAIN" --data-train "$tmp/moved/src_train_*.bin" "${COMMON[@]}" --resume "$ck4" --save-model "$tmp/moved.bin" \
    >"$tmp/moved.log" 2>&1
check "the same data in another directory resumes bit-exact" 'cmp -s "$tmp/full.bin" "$tmp/moved.bin"' \
    "$(grep -a error "$tmp/moved.log" | head -1)"
expect_usage_error "--resume-data-changed without --resume" "--resume-data-changed needs --resume" \
    "$TRAIN" "${RUN[@]}" --resume-data-changed 1

# --- a version-2 checkpoint (no seal, no data identity, no 'dropped') still reads, with a note ---
rm -rf "$tmp/v2" && mkdir -p "$tmp/v2" && cp -r "$ck8" "$tmp/v2/" && python3 tests/ckpt_edit.py "$tmp/v2/step_00000008" --unseal
"$TRAIN" "${RUN[@]}" --resume "$tmp/v2/step_00000008" --ckpt-dir "$tmp/ck3" --save-model "$tmp/v2.bin" >"$tmp/v2.log" 2>&1 &&
    "$TRAIN" "${RUN[@]}" --resume "$tmp/ck3/step_00000012" >"$tmp/v2b.log" 2>&1
rc=$?
check "a version-2 checkpoint in epoch 1 resumes bit-exact, with a one-line note; its next checkpoint resumes" \
    '[ $rc -eq 0 ] && cmp -s "$tmp/full.bin" "$tmp/v2.bin" && grep -q "continuing at step 12" "$tmp/v2b.log" &&
     grep -q "^resume: .*step_00000008 is a format version 2 checkpoint: no manifest checksum or data set identity to check$" "$tmp/v2.log"' \
    "rc=$rc: $(grep -ah 'error\|resume' "$tmp/v2.log" "$tmp/v2b.log" | head -2)"
