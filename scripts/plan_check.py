#!/usr/bin/env python3
"""plan_check.py: the planner (./plan) against measured runs of the CPU trainer.

Runs ./plan --cluster local over R ranks for a small model, then every valid
layout it lists (or --limit of them, spread over the list) with the trainer
under mpirun, and prints per layout the predicted and measured step time
(the median of the steps after the first, the mean over --repeat runs) and peak memory per rank (the
largest rank's host RSS against the planner's formula plus the measured
per-rank baseline); then the mean absolute percentage errors and Kendall's
tau between the predicted and the measured order. --markdown prints the
summary as the README's table. Exit status 1 when a run fails.

    python3 scripts/plan_check.py --data 'DIR/*train*.bin' [--ranks 4] [--steps 8] [--limit N]
(scripts/plan_check.sh prepares the data and builds the programs.)
"""
import argparse
import csv
import json
import os
import subprocess
import sys

MODEL = ["--n-layer", "4", "--n-embd", "128", "--n-head", "4", "--vocab-size", "257", "--max-seq-len", "64"]
# --tiny: a 2-layer model on 2 ranks, 4 layouts, to see the check work in about a minute (its figures mean little)
TINY_MODEL = ["--n-layer", "2", "--n-embd", "64", "--n-head", "2", "--vocab-size", "257", "--max-seq-len", "32"]


def parse_args():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--data", required=True, help="training shards (byte tokens: vocabulary 257)")
    a.add_argument("--trainer", default="./train_gpt")
    a.add_argument("--plan", default="./plan")
    a.add_argument("--ranks", type=int, default=4)
    a.add_argument("--seq-len", type=int, default=64)
    a.add_argument("--total-batch-tokens", type=int, default=2048)
    a.add_argument("--max-micro-batch", type=int, default=8)
    a.add_argument("--steps", type=int, default=8)
    a.add_argument("--limit", type=int, default=0, help="run at most this many layouts (0: all)")
    a.add_argument("--repeat", type=int, default=2,
                   help="runs of each layout: the measured time is their mean, and the tau of the first run's "
                        "order against the last's is the measurement's own noise (the ceiling for the prediction's)")
    a.add_argument("--out", default="/tmp/llmc_plan_check")
    a.add_argument("--markdown", action="store_true", help="also print the summary as a Markdown table")
    a.add_argument("--tiny", action="store_true",
                   help="a 2-layer model, 2 ranks, T 32, a 512-token batch, 4 layouts of 4 steps (about a minute)")
    args = a.parse_args()
    if args.tiny:
        args.ranks, args.seq_len, args.total_batch_tokens, args.max_micro_batch = 2, 32, 512, 4
        args.steps, args.limit = 4, args.limit or 4
    return args


def layout_flags(row):
    f = ["--cp", row["cp"], "--tp", row["tp"], "--pp", row["pp"], "--zero", row["zero"], "--batch-size", row["B"]]
    if row["sp"] == "1":
        f += ["--sequence-parallel", "1"]
    if int(row["pp"]) > 1:
        f += ["--pp-schedule", row["schedule"], "--virtual-stages", row["v"]]
    return f


def layout_name(row):
    s = "dp%s%s tp%s%s pp%s" % (row["dp"], " cp%s" % row["cp"] if row["cp"] != "1" else "", row["tp"],
                                "+sp" if row["sp"] == "1" else "", row["pp"])
    if int(row["pp"]) > 1:
        s += " " + row["schedule"] + (":" + row["v"] if row["v"] != "1" else "")
    return s + " z%s B%s" % (row["zero"], row["B"])


