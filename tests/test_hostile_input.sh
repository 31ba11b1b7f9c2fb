#!/usr/bin/env bash
# test_hostile_input.sh: every file a user hands the programs is hostile until checked, nothing
# on disk is lost, no hang outlives --comm-timeout. One section per class of docs/robustness.md;
# each case: exit status 2, exactly one line on stderr naming the file or flag, within 10 s
# (expect_usage_error under `timeout 10`). Runs train_gpt, tokenize and, where it was built,
# the emulated GPU trainer (build/emu/train_gptcu). The full-disk cases mount a small tmpfs and
# SKIP where the test cannot mount one (not root, or no mount namespace).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
TRAIN="$BUILD/train_gpt"
TOKENIZE="$BUILD/tokenize"
GPU="$BUILD/emu/train_gptcu"
. tests/checks.sh

tmp=$(mktemp -d)
mnt=""
cleanup() {
    [ -n "$mnt" ] && umount "$mnt" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

tokenize_sources "$tmp/data" llmc/model.h llmc/utils.h llmc/args.h llmc/shards.h
TINY=(--data-train "$tmp/data/src_train_*.bin" --n-layer 2 --n-embd 64 --n-head 2 --vocab-size 257 --max-seq-len 64
      --seq-len 32 --batch-size 4 --peak-tflops 0.1 --steps 2)
"$TRAIN" "${TINY[@]}" --save-model "$tmp/model.bin" >"$tmp/train.log" 2>&1 ||
    { fail "a tiny model file for the cases below" "$(tail -1 "$tmp/train.log")"; exit 1; }
trainers=("$TRAIN")
[ -x "$GPU" ] && trainers+=("$GPU")
tname() { case "$1" in *emu*) echo "train_gptcu (emulated)";; *) echo "train_gpt";; esac; }
# in10 CMD...: the command under a 10 s limit (a hang fails as exit 124)
in10() { timeout 10 "$@"; }

# --- integer overflow in header arithmetic, files that claim more than they hold ---
header_file() {  # header_file PATH PYTHON-STRUCT-EXPR: 1024 header bytes built by python
    python3 -c "import struct,sys; sys.stdout.buffer.write($2)" >"$1"
}
mh() { echo "struct.pack('<256i', *([20240326, 3, $1] + [0] * (256 - 2 - len([$1]))))"; }
header_file "$tmp/m_layers.bin" "$(mh '1024, 50257, 1073741824, 12, 768, 50304')"
header_file "$tmp/m_channels.bin" "$(mh '1024, 50257, 12, 16, 1073741824, 50304')"
header_file "$tmp/m_maxT.bin" "$(mh '1073741824, 50257, 12, 12, 768, 50304')"
header_file "$tmp/m_vocab.bin" "$(mh '1024, 50257, 12, 12, 768, 2147483647')"
header_file "$tmp/m_small.bin" "$(mh '64, 257, 2, 2, 64, 384')"  # a valid header, no tensors
for t in "${trainers[@]}"; do
    P="$(tname "$t"): "
    expect_usage_error "a model header with 2^30 layers" "m_layers.bin.*n-layer" in10 "$t" "${TINY[@]}" --model "$tmp/m_layers.bin"
    expect_usage_error "a model header with 2^30 channels" "m_channels.bin.*n-embd" in10 "$t" "${TINY[@]}" --model "$tmp/m_channels.bin"
    expect_usage_error "a model header with maxT 2^30" "m_maxT.bin.*max-seq-len" in10 "$t" "${TINY[@]}" --model "$tmp/m_maxT.bin"
    expect_usage_error "a model header with a padded vocabulary near 2^31" "m_vocab.bin.*padded vocab" in10 "$t" "${TINY[@]}" --model "$tmp/m_vocab.bin"
    expect_usage_error "a model file of a header only" "m_small.bin.*expected" in10 "$t" "${TINY[@]}" --model "$tmp/m_small.bin"
