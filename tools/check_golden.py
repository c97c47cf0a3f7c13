#!/usr/bin/python3
"""Read back and verify the golden files written by tools/make_golden.py.

    /usr/bin/python3 tools/check_golden.py [--dir tests/golden]

Uses only numpy (no torch) and a tiny hand-written safetensors reader, so the
checks are independent of the code that produced the files:
  * header structure: u64 length, JSON, header padded to a multiple of 8,
    known dtypes, data_offsets contiguous from 0 to the end of the file with
    no gaps/overlaps, byte sizes == prod(shape) * itemsize, string metadata;
  * contents: a float64 numpy re-implementation of the GPT-2 forward
    reproduces `logits`/`loss`; losses[0] == loss; the LR schedule and the
    pre-clip grad norm of step 1 are recomputed; per-op outputs and input
    gradients are re-derived analytically; HF files: f16/bf16 are the
    round-to-nearest-even casts of the f32 file, lm_head == wte, attn.bias is
    the causal tril, expected logits match a numpy forward of the upcast weights.
Exits non-zero on the first failure.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

ITEMSIZE = {"F32": 4, "I32": 4, "F16": 2, "BF16": 2}


def read_safetensors(path):
    """Return (tensors: name -> np.ndarray (BF16 upcast to float32), dtypes, metadata)."""
    with open(path, "rb") as f:
        buf = f.read()
    assert len(buf) >= 8, "file too short"
    (n,) = struct.unpack("<Q", buf[:8])
    assert 8 + n <= len(buf), "header length past EOF"
    assert n % 8 == 0, f"header length {n} not a multiple of 8"
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()), "non-string metadata"
    data = buf[8 + n:]
    spans, tensors, dtypes = [], {}, {}
    for name, info in header.items():
        assert set(info) == {"dtype", "shape", "data_offsets"}, (name, info)
        dt, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        assert dt in ITEMSIZE, f"{name}: unknown dtype {dt}"
        assert all(isinstance(s, int) and s >= 0 for s in shape), (name, shape)
        assert e - b == ITEMSIZE[dt] * math.prod(shape), f"{name}: size {e - b} != shape {shape} x {dt}"
        assert b % ITEMSIZE[dt] == 0, f"{name}: misaligned offset {b}"
        spans.append((b, e, name))
        raw = data[b:e]
        if dt == "F32":
            a = np.frombuffer(raw, "<f4")
        elif dt == "I32":
            a = np.frombuffer(raw, "<i4")
        elif dt == "F16":
            a = np.frombuffer(raw, "<f2")
        else:  # BF16: upper 16 bits of an f32
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        tensors[name] = a.reshape(shape)
        dtypes[name] = dt
    spans.sort()
    pos = 0
    for b, e, name in spans:
        assert b == pos, f"{name}: offset {b}, expected {pos} (gap or overlap)"
        pos = e
    assert pos == len(data), f"data section {len(data)} bytes, tensors cover {pos}"
    return tensors, dtypes, meta


def close(name, got, want, rtol, atol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{name}: shape {got.shape} vs {want.shape}"
    err = np.abs(got - want)
    ok = err <= atol + rtol * np.abs(want)
    if not ok.all():
        i = np.unravel_index(np.argmax(err - rtol * np.abs(want)), err.shape)
        raise AssertionError(f"{name}: max err {err.max():.3e} at {i}: got {got[i]} want {want[i]}")
    return err.max()


# ----------------------------------------------------------------------------
# numpy float64 reference math

_erf = np.vectorize(math.erf)


def act(x, kind):
    if kind == "gelu":
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if kind == "gelu_new":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if kind == "fast_gelu":
        return x / (1 + np.exp(-1.702 * x))
    raise ValueError(kind)


def dact(x, kind):
    if kind == "gelu":
        return 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    if kind == "gelu_new":
        c = math.sqrt(2 / math.pi)
        t = np.tanh(c * (x + 0.044715 * x ** 3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
    if kind == "fast_gelu":
        s = 1 / (1 + np.exp(-1.702 * x))
        return s + 1.702 * x * s * (1 - s)
    raise ValueError(kind)


def layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def causal_attention(q, k, v):
    T, D = q.shape[-2], q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(D)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    return softmax(s) @ v


def cross_entropy(logits, targets):
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]
    return (lse - np.take_along_axis(logits, targets[..., None], -1)[..., 0]).mean()


def gpt2_forward(W, cfg, idx, prefix=""):
    """float64 numpy GPT-2 forward, HF names/layouts; returns logits [B, T, V]."""
    g = lambda n: W[prefix + n].astype(np.float64)
    L, C, H = int(cfg["n_layer"]), int(cfg["n_embd"]), int(cfg["n_head"])
    eps = float(cfg.get("layer_norm_epsilon", "1e-5"))
    B, T = idx.shape
    D = C // H
    x = g("wte.weight")[idx] + g("wpe.weight")[:T][None]
    for i in range(L):
        p = f"h.{i}."
        h = layernorm(x, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
        qkv = h @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")
        q, k, v = (qkv[..., j * C:(j + 1) * C].reshape(B, T, H, D).transpose(0, 2, 1, 3) for j in range(3))
        y = causal_attention(q, k, v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        h = layernorm(x, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
        h = act(h @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"), cfg["activation"])
        x = x + h @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    x = layernorm(x, g("ln_f.weight"), g("ln_f.bias"), eps)
    return x @ g("wte.weight").T


def param_names(L):
    names = ["wte.weight", "wpe.weight"]
    for i in range(L):
        for n in ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
            names.append(f"h.{i}.{n}")
    return names + ["ln_f.weight", "ln_f.bias"]


def param_shape(name, V, P, C):
    if name == "wte.weight":
        return [V, C]
    if name == "wpe.weight":
        return [P, C]
    leaf = name.split(".", 2)[-1] if name.startswith("h.") else name
    return {"attn.c_attn.weight": [C, 3 * C], "attn.c_attn.bias": [3 * C],
            "attn.c_proj.weight": [C, C], "mlp.c_fc.weight": [C, 4 * C], "mlp.c_fc.bias": [4 * C],
            "mlp.c_proj.weight": [4 * C, C]}.get(leaf, [C])


# ----------------------------------------------------------------------------

def check_model(path):
    t, dt, m = read_safetensors(path)
    L, C, V, P = (int(m[k]) for k in ("n_layer", "n_embd", "vocab_size", "n_positions"))
    B, T, N = int(m["B"]), int(m["T"]), int(m["total_steps"])
    names = param_names(L)
    want = {f"weights.{n}" for n in names} | {f"grads.{n}" for n in names} | {
        "tokens", "logits", "loss", "train.lr", "train.losses", "train.grad_norms",
        "train.final.h.1.mlp.c_fc.weight", "train.final.wpe.weight", "train.final.ln_f.weight"}
    assert set(t) == want, f"tensor set differs: {set(t) ^ want}"
    for n in names:
        for k in ("weights.", "grads."):
            assert list(t[k + n].shape) == param_shape(n, V, P, C), (k + n, t[k + n].shape)
            assert dt[k + n] == "F32"
    assert dt["tokens"] == "I32" and t["tokens"].shape == (B, T + 1)
    assert t["tokens"].min() >= 0 and t["tokens"].max() < V
    assert t["logits"].shape == (B, T, V) and t["loss"].shape == (1,)
    for k in ("train.lr", "train.losses", "train.grad_norms"):
        assert t[k].shape == (N,), k

    tok = t["tokens"].astype(np.int64)
    W = {n: t[f"weights.{n}"] for n in names}
    logits = gpt2_forward(W, m, tok[:, :T])
    e1 = close("logits vs numpy f64 forward", t["logits"], logits, 1e-4, 2e-5)
    e2 = close("loss vs numpy f64", t["loss"][0], cross_entropy(logits, tok[:, 1:]), 1e-5, 0)
    e3 = close("loss vs CE(stored logits)", t["loss"][0], cross_entropy(t["logits"].astype(np.float64), tok[:, 1:]), 1e-6, 0)
    assert t["train.losses"][0] == t["loss"][0], "train.losses[0] != loss"
    gn = math.sqrt(sum(float((t[f"grads.{n}"].astype(np.float64) ** 2).sum()) for n in names))
    close("grad_norms[0] vs |grads|", t["train.grad_norms"][0], gn, 1e-5, 0)

    lr_max, lr_end = float(m["learning_rate"]), float(m["lr_end"])
    warm, total = int(m["warmup_steps"]), int(m["total_steps"])
    lrs = []
    for s in range(1, N + 1):
        if s <= warm:
            lrs.append(lr_max * s / warm)
        else:
            p = (s - warm) / (total - warm)
            if m["lr_schedule"] == "cosine":
                lrs.append(lr_end + 0.5 * (lr_max - lr_end) * (1 + math.cos(math.pi * p)))
            else:
                assert m["lr_schedule"] == "polynomial" and float(m["lr_power"]) == 1.0
                lrs.append((lr_max - lr_end) * (1 - p) + lr_end)
    close("train.lr", t["train.lr"], lrs, 1e-6, 0)
    n_clip = int((t["train.grad_norms"] > float(m["max_norm"])).sum())
    assert n_clip == int(m["num_clipped_steps"]) and 0 < n_clip < N, n_clip
    assert np.all(np.diff(t["train.losses"]) < 0), "loss did not decrease monotonically on a fixed batch"
    for n in ("h.1.mlp.c_fc.weight", "wpe.weight", "ln_f.weight"):
        assert t[f"train.final.{n}"].shape == t[f"weights.{n}"].shape
        assert not np.array_equal(t[f"train.final.{n}"], t[f"weights.{n}"])
    print(f"  ok: logits err {e1:.2e}, loss err {e2:.2e}/{e3:.2e}, grad_norm[0] {gn:.6f}, "
          f"{n_clip}/{N} steps clipped, losses {t['train.losses'][0]:.5f} -> {t['train.losses'][-1]:.5f}")


def check_ops(path):
    t, dt, m = read_safetensors(path)
    g = lambda n: t[n].astype(np.float64)
    R, A = 2e-6, 1e-6   # stored F32 from a float64 compute: only F32 rounding expected

    x, w, b, dy = g("layernorm.x"), g("layernorm.w"), g("layernorm.b"), g("layernorm.dy")
    assert x.shape == (5, 7, 33) and w.shape == (33,)
    close("layernorm.y", t["layernorm.y"], layernorm(x, w, b), R, A)
    mu = x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xh = (x - mu) * rstd
    dxh = dy * w
    dx = rstd * (dxh - dxh.mean(-1, keepdims=True) - xh * (dxh * xh).mean(-1, keepdims=True))
    close("layernorm.dx", t["layernorm.dx"], dx, R, A)
    close("layernorm.dw", t["layernorm.dw"], (dy * xh).sum((0, 1)), R, A)
    close("layernorm.db", t["layernorm.db"], dy.sum((0, 1)), R, A)

    for op in ("gelu", "gelu_new", "fast_gelu"):
        x, dy = g(f"{op}.x"), g(f"{op}.dy")
        assert x.shape == (4, 37)
        close(f"{op}.y", t[f"{op}.y"], act(x, op), R, A)
        close(f"{op}.dx", t[f"{op}.dx"], dy * dact(x, op), R, A)

    q, k, v, dy = g("attention.q"), g("attention.k"), g("attention.v"), g("attention.dy")
    assert q.shape == (2, 3, 9, 8)
    close("attention.out", t["attention.out"], causal_attention(q, k, v), R, A)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(8)
    P = softmax(np.where(np.tril(np.ones((9, 9), bool)), s, -np.inf))
    dP = dy @ np.swapaxes(v, -1, -2)
    dS = P * (dP - (dP * P).sum(-1, keepdims=True)) / math.sqrt(8)
    close("attention.dv", t["attention.dv"], np.swapaxes(P, -1, -2) @ dy, R, A)
    close("attention.dq", t["attention.dq"], dS @ k, R, A)
    close("attention.dk", t["attention.dk"], np.swapaxes(dS, -1, -2) @ q, R, A)

    x, dy = g("softmax.x"), g("softmax.dy")
    y = softmax(x)
    close("softmax.y", t["softmax.y"], y, R, A)
    close("softmax.dx", t["softmax.dx"], y * (dy - (dy * y).sum(-1, keepdims=True)), R, A)

    lg, tg = g("cross_entropy.logits"), t["cross_entropy.targets"].astype(np.int64)
    assert dt["cross_entropy.targets"] == "I32" and lg.shape == (7, 300) and tg.shape == (7,)
    close("cross_entropy.loss", t["cross_entropy.loss"][0], cross_entropy(lg, tg), R, A)
    d = softmax(lg)
    d[np.arange(7), tg] -= 1
    close("cross_entropy.dlogits", t["cross_entropy.dlogits"], d / 7, R, A)

    x, W, b, dy = g("linear.x"), g("linear.W"), g("linear.b"), g("linear.dy")
    assert x.shape == (6, 10) and W.shape == (10, 12)
    close("linear.y", t["linear.y"], x @ W + b, R, A)
    close("linear.dx", t["linear.dx"], dy @ W.T, R, A)
    close("linear.dW", t["linear.dW"], x.T @ dy, R, A)
    close("linear.db", t["linear.db"], dy.sum(0), R, A)
    assert all(v == "F32" for k, v in dt.items() if k != "cross_entropy.targets")
    print(f"  ok: {len(t)} tensors, all outputs/grads re-derived analytically")


def bf16_rne(a32):
    u = a32.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16).astype(np.uint32).view(np.float32)


def check_hf(d):
    files = {tag: read_safetensors(os.path.join(d, f"hf_tiny_{tag}.safetensors")) for tag in ("f32", "f16", "bf16")}
    t32, _, m = files["f32"]
    L, C, V, P = (int(m[k]) for k in ("n_layer", "n_embd", "vocab_size", "n_positions"))
    names = ["transformer." + n for n in param_names(L)] + \
            [f"transformer.h.{i}.attn.bias" for i in range(L)] + ["lm_head.weight"]
    ex, exdt, _ = read_safetensors(os.path.join(d, "hf_tiny_expected.safetensors"))
    tok = ex["tokens"].astype(np.int64)
    assert exdt["tokens"] == "I32" and tok.shape == (1, 17)
    for tag, (t, dt, mm) in files.items():
        assert set(t) == set(names), f"{tag}: {set(t) ^ set(names)}"
        want_dt = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[tag]
        for n in names:
            if n.endswith(".attn.bias"):
                assert dt[n] == "F32" and t[n].shape == (1, 1, P, P)
                assert np.array_equal(t[n][0, 0], np.tril(np.ones((P, P), np.float32)))
            else:
                assert dt[n] == want_dt, (tag, n, dt[n])
                short = n[len("transformer."):] if n.startswith("transformer.") else "wte.weight"
                assert list(t[n].shape) == param_shape(short, V, P, C), (n, t[n].shape)
        assert np.array_equal(t["lm_head.weight"], t["transformer.wte.weight"]), "lm_head != wte"
        for n in names:
            if n.endswith(".attn.bias"):
                continue
            if tag == "f16":
                assert np.array_equal(t[n], t32[n].astype(np.float16)), f"{n}: f16 is not the RNE cast"
            elif tag == "bf16":
                assert np.array_equal(t[n], bf16_rne(t32[n])), f"{n}: bf16 is not the RNE cast"
        W = {n[len("transformer."):]: t[n].astype(np.float32) for n in names if n.startswith("transformer.")}
        logits = gpt2_forward(W, m, tok[:, :16])
        assert exdt[f"logits_{tag}"] == "F32" and ex[f"logits_{tag}"].shape == (1, 16, V)
        e = close(f"logits_{tag}", ex[f"logits_{tag}"], logits, 1e-4, 2e-5)
        close(f"loss_{tag}", ex[f"loss_{tag}"][0], cross_entropy(logits, tok[:, 1:]), 1e-5, 0)
        print(f"  ok: hf_tiny_{tag}: {len(t)} tensors, logits err {e:.2e}, loss {ex[f'loss_{tag}'][0]:.7f}")
    d16 = np.abs(ex["logits_f16"] - ex["logits_f32"]).max()
    dbf = np.abs(ex["logits_bf16"] - ex["logits_f32"]).max()
    assert 0 < d16 < dbf, "expected f16 logits closer to f32 than bf16 logits"
    print(f"  ok: max |logits - logits_f32|: f16 {d16:.2e}, bf16 {dbf:.2e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
    d = os.path.normpath(ap.parse_args().dir)
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            t, dt, m = read_safetensors(os.path.join(d, f))
            print(f"{f}: {os.path.getsize(os.path.join(d, f))} bytes, {len(t)} tensors, "
                  f"{len(m)} metadata keys, header ok")
    for f in ("gpt2_tiny.safetensors", "gpt2_tiny_gelu.safetensors"):
        print(f"check {f}")
        check_model(os.path.join(d, f))
    print("check ops.safetensors")
    check_ops(os.path.join(d, "ops.safetensors"))
    print("check hf_tiny_*.safetensors")
    check_hf(d)
    print("ALL OK")


if __name__ == "__main__":
    main()
