#!/usr/bin/env python3
"""step_times.py: checks a trainer's --log-json step-time breakdown (llmc/step_time.h).

    python3 tests/step_times.py LOG.json NAME [--steps N] [--ranks R] [--part P ...]

Prints PASS/FAIL lines (tests/checks.sh's format) for:
  - every step record has "time" with the seven parts, none negative, and
    they add up to the record's "ms" within 3% (+0.5 ms);
  - with --ranks R > 1: "time_min" and "time_max" too, min <= max, and rank
    0's own figure between them;
  - each --part P is above zero in some step (a part the run must show);
  - the summary record: --steps N - 1 steps after the warm-up (N - 0 when N
    is 1), p50 <= p90 for every part, and the mean step within the steps' range.
Exit status 1 when a check fails.
"""
import json
import sys

PARTS = ["data", "fwd", "bwd", "comm", "bubble", "opt", "ckpt"]


def main():
    args = sys.argv[1:]
    path, name = args[0], args[1]
    steps, ranks, must = None, 1, []
    i = 2
    while i < len(args):
        if args[i] == "--steps":
            steps = int(args[i + 1])
        elif args[i] == "--ranks":
            ranks = int(args[i + 1])
        elif args[i] == "--part":
            must.append(args[i + 1])
        i += 2
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    step_recs = [r for r in records if "loss" in r and "grad_norm" in r]
    summaries = [r["summary"] for r in records if "summary" in r]
    failed = 0

    def check(ok, what, detail=""):
        nonlocal failed
        if ok:
            print(f"PASS: {name}_{what}")
        else:
            failed += 1
            print(f"FAIL: {name}_{what} ({detail})")

    worst, bad = 0.0, []
    for r in step_recs:
        t = r.get("time", {})
        if sorted(t) != sorted(PARTS) or min(t.values()) < 0:
            bad.append(r["step"])
            continue
        off = abs(sum(t.values()) - r["ms"])
        worst = max(worst, off / r["ms"])
        if off > 0.03 * r["ms"] + 0.5:
            bad.append(r["step"])
    check(step_recs and not bad, "step_time_parts_add_up_to_the_step",
          f"{len(step_recs)} records, off at steps {bad[:5]}, worst {100 * worst:.1f}%")
    if ranks > 1:
        spread_bad = [r["step"] for r in step_recs
                      if not all(r["time_min"][p] <= r["time"][p] <= r["time_max"][p] for p in PARTS)]
        check(step_recs and all("time_min" in r and "time_max" in r for r in step_recs) and not spread_bad,
              "step_time_min_and_max_over_ranks_bracket_rank_0", f"steps {spread_bad[:5]}")
    for p in must:
        check(any(r["time"][p] > 0 for r in step_recs), f"step_time_shows_{p}",
              f"{p} is 0 in every step")
    if steps is not None:
        want = steps - 1 if steps > 1 else steps
        s = summaries[-1] if summaries else None
        ok = s is not None and s["steps"] == want and all(
            s["time"][p]["p50"] <= s["time"][p]["p90"] + 1e-9 for p in PARTS + ["step"])
        if ok:
            measured = [r["ms"] for r in step_recs][len(step_recs) - want:]
            ok = min(measured) - 1e-3 <= s["time"]["step"]["mean"] <= max(measured) + 1e-3
        check(ok, "summary_over_the_steps_after_warm_up", f"summary {s}")
    sys.exit(1 if failed else 0)


try:
    main()
except (OSError, ValueError, KeyError, IndexError, TypeError) as e:  # a missing or malformed log
    print(f"FAIL: {sys.argv[2] if len(sys.argv) > 2 else 'step_times'}_log_is_readable ({e!r})")
    sys.exit(1)
