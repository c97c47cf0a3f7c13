#!/usr/bin/python3
"""The variants of tools/make_family_golden.py: their sizes, Hugging Face config.json dicts (CONFIGS), optimizer and
schedule (HP), max_norm, seeds, size limits, the weights spot-checked after training, the initialisation (INIT,
MOE_INIT, GEMMA3_INIT, init_golden_), the reference model of a config (build_model) and llama3's RoPE bands
(rope_bands). Moved out of tools/make_family_golden.py unchanged; that file imports what it uses from here (among
them HP, MAX_NORM and ROUTER_MARGIN, which tools/make_lora_golden.py and tools/make_deepseek_golden.py read through
it) and its docstring describes the variants. Also imported by tools/family_golden_checks.py (the self-checks).
"""
import math

import torch

import torch_hf_families as hf
import torch_hf_gemma3 as g3


V, C, L, H, KV, FF, P = 96, 64, 2, 4, 2, 96, 64
E, K, FF_MOE, FF_SHARED = 4, 2, 32, 48          # the MoE variants: experts, top-k, expert and shared-expert widths
ROUTER_MARGIN = 1e-4                             # least gap between the sorted top-(k+1) router logits of a token

# The config.json files, key for key as the real ones (Llama-3.2-1B, Qwen2.5-0.5B, Qwen3-0.6B) spell
# them, with tiny sizes. Written with json.dumps(indent=2, sort_keys=True) as save_pretrained does (so the
# order in which the keys are put together here does not matter).


def hf_config(arch, model_type, **keys):
    """The keys every family here spells alike (tiny sizes), then the family's own."""
    return dict({"architectures": [arch], "model_type": model_type, "attention_dropout": 0.0, "hidden_act": "silu",
                 "hidden_size": C, "initializer_range": 0.02, "intermediate_size": FF, "max_position_embeddings": P,
                 "num_attention_heads": H, "num_hidden_layers": L, "num_key_value_heads": KV, "rms_norm_eps": 1e-06,
                 "torch_dtype": "float32", "use_cache": True, "vocab_size": V}, **keys)


def moe_config(dense, arch, model_type, **keys):
    """A MoE variant's keys: its dense sibling's (the same attention), the MoE ones, then its own. Untied lm_head
    and output_router_logits false as the released configs: the training loss is the plain LM loss (the balancing
    loss is recorded apart, train.aux_losses)."""
    return dict(CONFIGS[dense], architectures=[arch], model_type=model_type, decoder_sparse_step=1, mlp_only_layers=[],
                moe_intermediate_size=FF_MOE, num_experts=E, num_experts_per_tok=K, output_router_logits=False,
                router_aux_loss_coef=0.001, tie_word_embeddings=False, **keys)


CONFIGS = {
    "llama": hf_config("LlamaForCausalLM", "llama", attention_bias=False, bos_token_id=94, eos_token_id=95, head_dim=32,
                       mlp_bias=False, pretraining_tp=1,
                       rope_scaling={"factor": 4.0, "high_freq_factor": 2.0, "low_freq_factor": 1.0,
                                     "original_max_position_embeddings": 16, "rope_type": "llama3"},
                       rope_theta=500000.0, tie_word_embeddings=True),
    "qwen2": hf_config("Qwen2ForCausalLM", "qwen2", bos_token_id=95, eos_token_id=95, max_window_layers=L,
                       rope_theta=1000000.0, sliding_window=P, tie_word_embeddings=True, use_sliding_window=False),
    "qwen3": hf_config("Qwen3ForCausalLM", "qwen3", attention_bias=False, bos_token_id=94, eos_token_id=95, head_dim=32,
                       max_window_layers=L, rope_scaling=None, rope_theta=1000000, sliding_window=None,
                       tie_word_embeddings=True, use_sliding_window=False),
}
# Qwen1.5-MoE-A2.7B's / Qwen2-57B-A14B's keys.
CONFIGS["qwen2_moe"] = moe_config("qwen2", "Qwen2MoeForCausalLM", "qwen2_moe", norm_topk_prob=False,
                                  shared_expert_intermediate_size=FF_SHARED)
