#!/usr/bin/python3
"""Golden files for Hugging Face's DeepSeek-V2 and DeepSeek-V3 causal LMs (multi-head latent attention, DeepSeekMoE),
from the plain-torch reference tools/torch_hf_deepseek.py (its docstring names the transcribed files and commits and
states the exact arithmetic), in the format of tools/make_family_golden.py's MoE goldens.

Run with Debian's Python, from the repository root:

    /usr/bin/python3 tools/make_deepseek_golden.py [--out tests/golden/families] [--only VARIANT ...]
    /usr/bin/python3 tools/make_deepseek_golden.py --search VARIANT FIRST_SEED COUNT   (how SEED / MAX_NORM were picked)

Writes, for VARIANT in deepseek_v2_lite, deepseek_v3: tests/golden/families/VARIANT/config.json (the keys the released
DeepSeek-V2-Lite / DeepSeek-V3 config.json files have, as public copies quote them: a DeepSeek-V3 config.json quoted in
an issue (its poster removed quantization_config), DeepSeek-V2-Lite's quoted in a C++ test without bookkeeping keys and
printed in a training log; tiny sizes, torch_dtype float32; auto_map (remote code), quantization_config and
transformers_version left out; V3's num_nextn_predict_layers 0, as no MTP layer is modelled (HF drops them too); the
"type": "yarn" spelling of rope_scaling kept) and tests/golden/families/VARIANT.safetensors with
make_family_golden.py's keys:
weights.<HF name>, tokens [B, T+1], logits64.tokens / logits64.logits, rope.inv_freq, logits [B*T, V], loss, grads.*,
train.lr / losses / grad_norms (10 AdamW steps, warmup + cosine, clipping on some steps), train.final.<name>, aux_loss
and train.aux_losses (recorded only), moe.layer{i}.router_logits / routing_weights / experts (step 1, each sparse layer),
metadata hf_config; and these:
  mla.layer0.q [B*T, H, Dqk], .k [B*T, H, Dqk] (after RoPE; k's last Dr columns = the shared k_pe), .v [B*T, H, Dv],
      .compressed_kv [B*T, kv_lora_rank] (after kv_a_layernorm), .k_pe [B*T, Dr] (after RoPE), .attn_out [B*T, H*Dv]
      (before o_proj): layer 0 of the step-1 forward (tokens[:, :T]); V2's q/k RoPE columns in the interleaved layout,
      V3's in the half-split layout (see rope_layout)
  train.aux_losses_per_layer [steps, L_sparse]
  deepseek_v3 only: buffers.model.layers.{i}.mlp.gate.e_score_correction_bias [E] (initial; a buffer: no grads.* key),
      moe.layer{i}.group_scores [B*T, n_group] (step 1), train.tokens_per_expert.layer{i} [steps, E] (the counts of
      step s), train.expert_bias.layer{i} [steps, E] (the bias after the update that follows step s, used by step s+1)

Sizes (the brief's): vocab 96, hidden 64, 3 layers, first_k_dense_replace 1 (layer 0 dense, intermediate_size 96),
4 heads (= key/value heads), kv_lora_rank 32, qk_nope_head_dim 16, qk_rope_head_dim 8, v_head_dim 16, n_shared_experts 1,
max_position_embeddings 64, rope_theta 10000, rms_norm_eps 1e-6, untied lm_head, B 2, T 32.
  deepseek_v2_lite: q_lora_rank null, 4 experts, top-2, moe_intermediate_size 32, greedy, n_group 1, topk_group 1,
      norm_topk_prob false, routed_scaling_factor 1.0, softmax; yarn {factor 4, original_max_position_embeddings 16,
      mscale 0.707, mscale_all_dim 0.707, beta_fast 32, beta_slow 1} (T 32 and logits64 run past the original 16)
  deepseek_v3: q_lora_rank 24, 8 experts, top-2, n_group 4, topk_group 2, noaux_tc, sigmoid, norm_topk_prob true,
      routed_scaling_factor 2.5, default RoPE, e_score_correction_bias N(0, 0.05) initially, Megatron's expert-bias
      update on (rate 1e-3); moe_intermediate_size 16, NOT 32: with 32 the weights and gradients alone
      (2 x 186728 floats) exceed the 1.5 MB bound
Initialisation (INIT): make_family_golden.py's rules with MLA's q/k-path projections N(0, 0.1) and embeddings
N(0, 0.1) instead of 0.02 (with 0.02 the position-averaged attention outputs dominate every token's hidden state and
the routers starve experts whatever the seed).
Asserted: router margins in every sparse layer of every forward written (logits64 and the 10 steps), 1e-4 in logit
units as the Qwen MoE goldens: V2 greedy, adjacent sorted top-(k+1) router logits > 1e-4; V3, adjacent sorted top-(k+1)
biased scores b > 1e-4/4 (a logit moved by d moves a sigmoid by <= d/4), topk_group-th vs next group score > 1e-4/2,
k-th chosen b > 1e-4/4 (so HF's 0.0 masking selects as -inf masking would); every expert gets tokens in every layer at
every step, every parameter has a gradient, clipping on some steps but not all, size < 1.5 MB.
Self-checks (before writing): names/order/shapes and refused configs; yarn inv_freq and attention factor == an
independent transcription of DeepSeek's DeepseekV2YarnRotaryEmbedding, softmax_scale value; RoPE: V2's complex form
[..., PERM] == rotate_half on x[..., PERM] == V3's interleave path; V3 rope_interleave true == false with permuted
q_b_proj / kv_a_proj_with_mqa rows; MLA == the absorbed form over the latent (what a kv_lora_rank + qk_rope_head_dim
cache computes); MoE blocks == per-token Python routing (greedy, group_limited_greedy, noaux_tc; outputs, gradients);
Megatron bias update; seq_aux loss; float64 finite differences of both variants; KV-cache sizes printed.

This file writes the goldens (make_deepseek_golden, the router margins, the metadata, --search); the variants'
configs, constants and initialisation are in tools/deepseek_golden_configs.py, the self-checks in
tools/deepseek_golden_checks.py.
"""
import os

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
from make_family_golden import HP, ROUTER_MARGIN, config_text  # noqa: E402
import torch_hf_deepseek as ds  # noqa: E402
# The variants' configs, constants and initialisation, and the self-checks.
from deepseek_golden_configs import (BIAS_RATE, C, CONFIGS, EXPERT_BIAS, FINAL, H, INIT, L, MAX_NORM, P,  # noqa: E402
                                     ROUTER_STD, SEED, V, VARIANTS, init_golden_, kv_cache_meta)
