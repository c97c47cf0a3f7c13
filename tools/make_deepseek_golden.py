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
import hf_rope_reference  # noqa: E402
import torch_hf_deepseek as ds  # noqa: E402

torch.set_num_threads(2)

V, C, L, H, P = 96, 64, 3, 4, 64
BIAS_RATE = 1e-3            # Megatron's moe_router_bias_update_rate default
BIAS_INIT_STD = 0.05

# Key for key as DeepSeek-V2-Lite's / DeepSeek-V3's config.json (auto_map, quantization_config and transformers_version
# left out); written with sort_keys as save_pretrained does.
_COMMON = dict(attention_bias=False, attention_dropout=0.0, aux_loss_alpha=0.001, first_k_dense_replace=1,
               hidden_act="silu", hidden_size=C, initializer_range=0.02, intermediate_size=96, kv_lora_rank=32,
               max_position_embeddings=P, moe_layer_freq=1, n_shared_experts=1, num_attention_heads=H,
               num_experts_per_tok=2, num_hidden_layers=L, num_key_value_heads=H, pretraining_tp=1, qk_nope_head_dim=16,
               qk_rope_head_dim=8, rms_norm_eps=1e-06, rope_theta=10000, seq_aux=True, tie_word_embeddings=False,
               torch_dtype="float32", use_cache=True, v_head_dim=16, vocab_size=V)
CONFIGS = {
    "deepseek_v2_lite": dict(_COMMON, architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2",
                             bos_token_id=94, eos_token_id=95, moe_intermediate_size=32, n_group=1, n_routed_experts=4,
                             norm_topk_prob=False, q_lora_rank=None,
                             rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 4, "mscale": 0.707,
                                           "mscale_all_dim": 0.707, "original_max_position_embeddings": 16,
                                           "type": "yarn"},
                             routed_scaling_factor=1.0, scoring_func="softmax", topk_group=1, topk_method="greedy"),
    "deepseek_v3": dict(_COMMON, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", bos_token_id=94,
                        eos_token_id=95, ep_size=1, moe_intermediate_size=16, n_group=4, n_routed_experts=8,
                        norm_topk_prob=True, num_nextn_predict_layers=0, q_lora_rank=24, rope_scaling=None,
                        routed_scaling_factor=2.5, scoring_func="sigmoid", topk_group=2, topk_method="noaux_tc"),
}
VARIANTS = tuple(CONFIGS)
EXPERT_BIAS = {"deepseek_v2_lite": False, "deepseek_v3": True}
MAX_NORM = {"deepseek_v2_lite": 1.19, "deepseek_v3": 1.19}
SEED = {"deepseek_v2_lite": 9006, "deepseek_v3": 9121}
# Routers N(0, 0.3) (decisive routing); embeddings N(0, 0.1), not 0.02: with 0.02 the position-averaged attention
# outputs dominate every token's hidden state, the routers see nearly one direction and starve experts.
ROUTER_STD = {"deepseek_v2_lite": 0.3, "deepseek_v3": 0.3}
EMBED_STD = 0.1
FINAL = ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight", "model.layers.0.self_attn.q_proj.weight",
         "model.layers.0.self_attn.q_a_proj.weight", "model.layers.0.self_attn.q_a_layernorm.weight",
         "model.layers.1.self_attn.q_b_proj.weight", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
         "model.layers.1.self_attn.kv_a_layernorm.weight", "model.layers.2.self_attn.kv_b_proj.weight",
         "model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.gate.weight", "model.layers.2.mlp.gate.weight",
         "model.layers.1.mlp.experts.1.gate_proj.weight", "model.layers.2.mlp.experts.3.down_proj.weight",
         "model.layers.1.mlp.shared_experts.up_proj.weight", "model.layers.2.mlp.shared_experts.down_proj.weight")

