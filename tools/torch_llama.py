"""A plain-torch Llama with Hugging Face's semantics, parameter names and layouts (no `transformers`).

Written from transformers' src/transformers/models/llama/modeling_llama.py (eager attention, default
RoPE, no biases, no KV cache, no dropout):

  LlamaRMSNorm          h = x in float32; h * rsqrt(mean(h^2, -1) + eps), cast back to x's dtype, then
                        weight * h
  LlamaRotaryEmbedding  inv_freq = 1 / theta ** (arange(0, d, 2, int64).float() / d)      (float32)
                        freqs = position.float() * inv_freq, emb = cat(freqs, freqs), cos/sin (float32,
                        autocast off), then cast to the activations' dtype
  apply_rotary_pos_emb  x * cos + rotate_half(x) * sin,  rotate_half(x) = cat(-x[d/2:], x[:d/2])
  repeat_kv             key/value head j serves query heads j*n_rep .. (j+1)*n_rep - 1
  eager attention       softmax(q k^T / sqrt(d) + causal mask, in float32) @ v, then o_proj
                        (attn_implementation "sdpa", for the benchmarks: HF's LlamaSdpaAttention,
                        F.scaled_dot_product_attention(q, k, v, is_causal=True) after repeat_kv, PyTorch >= 2.0)
  LlamaMLP              down_proj(silu(gate_proj(x)) * up_proj(x))
  LlamaDecoderLayer     x + attn(input_layernorm(x)), then h + mlp(post_attention_layernorm(h))
  LlamaForCausalLM      embed_tokens -> layers -> norm -> lm_head (or embed_tokens.weight when tied),
                        logits in float32

named_parameters() yields exactly HF's LlamaForCausalLM names, nn.Linear weights [out, in]:
  model.embed_tokens.weight [V, C]
  model.layers.{i}.input_layernorm.weight [C]
  model.layers.{i}.self_attn.{q,k,v,o}_proj.weight  [H*D, C], [KV*D, C], [KV*D, C], [C, H*D]
  model.layers.{i}.post_attention_layernorm.weight [C]
  model.layers.{i}.mlp.{gate,up}_proj.weight [F, C], mlp.down_proj.weight [C, F]
  model.norm.weight [C]
  lm_head.weight [V, C]   (absent when tie_word_embeddings: the head reads model.embed_tokens.weight)

Dtypes: works in float32, in float64 (the finite-difference checks; the places where HF upcasts to
float32 then compute in float64, which is "at least float32"), and under
torch.autocast("cpu", dtype=torch.bfloat16) (RMSNorm and softmax in float32 as HF does).

    import torch_llama as tl
    cfg = tl.LlamaConfig(vocab_size=96, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                         intermediate_size=96, rope_theta=1e6, rms_norm_eps=1e-5)
    model = tl.LlamaForCausalLM(cfg)
    tl.init_hf_(model, torch.Generator().manual_seed(0))
    logits, loss = model(tokens[:, :-1], tokens[:, 1:])
"""
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def resolve_attention(name):
    """The benchmarks' --attention: "auto" is "sdpa" where this torch has F.scaled_dot_product_attention
    (PyTorch >= 2.0, what Hugging Face's models use by default there), else "eager"."""
    has = hasattr(F, "scaled_dot_product_attention")
    if name == "auto":
        return "sdpa" if has else "eager"
    if name == "sdpa" and not has:
        raise ValueError(f"torch {torch.__version__} has no F.scaled_dot_product_attention (PyTorch >= 2.0)")
    if name not in ("eager", "sdpa"):
        raise ValueError(f"attention {name!r}: expects auto, sdpa or eager")
    return name


@dataclass
class LlamaConfig:
    """HF LlamaConfig's fields under MindFormers' / gridformer's names (HF's name in the comment)."""
    vocab_size: int = 32000
    hidden_size: int = 4096
    num_layers: int = 32                 # num_hidden_layers
    num_heads: int = 32                  # num_attention_heads
    num_kv_heads: Optional[int] = None   # num_key_value_heads (None: num_heads, plain multi-head)
    intermediate_size: int = 11008
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    initializer_range: float = 0.02
    attn_implementation: str = "eager"   # HF's config._attn_implementation: "eager", or "sdpa" (PyTorch >= 2.0)

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def __post_init__(self):
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.attn_implementation not in ("eager", "sdpa"):
            raise ValueError(f"attn_implementation {self.attn_implementation!r}: expects 'eager' or 'sdpa'")
        if self.num_heads % self.kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")


def _at_least_f32(dtype):
    # HF upcasts to float32; float64 (the self-checks) stays float64.
    return torch.promote_types(dtype, torch.float32)


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        input_dtype = x.dtype
        h = x.to(_at_least_f32(input_dtype))
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * h.to(input_dtype)


