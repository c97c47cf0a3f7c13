"""Plain-torch DeepSeek-V2 / DeepSeek-V3 causal LMs (multi-head latent attention + DeepSeekMoE) built from a
config.json dict, with Hugging Face's parameter names and semantics (eager attention, no KV cache, no dropout,
float32 or float64), plus Megatron-LM's aux-loss-free expert-bias update as an option. No `transformers`.

Transcribed from (stored versions; the search tools give no tagged release):
  huggingface/transformers src/transformers/models/deepseek_v2/modeling_deepseek_v2.py
      commit 03eac6f6d2af7e8562113f0b78d3d2d59a7d843d (4.57-era: DeepseekV2MoEGate + per-expert ModuleList,
      DeepseekV2MoE.moe, apply_rotary_emb over complex pairs, DeepseekV2Attention) -- FOLLOWED; also read
      commit 0233e509531ace915c8241b4c16c8032a583279c (5.x: fused DeepseekV2Experts, route_tokens_to_experts;
      the same routing, weights and arithmetic; checkpoints keep the per-expert names used here)
      modular_deepseek_v2.py commit 000c33fdfde12e1ffafbfcdb3c926df5727a00b6 (config: head_dim = qk_rope_head_dim)
      configuration_deepseek_v2.py commit 008e574391258935f3ecc3035c882e73bbcac419 (5.x defaults)
  .../deepseek_v3/modeling_deepseek_v3.py commit 00b676f8f0489b88652a31d70751cc540dd06305 (4.5x-era:
      DeepseekV3TopkRouter, DeepseekV3MoE.moe, apply_rotary_pos_emb_interleave, yarn_get_mscale, softmax scale)
  .../deepseek_v3/configuration_deepseek_v3.py commit 001f85b38fb432858ace93f18622f07cec46d874 (defaults,
      rope_interleave True, head_dim = qk_rope_head_dim)
  NVIDIA/Megatron-LM megatron/core/transformer/moe/moe_utils.py commit 00611e6eeb0b09b5ee074750956855215ddbd67f
      (get_updated_expert_bias), router.py commit 005742ff1f002035922b88a648fa615aec22eeff (TopKRouter:
      local_tokens_per_expert += routing_map.sum(0) when grad is enabled; float32 expert_bias),
      megatron/core/distributed/finalize_model_grads.py commit 00c2c0adeec16015f386548793c88ef08ff6acec
      (_update_router_expert_bias: once per global batch, after backward, then the counts are zeroed)
RoPE frequencies: tools/hf_rope_reference.py (dim = head_dim = qk_rope_head_dim, as both config classes set).

MLA (layer input x [B, T, C], H heads, Dn = qk_nope_head_dim, Dr = qk_rope_head_dim, Dqk = Dn + Dr, Dv):
  q = q_proj(x)                                    (q_lora_rank null: V2-Lite)
    = q_b_proj(q_a_layernorm(q_a_proj(x)))         (q_lora_rank set; q_a_layernorm = RMSNorm(q_lora_rank) with
                                                    eps 1e-6, NOT rms_norm_eps; likewise kv_a_layernorm)
  q viewed [B, T, H, Dqk] -> per head q_nope = [:Dn], q_pe = [Dn:]
  kv_a_proj_with_mqa(x) = [c | k_pe]  ([kv_lora_rank | Dr]); k_pe is ONE head shared by all H heads
  c_n = kv_a_layernorm(c); kv_b_proj(c_n) viewed [B, T, H, Dn + Dv] -> k_nope = [:Dn], v = [Dn:]
  RoPE on q_pe (per head) and k_pe (one head), then k_pe broadcast to the H heads
  query = cat(q_nope, q_pe), key = cat(k_nope, k_pe)  [B, H, T, Dqk];  eager causal attention with
  scores = (query key^T) * softmax_scale (+ finfo.min above the diagonal), softmax in float32;
  out [B, T, H*Dv] -> o_proj.  Biases: q_a_proj, kv_a_proj_with_mqa, o_proj iff attention_bias; never on
  q_proj, q_b_proj, kv_b_proj.  num_key_value_heads must equal num_attention_heads (HF's repeat_kv is then 1).
  softmax_scale = Dqk**-0.5, times mscale**2 with mscale = yarn_get_mscale(factor, mscale_all_dim) =
  0.1 * mscale_all_dim * ln(factor) + 1 (1 if factor <= 1) when the rope scaling is not default and
  mscale_all_dim is set. V3 (00b676f8; its test is `rope_scaling is not None`) does this; V2 at 03eac6f6 and
  0233e509 does NOT (plain Dqk**-0.5): a bug fixed by transformers PR #47435 (moves V3's code into V2, test
  rope_type != "default"), and DeepSeek's own modeling_deepseek.py has it; FOLLOWED here for both. cos/sin get
  yarn's attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) (1.0 exactly when
  mscale == mscale_all_dim, as DeepSeek's configs). 4.x yarn replaces factor by max_position_embeddings /
  original_max_position_embeddings, 5.x keeps the config's: equal in DeepSeek's configs (and the goldens').

RoPE: V2: freqs_cis = polar(1, pos * inv_freq) * attention_scaling (complex64); q_pe viewed as complex pairs
  (x[2i] + i x[2i+1]) times freqs_cis[i], back to real (interleaved layout out). V3 with rope_interleave (the
  class default; no released config sets it): q_pe = q_pe[..., PERM], then the half-split form
  x*cos + rotate_half(x)*sin with cos/sin = cat(freqs, freqs)(.cos, .sin) * attention_scaling (half-split
  layout out; rope_interleave false: no PERM). PERM = [0, 2, 4, .., Dr-2, 1, 3, .., Dr-1] (evens then odds):
      interleaved_rope(x)[..., PERM] == rotate_half_rope(x[..., PERM])          (up to rounding)
  i.e. a V2/V3-interleaved checkpoint is a half-split one whose q_pe rows (per head, of q_proj / q_b_proj) and
  k_pe rows (of kv_a_proj_with_mqa) are permuted by PERM; attention scores are unchanged (q.k is invariant
  under the same permutation of both). V2's q/k records are in the interleaved layout, V3's in the half-split.

MoE (layer i sparse iff i >= first_k_dense_replace; else the SwiGLU MLP of width intermediate_size;
  moe_layer_freq must be 1: DeepSeek's remote code also requires i % moe_layer_freq == 0, HF ignores it).
  x2 = post_attention_layernorm(h) [N = B*T, C]; logits = x2.float() @ gate.weight.float()^T [N, E]
  V2: s = softmax(logits) (float32); "greedy": (w, idx) = topk(s, k); "group_limited_greedy": group score =
      max of s in each of n_group groups, keep topk_group groups, s of the others -> 0.0, (w, idx) = topk;
      w *= routed_scaling_factor. norm_topk_prob and scoring_func are ignored by HF V2 (refused unless
      false / softmax). aux_loss_alpha / seq_aux are read and NOT used by HF (no aux loss in training).
  V3 ("noaux_tc", sigmoid; HF ignores topk_method/scoring_func, refused unless noaux_tc/sigmoid):
      s = sigmoid(logits); b = s + gate.e_score_correction_bias (selection only); group score = sum of the
      top-2 b in each group; keep topk_group groups; b of the others -> 0.0 (not -inf); idx = topk(b, k);
      w = s.gather(idx) (UNbiased); norm_topk_prob: w /= (sum(w) + 1e-20); w *= routed_scaling_factor.
      (Megatron's group score sums the top k/topk_group, HF's always the top 2: equal for DeepSeek-V3's 8/4 only.)
  y = sum_j w[:, j] * expert_{idx[:, j]}(x2) (float32) + shared_experts(x2), shared_experts a SwiGLU MLP of
  width moe_intermediate_size * n_shared_experts, NOT gated. V2 sums per token over j (HF's moe: per-
  assignment outputs, then .mul_(w).sum(1)); V3 per expert in index order with index_add_ into zeros
  (identical for k = 2). Gradient reaches the router through w only.
  Recorded only (not in the loss): the sequence-wise balance loss of DeepSeek's modeling_deepseek.py (seq_aux)
  without aux_loss_alpha: per sequence b, f_e = count_e(b) / (T k / E), P_e = mean_t p_{t,e}(b),
  aux = mean_b sum_e f_e P_e  (V2: p = softmax; V3: p = s / sum_e s, the V3 paper's normalised scores).
Expert bias (option enable_expert_bias, V3 only; Megatron): each training forward with grad enabled adds
  bincount(idx) to a float32 counter per layer; update_expert_bias(rate) then does, per layer,
  bias += rate * sign(mean(counts) - counts) (float32, sign(0) = 0) and zeroes the counters.

named_parameters(): model.embed_tokens.weight; per layer self_attn.{q_proj | q_a_proj, q_a_layernorm, q_b_proj},
kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj (.weight); mlp.{gate,up,down}_proj (dense) or
mlp.experts.{e}.{gate,up,down}_proj, mlp.gate, mlp.shared_experts.{gate,up,down}_proj (sparse); input_layernorm,
post_attention_layernorm; model.norm.weight, lm_head.weight. V3 buffer: mlp.gate.e_score_correction_bias [E].
Not modelled: KV cache, dropout, MTP layers (num_nextn_predict_layers; HF drops them), pad_token_id.
"""
import math
import os
import sys
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_rope_reference  # noqa: E402
import torch_llama as tl  # noqa: E402

