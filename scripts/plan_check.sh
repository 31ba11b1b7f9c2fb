#!/usr/bin/env bash
# plan_check.sh: the planner (./plan) against measured runs here: every valid
# layout of a small model (4 layers, 128 channels, 4 heads, T 64, a
# 2048-token batch, B up to 8) on 4 CPU ranks under mpirun, each predicted
# (./plan --cluster local) and run with the CPU trainer; prints predicted
# against measured step time and peak memory per rank per layout, the mean
# absolute percentage errors and Kendall's tau (scripts/plan_check.py).
#
#   bash scripts/plan_check.sh                 # every valid layout (about 6 minutes on 2 cores)
#   bash scripts/plan_check.sh --limit 20      # 20 of them, spread over the list
#   bash scripts/plan_check.sh --tiny          # 2 layers on 2 ranks, 4 layouts: both taus in about a minute
#   OUT=DIR (default /tmp/llmc_plan_check); any plan_check.py flag after the script.
# The data is this repository's source as byte tokens (no download), or DATA='glob'.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/llmc_plan_check}
mkdir -p "$OUT"
make --no-print-directory -s train_gpt tokenize plan >/dev/null
command -v mpirun >/dev/null || { echo "plan_check: needs mpirun (Open MPI)" >&2; exit 2; }
data=${DATA:-}
if [ -z "$data" ]; then
    cat llmc/*.h train_gpt.c train_gpt.cu >"$OUT/corpus.txt"
    ./tokenize --bytes 1 --out-dir "$OUT" --name check "$OUT/corpus.txt" >/dev/null
    data="$OUT/check_train_*.bin"
fi
exec python3 scripts/plan_check.py --data "$data" --out "$OUT" "$@"