done
P=""
python3 - "$tmp" <<'EOF'
import struct, sys
d = sys.argv[1]
h = bytearray(struct.pack('<256i', 20241101, 1, 2, 16384, *([0] * 252)))
struct.pack_into('<qqq', h, 16, 2**63 - 1, 2**61, 1024)            # tokens near INT64_MAX, 2^61 blocks
open(f'{d}/z_counts.bin', 'wb').write(bytes(h))
struct.pack_into('<qqq', h, 16, 2**62, 2**48, 1024); struct.pack_into('<i', h, 12, 2**24)
open(f'{d}/z_blocks.bin', 'wb').write(bytes(h) + bytes(48))        # 2^48 blocks of 2^24 tokens in 1 KB
open(f'{d}/p_3gb.bin', 'wb').write(struct.pack('<256i', 20240520, 1, 1500000000, *([0] * 253)))
open(f'{d}/tok_2e31.bin', 'wb').write(struct.pack('<256I', 20240328, 2, 2**31, 0, *([0] * 252)) + b'\x01a')
EOF
expect_usage_error "a zstd shard whose counts are near INT64_MAX" "z_counts.bin.*zstd shard header" in10 "$TRAIN" "${TINY[@]}" --data-train "$tmp/z_counts.bin"
expect_usage_error "a zstd shard claiming 2^48 blocks in 1 KB" "z_blocks.bin" in10 "$TRAIN" "${TINY[@]}" --data-train "$tmp/z_blocks.bin"
expect_usage_error "a 1 KB plain shard claiming 3 GB" "p_3gb.bin.*3000001024 bytes" in10 "$TRAIN" "${TINY[@]}" --data-train "$tmp/p_3gb.bin"
expect_usage_error "a tokenizer .bin claiming 2^31 tokens" "tok_2e31.bin.*cannot hold" in10 "$TRAIN" "${TINY[@]}" --tokenizer "$tmp/tok_2e31.bin"

# --- limits on shapes: bounds on every dimension, and the memory a run needs ---
for t in "${trainers[@]}"; do
    P="$(tname "$t"): "
    expect_usage_error "--n-layer 4096" "--n-layer: 4096 is out of range" in10 "$t" "${TINY[@]}" --n-layer 4096 --n-embd 65536
    expect_usage_error "--vocab-size above 2^24" "--vocab-size" in10 "$t" "${TINY[@]}" --vocab-size 16777217
done
P=""
expect_usage_error "a model that does not fit in memory (1024 x 65536)" "needs .* GB of memory per rank .* available" \
    in10 "$TRAIN" "${TINY[@]}" --n-layer 1024 --n-embd 65536 --n-head 64
[ -x "$GPU" ] && expect_usage_error "train_gptcu (emulated): a model that does not fit on the device" \
    "needs .* GB on the GPU" in10 "$GPU" "${TINY[@]}" --n-layer 1024 --n-embd 65536 --n-head 1024
for t in "${trainers[@]}"; do
    P="$(tname "$t"): "
    expect_usage_error "a run over its --mem-limit-mb (refused before allocating)" \
        "needs [0-9.]* MB .* but --mem-limit-mb 1 allows 1.00 MB" in10 "$t" "${TINY[@]}" --mem-limit-mb 1
done
P=""

# --- a batch plan that overflows ---
for t in "${trainers[@]}"; do
    P="$(tname "$t"): "
    expect_usage_error "an accumulation count above 2^31 (--total-batch-tokens 4294967297)" "accumulation micro-steps" \
        in10 "$t" "${TINY[@]}" --total-batch-tokens 4294967297 --batch-size 1 --seq-len 1
    expect_usage_error "--total-batch-tokens 1e15" "accumulation micro-steps" \
        in10 "$t" "${TINY[@]}" --total-batch-tokens 1000000000000000 --batch-size 1 --seq-len 1
    expect_usage_error "a micro-batch of more than 2^31 positions" "positions per micro-batch" \
        in10 "$t" "${TINY[@]}" --batch-size 1048576 --seq-len 4096 --max-seq-len 4096
done
P=""

# --- files that are not regular files ---
mkfifo "$tmp/fifo"
for t in "${trainers[@]}"; do
    P="$(tname "$t"): "
    expect_usage_error "a FIFO as --model" "--model: '$tmp/fifo' is not a regular file" in10 "$t" "${TINY[@]}" --model "$tmp/fifo"
    expect_usage_error "a FIFO as --data-train" "'$tmp/fifo' is not a regular file" in10 "$t" "${TINY[@]}" --data-train "$tmp/fifo"
    expect_usage_error "a FIFO as --tokenizer" "--tokenizer: '$tmp/fifo' is not a regular file" in10 "$t" "${TINY[@]}" --tokenizer "$tmp/fifo"
    expect_usage_error "a directory as --data-train" "is not a regular file" in10 "$t" "${TINY[@]}" --data-train "$tmp/data"
done
P=""
expect_usage_error "tokenize: a FIFO as input" "'$tmp/fifo' is not a regular file" in10 "$TOKENIZE" --bytes --out-dir "$tmp/t1" "$tmp/fifo"
expect_usage_error "tokenize: a FIFO as --raw IN" "'$tmp/fifo' is not a regular file" in10 "$TOKENIZE" --bytes --raw "$tmp/fifo" "$tmp/t1.u16"
mkdir -p "$tmp/gpt2fifo" && mkfifo "$tmp/gpt2fifo/encoder.json"
expect_usage_error "tokenize: a FIFO as encoder.json" "encoder.json' is not a regular file" in10 "$TOKENIZE" --gpt2 "$tmp/gpt2fifo" --raw "$tmp/corpus.txt" "$tmp/t2.u16"
cat /proc/cpuinfo >"$tmp/cpuinfo.txt"
in10 "$TOKENIZE" --bytes --raw /proc/cpuinfo "$tmp/cpu.u16" 2>"$tmp/err"; rc=$?
want=$(($(wc -c <"$tmp/cpuinfo.txt") * 2)); got=$(wc -c <"$tmp/cpu.u16" 2>/dev/null || echo 0)
check "tokenize reads a /proc file (size 0 in stat) to its end" '[ $rc -eq 0 ] && [ "$got" -eq "$want" ]' "rc=$rc, $got bytes of ids, want $want"

