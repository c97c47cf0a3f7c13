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
import torch_hf_families as hf  # noqa: E402
import torch_hf_gemma3 as g3  # noqa: E402
import torch_llama as tl  # noqa: E402

torch.set_num_threads(2)

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


# ----------------------------------------------------------------------------
# the references check themselves


def tiny_cfg(family, **over):
    """A config dict: CONFIGS[family] with `over` applied."""
    return dict(CONFIGS[family], **over)


def _fd_picks(inputs, targets):
    """The elements _fd_check perturbs, each where the variant has it (attention, routers, experts, shared expert
    and its gate, dense MLPs, norms, embeddings, lm_head)."""
    return [("model.layers.0.self_attn.q_proj.weight", (5, 7)), ("model.layers.1.self_attn.k_proj.weight", (20, 3)),
            ("model.layers.0.self_attn.v_proj.weight", (11, 60)), ("model.layers.1.self_attn.o_proj.weight", (2, 40)),
            ("model.layers.0.self_attn.q_proj.bias", (9,)), ("model.layers.1.self_attn.k_proj.bias", (21,)),
            ("model.layers.0.self_attn.v_proj.bias", (4,)),
            ("model.layers.0.self_attn.q_norm.weight", (13,)), ("model.layers.1.self_attn.k_norm.weight", (30,)),
            # routers, experts, the shared expert and its gate
            ("model.layers.0.mlp.gate.weight", (1, 10)), ("model.layers.0.mlp.gate.weight", (3, 50)),
            ("model.layers.1.mlp.gate.weight", (0, 33)), ("model.layers.2.mlp.gate.weight", (2, 5)),
            ("model.layers.0.mlp.experts.0.gate_proj.weight", (7, 12)),
            ("model.layers.0.mlp.experts.1.up_proj.weight", (30, 63)),
            ("model.layers.0.mlp.experts.3.down_proj.weight", (40, 9)),
            ("model.layers.1.mlp.experts.2.gate_proj.weight", (1, 2)),
            ("model.layers.2.mlp.experts.1.down_proj.weight", (8, 31)),
            ("model.layers.0.mlp.shared_expert.gate_proj.weight", (47, 3)),
            ("model.layers.1.mlp.shared_expert.down_proj.weight", (5, 20)),
            ("model.layers.0.mlp.shared_expert_gate.weight", (0, 17)),
            ("model.layers.2.mlp.shared_expert_gate.weight", (0, 60)),
            # dense MLPs, norms, embeddings, head
            ("model.layers.0.mlp.gate_proj.weight", (90, 11)), ("model.layers.1.mlp.gate_proj.weight", (90, 11)),
            ("model.layers.1.mlp.down_proj.weight", (63, 95)), ("model.layers.0.input_layernorm.weight", (17,)),
            ("model.layers.0.post_attention_layernorm.weight", (3,)),
            ("model.layers.1.post_attention_layernorm.weight", (3,)),
            ("model.norm.weight", (42,)), ("model.embed_tokens.weight", (int(inputs[1, 2]), 30)),
            ("model.embed_tokens.weight", (int(targets[0, 0]), 8)), ("lm_head.weight", (int(targets[0, 0]), 8)),
            # gemma3's own: the norms around the MLP, the full layer's q/k norms, the last (sliding) layer
            ("model.layers.0.pre_feedforward_layernorm.weight", (5,)),
            ("model.layers.1.post_feedforward_layernorm.weight", (70,)),
            ("model.layers.2.self_attn.q_norm.weight", (3,)), ("model.layers.2.self_attn.k_norm.weight", (29,)),
            ("model.layers.3.self_attn.q_proj.weight", (100, 71)), ("model.layers.3.self_attn.v_proj.weight", (63, 0)),
            ("model.layers.3.mlp.up_proj.weight", (50, 20)), ("model.layers.3.post_attention_layernorm.weight", (66,))]


