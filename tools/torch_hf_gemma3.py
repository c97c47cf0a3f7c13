"""Plain-torch Gemma 3 text model (Hugging Face's Gemma3ForCausalLM, model_type "gemma3_text"), built from a
config.json dict (no `transformers`). HF's parameter names, shapes and semantics: eager attention, no KV cache,
no dropout, float32 or float64.

Transcribed from Hugging Face transformers' files, as stored versions (the search tools give no tagged release):

  src/transformers/models/gemma3/modeling_gemma3.py
      transformers 4.5x: shamitv/transformers_qwen_2_5_omni commit 2e6313228ab1b346374bda645c026ccad959ffd9 (a
      fork; masking_utils masks, config.layer_types, rotary_emb (rope_theta + rope_scaling) for full layers and
      rotary_emb_local (a deep copy of the config with rope_theta = rope_local_base_freq and rope_scaling
      {"rope_type": "default"}) for sliding ones; _init_weights there fills Gemma3RMSNorm weights with 1.0)
      transformers 5.x: huggingface/transformers commit 0018aa647bb13801f061e2d1027c326f531b59fb (one
      Gemma3RotaryEmbedding with per-layer-type buffers from config.rope_parameters[layer_type];
      use_bidirectional_attention; _init_weights zeroes the RMSNorm weights, "1 centered as (1 + weight)")
      Both: Gemma3TextScaledWordEmbedding, Gemma3RMSNorm, Gemma3MLP, Gemma3Attention, Gemma3DecoderLayer,
      Gemma3ForCausalLM.forward are the same arithmetic.
  src/transformers/models/gemma3/configuration_gemma3.py
      4.5x: HanGyeol-Yoo/transformers commit 6805ba969c4fa53166709207b5f43bd80d999d7c (layer_types None ->
      ["sliding_attention" if bool((i + 1) % sliding_window_pattern) else "full_attention"], the pattern read
      from kwargs "sliding_window_pattern", default 6; pad_token_id default 0)
      5.x: feisenyu/transformers_4573 commit 9c66b2210393d4bb7421896e6456d58fc369dfbf (convert_rope_params_to_dict:
      rope_parameters {"sliding_attention": {"rope_type": "default", "rope_theta": rope_local_base_freq},
      "full_attention": {"rope_type": "default", "rope_theta": rope_theta} updated with a 4.x rope_scaling})
  src/transformers/masking_utils.py   huggingface/transformers commit 00c4411cbe15d4c56d54d3b56d4d171e9c289dac
      (causal_mask_function: kv_idx <= q_idx; sliding_window_overlay: kv_idx > q_idx - sliding_window; the
      same text in every 4.5x copy found)
RoPE frequencies: tools/hf_rope_reference.py (modeling_rope_utils.py; linear: default inv_freq / factor).
gelu_pytorch_tanh: transformers' activation of that name is torch.nn.functional.gelu(x, approximate="tanh").

Semantics (B batch, T positions, C hidden_size, H heads, KV key/value heads, D head_dim):
  embed     x = embed_tokens.weight[ids] * s, s = torch.tensor(hidden_size ** 0.5) (a float32 scalar, e.g.
            float32(sqrt(72)) = 8.48528099..., cast to the weight's dtype), a non-persistent buffer (no
            parameter; .double() casts the float32-rounded value)
  RMSNorm   Gemma3RMSNorm(x) = (h * rsqrt(mean(h^2, -1) + eps)) * (1.0 + w), h = x in float32, the sum 1 + w
            rounded to float32 first; the weight is an OFFSET (HF inits it to 0: then plain RMSNorm)
  layer     r = x; h = input_layernorm(x); h = self_attn(h); h = post_attention_layernorm(h); x = r + h;
            r = x; h = pre_feedforward_layernorm(x); h = mlp(h); h = post_feedforward_layernorm(h); x = r + h
  attention q = q_proj(x) viewed [B, T, H, D] -> [B, H, T, D]; q = q_norm(q) (Gemma3RMSNorm over D, weight [D]
            shared by the heads); k likewise with k_norm over [B, KV, T, D]; v not normalised; RoPE of the
            layer's type on q and k; repeat_kv; scores = (q k^T) * query_pre_attn_scalar ** -0.5 (a Python
            float, rounded to float32 by the tensor op); + additive mask (finfo.min where masked); softmax in
            float32; @ v; o_proj. attention_bias: a bias on all four projections (false in the released models)
  masks     full_attention:    key j visible to query i iff j <= i
            sliding_attention: key j visible to query i iff j <= i and j > i - sliding_window, i.e. masked iff
            j <= i - sliding_window: a query sees itself and the sliding_window - 1 keys before it
  RoPE      full_attention: rope_theta with rope_scaling (4.x) / rope_parameters["full_attention"] (5.x);
            sliding_attention: rope_local_base_freq with the default (unscaled) RoPE (4.x) /
            rope_parameters["sliding_attention"] (5.x). cos/sin = cos/sin(pos * inv_freq, cat(freqs, freqs)) *
            attention_scaling in float32, x*cos + rotate_half(x)*sin
  MLP       down_proj(gelu_tanh(gate_proj(x)) * up_proj(x)), no biases
  head      logits = model.norm(x) @ W^T, W = model.embed_tokens.weight when tied (NOT scaled by s) else
            lm_head.weight; final_logit_softcapping must be null; loss = mean cross-entropy
  layer_types from config["layer_types"], else derived from sliding_window_pattern as Gemma3TextConfig does
Refused: attn_logit_softcapping (4.5x/5.x Gemma3Attention stores it but never passes softcap to the attention
function; refused rather than ignored), final_logit_softcapping, use_bidirectional_attention, a pad_token_id
(nn.Embedding's padding_idx: no gradient for that row; Gemma3TextConfig's default is 0, so a config.json must
say null), hidden_activation other than gelu_pytorch_tanh, dynamic RoPE types (seq_len-dependent).
Float64 (the self-checks): where HF upcasts to float32 this stays float64 ("at least float32").

named_parameters() order is HF's: model.embed_tokens.weight; per layer i, model.layers.{i}.
  self_attn.q_proj.weight [H*D, C], k_proj [KV*D, C], v_proj [KV*D, C], o_proj [C, H*D] (+ .bias each with
  attention_bias), self_attn.q_norm.weight [D], self_attn.k_norm.weight [D], mlp.gate_proj.weight [F, C],
  mlp.up_proj.weight [F, C], mlp.down_proj.weight [C, F], input_layernorm.weight, post_attention_layernorm.weight,
  pre_feedforward_layernorm.weight, post_feedforward_layernorm.weight [C]; then model.norm.weight [C],
  [lm_head.weight [V, C] when untied].

    import torch_hf_gemma3 as g3
    model = g3.Gemma3ForCausalLM(json.load(open("config.json")))
    logits, loss = model(tokens[:, :-1], tokens[:, 1:])
"""
import copy
import math
import os
import sys
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_llama as tl  # noqa: E402
import torch_hf_families as hf  # noqa: E402
import hf_rope_reference  # noqa: E402