from deepseek_golden_checks import self_checks  # noqa: E402

torch.set_num_threads(2)


def routing_margins(model):
    """Over the sparse layers of the last forward: the least adjacent gap among each token's k + 1 largest scores the
    top-k is decided on (V2 greedy: the router logits, as the Qwen MoE goldens, softmax being monotonic; V3: the
    biased sigmoid scores b), the least gap between the topk_group-th and the next group score (inf without groups),
    the least k-th chosen score (inf for V2 greedy)."""
    cfg = model.cfg
    k, TG = cfg.num_experts_per_tok, cfg.topk_group
    expert, group, kth = math.inf, math.inf, math.inf
    for _, moe in model.sparse_blocks():
        r = moe.last_route
        grouped = r["group_scores"] is not None
        basis = r["choice"] if grouped else r["logits"].detach()
        top = torch.sort(basis.double(), dim=-1, descending=True).values[:, :k + 1]
        expert = min(expert, (top[:, :-1] - top[:, 1:]).min().item())
        if grouped:
            kth = min(kth, top[:, k - 1].min().item())
            if TG < cfg.n_group:
                g = torch.sort(r["group_scores"].detach().double(), dim=-1, descending=True).values
                group = min(group, (g[:, TG - 1] - g[:, TG]).min().item())
    return dict(expert=expert, group=group, kth=kth)


def margin_bounds(model):
    """The least margins asserted: ROUTER_MARGIN (1e-4) in logit units. A logit moved by d moves a sigmoid score by at
    most d/4, a V3 group score (sum of two) by d/2: V3's bounds are 1e-4/4 on b and on the k-th chosen b, 1e-4/2 on
    the group scores. V2 greedy: 1e-4 on the logits (as the Qwen MoE goldens)."""
    if model.cfg.model_type == "deepseek_v3":
        return dict(expert=ROUTER_MARGIN / 4, group=ROUTER_MARGIN / 2, kth=ROUTER_MARGIN / 4)
    return dict(expert=ROUTER_MARGIN, group=ROUTER_MARGIN / 2, kth=ROUTER_MARGIN / 4)