def _fd_check(variant, gen, loud_aux=False):
    """Finite differences in float64 on a tiny instance (T 9) of a variant; MoE: decisive routers, and no routing
    decision flipped by the perturbations. With loud_aux also output_router_logits true and router_aux_loss_coef
    0.5 (the balancing loss's gradient)."""
    over = dict(output_router_logits=True, router_aux_loss_coef=0.5) if loud_aux else {}
    model = build_model(tiny_cfg(variant, **over))
    init_golden_(model, gen)
    model = model.double()
    B, T = 2, 9
    toks = torch.randint(0, V, (B, T + 1), generator=gen)
    inputs, targets = toks[:, :T], toks[:, 1:]
    _, loss = model(inputs, targets)
    sparse = model.cfg.sparse_layers()                    # none in a dense model

    def selections():
        return [model.model.layers[i].mlp.last_routing[1].clone() for i in sparse]
    sel0 = selections()
    if loud_aux:
        ce = torch.nn.functional.cross_entropy(model(inputs)[0].reshape(-1, V), targets.reshape(-1))
        assert abs(loss.item() - (ce.item() + 0.5 * model.aux_loss().item())) < 1e-12
    loss.backward()
    sd = dict(model.named_parameters())
    worst, n = 0.0, 0
    for name, idx in _fd_picks(inputs, targets):
        if name not in sd:
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
        fd, an = (lp - lm) / (2 * h), (0.0 if p.grad is None else p.grad[idx].item())   # None: an unpicked expert
        worst = max(worst, abs(fd - an) / max(abs(an), 1e-8))
        n += 1
        assert abs(fd - an) <= 1e-7 + 1e-5 * abs(an), f"{variant}: finite differences {name}{idx}: fd {fd} vs {an}"
    print(f"  self-check {variant}{' (output_router_logits, aux coef 0.5)' if loud_aux else ''}: finite differences "
          f"(float64) agree with autograd on {n} elements, worst rel err {worst:.1e}")


def _same_model(model, ref, toks, pairs, label):
    """model and ref on toks [2, 33] (T 32): the logits and, after backward, the gradients of each (model's, ref's)
    parameter pair agree to 1e-6 (printed: bitwise or not)."""
    out, loss = model(toks[:, :32], toks[:, 1:])
    rout, rloss = ref(toks[:, :32], toks[:, 1:])
    loss.backward()
    rloss.backward()
    err = (out - rout).abs().max().item()
    gerr = max((a.grad - b.grad).abs().max().item() for a, b in pairs)
    assert err <= 1e-6 and gerr <= 1e-6, (label, err, gerr)
    print(f"  self-check {label}: max |logits diff| {err:.1e}{' (bitwise)' if err == 0 else ''}, "
          f"max |grad diff| {gerr:.1e}")


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
        _same_model(fam, ref, toks, list(zip(fam.parameters(), ref.parameters())),
                    f"llama (head_dim = hidden/heads, default RoPE, tied={tied}) == tools/torch_llama.py")

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


# ---- the mixtures of experts


