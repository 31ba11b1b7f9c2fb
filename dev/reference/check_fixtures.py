#!/usr/bin/env python3
"""check_fixtures.py: checks tests/fixtures/tiny_{model,state}.bin with numpy
alone, independently of gpt_reference.py: parses both files by the format in
gpt_reference.py's header comment, recomputes the logits and loss with a numpy
float64 forward pass, checks the gradients by central finite differences, and
the first loss after one clipped AdamW step. Prints PASS:/FAIL: lines.

Usage: python3 dev/reference/check_fixtures.py [FIXTURE_DIR]   (default tests/fixtures)
"""
import sys

import numpy as np

FILE_ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
              "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
failures = 0


def check(ok, name, why=""):
    global failures
    print(f"PASS: {name}" if ok else f"FAIL: {name} ({why})")
    failures += not ok


def shapes(maxT, V, L, NH, C, Vp):
    s = dict(wte=(Vp, C), wpe=(maxT, C), ln1w=(L, C), ln1b=(L, C), qkvw=(L, 3 * C, C), qkvb=(L, 3 * C),
             attprojw=(L, C, C), attprojb=(L, C), ln2w=(L, C), ln2b=(L, C), fcw=(L, 4 * C, C), fcb=(L, 4 * C),
             fcprojw=(L, C, 4 * C), fcprojb=(L, C), lnfw=(C,), lnfb=(C,))
    return [(name, s[name]) for name in FILE_ORDER]


def split(values, layout):
    """Cuts a flat array into named float64 tensors; returns (dict, floats used)."""
    out, offset = {}, 0
    for name, shape in layout:
        n = int(np.prod(shape))
        out[name] = values[offset:offset + n].astype(np.float64).reshape(shape)
        offset += n
    return out, offset


def layernorm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def forward(p, cfg, x, y):
    """Returns logits (B,T,Vp) and the mean cross-entropy over the first V columns."""
    maxT, V, L, NH, C, Vp = cfg
    B, T = x.shape
    hs = C // NH
    h = p["wte"][x] + p["wpe"][:T]  # (B,T,C)
    causal = np.tril(np.ones((T, T), dtype=bool))
    for l in range(L):
        a = layernorm(h, p["ln1w"][l], p["ln1b"][l])
        qkv = a @ p["qkvw"][l].T + p["qkvb"][l]  # (B,T,3C)
        q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, NH, hs).transpose(0, 2, 1, 3) for i in range(3))
        att = np.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs), -np.inf)  # (B,NH,T,T)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        h = h + (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C) @ p["attprojw"][l].T + p["attprojb"][l]
        m = layernorm(h, p["ln2w"][l], p["ln2b"][l]) @ p["fcw"][l].T + p["fcb"][l]  # (B,T,4C)
        m = 0.5 * m * (1 + np.tanh(np.sqrt(2 / np.pi) * (m + 0.044715 * m ** 3)))
        h = h + m @ p["fcprojw"][l].T + p["fcprojb"][l]
    logits = layernorm(h, p["lnfw"], p["lnfb"]) @ p["wte"].T
    z = logits[..., :V]
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    return logits, -np.take_along_axis(logp, y[..., None], -1).mean()


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    model = np.fromfile(f"{d}/tiny_model.bin", dtype=np.int32)
    state = np.fromfile(f"{d}/tiny_state.bin", dtype=np.int32)
    check(model[0] == 20240326 and model[1] == 3 and not model[8:256].any(), "fixture model header")
    cfg = tuple(int(v) for v in model[2:8])
    maxT, V, L, NH, C, Vp = cfg
    layout = shapes(*cfg)
    params, n = split(model[256:].view(np.float32), layout)
    check(model.size == 256 + n, "fixture model size", f"{model.size - 256} floats, layout has {n}")
    check(Vp % 128 == 0 and Vp - 128 < V <= Vp and not params["wte"][V:].any(), "fixture model padded wte rows zero")
    check(all(np.count_nonzero(params[k]) == params[k].size for k in FILE_ORDER if k != "wte"),
          "fixture model tensors all nonzero")

    magic, version, B, T, nsteps, sV = (int(v) for v in state[:6])
    hyper = state[8:14].view(np.float32).astype(np.float64)
    check(magic == 20261202 and version == 1 and sV == V and not state[6:8].any() and not state[14:256].any(),
          "fixture state header", f"magic {magic} version {version} V {sV}")
    o = 256
    x = state[o:o + B * T].reshape(B, T); o += B * T
    y = state[o:o + B * T].reshape(B, T); o += B * T
    f = state[o:].view(np.float32)
    logits_ref = f[:B * T * V].reshape(B, T, V); f = f[B * T * V:]
    loss_ref = float(f[0]); f = f[1:]
    grads, n = split(f, layout); f = f[n:]
    losses = f
    check(losses.size == nsteps, "fixture state size", f"{losses.size} floats after the grads, expected {nsteps}")
    check(x.min() >= 0 and x.max() < V and y.min() >= 0 and y.max() < V, "fixture state tokens in [0, V)")

    logits, loss = forward(params, cfg, x, y)
    err = np.abs(logits[..., :V] - logits_ref).max()
    check(err < 1e-6, "fixture logits match numpy forward", f"max abs err {err:.3g}")
    check(abs(loss - loss_ref) < 1e-6 and abs(losses[0] - loss_ref) < 1e-6, "fixture loss matches numpy forward",
          f"numpy {loss:.7f} stored {loss_ref:.7f} losses[0] {losses[0]:.7f}")
    check(not grads["wte"][V:].any(), "fixture grads padded wte rows zero")

    # Central differences on the largest-gradient element and one random element of each tensor.
    rng = np.random.default_rng(0)
    worst = 0.0
    gmax = max(np.abs(g).max() for g in grads.values())
    for name in FILE_ORDER:
        g = grads[name]
        for i in (int(np.abs(g).argmax()), int(rng.integers(g.size // 2 if name == "wte" else g.size))):
            eps = 1e-5
            p = params[name].reshape(-1)
            keep = p[i]
            p[i] = keep + eps
            up = forward(params, cfg, x, y)[1]
            p[i] = keep - eps
            down = forward(params, cfg, x, y)[1]
            p[i] = keep
            worst = max(worst, abs((up - down) / (2 * eps) - g.reshape(-1)[i]))
    check(worst < 1e-6 * gmax, "fixture grads match finite differences", f"max abs err {worst:.3g}, max |g| {gmax:.3g}")

    # One step: clip the total gradient norm, then AdamW (step 1: bias-corrected m/sqrt(v)).
    lr, beta1, beta2, eps, wd, clip = hyper
    norm = np.sqrt(sum((g ** 2).sum() for g in grads.values()))
    scale = min(1.0, clip / (norm + 1e-6))
    stepped = {}
    for name in FILE_ORDER:
        g = grads[name] * scale
        m_hat, v_hat = (1 - beta1) * g / (1 - beta1), (1 - beta2) * g * g / (1 - beta2)
        decay = wd if name in ("wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw") else 0.0
        stepped[name] = params[name] * (1 - lr * decay) - lr * m_hat / (np.sqrt(v_hat) + eps)
    loss1 = forward(stepped, cfg, x, y)[1]
    check(abs(loss1 - losses[1]) < 2e-6, "fixture losses[1] matches one AdamW step",
          f"numpy {loss1:.7f} stored {losses[1]:.7f}")
    check(all(np.isfinite(losses)) and losses[-1] < losses[0], "fixture losses decrease",
          " ".join(f"{v:.4f}" for v in losses))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
