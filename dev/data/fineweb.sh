#!/usr/bin/env bash
# fineweb.sh [MAX_DOCS]: streams FineWeb's 10B-token sample (HuggingFaceFW/fineweb,
# config sample-10BT) from the Hugging Face hub and writes
# dev/data/fineweb10B/fineweb_{val,train}_NNNNNN.bin: shards of 100M GPT-2
# tokens, the first 100M tokens are the validation split, as in llm.c. Train with
#   --data-train 'dev/data/fineweb10B/*train*.bin' --data-val 'dev/data/fineweb10B/*val*.bin'
# Needs python3 with `pip install datasets`, and about 70 GB of disk (the text
# is staged, then deleted). MAX_DOCS limits the documents (for a quick try).
source "$(dirname "$0")/common.sh"
out=$DATA/fineweb10B
mkdir -p "$out/text"
python3 - "$out/text" "${1:-0}" <<'PY'
import sys
from datasets import load_dataset
out_dir, max_docs = sys.argv[1], int(sys.argv[2])
ds = load_dataset("HuggingFaceFW/fineweb", name="sample-10BT", split="train", streaming=True)
part, f = -1, None
for i, row in enumerate(ds):
    if max_docs and i >= max_docs:
        break
    if i % 250000 == 0:  # a text file per 250k documents (about 1 GB)
        part += 1
        if f:
            f.close()
        f = open(f"{out_dir}/part_{part:04d}.txt", "w", encoding="utf-8")
    f.write(row["text"] + "\n<|endoftext|>\n")
if f:
    f.close()
PY
tokenize_to "$out" fineweb 100000000 100000000 "$out"/text/part_*.txt
rm -rf "$out/text"
ls -l "$out"/*.bin | head
