#!/usr/bin/env bash
# test_layers.sh: headers depend downward only. docs/architecture.md declares the layers of llmc/ (its
# ```layers block, lowest first) and the highest layer each program may reach; this checks every
# `#include "..."` of llmc/ against it: each header is in exactly one layer, includes only headers of its
# own layer or below, and each program listed reaches, through any chain of includes, no header above its
# layer (plan.c: no trainer runtime). A copy of llmc/ with a planted upward include (utils.h including
# train_loop.h) must fail the same check, so the check itself is checked. And every such #include (and the
# programs') says what it takes from the header (`// defines: a, b`), each name one the header or its own
# includes have; a planted stale name must be reported.
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

# Each #include "..." of llmc/ and of the programs says what it takes from the header (`// defines: a, b`),
# and every name it gives is one the header (or a header it includes) has: a name that goes stale fails.
# check_defines DIR: one line a wrong or missing comment (nothing when all are right)
check_defines() {
    python3 - "$1" <<'EOF'
import os, re, sys
root = sys.argv[1]
def text(p): return open(p).read()
def local(f, inc):
    for base in (os.path.dirname(f), root, os.path.join(root, 'llmc')):
        if os.path.exists(os.path.join(base, inc)): return os.path.normpath(os.path.join(base, inc))
def reach(h, seen):  # the header and every local header it includes, transitively
    if h in seen: return ''
    seen.add(h)
    t = text(h)
    return t + ''.join(reach(p, seen) for inc in re.findall(r'^#include "([^"]+)"', t, re.M) if (p := local(h, inc)))
files = [os.path.join(root, 'llmc', x) for x in sorted(os.listdir(os.path.join(root, 'llmc'))) if x.endswith(('.h', '.cuh'))]
files += [os.path.join(root, x) for x in sorted(os.listdir(root)) if x.endswith(('.c', '.cu'))]
for f in files:
    for n, line in enumerate(text(f).split('\n'), 1):
        m = re.match(r'#include "([^"]+)"(.*)', line)
        if not m: continue
        where = f'{os.path.relpath(f, root)}:{n}'
        d = re.match(r'\s*// defines: (.+)', m.group(2))
        h = local(f, m.group(1))
        if not d: print(f'{where}: #include "{m.group(1)}" has no "// defines:" comment'); continue
        if not h: print(f'{where}: {m.group(1)} not found'); continue
        body = reach(h, set())
        names = re.sub(r'\([^)]*\)', '', d.group(1))  # (words in parentheses are a remark, not names)
        for name in re.findall(r'[A-Za-z_][\w*]*', names):  # (a * in a name: any letters, tp_*_rows)
            pat = r'\b' + re.escape(name).replace(r'\*', r'\w*') + r'\b'
            if not re.search(pat, body): print(f'{where}: "{name}" is not in {m.group(1)} or what it includes')
EOF
}
out=$(check_defines .)
check "every #include of llmc/ and the programs says what it takes from the header, and the header has it" \
    '[ -z "$out" ]' "$(head -5 <<<"$out" | tr '\n' ';')"
mkdir -p "$tmp/d/llmc" && cp llmc/* "$tmp/d/llmc/" && cp train_gpt.c "$tmp/d/"
sed -i 's|^#include "utils.h".*|#include "utils.h"  // defines: no_such_function|' "$tmp/d/llmc/args.h"
out=$(check_defines "$tmp/d")
check "a stale name in a // defines: comment is reported" \
    'grep -q "llmc/args.h:[0-9]*: \"no_such_function\" is not in utils.h" <<<"$out"' "the check said: $out"
