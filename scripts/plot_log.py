#!/usr/bin/env python3
"""plot_log.py: draws training runs' --log-json logs (llmc/logger.h) to one PNG.

    scripts/plot_log.py LOG.jsonl [LOG.jsonl ...] [-o OUT.png]

Top row against the optimizer step, bottom row against elapsed seconds: the
training loss with the validation loss (dots), the learning rate, and tokens/s.
Each log is one run, a colour of its own, named by its path. OUT defaults to
the first log's name with .png. A log that cannot be read is one line on
stderr naming the file (and line), exit status 2.
"""
import json
import os
import sys


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_log(path):
    """The step and validation records of one log: dicts of lists."""
    run = {"step": [], "time": [], "loss": [], "lr": [], "tok_per_s": [], "val_step": [], "val_time": [], "val_loss": []}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        die(f"cannot read '{path}': {e}")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            die(f"{path}:{n}: not a JSON record ({e.msg})")
        if not isinstance(rec, dict) or "step" not in rec:
            continue  # the run, summary records
        elapsed = rec.get("elapsed_s")
        if "loss" in rec:
            run["step"].append(rec["step"])
            run["time"].append(elapsed)
            run["loss"].append(rec["loss"])
            run["lr"].append(rec.get("lr"))
            run["tok_per_s"].append(rec.get("tok_per_s"))
        elif "val_loss" in rec:
            run["val_step"].append(rec["step"])
            run["val_time"].append(elapsed)
            run["val_loss"].append(rec["val_loss"])
    if not run["step"] and not run["val_step"]:
        die(f"'{path}' has no step or validation records (a --log-json file of train_gpt or train_gptcu?)")
    return run


def main(argv):
    args, out = [], None
    i = 0
    while i < len(argv):
        if argv[i] in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        if argv[i] in ("-o", "--out"):
            if i + 1 == len(argv):
                die(f"{argv[i]} needs a file name")
            out = argv[i + 1]
            i += 2
            continue
        if argv[i].startswith("-"):
            die(f"unknown flag '{argv[i]}' (see --help)")
        args.append(argv[i])
        i += 1
    if not args:
        die("give one or more --log-json files (see --help)")
    runs = [(p, read_log(p)) for p in args]
    out = out or os.path.splitext(args[0])[0] + ".png"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        die("matplotlib is not installed (pip install matplotlib)")

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    panels = [("loss", "loss (dots: validation)"), ("lr", "learning rate"), ("tok_per_s", "tokens/s")]
    for row, (x, vx, xlabel) in enumerate([("step", "val_step", "step"), ("time", "val_time", "elapsed seconds")]):
        for col, (key, title) in enumerate(panels):
            ax = axes[row][col]
            for k, (name, run) in enumerate(runs):
                color = f"C{k % 10}"
                pts = [(a, b) for a, b in zip(run[x], run[key]) if a is not None and b is not None]
                if pts:
                    ax.plot(*zip(*pts), color=color, label=name, linewidth=1)
                if key == "loss":
                    vpts = [(a, b) for a, b in zip(run[vx], run["val_loss"]) if a is not None]
                    if vpts:
                        ax.plot(*zip(*vpts), "o", color=color, markersize=4)
            ax.set_title(title)
            ax.set_xlabel(xlabel)
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        die(f"cannot write '{out}': {e}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
