"""Plain-torch causal LMs of five Hugging Face families, built from a config.json dict (no `transformers`):
`llama` (LlamaForCausalLM, with an explicit head_dim and the llama3 RoPE scaling), `qwen2`
(Qwen2ForCausalLM), `qwen3` (Qwen3ForCausalLM), and the mixtures of experts `qwen2_moe`
(Qwen2MoeForCausalLM) and `qwen3_moe` (Qwen3MoeForCausalLM). Hugging Face's parameter names, shapes and
semantics (eager attention, no KV cache, no dropout, float32 or float64).

Transcribed from Hugging Face transformers' modeling files, as stored versions (the search tools give no
tagged release; these are the versions read, and where they differ the text says which is followed):

  src/transformers/models/llama/modeling_llama.py   commit 5dd4a63548857797727ae73eeb6a6e886ea02a3e
      (v4.48-era: LlamaAttention.head_dim = getattr(config, "head_dim", hidden // heads), scaling =
      head_dim**-0.5, eager_attention_forward, LlamaRotaryEmbedding via ROPE_INIT_FUNCTIONS with
      cos/sin * attention_scaling, attention_bias on all four projections, mlp_bias on the MLP)
  src/transformers/models/qwen2/modeling_qwen2.py   commit 00d4b3d2142cb4ced2f51b90614b5d26bc045015
      (q_proj/k_proj/v_proj bias=True, o_proj bias=False; sliding window only on layers typed
      "sliding_attention", i.e. never with use_sliding_window false)
  src/transformers/models/qwen3/modeling_qwen3.py   commit 000c33fdfde12e1ffafbfcdb3c926df5727a00b6
      (q_norm/k_norm = Qwen3RMSNorm(head_dim, rms_norm_eps) applied to q_proj(x).view(B, T, H, D) and
      k_proj(x).view(B, T, KV, D), before the transpose and before RoPE; attention_bias on all four
      projections, o_proj included)
  src/transformers/modeling_rope_utils.py           commit 0044e3b3facff1a1ad60b235c69d5b45beae75a4
      (_compute_llama3_parameters; that version's default frequencies use hidden // heads, current
      Hugging Face uses `getattr(config, "head_dim", None) or hidden // heads`: followed here, as the
      explicit head_dim would not even run with the old one)
  src/transformers/models/qwen2_moe/modeling_qwen2_moe.py   commit 1c351314a42ac9aef3510fc536c18130d52be2ef
      (v4.52-era, the eager Qwen2MoeAttention with config.qkv_bias, Qwen2MoeSparseMoeBlock,
      Qwen2MoeDecoderLayer, load_balancing_loss_func, Qwen2MoeForCausalLM.forward); also read:
      commit 00a3f9386614dde0dc41cf4e9b8d0abd3af0671d (same block, loss and layer rule; head_dim from
      config.head_dim when set) and modular_qwen2_moe.py commit 001f85b38fb432858ace93f18622f07cec46d874
      (5.x: Qwen2MoeTopKRouter + fused Qwen2MoeExperts; the same routing and shared-expert arithmetic)
  src/transformers/models/qwen2_moe/configuration_qwen2_moe.py   commit 008e574391258935f3ecc3035c882e73bbcac419
      (5.x dataclass form; defaults: norm_topk_prob False, decoder_sparse_step 1, mlp_only_layers
      None -> [], output_router_logits False, router_aux_loss_coef 0.001, qkv_bias True)
  src/transformers/models/qwen3_moe/modeling_qwen3_moe.py   commit 16b6c53c8ec3a720bd45c1c377bf94e1d01249c5
      (4.5x-era generated file: Qwen3MoeAttention = Qwen3's, head_dim = getattr(config, "head_dim",
      hidden // heads); Qwen3MoeSparseMoeBlock = Qwen2-MoE's without the shared expert;
      load_balancing_loss_func; the router logits of sparse blocks only are recorded)
  src/transformers/models/qwen3_moe/configuration_qwen3_moe.py   commit 26f4b0f69f17118549a693ffe600c18e8505b636
      (4.5x: no head_dim argument (a config.json's head_dim arrives as a kwarg attribute), class default
      norm_topk_prob False; the released Qwen3-MoE config.json files say true; 5.x commit 008e5743 the
      same defaults)
The RoPE frequencies come from tools/hf_rope_reference.py (inv_freq_and_scaling(config, head_dim)).

Per family (what differs from tools/torch_llama.py, whose RMSNorm, rotate_half, apply_rotary_pos_emb and
repeat_kv are reused as they are):

  llama   head_dim from config["head_dim"] (else hidden // heads), so q_proj is [H*D, C] and o_proj
          [C, H*D] with H*D != C allowed; RoPE over head_dim with the rope_scaling's inv_freq (llama3:
          per-frequency division by factor, smoothed between the two wavelength thresholds);
          attention_bias / mlp_bias honoured (false in Llama 3.2); tie_word_embeddings
  qwen2   bias on q_proj, k_proj, v_proj (added before RoPE: q = x W_q^T + b_q, then rotated), none on
          o_proj or the MLP; default RoPE; head_dim = hidden // heads unless config has head_dim;
          use_sliding_window must be false (sliding windows are not modelled)
  qwen3   q = q_norm(q_proj(x) viewed [B, T, H, D]), k = k_norm(k_proj(x) viewed [B, T, KV, D]): an RMSNorm
          over the D elements of each head separately (float32, x * rsqrt(mean(x^2) + eps), then
          weight * x), one weight of shape [D] shared by all heads (and by all KV heads for k_norm);
          then RoPE; v is not normalised. Order per layer: proj (+ bias if attention_bias) -> q/k norm
          -> RoPE -> attention. head_dim from config (Qwen3Config's default is 128, not hidden // heads)
  qwen2_moe  qwen2's attention (q/k/v biases unless config qkv_bias is false; head_dim = hidden // heads:
          4.52's Qwen2MoeAttention ignores config.head_dim, so one that differs is refused); HF divides
          the scores by math.sqrt(head_dim) where this file multiplies by head_dim**-0.5: the same
          numbers whenever sqrt(head_dim) is a power of two (head_dim 16 in the goldens: / 4 == * 0.25)
  qwen3_moe  qwen3's attention (q_norm/k_norm; head_dim from config.json, else hidden // heads: unlike
          Qwen3Config, Qwen3MoeConfig has no head_dim default of 128)
  Both: layer i holds the sparse block iff (i not in mlp_only_layers) and (num_experts > 0 and
  (i + 1) % decoder_sparse_step == 0), else the dense SwiGLU MLP of width intermediate_size
  (mlp.gate_proj / up_proj / down_proj as above). The sparse block, on x = post_attention_layernorm(h)
  viewed [N = B*T, C] (rows b*T + t):
      router_logits = x @ mlp.gate.weight^T                           [N, E], no bias, x's dtype
      p = softmax(router_logits, dim=-1) in float32 (HF: dtype=torch.float; a float64 model here stays
          float64, for the finite-difference checks)
      w, sel = torch.topk(p, k)            k = num_experts_per_tok, descending
      if norm_topk_prob: w = w / w.sum(-1)  (qwen2_moe's default False, qwen3_moe's class default False,
                                             the released Qwen3-MoE configs true)
      w = w.to(x.dtype)
      y[t] = sum_j w[t, j] * expert_{sel[t, j]}(x[t])    expert_e(x) = mlp.experts.{e}.down_proj(
             silu(mlp.experts.{e}.gate_proj(x)) * mlp.experts.{e}.up_proj(x)), width moe_intermediate_size;
             summed as HF does: per expert in increasing index, index_add_ into zeros
      qwen2_moe only: y = y + sigmoid(x @ mlp.shared_expert_gate.weight^T) * shared_expert(x),
             shared_expert a SwiGLU MLP of width shared_expert_intermediate_size, the gate [1, C] no bias
  The gradient reaches the router only through w (and, if output_router_logits, the balancing loss);
  the indices sel carry none.
  Balancing loss (load_balancing_loss_func, Switch Transformer eq. 4-6, no attention mask): with the
  router logits of every sparse layer concatenated, Z [L_s * N, E] (layer-major),
      P = softmax(Z) in Z's dtype; sel = topk(P, k) indices; mask = one_hot(sel, E) [L_s*N, k, E]
      tokens_per_expert = mean over rows of mask          [k, E]   (no gradient)
      router_prob_per_expert = mean over rows of P        [E]
      aux = E * sum_{j, e} tokens_per_expert[j, e] * router_prob_per_expert[e]
          = E * sum_e f_e * P_e,  f_e = (#assignments to e over all layers and tokens) / (L_s * N)
  (pooled over the layers, not a sum of per-layer terms; sum_e f_e = k, so perfectly balanced routing
  gives aux = k). tokens_per_expert is mean(one_hot(sel).float()): float32 fractions even for a float64
  model (exact when L_s * N is a power of two, as in the goldens: 128). The loss adds router_aux_loss_coef * aux only when output_router_logits is true
  (config default false; FamilyForCausalLM does the same).

Common to all three: scores = (q @ k^T) * head_dim**-0.5 (a multiplication, as HF's `scaling`, not a
division by sqrt(D)), an additive causal mask of finfo.min above the diagonal, softmax in (at least)
float32, repeat_kv, o_proj; SwiGLU down(silu(gate(x)) * up(x)); pre-norm residual layers; final norm;
logits = norm(h) @ W^T with W = lm_head.weight or, tied, model.embed_tokens.weight (no lm_head.weight
parameter at all); loss = mean cross-entropy (HF's ForCausalLMLoss on shifted labels, here with explicit
targets). cos/sin = cos/sin(positions * inv_freq, cat(freqs, freqs)) * attention_scaling in float32,
then cast to the activations' dtype. Not modelled: pad_token_id's padding_idx (an nn.Embedding whose
pad row gets no gradient: the configs here set no pad_token_id, as the real ones), KV cache, dropout,
sliding windows, partial_rotary_factor, dynamic RoPE types (seq_len-dependent).

named_parameters() order is HF's: model.embed_tokens.weight, then per layer
  self_attn.q_proj.{weight,bias}, k_proj.*, v_proj.*, o_proj.*, [self_attn.q_norm.weight, k_norm.weight],
  mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight (a dense layer) or
  mlp.gate.weight [E, C], mlp.experts.{e}.{gate_proj,up_proj,down_proj}.weight for e = 0..E-1
  ([F_moe, C], [F_moe, C], [C, F_moe]), [mlp.shared_expert.{gate_proj,up_proj,down_proj}.weight,
  mlp.shared_expert_gate.weight [1, C]] (a sparse layer; the bracket qwen2_moe only),
  input_layernorm.weight, post_attention_layernorm.weight,
then model.norm.weight, [lm_head.weight]. nn.Linear weights [out, in], y = x @ W^T + b. (5.x holds the
experts fused in memory, experts.gate_up_proj / experts.down_proj, but reads and writes checkpoints
with these per-expert names.)

    import torch_hf_families as hf
    model = hf.FamilyForCausalLM(json.load(open("config.json")))
    logits, loss = model(tokens[:, :-1], tokens[:, 1:])
    model.router_logits            # MoE: the sparse layers' router logits of that forward, [B*T, E] each
    model.aux_loss()               # MoE: load_balancing_loss_func of them
"""
import math
import os
import sys
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_llama as tl  # noqa: E402
import hf_rope_reference  # noqa: E402

