#!/usr/bin/python3
"""Generate the golden reference files in tests/golden/ for gridformer's C++ GPT-2.

Run with Debian's Python (the pyenv `python3` on PATH has no torch):

    /usr/bin/python3 tools/make_golden.py [--out tests/golden]

Self-contained: a minimal GPT-2 in plain torch (in the spirit of llm.c's
train_gpt2.py) whose parameter names and layouts are exactly those of Hugging
Face's GPT2Model (Conv1D weights stored [in, out] and applied as y = x @ W + b),
plus a hand-written safetensors writer (no `safetensors`/`transformers` needed).

Files written (all safetensors, see write_safetensors for the format):
  gpt2_tiny.safetensors       model forward/backward + 10 AdamW steps (gelu_new, cosine LR)
  gpt2_tiny_gelu.safetensors  same structure, other config (erf gelu, polynomial LR)
  ops.safetensors             per-op references computed in float64, stored F32
  hf_tiny_{f32,f16,bf16}.safetensors  a tiny GPT2LMHeadModel-style state dict per dtype
  hf_tiny_expected.safetensors        tokens + fp32 logits/loss of the upcast weights
Everything is deterministic (fixed seeds, torch.set_num_threads(2)).
"""
import argparse
import json
import math
import os
import struct
import sys

# Pin the thread pools before torch (and its OpenBLAS, which reads these at load
# time) is imported, so reruns are bit-identical whatever the caller's env says.
os.environ["OMP_NUM_THREADS"] = "2"
os.environ["OPENBLAS_NUM_THREADS"] = "2"

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(2)

# ----------------------------------------------------------------------------
# safetensors writer (by hand)
#
# Layout: u64 little-endian N | N bytes of JSON header (space padded so that
# 8 + N is a multiple of 8) | raw little-endian tensor data.
# header = {name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
#           "__metadata__": {str: str}}; offsets are relative to the start of
# the data section, tensors are contiguous, row-major, with no gaps.
# Tensors are laid out in order of decreasing element size (stable w.r.t.
# insertion order) so every tensor is naturally aligned, as the reference
# safetensors library also does.

DTYPE_SIZE = {"F32": 4, "I32": 4, "F16": 2, "BF16": 2}


def to_bytes(t):
    """Return (dtype string, shape, little-endian bytes) for a torch tensor."""
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.float32:
        return "F32", list(t.shape), t.numpy().astype("<f4").tobytes()
    if t.dtype == torch.int32:
        return "I32", list(t.shape), t.numpy().astype("<i4").tobytes()
    if t.dtype == torch.float16:
        return "F16", list(t.shape), t.numpy().astype("<f2").tobytes()
    if t.dtype == torch.bfloat16:
        # numpy has no bfloat16: reinterpret the raw 16-bit patterns.
        return "BF16", list(t.shape), t.view(torch.int16).numpy().astype("<i2").tobytes()
    raise TypeError(f"unsupported dtype {t.dtype}")


def write_safetensors(path, tensors, metadata):
    """tensors: dict name -> torch tensor (insertion order kept within a dtype size)."""
    items = [(name,) + to_bytes(t) for name, t in tensors.items()]
    order = sorted(range(len(items)), key=lambda i: (-DTYPE_SIZE[items[i][1]], i))
    header, blobs, off = {}, [], 0
    for i in order:
        name, dt, shape, raw = items[i]
        assert len(raw) == DTYPE_SIZE[dt] * math.prod(shape)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


# ----------------------------------------------------------------------------
# activations (float64-safe; the model uses them in float32)

def gelu_erf(x):
    # exact GELU ("gelu" in HF): 0.5 x (1 + erf(x / sqrt(2)))
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_new(x):
    # tanh approximation ("gelu_new" in HF, GPT-2's original):
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def fast_gelu(x):
    # sigmoid approximation ("quick_gelu"): x * sigmoid(1.702 x)
    return x * torch.sigmoid(1.702 * x)


ACTIVATIONS = {"gelu": gelu_erf, "gelu_new": gelu_new, "fast_gelu": fast_gelu}

# ----------------------------------------------------------------------------
# minimal GPT-2 with Hugging Face names/layouts


