#!/usr/bin/env python3
"""hf_check.py: the Hugging Face side of tests/test_hf.sh, with numpy only (the
`safetensors` package, where installed, reads the exported files too).

  export DIR LOG VAL T B        DIR (from --save-hf) has exactly Hugging Face GPT-2's tensor names,
                                shapes and dtypes, a GPT2LMHeadModel config.json; a numpy GPT-2 forward
                                on it gives LOG's last val_loss (B rows of T+1 tokens of the shard VAL) to 1e-5
  greedy DIR T N OUT            the numpy forward's greedy continuation (N tokens after <|endoftext|>,
                                a window of T) written as bytes to OUT (ids < 256; others as <id>)
  topk DIR T K GEN              every token of GEN (a continuation after <|endoftext|>, a window of T; as
                                greedy writes it) is among the K most likely of the numpy forward's, and
                                not every one is the most likely
  make DIR DTYPE PREFIX L C H V P  a random GPT-2 (F32, F16 or BF16; names with PREFIX; the mask buffers
                                and lm_head.weight too) with config.json
  same A B                      every tensor of B's model.safetensors is A's, byte for byte (A's F16: widened)
  torch DIR GEN T N             where torch and transformers are installed: from_pretrained(DIR) gives the numpy
                                forward's logits to 1e-4 and its greedy continuation is GEN's bytes (else SKIP)
  bad DIR                       hostile variants of DIR/model.safetensors as DIR/bad_NAME.safetensors
Prints PASS:/FAIL: lines (tests/checks.sh's form)."""
import json, os, re, struct, sys
import numpy as np

failed = 0


def check(ok, name, why=""):
    global failed
    print(("PASS: " if ok else "FAIL: ") + name + ("" if ok else f" ({why})"))
    failed += 0 if ok else 1


def read_st(path):
    """(header dict, data bytes) of a safetensors file, parsed here."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def tensors(path):
    """name -> float64 array (F32, F16, BF16)."""
    head, data = read_st(path)
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        buf = data[b:e]
        if v["dtype"] == "F32":
            a = np.frombuffer(buf, "<f4")
        elif v["dtype"] == "F16":
            a = np.frombuffer(buf, "<f2")
        else:
            a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view("<f4")
        out[k] = a.astype(np.float64).reshape(v["shape"])
    return out


def hf_names(L):
    names = ["transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.ln_f.bias"]
    for l in range(L):
        for s in ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                  "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                  "mlp.c_proj.weight", "mlp.c_proj.bias"]:
            names.append(f"transformer.h.{l}.{s}")
    return names


def hf_shapes(L, C, V, P):
    """Hugging Face GPT-2's shapes: Conv1D weights [in, out]."""
    sh = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [P, C], "transformer.ln_f.weight": [C],
          "transformer.ln_f.bias": [C]}
    per = {"ln_1.weight": [C], "ln_1.bias": [C], "attn.c_attn.weight": [C, 3 * C], "attn.c_attn.bias": [3 * C],
           "attn.c_proj.weight": [C, C], "attn.c_proj.bias": [C], "ln_2.weight": [C], "ln_2.bias": [C],
           "mlp.c_fc.weight": [C, 4 * C], "mlp.c_fc.bias": [4 * C], "mlp.c_proj.weight": [4 * C, C],
           "mlp.c_proj.bias": [C]}
    for l in range(L):
        for k, v in per.items():
            sh[f"transformer.h.{l}.{k}"] = v
    return sh


def forward(W, H, ids):
    """GPT-2's forward (Hugging Face names, float64): ids (B, T) -> logits (B, T, V)."""
    def ln(x, w, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-5) * w + b
    g = lambda n: W["transformer." + n]
    B, T = ids.shape
    x = g("wte.weight")[ids] + g("wpe.weight")[:T]
    C = x.shape[-1]
    D = C // H
    L = sum(1 for k in W if k.endswith(".ln_1.weight"))
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(L):
        p = f"h.{l}."
        h = ln(x, g(p + "ln_1.weight"), g(p + "ln_1.bias"))
        qkv = h @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")
        q, k, v = [a.reshape(B, T, H, D).transpose(0, 2, 1, 3) for a in np.split(qkv, 3, axis=-1)]
        att = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        h = ln(x, g(p + "ln_2.weight"), g(p + "ln_2.bias"))
        h = h @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias")
        h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
        x = x + h @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    x = ln(x, g("ln_f.weight"), g("ln_f.bias"))
    return x @ g("wte.weight").T


