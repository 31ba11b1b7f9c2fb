#!/usr/bin/env python3
"""bench.py: a benchmark sweep of either trainer (scripts/bench.sh runs it).

Around a base run (a model shape, batch, sequence length), each swept
variable takes its listed values one at a time, the others at the base:
model size, batch size, sequence length, --recompute, the ZeRO
stage (on 2 data ranks) and dp x tp x pp layouts with their pipeline
schedules. On the CPU trainer every run gets the same cores (--cores: a run
of R ranks gets cores/R OpenMP threads a rank), so the layouts compare on the
same hardware; on GPUs a run's ranks are its GPUs. A data rank trains batch x
seq x accum tokens a step. Each point is --repeats runs of a few steps; each
run's --log-json summary gives tokens/s, MFU, the mean step and its parts
(llmc/step_time.h) and each rank's peak memory, and the point takes the
median run (by tokens/s) with the spread over the runs (min and max).
Writes OUT/bench.csv (one row a point, with its ranks and threads) and
OUT/<variable>.png (tokens/s and MFU against each swept variable, the bars
the medians, the whiskers the spread; the title names the base model and
batch) and OUT/breakdown.png (the step's parts per layout, stacked), unless
matplotlib is missing (then it says so).

Layouts are DxTxP[:schedule][:sp][:zeroN], e.g. 1x2x1:sp, 1x1x2:zb1p, 2x1x2:zero1.
"""
import argparse
import csv
import json
import os
import subprocess
import sys

PARTS = ["data", "fwd", "bwd", "comm", "bubble", "opt", "ckpt"]


def parse_args():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--trainer", default="./train_gpt")
    a.add_argument("--data", required=True, help="glob of training shards")
    a.add_argument("--out", default="/tmp/llmc_bench")
    a.add_argument("--steps", type=int, default=6)
    a.add_argument("--repeats", type=int, default=3, help="runs a point (its median and spread)")
    a.add_argument("--model", default="4:128:4", help="base shape L:C:NH (or a preset name: d12, ...)")
    a.add_argument("--vocab", type=int, default=257)
    a.add_argument("--batch", type=int, default=4)
    a.add_argument("--seq", type=int, default=64)
    a.add_argument("--accum", type=int, default=2, help="micro-batches a step (on one data rank)")
    a.add_argument("--models", default="2:64:2,4:128:4,6:192:6")
    a.add_argument("--batches", default="2,4,8")
    a.add_argument("--seqs", default="32,64,128")
    a.add_argument("--recomputes", default="", help="e.g. none,selective,full")
    a.add_argument("--zeros", default="0,1,2,3", help="ZeRO stages, on 2 data ranks")
    a.add_argument("--layouts", default="1x1x1,2x1x1,1x2x1,1x2x1:sp,1x1x2:1f1b,1x1x2:zb1p,2x1x2:1f1b")
    a.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)),
                   help="CPU trainer: the cores every run gets, as cores/ranks OpenMP threads a rank (at least 1: "
                        "more ranks than cores oversubscribe them; default: the cores this process may use)")
    a.add_argument("--extra", default="", help="more trainer flags, space-separated")
    a.add_argument("--long-seqs", default="", help="long-context cases at these T (e.g. 4096,8192): one process, "
                   "cp 2 and --recompute full on --long-model, B 1, and the longest T each fits in --fit-gb")
    a.add_argument("--long-model", default="4:256:4", help="the long-context cases' shape L:C:NH")
    a.add_argument("--fit-gb", type=float, default=16, help="the memory the longest T must fit in (the trainer's check)")
    return a.parse_args()


def model_flags(m, vocab, seq):
    if m.startswith("d"):
        return ["--model", m, "--max-seq-len", str(max(seq, 64))]
    L, C, NH = m.split(":")
    return ["--n-layer", L, "--n-embd", C, "--n-head", NH, "--vocab-size", str(vocab), "--max-seq-len",
            str(max(seq, 64))]


def layout_flags(spec):
    dims, *opts = spec.split(":")
    d, t, p = (int(x) for x in dims.split("x"))
    flags = ["--tp", str(t), "--pp", str(p)]
    for o in opts:
        if o == "sp":
            flags += ["--sequence-parallel", "1"]
        elif o.startswith("cp"):
            flags += ["--cp", o[2:]]
            t *= int(o[2:])  # (context ranks: more ranks, the same data ranks)
        elif o.startswith("zero"):
            flags += ["--zero", o[4:]]
        else:
            flags += ["--pp-schedule", o]
    return d * t * p, d, flags


