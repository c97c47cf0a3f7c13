"""Plain-torch causal LMs of three Hugging Face families, built from a config.json dict (no `transformers`):
`llama` (LlamaForCausalLM, with an explicit head_dim and the llama3 RoPE scaling), `qwen2`
(Qwen2ForCausalLM) and `qwen3` (Qwen3ForCausalLM). Hugging Face's parameter names, shapes and semantics
(eager attention, no KV cache, no dropout, float32 or float64).

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
  mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight, input_layernorm.weight,
  post_attention_layernorm.weight,
then model.norm.weight, [lm_head.weight]. nn.Linear weights [out, in], y = x @ W^T + b.

    import torch_hf_families as hf
    model = hf.FamilyForCausalLM(json.load(open("config.json")))
    logits, loss = model(tokens[:, :-1], tokens[:, 1:])
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

FAMILIES = ("llama", "qwen2", "qwen3")

# Each config class's __init__ defaults (LlamaConfig, Qwen2Config, Qwen3Config), for keys a config.json
# may leave out. head_dim None: hidden_size // num_attention_heads.
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
}


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
        if heads % kv or head_dim % 2:
            raise ValueError(f"heads {heads}, kv heads {kv}, head_dim {head_dim}")
        if mt == "llama":
            qkv_bias = o_bias = bool(c["attention_bias"])
            mlp_bias, qk_norm = bool(c["mlp_bias"]), False
        elif mt == "qwen2":
            qkv_bias, o_bias, mlp_bias, qk_norm = True, False, False, False
        else:
            qkv_bias = o_bias = bool(c["attention_bias"])
            mlp_bias, qk_norm = False, True
        return cls(model_type=mt, vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                   intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
                   num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                   rms_norm_eps=float(c["rms_norm_eps"]), max_position_embeddings=c["max_position_embeddings"],
                   tie_word_embeddings=bool(c["tie_word_embeddings"]), qkv_bias=qkv_bias, o_bias=o_bias,
                   mlp_bias=mlp_bias, qk_norm=qk_norm, hf=dict(d))


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
    def __init__(self, cfg: FamilyConfig):
        super().__init__()
        C, Fd, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = nn.Linear(C, Fd, bias=b)
        self.up_proj = nn.Linear(C, Fd, bias=b)
        self.down_proj = nn.Linear(Fd, C, bias=b)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class FamilyDecoderLayer(nn.Module):
    def __init__(self, cfg: FamilyConfig):
        super().__init__()
        self.self_attn = FamilyAttention(cfg)
        self.mlp = FamilyMLP(cfg)
        self.input_layernorm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class FamilyModel(nn.Module):
    def __init__(self, cfg: FamilyConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([FamilyDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        # Not a parameter nor a buffer: stays float32 under .double(), as HF's forward does .float() on it.
        self.inv_freq, self.attention_scaling = rope_parameters(cfg)

    def forward(self, input_ids, position_ids=None):
        T = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device)
        cos, sin = rope_cos_sin(self.inv_freq, self.attention_scaling, position_ids, input_ids.device.type)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class FamilyForCausalLM(nn.Module):
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
        mean cross-entropy or None)."""
        h = self.model(input_ids, position_ids)
        logits = F.linear(h, self.head_weight())
        logits = logits.to(tl._at_least_f32(logits.dtype))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


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