DENSE_FAMILIES = ("llama", "qwen2", "qwen3")
MOE_FAMILIES = ("qwen2_moe", "qwen3_moe")
FAMILIES = DENSE_FAMILIES + MOE_FAMILIES

# Each config class's __init__ defaults (LlamaConfig, Qwen2Config, Qwen3Config, Qwen2MoeConfig,
# Qwen3MoeConfig), for keys a config.json may leave out. head_dim None: hidden_size // num_attention_heads.
_DEFAULTS = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
                  max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False, rope_theta=10000.0,
                  rope_scaling=None, attention_bias=False, mlp_bias=False, head_dim=None, pad_token_id=None),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, hidden_act="silu",
                  max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False, rope_theta=10000.0,
                  rope_scaling=None, use_sliding_window=False, head_dim=None, pad_token_id=None),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=128, hidden_act="silu",
                  max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False, rope_theta=10000.0,
                  rope_scaling=None, attention_bias=False, use_sliding_window=False, pad_token_id=None),
    "qwen2_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                      num_attention_heads=16, num_key_value_heads=16, hidden_act="silu",
                      max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      rope_theta=10000.0, rope_scaling=None, use_sliding_window=False, head_dim=None,
                      pad_token_id=None, qkv_bias=True, decoder_sparse_step=1, moe_intermediate_size=1408,
                      shared_expert_intermediate_size=5632, num_experts_per_tok=4, num_experts=60,
                      norm_topk_prob=False, output_router_logits=False, router_aux_loss_coef=0.001,
                      mlp_only_layers=None),
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, hidden_act="silu",
                      max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      rope_theta=10000.0, rope_scaling=None, attention_bias=False, use_sliding_window=False,
                      head_dim=None, pad_token_id=None, decoder_sparse_step=1, moe_intermediate_size=768,
                      num_experts_per_tok=8, num_experts=128, norm_topk_prob=False, output_router_logits=False,
                      router_aux_loss_coef=0.001, mlp_only_layers=None),
}