def kendall_tau(x, y):
    n, s = len(x), 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = x[i] - x[j], y[i] - y[j]
            s += (a > 0) - (a < 0) if b > 0 else -((a > 0) - (a < 0)) if b < 0 else 0
    return s / (n * (n - 1) / 2) if n > 1 else float("nan")


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    shape = (TINY_MODEL if args.tiny else MODEL) + ["--seq-len", str(args.seq_len), "--total-batch-tokens",
                                                    str(args.total_batch_tokens)]
    plan_csv = os.path.join(args.out, "plan.csv")
    plan = subprocess.run([args.plan] + shape + ["--cluster", "local", "--devices-per-node", str(args.ranks),
                          "--max-micro-batch", str(args.max_micro_batch), "--csv", plan_csv],
                          env=env, capture_output=True, text=True)
    if plan.returncode != 0:
        sys.exit("plan_check: ./plan failed: " + plan.stderr.strip())
    print(plan.stdout.splitlines()[1])
    with open(plan_csv) as f:
        rows = [r for r in csv.DictReader(f) if r["valid"] == "1"]
    if args.limit and len(rows) > args.limit:
        step = len(rows) / args.limit
        rows = [rows[int(i * step)] for i in range(args.limit)]
    mpirun = ["mpirun", "--oversubscribe", "-np", str(args.ranks), "-x", "OMP_NUM_THREADS"]
    if os.geteuid() == 0:
        mpirun.insert(1, "--allow-run-as-root")
    results = []
    print("%-36s %10s %10s %7s %9s %9s %7s" % ("layout", "pred ms", "meas ms", "err", "pred MB", "meas MB", "err"))
    repeats = []
    for row in rows:
        times, mems = [], []
        for _ in range(args.repeat):
            log = os.path.join(args.out, "run.json")
            cmd = mpirun + [args.trainer, "--data-train", args.data, "--steps", str(args.steps), "--log-json", log] + \
                shape + layout_flags(row)
            run = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if run.returncode != 0:
                print("FAIL: %s: the trainer exited %d: %s" % (layout_name(row), run.returncode,
                                                              (run.stderr or run.stdout).strip().splitlines()[-1:]))
                sys.exit(1)
            with open(log) as f:
                summary = [json.loads(line)["summary"] for line in f if '"summary"' in line][0]
            times.append(summary["time"]["step"]["p50"])
            mems.append(max(summary["peak_memory_mb"]))
        repeats.append((times[0], times[-1]))
        meas_ms = sum(times) / len(times)
        meas_mb = max(mems)
        pred_ms = float(row["step_ms"])
        pred_mb = float(row["mem_max_mb"]) + float(row["baseline_mb"])
        results.append((row, pred_ms, meas_ms, pred_mb, meas_mb))
        print("%-36s %10.1f %10.1f %6.1f%% %9.1f %9.1f %6.1f%%" % (
            layout_name(row), pred_ms, meas_ms, 100 * (pred_ms / meas_ms - 1), pred_mb, meas_mb,
            100 * (pred_mb / meas_mb - 1)), flush=True)
    n = len(results)
    mape_t = 100 * sum(abs(p / m - 1) for _, p, m, _, _ in results) / n
    mape_m = 100 * sum(abs(p / m - 1) for _, _, _, p, m in results) / n
    within = sum(abs(p / m - 1) <= 0.10 for _, _, _, p, m in results)
    tau = kendall_tau([r[1] for r in results], [r[2] for r in results])
    best_pred = min(results, key=lambda r: r[1])
    best_meas = min(results, key=lambda r: r[2])
    noise = kendall_tau([a for a, _ in repeats], [b for _, b in repeats]) if args.repeat > 1 else float("nan")
    print("\n%d layouts on %d CPU ranks: step time MAPE %.1f%% (target < 15%%), memory MAPE %.1f%%, %d of %d within 10%%"
          % (n, args.ranks, mape_t, mape_m, within, n))
    print("order agreement (Kendall tau): predicted vs measured %.3f; measured vs measured (two runs of the same "
          "layouts) %.3f -- the prediction can agree with the measurement at best as well as it agrees with itself"
          % (tau, noise))
    print("predicted best: %s (%.1f ms, measured %.1f); measured best: %s (%.1f ms)" % (
        layout_name(best_pred[0]), best_pred[1], best_pred[2], layout_name(best_meas[0]), best_meas[2]))
    if args.markdown:
        print("\n| layouts | ranks | step time MAPE | Kendall tau | tau of two measured runs | memory MAPE | memory within 10% |")
        print("|---|---|---|---|---|---|---|")
        print("| %d | %d | %.1f%% | %.3f | %.3f | %.1f%% | %d of %d |" % (n, args.ranks, mape_t, tau, noise, mape_m, within, n))


if __name__ == "__main__":
    main()
