#!/usr/bin/env python3
"""gpt_reference.py: a PyTorch GPT-2 that computes exactly what the C trainer
computes (same model, loss, gradient clipping and AdamW), used to write the
test fixtures and to move weights between the C trainer, llm.c and PyTorch.

Usage:
  python3 dev/reference/gpt_reference.py --out tests/fixtures
      writes tiny_model.bin and tiny_state.bin (below) with torch.manual_seed(42)
  python3 dev/reference/gpt_reference.py --load MODEL.bin --eval-tokens TOKENS.u16 [--seq-len T] [--num-seqs N]
      prints the mean loss of an llm.c model file on the first N*T+1 tokens of a
      token file (N sequences of T tokens, each target the next token)

Model: wte (Vp, C), wpe (maxT, C); L pre-LayerNorm blocks
  x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)); logits = ln_f(x) @ wte^T (Vp, tied).
LayerNorm eps 1e-5. attn: qkv = Linear(C, 3C) with q, k, v in that order along
3C and head h on channels [h*hs, (h+1)*hs); causal softmax(q k^T / sqrt(hs)) v;
Linear(C, C). mlp: Linear(C, 4C), GELU (tanh approximation), Linear(4C, C).
Every Linear has a bias; weights are (out_features, in_features).
Vp = V rounded up to a multiple of 128; loss = mean cross-entropy over all
B*T positions of the first V logits (padded wte rows get zero gradient).

llm.c model file (little-endian): int32 header[256] = {20240326, 3 (fp32), maxT,
V, L, NH, C, Vp, 0...}, then float32 tensors, each with all layers stacked:
  wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
  attprojw (L,C,C) attprojb (L,C) ln2w (L,C) ln2b (L,C) fcw (L,4C,C) fcb (L,4C)
  fcprojw (L,C,4C) fcprojb (L,C) lnfw (C) lnfb (C)
Padded rows [V, Vp) of wte are zero.

Token file: raw uint16 tokens, or an llm.c token file (int32 header[256] with
header[0] = 20240520, header[2] = number of tokens, then uint16 tokens).

Fixtures (config V=97, Vp=128, maxT=32, L=2, NH=4, C=32; batch B=2, T=16):
  tiny_model.bin: the initial weights, llm.c model file format. Every tensor is
    random and nonzero: weights and biases normal(0, 0.02), LayerNorm weights
    1 + normal(0, 0.1), LayerNorm biases normal(0, 0.02); padded wte rows zero.
  tiny_state.bin, little-endian:
    int32 header[256]: [0]=20261202 magic, [1]=1 version, [2]=B, [3]=T,
      [4]=nsteps (10), [5]=V, [6..7]=0, [8..13] = float32 bit patterns of
      lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0,
      rest 0
    int32   x[B*T]          inputs, row-major (B,T), in [0, V)
    int32   y[B*T]          targets, row-major (B,T), in [0, V)
    float32 logits[B*T*V]   initial weights' logits, only the V real columns, (B,T,V)
    float32 loss            initial weights' loss
    float32 grads[...]      d loss / d initial weights (before clipping), same
                            tensors, order and shapes as the model file
                            (wte with Vp rows, padded rows zero)
    float32 losses[nsteps]  losses[i] = loss of the forward pass before
                            optimizer step i, every step on the same (x, y)
  Each step: gradient clipping as torch.nn.utils.clip_grad_norm_(params,
  grad_clip) (total L2 norm of all gradients; scale by grad_clip/(norm+1e-6)
  when that is < 1), then torch.optim.AdamW(foreach=False, fused=False), constant
  lr, weight decay only on the 2-D tensors (wte, wpe, the four matmul weights).
  The fixture is computed in float64 from the float32 initial weights and stored
  as float32, so it carries no float32 rounding of its own.
"""
import argparse
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MODEL_MAGIC, MODEL_VERSION_FP32 = 20240326, 3
TOKENS_MAGIC = 20240520
STATE_MAGIC, STATE_VERSION = 20261202, 1
HEADER_INTS = 256
VOCAB_PAD_MULTIPLE = 128
TINY = dict(maxT=32, V=97, L=2, NH=4, C=32)
TINY_B, TINY_T, TINY_STEPS = 2, 16, 10
TINY_HYPER = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0)
# Per-layer parameters in model-file order (after wte, wpe; before ln_f).
LAYER_FILE_ORDER = ["ln_1.weight", "ln_1.bias", "c_attn.weight", "c_attn.bias",
                    "attn_proj.weight", "attn_proj.bias", "ln_2.weight", "ln_2.bias",
                    "c_fc.weight", "c_fc.bias", "mlp_proj.weight", "mlp_proj.bias"]


