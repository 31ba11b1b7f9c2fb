#!/usr/bin/env bash
# test_hostile_input.sh: every file a user hands the programs is hostile until checked, nothing
# on disk is lost, no hang outlives --comm-timeout. One section per class of docs/robustness.md;
# each case: exit status 2, exactly one line on stderr naming the file or flag, within 10 s
# (expect_usage_error under `timeout 10`). Runs train_gpt, tokenize, plan and, where it was built,
# the emulated GPU trainer (build/emu/train_gptcu). The full-disk cases mount a small tmpfs and
# SKIP where the test cannot mount one (not root, or no mount namespace).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
TRAIN="$BUILD/train_gpt"
TOKENIZE="$BUILD/tokenize"
PLAN="$BUILD/plan"
GPU="$BUILD/emu/train_gptcu"

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
# a cluster of one device for the planner's cases (cluster_with: a copy edited by sed)
printf '%s\n' "devices_per_node = 1" "nodes = 1" "peak_tflops = 1" "matmul_efficiency = 0.5" "hbm_gbs = 100" \
    "memory_gb = 1000" "intra_node_gbs = 10" "intra_node_us = 5" "inter_node_gbs = 1" "inter_node_us = 10" \
    "price_per_hour = 1" >"$tmp/one.cluster"
cluster_with() { sed "$1" "$tmp/one.cluster" >"$tmp/$2.cluster"; }  # cluster_with SED-SCRIPT NAME
PMODEL=(--n-layer 2 --n-embd 64 --n-head 2 --vocab-size 257 --max-seq-len 64 --seq-len 32 --total-batch-tokens 128)
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
    expect_usage_error "--total-batch-tokens 4294967296: 33554432 micro-steps of 128 tokens, above the limit" \
        "--total-batch-tokens 4294967296 needs 33554432 accumulation micro-steps .* more than the limit of 65536" \
        in10 "$t" "${TINY[@]}" --total-batch-tokens 4294967296
done
P=""
in10 "$TRAIN" "${TINY[@]}" --total-batch-tokens 65536 --batch-size 1 --seq-len 1 --steps 0 >/dev/null 2>"$tmp/err"
rc=$?
check "65536 accumulation micro-steps (the limit) are accepted" '[ $rc -eq 0 ]' "rc=$rc: $(head -c 200 "$tmp/err")"

# --- an error line is one write(2): the ranks of a job share one stderr, and a line written in pieces interleaves
# with theirs ("error: error: ..."). stderr is a SOCK_SEQPACKET socket here, which keeps each write one message ---
one_write() {
    python3 - "$@" <<'EOF'
import socket, subprocess, sys
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=theirs)
theirs.close()
writes = []
while (m := ours.recv(1 << 16)):
    writes.append(m)
print(p.wait(), len(writes), repr(writes)[:300])
EOF
}
for t in "$TRAIN" "$TOKENIZE"; do
    read -r rc nwrites seen <<<"$(one_write "$t" --no-such-flag 1)"
    check "$(basename "$t"): a usage error's line is one write(2)" '[ "$rc" = 2 ] && [ "$nwrites" = 1 ]' \
        "exit $rc, $nwrites writes: $seen"
done

# --- the planner's cluster files: every number in its range, the ranks within bounds ---
cluster_with 's/^devices_per_node = 1/devices_per_node = 2147483647/; s/^nodes = 1/nodes = 4/' c_ovf
cluster_with 's/^memory_gb = .*/memory_gb = inf/' c_inf
cluster_with 's/^peak_tflops = .*/peak_tflops = 1e-308/' c_tiny
cluster_with 's/^nodes = 1/nodes = 2.5/' c_frac
cluster_with 's/^hbm_gbs = 100/hbm_gbs = 100\nhbm_gbs = 200/' c_twice
cluster_with 's/^inter_node_gbs = .*/inter_node_gbs = 0/' c_one_node
expect_usage_error "plan: devices_per_node = 2^31 - 1 (4 nodes of them overflow an int)" \
    "c_ovf.cluster:1: devices_per_node = 2147483647: want an integer from 1 to 4096" \
    in10 "$PLAN" "${PMODEL[@]}" --cluster "$tmp/c_ovf.cluster"
expect_usage_error "plan: memory_gb = inf" "c_inf.cluster:6: memory_gb = inf: want a number" \
    in10 "$PLAN" "${PMODEL[@]}" --cluster "$tmp/c_inf.cluster"
expect_usage_error "plan: peak_tflops = 1e-308" "c_tiny.cluster:3: peak_tflops = 1e-308: want a number from 1e-06" \
    in10 "$PLAN" "${PMODEL[@]}" --cluster "$tmp/c_tiny.cluster"
