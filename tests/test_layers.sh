#!/usr/bin/env bash
# test_layers.sh: headers depend downward only. docs/architecture.md declares the layers of llmc/ (its
# ```layers block, lowest first) and the highest layer each program may reach; this checks every
# `#include "..."` of llmc/ against it: each header is in exactly one layer, includes only headers of its
# own layer or below, and each program listed reaches, through any chain of includes, no header above its
# layer (plan.c: no trainer runtime). A copy of llmc/ with a planted upward include (utils.h including
# train_loop.h) must fail the same check, so the check itself is checked.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
# check_layers LLMC_DIR: one line a violation (nothing when the graph follows the declared order)
check_layers() {
    python3 - "$1" <<'EOF'
import os, re, sys
llmc = sys.argv[1]
block = re.search(r'^```layers\n(.*?)^```', open('docs/architecture.md').read(), re.S | re.M).group(1)
layer_of, order, reach = {}, [], {}
for line in block.splitlines():
    name, _, rest = line.partition(':')
    name, rest = name.strip(), rest.split()
    if name.startswith('program '):  # "program plan.c: setup"
        reach[name.split()[1]] = rest[0]
        continue
    order.append(name)
    for h in rest:
        if h in layer_of: print(f'{h} is declared in two layers ({layer_of[h]}, {name})')
        layer_of[h] = name
rank = {n: i for i, n in enumerate(order)}
def includes(path):
    return re.findall(r'^#include "(?:llmc/)?([^"/]+)"', open(path).read(), re.M)
for h in sorted(os.listdir(llmc)):
    if not h.endswith(('.h', '.cuh')): continue
    if h not in layer_of: print(f'llmc/{h} is in no layer of docs/architecture.md'); continue
    for d in includes(os.path.join(llmc, h)):
        if d in layer_of and rank[layer_of[d]] > rank[layer_of[h]]:
            print(f'llmc/{h} ({layer_of[h]}) includes {d} ({layer_of[d]}, a layer above)')
for h in layer_of:
    if not os.path.exists(os.path.join(llmc, h)): print(f'docs/architecture.md declares {h}, which llmc/ lacks')
for prog, top in reach.items():
    seen, todo = set(), [d for d in includes(prog) if d in layer_of]
    while todo:
        d = todo.pop()
        if d in seen: continue
        seen.add(d)
        todo += [e for e in includes(os.path.join(llmc, d)) if e in layer_of]
    for d in sorted(seen):
        if rank[layer_of[d]] > rank[top]:
            print(f'{prog} reaches {d} ({layer_of[d]}), above its layer {top}')
EOF
}
out=$(check_layers llmc)
check "every llmc/ header includes only its own layer or below, and each program stays within its layer" \
    '[ -z "$out" ]' "$(head -5 <<<"$out" | tr '\n' ';')"
cp -r llmc "$tmp/llmc"
echo '#include "train_loop.h"' >>"$tmp/llmc/utils.h"
out=$(check_layers "$tmp/llmc")
check "a planted upward include (utils.h including train_loop.h) is reported" \
    'grep -q "llmc/utils.h (base) includes train_loop.h (loop, a layer above)" <<<"$out"' "the check said: $out"