def die_usage(msg):
    """A user error (bad flag or file): one line on stderr, exit status 2."""
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attn(self, x):  # x (B,T,C)
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.c_attn(x).split(C, dim=2)  # each (B,T,C)
        q, k, v = (t.view(B, T, self.NH, hs).transpose(1, 2) for t in (q, k, v))  # (B,NH,T,hs)
        att = q @ k.transpose(-2, -1) / math.sqrt(hs)  # (B,NH,T,T)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.attn_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, maxT, V, L, NH, C):
        super().__init__()
        self.maxT, self.V, self.L, self.NH, self.C = maxT, V, L, NH, C
        self.Vp = -(-V // VOCAB_PAD_MULTIPLE) * VOCAB_PAD_MULTIPLE
        self.wte = nn.Parameter(torch.zeros(self.Vp, C))
        self.wpe = nn.Parameter(torch.zeros(maxT, C))
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, targets=None):  # idx, targets (B,T) int64
        T = idx.shape[1]
        x = self.wte[idx] + self.wpe[:T]  # (B,T,C)
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.T  # (B,T,Vp)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits[..., :self.V].reshape(-1, self.V), targets.reshape(-1))
        return logits, loss

    def file_tensors(self):
        """The model file's tensors in order, each a list of the parameters stacked in it."""
        return ([[self.wte], [self.wpe]]
                + [[block.get_parameter(name) for block in self.h] for name in LAYER_FILE_ORDER]
                + [[self.ln_f.weight], [self.ln_f.bias]])


def flat_float32(groups):
    """Concatenates a list of lists of tensors into one float32 numpy array."""
    return np.concatenate([t.detach().cpu().numpy().astype(np.float32).ravel()
                           for group in groups for t in group])


def save_model(model, path):
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:8] = [MODEL_MAGIC, MODEL_VERSION_FP32, model.maxT, model.V, model.L, model.NH, model.C, model.Vp]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(flat_float32(model.file_tensors()).tobytes())


def load_model(path):
    try:
        raw = open(path, "rb").read()
    except OSError as e:
        die_usage(f"--load {path}: {e.strerror}")
    if len(raw) < 4 * HEADER_INTS:
        die_usage(f"--load {path}: too short for a model header")
    header = np.frombuffer(raw, dtype=np.int32, count=HEADER_INTS)
    if header[0] != MODEL_MAGIC or header[1] != MODEL_VERSION_FP32:
        die_usage(f"--load {path}: not an fp32 llm.c model file (magic {header[0]}, version {header[1]})")
    maxT, V, L, NH, C, Vp = (int(v) for v in header[2:8])
    if min(maxT, V, L, NH, C) < 1 or C % NH != 0:
        die_usage(f"--load {path}: bad config maxT={maxT} V={V} L={L} NH={NH} C={C}")
    model = GPT(maxT, V, L, NH, C)
    if Vp != model.Vp:
        die_usage(f"--load {path}: padded vocab {Vp}, expected {model.Vp} for V={V}")
    values = np.frombuffer(raw, dtype=np.float32, offset=4 * HEADER_INTS)
    want = sum(p.numel() for group in model.file_tensors() for p in group)
    if values.size != want:
        die_usage(f"--load {path}: {values.size} floats after the header, expected {want}")
    offset = 0
    with torch.no_grad():
        for group in model.file_tensors():
            for p in group:
                p.copy_(torch.from_numpy(values[offset:offset + p.numel()].copy()).view_as(p))
                offset += p.numel()
    return model