# --- outputs that would destroy inputs ---
cp "$tmp/model.bin" "$tmp/model.keep"
ln -s "$(ls "$tmp"/data/src_train_*.bin | head -1)" "$tmp/link.bin"
shard=$(ls "$tmp"/data/src_train_*.bin | head -1); cp "$shard" "$tmp/shard.keep"
for t in "${trainers[@]}"; do
    P="$(tname "$t"): "
    expect_usage_error "--log-json naming the --model file" "--log-json '$tmp/model.bin' is also an input (--model)" \
        in10 "$t" "${TINY[@]}" --model "$tmp/model.bin" --log-json "$tmp/model.bin"
    expect_usage_error "--log-json naming a data shard" "is also an input (--data-train)" in10 "$t" "${TINY[@]}" --log-json "$shard"
    expect_usage_error "--save-model naming a data shard through a symlink" "is also an input (--data-train)" \
        in10 "$t" "${TINY[@]}" --save-model "$tmp/link.bin"
    expect_usage_error "--save-model naming the --log-json file" "is also the --log-json output" \
        in10 "$t" "${TINY[@]}" --log-json "$tmp/same.out" --save-model "$tmp/same.out"
done
P=""
check "the model file and the shard are untouched" 'cmp -s "$tmp/model.bin" "$tmp/model.keep" && cmp -s "$shard" "$tmp/shard.keep"'
printf 'some text to keep\n' >"$tmp/keep.txt"; cp "$tmp/keep.txt" "$tmp/keep.orig"
expect_usage_error "tokenize --raw IN IN" "--raw OUT '$tmp/keep.txt' is also an input" in10 "$TOKENIZE" --bytes --raw "$tmp/keep.txt" "$tmp/keep.txt"
mkdir -p "$tmp/tk" && cp "$tmp/keep.txt" "$tmp/tk/data_train_000001.bin"
expect_usage_error "tokenize: an input that is a shard it would write" "is also an input" in10 "$TOKENIZE" --bytes --out-dir "$tmp/tk" "$tmp/tk/data_train_000001.bin"
check "tokenize left its inputs untouched" 'cmp -s "$tmp/keep.txt" "$tmp/keep.orig" && cmp -s "$tmp/tk/data_train_000001.bin" "$tmp/keep.orig"'
# a stale PATH.tmp that is a symlink: never followed (outputs use fresh exclusive temporaries)
printf 'victim\n' >"$tmp/victim"; ln -s "$tmp/victim" "$tmp/out.bin.tmp"
in10 "$TRAIN" "${TINY[@]}" --save-model "$tmp/out.bin" >/dev/null 2>"$tmp/err"; rc=$?
check "a stale symlinked --save-model PATH.tmp is not followed" \
    '[ $rc -eq 0 ] && [ "$(cat "$tmp/victim")" = victim ] && [ -f "$tmp/out.bin" ] && [ ! -L "$tmp/out.bin" ]' \
    "rc=$rc $(head -c 200 "$tmp/err"); victim: $(head -c 50 "$tmp/victim")"
ln -s "$tmp/victim" "$tmp/t3.u16.tmp"
in10 "$TOKENIZE" --bytes --raw "$tmp/keep.txt" "$tmp/t3.u16" 2>"$tmp/err"; rc=$?
check "a stale symlinked tokenize OUT.tmp is not followed" '[ $rc -eq 0 ] && [ "$(cat "$tmp/victim")" = victim ] && [ ! -L "$tmp/t3.u16" ]'

# --- failures noticed late or not at all ---
for t in "${trainers[@]}"; do
    P="$(tname "$t"): "
    expect_usage_error "an unwritable --save-model, at start-up" "--save-model: cannot write '$tmp/nodir/m.bin'" \
        in10 "$t" "${TINY[@]}" --save-model "$tmp/nodir/m.bin"
    check "... before any step ran" '! grep -q "^step" "$tmp/stdout"'
    expect_usage_error "an --out-dir that cannot be created, at start-up" "--out-dir" in10 "$t" "${TINY[@]}" --out-dir "$tmp/keep.txt/sub"
    # (found at the first record, after a step: the emulated GPU under a sanitizer takes longer than 10 s for it)
    expect_usage_error "--log-json on a full device (/dev/full)" "--log-json: writing '/dev/full' failed" \
        timeout 120 "$t" "${TINY[@]}" --log-json /dev/full