class Conv1D(nn.Module):
    """HF Conv1D: weight [in, out], y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg["n_head"]
        self.c_attn = Conv1D(cfg["n_embd"], 3 * cfg["n_embd"])
        self.c_proj = Conv1D(cfg["n_embd"], cfg["n_embd"])

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)        # each [B, T, C]; head h = cols h*D:(h+1)*D
        q = q.view(B, T, H, D).transpose(1, 2)           # [B, H, T, D]
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(cfg["n_embd"], 4 * cfg["n_embd"])
        self.c_proj = Conv1D(4 * cfg["n_embd"], cfg["n_embd"])
        self.act = ACTIVATIONS[cfg["activation"]]

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        eps = cfg["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(cfg["n_embd"], eps=eps)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg["n_embd"], eps=eps)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT2(nn.Module):
    """named_parameters() yields exactly HF GPT2Model names (wte.weight, h.0.ln_1.weight, ...)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.wpe = nn.Embedding(cfg["n_positions"], cfg["n_embd"])
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(cfg["n_embd"], eps=cfg["layer_norm_epsilon"])

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))[None]
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.t()                 # tied LM head
        loss = None
        if targets is not None:
            # mean cross-entropy over all B*T positions
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def init_weights(model, gen):
    """Random init with nonzero biases/LN params so every term of the backward is exercised.

    In named_parameters() order: LN weights 1 + N(0, 0.1); LN biases N(0, 0.02);
    wpe N(0, 0.01); all other weights and biases N(0, 0.02).
    """
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if ".ln_" in "." + name:   # h.{i}.ln_1, h.{i}.ln_2, ln_f
                if name.endswith("weight"):
                    p.copy_(1.0 + 0.1 * noise)
                else:
                    p.copy_(0.02 * noise)
            elif name == "wpe.weight":
                p.copy_(0.01 * noise)
            else:
                p.copy_(0.02 * noise)


# ----------------------------------------------------------------------------
# LR schedules (s = 1-based optimizer step)

def lr_at(s, hp):
    lr_max, lr_end, warm, total = hp["learning_rate"], hp["lr_end"], hp["warmup_steps"], hp["total_steps"]
    if s <= warm:
        return lr_max * s / warm
    progress = (s - warm) / (total - warm)
    if hp["lr_schedule"] == "cosine":
        return lr_end + 0.5 * (lr_max - lr_end) * (1.0 + math.cos(math.pi * progress))
    if hp["lr_schedule"] == "polynomial":          # power 1 (linear decay)
        return (lr_max - lr_end) * (1.0 - progress) ** hp["lr_power"] + lr_end
    raise ValueError(hp["lr_schedule"])


# ----------------------------------------------------------------------------
# gradient clipping

def clip_grad_norm_exact(params, max_norm):
    """torch.nn.utils.clip_grad_norm_ (torch 1.13, norm_type 2) with an accurate norm.

    Same formula as torch: norm = global L2 norm of all grads, then every grad is
    multiplied by min(1, max_norm / (norm + 1e-6)). The only difference is that
    the squares are accumulated in float64: torch 1.13's float32 CPU norm kernel
    uses a plain float32 accumulator and is off by ~3e-4 relative on the
    3.2M-element wte gradient here (pytorch/pytorch#68326, #169237), which
    would make the stored grad norms a poor reference.
    """
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.sqrt(sum(torch.sum(g.detach().double() ** 2) for g in grads))
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0).to(torch.float32)
    for g in grads:
        g.detach().mul_(coef)
    return norm.to(torch.float32)