def run_once(args, name, value, model, batch, seq, layout, extra):
    ranks, dp, lflags = layout_flags(layout)
    tag = f"{name}_{value}".replace(":", "-").replace("/", "-").replace(" ", "_")
    log_json = os.path.join(args.out, tag + ".json")
    tokens = batch * seq * dp * args.accum
    cmd = [args.trainer, "--data-train", args.data, *model_flags(model, args.vocab, seq), "--batch-size", str(batch),
           "--seq-len", str(seq), "--total-batch-tokens", str(tokens), "--steps", str(args.steps), "--lr", "1e-4",
           "--log-json", log_json, *lflags, *extra, *args.extra.split()]
    if ranks > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks), "-x",
               "OMP_NUM_THREADS"] + cmd
    threads = max(1, args.cores // ranks)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    with open(os.path.join(args.out, tag + ".log"), "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    row = {"sweep": name, "value": value, "ranks": ranks, "threads": threads, "layout": layout, "model": model, "batch": batch,
           "seq": seq, "flags": " ".join(cmd[cmd.index(args.trainer) + 1:]), "status": rc}
    summary = None
    if rc == 0:
        with open(log_json) as f:
            for line in f:
                if line.startswith('{"summary"'):
                    summary = json.loads(line)["summary"]
    if summary:
        row.update(tok_per_s=summary["tok_per_s"], mfu=summary["mfu"], step_ms=summary["time"]["step"]["mean"],
                   peak_mem_mb=max(summary["peak_memory_mb"]))
        row.update({p + "_ms": summary["time"][p]["mean"] for p in PARTS})
    return row


def run(args, name, value, model, batch, seq, layout="1x1x1", extra=()):
    """A point: the median of --repeats runs (by tokens/s), with min and max of tokens/s and MFU."""
    runs = [run_once(args, name, value, model, batch, seq, layout, extra) for _ in range(args.repeats)]
    failed = [r for r in runs if "tok_per_s" not in r]
    row = failed[0] if failed else sorted(runs, key=lambda r: r["tok_per_s"])[(len(runs) - 1) // 2]
    row["repeats"] = len(runs)
    if not failed:
        for k in ("tok_per_s", "mfu"):
            row[k + "_min"] = min(r[k] for r in runs)
            row[k + "_max"] = max(r[k] for r in runs)
    print(f"BENCH {name:10s} {value:14s} ranks {row['ranks']} x {row['threads']} threads  " +
          (f"{row['tok_per_s']:10.0f} tok/s ({row['tok_per_s_min']:.0f}-{row['tok_per_s_max']:.0f})  "
           f"{row['step_ms']:9.1f} ms  MFU {100 * row['mfu']:5.1f}%  median of {len(runs)}"
           if not failed else f"failed (exit {row['status']}; see its .log in {args.out})"), flush=True)
    return row


# The long-context cases: how each is run (a layout and extra flags) on --long-model at B 1.
LONG_CASES = (("one process", "1x1x1", ()), ("cp 2", "1x1x1:cp2", ()), ("full recompute", "1x1x1", ("--recompute", "full")))


def refused_flag(log):
    """The trainer refused the case's flag value (not the memory): the case is skipped."""
    with open(log, errors="replace") as f:
        return any(line.startswith("error: --recompute") for line in f)


def longest_fit(args, layout, extra, lo=1024, hi=1 << 20):
    """The longest T (a multiple of lo) whose run the trainer's memory check (rank_memory.h, --mem-limit-mb) takes
    in --fit-gb, by bisection over --steps 0 starts (0 when lo does not fit), and whether the trainer refuses the
    case's flags."""
    ranks, _, lflags = layout_flags(layout)
    def fits(T):
        cmd = [args.trainer, "--data-train", args.data, *model_flags(args.long_model, args.vocab, T), "--batch-size", "1",
               "--seq-len", str(T), "--total-batch-tokens", str(T), "--steps", "0", "--peak-tflops", "1",
               "--mem-limit-mb", str(int(args.fit_gb * 1000)), *lflags, *extra]
        if ranks > 1:
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] + cmd
        log = os.path.join(args.out, "fit.log")
        with open(log, "w") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
        return rc == 0, rc == 2 and refused_flag(log)
    ok, refused = fits(lo)
    if not ok:
        return 0, refused
    while hi - lo > 1024:
        mid = (lo + hi) // 2 // 1024 * 1024
        if fits(mid)[0]:
            lo = mid
        else:
            hi = mid
    return lo, False


