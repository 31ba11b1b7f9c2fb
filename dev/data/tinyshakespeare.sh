#!/usr/bin/env bash
# tinyshakespeare.sh: downloads tinyshakespeare (1.1 MB) and writes
# dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin (GPT-2 tokens,
# the first 32768 tokens are the validation split, as in llm.c).
source "$(dirname "$0")/common.sh"
out=$DATA/tinyshakespeare
fetch https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt "$out/input.txt"
tokenize_to "$out" tiny_shakespeare 100000000 32768 "$out/input.txt"
single_shard "$out" tiny_shakespeare
ls -l "$out"/*.bin