def golden_adamw(model, hp):
    """The goldens' optimizer: torch's AdamW (foreach=False) with hp's betas and eps, weight decay on the 2-D
    tensors only (group 0) and none on the rest (group 1), in parameters() order. Returns (opt, parameters)."""
    params = list(model.parameters())
    groups = [dict(params=[p for p in params if p.dim() >= 2], weight_decay=hp["weight_decay"]),
              dict(params=[p for p in params if p.dim() < 2], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=hp["learning_rate"], betas=(hp["beta1"], hp["beta2"]), eps=hp["adam_eps"],
                            foreach=False)
    return opt, params


def golden_step(opt, params, s, hp):
    """Optimizer step s (1-based) on the gradients in place: clip_grad_norm_exact to hp["max_norm"], the lr of
    lr_at(s, hp) on every group, opt.step(). Returns (pre-clip norm, lr)."""
    norm = clip_grad_norm_exact(params, hp["max_norm"])
    lr = lr_at(s, hp)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()
    return norm, lr


def f64_grad_error(model, inputs, targets):
    """Max |grad_f32 - grad_f64| / max|grad_f64| per parameter at the current weights (diagnostic)."""
    import copy
    m64 = copy.deepcopy(model).double()
    _, loss64 = m64(inputs, targets)
    loss64.backward()
    worst = 0.0
    for (name, p), p64 in zip(model.named_parameters(), m64.parameters()):
        worst = max(worst, ((p.grad.double() - p64.grad).abs().max() / p64.grad.abs().max()).item())
    return loss64.item(), worst


# ----------------------------------------------------------------------------
# model golden files

def make_model_golden(path, cfg, hp, seed):
    gen = torch.Generator().manual_seed(seed)
    model = GPT2(cfg)
    init_weights(model, gen)
    B, T, V = hp["B"], hp["T"], cfg["vocab_size"]
    tokens = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    inputs, targets = tokens[:, :T], tokens[:, 1:]

    out = {}
    for name, p in model.named_parameters():
        out[f"weights.{name}"] = p.detach().clone()          # initial weights
    out["tokens"] = tokens.to(torch.int32)                     # [B, T+1]

    decay = [p for p in model.parameters() if p.dim() >= 2]      # wte, wpe, 4 matrices / layer
    no_decay = [p for p in model.parameters() if p.dim() < 2]    # biases, LN weights/biases
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": hp["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=hp["learning_rate"], betas=(hp["beta1"], hp["beta2"]), eps=hp["adam_eps"],
        foreach=False)
    params = list(model.parameters())

    lrs, losses, norms = [], [], []
    for s in range(1, hp["total_steps"] + 1):
        opt.zero_grad(set_to_none=True)
        logits, loss = model(inputs, targets)
        loss.backward()
        if s == 1:
            # forward/backward at the initial weights (grads are pre-clip)
            out["logits"] = logits.detach().clone()          # [B, T, V]
            out["loss"] = loss.detach().reshape(1).clone()   # [1]
            for name, p in model.named_parameters():
                out[f"grads.{name}"] = p.grad.detach().clone()
            loss64, gerr = f64_grad_error(model, inputs, targets)
            print(f"  float64 cross-check at init: loss64 {loss64:.9f} (f32 {loss.item():.9f}), "
                  f"max grad err / max|grad| = {gerr:.2e}")
        torch_norm = torch.stack([torch.norm(p.grad) for p in params]).norm()   # what clip_grad_norm_ sees
        norm = clip_grad_norm_exact(params, hp["max_norm"])                      # returns pre-clip norm
        lr = lr_at(s, hp)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        lrs.append(lr)
        losses.append(loss.item())
        norms.append(norm.item())
        print(f"  step {s:2d}  lr {lr:.6e}  loss {loss.item():.6f}  grad_norm {norm.item():.6f}"
              f"  (torch.norm f32: {torch_norm.item():.6f})  {'CLIPPED' if norm.item() > hp['max_norm'] else ''}")
    n_clipped = sum(n > hp["max_norm"] for n in norms)
    assert 0 < n_clipped < len(norms), "max_norm should clip on some steps but not all"
    assert all(abs(n / hp["max_norm"] - 1) > 1e-3 for n in norms), "a norm is too close to max_norm"

    out["train.lr"] = torch.tensor(lrs, dtype=torch.float32)            # lr used at step s=1..N
    out["train.losses"] = torch.tensor(losses, dtype=torch.float32)     # loss before update s
    out["train.grad_norms"] = torch.tensor(norms, dtype=torch.float32)  # pre-clip global L2 norm
    sd = dict(model.named_parameters())
    for name in ("h.1.mlp.c_fc.weight", "wpe.weight", "ln_f.weight"):  # spot checks after N steps (wte omitted: 12.9 MB)
        out[f"train.final.{name}"] = sd[name].detach().clone()

    meta = {k: str(v) for k, v in cfg.items()}
    meta.update({k: str(v) for k, v in hp.items()})
    meta.update({
        "seed": str(seed),
        "format": "gridformer golden v1",
        "generator": "tools/make_golden.py",
        "torch_version": torch.__version__,
        "compute_dtype": "float32",
        "inputs": "tokens[:, :T]",
        "targets": "tokens[:, 1:]",
        "loss": "mean cross-entropy over all B*T positions; logits = ln_f(x) @ wte^T (tied)",
        "attention": "causal softmax, scale 1/sqrt(head_dim), q|k|v = split(c_attn(x), n_embd), heads consecutive",
        "weight_layout": "HF Conv1D: weight [in, out], y = x @ W + b",
        "init": "LN weight 1+N(0,0.1), LN bias N(0,0.02), wpe N(0,0.01), other weights and biases N(0,0.02)",
        "optimizer": "torch.optim.AdamW (torch 1.13, foreach=False): p *= 1 - lr*wd; m = b1*m + (1-b1)*g; "
                     "v = b2*v + (1-b2)*g*g; p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)",
        "weight_decay_applies_to": "2-D tensors only (wte, wpe, c_attn/c_proj/c_fc/mlp.c_proj weights); 0 for biases and LN",
        "grad_clip": "as torch.nn.utils.clip_grad_norm_: norm = global L2 over all grads (wte grad includes the tied head), "
                     "accumulated in float64 (torch 1.13's f32 CPU norm is inaccurate); g *= min(1, max_norm / (norm + 1e-6)) "
                     "(applied always)",
        "lr_formula": ("s<=warmup: lr*s/warmup; else p=(s-warmup)/(total-warmup), "
                       + ("lr_end + 0.5*(lr-lr_end)*(1+cos(pi*p))" if hp["lr_schedule"] == "cosine"
                          else "(lr-lr_end)*(1-p)^power + lr_end")),
        "train_steps_description": "train.lr[s-1] = lr at optimizer step s; train.losses[s-1] = loss before update s "
                                   "(losses[0] == loss); train.grad_norms = pre-clip norm; "
                                   "train.final.* = weights after all steps",
        "num_clipped_steps": str(n_clipped),
    })
    write_safetensors(path, out, meta)