def check_margins(model, where):
    m, bound = routing_margins(model), margin_bounds(model)
    for key, what in (("expert", "expert scores"), ("group", "group scores"), ("kth", "k-th chosen score")):
        assert m[key] > bound[key], f"{where}: {what} margin {m[key]:.2e} <= {bound[key]:.1e} (re-seed)"
    return m


def make_deepseek_golden(variant, outdir, max_norm, seed=None, search=False):
    hf_cfg = CONFIGS[variant]
    vdir = os.path.join(outdir, variant)
    os.makedirs(vdir, exist_ok=True)
    text = config_text(hf_cfg)
    with open(os.path.join(vdir, "config.json"), "w") as f:
        f.write(text)
    hp = dict(HP, max_norm=max_norm)
    seed = SEED[variant] if seed is None else seed
    gen = torch.Generator().manual_seed(seed)
    bias_on = EXPERT_BIAS[variant]
    model = ds.DeepseekForCausalLM(json.loads(text), enable_expert_bias=bias_on)   # built from what was written
    cfg = model.cfg
    init_golden_(model, gen, ROUTER_STD[variant])
    B, T = hp["B"], hp["T"]
    tokens = make_tokens(gen, B, T, V)
    inputs, targets = tokens[:, :T], tokens[:, 1:]
    tokens64 = torch.randint(0, V, (1, P), generator=gen, dtype=torch.int64)
    sparse = [i for i, _ in model.sparse_blocks()]
    E = cfg.n_routed_experts
    margins = []

    out = {}
    for name, p in model.named_parameters():
        out[f"weights.{name}"] = p.detach().clone()
    for name, b in model.named_buffers():
        out[f"buffers.{name}"] = b.detach().clone()
    out["tokens"] = tokens.to(torch.int32)
    with torch.no_grad():
        logits64, _ = model(tokens64)
    margins.append(check_margins(model, f"{variant} logits64"))
    out["logits64.tokens"] = tokens64.to(torch.int32)
    out["logits64.logits"] = logits64.reshape(P, V).clone()
    out["rope.inv_freq"] = model.inv_freq.clone()

    opt, params = golden_adamw(model, hp)
    attn0 = model.model.layers[0].self_attn
    lrs, losses, norms, auxs, biases, counts = [], [], [], [], [], []
    for s in range(1, hp["total_steps"] + 1):
        opt.zero_grad(set_to_none=True)
        attn0.record = s == 1
        logits, loss = model(inputs, targets)
        attn0.record = False
        margins.append(check_margins(model, f"{variant} step {s}"))
        for i, moe in model.sparse_blocks():
            hit = torch.bincount(moe.last_route["idx"].reshape(-1), minlength=E)
            assert (hit > 0).all(), f"{variant} step {s} layer {i}: an expert without tokens {hit.tolist()}"
        auxs.append([a.item() for a in model.aux_losses(B, T)])
        loss.backward()
        if s == 1:
            out["logits"] = logits.detach().reshape(B * T, V).clone()
            out["loss"] = loss.detach().reshape(1).clone()
            for name, p in model.named_parameters():
                assert p.grad is not None, f"{variant}: {name} has no gradient"
                out[f"grads.{name}"] = p.grad.detach().clone()
            out["aux_loss"] = torch.tensor([sum(auxs[0])], dtype=torch.float32)
            for i, moe in model.sparse_blocks():
                r = moe.last_route
                out[f"moe.layer{i}.router_logits"] = r["logits"].detach().float().clone()
                out[f"moe.layer{i}.routing_weights"] = r["w"].detach().float().clone()
                out[f"moe.layer{i}.experts"] = r["idx"].to(torch.int32)
                if r["group_scores"] is not None:
                    out[f"moe.layer{i}.group_scores"] = r["group_scores"].detach().float().clone()
            for key, t in attn0.records.items():
                out[f"mla.layer0.{key}"] = t.detach().float().clone()
            loss64, gerr = f64_grad_error(model, inputs, targets)
            print(f"  float64 cross-check at init: loss64 {loss64:.9f} (f32 {loss.item():.9f}), "
                  f"max grad err / max|grad| = {gerr:.2e}")
            assert gerr < 1e-3, gerr
        norm, lr = golden_step(opt, params, s, hp)
        if bias_on:
            counts.append(torch.stack([moe.tokens_per_expert.clone() for _, moe in model.sparse_blocks()]))
            biases.append(model.update_expert_bias(BIAS_RATE).clone())
        lrs.append(lr)
        losses.append(loss.item())
        norms.append(norm.item())
        m = margins[-1]
        print(f"  step {s:2d}  lr {lr:.6e}  loss {loss.item():.6f}  grad_norm {norm.item():.6f}  "
              f"aux {sum(auxs[-1]):.6f}  margins expert {m['expert']:.2e} group {m['group']:.2e} kth {m['kth']:.2e}"
              f"{'  CLIPPED' if norm.item() > hp['max_norm'] else ''}")
    clipped = [s + 1 for s, n in enumerate(norms) if n > hp["max_norm"]]
    least = {key: min(m[key] for m in margins) for key in margins[0]}
    if search:
        return dict(norms=norms, margins=least)
    assert 0 < len(clipped) < len(norms), f"{variant}: max_norm should clip on some steps but not all"
    assert all(abs(n / hp["max_norm"] - 1) > 1e-3 for n in norms), f"{variant}: a norm is too close to max_norm"

    out["train.lr"] = torch.tensor(lrs, dtype=torch.float32)
    out["train.losses"] = torch.tensor(losses, dtype=torch.float32)
    out["train.grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    out["train.aux_losses"] = torch.tensor([sum(a) for a in auxs], dtype=torch.float32)
    out["train.aux_losses_per_layer"] = torch.tensor(auxs, dtype=torch.float32)
    if bias_on:
        for j, i in enumerate(sparse):
            out[f"train.tokens_per_expert.layer{i}"] = torch.stack([c[j] for c in counts]).float()
            out[f"train.expert_bias.layer{i}"] = torch.stack([b[j] for b in biases]).float()
    sd = dict(model.named_parameters())
    finals = [n for n in FINAL if n in sd]
    for name in finals:
        out[f"train.final.{name}"] = sd[name].detach().clone()

    meta = metadata(variant, model, hp, text, seed, finals, clipped, least)
    path = os.path.join(outdir, f"{variant}.safetensors")
    write_safetensors(path, out, meta)
    size = os.path.getsize(path)
    assert size < 1_500_000, f"{path}: {size} bytes"
    return dict(loss1=losses[0], loss10=losses[-1], clipped=clipped, norms=norms, size=size, aux=auxs,
                margins=least, bias=biases[-1] if biases else None)


def metadata(variant, model, hp, text, seed, finals, clipped, least):
    cfg, hf_cfg = model.cfg, CONFIGS[variant]
    v3 = cfg.model_type == "deepseek_v3"
    sparse = [i for i, _ in model.sparse_blocks()]
    bounds = margin_bounds(model)
    tiny_kv, kv_text = kv_cache_meta(cfg)
    rs = hf_cfg.get("rope_scaling")
    meta = {k: str(v) for k, v in dict(vocab_size=V, hidden_size=C, num_layers=L, num_heads=H, num_kv_heads=H,
                                        intermediate_size=hf_cfg["intermediate_size"],
                                        rope_theta=float(hf_cfg["rope_theta"]), rms_norm_eps=hf_cfg["rms_norm_eps"],
                                        max_position_embeddings=P).items()}
    meta.update({k: str(v) for k, v in hp.items()})
    perm = ds.rope_perm(cfg.qk_rope_head_dim)
    meta.update({
        "arch": hf_cfg["architectures"][0], "model_type": hf_cfg["model_type"], "variant": variant, "hf_config": text,
        "tie_word_embeddings": str(cfg.tie_word_embeddings), "hidden_act": "silu",
        "q_lora_rank": str(cfg.q_lora_rank), "kv_lora_rank": str(cfg.kv_lora_rank),
        "qk_nope_head_dim": str(cfg.qk_nope_head_dim), "qk_rope_head_dim": str(cfg.qk_rope_head_dim),
        "qk_head_dim": str(cfg.qk_head_dim), "v_head_dim": str(cfg.v_head_dim), "head_dim": str(cfg.qk_rope_head_dim),
        "softmax_scale": repr(cfg.softmax_scale),
        "softmax_scale_formula": "qk_head_dim**-0.5" + (
            " * mscale**2, mscale = 0.1 * mscale_all_dim * ln(factor) + 1 (DeepSeek's yarn_get_mscale(factor, "
            "mscale_all_dim); modeling_deepseek_v3.py; in modeling_deepseek_v2.py since transformers PR #47435, "
            "absent before); the Python double, multiplied into the float32 scores (rounded to float32)"
            if rs else " (no rope scaling: no mscale)"),
        "rope_type": (rs or {}).get("type", "default"), "rope_scaling": json.dumps(rs, sort_keys=True),
        "rope_attention_scaling": repr(model.attention_scaling), "rope.attention_scaling": repr(model.attention_scaling),
        "rope_inv_freq": "rope.inv_freq: float32 [qk_rope_head_dim/2] from hf_rope_reference (dim = qk_rope_head_dim)"
                         + ("; yarn: low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), dim-1), "
                            "extrapolation weight 1 - clamp((i - low)/(high - low), 0, 1) over i < dim/2; here index 0 "
                            "kept, 1..3 divided by factor; attention_factor = mscale(f, mscale)/mscale(f, "
                            "mscale_all_dim) = 1.0" if rs else ""),
        "rope_layout": ("interleaved: pairs (2i, 2i+1) of q_pe/k_pe rotated by frequency i (HF's complex "
                        "apply_rotary_emb: freqs_cis = polar(1, pos*inv_freq) * attention_scaling); the "
                        "mla.layer0.q/k rope columns in this layout" if not v3 else
                        "rope_interleave (class default true): q_pe/k_pe permuted by PERM, then half-split "
                        "x*cos + rotate_half(x)*sin, cos/sin = cat(freqs, freqs); the mla.layer0.q/k rope columns in "
                        "this permuted (half-split) layout"),
        "rope_perm": ",".join(map(str, perm)),
        "rope_perm_relation": "PERM = evens then odds; interleaved_rope(x)[..., PERM] == rotate_half_rope(x[..., PERM]); "
                              "equivalently permute the q_pe rows of q_proj/q_b_proj (each head's last Dr rows) and the "
                              "k_pe rows of kv_a_proj_with_mqa (its last Dr rows) by PERM and use rotate_half RoPE: "
                              "same attention scores",
        "mla_semantics": "q = " + ("q_proj(x)" if cfg.q_lora_rank is None else
                                   "q_b_proj(q_a_layernorm(q_a_proj(x)))") +
                         " viewed [B,T,H,Dqk] -> q_nope [:Dn], q_pe [Dn:]; kv_a_proj_with_mqa(x) = [c | k_pe] "
                         "([kv_lora_rank | Dr]), k_pe ONE head shared by all heads; kv_b_proj(kv_a_layernorm(c)) viewed "
                         "[B,T,H,Dn+Dv] -> k_nope, v; RoPE on q_pe and k_pe; query = cat(q_nope, q_pe), key = "
                         "cat(k_nope, k_pe broadcast); eager causal attention, scores * softmax_scale, softmax float32; "
                         "[B,T,H*Dv] -> o_proj. q_a_layernorm / kv_a_layernorm: RMSNorm with eps 1e-6 (HF passes no "
                         "eps: not rms_norm_eps); no biases (attention_bias false)",
        "mla_records": "mla.layer0.{q,k} [B*T,H,Dqk] after RoPE, v [B*T,H,Dv], compressed_kv [B*T,kv_lora_rank] "
                       "after kv_a_layernorm, k_pe [B*T,Dr] after RoPE, attn_out [B*T,H*Dv] before o_proj; rows b*T+t; "
                       "layer 0 of the step-1 forward",
        "kv_cache_floats_per_token_per_layer_mla": str(tiny_kv["mla"]),
        "kv_cache_floats_per_token_per_layer_hf_expanded": str(tiny_kv["hf_expanded"]),
        "kv_cache_floats_per_token_per_layer_mha": str(tiny_kv["mha"]),
        "kv_cache": kv_text,
        "seed": str(seed), "format": "gridformer golden v1",
        "generator": "tools/make_deepseek_golden.py (model: tools/torch_hf_deepseek.py, RoPE: "
                     "tools/hf_rope_reference.py)",
        "torch_version": torch.__version__, "compute_dtype": "float32",
        "inputs": "tokens[:, :T]", "targets": "tokens[:, 1:]",
        "tokens": f"int32 ids in [0, {V}); 0 and {V - 1} appear as inputs and as targets",
        "loss": "mean cross-entropy over all B*T positions (the plain LM loss; no aux loss); logits = norm(x) @ "
                "lm_head.weight^T",
        "logits_layout": "[B*T, V], row b*T + t",
        "logits64": f"logits64.tokens [1, {P}] int32, logits64.logits [{P}, V]: initial weights, positions 0..{P - 1}",
        "weight_layout": "HF names; nn.Linear weights [out, in], y = x @ W^T; embed_tokens / lm_head [V, C]; "
                         "mlp.gate.weight [E, C]; experts / shared_experts gate_proj, up_proj [F, C], down_proj [C, F]",
        "init": INIT,
        "optimizer": "torch.optim.AdamW (foreach=False): p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g; "
                     "p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)",
        "weight_decay_applies_to": "2-D tensors only (embeddings, lm_head, every *_proj weight, mlp.gate.weight); 0 for "
                                   "the RMSNorm weights; e_score_correction_bias is a buffer, not optimised",
        "grad_clip": "as torch.nn.utils.clip_grad_norm_: norm = global L2 over all grads, accumulated in float64; "
                     "g *= min(1, max_norm / (norm + 1e-6)) (applied always)",
        "lr_formula": "s<=warmup: lr*s/warmup; else p=(s-warmup)/(total-warmup), lr_end + 0.5*(lr-lr_end)*(1+cos(pi*p))",
        "train_steps_description": "train.lr[s-1] = lr at optimizer step s; train.losses[s-1] = loss before update s; "
                                   "train.grad_norms = pre-clip norm; train.final.* = weights after all steps",
        "train_final": ",".join(finals), "num_clipped_steps": str(len(clipped)),
        "clipped_steps": ",".join(map(str, clipped)),
        # MoE
        "n_routed_experts": str(cfg.n_routed_experts), "num_experts_per_tok": str(cfg.num_experts_per_tok),
        "n_shared_experts": str(cfg.n_shared_experts), "moe_intermediate_size": str(cfg.moe_intermediate_size),
        "shared_expert_intermediate_size": str(cfg.moe_intermediate_size * cfg.n_shared_experts),
        "first_k_dense_replace": str(cfg.first_k_dense_replace), "topk_method": cfg.topk_method,
        "n_group": str(cfg.n_group), "topk_group": str(cfg.topk_group), "norm_topk_prob": str(cfg.norm_topk_prob),
        "routed_scaling_factor": repr(cfg.routed_scaling_factor), "scoring_func": "sigmoid" if v3 else "softmax",
        "sparse_layers": ",".join(map(str, sparse)),
        "dense_layers": ",".join(str(i) for i in range(L) if i not in sparse),
        "sparse_layer_rule": "layer i is sparse iff i >= first_k_dense_replace (moe_layer_freq 1); else the SwiGLU "
                             "MLP mlp.{gate,up,down}_proj of width intermediate_size",
        "moe_semantics": "x = post_attention_layernorm(h) [B*T, C]; logits = x.float() @ mlp.gate.weight^T; " + (
            "s = sigmoid(logits); b = s + e_score_correction_bias (selection only); group score = sum of the 2 largest "
            "b in each of n_group groups of E/n_group consecutive experts; keep the topk_group best groups, b of the "
            "others set to 0.0; idx = topk(b, k); w = s[idx] (unbiased); w /= sum(w) + 1e-20 (norm_topk_prob); "
            "w *= routed_scaling_factor; y = sum_j w_j expert_{idx_j}(x) (per expert, index_add_ in float32)"
            if v3 else
            "s = softmax(logits) (float32); (w, idx) = topk(s, k) (greedy); w *= routed_scaling_factor (1.0); NOT "
            "renormalised; y = sum_j w_j expert_{idx_j}(x) (per token, float32)") +
            "; y += shared_experts(x) (SwiGLU of width moe_intermediate_size * n_shared_experts, NO gate); then the "
            "residual add. Gradient reaches the router through w only. moe.layer{i}.experts / routing_weights in "
            "descending order of the score the top-k is taken over (" + ("b" if v3 else "s") + "; HF's topk is "
            "sorted=False: the sum does not depend on the order for k = 2)",
        "aux_loss_formula": "recorded only, NOT in the loss (HF's DeepseekV2/V3 compute no aux loss; DeepSeek's own "
                            "modeling_deepseek.py adds aux_loss_alpha * this per layer in training): per sparse layer, "
                            "per sequence b: f_e = count of e among the sequence's T*k choices / (T*k/E), P_e = mean_t "
                            "p_{t,e}, aux_b = sum_e f_e P_e; aux = mean_b aux_b (seq_aux); p = " +
                            ("s / sum_e s (the V3 paper's normalised sigmoid scores)" if v3 else "softmax(logits)") +
                            "; aux_loss [1] and train.aux_losses [steps] = the sum over the sparse layers, "
                            "train.aux_losses_per_layer [steps, L_sparse]; aux_loss_alpha (" + repr(cfg.aux_loss_alpha) +
                            ") not applied",
        "moe_records": "moe.layer{i}.router_logits [B*T, E] (before the softmax/sigmoid), routing_weights [B*T, k] "
                       "(final, times routed_scaling_factor), experts [B*T, k] int32" +
                       (", group_scores [B*T, n_group]" if v3 else "") + ": step 1, each sparse layer",
        "router_margin": f"least gaps over every sparse layer of every forward written (logits64, the 10 steps): "
                         f"adjacent top-(k+1) " + ("biased sigmoid scores b" if v3 else "router logits") +
                         f" {least['expert']:.3e} (asserted > {bounds['expert']:.1e})" +
                         (f", topk_group-th vs next group score {least['group']:.3e} (> {bounds['group']:.1e}), k-th "
                          f"chosen b {least['kth']:.3e} (> {bounds['kth']:.1e}; so HF's 0.0 masking selects as -inf "
                          f"masking would)" if v3 else "") +
                         f"; bounds = 1e-4 in logit units (a logit moved by d moves a sigmoid by <= d/4, a group score "
                         f"by <= d/2); every expert gets tokens in every layer at every step",
    })
    if v3:
        meta.update({
            "expert_bias_update": f"Megatron-LM (moe_router_enable_expert_bias, moe_router_bias_update_rate "
                                  f"{BIAS_RATE:g}): after each step's backward (finalize_model_grads, before the "
                                  f"optimizer step; the bias is no parameter), per sparse layer, counts = number of "
                                  f"(token, slot) assignments to each expert in that step's training forward (float32), "
                                  f"bias = bias + sign(sum(counts)/E - counts) * rate in float32 (sign(0) = 0); "
                                  f"forwards without grad (logits64) count nothing",
            "expert_bias_records": "buffers.model.layers.{i}.mlp.gate.e_score_correction_bias: initial bias; "
                                   "train.tokens_per_expert.layer{i} [steps, E]: counts of step s; "
                                   "train.expert_bias.layer{i} [steps, E]: bias after the update following step s",
            "expert_bias_rate": repr(BIAS_RATE),
            "group_score_note": "HF: group score = sum of the 2 largest b of the group whatever k (here both experts "
                                "of a 2-expert group); Megatron-LM's group_limited_topk sums the k/topk_group largest "
                                "(here 2/2 = 1: the max), which would route differently; HF's is used",
        })
    return meta


def search_seeds(variant, first, count):
    import contextlib
    import io
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(first, first + count):
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    r = make_deepseek_golden(variant, tmp, MAX_NORM[variant], seed=seed, search=True)
                m = r["margins"]
                print(f"seed {seed}: ok, margins expert {m['expert']:.2e} group {m['group']:.2e} kth {m['kth']:.2e}, "
                      f"grad norms {' '.join(f'{n:.4f}' for n in r['norms'])}")
            except AssertionError as e:
                print(f"seed {seed}: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden",
                                                  "families"))
    ap.add_argument("--only", nargs="*", choices=VARIANTS)
    ap.add_argument("--no-self-checks", action="store_true")
    ap.add_argument("--search", nargs=3, metavar=("VARIANT", "FIRST_SEED", "COUNT"))
    args = ap.parse_args()
    if args.search:
        return search_seeds(args.search[0], int(args.search[1]), int(args.search[2]))
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    if not args.no_self_checks:
        print("self checks")
        self_checks()
    summary = {}
    for variant in (args.only or VARIANTS):
        print(f"{variant} ({CONFIGS[variant]['architectures'][0]})")
        summary[variant] = make_deepseek_golden(variant, out, MAX_NORM[variant])
    print("summary")
    for variant, s in summary.items():
        m = s["margins"]
        print(f"  {variant:16s} loss step 1 {s['loss1']:.6f}  step 10 {s['loss10']:.6f}  max_norm {MAX_NORM[variant]}  "
              f"clipped steps {s['clipped']}  aux step 1 {sum(s['aux'][0]):.6f}  margins expert {m['expert']:.2e} "
              f"group {m['group']:.2e} kth {m['kth']:.2e}  ({s['size']} bytes)")


if __name__ == "__main__":
    main()