def is_sparse_layer(layer_idx, num_experts, decoder_sparse_step, mlp_only_layers):
    """Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer: does layer `layer_idx` hold the sparse MoE block?"""
    return (layer_idx not in mlp_only_layers) and (num_experts > 0 and (layer_idx + 1) % decoder_sparse_step == 0)


@dataclass
class FamilyConfig:
    """What the model reads from a Hugging Face config.json dict (`hf`, kept as given)."""
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool          # bias on q_proj, k_proj, v_proj
    o_bias: bool            # bias on o_proj
    mlp_bias: bool          # bias on gate_proj, up_proj, down_proj
    qk_norm: bool           # qwen3's self_attn.q_norm / k_norm
    hf: dict = field(default_factory=dict)
    # Mixtures of experts (qwen2_moe, qwen3_moe); num_experts 0 otherwise.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0   # > 0: qwen2_moe's shared expert and its sigmoid gate
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple = ()
    output_router_logits: bool = False
    router_aux_loss_coef: float = 0.0

    def is_sparse(self, layer_idx):
        return is_sparse_layer(layer_idx, self.num_experts, self.decoder_sparse_step, self.mlp_only_layers)

    def sparse_layers(self):
        return [i for i in range(self.num_hidden_layers) if self.is_sparse(i)]

    @classmethod
    def from_hf(cls, d: dict) -> "FamilyConfig":
        mt = d.get("model_type")
        if mt not in FAMILIES:
            raise ValueError(f"model_type {mt!r}: expects one of {FAMILIES}")
        c = dict(_DEFAULTS[mt])
        c.update({k: v for k, v in d.items() if k in c})
        if c["hidden_act"] != "silu":
            raise ValueError(f"hidden_act {c['hidden_act']!r}: only silu (SwiGLU) is modelled")
        if c.get("use_sliding_window"):
            raise ValueError("use_sliding_window: true is not modelled")
        if c["pad_token_id"] is not None:
            raise ValueError("pad_token_id: nn.Embedding's padding_idx (no gradient for that row) is not modelled")
        heads = c["num_attention_heads"]
        kv = c["num_key_value_heads"] or heads
        head_dim = c["head_dim"] or c["hidden_size"] // heads
        if mt == "qwen2_moe" and head_dim != c["hidden_size"] // heads:
            raise ValueError(f"qwen2_moe head_dim {head_dim}: Qwen2MoeAttention (4.52) uses hidden_size // heads "
                             f"= {c['hidden_size'] // heads} whatever config.head_dim says")
        if heads % kv or head_dim % 2:
            raise ValueError(f"heads {heads}, kv heads {kv}, head_dim {head_dim}")
        if mt == "llama":
            qkv_bias = o_bias = bool(c["attention_bias"])
            mlp_bias, qk_norm = bool(c["mlp_bias"]), False
        elif mt == "qwen2":
            qkv_bias, o_bias, mlp_bias, qk_norm = True, False, False, False
        elif mt == "qwen2_moe":
            qkv_bias, o_bias, mlp_bias, qk_norm = bool(c["qkv_bias"]), False, False, False
        else:  # qwen3, qwen3_moe
            qkv_bias = o_bias = bool(c["attention_bias"])
            mlp_bias, qk_norm = False, True
        moe = {}
        if mt in MOE_FAMILIES:
            if int(c["decoder_sparse_step"]) < 1:
                raise ValueError(f"decoder_sparse_step {c['decoder_sparse_step']}: expects >= 1")
            E, k = int(c["num_experts"]), int(c["num_experts_per_tok"])
            if E > 0 and not 1 <= k <= E:
                raise ValueError(f"num_experts_per_tok {k} with num_experts {E}")
            moe = dict(num_experts=E, num_experts_per_tok=k, moe_intermediate_size=int(c["moe_intermediate_size"]),
                       shared_expert_intermediate_size=int(c["shared_expert_intermediate_size"])
                       if mt == "qwen2_moe" else 0,
                       norm_topk_prob=bool(c["norm_topk_prob"]), decoder_sparse_step=int(c["decoder_sparse_step"]),
                       mlp_only_layers=tuple(c["mlp_only_layers"] or ()),
                       output_router_logits=bool(c["output_router_logits"]),
                       router_aux_loss_coef=float(c["router_aux_loss_coef"]))
        return cls(model_type=mt, vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                   intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
                   num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                   rms_norm_eps=float(c["rms_norm_eps"]), max_position_embeddings=c["max_position_embeddings"],
                   tie_word_embeddings=bool(c["tie_word_embeddings"]), qkv_bias=qkv_bias, o_bias=o_bias,
                   mlp_bias=mlp_bias, qk_norm=qk_norm, hf=dict(d), **moe)