def _moe_shape_checks():
    # The dense/sparse layer rule (an independent statement of Qwen2MoeDecoderLayer's condition).
    cases = [(dict(num_experts=4, decoder_sparse_step=1, mlp_only_layers=[]), 4, [0, 1, 2, 3]),
             (dict(num_experts=4, decoder_sparse_step=2, mlp_only_layers=[]), 4, [1, 3]),
             (dict(num_experts=4, decoder_sparse_step=1, mlp_only_layers=[0, 3]), 4, [1, 2]),
             (dict(num_experts=4, decoder_sparse_step=3, mlp_only_layers=[5]), 6, [2]),
             (dict(num_experts=0, decoder_sparse_step=1, mlp_only_layers=[]), 3, []),
             (dict(num_experts=4, decoder_sparse_step=1, mlp_only_layers=[1]), 3, [0, 2])]
    for fam in hf.MOE_FAMILIES:
        for over, layers, want in cases:
            d = tiny_cfg(fam, num_hidden_layers=layers, **over)
            if d["num_experts"] == 0:
                d["num_experts_per_tok"] = 0
            cfg = hf.FamilyConfig.from_hf(d)
            assert cfg.sparse_layers() == want, (fam, over, cfg.sparse_layers())
            sd = dict(hf.FamilyForCausalLM(d).named_parameters())
            for i in range(layers):
                assert (f"model.layers.{i}.mlp.gate.weight" in sd) == (i in want), (fam, over, i)
                assert (f"model.layers.{i}.mlp.gate_proj.weight" in sd) == (i not in want), (fam, over, i)
    # Names, order and shapes of a sparse layer (HF's registration order).
    for variant in MOE_VARIANTS:
        d = CONFIGS[variant]
        cfg = hf.FamilyConfig.from_hf(d)
        names = [(n, tuple(p.shape)) for n, p in hf.FamilyForCausalLM(d).named_parameters()]
        D = cfg.head_dim
        want = [("model.embed_tokens.weight", (V, C))]
        for i in range(cfg.num_hidden_layers):
            pre = f"model.layers.{i}."
            want += [(pre + "self_attn.q_proj.weight", (H * D, C))]
            want += [(pre + "self_attn.q_proj.bias", (H * D,))] if cfg.qkv_bias else []
            want += [(pre + "self_attn.k_proj.weight", (KV * D, C))]
            want += [(pre + "self_attn.k_proj.bias", (KV * D,))] if cfg.qkv_bias else []
            want += [(pre + "self_attn.v_proj.weight", (KV * D, C))]
            want += [(pre + "self_attn.v_proj.bias", (KV * D,))] if cfg.qkv_bias else []
            want += [(pre + "self_attn.o_proj.weight", (C, H * D))]
            if cfg.qk_norm:
                want += [(pre + "self_attn.q_norm.weight", (D,)), (pre + "self_attn.k_norm.weight", (D,))]
            if cfg.is_sparse(i):
                want += [(pre + "mlp.gate.weight", (E, C))]
                for e in range(E):
                    want += [(pre + f"mlp.experts.{e}.gate_proj.weight", (FF_MOE, C)),
                             (pre + f"mlp.experts.{e}.up_proj.weight", (FF_MOE, C)),
                             (pre + f"mlp.experts.{e}.down_proj.weight", (C, FF_MOE))]
                if d["model_type"] == "qwen2_moe":
                    want += [(pre + "mlp.shared_expert.gate_proj.weight", (FF_SHARED, C)),
                             (pre + "mlp.shared_expert.up_proj.weight", (FF_SHARED, C)),
                             (pre + "mlp.shared_expert.down_proj.weight", (C, FF_SHARED)),
                             (pre + "mlp.shared_expert_gate.weight", (1, C))]
            else:
                want += [(pre + "mlp.gate_proj.weight", (FF, C)), (pre + "mlp.up_proj.weight", (FF, C)),
                         (pre + "mlp.down_proj.weight", (C, FF))]
            want += [(pre + "input_layernorm.weight", (C,)), (pre + "post_attention_layernorm.weight", (C,))]
        want += [("model.norm.weight", (C,)), ("lm_head.weight", (V, C))]
        assert names == want, (variant, [a for a, b in zip(names, want) if a != b][:3])
    print("  self-check MoE: the dense/sparse layer rule on 6 configs x 2 families; HF's parameter names, order "
          "and shapes for " + ", ".join(MOE_VARIANTS))


def _naive_moe(block, x2, k, norm, shared):
    """Per-token loop (float64): p = softmax(x W_g^T); the k largest p (stable descending sort); weights p (or
    renormalised); y = sum_j w_j expert_{e_j}(x) (+ sigmoid(g . x) * shared(x))."""
    rows = []
    for t in range(x2.shape[0]):
        xt = x2[t:t + 1]
        p = torch.softmax(xt @ block.gate.weight.T, -1)[0]
        order = sorted(range(p.shape[0]), key=lambda e: -p[e].item())[:k]
        w = torch.stack([p[e] for e in order])
        if norm:
            w = w / w.sum()
        y = sum(w[j] * block.experts[e](xt)[0] for j, e in enumerate(order))
        if shared:
            y = y + torch.sigmoid(xt @ block.shared_expert_gate.weight.T)[0] * block.shared_expert(xt)[0]
        rows.append(y)
    return torch.stack(rows)