# ----------------------------------------------------------------------------
# per-op references (float64 compute; inputs generated in float32)

def make_ops_golden(path, seed=1234):
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0):
        # float32 sample: this exact value is what the file stores and the reference uses
        return (scale * torch.randn(*shape, generator=gen)).to(torch.float32)

    def d(t):  # float64 leaf that requires grad
        return t.to(torch.float64).requires_grad_(True)

    out = {}

    # layernorm over the last dim: y = (x - mean) / sqrt(var + eps) * w + b (biased var)
    x, w, b, dy = randn(5, 7, 33, scale=2.0), 1.0 + randn(33, scale=0.3), randn(33, scale=0.3), randn(5, 7, 33)
    xd, wd, bd = d(x), d(w), d(b)
    mu = xd.mean(-1, keepdim=True)
    var = ((xd - mu) ** 2).mean(-1, keepdim=True)
    y = (xd - mu) / torch.sqrt(var + 1e-5) * wd + bd
    y.backward(dy.double())
    out.update({"layernorm.x": x, "layernorm.w": w, "layernorm.b": b, "layernorm.dy": dy,
                "layernorm.y": y.detach(), "layernorm.dx": xd.grad, "layernorm.dw": wd.grad,
                "layernorm.db": bd.grad})

    # elementwise activations, x [4, 37] spread over [-6, 6]-ish to hit both tails
    for op, fn in (("gelu", gelu_erf), ("gelu_new", gelu_new), ("fast_gelu", fast_gelu)):
        x, dy = randn(4, 37, scale=2.5), randn(4, 37)
        xd = d(x)
        y = fn(xd)
        y.backward(dy.double())
        out.update({f"{op}.x": x, f"{op}.dy": dy, f"{op}.y": y.detach(), f"{op}.dx": xd.grad})

    # causal attention, q,k,v [B=2, H=3, T=9, D=8]: out = softmax(mask(q k^T / sqrt(D))) v
    q, k, v, dy = randn(2, 3, 9, 8), randn(2, 3, 9, 8), randn(2, 3, 9, 8), randn(2, 3, 9, 8)
    qd, kd, vd = d(q), d(k), d(v)
    att = (qd @ kd.transpose(-2, -1)) / math.sqrt(8)
    att = att.masked_fill(~torch.tril(torch.ones(9, 9, dtype=torch.bool)), float("-inf"))
    o = torch.softmax(att, dim=-1) @ vd
    o.backward(dy.double())
    out.update({"attention.q": q, "attention.k": k, "attention.v": v, "attention.dy": dy,
                "attention.out": o.detach(), "attention.dq": qd.grad, "attention.dk": kd.grad,
                "attention.dv": vd.grad})

    # softmax over the last dim, x [6, 11]
    x, dy = randn(6, 11, scale=3.0), randn(6, 11)
    xd = d(x)
    y = torch.softmax(xd, dim=-1)
    y.backward(dy.double())
    out.update({"softmax.x": x, "softmax.dy": dy, "softmax.y": y.detach(), "softmax.dx": xd.grad})

    # cross entropy: logits [7, 300], targets [7], loss = mean_i(logsumexp(l_i) - l_i[t_i]), upstream 1
    logits = randn(7, 300, scale=3.0)
    tgt = torch.randint(0, 300, (7,), generator=gen)
    ld = d(logits)
    loss = F.cross_entropy(ld, tgt)
    loss.backward()
    out.update({"cross_entropy.logits": logits, "cross_entropy.targets": tgt.to(torch.int32),
                "cross_entropy.loss": loss.detach().reshape(1), "cross_entropy.dlogits": ld.grad})

    # linear: y = x @ W + b, x [6, 10], W [10, 12] (HF Conv1D layout), b [12]
    x, W, b, dy = randn(6, 10), randn(10, 12), randn(12), randn(6, 12)
    xd, Wd, bd = d(x), d(W), d(b)
    y = xd @ Wd + bd
    y.backward(dy.double())
    out.update({"linear.x": x, "linear.W": W, "linear.b": b, "linear.dy": dy, "linear.y": y.detach(),
                "linear.dx": xd.grad, "linear.dW": Wd.grad, "linear.db": bd.grad})

    # sanity: the hand-written formulas agree with torch's own ops
    xt = out["gelu.x"].double()
    assert torch.allclose(gelu_erf(xt), F.gelu(xt), atol=1e-14)
    xt = out["gelu_new.x"].double()
    assert torch.allclose(gelu_new(xt), F.gelu(xt, approximate="tanh"), atol=1e-14)
    ln = F.layer_norm(out["layernorm.x"].double(), (33,), out["layernorm.w"].double(),
                      out["layernorm.b"].double(), 1e-5)
    assert torch.allclose(ln, out["layernorm.y"].double(), atol=1e-12)

    out = {k: (v.to(torch.float32) if v.dtype == torch.float64 else v) for k, v in out.items()}
    meta = {
        "format": "gridformer golden ops v1",
        "generator": "tools/make_golden.py",
        "seed": str(seed),
        "torch_version": torch.__version__,
        "compute_dtype": "float64 (inputs generated as float32 and upcast exactly; outputs rounded to F32)",
        "naming": "<op>.<name>; <op>.dy = random upstream gradient, d* = gradient w.r.t. that input",
        "layernorm": "last dim, eps 1e-5, biased variance: y = (x-mean)/sqrt(var+eps)*w + b",
        "gelu": "0.5*x*(1+erf(x/sqrt(2)))",
        "gelu_new": "0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))",
        "fast_gelu": "x*sigmoid(1.702*x)",
        "attention": "[B,H,T,D]=[2,3,9,8], causal (key j <= query i), scale 1/sqrt(D), out = softmax(q k^T*scale) v",
        "softmax": "over last dim",
        "cross_entropy": "loss = mean over rows of logsumexp(logits) - logits[target]; dlogits for upstream 1",
        "linear": "y = x @ W + b with W [in, out]",
    }
    write_safetensors(path, out, meta)