expect_usage_error "plan: nodes = 2.5" "c_frac.cluster:2: nodes = 2.5: want an integer" \
    in10 "$PLAN" "${PMODEL[@]}" --cluster "$tmp/c_frac.cluster"
expect_usage_error "plan: a key given twice" "c_twice.cluster:6: hbm_gbs is given a second time" \
    in10 "$PLAN" "${PMODEL[@]}" --cluster "$tmp/c_twice.cluster"
expect_usage_error "plan: --nodes x --devices-per-node beyond 2^24 ranks" \
    "4097 nodes x 4096 devices = 16781312 ranks, more than 16777216" \
    in10 "$PLAN" "${PMODEL[@]}" --cluster dgx-h100 --nodes 4097 --devices-per-node 4096
expect_usage_error "plan: --nodes 2 on a cluster without a network" "2 nodes need an inter_node_gbs of at least 0.001" \
    in10 "$PLAN" "${PMODEL[@]}" --cluster "$tmp/c_one_node.cluster" --nodes 2

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
expect_usage_error "plan: a FIFO as --cluster" "--cluster: '$tmp/fifo' is not a regular file" \
    in10 "$PLAN" "${PMODEL[@]}" --cluster "$tmp/fifo"
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
cp "$tmp/one.cluster" "$tmp/own.cluster"; cp "$tmp/model.bin" "$tmp/pmodel.bin"
expect_usage_error "plan --csv naming its --cluster file" "--csv '$tmp/own.cluster' is also an input (--cluster)" \
    in10 "$PLAN" "${PMODEL[@]}" --cluster "dgx-h100,$tmp/own.cluster" --csv "$tmp/own.cluster"
expect_usage_error "plan --csv naming its --model file" "--csv '$tmp/pmodel.bin' is also an input (--model)" \
    in10 "$PLAN" --model "$tmp/pmodel.bin" --seq-len 32 --total-batch-tokens 128 --cluster "$tmp/one.cluster" \
    --csv "$tmp/pmodel.bin"
check "plan left its inputs untouched" 'cmp -s "$tmp/own.cluster" "$tmp/one.cluster" && cmp -s "$tmp/pmodel.bin" "$tmp/model.bin"'
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

# --- outputs inside a checkpoint: the --resume checkpoint and --ckpt-dir are the run's own ---
"$TRAIN" "${TINY[@]}" --ckpt-dir "$tmp/ck" >"$tmp/ck.log" 2>&1 || fail "a checkpoint for the cases below" "$(tail -1 "$tmp/ck.log")"
S="$tmp/ck/step_00000002"
cp -a "$tmp/ck" "$tmp/ck.keep"
ln -s "$tmp/ck" "$tmp/ck.link"; ln -s "$S/manifest.json" "$tmp/manifest.link"; ln "$S/rank_00000.bin" "$tmp/rank.hard"
for t in "${trainers[@]}"; do
    P="$(tname "$t"): "
    expect_usage_error "--log-json naming the --resume checkpoint's manifest" \
        "--log-json '$S/manifest.json' lies inside --resume '$S'" \
        in10 "$t" "${TINY[@]}" --resume "$S" --log-json "$S/manifest.json"
    expect_usage_error "--save-model naming the --resume checkpoint's data file" \
        "--save-model '$S/rank_00000.bin' lies inside --resume '$S'" \
        in10 "$t" "${TINY[@]}" --resume "$S" --save-model "$S/rank_00000.bin"
    expect_usage_error "--log-json naming --ckpt-dir's latest" "--log-json '$tmp/ck/latest' lies inside --ckpt-dir '$tmp/ck'" \
        in10 "$t" "${TINY[@]}" --ckpt-dir "$tmp/ck" --resume auto --log-json "$tmp/ck/latest"
    expect_usage_error "--out-dir's model file inside --ckpt-dir" "--out-dir '$tmp/ck/model_final.bin' lies inside --ckpt-dir" \
        in10 "$t" "${TINY[@]}" --ckpt-dir "$tmp/ck" --out-dir "$tmp/ck"
    expect_usage_error "--save-model inside the checkpoint through a symlinked directory" "lies inside --resume '$S'" \
        in10 "$t" "${TINY[@]}" --resume "$S" --save-model "$tmp/ck.link/step_00000002/new.bin"
    expect_usage_error "--log-json: a symlink to the checkpoint's manifest" "--log-json '$tmp/manifest.link' lies inside --resume" \
        in10 "$t" "${TINY[@]}" --resume "$S" --log-json "$tmp/manifest.link"
    expect_usage_error "--log-json: a hard link to a checkpoint's data file" "--log-json '$tmp/rank.hard' lies inside --ckpt-dir" \
        in10 "$t" "${TINY[@]}" --ckpt-dir "$tmp/ck" --resume auto --log-json "$tmp/rank.hard"
    expect_usage_error "--ckpt-dir inside the --resume checkpoint" "--ckpt-dir '$S/next' lies inside --resume '$S'" \
        in10 "$t" "${TINY[@]}" --resume "$S" --ckpt-dir "$S/next"