def cmd_export(d, log, val, T, B):
    T, B = int(T), int(B)
    cfg = json.load(open(os.path.join(d, "config.json")))
    L, C, H, V, P = cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["vocab_size"], cfg["n_positions"]
    check(cfg["architectures"] == ["GPT2LMHeadModel"] and cfg["model_type"] == "gpt2" and
          cfg["activation_function"] == "gelu_new" and cfg["layer_norm_epsilon"] == 1e-5 and
          cfg["tie_word_embeddings"] is True, "export: config.json is GPT2LMHeadModel's (gelu_new, eps 1e-5, tied)",
          str(cfg))
    head, _ = read_st(os.path.join(d, "model.safetensors"))
    names = sorted(k for k in head if k != "__metadata__")
    check(names == sorted(hf_names(L)), "export: tensor names are exactly Hugging Face GPT-2's (no lm_head, no buffers)",
          f"extra {set(names) - set(hf_names(L))}, missing {set(hf_names(L)) - set(names)}")
    want = hf_shapes(L, C, V, P)
    bad = [k for k in names if head[k]["shape"] != want.get(k) or head[k]["dtype"] != "F32"]
    check(not bad, "export: shapes (Conv1D [in, out], wte's real rows only) and dtype F32 are Hugging Face's",
          ", ".join(f"{k} {head[k]['shape']} {head[k]['dtype']}" for k in bad[:3]))
    try:
        from safetensors.numpy import load_file
        lib = load_file(os.path.join(d, "model.safetensors"))
        check(sorted(lib) == names and all(lib[k].dtype == np.float32 for k in lib),
              "export: the safetensors package reads the file")
    except ImportError:
        print("SKIP: export read by the safetensors package (not installed)")
    W = tensors(os.path.join(d, "model.safetensors"))
    raw = open(val, "rb").read()
    hdr = np.frombuffer(raw[:1024], "<i4")
    toks = np.frombuffer(raw[1024:], "<u2" if hdr[1] == 1 else "<u4")[:hdr[2]].astype(np.int64)
    rows = np.stack([toks[i * T:i * T + T + 1] for i in range(B)])
    logits = forward(W, H, rows[:, :T])
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    loss = float((lse - np.take_along_axis(logits, rows[:, 1:, None], -1)[..., 0]).mean())
    ours = [json.loads(line)["val_loss"] for line in open(log) if '"val_loss"' in line][-1]
    check(abs(loss - ours) < 1e-5, f"export: numpy GPT-2 forward on the exported file gives our loss ({ours:.6f})",
          f"numpy {loss:.7f}, ours {ours:.6f}")


def load_model(d):
    """(weights under transformers' names, n_head, V) of the Hugging Face directory d."""
    W = {k if k.startswith("transformer.") else "transformer." + k: v
         for k, v in tensors(os.path.join(d, "model.safetensors")).items()}
    return W, json.load(open(os.path.join(d, "config.json")))["n_head"], W["transformer.wte.weight"].shape[0]


def cmd_greedy(d, T, N, out):
    T, N = int(T), int(N)
    W, H, V = load_model(d)
    ctx = [V - 1]
    text = b""
    for _ in range(N):
        nxt = int(np.argmax(forward(W, H, np.array([ctx[-T:]]))[0, -1]))
        text += bytes([nxt]) if nxt < 256 else f"<{nxt}>".encode()
        ctx.append(nxt)
    open(out, "wb").write(text)


def cmd_topk(d, T, K, gen):
    T, K = int(T), int(K)
    W, H, V = load_model(d)
    ids = [int(m.group(1)) if m.group(1) else m.group(2)[0] for m in re.finditer(rb"<(\d+)>|(.)", open(gen, "rb").read(), re.S)]
    ctx, ranks = [V - 1], []
    for t in ids:
        logits = forward(W, H, np.array([ctx[-T:]]))[0, -1]
        ranks.append(int((logits > logits[t]).sum()))  # how many are more likely
        ctx.append(t)
    check(len(ids) > 0 and max(ranks) < K and max(ranks) > 0,
          f"--top-k {K}: every token drawn is among the numpy forward's {K} most likely, not always the first",
          f"ranks {ranks}")