def _moe_block_vs_naive(gen):
    n = 0
    for fam in hf.MOE_FAMILIES:
        for k in (1, 2, 3):
            for norm in (False, True):
                cfg = hf.FamilyConfig.from_hf(tiny_cfg(fam, num_experts_per_tok=k, norm_topk_prob=norm))
                block = hf.FamilySparseMoeBlock(cfg).double()
                shared = cfg.shared_expert_intermediate_size > 0
                assert shared == (fam == "qwen2_moe")
                with torch.no_grad():
                    for name, p in block.named_parameters():
                        std = 0.3 if name in ("gate.weight", "shared_expert_gate.weight") else 0.1
                        p.copy_(std * torch.randn(p.shape, generator=gen, dtype=torch.float64))
                x = torch.randn(2, 7, C, generator=gen, dtype=torch.float64, requires_grad=True)
                R = torch.randn(2, 7, C, generator=gen, dtype=torch.float64)
                y, rl = block(x)
                yn = _naive_moe(block, x.reshape(-1, C), k, norm, shared).reshape(2, 7, C)
                assert torch.allclose(rl, x.reshape(-1, C) @ block.gate.weight.T, rtol=0, atol=1e-13)
                err = (y - yn).abs().max().item()
                assert err < 1e-13, (fam, k, norm, err)
                params = [x] + list(block.parameters())
                g1 = torch.autograd.grad((y * R).sum(), params, allow_unused=True)
                g2 = torch.autograd.grad((yn * R).sum(), params, allow_unused=True)
                for a, b in zip(g1, g2):
                    if a is None and b is None:          # an expert no token picked
                        continue
                    a = torch.zeros_like(b) if a is None else a
                    b = torch.zeros_like(a) if b is None else b
                    assert (a - b).abs().max().item() < 1e-12, (fam, k, norm)
                # norm_topk_prob: the k weights sum to 1; else they are the raw top-k probabilities.
                w, sel = block.last_routing
                p = torch.softmax(rl, -1)
                if norm:
                    assert torch.allclose(w.sum(-1), torch.ones_like(w[:, 0]), rtol=0, atol=1e-14)
                else:
                    assert torch.equal(w, p.gather(1, sel))
                n += 1
    print(f"  self-check MoE block == a per-token loop ({n} cases: qwen2_moe with the shared expert, qwen3_moe "
          f"without; top-1/2/3; norm_topk_prob false/true): outputs, router logits and every gradient (float64)")


def _aux_vs_naive(gen):
    for k in (1, 2):
        layers = tuple(torch.randn(13, E, generator=gen, dtype=torch.float64).mul(2).requires_grad_() for _ in range(3))
        aux = hf.load_balancing_loss_func(layers, E, k)
        # explicit: f_e = #assignments to e / rows, P_e = mean prob, pooled over the layers
        Z = torch.cat(layers)
        P = torch.softmax(Z, -1)
        counts = [0] * E
        for r in range(Z.shape[0]):
            for e in sorted(range(E), key=lambda e: -P[r, e].item())[:k]:
                counts[e] += 1
        want = E * sum(counts[e] / Z.shape[0] * P[:, e].mean() for e in range(E))
        # HF's tokens_per_expert is mean(expert_mask.float()): float32 fractions even here (count / 39 rounded)
        assert abs(aux.item() - want.item()) < 1e-7, (aux.item(), want.item())
        g1 = torch.autograd.grad(aux, layers)
        g2 = torch.autograd.grad(want, layers)
        assert all((a - b).abs().max().item() < 1e-8 for a, b in zip(g1, g2))
        # not the sum (nor the mean) of the per-layer values
        per = [hf.load_balancing_loss_func((l,), E, k).item() for l in layers]
        assert abs(sum(per) / len(per) - aux.item()) > 1e-6 and abs(sum(per) - aux.item()) > 1e-6
    # Balanced routing (every expert chosen equally often, uniform mean probabilities) gives k.
    Z = torch.zeros(8, E, dtype=torch.float64)
    for r in range(8):
        Z[r, r % E] = 1.0
        Z[r, (r + 1) % E] = 0.5
    assert abs(hf.load_balancing_loss_func((Z,), E, 2).item() - 2.0) < 1e-12
    print("  self-check load_balancing_loss_func == E * sum_e f_e * P_e pooled over the layers' tokens (values and "
          "gradients, float64), != the sum or mean of per-layer values; balanced routing gives k")


