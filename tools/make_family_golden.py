#!/usr/bin/python3
"""Golden files for six Hugging Face model families (llama with head_dim and llama3 RoPE, qwen2, qwen3, the
mixtures of experts qwen2_moe (two variants) and qwen3_moe, and gemma3), from the plain-torch references in
tools/torch_hf_families.py and tools/torch_hf_gemma3.py (see their docstrings for the Hugging Face modeling files
and commits transcribed, the MoE block's and the balancing loss's exact arithmetic, and Gemma 3's).

Run with Debian's Python (the pyenv `python3` on PATH has no torch), from the repository root:

    /usr/bin/python3 tools/make_family_golden.py [--out tests/golden/families] [--only VARIANT ...]
    /usr/bin/python3 tools/make_family_golden.py --search VARIANT FIRST_SEED COUNT   (how the MoE seeds were picked)

Writes, for each variant F in llama, qwen2, qwen3, qwen2_moe, qwen2_moe_mixed, qwen3_moe, gemma3:

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

The MoE variants (every key above, same meaning, plus the ones below; metadata keys appended after the dense
ones, among them the variant's MoE settings, "sparse_layers", "moe_semantics", "aux_loss_formula"):

  qwen2_moe        Qwen2MoeForCausalLM (Qwen1.5-MoE's keys): 2 layers, both sparse (decoder_sparse_step 1,
                   mlp_only_layers []), 4 experts, top-2, moe_intermediate_size 32, shared expert of width 48
                   with its sigmoid gate, norm_topk_prob false (Qwen2-MoE's default), q/k/v biases, head_dim 16
  qwen2_moe_mixed  the same with 3 layers and mlp_only_layers [1]: layers 0 and 2 sparse, layer 1 the dense
                   SwiGLU MLP of width intermediate_size 96
  qwen3_moe        Qwen3MoeForCausalLM (Qwen3-30B-A3B's keys): qwen3's attention (q_norm/k_norm, head_dim 32),
                   2 sparse layers, 4 experts, top-2, width 32, no shared expert, norm_topk_prob true (as the
                   released Qwen3-MoE configs; Qwen3MoeConfig's default is false)
  All three: untied lm_head (as the real configs), rope_theta 1e6, output_router_logits FALSE, so loss, grads
  and train.* are of the plain LM loss (HF adds router_aux_loss_coef * aux only with output_router_logits).
  Extra keys: aux_loss [1] and train.aux_losses [10] (load_balancing_loss_func of the batch at the initial
  weights / at the weights before update s: recorded, not trained on), and for each sparse layer i, of the
  first forward: moe.layer{i}.router_logits [B*T, E], moe.layer{i}.routing_weights [B*T, k] (after the
  optional renormalisation), moe.layer{i}.experts int32 [B*T, k] (descending probability).
  Initialisation (init_golden_, MOE_INIT): the dense variants' rules, plus routers mlp.gate.weight and
  mlp.shared_expert_gate.weight N(0, 0.3) (decisive routing), expert e's weights N(0, 0.02) * (e + 1) / 2
  (experts differ).
  Asserted for each: every sparse layer of every forward written (logits64 and the 10 steps) keeps a gap
  > 1e-4 between adjacent sorted router logits among each token's k + 1 largest (no near-tie can make the
  routing ambiguous; the least gap is in the metadata "router_margin"), every expert gets tokens in every
  layer at every step (an expert without tokens has no gradient and torch's AdamW would skip it, decay
  included), every parameter has a gradient, clipping on some steps but not all, size < 1.5 MB.
  Self-checks: the dense/sparse layer rule on several configs and HF's parameter names, order and shapes;
  the sparse block against a per-token loop (outputs and every gradient, float64; top-1/2/3, norm_topk_prob
  both ways, with and without the shared expert); load_balancing_loss_func against E * sum_e f_e * P_e pooled
  over the layers (values, gradients); float64 finite differences of each variant (routers, experts, shared
  expert and its gate, the dense layer, attention, norms, embeddings, lm_head), also with
  output_router_logits true and coefficient 0.5 (the balancing loss's gradient), no routing decision
  flipped by the perturbations; 1 expert, top-1, no shared expert (qwen2_moe: its down_proj zero) == the
  dense qwen3 / qwen2 model (bitwise, logits and gradients); qwen2_moe with every layer in mlp_only_layers
  == qwen2 (bitwise).

gemma3 (Gemma3ForCausalLM, model_type gemma3_text, google/gemma-3-1b-it's keys; every dense key above, same
meaning, the dense metadata keys hidden_act, semantics, init, weight_layout, weight_decay_applies_to and
rope_inv_freq replaced by Gemma's text, then gemma3_metadata's keys appended: layer_types, sliding_window,
attention_mask_rule, query_pre_attn_scalar, attention_scale, embed_scale, ...): vocab 96, hidden 72 (sqrt(72) not
exact in float32), intermediate 96, 4 layers (sliding_window_pattern 3: sliding, sliding, full, sliding), 4 heads,
2 key/value heads, head_dim 32, query_pre_attn_scalar 24, sliding_window 8 (< T 32: the window matters),
rope_theta 1e6 with rope_scaling linear factor 8 on the full layer, rope_local_base_freq 1e4 (default RoPE) on the
sliding ones, gelu_pytorch_tanh, tied embeddings, no softcapping, pad_token_id null. Extra key rope.inv_freq_local
[head_dim/2] (the sliding layers' frequencies; rope.inv_freq is the full layers'). Initialisation GEMMA3_INIT: the
norm weights are offsets (Gemma3RMSNorm scales by 1 + weight), drawn 0.1 * N(0, 1). Size limit 2 MB (MAX_BYTES:
202k parameters, weights and gradients alone are 1.6 MB). Self-checks (torch_hf_gemma3.self_checks): layer types
from the pattern; the 5.x rope_parameters form gives the same frequencies; softcapping, pad ids, bidirectional
attention refused; HF's names, order and shapes; inv_freq per layer type; Gemma3RMSNorm with zero weights ==
RMSNorm (bitwise); the embedding scale float32(sqrt(72)); the mask inequalities; each attention type == a
per-query loop (float64); sliding window 8 vs none: logits bitwise equal before position 8, different after;
float64 finite differences (_fd_check).

This file writes the goldens (make_family_golden, the metadata, --search); the variants' configs, constants and
initialisation are in tools/family_golden_configs.py, the self-checks in tools/family_golden_checks.py.
"""
import os