def write_st(path, arrays, dtype, extra_header=None):
    """arrays: name -> float32 array, written as dtype (F32, F16 or BF16)."""
    head, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for k, a in arrays.items():
        a = np.ascontiguousarray(a, np.float32)
        if dtype == "F16":
            b = a.astype("<f2").tobytes()
        elif dtype == "BF16":
            b = (a.view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            b = a.astype("<f4").tobytes()
        head[k] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    head.update(extra_header or {})
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def cmd_make(d, dtype, prefix, L, C, H, V, P):
    L, C, H, V, P = map(int, (L, C, H, V, P))
    rng = np.random.default_rng(7)
    os.makedirs(d, exist_ok=True)
    arrays = {}
    for k, shape in hf_shapes(L, C, V, P).items():
        arrays[prefix + k[len("transformer."):]] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    for l in range(L):  # the attention's mask buffers, as transformers' older files have them
        arrays[f"{prefix}h.{l}.attn.bias"] = np.tril(np.ones((P, P), np.float32))[None, None]
    arrays["lm_head.weight"] = arrays[prefix + "wte.weight"]
    write_st(os.path.join(d, "model.safetensors"), arrays, dtype)
    json.dump({"model_type": "gpt2", "n_layer": L, "n_embd": C, "n_head": H, "vocab_size": V, "n_positions": P,
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}, open(os.path.join(d, "config.json"), "w"))


def cmd_same(a, b):
    ha, da = read_st(os.path.join(a, "model.safetensors"))
    hb, db = read_st(os.path.join(b, "model.safetensors"))
    wa = tensors(os.path.join(a, "model.safetensors"))
    bad = []
    for k, v in hb.items():
        if k == "__metadata__":
            continue
        src = k if k in ha else k[len("transformer."):]
        if src not in ha:
            bad.append(f"{k} not in the input")
        elif ha[src]["dtype"] == v["dtype"]:
            if da[slice(*ha[src]["data_offsets"])] != db[slice(*v["data_offsets"])]:
                bad.append(f"{k} bytes differ")
        elif not np.array_equal(np.frombuffer(db[slice(*v["data_offsets"])], "<f4").reshape(v["shape"]), wa[src]):
            bad.append(f"{k} values differ")
    n_in = sum(1 for k in ha if k != "__metadata__" and not k.endswith((".attn.bias")) and k != "lm_head.weight")
    check(not bad and n_in == len(hb) - 1, f"round trip {os.path.basename(a)} -> {os.path.basename(b)}: every tensor "
          f"bit for bit ({ha[next(iter(k for k in ha if k != '__metadata__'))]['dtype']} in)", "; ".join(bad[:3]))


def cmd_torch(d, gen, T, N):
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print(f"SKIP: from_pretrained on the exported directory ({e.name} is not installed)")
        return
    T, N = int(T), int(N)
    model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    W, H, V = load_model(d)
    ids = np.arange(T).reshape(1, T) % (V - 1)
    with torch.no_grad():
        theirs = model(torch.tensor(ids)).logits.double().numpy()
    ours = forward(W, H, ids)
    check(np.abs(theirs - ours).max() < 1e-4, "transformers' from_pretrained gives the numpy forward's logits (1e-4)",
          f"max diff {np.abs(theirs - ours).max():.3g}")
    ctx = [V - 1]
    with torch.no_grad():
        for _ in range(N):
            ctx.append(int(model(torch.tensor([ctx[-T:]])).logits[0, -1].argmax()))
    text = b"".join(bytes([t]) if t < 256 else f"<{t}>".encode() for t in ctx[1:])
    check(text == open(gen, "rb").read(), "transformers' greedy continuation is --generate's at temperature 0")


def cmd_bad(d):
    src = os.path.join(d, "model.safetensors")
    raw = open(src, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    def put(name, header_bytes, data_bytes):
        open(os.path.join(d, f"bad_{name}.safetensors"), "wb").write(struct.pack("<Q", len(header_bytes)) + header_bytes + data_bytes)
    def edit(name, fn, data_bytes=data):
        h = json.loads(json.dumps(head))
        fn(h)
        put(name, json.dumps(h).encode(), data_bytes)
    open(os.path.join(d, "bad_huge_header.safetensors"), "wb").write(struct.pack("<Q", 1 << 62) + raw[8:64])
    open(os.path.join(d, "bad_short.safetensors"), "wb").write(raw[:5])
    put("not_json", b"{\"a\": [1, 2", data)
    put("truncated", raw[8:8 + n], data[:-4])
    first = next(k for k in head if k != "__metadata__")
    edit("dtype", lambda h: h[first].update(dtype="I64"))
    edit("overlap", lambda h: h[first].update(data_offsets=[4, h[first]["data_offsets"][1] + 4]))
    edit("numel", lambda h: h[first].update(shape=[h[first]["shape"][0] + 1] + h[first]["shape"][1:]))
    edit("dims", lambda h: h[first].update(shape=[1, 1, 1, 1, 1, 1]))
    edit("huge_dim", lambda h: h[first].update(shape=[1 << 40, 1 << 40]))
    edit("missing", lambda h: h.update({"zz.pad": h.pop("transformer.ln_f.bias")}))
    ln = "transformer.ln_f.bias"
    edit("wrong_shape", lambda h: (h[ln].update(shape=[1, h[ln]["shape"][0]])))


if __name__ == "__main__":
    {"export": cmd_export, "greedy": cmd_greedy, "topk": cmd_topk, "torch": cmd_torch, "make": cmd_make, "same": cmd_same, "bad": cmd_bad}[sys.argv[1]](*sys.argv[2:])
    sys.exit(1 if failed else 0)
