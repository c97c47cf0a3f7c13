#!/usr/bin/python3
"""The variants of tools/make_deepseek_golden.py: their sizes, config.json dicts (CONFIGS), max_norm, seeds, the
initialisation (INIT, init_golden_), the weights spot-checked after training, and the KV-cache sizes of the metadata
(kv_cache_meta). Moved out of tools/make_deepseek_golden.py unchanged (its docstring describes the variants);
imported by it and by tools/deepseek_golden_checks.py (the self-checks).
"""
import torch

import torch_hf_deepseek as ds


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