# Pin the thread pools before torch is imported, as make_golden.py does.
os.environ["OMP_NUM_THREADS"] = "2"
os.environ["OPENBLAS_NUM_THREADS"] = "2"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import golden_adamw, golden_step, write_safetensors  # noqa: E402
from make_llama_golden import f64_grad_error, make_tokens  # noqa: E402
import torch_hf_gemma3 as g3  # noqa: E402
# The variants' configs, constants and initialisation (tools/make_lora_golden.py and make_deepseek_golden.py read
# HP, MAX_NORM, ROUTER_MARGIN from here), and the self-checks.
from family_golden_configs import (CONFIGS, FINAL, GEMMA3_INIT, HP, INIT, MAX_BYTES, MAX_NORM, MOE_FINAL,  # noqa: E402
                                   MOE_INIT, MOE_VARIANTS, P, ROUTER_MARGIN, SEED, V, VARIANTS, build_model,
                                   init_golden_, rope_bands)
from family_golden_checks import self_checks  # noqa: E402

torch.set_num_threads(2)


def router_gaps(model):
    """Least gap between adjacent sorted router logits among each token's k + 1 largest, over the sparse layers
    of the model's last forward (inf without sparse layers)."""
    k, worst = model.cfg.num_experts_per_tok, math.inf
    for rl in model.router_logits:
        top = torch.sort(rl.detach().double(), dim=-1, descending=True).values[:, :min(k + 1, rl.shape[-1])]
        if top.shape[-1] > 1:
            worst = min(worst, (top[:, :-1] - top[:, 1:]).min().item())
    return worst


