# common.sh: shared by the dev/data download scripts (sourced, not run).
# Fetches GPT-2's tokenizer files and runs the C ./tokenize, writing llm.c's
# shard layout. Needs curl and an internet connection.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DATA="$REPO/dev/data"
TOKENIZE=${TOKENIZE:-$REPO/tokenize}
GPT2_DIR=${GPT2_DIR:-$DATA/gpt2}
DOC_SEP="<|endoftext|>"
[ -x "$TOKENIZE" ] || { echo "error: $TOKENIZE not found: run 'make' first (or set TOKENIZE)" >&2; exit 2; }

# fetch URL FILE: download once (resumes a partial download).
fetch() {
    [ -s "$2" ] && return 0
    mkdir -p "$(dirname "$2")"
    curl -L --fail --retry 3 -C - -o "$2.part" "$1" && mv "$2.part" "$2"
}

fetch https://openaipublic.blob.core.windows.net/gpt-2/models/124M/encoder.json "$GPT2_DIR/encoder.json"
fetch https://openaipublic.blob.core.windows.net/gpt-2/models/124M/vocab.bpe "$GPT2_DIR/vocab.bpe"

# tokenize_to OUT_DIR NAME SHARD_TOKENS VAL_TOKENS FILES...: GPT-2 tokens of
# FILES as OUT_DIR/NAME_val_000000.bin, NAME_train_000001.bin, ... A line
# "<|endoftext|>" separates documents (DOC_SEP); tokenize starts each with EOT.
tokenize_to() {
    local out=$1 name=$2 shard=$3 val=$4
    shift 4
    "$TOKENIZE" --gpt2 "$GPT2_DIR" --doc-sep "$DOC_SEP" --threads "$(nproc)" --shard-tokens "$shard" --val-tokens "$val" --out-dir "$out" --name "$name" "$@"
}

# single_shard OUT_DIR NAME: renames the one train and the one val shard to
# llm.c's names NAME_train.bin and NAME_val.bin.
single_shard() {
    local out=$1 name=$2 split files
    for split in train val; do
        files=("$out/${name}_${split}"_*.bin)
        if [ ${#files[@]} -ne 1 ] || [ ! -f "${files[0]}" ]; then
            echo "error: expected one $split shard $out/${name}_${split}_*.bin" >&2
            exit 1
        fi
        mv "${files[0]}" "$out/${name}_${split}.bin"
    done
}