INIT = ("in named_parameters() order from one generator: RMSNorm weights (input_layernorm, post_attention_layernorm, "
        "q_a_layernorm, kv_a_layernorm, model.norm) 1 + N(0, 0.1); q_proj, q_a_proj, q_b_proj, kv_a_proj_with_mqa, "
        "kv_b_proj weights N(0, 0.1); routers mlp.gate.weight N(0, 0.3); model.embed_tokens.weight N(0, 0.1); expert "
        "e's weights (mlp.experts.{e}.*) N(0, 0.02) * (e + 1) / 2; every other weight (o_proj, dense MLP, shared "
        "experts, lm_head) "
        f"N(0, 0.02); then (deepseek_v3) each sparse layer's e_score_correction_bias N(0, {BIAS_INIT_STD}), layer order")


def init_golden_(model, gen, router_std=0.3):
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith(".mlp.gate.weight"):
                p.copy_(router_std * noise)
            elif name == "model.embed_tokens.weight":
                p.copy_(EMBED_STD * noise)
            elif ".mlp.experts." in name:
                p.copy_(0.02 * (int(name.split(".mlp.experts.")[1].split(".")[0]) + 1) / 2 * noise)
            elif name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(("q_proj.weight", "q_a_proj.weight", "q_b_proj.weight", "kv_a_proj_with_mqa.weight",
                                "kv_b_proj.weight")):
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.02 * noise)
        for _, moe in model.sparse_blocks():
            if hasattr(moe.gate, "e_score_correction_bias"):
                b = moe.gate.e_score_correction_bias
                b.copy_(BIAS_INIT_STD * torch.randn(b.shape, generator=gen))


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


def kv_cache_meta(cfg):
    tiny = ds.kv_cache_floats_per_token(cfg)
    real = {"DeepSeek-V2-Lite": dict(H=16, R=512, Dr=64, Dqk=192, Dv=128, L=27),
            "DeepSeek-V3": dict(H=128, R=512, Dr=64, Dqk=192, Dv=128, L=61)}
    lines = [f"this model, per layer per token: MLA latent kv_lora_rank + qk_rope_head_dim = {tiny['mla']} floats "
             f"({4 * tiny['mla']} B float32); HF's DynamicCache of the expanded keys and values H*(Dqk + Dv) = "
             f"{tiny['hf_expanded']} floats; MHA/GQA with H heads of head_dim Dqk, 2*H*Dqk = {tiny['mha']} floats "
             f"(x{tiny['mha'] / tiny['mla']:.1f} the latent)"]
    for name, r in real.items():
        mla, mha = r["R"] + r["Dr"], 2 * r["H"] * r["Dqk"]
        lines.append(f"{name}: {mla} vs {mha} floats per layer per token (x{mha / mla:.1f}); bf16, all {r['L']} "
                     f"layers: {2 * mla * r['L']} vs {2 * mha * r['L']} bytes per token")
    return tiny, "; ".join(lines)


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


# ----------------------------------------------------------------------------
# self-checks


def tiny(variant, **over):
    return dict(CONFIGS[variant], **over)


