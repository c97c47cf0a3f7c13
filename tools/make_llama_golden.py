#!/usr/bin/python3
"""Golden files for gridformer's Llama (LlamaForCausalLM), from the plain-torch Llama in
tools/torch_llama.py (Hugging Face's semantics, names and layouts).

Run with Debian's Python (the pyenv `python3` on PATH has no torch):

    /usr/bin/python3 tools/make_llama_golden.py [--out tests/golden]

Writes, as tools/make_golden.py does for GPT-2 (same safetensors writer, metadata conventions, AdamW,
LR schedule, clipping, seeds and thread pinning):

  llama_tiny.safetensors       V 96 (not a multiple of 128: gridformer pads), C 64, 2 layers, 4 heads,
                               2 key/value heads (grouped-query), SwiGLU width 96, RoPE theta 1e6,
                               RMSNorm eps 1e-5, untied head; B 2, T 16. Initial weights, tokens,
                               logits, loss, every gradient, and 10 AdamW steps with warmup, cosine
                               decay and clipping.
  llama_tiny_tied.safetensors  the same model with tie_word_embeddings (no lm_head.weight), other
                               seed, the same contents.
  llama_tiny_sharded/          llama_tiny's initial weights as a sharded Hugging Face checkpoint:
                               model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json.

Before writing, the reference checks itself (self_checks): finite differences in float64, GQA equal
to multi-head attention with repeated key/value weights, RoPE the identity at position 0 and a
rotation of the (i, i + d/2) pairs, and the bf16 autocast path.
"""
import os

# Pin the thread pools before torch is imported, as make_golden.py does.
os.environ["OMP_NUM_THREADS"] = "2"
os.environ["OPENBLAS_NUM_THREADS"] = "2"

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import clip_grad_norm_exact, lr_at, to_bytes, write_safetensors  # noqa: E402
import torch_llama as tl  # noqa: E402

torch.set_num_threads(2)

# The model of llama_tiny*.safetensors.
TINY = dict(vocab_size=96, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=96,
            rope_theta=1e6, rms_norm_eps=1e-5, max_position_embeddings=32)
# make_golden.py's optimizer and schedule (common_hp), cosine decay.
HP = dict(B=2, T=16, learning_rate=1e-3, lr_end=1e-4, warmup_steps=3, total_steps=10, beta1=0.9, beta2=0.95,
          adam_eps=1e-8, weight_decay=0.1, lr_schedule="cosine")
# Picked after looking at the printed pre-clip norms: clipping on some steps but not all (asserted).
MAX_NORM = {False: 2.15, True: 2.3}
SEED = {False: 4321, True: 8765}
# Spot checks of the weights after the 10 steps.
FINAL = ("model.layers.1.mlp.gate_proj.weight", "model.layers.0.self_attn.k_proj.weight", "model.embed_tokens.weight",
         "model.norm.weight", "lm_head.weight")

INIT = ("in named_parameters() order from one generator: RMSNorm weights 1 + N(0, 0.1); q_proj and k_proj "
        "N(0, 0.08) (so attention is far from uniform and RoPE matters); every other weight N(0, 0.02)")