FAMILIES = ("deepseek_v2", "deepseek_v3")
_DEFAULTS = {  # the config classes' defaults, for keys a config.json leaves out
    "deepseek_v2": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
                        max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
                        attention_bias=False, mlp_bias=False, first_k_dense_replace=0, kv_lora_rank=512,
                        q_lora_rank=1536, n_group=None, n_routed_experts=64, n_shared_experts=2, qk_nope_head_dim=128,
                        qk_rope_head_dim=64, routed_scaling_factor=1.0, topk_group=None, topk_method="greedy",
                        norm_topk_prob=False, v_head_dim=128, num_experts_per_tok=None, moe_intermediate_size=1407,
                        scoring_func="softmax", moe_layer_freq=1, aux_loss_alpha=0.001, seq_aux=True,
                        pad_token_id=None),
    "deepseek_v3": dict(vocab_size=129280, hidden_size=7168, intermediate_size=18432, num_hidden_layers=61,
                        num_attention_heads=128, num_key_value_heads=128, hidden_act="silu",
                        max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
                        attention_bias=False, mlp_bias=False, first_k_dense_replace=3, kv_lora_rank=512,
                        q_lora_rank=1536, n_group=8, n_routed_experts=256, n_shared_experts=1, qk_nope_head_dim=128,
                        qk_rope_head_dim=64, routed_scaling_factor=2.5, topk_group=4, topk_method="noaux_tc",
                        norm_topk_prob=True, v_head_dim=128, num_experts_per_tok=8, moe_intermediate_size=2048,
                        scoring_func="sigmoid", moe_layer_freq=1, aux_loss_alpha=0.001, seq_aux=True,
                        rope_interleave=True, pad_token_id=None),
}