def _yarn_deepseek(dim, base, factor, original, beta_fast, beta_slow, mscale, mscale_all_dim):
    """An independent transcription of DeepSeek's DeepseekV2YarnRotaryEmbedding (modeling_deepseek.py)."""
    def corr_dim(rot):
        return (dim * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(base))
    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    freq_extra = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freq_inter = 1.0 / (factor * base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    mask = 1.0 - ramp
    inv = freq_inter * (1 - mask) + freq_extra * mask
    return inv, float(ds.yarn_get_mscale(factor, mscale) / ds.yarn_get_mscale(factor, mscale_all_dim))


def _rope_checks(gen):
    c2 = ds.DeepseekConfig.from_hf(CONFIGS["deepseek_v2_lite"])
    m2 = ds.DeepseekForCausalLM(CONFIGS["deepseek_v2_lite"])
    inv, sc = _yarn_deepseek(8, 10000, 4, 16, 32, 1, 0.707, 0.707)
    assert torch.equal(m2.inv_freq, inv) and m2.attention_scaling == sc == 1.0, (m2.inv_freq, inv, sc)
    base = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.int64).float() / 8))
    assert torch.equal(m2.inv_freq[:1], base[:1]) and torch.allclose(m2.inv_freq[1:], base[1:] / 4, rtol=1e-7, atol=0)
    distinct = dict(CONFIGS["deepseek_v2_lite"]["rope_scaling"], mscale=1.0)
    i3, s3 = hf_rope_reference.inv_freq_and_scaling(dict(CONFIGS["deepseek_v2_lite"], rope_scaling=distinct), 8)
    _, want = _yarn_deepseek(8, 10000, 4, 16, 32, 1, 1.0, 0.707)
    assert abs(s3 - want) < 1e-15 and s3 > 1.0
    mscale = 0.1 * 0.707 * math.log(4) + 1.0
    assert c2.softmax_scale == 24 ** -0.5 * mscale * mscale, c2.softmax_scale
    c3 = ds.DeepseekConfig.from_hf(CONFIGS["deepseek_v3"])
    m3 = ds.DeepseekForCausalLM(CONFIGS["deepseek_v3"])
    assert c3.softmax_scale == 24 ** -0.5 and m3.attention_scaling == 1.0 and torch.equal(m3.inv_freq, base)
    print(f"  self-check yarn (hf_rope_reference == DeepSeek's DeepseekV2YarnRotaryEmbedding, bitwise): inv_freq "
          f"{[f'{v:.9g}' for v in m2.inv_freq.tolist()]}, attention_scaling 1.0 (mscale == mscale_all_dim; {s3:.6f} with "
          f"mscale 1.0); softmax_scale 24**-0.5 * {mscale:.9f}**2 = {c2.softmax_scale:.12g}; V3 default RoPE, 24**-0.5")

    # interleaved (V2's complex form) vs half-split rotate_half after PERM, and V3's interleave path
    d, T = 8, 11
    perm = ds.rope_perm(d)
    assert perm == [0, 2, 4, 6, 1, 3, 5, 7]
    for dt, tol in ((torch.float32, 2e-6), (torch.float64, 1e-6)):
        q = torch.randn(2, 4, T, d, generator=gen, dtype=torch.float64).to(dt)
        k = torch.randn(2, 1, T, d, generator=gen, dtype=torch.float64).to(dt)
        fc = m2.rope(T)
        q2, k2 = ds.apply_rotary_emb_v2(q, k, fc)
        freqs = (m2.inv_freq[None, :, None] @ torch.arange(T)[None, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos().to(dt), emb.sin().to(dt)
        qh, kh = ds.apply_rotary_pos_emb_v3(q[..., perm], k[..., perm], cos, sin, interleave=False)
        qi, ki = ds.apply_rotary_pos_emb_v3(q, k, cos, sin, interleave=True)
        for a, b in ((q2[..., perm], qh), (k2[..., perm], kh), (q2[..., perm], qi), (k2[..., perm], ki)):
            assert (a - b).abs().max().item() < tol, (dt, (a - b).abs().max().item())
        # the pair form, explicitly: (x0 c - x1 s, x0 s + x1 c) with frequency i on pair (2i, 2i+1)
        c_, s_ = cos[:, :, :d // 2], sin[:, :, :d // 2]
        x0, x1 = q[..., 0::2], q[..., 1::2]
        assert (q2[..., 0::2] - (x0 * c_ - x1 * s_)).abs().max().item() < tol
        assert (q2[..., 1::2] - (x0 * s_ + x1 * c_)).abs().max().item() < tol
        # scores invariant
        sc_i = q2 @ k2.transpose(-1, -2)
        sc_h = qh @ kh.transpose(-1, -2)
        assert (sc_i - sc_h).abs().max().item() < 10 * tol
    print(f"  self-check RoPE: V2's complex interleaved form [..., PERM] == rotate_half form on x[..., PERM] == V3's "
          f"rope_interleave path (float32 < 2e-6, float64 < 1e-6: cos/sin are float32), PERM {perm}; pair form "
          f"(x0 c - x1 s, x0 s + x1 c); q.k invariant")


def _interleave_equals_permuted_weights(gen):
    """deepseek_v3 with rope_interleave true == rope_interleave false with the rope rows of q_b_proj (per head) and
    kv_a_proj_with_mqa permuted by PERM (float64)."""
    d = CONFIGS["deepseek_v3"]
    a = ds.DeepseekForCausalLM(d)
    init_golden_(a, gen)
    b = ds.DeepseekForCausalLM(d)
    b.cfg.rope_interleave = False
    assert a.cfg.rope_interleave and not b.cfg.rope_interleave
    cfg = a.cfg
    Dn, Dr, Dqk, R = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.qk_head_dim, cfg.kv_lora_rank
    perm = torch.tensor(ds.rope_perm(Dr))
    qrows = torch.cat([h * Dqk + torch.cat([torch.arange(Dn), Dn + perm]) for h in range(H)])
    kvrows = torch.cat([torch.arange(R), R + perm])
    sd = {k: v.clone() for k, v in a.state_dict().items()}
    for i in range(L):
        sd[f"model.layers.{i}.self_attn.q_b_proj.weight"] = sd[f"model.layers.{i}.self_attn.q_b_proj.weight"][qrows]
        key = f"model.layers.{i}.self_attn.kv_a_proj_with_mqa.weight"
        sd[key] = sd[key][kvrows]
    b.load_state_dict(sd)
    a, b = a.double(), b.double()
    toks = torch.randint(0, V, (2, 32), generator=gen)
    la, lb = a(toks)[0], b(toks)[0]
    err = (la - lb).abs().max().item()
    assert err < 1e-12, err
    print(f"  self-check deepseek_v3 rope_interleave true == false with q_b_proj / kv_a_proj_with_mqa rope rows permuted "
          f"by PERM (float64 logits, max diff {err:.1e})")


def _mla_absorbed(gen):
    """The attention output of a layer == the 'absorbed' MLA form over the cached latent: per head h,
    score(t, s) = q_nope_h(t) . (W_UK_h c_n(s)) + q_pe_h(t) . k_pe(s), out_h(t) = sum_s p(t, s) W_UV_h c_n(s)
    (float64; what a KV cache of kv_lora_rank + qk_rope_head_dim floats per token computes)."""
    for variant in VARIANTS:
        model = ds.DeepseekForCausalLM(CONFIGS[variant])
        init_golden_(model, gen)
        model = model.double()
        attn = model.model.layers[1].self_attn
        attn.record = True
        x = torch.randn(2, 13, C, generator=gen, dtype=torch.float64)
        T = x.shape[1]
        attn(x, model.rope(T))
        r = attn.records
        cfg = model.cfg
        Dn, Dr, Dv = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        Wkv = attn.kv_b_proj.weight.view(H, Dn + Dv, cfg.kv_lora_rank)
        W_uk, W_uv = Wkv[:, :Dn], Wkv[:, Dn:]                     # [H, Dn, R], [H, Dv, R]
        c = r["compressed_kv"].view(2, T, -1)
        q = r["q"].view(2, T, H, -1)
        q_nope, q_pe = q[..., :Dn], q[..., Dn:]
        k_pe = r["k_pe"].view(2, T, Dr)
        q_lat = torch.einsum("bthd,hdr->bthr", q_nope, W_uk)   # absorbed query in latent space
        scores = torch.einsum("bthr,bsr->bhts", q_lat, c) + torch.einsum("bthd,bsd->bhts", q_pe, k_pe)
        scores = scores * cfg.softmax_scale + torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
        p = scores.softmax(-1)
        o_lat = torch.einsum("bhts,bsr->bthr", p, c)
        out = torch.einsum("bthr,hvr->bthv", o_lat, W_uv).reshape(2 * T, H * Dv)
        err = (out - r["attn_out"]).abs().max().item()
        assert err < 1e-12, (variant, err)
        # and the records: k = cat(W_uk c, k_pe), v = W_uv c
        assert torch.allclose(r["k"].view(2, T, H, -1)[..., Dn:], k_pe[:, :, None].expand(2, T, H, Dr))
        assert torch.allclose(r["v"].view(2, T, H, Dv), torch.einsum("hvr,btr->bthv", W_uv, c), atol=1e-13)
        print(f"  self-check {variant} MLA == absorbed form over the latent (kv_lora_rank + qk_rope_head_dim per token): "
              f"max diff {err:.1e} (float64)")


def _naive_route(cfg, x2, gate_w, bias):
    """Per-token routing with Python lists (float64): -> list of (experts, weights)."""
    E, k, G, TG = cfg.n_routed_experts, cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group
    v3 = cfg.model_type == "deepseek_v3"
    res = []
    for t in range(x2.shape[0]):
        logits = (x2[t] @ gate_w.T).tolist()
        if v3:
            s = [1 / (1 + math.exp(-z)) for z in logits]
            b = [s[e] + bias[e] for e in range(E)]
        else:
            mx = max(logits)
            ex = [math.exp(z - mx) for z in logits]
            s = [v / sum(ex) for v in ex]
            b = list(s)
        n = E // G
        if v3 or cfg.topk_method == "group_limited_greedy":
            gs = [sum(sorted(b[g * n:(g + 1) * n], reverse=True)[:2]) if v3 else max(b[g * n:(g + 1) * n])
                  for g in range(G)]
            keep = sorted(range(G), key=lambda g: -gs[g])[:TG]
            b = [b[e] if e // n in keep else 0.0 for e in range(E)]
        chosen = sorted(range(E), key=lambda e: -b[e])[:k]
        w = [s[e] if v3 else b[e] for e in chosen]
        if v3 and cfg.norm_topk_prob:
            w = [v / (sum(w) + 1e-20) for v in w]
        res.append((chosen, [v * cfg.routed_scaling_factor for v in w]))
    return res


def _moe_vs_naive(gen):
    cases = [("deepseek_v2_lite", {}), ("deepseek_v2_lite", dict(num_experts_per_tok=3, routed_scaling_factor=1.5)),
             ("deepseek_v2_lite", dict(topk_method="group_limited_greedy", n_group=2, topk_group=1, n_routed_experts=6)),
             ("deepseek_v3", {}), ("deepseek_v3", dict(norm_topk_prob=False, n_group=2, topk_group=1)),
             ("deepseek_v3", dict(num_experts_per_tok=3, n_group=1, topk_group=1))]
    for variant, over in cases:
        cfg = ds.DeepseekConfig.from_hf(tiny(variant, **over))
        moe = ds.DeepseekMoE(cfg).double()
        with torch.no_grad():
            for name, p in moe.named_parameters():
                std = 0.3 if name == "gate.weight" else 0.1
                p.copy_(std * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            if moe.v3:
                moe.gate.e_score_correction_bias.copy_(0.05 * torch.randn(cfg.n_routed_experts, generator=gen))
        x = torch.randn(2, 7, C, generator=gen, dtype=torch.float64, requires_grad=True)
        R = torch.randn(2, 7, C, generator=gen, dtype=torch.float64)
        y = moe(x)
        x2 = x.reshape(-1, C)
        bias = moe.gate.e_score_correction_bias.tolist() if moe.v3 else None
        naive = _naive_route(cfg, x2.detach(), moe.gate.weight.detach(), bias)
        r = moe.last_route
        for t, (chosen, w) in enumerate(naive):
            assert r["idx"][t].tolist() == chosen, (variant, over, t, r["idx"][t].tolist(), chosen)
            assert max(abs(a - b) for a, b in zip(r["w"][t].tolist(), w)) < 1e-14
        # the output and every gradient, against a per-token loop that uses the routing's own (differentiable) weights
        rows = []
        for t in range(x2.shape[0]):
            rows.append(sum(r["w"][t, j] * moe.experts[e](x2[t:t + 1])[0] for j, e in enumerate(r["idx"][t].tolist()))
                        + moe.shared_experts(x2[t:t + 1])[0])
        yn = torch.stack(rows).view_as(y)
        assert (y - yn).abs().max().item() < 1e-13
        params = [x] + list(moe.parameters())
        g1 = torch.autograd.grad((y * R).sum(), params, allow_unused=True, retain_graph=True)
        g2 = torch.autograd.grad((yn * R).sum(), params, allow_unused=True)
        for a, b in zip(g1, g2):
            if a is None or b is None:
                assert a is None and b is None or (a if b is None else b).abs().max() == 0
                continue
            assert (a - b).abs().max().item() < 1e-12, (variant, over)
    print(f"  self-check MoE blocks == per-token Python routing + loop ({len(cases)} cases: V2 greedy top-2/3, "
          f"group_limited_greedy; V3 noaux_tc grouped, norm_topk_prob off, top-3): experts, weights, outputs, gradients")


def _expert_bias_checks(gen):
    E = 8
    for _ in range(3):
        counts = torch.randint(0, 40, (2, E), generator=gen).float()
        counts[0, 3] = counts[0].sum() / E if (counts[0].sum() % E) == 0 else counts[0, 3]
        bias = 0.05 * torch.randn(2, E, generator=gen)
        new = ds.get_updated_expert_bias(counts, bias, BIAS_RATE)
        for r in range(2):
            mean = counts[r].sum().item() / E
            for e in range(E):
                sign = (mean > counts[r, e].item()) - (mean < counts[r, e].item())
                want = torch.tensor(bias[r, e].item(), dtype=torch.float32) + sign * torch.tensor(BIAS_RATE)
                assert new[r, e].item() == want.item(), (r, e)
    # counted only in training forwards with grad; cleared by the update
    model = ds.DeepseekForCausalLM(CONFIGS["deepseek_v3"], enable_expert_bias=True)
    init_golden_(model, gen)
    toks = torch.randint(0, V, (2, 32), generator=gen)
    with torch.no_grad():
        model(toks)
    assert all(m.tokens_per_expert.sum() == 0 for _, m in model.sparse_blocks())
    model.eval()
    model(toks)
    assert all(m.tokens_per_expert.sum() == 0 for _, m in model.sparse_blocks())
    model.train()
    model(toks)
    model(toks)
    for _, m in model.sparse_blocks():
        assert m.tokens_per_expert.sum() == 2 * 64 * 2
        want = 2 * torch.bincount(m.last_route["idx"].reshape(-1), minlength=8).float()
        assert torch.equal(m.tokens_per_expert, want)
    before = torch.stack([m.gate.e_score_correction_bias.clone() for _, m in model.sparse_blocks()])
    cnt = torch.stack([m.tokens_per_expert.clone() for _, m in model.sparse_blocks()])
    new = model.update_expert_bias(BIAS_RATE)
    assert torch.equal(new, torch.stack([m.gate.e_score_correction_bias for _, m in model.sparse_blocks()]))
    step = (new.double() - before.double()) / BIAS_RATE
    want = torch.sign(cnt.sum(-1, keepdim=True) / cnt.shape[-1] - cnt).double()
    assert (step - want).abs().max() < 1e-4, (step, want)    # float32 rounding of bias + rate
    assert all(m.tokens_per_expert.sum() == 0 for _, m in model.sparse_blocks())
    try:
        ds.DeepseekForCausalLM(CONFIGS["deepseek_v2_lite"], enable_expert_bias=True)
        raise AssertionError("V2 with expert bias accepted")
    except ValueError:
        pass
    print("  self-check expert bias: get_updated_expert_bias == bias + rate * sign(mean - count) (float32, sign(0) = 0); "
          "counts only in training forwards with grad, cleared by the update")


def _seq_aux_check(gen):
    for variant in VARIANTS:
        model = ds.DeepseekForCausalLM(CONFIGS[variant])
        init_golden_(model, gen)
        toks = torch.randint(0, V, (2, 32), generator=gen)
        with torch.no_grad():
            model(toks)
        for (i, moe), got in zip(model.sparse_blocks(), model.aux_losses(2, 32)):
            r, E, k = moe.last_route, moe.cfg.n_routed_experts, moe.cfg.num_experts_per_tok
            p = r["scores"].double()
            if moe.v3:
                p = p / p.sum(-1, keepdim=True)
            total = 0.0
            for b in range(2):
                idx = r["idx"][b * 32:(b + 1) * 32].reshape(-1).tolist()
                total += sum(idx.count(e) / (32 * k / E) * p[b * 32:(b + 1) * 32, e].mean().item() for e in range(E))
            assert abs(total / 2 - got.item()) < 1e-6, (variant, i, total / 2, got.item())
    print("  self-check seq_aux balance loss == explicit per-sequence sum_e f_e P_e (both variants)")


def _fd_check(variant, gen):
    model = ds.DeepseekForCausalLM(CONFIGS[variant])
    init_golden_(model, gen)
    model = model.double()
    toks = torch.randint(0, V, (2, 10), generator=gen)
    inputs, targets = toks[:, :9], toks[:, 1:]
    _, loss = model(inputs, targets)
    loss.backward()

    def selections():
        return [m.last_route["idx"].clone() for _, m in model.sparse_blocks()]
    sel0 = selections()
    sd = dict(model.named_parameters())
    picks = [("model.layers.0.self_attn.q_proj.weight", (5, 7)), ("model.layers.1.self_attn.q_proj.weight", (90, 3)),
             ("model.layers.0.self_attn.q_a_proj.weight", (3, 9)),
             ("model.layers.1.self_attn.q_a_layernorm.weight", (5,)),
             ("model.layers.2.self_attn.q_b_proj.weight", (94, 20)),
             ("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", (2, 11)),
             ("model.layers.1.self_attn.kv_a_proj_with_mqa.weight", (37, 50)),    # a k_pe row
             ("model.layers.2.self_attn.kv_a_layernorm.weight", (7,)),
             ("model.layers.1.self_attn.kv_b_proj.weight", (3, 4)),
             ("model.layers.2.self_attn.kv_b_proj.weight", (120, 31)),            # a v row
             ("model.layers.0.self_attn.o_proj.weight", (6, 60)), ("model.layers.0.mlp.gate_proj.weight", (80, 2)),
             ("model.layers.0.mlp.down_proj.weight", (1, 95)), ("model.layers.1.mlp.gate.weight", (1, 10)),
             ("model.layers.2.mlp.gate.weight", (3, 40)), ("model.layers.2.mlp.gate.weight", (7, 1)),
             ("model.layers.1.mlp.experts.0.gate_proj.weight", (4, 12)),
             ("model.layers.2.mlp.experts.3.down_proj.weight", (40, 9)),
             ("model.layers.1.mlp.shared_experts.up_proj.weight", (10, 3)),
             ("model.layers.1.input_layernorm.weight", (17,)), ("model.layers.2.post_attention_layernorm.weight", (3,)),
             ("model.norm.weight", (42,)), ("model.embed_tokens.weight", (int(inputs[1, 2]), 30)),
             ("lm_head.weight", (int(targets[0, 0]), 8))]
    worst, n = 0.0, 0
    for name, idx in picks:
        if name not in sd or any(i >= n for i, n in zip(idx, sd[name].shape)):
            continue
        p, h = sd[name], 1e-5
        with torch.no_grad():
            old = p[idx].item()
            p[idx] = old + h
            lp = model(inputs, targets)[1].item()
            assert all(torch.equal(a, b) for a, b in zip(selections(), sel0)), f"{name}{idx}: +h changes the routing"
            p[idx] = old - h
            lm = model(inputs, targets)[1].item()
            assert all(torch.equal(a, b) for a, b in zip(selections(), sel0)), f"{name}{idx}: -h changes the routing"
            p[idx] = old
        fd, an = (lp - lm) / (2 * h), (0.0 if p.grad is None else p.grad[idx].item())
        worst = max(worst, abs(fd - an) / max(abs(an), 1e-8))
        n += 1
        assert abs(fd - an) <= 1e-7 + 1e-5 * abs(an), f"{variant}: finite differences {name}{idx}: fd {fd} vs {an}"
    print(f"  self-check {variant}: finite differences (float64) agree with autograd on {n} elements, "
          f"worst rel err {worst:.1e}")


def _shape_checks():
    for variant in VARIANTS:
        d = CONFIGS[variant]
        cfg = ds.DeepseekConfig.from_hf(d)
        names = [(n, tuple(p.shape)) for n, p in ds.DeepseekForCausalLM(d).named_parameters()]
        Dqk, R, Dr, Dn, Dv, E, Fm = 24, 32, 8, 16, 16, cfg.n_routed_experts, cfg.moe_intermediate_size
        want = [("model.embed_tokens.weight", (V, C))]
        for i in range(L):
            pre = f"model.layers.{i}."
            if cfg.q_lora_rank is None:
                want += [(pre + "self_attn.q_proj.weight", (H * Dqk, C))]
            else:
                want += [(pre + "self_attn.q_a_proj.weight", (24, C)), (pre + "self_attn.q_a_layernorm.weight", (24,)),
                         (pre + "self_attn.q_b_proj.weight", (H * Dqk, 24))]
            want += [(pre + "self_attn.kv_a_proj_with_mqa.weight", (R + Dr, C)),
                     (pre + "self_attn.kv_a_layernorm.weight", (R,)),
                     (pre + "self_attn.kv_b_proj.weight", (H * (Dn + Dv), R)),
                     (pre + "self_attn.o_proj.weight", (C, H * Dv))]
            if i >= 1:
                for e in range(E):
                    want += [(pre + f"mlp.experts.{e}.gate_proj.weight", (Fm, C)),
                             (pre + f"mlp.experts.{e}.up_proj.weight", (Fm, C)),
                             (pre + f"mlp.experts.{e}.down_proj.weight", (C, Fm))]
                want += [(pre + "mlp.gate.weight", (E, C)), (pre + "mlp.shared_experts.gate_proj.weight", (Fm, C)),
                         (pre + "mlp.shared_experts.up_proj.weight", (Fm, C)),
                         (pre + "mlp.shared_experts.down_proj.weight", (C, Fm))]
            else:
                want += [(pre + "mlp.gate_proj.weight", (96, C)), (pre + "mlp.up_proj.weight", (96, C)),
                         (pre + "mlp.down_proj.weight", (C, 96))]
            want += [(pre + "input_layernorm.weight", (C,)), (pre + "post_attention_layernorm.weight", (C,))]
        want += [("model.norm.weight", (C,)), ("lm_head.weight", (V, C))]
        assert names == want, (variant, [a for a, b in zip(names, want) if a != b][:3])
        bufs = [n for n, _ in ds.DeepseekForCausalLM(d).named_buffers()]
        assert bufs == ([f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in (1, 2)]
                        if cfg.model_type == "deepseek_v3" else [])
    for bad in (dict(moe_layer_freq=2), dict(norm_topk_prob=True), dict(scoring_func="sigmoid"),
                dict(num_key_value_heads=2), dict(n_shared_experts=None), dict(hidden_act="gelu")):
        try:
            ds.DeepseekConfig.from_hf(tiny("deepseek_v2_lite", **bad))
            raise AssertionError(f"accepted {bad}")
        except ValueError:
            pass
    print("  self-check HF's parameter names, order and shapes (q_proj / q_a_proj+q_a_layernorm+q_b_proj, the MoE "
          "layers from first_k_dense_replace), V3's e_score_correction_bias buffers; refused configs")


def _kv_cache_print():
    for variant in VARIANTS:
        cfg = ds.DeepseekConfig.from_hf(CONFIGS[variant])
        _, text = kv_cache_meta(cfg)
        print(f"  KV cache ({variant}): {text}")


def self_checks():
    gen = torch.Generator().manual_seed(77)
    _shape_checks()
    _rope_checks(gen)
    _interleave_equals_permuted_weights(gen)
    _mla_absorbed(gen)
    _moe_vs_naive(gen)
    _expert_bias_checks(gen)
    _seq_aux_check(gen)
    for variant in VARIANTS:
        _fd_check(variant, gen)
    _kv_cache_print()


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