# ----------------------------------------------------------------------------
# Hugging Face style checkpoints

def make_hf_golden(outdir, seed=4242):
    cfg = dict(n_layer=2, n_embd=32, n_head=2, vocab_size=300, n_positions=32,
               activation="gelu_new", layer_norm_epsilon=1e-5)
    gen = torch.Generator().manual_seed(seed)
    model = GPT2(cfg)
    init_weights(model, gen)
    tokens = torch.randint(0, cfg["vocab_size"], (1, 17), generator=gen)
    P = cfg["n_positions"]

    base_meta = {"format": "pt",    # what HF's save_pretrained writes
                 "gridformer_note": "tiny GPT2LMHeadModel state dict written by tools/make_golden.py",
                 **{k: str(v) for k, v in cfg.items()}}
    expected = {"tokens": tokens.to(torch.int32)}      # [1, 17]; inputs [:, :16], targets [:, 1:]
    for tag, dt in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
        sd = {}
        for name, p in model.named_parameters():
            sd[f"transformer.{name}"] = p.detach().to(dt)       # round-to-nearest-even casts
            if name.endswith("ln_1.bias"):
                # HF GPT2Attention buffer (registered right after ln_1 in state-dict order):
                # causal mask tril(ones(P, P)) viewed [1, 1, P, P]; always stored F32 here
                i = name.split(".")[1]
                sd[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P)
        sd["lm_head.weight"] = model.wte.weight.detach().to(dt)   # tied: same values as wte
        write_safetensors(os.path.join(outdir, f"hf_tiny_{tag}.safetensors"), sd,
                          {**base_meta, "dtype": tag})

        # fp32 forward of the model whose weights were upcast from this dtype
        ref = GPT2(cfg)
        with torch.no_grad():
            for name, p in ref.named_parameters():
                p.copy_(sd[f"transformer.{name}"].to(torch.float32))
            logits, loss = ref(tokens[:, :16], tokens[:, 1:])
        expected[f"logits_{tag}"] = logits                 # [1, 16, 300] F32
        expected[f"loss_{tag}"] = loss.reshape(1)         # [1] F32
        print(f"  hf_tiny {tag}: loss {loss.item():.7f}")

    # check torch's bf16 cast is RNE on the upper 16 bits
    w = model.wte.weight.detach().contiguous()
    u = w.numpy().view(np.uint32).astype(np.uint64)
    rne = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    assert np.array_equal(rne, w.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))

    write_safetensors(os.path.join(outdir, "hf_tiny_expected.safetensors"), expected, {
        **base_meta, "format": "gridformer golden v1",
        "description": "tokens [1,17] (inputs tokens[:, :16], targets tokens[:, 1:]); logits_<dt>/loss_<dt> = "
                       "float32 forward of hf_tiny_<dt> weights upcast to float32; loss = mean CE"})