# Qwen3-30B-A3B's keys (norm_topk_prob true as the released Qwen3-MoE configs; the class default is false).
CONFIGS["qwen3_moe"] = moe_config("qwen3", "Qwen3MoeForCausalLM", "qwen3_moe", norm_topk_prob=True,
                                  rope_theta=1000000.0)
# qwen2_moe with 3 layers, the middle one dense (mlp_only_layers [1]: mlp.gate_proj/up_proj/down_proj of
# width intermediate_size 96), the other two sparse.
CONFIGS["qwen2_moe_mixed"] = dict(CONFIGS["qwen2_moe"], num_hidden_layers=3, max_window_layers=3, mlp_only_layers=[1])
# Gemma3ForCausalLM (google/gemma-3-1b-it's keys; its own set, not hf_config's: no hidden_act, no pad id): hidden 72
# (sqrt(72) is not exact in float32), head_dim 32 (H*D = 128 != 72), scores * 24**-0.5 (not head_dim**-0.5), layers
# sliding, sliding, full, sliding (sliding_window_pattern 3) with a window of 8 < T, linear RoPE scaling on the full
# layer as Gemma 3 4B+ ship it.
CONFIGS["gemma3"] = {
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": None, "head_dim": 32, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 72,
    "initializer_range": 0.02, "intermediate_size": FF, "max_position_embeddings": P, "model_type": "gemma3_text",
    "num_attention_heads": H, "num_hidden_layers": 4, "num_key_value_heads": KV, "pad_token_id": None,
    "query_pre_attn_scalar": 24, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "rope_theta": 1000000.0, "sliding_window": 8,
    "sliding_window_pattern": 3, "tie_word_embeddings": True, "torch_dtype": "float32", "use_cache": True,
    "vocab_size": V}

VARIANTS = ("llama", "qwen2", "qwen3", "qwen2_moe", "qwen2_moe_mixed", "qwen3_moe", "gemma3")
MOE_VARIANTS = ("qwen2_moe", "qwen2_moe_mixed", "qwen3_moe")

# make_llama_golden.py's optimizer and schedule, T 32.
HP = dict(B=2, T=32, learning_rate=1e-3, lr_end=1e-4, warmup_steps=3, total_steps=10, beta1=0.9, beta2=0.95,
          adam_eps=1e-8, weight_decay=0.1, lr_schedule="cosine")
# Picked after looking at the printed pre-clip norms: clipping on some steps but not all (asserted).
MAX_NORM = {"llama": 1.5, "qwen2": 1.5, "qwen3": 1.6, "qwen2_moe": 1.6, "qwen2_moe_mixed": 1.8, "qwen3_moe": 1.9,
            "gemma3": 3.0}
SEED = {"llama": 5151, "qwen2": 6262, "qwen3": 7373, "qwen2_moe": 8007, "qwen2_moe_mixed": 8009, "qwen3_moe": 8006,
        "gemma3": 9191}
# Size limit of a variant's file (default: 1 MiB dense, 1.5 MB MoE). gemma3's 4 layers of width 72 hold 202k
# parameters: weights and gradients alone are 1.6 MB in float32.
MAX_BYTES = {"gemma3": 2_000_000}
# Spot checks of the weights after the 10 steps (those the family has).
FINAL = ("model.layers.1.mlp.gate_proj.weight", "model.layers.0.self_attn.k_proj.weight", "model.embed_tokens.weight",
         "model.norm.weight", "lm_head.weight", "model.layers.0.self_attn.q_proj.bias",
         "model.layers.1.self_attn.k_proj.bias", "model.layers.1.self_attn.q_norm.weight",
         "model.layers.0.self_attn.k_norm.weight",
         # gemma3's own: the norms around the MLP, and its 4th layer (sliding, after the full one)
         "model.layers.0.pre_feedforward_layernorm.weight", "model.layers.1.post_feedforward_layernorm.weight",
         "model.layers.3.self_attn.o_proj.weight", "model.layers.3.mlp.down_proj.weight")
