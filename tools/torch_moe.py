"""Mixture-of-Experts in plain torch: the reference MoE layer, a GPT-2 whose MLPs are MoE layers and a
Mixtral (Llama with sparse MoE blocks), with Hugging Face's parameter names and layouts (no `transformers`).

The dense parts are tools/make_golden.py's GPT-2 (Conv1D y = x W + b, gelu_new, learned positions,
LayerNorm, tied head) and tools/torch_llama.py's Llama (RMSNorm, RoPE, GQA, untied head). The MoE
block takes the MLP's place in every layer i with i % moe_layer_freq == 0; the other layers keep
their dense MLP and its names.

The MoE layer (moe_forward), exactly:
  * input x [N, C], the post-attention-norm hidden state, N = B*T rows ordered (sequence b, position t);
    the output goes where the MLP output goes (then the residual add).
  * logits = x . Wr^T [N, E] (float32 for a float32 model; no bias); p = softmax(logits) (float32).
  * top-k: the k largest p per token in descending order, ties to the lower expert index (a stable
    descending sort of p, not torch.topk whose tie order is unspecified): e_1 .. e_k.
  * gate weights w[t, j] = p[t, e_j] / sum_j' p[t, e_j'] if norm_topk_prob else p[t, e_j]; the
    gradient flows through p (the choice of e_j is a constant).
  * capacity (capacity_factor cf > 0): cap = ceil(cf * T * k / E) (in double) per SEQUENCE per expert.
    Within each sequence the assignments (t, j) with e_j = e are ordered by token_drop_policy:
    "position": t ascending; "probs": p[t, e] descending, ties t ascending. The first cap are kept, the
    rest dropped: a dropped (t, j) contributes nothing (the expert is not run on it). Kept weights are
    not renormalised. cf <= 0: dropless.
  * y[t] = sum over kept j of w[t, j] * expert_{e_j}(x[t]); a GPT-2 expert is c_proj(gelu_new(c_fc(x)))
    with both biases, a Mixtral expert w2(silu(w1 x) * w3 x).
  * balancing loss (Megatron's seq_aux_loss form), per sequence s: f_e = #{(t, j) in s: e_j = e}
    (before capacity dropping) / (T * k), a constant; P_e = mean over t in s of p[t, e] (carries the
    gradient); aux_s = E * sum_e f_e * P_e. The layer's aux = mean over the batch's sequences of aux_s.
  * z-loss: mean over the N tokens of logsumexp(logits[t])^2.
  * objective = mean token cross-entropy + aux_loss_factor * sum over MoE layers of aux
                + z_loss_factor * sum over MoE layers of z.

Names (global shapes):
  GPT-2 MoE layer i:  h.{i}.mlp.router.weight [E, C]; h.{i}.mlp.experts.{e}.c_fc.weight [C, F],
                      .c_fc.bias [F], .c_proj.weight [F, C], .c_proj.bias [C]   (F = 4C)
  Mixtral layer i:    model.layers.{i}.block_sparse_moe.gate.weight [E, C];
                      model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight [F, C] (gate),
                      .w3.weight [F, C] (up), .w2.weight [C, F] (down)   (nn.Linear, y = x W^T)

    import torch_moe as tm
    moe = tm.MoEConfig(num_experts=4, top_k=2, capacity_factor=0.0, norm_topk_prob=False)
    model = tm.GPT2MoE(dict(n_layer=2, n_embd=64, n_head=4, vocab_size=96, n_positions=32,
                            activation="gelu_new", layer_norm_epsilon=1e-5), moe)
    logits, ce, stats = model(tokens[:, :-1], tokens[:, 1:])
    obj = tm.objective(ce, stats, moe)
"""
import math
import os
import sys
from dataclasses import dataclass
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import ACTIVATIONS, MLP, Attention, Conv1D  # noqa: E402
import torch_llama as tl  # noqa: E402