MODEL_TYPE = "gemma3_text"
LAYER_TYPES = ("sliding_attention", "full_attention")

# Gemma3TextConfig.__init__'s defaults (4.5x), for keys a config.json may leave out.
_DEFAULTS = dict(vocab_size=262_208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                 num_attention_heads=8, num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh",
                 max_position_embeddings=131_072, rms_norm_eps=1e-6, pad_token_id=0, tie_word_embeddings=True,
                 rope_theta=1_000_000.0, attention_bias=False, query_pre_attn_scalar=256, sliding_window=4096,
                 layer_types=None, final_logit_softcapping=None, attn_logit_softcapping=None, rope_scaling=None,
                 rope_local_base_freq=10_000.0, sliding_window_pattern=6, use_bidirectional_attention=False,
                 rope_parameters=None)


def layer_types_of(c: dict):
    """config["layer_types"], else Gemma3TextConfig's derivation from sliding_window_pattern."""
    n = int(c["num_hidden_layers"])
    if c.get("layer_types") is not None:
        types = list(c["layer_types"])
    else:
        pattern = int(c.get("sliding_window_pattern", 6))
        if pattern < 1:
            raise ValueError(f"sliding_window_pattern {pattern}: expects >= 1")
        types = ["sliding_attention" if bool((i + 1) % pattern) else "full_attention" for i in range(n)]
    if len(types) != n or any(t not in LAYER_TYPES for t in types):
        raise ValueError(f"layer_types {types}: expects {n} of {LAYER_TYPES}")
    return types