def rope_inv_freq(head_dim, theta):
    """HF's default inv_freq, float32: 1 / theta ** (arange(0, d, 2, int64).float() / d)."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def rope_cos_sin(head_dim, theta, positions, device_type="cpu"):
    """cos, sin [len(positions), head_dim] in float32, as LlamaRotaryEmbedding.forward computes them
    (positions [B, T], Hugging Face's position_ids: [B, T, head_dim])."""
    with torch.autocast(device_type=device_type, enabled=False):
        inv_freq = rope_inv_freq(head_dim, theta).to(positions.device)
        freqs = positions.float()[..., None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(x, cos, sin):
    """x [B, heads, T, D]; cos/sin [T, D] or [B, T, D] (HF's unsqueeze_dim=1), already in x's dtype."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    return (x * cos) + (rotate_half(x) * sin)


def repeat_kv(x, n_rep):
    """[B, KV, T, D] -> [B, KV * n_rep, T, D]: key/value head j serves query heads j*n_rep .. j*n_rep+n_rep-1."""
    B, KV, T, D = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(B, KV, n_rep, T, D).reshape(B, KV * n_rep, T, D)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        H, KV, D, C = cfg.num_heads, cfg.kv_heads, cfg.head_dim, cfg.hidden_size
        self.q_proj = nn.Linear(C, H * D, bias=False)
        self.k_proj = nn.Linear(C, KV * D, bias=False)
        self.v_proj = nn.Linear(C, KV * D, bias=False)
        self.o_proj = nn.Linear(H * D, C, bias=False)

    def forward(self, x, cos, sin, attn_mask=None):
        """attn_mask: None, or [B, 1, T, T] bool, True where a query may attend a key (HF's 4D mask; the
        causal mask is applied as well)."""
        B, T, C = x.shape
        H, KV, D = self.cfg.num_heads, self.cfg.kv_heads, self.cfg.head_dim
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)    # [B, H, T, D]; head h = rows h*D:(h+1)*D of q_proj
        k = self.k_proj(x).view(B, T, KV, D).transpose(1, 2)   # [B, KV, T, D]
        v = self.v_proj(x).view(B, T, KV, D).transpose(1, 2)
        cos, sin = cos.to(v.dtype), sin.to(v.dtype)            # HF: rotary_emb returns them in x's dtype
        q = apply_rotary_pos_emb(q, cos, sin)
        k = apply_rotary_pos_emb(k, cos, sin)
        k = repeat_kv(k, H // KV)
        v = repeat_kv(v, H // KV)
        if self.cfg.attn_implementation == "sdpa" and attn_mask is None:
            # HF's LlamaSdpaAttention without a mask: is_causal for more than one query
            out = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
            return self.o_proj(out.transpose(1, 2).reshape(B, T, H * D))
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(D)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        if attn_mask is not None:
            causal = causal & attn_mask
        # HF adds finfo(dtype).min above the diagonal; either way those probabilities are exactly 0.
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1, dtype=_at_least_f32(q.dtype)).to(q.dtype)
        out = torch.matmul(probs, v)                           # [B, H, T, D]
        out = out.transpose(1, 2).reshape(B, T, H * D)         # heads consecutive, as HF
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.self_attn = LlamaAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, attn_mask=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attn_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.norm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, input_ids, position_ids=None, attn_mask=None):
        T = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device)
        cos, sin = rope_cos_sin(self.cfg.head_dim, self.cfg.rope_theta, position_ids, input_ids.device.type)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, attn_mask)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        # Tied: no lm_head parameter at all (HF's state dict would show lm_head.weight as an alias of
        # model.embed_tokens.weight; named_parameters() lists it once, as model.embed_tokens.weight).
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def head_weight(self):
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, input_ids, targets=None, position_ids=None, attn_mask=None):
        """input_ids, targets [B, T] (int64). Returns (logits [B, T, V] in float32 (float64 for a float64 model),
        mean cross-entropy over the B*T positions or None). A target of -100 is not trained (HF's labels:
        the mean is over the others)."""
        h = self.model(input_ids, position_ids, attn_mask)
        logits = F.linear(h, self.head_weight())
        logits = logits.to(_at_least_f32(logits.dtype))      # HF: logits.float()
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def init_hf_(model: LlamaForCausalLM, gen: torch.Generator, std: Optional[float] = None):
    """HF's _init_weights: Linear and Embedding weights N(0, initializer_range), norm weights 1.

    In named_parameters() order, from `gen` (CPU generator), whatever the model's device and dtype.
    """
    std = model.cfg.initializer_range if std is None else std
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(std * torch.randn(p.shape, generator=gen))


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