@dataclass
class MoEConfig:
    """gridformer's MoeConfig (models/model_config.h) under short names (gridformer's in the comment)."""
    num_experts: int = 4            # expert_num
    top_k: int = 2                  # num_experts_chosen
    capacity_factor: float = 0.0    # <= 0: dropless
    token_drop_policy: str = "position"   # "position" | "probs"
    norm_topk_prob: bool = True
    aux_loss_factor: float = 0.0
    z_loss_factor: float = 0.0
    moe_layer_freq: int = 1         # layer i is MoE when i % moe_layer_freq == 0

    def is_moe_layer(self, i: int) -> bool:
        return i % max(1, self.moe_layer_freq) == 0

    def capacity(self, T: int) -> int:
        return math.ceil(self.capacity_factor * T * self.top_k / self.num_experts)   # Python floats: double

    def __post_init__(self):
        if self.token_drop_policy not in ("position", "probs"):
            raise ValueError(f"token_drop_policy {self.token_drop_policy!r}")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"top_k {self.top_k} with {self.num_experts} experts")


def top_k_stable(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Expert indices [N, k]: the k largest probabilities, descending, ties to the lower index."""
    return torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices[:, :k]


def capacity_keep(probs: torch.Tensor, experts: torch.Tensor, moe: MoEConfig, B: int, T: int) -> torch.Tensor:
    """Bool [N, k]: which assignments (t, j) capacity keeps (all of them when dropless)."""
    N, k = experts.shape
    kept = torch.ones(N, k, dtype=torch.bool)
    if moe.capacity_factor <= 0:
        return kept
    cap = moe.capacity(T)
    p = probs.detach()
    for b in range(B):
        ex = experts[b * T:(b + 1) * T]                       # [T, k]
        for e in range(moe.num_experts):
            t_idx, j_idx = torch.nonzero(ex == e, as_tuple=True)   # row-major: t ascending
            if moe.token_drop_policy == "probs":
                # p descending, ties t ascending: a stable sort of the t-ordered list
                order = torch.sort(p[b * T + t_idx, e], descending=True, stable=True).indices
                t_idx, j_idx = t_idx[order], j_idx[order]
            kept[b * T + t_idx[cap:], j_idx[cap:]] = False
    return kept


def moe_forward(x: torch.Tensor, router_weight: torch.Tensor, experts: nn.ModuleList, moe: MoEConfig, B: int, T: int):
    """x [N, C] (rows (b, t)); returns (y [N, C], stats dict). See the module docstring."""
    N, _ = x.shape
    E, k = moe.num_experts, moe.top_k
    compute = torch.promote_types(x.dtype, torch.float32)
    logits = x.to(compute) @ router_weight.to(compute).t()               # [N, E]
    probs = torch.softmax(logits, dim=-1)
    chosen = top_k_stable(probs, k)                                       # [N, k] int64
    p_chosen = probs.gather(1, chosen)                                    # [N, k]
    weights = p_chosen / p_chosen.sum(-1, keepdim=True) if moe.norm_topk_prob else p_chosen
    kept = capacity_keep(probs, chosen, moe, B, T)                        # [N, k] bool

    y = torch.zeros_like(x)
    for e in range(E):
        sel = (chosen == e) & kept                                        # at most one j per row
        rows = torch.nonzero(sel.any(-1), as_tuple=True)[0]
        if rows.numel() == 0:
            continue
        w_e = (weights * sel.to(weights.dtype)).sum(-1)[rows]             # [n_e]
        y = y.index_add(0, rows, (w_e[:, None] * experts[e](x[rows])).to(x.dtype))

    onehot = F.one_hot(chosen, E).to(compute)                             # [N, k, E], a constant
    f = onehot.reshape(B, T * k, E).sum(1) / (T * k)                      # [B, E]
    P = probs.reshape(B, T, E).mean(1)                                    # [B, E]
    aux_s = E * (f * P).sum(-1)                                           # [B]
    z = torch.logsumexp(logits, dim=-1).pow(2).mean()
    stats = dict(aux=aux_s.mean(), aux_per_sequence=aux_s, z=z,
                 tokens_per_expert=onehot.sum((0, 1)).round().to(torch.int64),
                 dropped=int((~kept).sum()), kept=kept, experts=chosen, weights=weights, probs=probs,
                 logits=logits)
    return y, stats


def objective(ce: torch.Tensor, stats: List[dict], moe: MoEConfig) -> torch.Tensor:
    """mean CE + aux_loss_factor * sum_layers aux + z_loss_factor * sum_layers z."""
    obj = ce
    for s in stats:
        obj = obj + moe.aux_loss_factor * s["aux"] + moe.z_loss_factor * s["z"]
    return obj


# ----------------------------------------------------------------------------
# GPT-2 with MoE MLPs


class GPT2Expert(nn.Module):
    """One expert: GPT-2's MLP, c_proj(act(c_fc(x))), Conv1D weights [in, out] with biases."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg["n_embd"]
        self.c_fc = Conv1D(C, 4 * C)
        self.c_proj = Conv1D(4 * C, C)
        self.act = ACTIVATIONS[cfg["activation"]]

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class GPT2MoELayer(nn.Module):
    """h.{i}.mlp of a MoE layer: router.weight [E, C] and experts.{e}.*"""

    def __init__(self, cfg, moe: MoEConfig):
        super().__init__()
        self.moe = moe
        self.router = nn.Linear(cfg["n_embd"], moe.num_experts, bias=False)
        self.experts = nn.ModuleList([GPT2Expert(cfg) for _ in range(moe.num_experts)])

    def forward(self, x):
        B, T, C = x.shape
        y, stats = moe_forward(x.reshape(B * T, C), self.router.weight, self.experts, self.moe, B, T)
        return y.reshape(B, T, C), stats


class GPT2MoEBlock(nn.Module):
    def __init__(self, cfg, moe: MoEConfig, is_moe: bool):
        super().__init__()
        eps = cfg["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(cfg["n_embd"], eps=eps)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg["n_embd"], eps=eps)
        self.is_moe = is_moe
        self.mlp = GPT2MoELayer(cfg, moe) if is_moe else MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        if self.is_moe:
            y, stats = self.mlp(self.ln_2(x))
            return x + y, stats
        return x + self.mlp(self.ln_2(x)), None


class GPT2MoE(nn.Module):
    """GPT2LMHeadModel's transformer names (wte.weight, h.0.ln_1.weight, ...) with MoE MLPs; tied head."""

    def __init__(self, cfg, moe: MoEConfig):
        super().__init__()
        self.cfg, self.moe = cfg, moe
        self.wte = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.wpe = nn.Embedding(cfg["n_positions"], cfg["n_embd"])
        self.h = nn.ModuleList([GPT2MoEBlock(cfg, moe, moe.is_moe_layer(i)) for i in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(cfg["n_embd"], eps=cfg["layer_norm_epsilon"])

    def forward(self, idx, targets=None):
        """Returns (logits [B, T, V], mean CE or None, [stats of each MoE layer, with its 'layer' index])."""
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))[None]
        all_stats = []
        for i, block in enumerate(self.h):
            x, stats = block(x)
            if stats is not None:
                all_stats.append(dict(stats, layer=i))
        logits = self.ln_f(x) @ self.wte.weight.t()
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss, all_stats


# ----------------------------------------------------------------------------
# Mixtral: Llama with sparse MoE blocks (transformers' modeling_mixtral.py names)


class MixtralExpert(nn.Module):
    """MixtralBlockSparseTop2MLP: w2(silu(w1 x) * w3 x); w1 gate [F, C], w2 down [C, F], w3 up [F, C]."""

    def __init__(self, C, F_):
        super().__init__()
        self.w1 = nn.Linear(C, F_, bias=False)
        self.w2 = nn.Linear(F_, C, bias=False)
        self.w3 = nn.Linear(C, F_, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MixtralSparseMoeBlock(nn.Module):
    """model.layers.{i}.block_sparse_moe: gate.weight [E, C] and experts.{e}.w{1,2,3}.weight."""

    def __init__(self, cfg: tl.LlamaConfig, moe: MoEConfig):
        super().__init__()
        self.moe = moe
        self.gate = nn.Linear(cfg.hidden_size, moe.num_experts, bias=False)
        self.experts = nn.ModuleList([MixtralExpert(cfg.hidden_size, cfg.intermediate_size)
                                      for _ in range(moe.num_experts)])

    def forward(self, x):
        B, T, C = x.shape
        y, stats = moe_forward(x.reshape(B * T, C), self.gate.weight, self.experts, self.moe, B, T)
        return y.reshape(B, T, C), stats


class MixtralDecoderLayer(nn.Module):
    def __init__(self, cfg: tl.LlamaConfig, moe: MoEConfig, is_moe: bool):
        super().__init__()
        self.self_attn = tl.LlamaAttention(cfg)
        self.is_moe = is_moe
        if is_moe:
            self.block_sparse_moe = MixtralSparseMoeBlock(cfg, moe)
        else:
            self.mlp = tl.LlamaMLP(cfg)
        self.input_layernorm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        if self.is_moe:
            y, stats = self.block_sparse_moe(h)
            return x + y, stats
        return x + self.mlp(h), None


class MixtralModel(nn.Module):
    def __init__(self, cfg: tl.LlamaConfig, moe: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([MixtralDecoderLayer(cfg, moe, moe.is_moe_layer(i)) for i in range(cfg.num_layers)])
        self.norm = tl.LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, input_ids):
        T = input_ids.shape[1]
        cos, sin = tl.rope_cos_sin(self.cfg.head_dim, self.cfg.rope_theta, torch.arange(T))
        x = self.embed_tokens(input_ids)
        all_stats = []
        for i, layer in enumerate(self.layers):
            x, stats = layer(x, cos, sin)
            if stats is not None:
                all_stats.append(dict(stats, layer=i))
        return self.norm(x), all_stats


class MixtralForCausalLM(nn.Module):
    """Untied head (lm_head.weight) unless cfg.tie_word_embeddings."""

    def __init__(self, cfg: tl.LlamaConfig, moe: MoEConfig):
        super().__init__()
        self.cfg, self.moe = cfg, moe
        self.model = MixtralModel(cfg, moe)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids, targets=None):
        h, all_stats = self.model(input_ids)
        W = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(h, W)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss, all_stats


# ----------------------------------------------------------------------------
# an independent, naive per-token implementation of the MoE layer (for the self-checks)


def moe_forward_naive(x, router_weight, expert_fns, moe: MoEConfig, B: int, T: int):
    """The same semantics token by token with Python lists and sorted(); float64 throughout.

    expert_fns[e](row [C]) -> [C]. Returns (y [N, C], aux, z, counts [E], dropped, kept [N][k] lists).
    """
    E, k = moe.num_experts, moe.top_k
    N = B * T
    cap = moe.capacity(T) if moe.capacity_factor > 0 else None
    rows_out, choices, probs_all, lse_all = [], [], [], []
    for n in range(N):
        lg = [torch.dot(x[n], router_weight[e]) for e in range(E)]
        m = max(float(v) for v in lg)
        ex = [torch.exp(v - m) for v in lg]
        s = sum(ex)
        p = [v / s for v in ex]
        lse_all.append(m + torch.log(s))
        probs_all.append(p)
        # descending by p, ties to the lower expert index
        order = sorted(range(E), key=lambda e: (-float(p[e]), e))[:k]
        denom = sum(p[e] for e in order) if moe.norm_topk_prob else 1.0
        choices.append([(e, p[e] / denom) for e in order])
    kept = [[True] * k for _ in range(N)]
    if cap is not None:
        for b in range(B):
            for e in range(E):
                lst = [(t, j) for t in range(T) for j in range(k) if choices[b * T + t][j][0] == e]
                if moe.token_drop_policy == "probs":
                    lst.sort(key=lambda tj: (-float(probs_all[b * T + tj[0]][e]), tj[0]))
                else:
                    lst.sort(key=lambda tj: tj[0])
                for t, j in lst[cap:]:
                    kept[b * T + t][j] = False
    for n in range(N):
        acc = torch.zeros_like(x[n])
        for j, (e, w) in enumerate(choices[n]):
            if kept[n][j]:
                acc = acc + w * expert_fns[e](x[n])
        rows_out.append(acc)
    counts = [sum(1 for n in range(N) for e_, _ in choices[n] if e_ == e) for e in range(E)]
    aux_total = 0.0
    for b in range(B):
        aux_b = 0.0
        for e in range(E):
            f_e = sum(1 for t in range(T) for e_, _ in choices[b * T + t] if e_ == e) / (T * k)
            P_e = sum(probs_all[b * T + t][e] for t in range(T)) / T
            aux_b = aux_b + f_e * P_e
        aux_total = aux_total + E * aux_b
    z = sum(v * v for v in lse_all) / N
    dropped = sum(1 for n in range(N) for j in range(k) if not kept[n][j])
    return torch.stack(rows_out), aux_total / B, z, counts, dropped, kept


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