def rope_config_for(c: dict, layer_type: str):
    """The config dict tools/hf_rope_reference.py reads for one layer type: 4.x (rope_theta + rope_scaling for full
    layers, rope_local_base_freq + default RoPE for sliding ones) or 5.x (rope_parameters[layer_type])."""
    rp = c.get("rope_parameters")
    if isinstance(rp, dict) and set(rp) & set(LAYER_TYPES):
        params = dict(rp.get(layer_type) or {"rope_type": "default"})   # a type no layer has: unused
        if c.get("rope_scaling") and layer_type == "full_attention":
            params.update(c["rope_scaling"])           # 5.x convert_rope_params_to_dict: full layers only
        theta_key = "rope_theta" if layer_type == "full_attention" else "rope_local_base_freq"
        params.setdefault("rope_theta", c[theta_key])
    elif layer_type == "full_attention":
        params = dict(c.get("rope_scaling") or {"rope_type": "default"})
        params["rope_theta"] = c["rope_theta"]
    else:
        params = {"rope_type": "default", "rope_theta": c["rope_local_base_freq"]}
    params.setdefault("rope_type", params.get("type", "default"))
    if params["rope_type"] in ("dynamic", "longrope"):
        raise ValueError(f"rope_type {params['rope_type']!r}: seq_len-dependent RoPE is not modelled")
    return {"rope_parameters": params, "max_position_embeddings": c["max_position_embeddings"]}