done
P=""

# --- a full filesystem: existing files survive, no temporary is left, exit 2 naming the file ---
mkdir -p "$tmp/small"
if mount -t tmpfs -o size=700k tmpfs "$tmp/small" 2>/dev/null; then
    mnt="$tmp/small"
    cp "$tmp/model.bin" "$mnt/model.bin"  # 516 KB of 700
    "$TOKENIZE" --train-vocab 300 --out-dir "$tmp/vocab" "$tmp/corpus.txt" >/dev/null 2>&1
    mkdir -p "$mnt/vocab" && cp "$tmp/vocab/encoder.json" "$mnt/vocab/"
    head -c 150000 /dev/urandom >"$mnt/filler"; dd if=/dev/zero of="$mnt/fill" bs=4k 2>/dev/null  # now full
    cp "$mnt/model.bin" "$tmp/model.before"; cp "$mnt/vocab/encoder.json" "$tmp/enc.before"
    expect_usage_error "--save-model on a full disk" "writing '$mnt/model.bin' failed: No space left" \
        in10 "$TRAIN" "${TINY[@]}" --save-model "$mnt/model.bin"
    rm -f "$mnt/fill"; head -c 40000 /dev/zero >"$mnt/fill"; dd if=/dev/zero of="$mnt/fill2" bs=1k 2>/dev/null
    expect_usage_error "tokenize --train-vocab on a full disk" "'$mnt/vocab/.*' failed: No space left" \
        in10 "$TOKENIZE" --train-vocab 400 --out-dir "$mnt/vocab" "$tmp/corpus.txt"
    expect_usage_error "tokenize --raw IN OUT on a full disk" "'$mnt/model.bin' failed: No space left" \
        in10 "$TOKENIZE" --bytes --raw "$tmp/corpus.txt" "$mnt/model.bin"
    check "files on the full disk survive whole" 'cmp -s "$mnt/model.bin" "$tmp/model.before" && cmp -s "$mnt/vocab/encoder.json" "$tmp/enc.before"'
    left=$(find "$mnt" -name '*.tmp*' | head -3)
    check "no temporary is left on the full disk" '[ -z "$left" ]' "left: $left"
else
    echo "SKIP: full-disk cases (cannot mount a tmpfs here)"
fi

# --- lenient parsing: encoder.json is strict JSON ---
mkdir -p "$tmp/j1" "$tmp/j2"
cp "$tmp/vocab/vocab.bpe" "$tmp/j1/" && cp "$tmp/vocab/vocab.bpe" "$tmp/j2/"
sed 's/}$/, }/' "$tmp/vocab/encoder.json" >"$tmp/j1/encoder.json"
{ cat "$tmp/vocab/encoder.json"; printf ' trailing'; } >"$tmp/j2/encoder.json"
expect_usage_error "an encoder.json with a trailing comma" "expected a string after ','" in10 "$TOKENIZE" --gpt2 "$tmp/j1" --raw "$tmp/keep.txt" "$tmp/j.u16"
expect_usage_error "an encoder.json with data after the object" "unexpected data after the JSON object" in10 "$TOKENIZE" --gpt2 "$tmp/j2" --raw "$tmp/keep.txt" "$tmp/j.u16"

# --- hangs past --comm-timeout: a rank stopped at start-up or at shut-down ---
if [ "${HAVE_MPI:-}" = yes ] && command -v mpirun >/dev/null 2>&1; then
    MPIRUN=(mpirun --oversubscribe -np 2)
    [ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
    expect_job_ends "a rank stopped before MPI start-up ends the job within --comm-timeout" "start-up (MPI_Init_thread" \
        env LLMC_TEST_FAULT=stop-start:1 "${MPIRUN[@]}" "$TRAIN" "${TINY[@]}" --comm-timeout 10
    expect_job_ends "a rank stopped before MPI shut-down ends the job within --comm-timeout" "shut-down (MPI_Finalize)" \
        env LLMC_TEST_FAULT=stop-end:1 "${MPIRUN[@]}" "$TRAIN" "${TINY[@]}" --comm-timeout 10 --save-model "$tmp/mpi.bin"
    check "... after rank 0 saved its model" '[ -f "$tmp/mpi.bin" ]'
    [ -x "$GPU" ] && expect_job_ends "train_gptcu (emulated): a rank stopped before the NCCL set-up ends the job within --comm-timeout" \
        "device communication set-up" env LLMC_TEST_FAULT=stop-setup:1 "${MPIRUN[@]}" "$GPU" "${TINY[@]}" --comm nccl --comm-timeout 10
else
    echo "SKIP: start-up and shut-down hangs (no MPI)"
fi