# ... and for the MoE variants, after those (the ones the variant has).
MOE_FINAL = ("model.layers.0.mlp.gate.weight", "model.layers.1.mlp.gate.weight", "model.layers.2.mlp.gate.weight",
             "model.layers.0.mlp.experts.1.gate_proj.weight", "model.layers.0.mlp.experts.2.up_proj.weight",
             "model.layers.1.mlp.experts.3.down_proj.weight", "model.layers.2.mlp.experts.0.down_proj.weight",
             "model.layers.0.mlp.shared_expert.down_proj.weight", "model.layers.1.mlp.shared_expert.gate_proj.weight",
             "model.layers.2.mlp.shared_expert.up_proj.weight", "model.layers.0.mlp.shared_expert_gate.weight",
             "model.layers.2.mlp.shared_expert_gate.weight", "model.layers.1.mlp.up_proj.weight")

INIT = ("in named_parameters() order from one generator: RMSNorm weights (input_layernorm, "
        "post_attention_layernorm, model.norm, q_norm, k_norm) 1 + N(0, 0.1); q_proj and k_proj weights N(0, 0.08); "
        "biases N(0, 0.05); every other weight N(0, 0.02)")


MOE_INIT = ("in named_parameters() order from one generator: RMSNorm weights (input_layernorm, "
            "post_attention_layernorm, model.norm, q_norm, k_norm) 1 + N(0, 0.1); q_proj and k_proj weights N(0, 0.08); "
            "biases N(0, 0.05); routers mlp.gate.weight and mlp.shared_expert_gate.weight N(0, 0.3); expert e's "
            "weights (mlp.experts.{e}.*) N(0, 0.02) * (e + 1) / 2; every other weight (shared expert, dense MLPs, "
            "attention v/o, embeddings, lm_head) N(0, 0.02)")


GEMMA3_INIT = ("in named_parameters() order from one generator: Gemma3RMSNorm weights (input_layernorm, "
               "post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm, model.norm, q_norm, "
               "k_norm) are offsets (the norm scales by 1 + weight; HF inits them to 0): 0.1 * N(0, 1), not 1 + ...; "
               "q_proj and k_proj weights N(0, 0.08); every other weight (v_proj, o_proj, gate/up/down_proj, "
               "embed_tokens) N(0, 0.02)")


def build_model(config):
    """The reference model of a config.json dict: tools/torch_hf_gemma3.py for gemma3_text, else
    tools/torch_hf_families.py."""
    if config.get("model_type") == g3.MODEL_TYPE:
        return g3.Gemma3ForCausalLM(config)
    return hf.FamilyForCausalLM(config)


def init_golden_(model, gen):
    """INIT; in the MoE variants also MOE_INIT's routers N(0, 0.3) (decisive routing) and expert e's weights scaled
    by (e + 1) / 2 (the experts differ). A dense model has neither: its draws are INIT's. Gemma 3's norm weights are
    offsets (GEMMA3_INIT): 0.1 * N(0, 1) instead of 1 + 0.1 * N(0, 1)."""
    offset_norms = getattr(model.cfg, "model_type", None) == g3.MODEL_TYPE
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith((".mlp.gate.weight", ".mlp.shared_expert_gate.weight")):
                p.copy_(0.3 * noise)
            elif ".mlp.experts." in name:
                e = int(name.split(".mlp.experts.")[1].split(".")[0])
                p.copy_(0.02 * (e + 1) / 2 * noise)
            elif name.endswith("norm.weight"):
                p.copy_(0.1 * noise if offset_norms else 1.0 + 0.1 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.05 * noise)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(0.08 * noise)
            else:
                p.copy_(0.02 * noise)


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