def config_text(cfg):
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def make_family_golden(family, outdir, max_norm, seed=None, search=False):
    """search: a trial of `seed` (--search): no clipping assertions, nothing kept."""
    hf_cfg = CONFIGS[family]
    fam_dir = os.path.join(outdir, family)
    os.makedirs(fam_dir, exist_ok=True)
    text = config_text(hf_cfg)
    with open(os.path.join(fam_dir, "config.json"), "w") as f:
        f.write(text)
    cfg_back = json.loads(text)                  # the model is built from what was written
    hp = dict(HP, max_norm=max_norm)
    seed = SEED[family] if seed is None else seed
    gen = torch.Generator().manual_seed(seed)
    model = build_model(cfg_back)
    cfg = model.cfg
    moe = family in MOE_VARIANTS
    assert moe == (cfg.num_experts > 0)
    init_golden_(model, gen)
    B, T = hp["B"], hp["T"]
    tokens = make_tokens(gen, B, T, V)
    inputs, targets = tokens[:, :T], tokens[:, 1:]
    tokens64 = torch.randint(0, V, (1, P), generator=gen, dtype=torch.int64)
    sparse = cfg.sparse_layers()
    gaps = []                                                    # MoE: router margins of every forward

    out = {}
    for name, p in model.named_parameters():
        out[f"weights.{name}"] = p.detach().clone()
    out["tokens"] = tokens.to(torch.int32)                       # [B, T+1]
    with torch.no_grad():
        logits64, _ = model(tokens64)
    if moe:
        gaps.append(router_gaps(model))
    out["logits64.tokens"] = tokens64.to(torch.int32)            # [1, 64]
    out["logits64.logits"] = logits64.reshape(P, V).clone()      # [64, V], row = position
    out["rope.inv_freq"] = model.model.inv_freq.clone()          # [head_dim / 2] float32
    if hasattr(model.model, "inv_freq_local"):                   # gemma3: the sliding layers' frequencies
        out["rope.inv_freq_local"] = model.model.inv_freq_local.clone()

    # weight decay on the embeddings and projection weights; none on the RMSNorm weights (q_norm/k_norm too), biases
    opt, params = golden_adamw(model, hp)

    lrs, losses, norms, auxs = [], [], [], []
    for s in range(1, hp["total_steps"] + 1):
        opt.zero_grad(set_to_none=True)
        logits, loss = model(inputs, targets)
        if moe:
            assert not cfg.output_router_logits          # the loss is the plain LM loss
            with torch.no_grad():
                aux = model.aux_loss()
            auxs.append(aux.item())
            gaps.append(router_gaps(model))
            assert gaps[-1] > ROUTER_MARGIN, f"{family} step {s}: router logits within {gaps[-1]:.2e} (re-seed)"
            for i, rl in zip(sparse, model.router_logits):
                _, sel = torch.topk(torch.softmax(rl.detach().float(), -1), cfg.num_experts_per_tok, -1)
                hit = torch.bincount(sel.reshape(-1), minlength=cfg.num_experts)
                # An expert no token picks gets no gradient (None): torch's AdamW would skip it altogether
                # (not even decay it), which a runner that zero-fills would not reproduce.
                assert (hit > 0).all(), f"{family} step {s} layer {i}: an expert without tokens {hit.tolist()}"
            if s == 1:
                first = [(rl.detach().clone(), *model.model.layers[i].mlp.last_routing)
                         for i, rl in zip(sparse, model.router_logits)]
        loss.backward()
        if s == 1:
            out["logits"] = logits.detach().reshape(B * T, V).clone()   # [B*T, V]
            out["loss"] = loss.detach().reshape(1).clone()
            for name, p in model.named_parameters():
                assert p.grad is not None, f"{family}: {name} has no gradient"
                out[f"grads.{name}"] = p.grad.detach().clone()
            if moe:
                out["aux_loss"] = torch.tensor([auxs[0]], dtype=torch.float32)
                for i, (rl, w, sel) in zip(sparse, first):
                    out[f"moe.layer{i}.router_logits"] = rl.float()                   # [B*T, E]
                    out[f"moe.layer{i}.routing_weights"] = w.detach().float().clone()   # [B*T, k]
                    out[f"moe.layer{i}.experts"] = sel.to(torch.int32)                 # [B*T, k]
            loss64, gerr = f64_grad_error(model, inputs, targets)
            print(f"  float64 cross-check at init: loss64 {loss64:.9f} (f32 {loss.item():.9f}), "
                  f"max grad err / max|grad| = {gerr:.2e}")
        norm, lr = golden_step(opt, params, s, hp)
        lrs.append(lr)
        losses.append(loss.item())
        norms.append(norm.item())
        print(f"  step {s:2d}  lr {lr:.6e}  loss {loss.item():.6f}  grad_norm {norm.item():.6f}"
              + (f"  aux {auxs[-1]:.6f}  router margin {gaps[-1]:.2e}" if moe else "")
              + f"  {'CLIPPED' if norm.item() > hp['max_norm'] else ''}")
    clipped = [s + 1 for s, n in enumerate(norms) if n > hp["max_norm"]]
    if search:
        return dict(norms=norms, margin=min(gaps) if gaps else None, aux=auxs, losses=losses)
    assert 0 < len(clipped) < len(norms), f"{family}: max_norm should clip on some steps but not all"
    assert all(abs(n / hp["max_norm"] - 1) > 1e-3 for n in norms), f"{family}: a norm is too close to max_norm"

    out["train.lr"] = torch.tensor(lrs, dtype=torch.float32)
    out["train.losses"] = torch.tensor(losses, dtype=torch.float32)
    out["train.grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    if moe:
        out["train.aux_losses"] = torch.tensor(auxs, dtype=torch.float32)
    sd = dict(model.named_parameters())
    finals = [n for n in FINAL + (MOE_FINAL if moe else ()) if n in sd]
    for name in finals:
        out[f"train.final.{name}"] = sd[name].detach().clone()

    rope_type = (hf_cfg.get("rope_scaling") or {}).get("rope_type", "default")
    tiny = dict(vocab_size=V, hidden_size=hf_cfg["hidden_size"], num_layers=hf_cfg["num_hidden_layers"],
                num_heads=hf_cfg["num_attention_heads"], num_kv_heads=hf_cfg["num_key_value_heads"],
                intermediate_size=hf_cfg["intermediate_size"],
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
        "qwen2_moe": "Hugging Face modeling_qwen2_moe.py: qwen2's attention (q/k/v biases added before RoPE, head_dim = "
                     "hidden/heads, HF's scores / sqrt(16) == * 0.25 exactly), every layer sparse (Qwen2MoeSparseMoeBlock "
                     "with the shared expert); untied lm_head",
        "qwen2_moe_mixed": "Hugging Face modeling_qwen2_moe.py as qwen2_moe, 3 layers with mlp_only_layers [1]: layers 0 "
                           "and 2 sparse, layer 1 the dense SwiGLU MLP (mlp.gate_proj/up_proj/down_proj, width "
                           "intermediate_size); untied lm_head",
        "qwen3_moe": "Hugging Face modeling_qwen3_moe.py: qwen3's attention (q_norm/k_norm per head before RoPE, no "
                     "biases, head_dim 32 from config.json, H*head_dim != hidden), every layer sparse "
                     "(Qwen3MoeSparseMoeBlock: no shared expert, norm_topk_prob true); untied lm_head",
        "gemma3": "Hugging Face modeling_gemma3.py (replaced by gemma3_metadata's text)",
    }[family]
    meta.update({
        "arch": hf_cfg["architectures"][0],
        "model_type": hf_cfg["model_type"],
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
    if moe:
        meta.update(moe_metadata(family, cfg, sparse, min(gaps)))
    if cfg.model_type == g3.MODEL_TYPE:
        meta.update(gemma3_metadata(cfg, model))
    path = os.path.join(outdir, f"{family}.safetensors")
    write_safetensors(path, out, meta)
    size = os.path.getsize(path)
    assert size < MAX_BYTES.get(family, 1_500_000 if moe else 1 << 20), f"{path}: {size} bytes"
    return dict(loss1=losses[0], loss10=losses[-1], clipped=clipped, norms=norms, size=size,
                aux=auxs, margin=min(gaps) if gaps else None)


def moe_metadata(family, cfg, sparse, margin):
    """The MoE variants' extra metadata (appended after the dense families' keys)."""
    dense = [i for i in range(cfg.num_hidden_layers) if i not in sparse]
    shared = cfg.shared_expert_intermediate_size > 0
    return {
        "variant": family,
        "num_experts": str(cfg.num_experts),
        "num_experts_per_tok": str(cfg.num_experts_per_tok),
        "moe_intermediate_size": str(cfg.moe_intermediate_size),
        "shared_expert_intermediate_size": str(cfg.shared_expert_intermediate_size),
        "norm_topk_prob": str(cfg.norm_topk_prob),
        "decoder_sparse_step": str(cfg.decoder_sparse_step),
        "mlp_only_layers": ",".join(map(str, cfg.mlp_only_layers)),
        "sparse_layers": ",".join(map(str, sparse)),
        "dense_layers": ",".join(map(str, dense)),
        "output_router_logits": str(cfg.output_router_logits),
        "router_aux_loss_coef": str(cfg.router_aux_loss_coef),
        "sparse_layer_rule": "layer i is sparse iff (i not in mlp_only_layers) and (num_experts > 0 and "
                             "(i + 1) % decoder_sparse_step == 0); else the dense SwiGLU MLP of width intermediate_size",
        "moe_semantics": "x = post_attention_layernorm(h) viewed [B*T, C]; router_logits = x @ mlp.gate.weight^T "
                         "[B*T, E] (no bias); p = softmax(router_logits) in float32; (w, sel) = torch.topk(p, k) "
                         "(descending); " + ("w /= sum(w) (norm_topk_prob true); " if cfg.norm_topk_prob else
                                             "w NOT renormalised (norm_topk_prob false); ") +
                         "y = sum_j w[:, j] * expert_{sel[:, j]}(x), expert_e = mlp.experts.{e}.down_proj(silu("
                         "gate_proj(x)) * up_proj(x)) of width moe_intermediate_size; " +
                         ("y += sigmoid(x @ mlp.shared_expert_gate.weight^T [1, C]) * shared_expert(x), shared_expert "
                          "= mlp.shared_expert.{gate,up,down}_proj of width shared_expert_intermediate_size; "
                          if shared else "no shared expert; ") +
                         "then the residual add. The router gets gradient through w only (sel carries none); no "
                         "capacity, no token dropping, no z-loss",
        "aux_loss_formula": "load_balancing_loss_func (Switch Transformer eq. 4-6, no attention mask): Z = the router "
                            "logits of all sparse layers concatenated [L_s*B*T, E] (layer-major); P = softmax(Z); "
                            "sel = topk(P, k).indices; f[j, e] = mean over rows of one_hot(sel)[:, j, e]; "
                            "Pbar[e] = mean over rows of P[:, e]; aux = E * sum_{j,e} f[j, e] * Pbar[e] = E * sum_e "
                            "(#assignments to e / (L_s*B*T)) * Pbar[e]; pooled over the layers (not a sum of per-layer "
                            "terms); balanced routing gives k. Added to the loss (times router_aux_loss_coef) only "
                            "with output_router_logits true: false here, so loss/grads/train.* are of the plain LM loss",
        "aux_loss": "aux_loss [1]: the aux_loss_formula value at the initial weights on the golden batch (not in the "
                    "loss); train.aux_losses [steps]: the same at the weights before update s (as train.losses)",
        "moe_records": "moe.layer{i}.router_logits [B*T, E] float32, moe.layer{i}.routing_weights [B*T, k] float32 "
                       "(w after the optional renormalisation), moe.layer{i}.experts [B*T, k] int32 (sel, descending "
                       "p): the first forward's, for each sparse layer i",
        "router_margin": f"{margin:.3e}: the least gap between adjacent sorted router logits among each token's k + 1 "
                         f"largest, over every sparse layer of every forward written here (logits64, the 10 steps); "
                         f"asserted > {ROUTER_MARGIN:g}; every expert gets tokens in every layer at every step",
        "init": MOE_INIT,
        "weight_layout": "HF names; nn.Linear weights [out, in], y = x @ W^T + b; embed_tokens [V, C]; lm_head [V, C]; "
                         "mlp.gate.weight [E, C]; mlp.experts.{e}.gate_proj/up_proj.weight [moe_intermediate_size, C], "
                         "down_proj [C, moe_intermediate_size]" +
                         ("; mlp.shared_expert.gate_proj/up_proj.weight [shared_expert_intermediate_size, C], "
                          "down_proj [C, shared_expert_intermediate_size]; mlp.shared_expert_gate.weight [1, C]"
                          if shared else "") + ("; q_norm/k_norm weights [head_dim]" if cfg.qk_norm else ""),
        "weight_decay_applies_to": "2-D tensors only (embed_tokens, lm_head, every *_proj weight, mlp.gate.weight"
                                   + (", mlp.shared_expert_gate.weight" if shared else "") +
                                   "); 0 for the RMSNorm weights and the biases",
    }


def gemma3_metadata(cfg, model):
    """gemma3's metadata: its own semantics, init, layout and RoPE text (replacing the dense keys of those names, in
    place), then its keys (appended)."""
    s32 = model.model.embed_tokens.embed_scale.item()
    W = cfg.sliding_window
    return {
        "hidden_act": "gelu_pytorch_tanh",
        "semantics": "Hugging Face modeling_gemma3.py (Gemma3ForCausalLM, eager), tools/torch_hf_gemma3.py: "
                     "x = embed_tokens.weight[ids] * embed_scale; per layer x = x + post_attention_layernorm("
                     "self_attn(input_layernorm(x))), then x = x + post_feedforward_layernorm(mlp("
                     "pre_feedforward_layernorm(x))); logits = model.norm(x) @ embed_tokens.weight^T (tied, NOT "
                     "scaled). Gemma3RMSNorm(x) = (h * rsqrt(mean(h^2) + eps)) * (1 + w) with h = x in float32 and "
                     "1 + w rounded to float32 first (w an offset). Attention: q = q_norm(q_proj(x) per head), k = "
                     "k_norm(k_proj(x) per head) (Gemma3RMSNorm over head_dim, weight [head_dim] shared by the heads), "
                     "v plain; RoPE of the layer's type; repeat_kv; scores = (q k^T) * query_pre_attn_scalar**-0.5 "
                     "(float32); additive finfo.min mask (attention_mask_rule); softmax float32; o_proj; no biases, "
                     "no softcapping. MLP down(gelu_tanh(gate(x)) * up(x)), gelu_tanh = "
                     "torch.nn.functional.gelu(x, approximate='tanh')",
        "init": GEMMA3_INIT,
        "generator": "tools/make_family_golden.py (model: tools/torch_hf_gemma3.py, RoPE: tools/hf_rope_reference.py)",
        "weight_layout": "HF names; nn.Linear weights [out, in]; embed_tokens [V, C] (also the head); per layer "
                         "self_attn.q_proj [H*head_dim, C], k_proj/v_proj [KV*head_dim, C], o_proj [C, H*head_dim], "
                         "self_attn.q_norm/k_norm [head_dim], mlp.gate_proj/up_proj [F, C], down_proj [C, F], "
                         "input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, "
                         "post_feedforward_layernorm [C]; model.norm [C]; every norm weight an offset (scale 1 + w)",
        "weight_decay_applies_to": "2-D tensors only (embed_tokens, every *_proj weight); 0 for the Gemma3RMSNorm "
                                   "weights (the four per-layer norms, q_norm, k_norm, model.norm)",
        "rope_inv_freq": "rope.inv_freq: the full_attention layers' float32 inv_freq (rope_theta, rope_scaling linear: "
                         "default inv_freq / factor); rope.inv_freq_local: the sliding_attention layers' "
                         "(rope_local_base_freq, default RoPE, unscaled); cos = cos(pos*inv_freq) * attention scaling "
                         "(1.0 for both)",
        "variant": "gemma3",
        "hidden_activation": "gelu_pytorch_tanh",
        "layer_types": ",".join(cfg.layer_types),
        "layer_types_rule": "config layer_types if present, else layer i is 'sliding_attention' if (i + 1) % "
                            "sliding_window_pattern else 'full_attention' (Gemma3TextConfig)",
        "sliding_window": str(W),
        "attention_mask_rule": f"full_attention: key j visible to query i iff j <= i; sliding_attention: iff j <= i "
                               f"and j > i - sliding_window (masking_utils sliding_window_overlay: kv_idx > q_idx - "
                               f"sliding_window), i.e. masked iff j <= i - sliding_window: a query sees itself and the "
                               f"{W - 1} keys before it",
        "rope_local_base_freq": str(float(cfg.hf["rope_local_base_freq"])),
        "rope_attention_scaling_local": str(model.model.attention_scaling_local),
        "query_pre_attn_scalar": str(cfg.query_pre_attn_scalar),
        "attention_scale": f"{cfg.query_pre_attn_scalar}**-0.5 = {cfg.query_pre_attn_scalar ** -0.5!r}, float32 "
                           f"{torch.tensor(cfg.query_pre_attn_scalar ** -0.5).item()!r} (head_dim**-0.5 would be "
                           f"{cfg.head_dim ** -0.5!r})",
        "embed_scale": f"torch.tensor(hidden_size**0.5) = float32 {s32!r} (sqrt({cfg.hidden_size}) = "
                       f"{cfg.hidden_size ** 0.5!r}), cast to the weight's dtype; not applied to the tied head",
        "norm_weight": "offset: Gemma3RMSNorm multiplies by (1 + weight); weight 0 is the plain RMSNorm",
        "final_logit_softcapping": "None",
        "attn_logit_softcapping": "None",
    }


def search_seeds(variant, first, count):
    """--search: a trial run of `variant` for each of `count` seeds from `first` (nothing kept); prints which keep
    the router margins and the experts fed, and the pre-clip norms (how SEED and MAX_NORM were picked)."""
    import contextlib
    import io
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(first, first + count):
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    r = make_family_golden(variant, tmp, MAX_NORM[variant], seed=seed, search=True)
                margin = "none (dense)" if r["margin"] is None else f"{r['margin']:.2e}"
                print(f"seed {seed}: ok, router margin {margin}, grad norms (max_norm {MAX_NORM[variant]}) "
                      f"{' '.join(f'{n:.4f}' for n in r['norms'])}, losses {' '.join(f'{x:.4f}' for x in r['losses'])}")
            except AssertionError as e:
                print(f"seed {seed}: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden",
                                                  "families"))
    ap.add_argument("--only", nargs="*", choices=VARIANTS, help="write these variants only (default: all)")
    ap.add_argument("--no-self-checks", action="store_true")
    ap.add_argument("--search", nargs=3, metavar=("VARIANT", "FIRST_SEED", "COUNT"),
                    help="try COUNT seeds from FIRST_SEED for VARIANT: which keep the router margins (how SEED was picked)")
    args = ap.parse_args()
    if args.search:
        return search_seeds(args.search[0], int(args.search[1]), int(args.search[2]))
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    if not args.no_self_checks:
        print("self checks")
        self_checks()
    summary = {}
    for fam in (args.only or VARIANTS):
        print(f"{fam} ({CONFIGS[fam]['architectures'][0]})")
        summary[fam] = make_family_golden(fam, out, MAX_NORM[fam])
    print("summary")
    for fam, s in summary.items():
        print(f"  {fam:6s} loss step 1 {s['loss1']:.6f}  step 10 {s['loss10']:.6f}  max_norm {MAX_NORM[fam]}  "
              f"clipped steps {s['clipped']}  ({s['size']} bytes)"
              + (f"  aux step 1 {s['aux'][0]:.6f}  router margin {s['margin']:.2e}" if s["aux"] else ""))


if __name__ == "__main__":
    main()