# ----------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)

    common_hp = dict(learning_rate=1e-3, lr_end=1e-4, warmup_steps=3, total_steps=10,
                     beta1=0.9, beta2=0.95, adam_eps=1e-8, weight_decay=0.1)

    print("gpt2_tiny (gelu_new, cosine)")
    cfg = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=50257, n_positions=64,
               activation="gelu_new", layer_norm_epsilon=1e-5)
    hp = dict(B=2, T=32, **common_hp, lr_schedule="cosine", max_norm=MAX_NORM_TINY)
    make_model_golden(os.path.join(out, "gpt2_tiny.safetensors"), cfg, hp, seed=1337)

    print("gpt2_tiny_gelu (erf gelu, polynomial power 1)")
    cfg = dict(n_layer=3, n_embd=48, n_head=3, vocab_size=1000, n_positions=48,
               activation="gelu", layer_norm_epsilon=1e-5)
    hp = dict(B=3, T=16, **common_hp, lr_schedule="polynomial", lr_power=1.0, max_norm=MAX_NORM_GELU)
    make_model_golden(os.path.join(out, "gpt2_tiny_gelu.safetensors"), cfg, hp, seed=2024)

    print("ops")
    make_ops_golden(os.path.join(out, "ops.safetensors"))
    print("hf_tiny")
    make_hf_golden(out)


# max_norm values picked after looking at the printed pre-clip norms so that
# clipping is active on some steps but not all (asserted >= 1 step above).
MAX_NORM_TINY = 1.6
MAX_NORM_GELU = 1.45

if __name__ == "__main__":
    main()
