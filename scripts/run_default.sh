#!/usr/bin/env bash
# run_default.sh (make run): the main job on the built-in default corpus, offline.
# The corpus is the text of Debian's `fortunes` package (15,000 quotations,
# 2.5 MB; installed with apt-get if missing and this is root on Debian). The
# script learns a 2048-token byte-level BPE vocabulary from it with ./tokenize
# --train-vocab, writes train/val shards to data/default/, trains a 4-layer GPT
# (3.7M parameters) for 300 steps on the CPU (about two minutes of training on 2 cores) and
# prints samples. Any extra arguments are passed to ./train_gpt (e.g. --steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
corpus_dir=${FORTUNES_DIR:-/usr/share/games/fortunes}
out=data/default

if ! ls "$corpus_dir"/*.dat >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "installing the default corpus (Debian package fortunes)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fortunes >/dev/null
    else
        echo "error: the default corpus is missing: install it with 'sudo apt-get install fortunes' (or set FORTUNES_DIR)" >&2
        exit 2
    fi
fi
# the fortune files are the ones with a .dat index beside them
files=()
for f in "$corpus_dir"/*; do [ -f "$f.dat" ] && files+=("$f"); done

if [ ! -s "$out/tokenizer/encoder.json" ] || [ ! -s "$out/fortunes_train_000001.bin" ]; then
    ./tokenize --train-vocab 2048 --doc-sep % --out-dir "$out/tokenizer" "${files[@]}"
    ./tokenize --gpt2 "$out/tokenizer" --doc-sep % --val-tokens 50000 --out-dir "$out" --name fortunes "${files[@]}"
fi

./train_gpt --data-train "$out/fortunes_train_*.bin" --data-val "$out/fortunes_val_*.bin" --tokenizer "$out/tokenizer" \
    --n-layer 4 --n-embd 256 --n-head 4 --vocab-size 2048 --max-seq-len 128 --seq-len 128 --batch-size 8 \
    --steps 300 --lr 2e-3 --warmup-steps 30 --weight-decay 0.1 --eval-every 100 --eval-batches 16 \
    --sample-every 150 --sample-tokens 120 --log-every 10 --log-json "$out/log.jsonl" --out-dir "$out" "$@"