def init_golden_(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(0.08 * noise)
            else:
                p.copy_(0.02 * noise)


def make_tokens(gen, B, T, V):
    tokens = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    # The first and last ids of the vocabulary appear, as inputs and as targets.
    tokens[0, 3], tokens[1, 7], tokens[1, 12] = 0, V - 1, V - 1
    tokens[0, 9] = 0
    return tokens


def f64_grad_error(model, inputs, targets):
    """Max |grad_f32 - grad_f64| / max|grad_f64| per parameter at the current weights (diagnostic)."""
    m64 = copy.deepcopy(model).double()
    _, loss64 = m64(inputs, targets)
    loss64.backward()
    worst = 0.0
    for p, p64 in zip(model.parameters(), m64.parameters()):
        worst = max(worst, ((p.grad.double() - p64.grad).abs().max() / p64.grad.abs().max()).item())
    return loss64.item(), worst


def make_model_golden(path, tied, write_sharded=None):
    cfg = tl.LlamaConfig(**TINY, tie_word_embeddings=tied)
    hp = dict(HP, max_norm=MAX_NORM[tied])
    seed = SEED[tied]
    gen = torch.Generator().manual_seed(seed)
    model = tl.LlamaForCausalLM(cfg)
    init_golden_(model, gen)
    B, T, V = hp["B"], hp["T"], cfg.vocab_size
    tokens = make_tokens(gen, B, T, V)
    inputs, targets = tokens[:, :T], tokens[:, 1:]

    out = {}
    for name, p in model.named_parameters():
        out[f"weights.{name}"] = p.detach().clone()
    out["tokens"] = tokens.to(torch.int32)                       # [B, T+1]
    if write_sharded:
        write_sharded_checkpoint(write_sharded, {n: p.detach().clone() for n, p in model.named_parameters()})

    decay = [p for p in model.parameters() if p.dim() >= 2]      # embeddings and projections
    no_decay = [p for p in model.parameters() if p.dim() < 2]    # RMSNorm weights
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": hp["weight_decay"]},
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
            out["logits"] = logits.detach().reshape(B * T, V).clone()   # [B*T, V]
            out["loss"] = loss.detach().reshape(1).clone()
            for name, p in model.named_parameters():
                out[f"grads.{name}"] = p.grad.detach().clone()
            loss64, gerr = f64_grad_error(model, inputs, targets)
            print(f"  float64 cross-check at init: loss64 {loss64:.9f} (f32 {loss.item():.9f}), "
                  f"max grad err / max|grad| = {gerr:.2e}")
        norm = clip_grad_norm_exact(params, hp["max_norm"])
        lr = lr_at(s, hp)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        lrs.append(lr)
        losses.append(loss.item())
        norms.append(norm.item())
        print(f"  step {s:2d}  lr {lr:.6e}  loss {loss.item():.6f}  grad_norm {norm.item():.6f}"
              f"  {'CLIPPED' if norm.item() > hp['max_norm'] else ''}")
    n_clipped = sum(n > hp["max_norm"] for n in norms)
    assert 0 < n_clipped < len(norms), "max_norm should clip on some steps but not all"
    assert all(abs(n / hp["max_norm"] - 1) > 1e-3 for n in norms), "a norm is too close to max_norm"

    out["train.lr"] = torch.tensor(lrs, dtype=torch.float32)
    out["train.losses"] = torch.tensor(losses, dtype=torch.float32)
    out["train.grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    sd = dict(model.named_parameters())
    finals = [n for n in FINAL if n in sd]
    for name in finals:
        out[f"train.final.{name}"] = sd[name].detach().clone()

    meta = {k: str(v) for k, v in TINY.items()}
    meta.update({k: str(v) for k, v in hp.items()})
    meta.update({
        "arch": "LlamaForCausalLM",
        "model_type": "llama",
        "tie_word_embeddings": str(tied),
        "hidden_act": "silu",
        "head_dim": str(cfg.head_dim),
        "seed": str(seed),
        "format": "gridformer golden v1",
        "generator": "tools/make_llama_golden.py (model: tools/torch_llama.py)",
        "torch_version": torch.__version__,
        "compute_dtype": "float32",
        "inputs": "tokens[:, :T]",
        "targets": "tokens[:, 1:]",
        "tokens": f"int32 ids in [0, {V}); 0 and {V - 1} appear as inputs and as targets",
        "loss": "mean cross-entropy over all B*T positions; logits = norm(x) @ W^T with W = "
                + ("model.embed_tokens.weight (tied)" if tied else "lm_head.weight"),
        "logits_layout": "[B*T, V], row b*T + t",
        "semantics": "Hugging Face modeling_llama.py: RMSNorm (float32, x*rsqrt(mean(x^2)+eps), then weight*x); "
                     "default RoPE, inv_freq = 1/theta**(arange(0,d,2)/d) float32, emb = cat(freqs, freqs), "
                     "x*cos + rotate_half(x)*sin at positions 0..T-1; repeat_kv (kv head j serves query heads "
                     "j*n_rep..); eager causal attention, scale 1/sqrt(head_dim); SwiGLU down(silu(gate(x))*up(x)); "
                     "pre-norm residual layers; final norm; no biases",
        "weight_layout": "HF names; nn.Linear weights [out, in], y = x @ W^T; embed_tokens and lm_head [V, C]",
        "init": INIT,
        "optimizer": "torch.optim.AdamW (torch 1.13, foreach=False): p *= 1 - lr*wd; m = b1*m + (1-b1)*g; "
                     "v = b2*v + (1-b2)*g*g; p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)",
        "weight_decay_applies_to": "2-D tensors only (embed_tokens, lm_head, every *_proj weight); 0 for the "
                                   "RMSNorm weights",
        "grad_clip": "as torch.nn.utils.clip_grad_norm_: norm = global L2 over all grads, accumulated in float64; "
                     "g *= min(1, max_norm / (norm + 1e-6)) (applied always)",
        "lr_formula": "s<=warmup: lr*s/warmup; else p=(s-warmup)/(total-warmup), lr_end + 0.5*(lr-lr_end)*(1+cos(pi*p))",
        "train_steps_description": "train.lr[s-1] = lr at optimizer step s; train.losses[s-1] = loss before update s "
                                   "(losses[0] == loss); train.grad_norms = pre-clip norm; "
                                   "train.final.* = weights after all steps",
        "train_final": ",".join(finals),
        "num_clipped_steps": str(n_clipped),
    })
    write_safetensors(path, out, meta)


def write_sharded_checkpoint(outdir, state):
    """Hugging Face's sharded layout: model-0000k-of-0000n.safetensors + model.safetensors.index.json."""
    os.makedirs(outdir, exist_ok=True)
    names = list(state)
    half = (len(names) + 1) // 2
    shards = [names[:half], names[half:]]
    weight_map, total = {}, 0
    for k, shard in enumerate(shards, 1):
        fname = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(outdir, fname), {n: state[n] for n in shard}, {"format": "pt"})
        for n in shard:
            weight_map[n] = fname
            total += len(to_bytes(state[n])[2])
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")   # as save_pretrained writes it
    print(f"wrote {outdir}/model.safetensors.index.json: {len(names)} tensors, total_size {total}")


# ----------------------------------------------------------------------------
# the reference checks itself


def self_checks():
    gen = torch.Generator().manual_seed(99)
    cfg = tl.LlamaConfig(**TINY)
    B, T, V = 2, 9, cfg.vocab_size
    toks = torch.randint(0, V, (B, T + 1), generator=gen)
    inputs, targets = toks[:, :T], toks[:, 1:]

    # 1. finite differences in float64 on a few elements of several parameters.
    model = tl.LlamaForCausalLM(cfg)
    init_golden_(model, gen)
    model = model.double()
    _, loss = model(inputs, targets)
    loss.backward()
    sd = dict(model.named_parameters())
    worst = 0.0
    for name, idx in [("model.layers.0.self_attn.q_proj.weight", (5, 7)),
                      ("model.layers.1.self_attn.k_proj.weight", (20, 3)),
                      ("model.layers.0.self_attn.v_proj.weight", (31, 60)),
                      ("model.layers.1.self_attn.o_proj.weight", (2, 40)),
                      ("model.layers.0.mlp.gate_proj.weight", (90, 11)),
                      ("model.layers.1.mlp.down_proj.weight", (63, 95)),
                      ("model.layers.0.input_layernorm.weight", (17,)),
                      ("model.norm.weight", (42,)),
                      ("lm_head.weight", (int(targets[0, 0]), 8)),
                      ("model.embed_tokens.weight", (int(inputs[1, 2]), 30))]:
        p, h = sd[name], 1e-5
        with torch.no_grad():
            old = p[idx].item()
            p[idx] = old + h
            lp = model(inputs, targets)[1].item()
            p[idx] = old - h
            lm = model(inputs, targets)[1].item()
            p[idx] = old
        fd, an = (lp - lm) / (2 * h), p.grad[idx].item()
        err = abs(fd - an) / max(abs(an), 1e-8)
        worst = max(worst, err)
        assert abs(fd - an) <= 1e-7 + 1e-5 * abs(an), f"finite differences: {name}{idx}: fd {fd} vs autograd {an}"
    print(f"  self-check: finite differences (float64) agree with autograd, worst rel err {worst:.1e}")

    # 2. grouped-query attention == multi-head attention whose k/v weights repeat each kv head n_rep times.
    gqa = tl.LlamaForCausalLM(cfg).double()
    init_golden_(gqa, gen)
    mha = tl.LlamaForCausalLM(tl.LlamaConfig(**dict(TINY, num_kv_heads=None))).double()
    n_rep, D = cfg.num_heads // cfg.kv_heads, cfg.head_dim
    with torch.no_grad():
        src = dict(gqa.named_parameters())
        for name, p in mha.named_parameters():
            w = src[name]
            if name.endswith(("k_proj.weight", "v_proj.weight")):
                w = w.view(cfg.kv_heads, D, -1).repeat_interleave(n_rep, dim=0).reshape(p.shape)
            p.copy_(w)
    lg, _ = gqa(inputs)
    lm, _ = mha(inputs)
    assert torch.allclose(lg, lm, rtol=0, atol=1e-12), (lg - lm).abs().max()
    print("  self-check: GQA (2 kv heads) == MHA with k/v weights repeated per head")

    # 3. RoPE: identity at position 0; elsewhere a rotation of each pair (i, i + d/2) by pos * inv_freq[i];
    #    scores depend on the position difference only.
    d = cfg.head_dim
    x = torch.randn(1, 3, 5, d, generator=gen, dtype=torch.float64)
    cos, sin = tl.rope_cos_sin(d, cfg.rope_theta, torch.arange(5))
    y = tl.apply_rotary_pos_emb(x, cos.double(), sin.double())
    assert torch.equal(y[:, :, 0], x[:, :, 0]), "RoPE at position 0 is not the identity"
    ang = torch.arange(5).double()[:, None] * tl.rope_inv_freq(d, cfg.rope_theta).double()[None, :]  # [5, d/2]
    xc = torch.complex(x[..., : d // 2], x[..., d // 2:]) * torch.polar(torch.ones_like(ang), ang)
    assert torch.allclose(y, torch.cat((xc.real, xc.imag), -1), atol=1e-6), "RoPE is not the pair rotation"
    q, k = torch.randn(d, generator=gen, dtype=torch.float64), torch.randn(d, generator=gen, dtype=torch.float64)

    def rot(v, pos):
        c, s = tl.rope_cos_sin(d, cfg.rope_theta, torch.tensor([pos]))
        return tl.apply_rotary_pos_emb(v, c[0].double(), s[0].double())
    assert abs(rot(q, 7) @ rot(k, 4) - rot(q, 3) @ rot(k, 0)) < 1e-5, "RoPE scores are not relative"
    print("  self-check: RoPE is the identity at position 0, the (i, i+d/2) pair rotation, relative")

    # 4. RMSNorm in its written-out form; the tied head reads embed_tokens.
    xn = torch.randn(4, cfg.hidden_size, generator=gen)
    norm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.1 * torch.randn(cfg.hidden_size, generator=gen))
    ref = norm.weight * xn / torch.sqrt((xn * xn).mean(-1, keepdim=True) + cfg.rms_norm_eps)
    assert torch.allclose(norm(xn), ref, rtol=1e-6, atol=1e-6)
    tied = tl.LlamaForCausalLM(tl.LlamaConfig(**TINY, tie_word_embeddings=True))
    assert "lm_head.weight" not in dict(tied.named_parameters()) and tied.head_weight() is tied.model.embed_tokens.weight

    # 5. bf16 autocast runs (the benchmark's path) and stays near float32.
    m32 = tl.LlamaForCausalLM(cfg)
    init_golden_(m32, gen)
    l32 = m32(inputs, targets)[1]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lbf, bf = m32(inputs, targets)
    bf.backward()
    assert lbf.dtype == torch.float32 and torch.isfinite(bf) and abs(bf.item() - l32.item()) < 2e-2 * l32.item()
    assert all(torch.isfinite(p.grad).all() for p in m32.parameters())
    print(f"  self-check: bf16 autocast loss {bf.item():.5f} vs float32 {l32.item():.5f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    print("self checks")
    self_checks()
    print("llama_tiny (untied head)")
    make_model_golden(os.path.join(out, "llama_tiny.safetensors"), tied=False,
                      write_sharded=os.path.join(out, "llama_tiny_sharded"))
    print("llama_tiny_tied (tie_word_embeddings)")
    make_model_golden(os.path.join(out, "llama_tiny_tied.safetensors"), tied=True)


if __name__ == "__main__":
    main()