def yarn_get_mscale(scale=1, mscale=1):
    """modeling_deepseek_v3.py (and DeepSeek's modeling_deepseek.py)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def softmax_scale(hf, qk_head_dim):
    """qk_head_dim**-0.5 (* mscale**2 under a non-default rope scaling with mscale_all_dim), a Python double."""
    scale = qk_head_dim ** (-0.5)
    rs = hf.get("rope_scaling") or hf.get("rope_parameters") or None
    if rs is not None and rs.get("rope_type", rs.get("type", "default")) != "default":
        mscale_all_dim = rs.get("mscale_all_dim", 0)
        if mscale_all_dim:
            mscale = yarn_get_mscale(rs["factor"], mscale_all_dim)
            scale = scale * mscale * mscale
    return scale


@dataclass
class DeepseekConfig:
    model_type: str
    vocab_size: int; hidden_size: int; intermediate_size: int; num_hidden_layers: int; num_attention_heads: int  # noqa
    q_lora_rank: object                      # None: q_proj
    kv_lora_rank: int; qk_nope_head_dim: int; qk_rope_head_dim: int; v_head_dim: int  # noqa: E702
    rms_norm_eps: float; max_position_embeddings: int; tie_word_embeddings: bool; attention_bias: bool  # noqa
    first_k_dense_replace: int; n_routed_experts: int; num_experts_per_tok: int; n_shared_experts: int  # noqa
    moe_intermediate_size: int; routed_scaling_factor: float; norm_topk_prob: bool; topk_method: str  # noqa
    n_group: int; topk_group: int            # n_group 1 without groups  # noqa: E702
    rope_interleave: bool; softmax_scale: float; aux_loss_alpha: float   # softmax_scale: a Python double  # noqa
    hf: dict = field(default_factory=dict)

    @property
    def qk_head_dim(self):
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def is_sparse(self, i):
        return i >= self.first_k_dense_replace

    @classmethod
    def from_hf(cls, d):
        mt = d.get("model_type")
        if mt not in FAMILIES:
            raise ValueError(f"model_type {mt!r}: expects one of {FAMILIES}")
        c = dict(_DEFAULTS[mt])
        c.update({k: v for k, v in d.items() if k in c})
        v3 = mt == "deepseek_v3"
        heads = c["num_attention_heads"]
        checks = [(c["hidden_act"] == "silu", "hidden_act: only silu"),
                  (not c["mlp_bias"], "mlp_bias: not modelled"),
                  (c["pad_token_id"] is None, "pad_token_id: padding_idx not modelled"),
                  ((c["num_key_value_heads"] or heads) == heads, "num_key_value_heads != num_attention_heads"),
                  (c["moe_layer_freq"] == 1, "moe_layer_freq != 1 (HF ignores it, DeepSeek's code does not)"),
                  (c["n_routed_experts"] and c["num_experts_per_tok"] and c["n_shared_experts"],
                   "n_routed_experts / num_experts_per_tok / n_shared_experts must be set (HF calls shared_experts)"),
                  (c["qk_rope_head_dim"] % 2 == 0, "odd qk_rope_head_dim")]
        if v3:
            checks += [(c["topk_method"] == "noaux_tc" and c["scoring_func"] == "sigmoid",
                        "deepseek_v3: HF always routes noaux_tc with sigmoid scores")]
        else:
            checks += [(c["scoring_func"] == "softmax", "deepseek_v2: HF always scores with softmax"),
                       (not c["norm_topk_prob"], "deepseek_v2: HF ignores norm_topk_prob (DeepSeek's code does not)"),
                       (c["topk_method"] in ("greedy", "group_limited_greedy"), "deepseek_v2: topk_method")]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)
        E, k = int(c["n_routed_experts"]), int(c["num_experts_per_tok"])
        grouped = v3 or c["topk_method"] == "group_limited_greedy"
        G, TG = (int(c["n_group"]), int(c["topk_group"])) if grouped else (1, 1)
        if E % G or not 1 <= TG <= G or not 1 <= k <= E or (v3 and E // G < 2):
            raise ValueError(f"experts {E}, top-{k}, n_group {G}, topk_group {TG}")
        qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
        return cls(model_type=mt, vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                   intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
                   num_attention_heads=heads, q_lora_rank=c["q_lora_rank"], kv_lora_rank=c["kv_lora_rank"],
                   qk_nope_head_dim=c["qk_nope_head_dim"], qk_rope_head_dim=c["qk_rope_head_dim"],
                   v_head_dim=c["v_head_dim"], rms_norm_eps=float(c["rms_norm_eps"]),
                   max_position_embeddings=c["max_position_embeddings"],
                   tie_word_embeddings=bool(c["tie_word_embeddings"]), attention_bias=bool(c["attention_bias"]),
                   first_k_dense_replace=int(c["first_k_dense_replace"]), n_routed_experts=E, num_experts_per_tok=k,
                   n_shared_experts=int(c["n_shared_experts"]), moe_intermediate_size=int(c["moe_intermediate_size"]),
                   routed_scaling_factor=float(c["routed_scaling_factor"]), norm_topk_prob=bool(c["norm_topk_prob"]),
                   topk_method=c["topk_method"], n_group=G, topk_group=TG,
                   rope_interleave=bool(c.get("rope_interleave", False)), softmax_scale=softmax_scale(d, qk),
                   aux_loss_alpha=float(c["aux_loss_alpha"]), hf=dict(d))


def rope_perm(d):
    """PERM: interleaved pairs (2i, 2i+1) -> half-split (i, i + d/2)."""
    return list(range(0, d, 2)) + list(range(1, d, 2))


def apply_rotary_emb_v2(xq, xk, freqs_cis):
    """modeling_deepseek_v2.apply_rotary_emb: x [B, h, T, Dr], freqs_cis [1, T, Dr/2] complex (float64 stays)."""
    dt = tl._at_least_f32(xq.dtype)
    xq_ = torch.view_as_complex(xq.to(dt).reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.to(dt).reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.unsqueeze(1)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3).type_as(xk)
    return xq_out, xk_out


def apply_rotary_pos_emb_v3(q, k, cos, sin, interleave):
    """modeling_deepseek_v3.apply_rotary_pos_emb(_interleave): cos/sin [1, T, Dr] in q's dtype."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    if interleave:
        b, h, s, d = q.shape
        q = q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
        b, h, s, d = k.shape
        k = k.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
    return q * cos + tl.rotate_half(q) * sin, k * cos + tl.rotate_half(k) * sin


