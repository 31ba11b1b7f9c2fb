#!/usr/bin/env bash
# bench.sh: a benchmark sweep with plots (scripts/bench.py): around a base
# run, the model size, batch, sequence length, ZeRO stage and dp x tp x pp
# layouts (and --recompute) one at a time, each a few
# steps; writes OUT/bench.csv (tokens/s, MFU, the step's parts, peak memory,
# the flags of every run) and PNG plots: tokens/s and MFU against each swept
# variable, and the step's parts per layout. On the CPU trainer every run gets
# the same cores (--cores, default all: cores/ranks OpenMP threads a rank), so
# layouts compare on the same hardware. matplotlib is installed with pip when
# missing (without it: the CSV only).
#
#   bash scripts/bench.sh                          # the CPU trainer, the default sweep, each point 3 runs
#   TRAINER=./train_gptcu bash scripts/bench.sh --model d12 --batch 8 --seq 1024 --models d12,d24 \
#       --batches 4,8,16 --seqs 256,1024 --recomputes none,selective,full --zeros 0,1 --layouts 1x1x1,1x1x2:zb1p
#   bash scripts/bench.sh --models '' --batches '' --seqs '' --zeros '' --layouts '' --long-seqs 4096,8192
#       # the long-context cases: 4 layers at C 256, B 1, at each T one process, cp 2 and --recompute full
#       # (a case the trainer refuses is skipped with a line): tokens/s and peak memory; and the longest T each fits in
#       # --fit-gb (16) by the trainer's memory check (--mem-limit-mb, --steps 0: nothing runs out of memory)
#   OUT=DIR (default /tmp/llmc_bench); any bench.py flag (python3 scripts/bench.py --help) after the script.
# The data is this repository's source as byte tokens (no download), or DATA='glob'.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAINER=${TRAINER:-./train_gpt}
TOKENIZE=${TOKENIZE:-./tokenize}
OUT=${OUT:-/tmp/llmc_bench}
mkdir -p "$OUT"
# (built here unless given as programs that exist: TRAINER=build/train_gpt TOKENIZE=build/tokenize)
[ -x "$TRAINER" ] || make --no-print-directory -s "$(basename "$TRAINER")" >/dev/null
[ -x "$TOKENIZE" ] || make --no-print-directory -s tokenize >/dev/null
if ! python3 -c "import matplotlib" 2>/dev/null; then
    python3 -m pip install -q matplotlib 2>/dev/null || python3 -m pip install -q --break-system-packages matplotlib \
        2>/dev/null || echo "bench: matplotlib could not be installed: the CSV only"
fi
data=${DATA:-}
if [ -z "$data" ]; then
    cat llmc/*.h train_gpt.c train_gpt.cu >"$OUT/corpus.txt"
    "$TOKENIZE" --bytes 1 --out-dir "$OUT" --name bench "$OUT/corpus.txt" >/dev/null
    data="$OUT/bench_train_*.bin"
fi
exec python3 scripts/bench.py --trainer "$TRAINER" --data "$data" --out "$OUT" "$@"