def _moe_equals_dense(gen):
    """One expert, top-1 (weight softmax = 1), no shared expert (qwen2_moe: its down_proj zero): the MoE model is
    the dense family with mlp.experts.0.* as mlp.*. And qwen2_moe with every layer in mlp_only_layers is qwen2."""
    toks = torch.randint(0, V, (2, 33), generator=gen)
    for fam, dense in (("qwen3_moe", "qwen3"), ("qwen2_moe", "qwen2")):
        for norm in (False, True):
            d = tiny_cfg(dense, model_type=fam, architectures=CONFIGS[fam]["architectures"], num_experts=1,
                         num_experts_per_tok=1, moe_intermediate_size=FF, norm_topk_prob=norm, decoder_sparse_step=1,
                         mlp_only_layers=[], shared_expert_intermediate_size=FF_SHARED)
            m = hf.FamilyForCausalLM(d)
            ref = hf.FamilyForCausalLM(CONFIGS[dense])
            init_golden_(ref, gen)
            init_golden_(m, gen)
            rsd = ref.state_dict()
            mapped = {}
            with torch.no_grad():
                for name, p in m.named_parameters():
                    rn = name.replace(".mlp.experts.0.", ".mlp.")
                    if rn in rsd:
                        p.copy_(rsd[rn])
                        mapped[name] = rn
                    elif name.endswith("shared_expert.down_proj.weight"):
                        p.zero_()
            assert len(mapped) == len(rsd), (fam, len(mapped), len(rsd))
            rp = dict(ref.named_parameters())
            _same_model(m, ref, toks, [(p, rp[mapped[n]]) for n, p in m.named_parameters() if n in mapped],
                        f"{fam}, 1 expert, top-1, norm_topk_prob {norm}, no shared expert == {dense}")
    # qwen2_moe with mlp_only_layers = every layer: qwen2 itself (same names, bitwise).
    d = tiny_cfg("qwen2_moe", mlp_only_layers=[0, 1], tie_word_embeddings=True)
    m = hf.FamilyForCausalLM(d)
    ref = hf.FamilyForCausalLM(CONFIGS["qwen2"])
    init_golden_(ref, gen)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in ref.named_parameters()]
    m.load_state_dict(ref.state_dict())
    assert torch.equal(m(toks[:, :32])[0], ref(toks[:, :32])[0]) and m.router_logits == ()
    assert m.aux_loss() == 0
    print("  self-check qwen2_moe with every layer in mlp_only_layers == qwen2 (bitwise), no router logits")


def self_checks():
    gen = torch.Generator().manual_seed(99)
    _shape_checks()
    for fam in hf.DENSE_FAMILIES:
        _fd_check(fam, gen)
    _llama_equals_torch_llama(gen)
    _qwen3_qk_norm(gen)
    _rope_checks()
    # the mixtures of experts (after the dense checks: their generator draws are unchanged)
    _moe_shape_checks()
    _moe_block_vs_naive(gen)
    _aux_vs_naive(gen)
    for variant in MOE_VARIANTS:
        _fd_check(variant, gen)
    _fd_check("qwen2_moe_mixed", gen, loud_aux=True)
    _fd_check("qwen3_moe", gen, loud_aux=True)
    _moe_equals_dense(gen)
    # gemma3 (tools/torch_hf_gemma3.py's checks: masks, RoPE per layer type, Gemma3RMSNorm, embedding scale, ...)
    g3.self_checks(CONFIGS["gemma3"], init_golden_, gen)
    _fd_check("gemma3", gen)


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