@dataclass
class Gemma3Config:
    """What the model reads from a config.json dict (`hf`, kept as given). num_experts, qkv_bias, o_bias, qk_norm,
    output_router_logits and sparse_layers() as torch_hf_families.FamilyConfig has them (the generator reads
    them)."""
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
    attention_bias: bool
    query_pre_attn_scalar: float
    sliding_window: int
    layer_types: list
    hf: dict = field(default_factory=dict)
    model_type: str = MODEL_TYPE
    num_experts: int = 0
    output_router_logits: bool = False
    qk_norm: bool = True

    @property
    def qkv_bias(self):
        return self.attention_bias

    @property
    def o_bias(self):
        return self.attention_bias

    def sparse_layers(self):
        return []

    @classmethod
    def from_hf(cls, d: dict) -> "Gemma3Config":
        if d.get("model_type") != MODEL_TYPE:
            raise ValueError(f"model_type {d.get('model_type')!r}: expects {MODEL_TYPE!r}")
        c = dict(_DEFAULTS)
        c.update({k: v for k, v in d.items() if k in c})
        if c["hidden_activation"] != "gelu_pytorch_tanh":
            raise ValueError(f"hidden_activation {c['hidden_activation']!r}: only gelu_pytorch_tanh is modelled")
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            if c[key] is not None:
                raise ValueError(f"{key} {c[key]}: softcapping is not modelled")
        if c["use_bidirectional_attention"]:
            raise ValueError("use_bidirectional_attention: true is not modelled")
        if c["pad_token_id"] is not None:
            raise ValueError("pad_token_id: nn.Embedding's padding_idx (no gradient for that row) is not modelled "
                             "(Gemma3TextConfig's default is 0: a config.json must say null)")
        heads, kv = int(c["num_attention_heads"]), int(c["num_key_value_heads"])
        head_dim = int(c["head_dim"] or c["hidden_size"] // heads)
        if heads % kv or head_dim % 2:
            raise ValueError(f"heads {heads}, kv heads {kv}, head_dim {head_dim}")
        if "_sliding_window_pattern" in d and d.get("layer_types") is None and "sliding_window_pattern" not in d:
            # 4.5x's __init__ would overwrite it with kwargs.get("sliding_window_pattern", 6): refused, not guessed
            raise ValueError("_sliding_window_pattern without layer_types or sliding_window_pattern: ambiguous")
        types = layer_types_of(c)
        if "sliding_attention" in types and not (c["sliding_window"] and int(c["sliding_window"]) >= 1):
            raise ValueError(f"sliding_window {c['sliding_window']}: sliding layers need a window >= 1")
        for t in set(types):
            rp = c.get("rope_parameters")
            if isinstance(rp, dict) and set(rp) & set(LAYER_TYPES) and t not in rp:
                raise ValueError(f"rope_parameters has no {t!r} entry")
            rope_config_for(c, t)                      # refuses the seq_len-dependent types
        return cls(vocab_size=int(c["vocab_size"]), hidden_size=int(c["hidden_size"]),
                   intermediate_size=int(c["intermediate_size"]), num_hidden_layers=int(c["num_hidden_layers"]),
                   num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                   rms_norm_eps=float(c["rms_norm_eps"]), max_position_embeddings=int(c["max_position_embeddings"]),
                   tie_word_embeddings=bool(c["tie_word_embeddings"]), attention_bias=bool(c["attention_bias"]),
                   query_pre_attn_scalar=c["query_pre_attn_scalar"], sliding_window=int(c["sliding_window"] or 0),
                   layer_types=types, hf=dict(d))


def rope_parameters(cfg: Gemma3Config, layer_type: str):
    """(inv_freq float32 [head_dim / 2], attention_scaling) of one layer type."""
    inv_freq, scaling = hf_rope_reference.inv_freq_and_scaling(rope_config_for(
        dict(_DEFAULTS, **cfg.hf), layer_type), cfg.head_dim)
    inv_freq = torch.as_tensor(inv_freq)
    assert inv_freq.dtype == torch.float32 and inv_freq.shape == (cfg.head_dim // 2,), (inv_freq.dtype, inv_freq.shape)
    return inv_freq, float(scaling)


def attention_allowed(T, layer_type, sliding_window, device=None):
    """[T, T] bool, row = query i, column = key j: masking_utils' causal_mask_function (j <= i), and for a sliding
    layer also sliding_window_overlay (j > i - sliding_window)."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    allowed = j <= i
    if layer_type == "sliding_attention":
        allowed = allowed & (j > i - sliding_window)
    return allowed


class Gemma3RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        dt = tl._at_least_f32(x.dtype)                 # HF: x.float() (float64 stays float64 here)
        h = x.to(dt)
        out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        out = out * (1.0 + self.weight.to(dt))
        return out.type_as(x)


class Gemma3TextScaledWordEmbedding(nn.Embedding):
    def __init__(self, num_embeddings, embedding_dim, embed_scale=1.0):
        super().__init__(num_embeddings, embedding_dim)   # padding_idx None (a pad_token_id is refused)
        self.register_buffer("embed_scale", torch.tensor(embed_scale), persistent=False)

    def forward(self, input_ids):
        return super().forward(input_ids) * self.embed_scale.to(self.weight.dtype)


class Gemma3Attention(nn.Module):
    def __init__(self, cfg: Gemma3Config, layer_idx: int):
        super().__init__()
        self.cfg = cfg
        self.layer_type = cfg.layer_types[layer_idx]
        H, KV, D, C = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        b = cfg.attention_bias
        self.scaling = cfg.query_pre_attn_scalar ** -0.5
        self.q_proj = nn.Linear(C, H * D, bias=b)
        self.k_proj = nn.Linear(C, KV * D, bias=b)
        self.v_proj = nn.Linear(C, KV * D, bias=b)
        self.o_proj = nn.Linear(H * D, C, bias=b)
        self.q_norm = Gemma3RMSNorm(D, cfg.rms_norm_eps)
        self.k_norm = Gemma3RMSNorm(D, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        H, KV, D = self.cfg.num_attention_heads, self.cfg.num_key_value_heads, self.cfg.head_dim
        q = self.q_norm(self.q_proj(x).view(B, T, H, D).transpose(1, 2))
        k = self.k_norm(self.k_proj(x).view(B, T, KV, D).transpose(1, 2))
        v = self.v_proj(x).view(B, T, KV, D).transpose(1, 2)
        cos, sin = cos.to(v.dtype), sin.to(v.dtype)
        q = tl.apply_rotary_pos_emb(q, cos, sin)
        k = tl.apply_rotary_pos_emb(k, cos, sin)
        k = tl.repeat_kv(k, H // KV)
        v = tl.repeat_kv(v, H // KV)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        allowed = attention_allowed(T, self.layer_type, self.cfg.sliding_window, x.device)
        mask = torch.zeros((T, T), dtype=scores.dtype, device=x.device)
        mask = mask.masked_fill(~allowed, torch.finfo(scores.dtype).min)     # HF's additive 4D mask
        probs = F.softmax(scores + mask, dim=-1, dtype=tl._at_least_f32(q.dtype)).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, H * D)
        return self.o_proj(out)


class Gemma3MLP(nn.Module):
    def __init__(self, cfg: Gemma3Config):
        super().__init__()
        C, Fd = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(C, Fd, bias=False)
        self.up_proj = nn.Linear(C, Fd, bias=False)
        self.down_proj = nn.Linear(Fd, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, cfg: Gemma3Config, layer_idx: int):
        super().__init__()
        self.attention_type = cfg.layer_types[layer_idx]
        # Registration order = HF's: self_attn, mlp, then the four norms.
        self.self_attn = Gemma3Attention(cfg, layer_idx)
        self.mlp = Gemma3MLP(cfg)
        C, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = Gemma3RMSNorm(C, eps)
        self.post_attention_layernorm = Gemma3RMSNorm(C, eps)
        self.pre_feedforward_layernorm = Gemma3RMSNorm(C, eps)
        self.post_feedforward_layernorm = Gemma3RMSNorm(C, eps)

    def forward(self, x, cos, sin):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class Gemma3TextModel(nn.Module):
    def __init__(self, cfg: Gemma3Config):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = Gemma3TextScaledWordEmbedding(cfg.vocab_size, cfg.hidden_size, cfg.hidden_size ** 0.5)
        self.layers = nn.ModuleList([Gemma3DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)])
        self.norm = Gemma3RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        # Not parameters nor buffers: stay float32 under .double(), as HF's forward does .float() on them.
        self.rope = {t: rope_parameters(cfg, t) for t in LAYER_TYPES}
        self.inv_freq, self.attention_scaling = self.rope["full_attention"]              # the generator's rope.inv_freq
        self.inv_freq_local, self.attention_scaling_local = self.rope["sliding_attention"]

    def forward(self, input_ids, position_ids=None):
        T = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device)
        pe = {t: hf.rope_cos_sin(inv, sc, position_ids, input_ids.device.type) for t, (inv, sc) in self.rope.items()}
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, *pe[layer.attention_type])
        return self.norm(x)


class Gemma3ForCausalLM(nn.Module):
    def __init__(self, config):
        """config: a Hugging Face config.json dict, or a Gemma3Config."""
        super().__init__()
        cfg = config if isinstance(config, Gemma3Config) else Gemma3Config.from_hf(config)
        self.cfg = cfg
        self.model = Gemma3TextModel(cfg)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.router_logits = ()

    def head_weight(self):
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, input_ids, targets=None, position_ids=None):
        """input_ids, targets [B, T] int64 -> (logits [B, T, V] float32 (float64 for a float64 model), mean
        cross-entropy or None)."""
        logits = F.linear(self.model(input_ids, position_ids), self.head_weight())
        logits = logits.to(tl._at_least_f32(logits.dtype))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


# ----------------------------------------------------------------------------
# self-checks (tools/make_family_golden.py runs them before writing the gemma3 golden)


def expected_parameters(cfg: Gemma3Config):
    """[(name, shape)] in HF's registration order (an independent statement of the layout above)."""
    C, H, KV, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    Fd = cfg.intermediate_size
    want = [("model.embed_tokens.weight", (cfg.vocab_size, C))]
    for i in range(cfg.num_hidden_layers):
        pre = f"model.layers.{i}."
        for name, shape in (("q_proj", (H * D, C)), ("k_proj", (KV * D, C)), ("v_proj", (KV * D, C)),
                            ("o_proj", (C, H * D))):
            want.append((pre + f"self_attn.{name}.weight", shape))
            want += [(pre + f"self_attn.{name}.bias", shape[:1])] if cfg.attention_bias else []
        want += [(pre + "self_attn.q_norm.weight", (D,)), (pre + "self_attn.k_norm.weight", (D,)),
                 (pre + "mlp.gate_proj.weight", (Fd, C)), (pre + "mlp.up_proj.weight", (Fd, C)),
                 (pre + "mlp.down_proj.weight", (C, Fd))]
        want += [(pre + n + ".weight", (C,)) for n in ("input_layernorm", "post_attention_layernorm",
                                                       "pre_feedforward_layernorm", "post_feedforward_layernorm")]
    want.append(("model.norm.weight", (C,)))
    return want + ([] if cfg.tie_word_embeddings else [("lm_head.weight", (cfg.vocab_size, C))])


def _naive_attention(attn: Gemma3Attention, x, cos, sin):
    """Per query and head, float64: softmax over the keys j with max(0, i - W + 1) <= j <= i (sliding) or 0 <= j <= i
    (full) of (q_i . k_j) / sqrt(query_pre_attn_scalar), q and k per head x / rms(x) * (1 + w) then rotated."""
    cfg = attn.cfg
    B, T, _ = x.shape
    H, KV, D, eps = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps
    cs, sn = cos[:, None, :], sin[:, None, :]                  # [T, 1, D] against [B, T, heads, D]

    def prep(w, heads, norm_w):
        t = (x @ w.T).view(B, T, heads, D)
        t = t / torch.sqrt((t * t).mean(-1, keepdim=True) + eps) * (1 + norm_w)
        return t * cs + torch.cat((-t[..., D // 2:], t[..., :D // 2]), -1) * sn
    q, k = prep(attn.q_proj.weight, H, attn.q_norm.weight), prep(attn.k_proj.weight, KV, attn.k_norm.weight)
    v = (x @ attn.v_proj.weight.T).view(B, T, KV, D)
    out = torch.zeros(B, T, H, D, dtype=x.dtype)
    for b in range(B):
        for h in range(H):
            g = h // (H // KV)
            for i in range(T):
                lo = max(0, i - cfg.sliding_window + 1) if attn.layer_type == "sliding_attention" else 0
                s = (k[b, lo:i + 1, g] @ q[b, i, h]) / math.sqrt(cfg.query_pre_attn_scalar)
                out[b, i, h] = torch.softmax(s, 0) @ v[b, lo:i + 1, g]
    return out.reshape(B, T, H * D) @ attn.o_proj.weight.T


def self_checks(config: dict, init_, gen):
    """Asserting checks of the reference on `config` (the golden's config.json dict); init_(model, gen) draws the
    weights. Prints one line per check."""
    cfg = Gemma3Config.from_hf(config)
    W, T = cfg.sliding_window, 32
    # Config: layer types, the 5.x rope_parameters form, refusals, HF's names/order/shapes.
    pattern = config.get("sliding_window_pattern", 6)
    want_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(cfg.num_hidden_layers)]
    assert cfg.layer_types == want_types, cfg.layer_types
    assert Gemma3Config.from_hf(dict(config, layer_types=want_types[::-1])).layer_types == want_types[::-1]
    v5 = {k: v for k, v in config.items() if k not in ("rope_scaling", "rope_theta", "rope_local_base_freq")}
    v5["rope_parameters"] = {"full_attention": dict(config["rope_scaling"] or {}, rope_theta=config["rope_theta"]),
                             "sliding_attention": {"rope_type": "default",
                                                   "rope_theta": config["rope_local_base_freq"]}}
    for t in LAYER_TYPES:
        a, b = rope_parameters(cfg, t), rope_parameters(Gemma3Config.from_hf(v5), t)
        assert torch.equal(a[0], b[0]) and a[1] == b[1], t
    for bad in (dict(attn_logit_softcapping=50.0), dict(final_logit_softcapping=30.0), dict(pad_token_id=0),
                dict(use_bidirectional_attention=True), dict(hidden_activation="gelu"),
                dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0})):
        try:
            Gemma3Config.from_hf(dict(config, **bad))
            raise AssertionError(f"not refused: {bad}")
        except ValueError:
            pass
    try:
        Gemma3Config.from_hf({k: v for k, v in config.items() if k != "pad_token_id"})   # class default 0
        raise AssertionError("a config.json without pad_token_id (default 0) not refused")
    except ValueError:
        pass
    model = Gemma3ForCausalLM(config)
    assert [(n, tuple(p.shape)) for n, p in model.named_parameters()] == expected_parameters(cfg)
    print(f"  self-check gemma3: layer_types {cfg.layer_types} (sliding_window_pattern {pattern}); the 5.x "
          "rope_parameters form == the 4.x keys; softcappings, pad id, bidirectional, other activations refused; "
          "HF's parameter names, order and shapes")
    # RoPE: full layers rope_theta / factor (linear), sliding layers the default RoPE of rope_local_base_freq.
    D = cfg.head_dim
    base = lambda theta: 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))  # noqa: E731
    factor = (config.get("rope_scaling") or {}).get("factor", 1.0)
    assert torch.equal(model.model.inv_freq, base(float(config["rope_theta"])) / factor)
    assert torch.equal(model.model.inv_freq_local, base(float(config["rope_local_base_freq"])))
    assert model.model.attention_scaling == model.model.attention_scaling_local == 1.0
    # Gemma3RMSNorm: weight 0 == plain RMSNorm (weight 1), weight w == LlamaRMSNorm with weight float32(1 + w).
    x = torch.randn(3, 5, cfg.hidden_size, generator=gen)
    g, ll = Gemma3RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
    assert torch.equal(g(x), ll(x)), "Gemma3RMSNorm with zero weights != RMSNorm"
    with torch.no_grad():
        g.weight.copy_(0.1 * torch.randn(cfg.hidden_size, generator=gen))
        ll.weight.copy_(1.0 + g.weight)
    assert torch.equal(g(x), ll(x)) and not torch.equal(g(x), tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)(x))
    # Embedding: W[ids] * float32(sqrt(C)) (not exact in float32 here); the tied head reads W unscaled.
    init_(model, gen)
    s32 = torch.tensor(cfg.hidden_size ** 0.5, dtype=torch.float32)
    ids = torch.randint(0, cfg.vocab_size, (2, T), generator=gen)
    assert torch.equal(model.model.embed_tokens(ids), model.model.embed_tokens.weight[ids] * s32)
    print(f"  self-check gemma3: inv_freq full = default(rope_theta) / {factor}, sliding = "
          f"default(rope_local_base_freq); Gemma3RMSNorm(w = 0) == RMSNorm and (w) == RMSNorm with weight 1 + w "
          f"(bitwise); embedding * float32(sqrt({cfg.hidden_size})) = {s32.item():.9g} "
          f"(sqrt = {cfg.hidden_size ** 0.5:.12g})")
    # The masks: HF's inequalities; query i sees min(i + 1, W) keys in a sliding layer.
    sl = attention_allowed(T, "sliding_attention", W)
    assert torch.equal(sl.sum(1), torch.clamp(torch.arange(T) + 1, max=W))
    assert all(bool(sl[i, j]) == (j <= i and not j <= i - W) for i in range(T) for j in range(T))
    assert torch.equal(attention_allowed(T, "full_attention", W), torch.ones(T, T, dtype=torch.bool).tril())
    # Each attention type against a per-query loop (float64).
    m64 = copy.deepcopy(model).double()
    pos = torch.arange(T)
    xin = torch.randn(2, T, cfg.hidden_size, generator=gen, dtype=torch.float64)
    for t in LAYER_TYPES:
        i = cfg.layer_types.index(t)
        attn = m64.model.layers[i].self_attn
        cos, sin = (c.double() for c in hf.rope_cos_sin(*m64.model.rope[t], pos))
        err = (attn(xin, cos, sin) - _naive_attention(attn, xin, cos, sin)).abs().max().item()
        assert err < 1e-12, (t, err)
    # The window matters: the same weights with a window >= T give the same logits at positions < W (bitwise)
    # and different ones after.
    wide = Gemma3ForCausalLM(dict(config, sliding_window=T))
    wide.load_state_dict(model.state_dict())
    a, b = model(ids)[0], wide(ids)[0]
    assert torch.equal(a[:, :W], b[:, :W])
    diff = (a[:, W:] - b[:, W:]).abs().amax(-1)
    assert (diff > 1e-4).all(), diff.min()
    print(f"  self-check gemma3: masks (sliding: query i sees keys max(0, i-{W-1})..i), each attention type == a "
          f"per-query loop (float64); sliding window {W} vs none: logits bitwise equal at positions < {W}, "
          f"differ at every later one (least max|diff| {diff.min().item():.2e})")
