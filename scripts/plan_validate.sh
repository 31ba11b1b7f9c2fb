#!/usr/bin/env bash
# plan_validate.sh: the planner's GPU model against published end-to-end
# training runs, offline. Each run of scripts/plan_validate_runs.csv (its
# source, cluster, model shape, batch and layout, and the published step
# time or tokens/s) is predicted with ./plan --layout on the same layout,
# and the table prints the published figure, the prediction, their ratio
# (predicted step / published step: above 1 the model is pessimistic), the
# mean absolute error, and every run more than 15% off with the reason the
# file gives. The published runs are the check, not the fit: no parameter
# of the presets was tuned to them (docs/planner.md says where each comes
# from).
#
#   bash scripts/plan_validate.sh             # the table (plain text)
#   bash scripts/plan_validate.sh --markdown  # the same as docs/planner.md's Markdown table
#   RUNS=file PLAN=./plan                     # another table of runs, another planner binary
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-scripts/plan_validate_runs.csv}
PLAN=${PLAN:-./plan}
[ -x "$PLAN" ] || make --no-print-directory -s plan >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
exec python3 - "$RUNS" "$PLAN" "$tmp" "${1:-}" <<'PY'
import csv, subprocess, sys
runs_path, plan, tmp, fmt = sys.argv[1:5]
rows = list(csv.DictReader(line for line in open(runs_path) if not line.startswith("#")))
out, errs = [], []
for r in rows:
    L, C, H, V, M = r["model"].split("/")
    layout = r["layout"].replace(";", ",")
    world = 1
    for kv in layout.split(","):
        k, v = kv.split("=")
        if k in ("dp", "tp", "pp"):
            world *= int(v)
    path = "%s/%s.csv" % (tmp, r["id"])
    cmd = [plan, "--n-layer", L, "--n-embd", C, "--n-head", H, "--vocab-size", V, "--max-seq-len", M,
           "--seq-len", r["seq_len"], "--total-batch-tokens", r["batch_tokens"], "--cluster", r["cluster"],
           "--layout", layout, "--csv", path]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("plan_validate: %s: ./plan exited %d: %s" % (r["id"], p.returncode, p.stderr.strip()))
    pred = list(csv.DictReader(open(path)))[0]
    step = float(pred["step_ms"]) / 1e3
    pub = float(r["published"])
    pub_step = pub if r["figure"] == "step_s" else float(r["batch_tokens"]) / pub
    ratio = step / pub_step
    nodes = max(1, world // 8)
    out.append((r, world, nodes, pub_step, step, ratio, pred["valid"] == "1"))
mae = 100 * sum(abs(o[5] - 1) for o in out) / len(out)
mean = sum(o[5] for o in out) / len(out)
spread = 100 * (sum((o[5] / mean - 1) ** 2 for o in out) / len(out)) ** 0.5
gens = sorted({o[0]["cluster"] for o in out})
if fmt == "--markdown":
    print("| run | source | cluster | GPUs | layout | published step | predicted | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r, world, nodes, pub_step, step, ratio, fits in out:
        print("| %s | %s | %s | %d | `%s` | %.3f s | %.3f s%s | %.2f |" % (
            r["id"], r["source"], r["cluster"], world, r["layout"].replace(";", ","), pub_step, step,
            "" if fits else " (over the memory model)", ratio))
else:
    print("%-18s %-9s %5s %-40s %10s %10s %6s" % ("run", "cluster", "GPUs", "layout", "published", "predicted", "ratio"))
    for r, world, nodes, pub_step, step, ratio, fits in out:
        print("%-18s %-9s %5d %-40s %9.3fs %9.3fs %6.2f%s" % (r["id"], r["cluster"], world, r["layout"].replace(";", ","),
                                                           pub_step, step, ratio, "" if fits else "  (does not fit the memory model)"))
print("\n%d published runs on %s (%d on several nodes): mean absolute error %.1f%% of the step" % (
    len(out), ", ".join(gens), sum(o[2] > 1 for o in out), mae))
over = [o for o in out if abs(o[5] - 1) > 0.15]
print("the ratios' mean %.2f (below 1: the model is optimistic) and their spread about it %.1f%% (the error that ranks "
      "layouts against each other)" % (mean, spread))
print("%d over 15%%%s" % (len(over), ":" if over else ""))
for r, world, nodes, pub_step, step, ratio, fits in over:
    print("  %s (ratio %.2f): %s" % (r["id"], ratio, r["why_off"] or "NO REASON GIVEN in " + runs_path))
PY