done
P=""
check "every file of the checkpoint survives byte for byte, nothing added" 'diff -r "$tmp/ck" "$tmp/ck.keep" >/dev/null' \
    "$(diff -r "$tmp/ck" "$tmp/ck.keep" 2>&1 | head -c 300)"

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
    "$PLAN" "${PMODEL[@]}" --cluster "$tmp/one.cluster" --max-micro-batch 1 --csv "$mnt/plan.csv" >/dev/null 2>&1  # 1 KB
    "$TOKENIZE" --train-vocab 300 --out-dir "$tmp/vocab" "$tmp/corpus.txt" >/dev/null 2>&1
    mkdir -p "$mnt/vocab" && cp "$tmp/vocab/encoder.json" "$mnt/vocab/"
    head -c 150000 /dev/urandom >"$mnt/filler"; dd if=/dev/zero of="$mnt/fill" bs=4k 2>/dev/null  # now full
    cp "$mnt/model.bin" "$tmp/model.before"; cp "$mnt/vocab/encoder.json" "$tmp/enc.before"; cp "$mnt/plan.csv" "$tmp/csv.before"
    expect_usage_error "--save-model on a full disk" "writing '$mnt/model.bin' failed: No space left" \
        in10 "$TRAIN" "${TINY[@]}" --save-model "$mnt/model.bin"
    expect_usage_error "plan --csv on a full disk" "writing '$mnt/plan.csv' failed: No space left" \
        in10 "$PLAN" "${PMODEL[@]}" --cluster dgx-h100 --csv "$mnt/plan.csv"  # (400 KB)
    rm -f "$mnt/fill"; head -c 40000 /dev/zero >"$mnt/fill"; dd if=/dev/zero of="$mnt/fill2" bs=1k 2>/dev/null
    expect_usage_error "tokenize --train-vocab on a full disk" "'$mnt/vocab/.*' failed: No space left" \
        in10 "$TOKENIZE" --train-vocab 400 --out-dir "$mnt/vocab" "$tmp/corpus.txt"
    expect_usage_error "tokenize --raw IN OUT on a full disk" "'$mnt/model.bin' failed: No space left" \
        in10 "$TOKENIZE" --bytes --raw "$tmp/corpus.txt" "$mnt/model.bin"
    check "files on the full disk survive whole" 'cmp -s "$mnt/model.bin" "$tmp/model.before" &&
        cmp -s "$mnt/vocab/encoder.json" "$tmp/enc.before" && [ -s "$tmp/csv.before" ] && cmp -s "$mnt/plan.csv" "$tmp/csv.before"'
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
if have_mpi; then
    MPIRUN=(mpirun --oversubscribe -np 2)
    [ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
    expect_job_ends "a rank stopped before MPI start-up ends the job within --comm-timeout" "start-up (MPI_Init_thread" \
        env LLMC_TEST_FAULT=stop-start:1 "${MPIRUN[@]}" "$TRAIN" "${TINY[@]}" --comm-timeout 5
    expect_job_ends "a rank stopped before MPI shut-down ends the job within --comm-timeout" "shut-down (MPI_Finalize)" \
        env LLMC_TEST_FAULT=stop-end:1 "${MPIRUN[@]}" "$TRAIN" "${TINY[@]}" --comm-timeout 5 --save-model "$tmp/mpi.bin"
    check "... after rank 0 saved its model" '[ -f "$tmp/mpi.bin" ]'
    # (rank 0 exits normally here: LeakSanitizer would report MPI's own allocations)
    expect_job_ends "a rank stopped inside MPI's shut-down after its peers left ends the job within --comm-timeout" \
        "rank 1: shut-down (MPI_Finalize)" env ASAN_OPTIONS=detect_leaks=0 LLMC_TEST_FAULT=stop-in-end:1 "${MPIRUN[@]}" \
        "$TRAIN" "${TINY[@]}" --comm-timeout 5
    [ -x "$GPU" ] && expect_job_ends "train_gptcu (emulated): a rank stopped before the NCCL set-up ends the job within --comm-timeout" \
        "device communication set-up" env LLMC_TEST_FAULT=stop-setup:1 "${MPIRUN[@]}" "$GPU" "${TINY[@]}" --comm nccl --comm-timeout 5
else
    echo "SKIP: start-up and shut-down hangs (no MPI)"
fi