class _Records:
    """Per-forward records are not state: copies (deepcopy, pickle) drop them."""
    _RECORDS = ("records", "last_route")

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in self._RECORDS}


class DeepseekAttention(_Records, nn.Module):
    def __init__(self, cfg: DeepseekConfig):
        super().__init__()
        self.cfg = cfg
        C, H, b = cfg.hidden_size, cfg.num_attention_heads, cfg.attention_bias
        if cfg.q_lora_rank is None:
            self.q_proj = nn.Linear(C, H * cfg.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(C, cfg.q_lora_rank, bias=b)
            self.q_a_layernorm = tl.LlamaRMSNorm(cfg.q_lora_rank)          # eps 1e-6 (HF passes none)
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, H * cfg.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(C, cfg.kv_lora_rank + cfg.qk_rope_head_dim, bias=b)
        self.kv_a_layernorm = tl.LlamaRMSNorm(cfg.kv_lora_rank)             # eps 1e-6
        self.kv_b_proj = nn.Linear(cfg.kv_lora_rank, H * (cfg.qk_nope_head_dim + cfg.v_head_dim), bias=False)
        self.o_proj = nn.Linear(H * cfg.v_head_dim, C, bias=b)
        self.record = False

    def forward(self, x, rope):
        cfg = self.cfg
        B, T, _ = x.shape
        H, Dn, Dr, Dv = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        q = self.q_proj(x) if cfg.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(B, T, H, Dn + Dr).transpose(1, 2)
        q_nope, q_pe = torch.split(q, [Dn, Dr], dim=-1)
        c, k_pe = torch.split(self.kv_a_proj_with_mqa(x), [cfg.kv_lora_rank, Dr], dim=-1)
        c_n = self.kv_a_layernorm(c)
        kv = self.kv_b_proj(c_n).view(B, T, H, Dn + Dv).transpose(1, 2)
        k_nope, v = torch.split(kv, [Dn, Dv], dim=-1)
        k_pe = k_pe.view(B, 1, T, Dr)
        if cfg.model_type == "deepseek_v2":
            q_pe, k_pe = apply_rotary_emb_v2(q_pe, k_pe, rope)
        else:
            cos, sin = rope
            q_pe, k_pe = apply_rotary_pos_emb_v3(q_pe, k_pe, cos.to(x.dtype), sin.to(x.dtype), cfg.rope_interleave)
        k_pe = k_pe.expand(*k_nope.shape[:-1], -1)
        query, key = torch.cat((q_nope, q_pe), dim=-1), torch.cat((k_nope, k_pe), dim=-1)
        scores = torch.matmul(query, key.transpose(2, 3)) * cfg.softmax_scale
        mask = torch.full((T, T), torch.finfo(scores.dtype).min, dtype=scores.dtype, device=x.device).triu(1)
        probs = F.softmax(scores + mask, dim=-1, dtype=tl._at_least_f32(query.dtype)).to(query.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, H * Dv)
        if self.record:   # [B*T, ...] rows b*T + t
            self.records = {"q": query.transpose(1, 2).reshape(B * T, H, -1), "k": key.transpose(1, 2).reshape(
                B * T, H, -1), "v": v.transpose(1, 2).reshape(B * T, H, Dv), "compressed_kv": c_n.reshape(B * T, -1),
                "k_pe": k_pe[:, 0].reshape(B * T, Dr), "attn_out": out.reshape(B * T, H * Dv)}
        return self.o_proj(out)


class DeepseekMLP(nn.Module):
    def __init__(self, C, width):
        super().__init__()
        self.gate_proj = nn.Linear(C, width, bias=False)
        self.up_proj = nn.Linear(C, width, bias=False)
        self.down_proj = nn.Linear(width, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DeepseekGate(nn.Module):
    """V2's DeepseekV2MoEGate / V3's DeepseekV3TopkRouter: weight [E, C] (+ V3's e_score_correction_bias)."""

    def __init__(self, cfg: DeepseekConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.hidden_size))
        if cfg.model_type == "deepseek_v3":
            self.register_buffer("e_score_correction_bias", torch.zeros(cfg.n_routed_experts))


def group_mask(scores_for_choice, G, TG, v3):
    """Group score (V2: max, V3: sum of the top 2) per group; the topk_group best groups -> mask [N, E]."""
    N, E = scores_for_choice.shape
    g = scores_for_choice.view(N, G, E // G)
    group_scores = g.topk(2, dim=-1)[0].sum(dim=-1) if v3 else g.max(dim=-1).values
    group_idx = torch.topk(group_scores, k=TG, dim=-1, sorted=False)[1]
    gm = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    return gm.unsqueeze(-1).expand(N, G, E // G).reshape(N, E).bool(), group_scores


class DeepseekMoE(_Records, nn.Module):
    def __init__(self, cfg: DeepseekConfig):
        super().__init__()
        self.cfg = cfg
        C, E = cfg.hidden_size, cfg.n_routed_experts
        # Registration order = HF's: experts, gate, shared_experts.
        self.experts = nn.ModuleList([DeepseekMLP(C, cfg.moe_intermediate_size) for _ in range(E)])
        self.gate = DeepseekGate(cfg)
        self.shared_experts = DeepseekMLP(C, cfg.moe_intermediate_size * cfg.n_shared_experts)
        self.v3 = cfg.model_type == "deepseek_v3"
        self.tokens_per_expert = torch.zeros(E, dtype=torch.float32)   # Megatron's local_tokens_per_expert

    def route(self, x2):
        """x2 [N, C] -> dict: logits, scores, choice (masked scores the top-k is taken over), group_scores, idx
        [N, k] (descending `choice`; HF's topk is sorted=False), w [N, k] (final weights)."""
        cfg, k = self.cfg, self.cfg.num_experts_per_tok
        dt = tl._at_least_f32(x2.dtype)
        logits = F.linear(x2.to(dt), self.gate.weight.to(dt))
        group_scores = None
        if self.v3:
            scores = logits.sigmoid()
            with torch.no_grad():
                choice = scores + self.gate.e_score_correction_bias.to(dt).unsqueeze(0)
                m, group_scores = group_mask(choice, cfg.n_group, cfg.topk_group, True)
                choice = choice.masked_fill(~m, 0.0)
                idx = torch.topk(choice, k=k, dim=-1, sorted=True)[1]
            w = scores.gather(1, idx)
            if cfg.norm_topk_prob:
                w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        else:
            scores = logits.softmax(dim=-1, dtype=dt)
            choice = scores
            if cfg.topk_method == "group_limited_greedy":
                m, group_scores = group_mask(scores, cfg.n_group, cfg.topk_group, False)
                choice = scores.masked_fill(~m, 0.0)
            w, idx = torch.topk(choice, k=k, dim=-1, sorted=True)
        w = w * cfg.routed_scaling_factor
        return dict(logits=logits, scores=scores, choice=choice.detach(), group_scores=group_scores, idx=idx, w=w)

    def forward(self, x):
        B, T, C = x.shape
        x2 = x.reshape(-1, C)
        r = self.route(x2)
        self.last_route = r
        idx, w = r["idx"], r["w"]
        if self.training and torch.is_grad_enabled():
            self.tokens_per_expert = self.tokens_per_expert + torch.bincount(
                idx.reshape(-1), minlength=self.cfg.n_routed_experts).float()
        N, k = idx.shape
        if self.v3:   # DeepseekV3MoE.moe: per expert, index_add_ into float32 zeros
            y = torch.zeros((N, C), dtype=w.dtype, device=x.device)
            onehot = F.one_hot(idx, num_classes=len(self.experts)).permute(2, 0, 1)   # [E, N, k]
            for e, expert in enumerate(self.experts):
                tok, j = torch.where(onehot[e])
                if tok.numel() > 0:
                    y = y.index_add(0, tok, expert(x2[tok]) * w[tok, j].unsqueeze(-1))
            y = y.to(x2.dtype)
        else:         # DeepseekV2MoE.moe: per-assignment outputs, then .mul_(w).sum(1) in w's dtype
            flat = idx.reshape(-1)
            outs = x2.new_zeros((N * k, C))
            for e, expert in enumerate(self.experts):
                pos = (flat == e).nonzero(as_tuple=True)[0]
                if pos.numel() > 0:
                    outs = outs.index_put((pos,), expert(x2[pos // k]))
            y = (outs.view(N, k, C).to(w.dtype) * w.unsqueeze(-1)).sum(dim=1).to(x2.dtype)
        return y.view(B, T, C) + self.shared_experts(x)

    def seq_aux_loss(self, B, T):
        """DeepSeek's seq_aux balance loss of the last forward, without aux_loss_alpha (see the docstring)."""
        r, E, k = self.last_route, self.cfg.n_routed_experts, self.cfg.num_experts_per_tok
        p = r["scores"].detach()
        if self.v3:
            p = p / p.sum(dim=-1, keepdim=True)
        ones = torch.ones(B, T * k, dtype=p.dtype)
        ce = torch.zeros(B, E, dtype=p.dtype).scatter_add_(1, r["idx"].reshape(B, -1), ones) / (T * k / E)
        return (ce * p.view(B, T, E).mean(dim=1)).sum(dim=1).mean()


def get_updated_expert_bias(tokens_per_expert, expert_bias, expert_bias_update_rate):
    """Megatron-LM moe_utils.get_updated_expert_bias (without the all-reduce; one rank)."""
    with torch.no_grad():
        average_tokens = tokens_per_expert.sum(dim=-1, keepdim=True) / tokens_per_expert.shape[-1]
        offset = average_tokens - tokens_per_expert
        return expert_bias + torch.sign(offset) * expert_bias_update_rate


class DeepseekDecoderLayer(nn.Module):
    def __init__(self, cfg: DeepseekConfig, i):
        super().__init__()
        self.self_attn = DeepseekAttention(cfg)
        self.sparse = cfg.is_sparse(i)
        self.mlp = DeepseekMoE(cfg) if self.sparse else DeepseekMLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, rope):
        x = x + self.self_attn(self.input_layernorm(x), rope)
        return x + self.mlp(self.post_attention_layernorm(x))


class DeepseekForCausalLM(nn.Module):
    def __init__(self, config, enable_expert_bias=False):
        """config: a config.json dict or a DeepseekConfig. enable_expert_bias: count the routed tokens of every
        training forward, for update_expert_bias (V3 only: V2 has no e_score_correction_bias)."""
        super().__init__()
        cfg = config if isinstance(config, DeepseekConfig) else DeepseekConfig.from_hf(config)
        if enable_expert_bias and cfg.model_type != "deepseek_v3":
            raise ValueError("enable_expert_bias: only deepseek_v3 routes with a bias")
        self.cfg, self.enable_expert_bias = cfg, enable_expert_bias
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.model.layers = nn.ModuleList([DeepseekDecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)])
        self.model.norm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        # Not buffers: stay float32 under .double(), as HF's forward does .float() on them.
        inv, self.attention_scaling = hf_rope_reference.inv_freq_and_scaling(
            dict({"max_position_embeddings": cfg.max_position_embeddings}, **cfg.hf), cfg.qk_rope_head_dim)
        self.inv_freq = torch.as_tensor(inv, dtype=torch.float32)
        assert self.inv_freq.shape == (cfg.qk_rope_head_dim // 2,)

    def sparse_blocks(self):
        return [(i, l.mlp) for i, l in enumerate(self.model.layers) if l.sparse]

    def rope(self, T):
        """V2: freqs_cis [1, T, Dr/2] complex64; V3: (cos, sin) [1, T, Dr] float32 (HF's matmul form)."""
        pos = torch.arange(T, dtype=torch.int64)[None, None, :].float()
        freqs = (self.inv_freq[None, :, None].float() @ pos).transpose(1, 2)
        if self.cfg.model_type == "deepseek_v2":
            return torch.polar(torch.ones_like(freqs), freqs) * self.attention_scaling
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling

    def forward(self, input_ids, targets=None):
        x = self.model.embed_tokens(input_ids)
        rope = self.rope(input_ids.shape[1])
        for layer in self.model.layers:
            x = layer(x, rope)
        h = self.model.norm(x)
        W = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(h, W)
        logits = logits.to(tl._at_least_f32(logits.dtype))
        loss = None if targets is None else F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def update_expert_bias(self, rate):
        """Megatron's _update_router_expert_bias: every sparse layer's bias from the tokens counted since the
        last update; the counters are zeroed. Returns the new biases [L_sparse, E]."""
        out = []
        for _, moe in self.sparse_blocks():
            b = moe.gate.e_score_correction_bias
            new = get_updated_expert_bias(moe.tokens_per_expert, b.float(), rate)
            b.copy_(new.to(b.dtype))
            moe.tokens_per_expert = torch.zeros_like(moe.tokens_per_expert)
            out.append(new)
        return torch.stack(out)

    def aux_losses(self, B, T):
        return [moe.seq_aux_loss(B, T) for _, moe in self.sparse_blocks()]


def kv_cache_floats_per_token(cfg: DeepseekConfig):
    """Per layer: MLA's latent (kv_lora_rank + qk_rope_head_dim), HF's DynamicCache of the expanded keys and values
    (H * (Dqk + Dv)), and an MHA/GQA of H heads of head_dim Dqk (2 * H * Dqk)."""
    H = cfg.num_attention_heads
    return dict(mla=cfg.kv_lora_rank + cfg.qk_rope_head_dim, hf_expanded=H * (cfg.qk_head_dim + cfg.v_head_dim),
                mha=2 * H * cfg.qk_head_dim)