def read_tokens(path):
    try:
        raw = open(path, "rb").read()
    except OSError as e:
        die_usage(f"--eval-tokens {path}: {e.strerror}")
    if len(raw) >= 4 * HEADER_INTS and np.frombuffer(raw, dtype=np.int32, count=1)[0] == TOKENS_MAGIC:
        count = int(np.frombuffer(raw, dtype=np.int32, count=3)[2])
        return np.frombuffer(raw, dtype=np.uint16, offset=4 * HEADER_INTS, count=count)
    if len(raw) % 2:
        die_usage(f"--eval-tokens {path}: odd size, not a uint16 token file")
    return np.frombuffer(raw, dtype=np.uint16)


def eval_tokens(model, path, T, num_seqs):
    tokens = read_tokens(path)
    num_seqs = min(num_seqs, (len(tokens) - 1) // T)
    if num_seqs < 1:
        die_usage(f"--eval-tokens {path}: {len(tokens)} tokens, need at least --seq-len + 1 = {T + 1}")
    tokens = torch.from_numpy(tokens[:num_seqs * T + 1].astype(np.int64))
    if int(tokens.max()) >= model.V:
        die_usage(f"--eval-tokens {path}: token {int(tokens.max())} is outside the model's vocabulary of {model.V}")
    with torch.no_grad():
        _, loss = model(tokens[:-1].view(num_seqs, T), tokens[1:].view(num_seqs, T))
    print(f"loss {loss.item():.6f} ({num_seqs} sequences of {T} tokens)")


def init_random(model):
    """Nonzero values in every tensor, so that every gradient is exercised."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.02)
        model.wte[model.V:] = 0


def adamw(model, h):
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": h["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                             foreach=False, fused=False)


def write_fixtures(out_dir):
    torch.manual_seed(42)
    model = GPT(**TINY)
    init_random(model)
    x = torch.randint(0, model.V, (TINY_B, TINY_T))
    y = torch.randint(0, model.V, (TINY_B, TINY_T))
    save_model(model, f"{out_dir}/tiny_model.bin")

    model.double()
    h = TINY_HYPER
    optimizer = adamw(model, h)
    losses = []
    for step in range(TINY_STEPS):
        optimizer.zero_grad(set_to_none=True)
        logits, loss = model(x, y)
        loss.backward()
        if step == 0:
            first_logits, first_loss = logits[..., :model.V], loss.item()
            first_grads = flat_float32([[p.grad for p in group] for group in model.file_tensors()])
        losses.append(loss.item())
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), h["grad_clip"])
        print(f"step {step}: loss {loss.item():.6f} grad norm {norm.item():.4f}")
        optimizer.step()

    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:6] = [STATE_MAGIC, STATE_VERSION, TINY_B, TINY_T, TINY_STEPS, model.V]
    header[8:14] = np.array([h[k] for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip")],
                            dtype=np.float32).view(np.int32)
    with open(f"{out_dir}/tiny_state.bin", "wb") as f:
        for part in (header, x.numpy().astype(np.int32), y.numpy().astype(np.int32),
                     flat_float32([[first_logits]]), np.float32([first_loss]), first_grads,
                     np.float32(losses)):
            f.write(part.tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", metavar="DIR", help="write tiny_model.bin and tiny_state.bin into DIR")
    ap.add_argument("--load", metavar="FILE", help="llm.c model file (fp32) to load")
    ap.add_argument("--eval-tokens", metavar="FILE", help="uint16 token file to evaluate --load on")
    ap.add_argument("--seq-len", type=int, help="tokens per sequence for --eval-tokens (default: the model's maxT)")
    ap.add_argument("--num-seqs", type=int, default=4, help="sequences for --eval-tokens (default 4)")
    args = ap.parse_args()
    if args.out:
        write_fixtures(args.out)
    elif args.load and args.eval_tokens:
        model = load_model(args.load)
        T = args.seq_len or model.maxT
        if not 1 <= T <= model.maxT:
            die_usage(f"--seq-len {T}: must be in [1, {model.maxT}]")
        if args.num_seqs < 1:
            die_usage(f"--num-seqs {args.num_seqs}: must be >= 1")
        eval_tokens(model, args.eval_tokens, T, args.num_seqs)
    else:
        die_usage("give --out DIR, or --load FILE with --eval-tokens FILE (see --help)")


if __name__ == "__main__":
    main()
