#!/usr/bin/env bash
# tinystories.sh: downloads TinyStories (1.5 GB archive, 2.7M stories) and
# writes dev/data/tinystories/TinyStories_{train,val}.bin (about 0.9B GPT-2
# tokens; the first 10M tokens, from data00.json, are the validation split).
# Needs python3 (standard library only) and about 8 GB of disk.
source "$(dirname "$0")/common.sh"
out=$DATA/tinystories
fetch https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/TinyStories_all_data.tar.gz \
    "$out/TinyStories_all_data.tar.gz"
mkdir -p "$out/json"
tar -xzf "$out/TinyStories_all_data.tar.gz" -C "$out/json"
# every story as one document, data00.json first
python3 - "$out/json" "$out/stories.txt" <<'PY'
import glob, json, sys
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for path in sorted(glob.glob(sys.argv[1] + "/*.json")):
        for row in json.load(open(path, encoding="utf-8")):
            out.write(row["story"].strip() + "\n<|endoftext|>\n")
PY
tokenize_to "$out" TinyStories 2000000000 10000000 "$out/stories.txt"
single_shard "$out" TinyStories
rm -rf "$out/json" "$out/stories.txt"
ls -l "$out"/*.bin
