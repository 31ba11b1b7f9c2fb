#!/usr/bin/env python3
"""ckpt_cost_check.py: checks each checkpoint's cost record in a trainer's JSON
log against the log's step lines (llmc/ckpt_writer.h's ckpt_step_cost).

  ckpt_cost_check.py LOG STEP...   the checkpoints' steps, in order

A record adds up when its steps run from the one that staged it (steps done, as
the step records count: "first_step" = its "step") to the step line just before
the record (the one it was committed in); step_ms is their "ms" summed;
baseline_ms the median (nearest rank) of the last 5 steps before it, the first
left out, that are in no checkpoint's steps; lost_ms = step_ms - steps x
baseline_ms; stall_ms the "staged" record's, within its steps' "ckpt" time (the
boundary's hand-over, and the wait for the copy: before the update that makes
it, or, where the writer thread makes it, before the next update). Prints the
records that do not; exits 1 then, or when the checkpoints are not STEP....
"""
import json
import sys

lines = [json.loads(l) for l in open(sys.argv[1])]
want = [int(a) for a in sys.argv[2:]]
ms = {r['step']: r['ms'] for r in lines if 'loss' in r}
ckpt_part = {r['step']: r['time']['ckpt'] for r in lines if 'loss' in r}
staged = {r['step']: r['stall_ms'] for r in lines if r.get('ckpt') == 'staged'}
costs = [(i, r) for i, r in enumerate(lines) if r.get('ckpt') == 'cost']
busy = set(s for _, c in costs for s in range(c['first_step'], c['first_step'] + c['steps']))
bad = []
for i, c in costs:
    f, n = c['first_step'], c['steps']
    last = [r['step'] for r in lines[:i] if 'loss' in r][-1]
    clean = [s for s in sorted(ms) if 1 < s < f and s not in busy][-5:]
    base = sorted(ms[s] for s in clean)[(len(clean) + 1) // 2 - 1] if clean else None
    ok = (f == c['step'] and n >= 1 and f + n - 1 == last
          and abs(sum(ms[s] for s in range(f, f + n)) - c['step_ms']) < 0.01
          and c['stall_ms'] == staged[c['step']] and c['stall_ms'] <= sum(ckpt_part[s] for s in range(f, f + n)) + 0.002
          and (base is None and c['baseline_ms'] is None and c['lost_ms'] is None
               or base is not None and abs(base - c['baseline_ms']) < 0.002
               and abs(c['step_ms'] - n * c['baseline_ms'] - c['lost_ms']) < 0.01))
    if not ok:
        bad.append((c, 'base', base, 'last', last))
if bad:
    print(bad)
sys.exit(0 if [c['step'] for _, c in costs] == want and not bad else 1)
