#!/usr/bin/env bash
# test_reference.sh: the PyTorch reference (dev/reference/gpt_reference.py) and
# the fixtures it wrote (tests/fixtures/tiny_*.bin). With numpy: the committed
# fixtures pass the independent numpy checks. With PyTorch too: the script
# regenerates the same fixtures, a model file survives load + save unchanged,
# and --eval-tokens prints the loss a numpy forward pass gives (raw uint16 and
# llm.c token files) and rejects bad input with exit status 2.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
ref=dev/reference/gpt_reference.py
fix=tests/fixtures

if ! python3 -c "import numpy" 2>/dev/null; then
    echo "SKIP: reference fixtures (python3 with numpy not found)"
    exit 0
fi
python3 dev/reference/check_fixtures.py "$fix"
if ! python3 -c "import torch" 2>/dev/null; then
    echo "SKIP: reference script (PyTorch not found)"
    exit 0
fi


if python3 "$ref" --out "$tmp" >"$tmp/log" 2>&1; then
    if cmp -s "$tmp/tiny_model.bin" "$fix/tiny_model.bin"; then pass "reference regenerates tiny_model.bin"
    else fail "reference regenerates tiny_model.bin" "bytes differ from $fix/tiny_model.bin"; fi
    python3 - "$tmp/tiny_state.bin" "$fix/tiny_state.bin" <<'PY'
import sys, numpy as np
new, old = (np.fromfile(p, dtype=np.int32) for p in sys.argv[1:])
ok = new.size == old.size and (new[:256 + 64] == old[:256 + 64]).all()
err = np.abs(new[320:].view(np.float32) - old[320:].view(np.float32)).max() if ok else np.inf
print("PASS: reference regenerates tiny_state.bin" if err < 1e-6 else
      f"FAIL: reference regenerates tiny_state.bin (header/tokens differ or max abs err {err:.3g})")
PY
else
    fail "reference regenerates fixtures" "$(tail -n 1 "$tmp/log")"
fi

# One PyTorch process for the rest (each start costs seconds): the script's
# functions and main() are driven directly, as the command line would.
python3 - "$tmp" "$fix/tiny_model.bin" <<'PY'
import contextlib, filecmp, io, sys
import numpy as np
sys.path.insert(0, "dev/reference")
import check_fixtures as cf
import gpt_reference as ref
tmp, model_path = sys.argv[1:]

def check(ok, name, why):
    print(f"PASS: {name}" if ok else f"FAIL: {name} ({why})")

def run_main(*argv):
    """Runs the command line; returns (exit status, stdout, stderr)."""
    out, err, rc = io.StringIO(), io.StringIO(), 0
    sys.argv = ["gpt_reference.py", *argv]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            ref.main()
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()

ref.save_model(ref.load_model(model_path), f"{tmp}/resaved.bin")
check(filecmp.cmp(model_path, f"{tmp}/resaved.bin", shallow=False), "reference load + save round trip",
      "resaved file differs")

# 40 tokens in [0, 97): two sequences of 16 plus one target, raw and with an llm.c header.
tokens = ((np.arange(40) * 37 + 11) % 97).astype(np.uint16)
tokens.tofile(f"{tmp}/raw.u16")
header = np.zeros(256, dtype=np.int32)
header[:3] = [20240520, 1, tokens.size]
with open(f"{tmp}/llmc.bin", "wb") as f:
    f.write(header.tobytes() + tokens.tobytes())
np.uint16([5, 96, 97, 3]).tofile(f"{tmp}/outside.u16")
model = np.fromfile(model_path, dtype=np.int32)
cfg = tuple(int(v) for v in model[2:8])
params, _ = cf.split(model[256:].view(np.float32), cf.shapes(*cfg))
t = tokens.astype(np.int64)
expected = cf.forward(params, cfg, t[:32].reshape(2, 16), t[1:33].reshape(2, 16))[1]
for name in ("raw.u16", "llmc.bin"):
    rc, out, err = run_main("--load", model_path, "--eval-tokens", f"{tmp}/{name}", "--seq-len", "16", "--num-seqs", "2")
    got = float(out.split()[1]) if rc == 0 and out.startswith("loss ") else float("nan")
    check(abs(got - expected) < 2e-6, f"reference --eval-tokens {name}",
          f"status {rc}, output {out.strip()!r} {err.strip()!r}, numpy gives {expected:.6f}")

for name, argv in [
        ("missing model file", ["--load", f"{tmp}/none.bin", "--eval-tokens", f"{tmp}/raw.u16"]),
        ("non-model file", ["--load", f"{tmp}/raw.u16", "--eval-tokens", f"{tmp}/raw.u16"]),
        ("tokens outside vocab", ["--load", model_path, "--eval-tokens", f"{tmp}/outside.u16", "--seq-len", "2"]),
        ("too few tokens", ["--load", model_path, "--eval-tokens", f"{tmp}/outside.u16", "--seq-len", "16"]),
        ("--seq-len above maxT", ["--load", model_path, "--eval-tokens", f"{tmp}/raw.u16", "--seq-len", "33"]),
        ("no mode", ["--num-seqs", "2"])]:
    rc, out, err = run_main(*argv)
    check(rc == 2 and out == "" and err.count("\n") == 1, f"reference rejects {name}",
          f"status {rc}, stderr {err.strip()!r}")
PY