def rope_parameters(cfg: FamilyConfig):
    """(inv_freq float32 [head_dim / 2], attention_scaling) from tools/hf_rope_reference.py."""
    inv_freq, scaling = hf_rope_reference.inv_freq_and_scaling(cfg.hf, cfg.head_dim)
    inv_freq = torch.as_tensor(inv_freq)
    assert inv_freq.dtype == torch.float32 and inv_freq.shape == (cfg.head_dim // 2,), (inv_freq.dtype, inv_freq.shape)
    return inv_freq, float(scaling)


def rope_cos_sin(inv_freq, attention_scaling, positions, device_type="cpu"):
    """LlamaRotaryEmbedding.forward: float32, autocast off; positions [T] or [B, T] -> cos, sin [..., head_dim]."""
    with torch.autocast(device_type=device_type, enabled=False):
        freqs = positions.float()[..., None] * inv_freq.to(positions.device).float()
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * attention_scaling, emb.sin() * attention_scaling


class FamilyAttention(nn.Module):
    def __init__(self, cfg: FamilyConfig):
        super().__init__()
        self.cfg = cfg
        H, KV, D, C = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        self.scaling = D ** -0.5
        # Registration order = HF's (q, k, v, o, then q_norm, k_norm).
        self.q_proj = nn.Linear(C, H * D, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(C, KV * D, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(C, KV * D, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(H * D, C, bias=cfg.o_bias)
        if cfg.qk_norm:
            self.q_norm = tl.LlamaRMSNorm(D, cfg.rms_norm_eps)   # Qwen3RMSNorm: the same code as LlamaRMSNorm
            self.k_norm = tl.LlamaRMSNorm(D, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        H, KV, D = self.cfg.num_attention_heads, self.cfg.num_key_value_heads, self.cfg.head_dim
        q = self.q_proj(x).view(B, T, H, D)      # head h = rows h*D:(h+1)*D of q_proj (and of its bias)
        k = self.k_proj(x).view(B, T, KV, D)
        v = self.v_proj(x).view(B, T, KV, D)
        if self.cfg.qk_norm:                      # over the last dim (D) of each head, before RoPE
            q = self.q_norm(q)
            k = self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = cos.to(v.dtype), sin.to(v.dtype)
        q = tl.apply_rotary_pos_emb(q, cos, sin)
        k = tl.apply_rotary_pos_emb(k, cos, sin)
        k = tl.repeat_kv(k, H // KV)
        v = tl.repeat_kv(v, H // KV)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        mask = torch.full((T, T), torch.finfo(scores.dtype).min, dtype=scores.dtype, device=x.device).triu(1)
        scores = scores + mask                    # HF's additive 4D causal mask
        probs = F.softmax(scores, dim=-1, dtype=tl._at_least_f32(q.dtype)).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, H * D)
        return self.o_proj(out)


class FamilyMLP(nn.Module):
    def __init__(self, cfg: FamilyConfig, intermediate_size=None):
        super().__init__()
        C, b = cfg.hidden_size, cfg.mlp_bias
        Fd = cfg.intermediate_size if intermediate_size is None else intermediate_size
        self.gate_proj = nn.Linear(C, Fd, bias=b)
        self.up_proj = nn.Linear(C, Fd, bias=b)
        self.down_proj = nn.Linear(Fd, C, bias=b)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _RecordsForward:
    """Per-forward records (router_logits, last_routing) are not state: copies (deepcopy, pickle) drop them."""

    _RECORDS = ("router_logits", "last_routing")

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in self._RECORDS}


class FamilySparseMoeBlock(_RecordsForward, nn.Module):
    """Qwen2MoeSparseMoeBlock (with the shared expert) / Qwen3MoeSparseMoeBlock (without), 4.52's forward."""

    def __init__(self, cfg: FamilyConfig):
        super().__init__()
        self.num_experts = cfg.num_experts
        self.top_k = cfg.num_experts_per_tok
        self.norm_topk_prob = cfg.norm_topk_prob
        # Registration order = HF's: gate, experts, shared_expert, shared_expert_gate.
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList([FamilyMLP(cfg, cfg.moe_intermediate_size) for _ in range(cfg.num_experts)])
        self.has_shared = cfg.shared_expert_intermediate_size > 0
        if self.has_shared:
            self.shared_expert = FamilyMLP(cfg, cfg.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(cfg.hidden_size, 1, bias=False)

    def route(self, x2):
        """x2 [N, C] -> (router_logits [N, E], routing_weights [N, k] in x2's dtype, selected_experts [N, k])."""
        router_logits = self.gate(x2)
        routing_weights = F.softmax(router_logits, dim=1, dtype=tl._at_least_f32(x2.dtype))
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
        return router_logits, routing_weights.to(x2.dtype), selected_experts

    def forward(self, x):
        B, T, C = x.shape
        x2 = x.view(-1, C)
        router_logits, routing_weights, selected_experts = self.route(x2)
        self.last_routing = (routing_weights.detach(), selected_experts)   # for the goldens' records
        final = torch.zeros((B * T, C), dtype=x2.dtype, device=x2.device)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)   # [E, k, N]
        expert_hit = (expert_mask.sum(dim=(-1, -2)) > 0).nonzero(as_tuple=True)[0].tolist()
        for e in expert_hit:
            idx, top_x = torch.where(expert_mask[e])
            current_state = x2[None, top_x].reshape(-1, C)
            current = self.experts[e](current_state) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, current.to(x2.dtype))
        if self.has_shared:
            shared = self.shared_expert(x2)
            shared = torch.sigmoid(self.shared_expert_gate(x2)) * shared
            final = final + shared
        return final.reshape(B, T, C), router_logits


class FamilyDecoderLayer(nn.Module):
    def __init__(self, cfg: FamilyConfig, layer_idx: int = 0):
        super().__init__()
        self.self_attn = FamilyAttention(cfg)
        self.sparse = cfg.model_type in MOE_FAMILIES and cfg.is_sparse(layer_idx)
        self.mlp = FamilySparseMoeBlock(cfg) if self.sparse else FamilyMLP(cfg)
        self.input_layernorm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        """-> (hidden, router_logits [B*T, E] or None for a dense layer)."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        if not self.sparse:
            return x + self.mlp(self.post_attention_layernorm(x)), None
        y, router_logits = self.mlp(self.post_attention_layernorm(x))
        return x + y, router_logits


class FamilyModel(_RecordsForward, nn.Module):
    def __init__(self, cfg: FamilyConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([FamilyDecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)])
        self.norm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        # Not a parameter nor a buffer: stays float32 under .double(), as HF's forward does .float() on it.
        self.inv_freq, self.attention_scaling = rope_parameters(cfg)

    def forward(self, input_ids, position_ids=None):
        T = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device)
        cos, sin = rope_cos_sin(self.inv_freq, self.attention_scaling, position_ids, input_ids.device.type)
        x = self.embed_tokens(input_ids)
        router_logits = []
        for layer in self.layers:
            x, rl = layer(x, cos, sin)
            if rl is not None:
                router_logits.append(rl)
        self.router_logits = tuple(router_logits)   # the sparse layers', in layer order (HF's all_router_logits)
        return self.norm(x)


class FamilyForCausalLM(_RecordsForward, nn.Module):
    def __init__(self, config):
        """config: a Hugging Face config.json dict, or a FamilyConfig."""
        super().__init__()
        cfg = config if isinstance(config, FamilyConfig) else FamilyConfig.from_hf(config)
        self.cfg = cfg
        self.model = FamilyModel(cfg)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def head_weight(self):
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, input_ids, targets=None, position_ids=None):
        """input_ids, targets [B, T] int64 -> (logits [B, T, V] (float32, float64 for a float64 model),
        mean cross-entropy (+ router_aux_loss_coef * aux_loss() when a MoE config has output_router_logits
        true) or None). Afterwards self.router_logits: the sparse layers' router logits ([B*T, E] each)."""
        h = self.model(input_ids, position_ids)
        self.router_logits = self.model.router_logits
        logits = F.linear(h, self.head_weight())
        logits = logits.to(tl._at_least_f32(logits.dtype))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
            if self.cfg.output_router_logits and self.router_logits:
                loss = loss + self.cfg.router_aux_loss_coef * self.aux_loss()
        return logits, loss

    def aux_loss(self):
        """load_balancing_loss_func of the last forward's router logits (0 for a model without sparse layers)."""
        return load_balancing_loss_func(self.router_logits, self.cfg.num_experts, self.cfg.num_experts_per_tok)


def load_balancing_loss_func(gate_logits, num_experts, top_k):
    """Hugging Face's load_balancing_loss_func (modeling_qwen2_moe.py / modeling_qwen3_moe.py, copied from
    Mixtral's) without an attention mask: gate_logits a tuple of [N, E] router logits, one per sparse layer."""
    if gate_logits is None or not isinstance(gate_logits, tuple) or len(gate_logits) == 0:
        return 0
    concatenated_gate_logits = torch.cat([g for g in gate_logits], dim=0)
    routing_weights = F.softmax(concatenated_gate_logits, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)        # [k, E]
    router_prob_per_expert = torch.mean(routing_weights, dim=0)       # [E]
    overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
    return overall_loss * num_experts


def llama3_inv_freq_transcribed(config: dict, head_dim: int):
    """An independent transcription of modeling_rope_utils._compute_llama3_parameters (commit 0044e3b3, with
    dim = head_dim), used only to cross-check tools/hf_rope_reference.py in the self-checks."""
    rs = config["rope_scaling"]
    base = config.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    out = torch.where(wavelen > low_wl, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
    return torch.where(medium, smoothed, out), 1.0
