#!/usr/bin/env python3
"""Golden references for Llama's ops, from PyTorch (Debian's python3-torch), written from the
semantics of Hugging Face transformers' models/llama/modeling_llama.py:

  LlamaRMSNorm          weight * x * rsqrt(mean(x^2, -1) + eps)
  LlamaRotaryEmbedding  inv_freq = 1 / base ** (arange(0, dim, 2).float() / dim)  (float32),
                        freqs = position.float() * inv_freq (float32), emb = cat(freqs, freqs),
                        cos = emb.cos(), sin = emb.sin()  (float32)
  apply_rotary_pos_emb  q * cos + rotate_half(q) * sin,  rotate_half(x) = cat(-x2, x1)
  LlamaMLP's act        silu(gate) * up
  eager attention       repeat_kv (kv head j serves query heads j*n_rep .. j*n_rep+n_rep-1),
                        softmax(q k^T / sqrt(d) + causal mask) v   (grouped-query, 8 heads, 2 kv)

The ops themselves run in float64 on float32-rounded inputs (the cos/sin tables in float32, as
HF computes them), backward by autograd; stored as F32 in tests/golden/llama_ops.safetensors.
RoPE is given in our layout, [batch, seq, heads, head_dim] (HF's [batch, heads, seq, head_dim]
transposed), at theta 1e6 (Mixtral) and 1e4 (Llama 2).

  /usr/bin/python3 tools/make_llama_ops_golden.py [--out tests/golden/llama_ops.safetensors]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import write_safetensors  # noqa: E402


def rand(gen, *shape, scale=1.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).float().double()


def rms_norm(x, w, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_tables(head_dim, theta, positions):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()  # float32, [positions, head_dim]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden",
                                                  "llama_ops.safetensors"))
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(1234)
    out = {}

    # RMSNorm, eps 1e-6 (Llama 2's rms_norm_eps) and 1e-5.
    for eps, tag in [(1e-6, "rmsnorm"), (1e-5, "rmsnorm_eps5")]:
        x = rand(gen, 6, 40, scale=3.0).requires_grad_()
        w = (1.0 + 0.1 * rand(gen, 40)).requires_grad_()
        dy = rand(gen, 6, 40)
        y = rms_norm(x, w, eps)
        y.backward(dy)
        out.update({f"{tag}.x": x, f"{tag}.w": w, f"{tag}.dy": dy, f"{tag}.y": y, f"{tag}.dx": x.grad,
                    f"{tag}.dw": w.grad})

    # RoPE: batch 2, seq 12 starting at position 5 (a prefix already in a cache), 3 heads of 16.
    B, T, H, D, pos0 = 2, 12, 3, 16, 5
    for theta, tag in [(1e6, "rope_theta1e6"), (1e4, "rope_theta1e4")]:
        cos, sin = rope_tables(D, theta, torch.arange(pos0, pos0 + T))
        cos, sin = cos.double()[None, None], sin.double()[None, None]  # [1, 1, T, D]
        x = rand(gen, B, T, H, D).requires_grad_()
        dy = rand(gen, B, T, H, D)
        xh = x.transpose(1, 2)  # HF's [B, H, T, D]
        y = ((xh * cos) + (rotate_half(xh) * sin)).transpose(1, 2)
        y.backward(dy)
        out.update({f"{tag}.x": x, f"{tag}.dy": dy, f"{tag}.y": y, f"{tag}.dx": x.grad})

    # SwiGLU: silu(gate) * up.
    g = rand(gen, 7, 33, scale=3.0).requires_grad_()
    u = rand(gen, 7, 33).requires_grad_()
    dh = rand(gen, 7, 33)
    h = torch.nn.functional.silu(g) * u
    h.backward(dh)
    out.update({"swiglu.g": g, "swiglu.u": u, "swiglu.dh": dh, "swiglu.h": h, "swiglu.dg": g.grad,
                "swiglu.du": u.grad})

    # Grouped-query causal attention, packed as gridformer packs it: [B, T, (H + 2 Hkv) D] = q | k | v.
    B, T, H, G, D = 2, 7, 8, 2, 4
    q, k, v = rand(gen, B, T, H, D), rand(gen, B, T, G, D), rand(gen, B, T, G, D)
    qkv = torch.cat([q.reshape(B, T, H * D), k.reshape(B, T, G * D), v.reshape(B, T, G * D)], -1).requires_grad_()
    dy = rand(gen, B, T, H * D)
    qh = qkv[..., :H * D].reshape(B, T, H, D).transpose(1, 2)
    kh = qkv[..., H * D:(H + G) * D].reshape(B, T, G, D).transpose(1, 2)
    vh = qkv[..., (H + G) * D:].reshape(B, T, G, D).transpose(1, 2)

    def repeat_kv(x, n_rep):  # modeling_llama.py
        b, g, t, d = x.shape
        return x[:, :, None, :, :].expand(b, g, n_rep, t, d).reshape(b, g * n_rep, t, d)

    kh, vh = repeat_kv(kh, H // G), repeat_kv(vh, H // G)
    scores = qh @ kh.transpose(2, 3) / D ** 0.5
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2).reshape(B, T, H * D)
    y.backward(dy)
    out.update({"gqa.qkv": qkv, "gqa.dy": dy, "gqa.y": y, "gqa.dqkv": qkv.grad})
    meta_gqa = f"B {B} T {T} H {H} Hkv {G} D {D}"

    out = {k: v.detach().float() for k, v in out.items()}
    meta = {"generator": "tools/make_llama_ops_golden.py", "torch": torch.__version__,
            "rope": f"B 2 T 12 H 3 D 16 pos0 {pos0}", "gqa": meta_gqa}
    write_safetensors(args.out, out, meta)


if __name__ == "__main__":
    main()
