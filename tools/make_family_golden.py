#!/usr/bin/python3
"""Golden files for three Hugging Face model families (llama with head_dim and llama3 RoPE, qwen2, qwen3),
from the plain-torch references in tools/torch_hf_families.py (see its docstring for the Hugging Face
modeling files and commits transcribed).

Run with Debian's Python (the pyenv `python3` on PATH has no torch), from the repository root:

    /usr/bin/python3 tools/make_family_golden.py [--out tests/golden/families]

Writes, for each family F in llama, qwen2, qwen3:

  tests/golden/families/F/config.json   a Hugging Face config.json (model_type, architectures,
                                        torch_dtype float32, every key of the config class that matters),
                                        tiny sizes with the shape ratios of Llama 3.2-1B, Qwen2.5-0.5B and
                                        Qwen3-0.6B
  tests/golden/families/F.safetensors   the contents of tests/golden/llama_tiny.safetensors (same key
                                        names and metadata; see tools/make_llama_golden.py): weights.<HF
                                        name> (initial), tokens [B, T+1], logits [B*T, V], loss, grads.<HF
                                        name>, 10 AdamW steps with warmup, cosine decay and clipping
                                        (train.lr, train.losses, train.grad_norms, train.final.<name>), plus
                                        logits64.tokens [1, 64] / logits64.logits [64, V] (positions 0..63,
                                        initial weights), rope.inv_freq [head_dim/2] (the frequencies used),
                                        and metadata "hf_config" = the config.json text.

Sizes: vocab 96, hidden 64, 2 layers, 4 heads, 2 key/value heads, intermediate 96, max_position_embeddings
64, rms_norm_eps 1e-6, tied embeddings; head_dim 32 for llama and qwen3 (4 x 32 = 128 != 64), 16 for qwen2
(= 64 / 4); llama: rope_theta 5e5 and rope_scaling llama3 {factor 4, low_freq_factor 1, high_freq_factor 2,
original_max_position_embeddings 16} (T 32 runs past the original context; high_freq_factor 2 rather than
Llama 3.2's 4 so that the three bands, unchanged / smoothed / divided by factor, each hold a frequency at
head_dim 32: with 4, wavelength 2*pi > 16/4 leaves the unchanged band empty); qwen2 and qwen3 rope_theta 1e6,
default RoPE. B 2, T 32.

Before writing, the references check themselves (self_checks): finite differences in float64 on a tiny
instance of each family; qwen3's q_norm/k_norm (weights 1, eps 0) is the per-head normalisation
q / rms(q) and makes the model invariant to scaling q_proj / k_proj; the llama family with head_dim =
hidden / heads and no rope_scaling is tools/torch_llama.py's model (bitwise, same weights); qwen2 with its
biases zero is that model too; tools/hf_rope_reference.py's llama3 frequencies equal an independent
transcription.
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
from make_golden import clip_grad_norm_exact, lr_at, write_safetensors  # noqa: E402
import torch_hf_families as hf  # noqa: E402
import torch_llama as tl  # noqa: E402

torch.set_num_threads(2)

V, C, L, H, KV, FF, P = 96, 64, 2, 4, 2, 96, 64

# The config.json files, key for key as the real ones (Llama-3.2-1B, Qwen2.5-0.5B, Qwen3-0.6B) spell
# them, with tiny sizes. Written with json.dumps(indent=2, sort_keys=True) as save_pretrained does.
CONFIGS = {
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 94,
        "eos_token_id": 95,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": C,
        "initializer_range": 0.02,
        "intermediate_size": FF,
        "max_position_embeddings": P,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": H,
        "num_hidden_layers": L,
        "num_key_value_heads": KV,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"factor": 4.0, "high_freq_factor": 2.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 16, "rope_type": "llama3"},
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": V,
    },
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 95,
        "eos_token_id": 95,
        "hidden_act": "silu",
        "hidden_size": C,
        "initializer_range": 0.02,
        "intermediate_size": FF,
        "max_position_embeddings": P,
        "max_window_layers": L,
        "model_type": "qwen2",
        "num_attention_heads": H,
        "num_hidden_layers": L,
        "num_key_value_heads": KV,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": P,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": V,
    },
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 94,
        "eos_token_id": 95,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": C,
        "initializer_range": 0.02,
        "intermediate_size": FF,
        "max_position_embeddings": P,
        "max_window_layers": L,
        "model_type": "qwen3",
        "num_attention_heads": H,
        "num_hidden_layers": L,
        "num_key_value_heads": KV,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": V,
    },
}

# make_llama_golden.py's optimizer and schedule, T 32.
HP = dict(B=2, T=32, learning_rate=1e-3, lr_end=1e-4, warmup_steps=3, total_steps=10, beta1=0.9, beta2=0.95,
          adam_eps=1e-8, weight_decay=0.1, lr_schedule="cosine")
# Picked after looking at the printed pre-clip norms: clipping on some steps but not all (asserted).
MAX_NORM = {"llama": 1.5, "qwen2": 1.5, "qwen3": 1.6}
SEED = {"llama": 5151, "qwen2": 6262, "qwen3": 7373}
# Spot checks of the weights after the 10 steps (those the family has).
FINAL = ("model.layers.1.mlp.gate_proj.weight", "model.layers.0.self_attn.k_proj.weight", "model.embed_tokens.weight",
         "model.norm.weight", "lm_head.weight", "model.layers.0.self_attn.q_proj.bias",
         "model.layers.1.self_attn.k_proj.bias", "model.layers.1.self_attn.q_norm.weight",
         "model.layers.0.self_attn.k_norm.weight")

INIT = ("in named_parameters() order from one generator: RMSNorm weights (input_layernorm, "
        "post_attention_layernorm, model.norm, q_norm, k_norm) 1 + N(0, 0.1); q_proj and k_proj weights N(0, 0.08); "
        "biases N(0, 0.05); every other weight N(0, 0.02)")


def init_golden_(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.05 * noise)
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


def config_text(cfg):
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def rope_bands(hf_cfg, head_dim):
    """For llama3: which frequencies are unchanged / smoothed / divided by factor (as HF decides them)."""
    rs = hf_cfg.get("rope_scaling")
    if not rs or rs.get("rope_type") != "llama3":
        return None
    base = hf_cfg["rope_theta"]
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    wl = 2 * math.pi / inv
    old = rs["original_max_position_embeddings"]
    hi, lo = wl < old / rs["high_freq_factor"], wl > old / rs["low_freq_factor"]
    return [i for i in range(len(wl)) if hi[i]], [i for i in range(len(wl)) if not hi[i] and not lo[i]], \
        [i for i in range(len(wl)) if lo[i]]


def make_family_golden(family, outdir, max_norm):
    hf_cfg = CONFIGS[family]
    fam_dir = os.path.join(outdir, family)
    os.makedirs(fam_dir, exist_ok=True)
    text = config_text(hf_cfg)
    with open(os.path.join(fam_dir, "config.json"), "w") as f:
        f.write(text)
    cfg_back = json.loads(text)                  # the model is built from what was written
    hp = dict(HP, max_norm=max_norm)
    seed = SEED[family]
    gen = torch.Generator().manual_seed(seed)
    model = hf.FamilyForCausalLM(cfg_back)
    cfg = model.cfg
    init_golden_(model, gen)
    B, T = hp["B"], hp["T"]
    tokens = make_tokens(gen, B, T, V)
    inputs, targets = tokens[:, :T], tokens[:, 1:]
    tokens64 = torch.randint(0, V, (1, P), generator=gen, dtype=torch.int64)

    out = {}
    for name, p in model.named_parameters():
        out[f"weights.{name}"] = p.detach().clone()
    out["tokens"] = tokens.to(torch.int32)                       # [B, T+1]
    with torch.no_grad():
        logits64, _ = model(tokens64)
    out["logits64.tokens"] = tokens64.to(torch.int32)            # [1, 64]
    out["logits64.logits"] = logits64.reshape(P, V).clone()      # [64, V], row = position
    out["rope.inv_freq"] = model.model.inv_freq.clone()          # [head_dim / 2] float32

    decay = [p for p in model.parameters() if p.dim() >= 2]      # embeddings and projection weights
    no_decay = [p for p in model.parameters() if p.dim() < 2]    # RMSNorm weights (q_norm/k_norm too), biases
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
    clipped = [s + 1 for s, n in enumerate(norms) if n > hp["max_norm"]]
    assert 0 < len(clipped) < len(norms), f"{family}: max_norm should clip on some steps but not all"
    assert all(abs(n / hp["max_norm"] - 1) > 1e-3 for n in norms), f"{family}: a norm is too close to max_norm"

    out["train.lr"] = torch.tensor(lrs, dtype=torch.float32)
    out["train.losses"] = torch.tensor(losses, dtype=torch.float32)
    out["train.grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    sd = dict(model.named_parameters())
    finals = [n for n in FINAL if n in sd]
    for name in finals:
        out[f"train.final.{name}"] = sd[name].detach().clone()

    rope_type = (hf_cfg.get("rope_scaling") or {}).get("rope_type", "default")
    tiny = dict(vocab_size=V, hidden_size=C, num_layers=L, num_heads=H, num_kv_heads=KV, intermediate_size=FF,
                rope_theta=float(hf_cfg["rope_theta"]), rms_norm_eps=hf_cfg["rms_norm_eps"], max_position_embeddings=P)
    meta = {k: str(v) for k, v in tiny.items()}
    meta.update({k: str(v) for k, v in hp.items()})
    bands = rope_bands(hf_cfg, cfg.head_dim)
    head = "model.embed_tokens.weight (tied)" if cfg.tie_word_embeddings else "lm_head.weight"
    semantics = {
        "llama": "Hugging Face modeling_llama.py with an explicit head_dim: q_proj [H*head_dim, C], k_proj/v_proj "
                 "[KV*head_dim, C], o_proj [C, H*head_dim]; no biases; RoPE over head_dim with llama3 scaling "
                 "(rope.inv_freq); scores (q k^T) * head_dim**-0.5",
        "qwen2": "Hugging Face modeling_qwen2.py: q = x W_q^T + b_q (likewise k, v; the bias is added before RoPE), "
                 "o_proj and the MLP without bias; default RoPE; head_dim = hidden/heads; no sliding window",
        "qwen3": "Hugging Face modeling_qwen3.py: q = q_norm(q_proj(x) viewed [B,T,H,head_dim]), k = k_norm(k_proj(x) "
                 "viewed [B,T,KV,head_dim]): RMSNorm over each head's head_dim elements (float32, x*rsqrt(mean(x^2)+eps), "
                 "then weight*x, weight [head_dim] shared by all heads), then RoPE; v not normalised; no biases; "
                 "default RoPE; H*head_dim != hidden",
    }[family]
    meta.update({
        "arch": hf_cfg["architectures"][0],
        "model_type": family,
        "hf_config": text,
        "tie_word_embeddings": str(cfg.tie_word_embeddings),
        "hidden_act": "silu",
        "head_dim": str(cfg.head_dim),
        "attention_bias": str(cfg.qkv_bias),
        "qkv_bias": str(cfg.qkv_bias),
        "o_proj_bias": str(cfg.o_bias),
        "qk_norm": str(cfg.qk_norm),
        "rope_type": rope_type,
        "rope_scaling": json.dumps(hf_cfg.get("rope_scaling"), sort_keys=True),
        "rope_attention_scaling": str(model.model.attention_scaling),
        "rope_inv_freq": "rope.inv_freq: the float32 inv_freq used (cos = cos(pos*inv_freq) * rope_attention_scaling)"
                         + ("" if bands is None else
                            f"; llama3 bands at head_dim {cfg.head_dim}: unchanged {bands[0]}, smoothed {bands[1]}, "
                            f"divided by factor {bands[2]}"),
        "seed": str(seed),
        "format": "gridformer golden v1",
        "generator": "tools/make_family_golden.py (model: tools/torch_hf_families.py, RoPE: tools/hf_rope_reference.py)",
        "torch_version": torch.__version__,
        "compute_dtype": "float32",
        "inputs": "tokens[:, :T]",
        "targets": "tokens[:, 1:]",
        "tokens": f"int32 ids in [0, {V}); 0 and {V - 1} appear as inputs and as targets",
        "loss": "mean cross-entropy over all B*T positions; logits = norm(x) @ W^T with W = " + head,
        "logits_layout": "[B*T, V], row b*T + t",
        "logits64": f"logits64.tokens [1, {P}] int32 (random ids), logits64.logits [{P}, V]: forward of the initial "
                    f"weights at positions 0..{P - 1}, row = position",
        "semantics": semantics + "; RMSNorm float32 x*rsqrt(mean(x^2)+eps) then weight*x; emb = cat(freqs, freqs), "
                     "x*cos + rotate_half(x)*sin at positions 0..T-1; repeat_kv (kv head j serves query heads "
                     "j*n_rep..); eager causal attention (additive finfo.min mask, softmax float32); SwiGLU "
                     "down(silu(gate(x))*up(x)); pre-norm residual layers; final norm",
        "weight_layout": "HF names; nn.Linear weights [out, in], y = x @ W^T + b; embed_tokens [V, C]; "
                         "q_norm/k_norm weights [head_dim]",
        "init": INIT,
        "optimizer": "torch.optim.AdamW (torch 1.13, foreach=False): p *= 1 - lr*wd; m = b1*m + (1-b1)*g; "
                     "v = b2*v + (1-b2)*g*g; p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)",
        "weight_decay_applies_to": "2-D tensors only (embed_tokens, every *_proj weight); 0 for the RMSNorm weights "
                                   "(q_norm, k_norm included) and the biases",
        "grad_clip": "as torch.nn.utils.clip_grad_norm_: norm = global L2 over all grads, accumulated in float64; "
                     "g *= min(1, max_norm / (norm + 1e-6)) (applied always)",
        "lr_formula": "s<=warmup: lr*s/warmup; else p=(s-warmup)/(total-warmup), lr_end + 0.5*(lr-lr_end)*(1+cos(pi*p))",
        "train_steps_description": "train.lr[s-1] = lr at optimizer step s; train.losses[s-1] = loss before update s "
                                   "(losses[0] == loss); train.grad_norms = pre-clip norm; "
                                   "train.final.* = weights after all steps",
        "train_final": ",".join(finals),
        "num_clipped_steps": str(len(clipped)),
        "clipped_steps": ",".join(map(str, clipped)),
    })
    path = os.path.join(outdir, f"{family}.safetensors")
    write_safetensors(path, out, meta)
    size = os.path.getsize(path)
    assert size < 1 << 20, f"{path}: {size} bytes"
    return dict(loss1=losses[0], loss10=losses[-1], clipped=clipped, norms=norms, size=size)


# ----------------------------------------------------------------------------
# the references check themselves


def tiny_cfg(family, **over):
    d = dict(CONFIGS[family])
    d.update(over)
    return d


def _fd_check(family, gen):
    """Finite differences in float64 on a tiny instance (T 9, 2 layers)."""
    model = hf.FamilyForCausalLM(tiny_cfg(family))
    init_golden_(model, gen)
    model = model.double()
    B, T = 2, 9
    toks = torch.randint(0, V, (B, T + 1), generator=gen)
    inputs, targets = toks[:, :T], toks[:, 1:]
    _, loss = model(inputs, targets)
    loss.backward()
    sd = dict(model.named_parameters())
    picks = [("model.layers.0.self_attn.q_proj.weight", (5, 7)),
             ("model.layers.1.self_attn.k_proj.weight", (20, 3)),
             ("model.layers.0.self_attn.v_proj.weight", (11, 60)),
             ("model.layers.1.self_attn.o_proj.weight", (2, 40)),
             ("model.layers.0.mlp.gate_proj.weight", (90, 11)),
             ("model.layers.1.mlp.down_proj.weight", (63, 95)),
             ("model.layers.0.input_layernorm.weight", (17,)),
             ("model.layers.1.post_attention_layernorm.weight", (3,)),
             ("model.norm.weight", (42,)),
             ("model.embed_tokens.weight", (int(inputs[1, 2]), 30)),
             ("model.embed_tokens.weight", (int(targets[0, 0]), 8)),
             ("model.layers.0.self_attn.q_proj.bias", (9,)),
             ("model.layers.1.self_attn.k_proj.bias", (21,)),
             ("model.layers.0.self_attn.v_proj.bias", (4,)),
             ("model.layers.0.self_attn.q_norm.weight", (13,)),
             ("model.layers.1.self_attn.k_norm.weight", (30,))]
    worst, n = 0.0, 0
    for name, idx in picks:
        if name not in sd:
            continue
        p, h = sd[name], 1e-5
        with torch.no_grad():
            old = p[idx].item()
            p[idx] = old + h
            lp = model(inputs, targets)[1].item()
            p[idx] = old - h
            lm = model(inputs, targets)[1].item()
            p[idx] = old
        fd, an = (lp - lm) / (2 * h), p.grad[idx].item()
        worst = max(worst, abs(fd - an) / max(abs(an), 1e-8))
        n += 1
        assert abs(fd - an) <= 1e-7 + 1e-5 * abs(an), f"{family}: finite differences {name}{idx}: fd {fd} vs {an}"
    print(f"  self-check {family}: finite differences (float64) agree with autograd on {n} elements, "
          f"worst rel err {worst:.1e}")


def _llama_equals_torch_llama(gen):
    """head_dim = hidden/heads, no rope_scaling: the same model as tools/torch_llama.py, bit for bit."""
    for tied in (True, False):
        d = tiny_cfg("llama", rope_scaling=None, rope_theta=1e6, rms_norm_eps=1e-5, tie_word_embeddings=tied)
        del d["head_dim"]
        fam = hf.FamilyForCausalLM(d)
        ref = tl.LlamaForCausalLM(tl.LlamaConfig(vocab_size=V, hidden_size=C, num_layers=L, num_heads=H,
                                                 num_kv_heads=KV, intermediate_size=FF, rope_theta=1e6,
                                                 rms_norm_eps=1e-5, tie_word_embeddings=tied,
                                                 max_position_embeddings=P))
        init_golden_(ref, gen)
        assert [n for n, _ in fam.named_parameters()] == [n for n, _ in ref.named_parameters()]
        fam.load_state_dict(ref.state_dict())
        toks = torch.randint(0, V, (2, 33), generator=gen)
        lf, sf = fam(toks[:, :32], toks[:, 1:])
        lr, sr = ref(toks[:, :32], toks[:, 1:])
        sf.backward()
        sr.backward()
        err = (lf - lr).abs().max().item()
        gerr = max((a.grad - b.grad).abs().max().item() for a, b in zip(fam.parameters(), ref.parameters()))
        assert err <= 1e-6 and gerr <= 1e-6, (err, gerr)
        print(f"  self-check llama (head_dim = hidden/heads, default RoPE, tied={tied}) == tools/torch_llama.py: "
              f"max |logits diff| {err:.1e}{' (bitwise)' if err == 0 else ''}, max |grad diff| {gerr:.1e}")

    # qwen2 with its q/k/v biases zero is that Llama too.
    q2 = hf.FamilyForCausalLM(tiny_cfg("qwen2", rms_norm_eps=1e-5))
    ll = hf.FamilyForCausalLM(tiny_cfg("llama", rope_scaling=None, rope_theta=1e6, rms_norm_eps=1e-5, head_dim=None))
    init_golden_(ll, gen)
    sd = ll.state_dict()
    with torch.no_grad():
        for name, p in q2.named_parameters():
            p.copy_(sd[name] if name in sd else torch.zeros_like(p))
    toks = torch.randint(0, V, (2, 32), generator=gen)
    assert torch.equal(q2(toks)[0], ll(toks)[0]), "qwen2 with zero biases is not the Llama"
    print("  self-check qwen2 with zero q/k/v biases == the llama family (bitwise)")


def _qwen3_qk_norm(gen):
    """Weights 1, eps 0: q_norm(q) = q / rms(q) per head, and the model no longer sees q_proj's / k_proj's scale."""
    d = tiny_cfg("qwen3", rms_norm_eps=0.0)
    model = hf.FamilyForCausalLM(d).double()
    init_golden_(model, gen)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                p.fill_(1.0)
    attn = model.model.layers[0].self_attn
    x = torch.randn(2, 5, C, generator=gen, dtype=torch.float64)
    q = attn.q_proj(x).view(2, 5, H, -1)
    want = q / q.pow(2).mean(-1, keepdim=True).sqrt()
    got = attn.q_norm(q)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert torch.allclose(got.pow(2).mean(-1), torch.ones(2, 5, H, dtype=torch.float64), atol=1e-12)
    toks = torch.randint(0, V, (2, 32), generator=gen)
    base = model(toks)[0]
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(3.0)
            layer.self_attn.k_proj.weight.mul_(0.25)
    scaled = model(toks)[0]
    assert torch.allclose(base, scaled, rtol=0, atol=1e-10), (base - scaled).abs().max()
    print("  self-check qwen3: q_norm/k_norm (weights 1, eps 0) = q / rms(q) per head; logits invariant to "
          "scaling q_proj by 3 and k_proj by 1/4")


def _rope_checks():
    # tools/hf_rope_reference.py's llama3 frequencies == an independent transcription, bit for bit.
    cfg = CONFIGS["llama"]
    inv, sc = hf.rope_parameters(hf.FamilyConfig.from_hf(cfg))
    mine, _ = hf.llama3_inv_freq_transcribed(cfg, cfg["head_dim"])
    assert torch.equal(inv, mine) and sc == 1.0, (inv, mine, sc)
    hi, mid, lo = rope_bands(cfg, cfg["head_dim"])
    assert hi and mid and lo, (hi, mid, lo)
    base = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, 32, 2, dtype=torch.int64).float() / 32))
    assert torch.equal(inv[hi], base[hi]) and torch.equal(inv[lo], base[lo] / 4.0)
    assert all(base[i] / 4 < inv[i] < base[i] for i in mid)
    print(f"  self-check llama3 inv_freq (hf_rope_reference == own transcription): unchanged {hi}, smoothed {mid}, "
          f"/factor {lo}; inv_freq[:3] = {[f'{v:.9g}' for v in inv[:3].tolist()]}")
    # The model's cos/sin == hf_rope_reference.cos_sin (HF's matmul form), positions 0..63.
    pos = torch.arange(P)
    cos, sin = hf.rope_cos_sin(inv, sc, pos)
    rcos, rsin = hf.hf_rope_reference.cos_sin(inv, sc, pos)
    assert torch.equal(cos, rcos) and torch.equal(sin, rsin)
    # default RoPE for qwen2 (head_dim 16) and qwen3 (head_dim 32).
    for fam in ("qwen2", "qwen3"):
        c = hf.FamilyConfig.from_hf(CONFIGS[fam])
        inv, sc = hf.rope_parameters(c)
        d = c.head_dim
        want = 1.0 / (float(CONFIGS[fam]["rope_theta"]) ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        assert torch.equal(inv, want) and sc == 1.0, fam
    print("  self-check qwen2/qwen3: default inv_freq = 1/theta**(arange(0, head_dim, 2)/head_dim) over head_dim")


def _shape_checks():
    for fam, (dq, dkv) in {"llama": (128, 64), "qwen2": (64, 32), "qwen3": (128, 64)}.items():
        sd = dict(hf.FamilyForCausalLM(CONFIGS[fam]).named_parameters())
        assert sd["model.layers.0.self_attn.q_proj.weight"].shape == (dq, C)
        assert sd["model.layers.0.self_attn.k_proj.weight"].shape == (dkv, C)
        assert sd["model.layers.0.self_attn.o_proj.weight"].shape == (C, dq)
        assert "lm_head.weight" not in sd
        assert ("model.layers.0.self_attn.q_proj.bias" in sd) == (fam == "qwen2")
        assert "model.layers.0.self_attn.o_proj.bias" not in sd
        assert ("model.layers.0.self_attn.q_norm.weight" in sd) == (fam == "qwen3")
        if fam == "qwen3":
            assert sd["model.layers.0.self_attn.q_norm.weight"].shape == (32,)
            assert sd["model.layers.0.self_attn.k_norm.weight"].shape == (32,)


def self_checks():
    gen = torch.Generator().manual_seed(99)
    _shape_checks()
    for fam in hf.FAMILIES:
        _fd_check(fam, gen)
    _llama_equals_torch_llama(gen)
    _qwen3_qk_norm(gen)
    _rope_checks()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden",
                                                  "families"))
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    print("self checks")
    self_checks()
    summary = {}
    for fam in hf.FAMILIES:
        print(f"{fam} ({CONFIGS[fam]['architectures'][0]})")
        summary[fam] = make_family_golden(fam, out, MAX_NORM[fam])
    print("summary")
    for fam, s in summary.items():
        print(f"  {fam:6s} loss step 1 {s['loss1']:.6f}  step 10 {s['loss10']:.6f}  max_norm {MAX_NORM[fam]}  "
              f"clipped steps {s['clipped']}  ({s['size']} bytes)")


if __name__ == "__main__":
    main()