def long_context(args):
    """Tokens/s and peak memory of each long-context case at each --long-seqs T, and the longest T each fits."""
    rows = []
    for name, layout, extra in LONG_CASES:
        fit, refused = longest_fit(args, layout, extra)
        if refused:
            print(f"BENCH long       {name}: skipped (the trainer refuses {' '.join(extra)})", flush=True)
            continue
        for t in [v for v in args.long_seqs.split(",") if v]:
            rows.append(run(args, "long", f"{name} T {t}", args.long_model, 1, int(t), layout=layout, extra=extra))
        print(f"BENCH long       {name}: the longest T in {args.fit_gb:g} GB (the trainer's memory check): {fit}",
              flush=True)
        rows.append({"sweep": "long_fit", "value": name, "layout": layout, "model": args.long_model, "batch": 1,
                     "seq": fit, "status": 0, "flags": " ".join(extra)})
    return rows


def plots(rows, out, args):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots: matplotlib not found (pip install matplotlib); the CSV is written")
        return []
    made = []
    ok = [r for r in rows if "tok_per_s" in r]
    for sweep in dict.fromkeys(r["sweep"] for r in ok):
        rs = [r for r in ok if r["sweep"] == sweep]
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
        xs = [r["value"] for r in rs]
        for a, key, scale, color, label in ((ax[0], "tok_per_s", 1, "#4477aa", "tokens/s"),
                                            (ax[1], "mfu", 100, "#ee6677", "MFU %")):
            mid = [scale * r[key] for r in rs]
            spread = [[m - scale * r[key + "_min"] for m, r in zip(mid, rs)],
                      [scale * r[key + "_max"] - m for m, r in zip(mid, rs)]]
            a.bar(xs, mid, yerr=spread, capsize=3, color=color)
            a.set_ylabel(label)
            a.set_xlabel(sweep)
            a.tick_params(axis="x", labelrotation=30)
        base = {"model": f"model {args.model}", "batch": f"batch {args.batch}", "seq": f"seq {args.seq}"}
        if sweep == "long":
            base = {"model": f"model {args.long_model}", "batch": "batch 1"}
        base.pop(sweep, None)
        title = (f"{sweep} sweep | {', '.join(base.values())}, accum {args.accum} | "
                 f"median of {args.repeats} runs, whiskers min-max")
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        path = os.path.join(out, f"{sweep}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(f"{path}: {title}")
    rs = [r for r in ok if r["sweep"] == "layout"]
    if rs:
        fig, ax = plt.subplots(figsize=(8, 3.6))
        bottom = [0.0] * len(rs)
        colors = ["#bbbbbb", "#4477aa", "#66ccee", "#ee6677", "#ccbb44", "#228833", "#aa3377"]
        for p, c in zip(PARTS, colors):
            vals = [r[p + "_ms"] for r in rs]
            ax.bar([r["value"] for r in rs], vals, bottom=bottom, label=p, color=c)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_ylabel("ms a step (rank 0, mean)")
        ax.set_xlabel("layout dp x tp x pp[:options]")
        ax.tick_params(axis="x", labelrotation=30)
        ax.legend(ncol=4, fontsize=8)
        title = (f"where the step goes, per layout | model {args.model}, batch {args.batch}, seq {args.seq}, "
                 f"accum {args.accum} | the median run of {args.repeats}")
        ax.set_title(title, fontsize=9)
        fig.tight_layout()
        path = os.path.join(out, "breakdown.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(f"{path}: {title}")
    return made


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    base = (args.model, args.batch, args.seq)
    lists = lambda s: [v for v in s.split(",") if v]
    for m in lists(args.models):
        rows.append(run(args, "model", m, m, args.batch, args.seq))
    for b in lists(args.batches):
        rows.append(run(args, "batch", b, args.model, int(b), args.seq))
    for t in lists(args.seqs):
        rows.append(run(args, "seq", t, args.model, args.batch, int(t)))
    for r in lists(args.recomputes):
        rows.append(run(args, "recompute", r, *base, extra=("--recompute", r)))
    for z in lists(args.zeros):
        rows.append(run(args, "zero", z, *base, layout=f"2x1x1:zero{z}"))
    for spec in lists(args.layouts):
        rows.append(run(args, "layout", spec, *base, layout=spec))
    if args.long_seqs:
        rows += long_context(args)
    cols = ["sweep", "value", "ranks", "threads", "layout", "model", "batch", "seq", "status", "repeats", "tok_per_s",
            "tok_per_s_min", "tok_per_s_max", "mfu", "mfu_min", "mfu_max", "step_ms",
            *[p + "_ms" for p in PARTS], "peak_mem_mb", "flags"]
    path = os.path.join(args.out, "bench.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print(f"csv: {path}")
    for p in plots(rows, args.out, args):
        print(f"plot: {p}")
    sys.exit(0 if all(r["status"] == 0 for r in rows) else 1)


main()
