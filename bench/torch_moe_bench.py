#!/usr/bin/python3
"""PyTorch side of gridformer's MoE training benchmarks: GPT-2 MoE and Mixtral, written the way
MoE is written in PyTorch for speed, and a check that they compute what gridformer computes.

    # timed training runs go through bench/torch_gpt2.py (the same loop as the dense shapes):
    OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_gpt2.py --shape moe-tiny --steps 5 --warmup 1
    OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_gpt2.py --shape mixtral-tiny --dtype bf16
    # the checks (Debian's /usr/bin/python3; bench/train_vs_pytorch.py --check-moe runs both):
    /usr/bin/python3 bench/torch_moe_bench.py --check-reference --shape moe-tiny
    /usr/bin/python3 bench/torch_moe_bench.py --shape moe-tiny --weights W.safetensors --metrics metrics.jsonl

The MoE layer (SparseMoE below) is Hugging Face's MixtralSparseMoeBlock (transformers'
modeling_mixtral.py): router logits in float32 (outside autocast), softmax in float32, torch.topk,
the chosen probabilities renormalised when norm_topk_prob; then, for each expert, its routed rows
are gathered by index (torch.where on the one-hot of the choices), run through the expert MLP,
scaled by their routing weight and index_add_'ed into the output. Dropless (no capacity), as the
benchmark shapes are. The balancing loss is tools/torch_moe.py's per-sequence form (Megatron's
seq_aux_loss: f_e = assignments of sequence s to e / (T k), a constant; P_e = mean over s of
p[t, e]; aux_s = E sum_e f_e P_e; the layer's aux = mean over sequences) and the objective is
mean CE + aux_loss_factor x sum over layers of aux (z-loss factor 0 in these shapes).

Models (Hugging Face's names, so gridformer's --save-weights loads into them by name):
  moe-tiny:     GPT-2 (Conv1D [in, out] with biases, gelu_new, LayerNorm 1e-5, learned positions,
                tied head; attention as bench/torch_gpt2.py's) with every MLP an MoE layer of 8
                experts top-2, each expert GPT-2's MLP (c_fc [C, 4C] + bias, gelu_new, c_proj [4C, C]
                + bias); norm_topk_prob False (gridformer's GPT-2 MoE golden default), aux 0.01.
  mixtral-tiny: tools/torch_moe.py's MixtralForCausalLM (tools/torch_llama.py's Llama, as
                llama-tiny's PyTorch side) with this file's SparseMoE forward in every layer: 8 SwiGLU
                experts (w2(silu(w1 x) * w3 x), F 704) top-2, norm_topk_prob True, aux 0.01.

--check-reference: the fast layer against tools/torch_moe.py's reference (moe_forward: stable top-k,
the same aux) on the same weights and tokens: loss, aux and every gradient (float64, so the only
difference is the order of sums). --weights/--metrics: gridformer's first step (a
`gridformer train` run of 1 step at learning rate 0 with --save-weights, as
bench/train_vs_pytorch.py --check-moe makes it) against this model with those weights, on the same
RandomTokens (splitmix64 counters, runner/train/batch_source.cpp): CE loss, aux_loss and objective.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
sys.path.insert(0, HERE)

# name -> the shape, in bench/torch_gpt2.py's SHAPES keys (model "gpt2-moe" or "mixtral")
MOE_SHAPES = {
    "moe-tiny": dict(model="gpt2-moe", n_layer=4, n_embd=256, n_head=4, vocab_size=50257, n_positions=1024, T=256,
                     B=8, experts=8, top_k=2, norm_topk_prob=False, aux_loss_factor=0.01),
    "mixtral-tiny": dict(model="mixtral", n_layer=4, n_embd=256, n_head=8, n_kv_head=2, intermediate_size=704,
                         vocab_size=50257, n_positions=1024, T=256, B=8, experts=8, top_k=2, norm_topk_prob=True,
                         aux_loss_factor=0.01),
}


class SparseMoE(nn.Module):
    """Hugging Face's MixtralSparseMoeBlock forward (per-expert loop, index_add_), dropless, with the
    per-sequence balancing loss. `gate`: nn.Linear(C, E, bias=False); `experts`: nn.ModuleList."""

    def __init__(self, gate, experts, top_k, norm_topk_prob):
        super().__init__()
        self.gate, self.experts, self.top_k, self.norm_topk_prob = gate, experts, top_k, norm_topk_prob

    def forward(self, x):
        B, T, C = x.shape
        E, k = len(self.experts), self.top_k
        h = x.reshape(-1, C)
        ct = torch.promote_types(h.dtype, torch.float32)  # float32 (float64 in --check-reference)
        with torch.autocast("cpu", enabled=False):        # the router in float32 also under bf16 autocast
            logits = F.linear(h.to(ct), self.gate.weight.to(ct))
            probs = F.softmax(logits, dim=-1, dtype=ct)
        w, chosen = torch.topk(probs, k, dim=-1)            # [N, k]
        if self.norm_topk_prob:
            w = w / w.sum(dim=-1, keepdim=True)
        w = w.to(h.dtype)
        out = torch.zeros_like(h)
        onehot = F.one_hot(chosen, num_classes=E)           # [N, k, E] int64
        mask = onehot.permute(2, 1, 0)                      # [E, k, N]
        for e in range(E):
            slot, rows = torch.where(mask[e])
            if rows.numel() == 0:
                continue
            y = self.experts[e](h[rows]) * w[rows, slot, None]
            out.index_add_(0, rows, y.to(h.dtype))
        f = onehot.reshape(B, T * k, E).sum(1).to(ct) / (T * k)   # a constant
        P = probs.reshape(B, T, E).mean(1)
        aux = E * (f * P).sum(-1).mean()
        return out.reshape(B, T, C), aux


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class Conv1D(nn.Module):
    """HF Conv1D: weight [in, out]; y = b + x W as one addmm (bench/torch_gpt2.py's)."""

    def __init__(self, n_in, n_out, std):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * std)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        y = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)
        return y.view(*x.shape[:-1], -1)


class GPT2Expert(nn.Module):
    def __init__(self, C, L):
        super().__init__()
        self.c_fc = Conv1D(C, 4 * C, 0.02)
        self.c_proj = Conv1D(4 * C, C, 0.02 / math.sqrt(2 * L))

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Attention(nn.Module):
    """bench/torch_gpt2.py's attention under HF's names (attn.c_attn, attn.c_proj)."""

    def __init__(self, C, H, L, P, attention="eager"):
        super().__init__()
        self.H = H
        self.sdpa = attention == "sdpa"
        self.c_attn = Conv1D(C, 3 * C, 0.02)
        self.c_proj = Conv1D(C, C, 0.02 / math.sqrt(2 * L))
        self.register_buffer("mask", torch.tril(torch.ones(P, P, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.H, C // self.H
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, H, D).transpose(1, 2)
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        if self.sdpa:  # as bench/torch_gpt2.py's Block
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class GPT2MoEMlp(nn.Module):
    """h.{i}.mlp: router.weight [E, C], experts.{e}.c_fc / c_proj (tools/torch_moe.py's names)."""

    def __init__(self, C, L, E, top_k, norm_topk_prob):
        super().__init__()
        self.router = nn.Linear(C, E, bias=False)
        nn.init.normal_(self.router.weight, std=0.02)
        self.experts = nn.ModuleList([GPT2Expert(C, L) for _ in range(E)])
        self.moe = SparseMoE(self.router, self.experts, top_k, norm_topk_prob)

    def forward(self, x):
        return self.moe(x)


class GPT2MoEBlock(nn.Module):
    def __init__(self, s):
        super().__init__()
        C, L = s["n_embd"], s["n_layer"]
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = GPT2Attention(C, s["n_head"], L, s["n_positions"], s.get("attention", "eager"))
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = GPT2MoEMlp(C, L, s["experts"], s["top_k"], s["norm_topk_prob"])

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        y, aux = self.mlp(self.ln_2(x))
        return x + y, aux


class GPT2MoE(nn.Module):
    """GPT-2 with every MLP an MoE layer; forward(idx, targets) -> (mean CE, [aux per layer])."""

    def __init__(self, s):
        super().__init__()
        C = s["n_embd"]
        self.wte = nn.Embedding(s["vocab_size"], C)
        self.wpe = nn.Embedding(s["n_positions"], C)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)
        self.h = nn.ModuleList([GPT2MoEBlock(s) for _ in range(s["n_layer"])])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        auxes = []
        for blk in self.h:
            x, aux = blk(x)
            auxes.append(aux)
        logits = self.ln_f(x).reshape(B * T, -1) @ self.wte.weight.t()       # tied head
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))   # float32 under autocast too
        return F.cross_entropy(logits, targets.reshape(-1)), auxes


class Mixtral(nn.Module):
    """tools/torch_moe.py's MixtralForCausalLM with SparseMoE's forward in each MoE block (the same
    parameters, model.layers.{i}.block_sparse_moe.gate / experts.{e}.w1|w2|w3)."""

    def __init__(self, s, seed=0):
        super().__init__()
        import torch_llama as tl
        import torch_moe as tm
        cfg = tl.LlamaConfig(vocab_size=s["vocab_size"], hidden_size=s["n_embd"], num_layers=s["n_layer"],
                             num_heads=s["n_head"], num_kv_heads=s["n_kv_head"], intermediate_size=s["intermediate_size"],
                             rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                             max_position_embeddings=s["n_positions"], attn_implementation=s.get("attention", "eager"))
        moe = tm.MoEConfig(num_experts=s["experts"], top_k=s["top_k"], capacity_factor=0.0,
                           norm_topk_prob=s["norm_topk_prob"], aux_loss_factor=s["aux_loss_factor"])
        self.ref = tm.MixtralForCausalLM(cfg, moe)
        tl.init_hf_(self.ref, torch.Generator().manual_seed(seed))
        self.fast = True
        for layer in self.ref.model.layers:
            b = layer.block_sparse_moe
            b.fast = SparseMoE(b.gate, b.experts, s["top_k"], s["norm_topk_prob"])
            b.forward = self._block_forward(b)

    def _block_forward(self, block):
        ref_forward = type(block).forward

        def forward(x):
            if self.fast:
                y, aux = block.fast(x)
                return y, dict(aux=aux)
            return ref_forward(block, x)
        return forward

    def forward(self, idx, targets):
        _, ce, stats = self.ref(idx, targets)
        return ce, [st["aux"] for st in stats]


class MoELoss(nn.Module):
    """(idx, targets) -> the objective, as bench/torch_gpt2.py's timed loop calls a model."""

    def __init__(self, s, seed=0):
        super().__init__()
        self.s = s
        self.net = Mixtral(s, seed) if s["model"] == "mixtral" else GPT2MoE(s)

    def forward(self, idx, targets):
        ce, auxes = self.net(idx, targets)
        return ce + self.s["aux_loss_factor"] * sum(auxes)


def moe_flops(s):
    """Active FLOPs of one training step, as gridformer's TransformerLM::flops_per_step counts them:
    6 B T [L (C (H + 2 Hkv) D + C H D + 2 T C) + sum over MoE layers (k m C F + C E) + C V], every layer
    MoE here (m = 3 SwiGLU, 2 GELU; F = 4C for GPT-2)."""
    B, T, L, C, V, H = s["B"], s["T"], s["n_layer"], s["n_embd"], s["vocab_size"], s["n_head"]
    Hkv = s.get("n_kv_head", H)
    D = C // H
    gated = s["model"] == "mixtral"
    Fw = s["intermediate_size"] if gated else 4 * C
    m = 3.0 if gated else 2.0
    per_token = (L * (C * (H + 2 * Hkv) * D + C * H * D + 2.0 * T * C)
                 + L * (s["top_k"] * m * C * Fw + C * s["experts"]) + C * V)
    return 6.0 * B * T * per_token


# ---------------------------------------------------------------------------------------------
# Checks


def splitmix64(x):
    M = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)


def random_tokens(seed, vocab, seq, first, count):
    """runner/train/batch_source.cpp's RandomTokens: token t of sample id = counter_bits(seed, id, t) % vocab,
    counter_bits(seed, stream, index) = splitmix64(splitmix64(seed ^ splitmix64(stream)) + index)."""
    out = torch.empty(count, seq + 1, dtype=torch.int64)
    M = (1 << 64) - 1
    for s in range(count):
        base = splitmix64(seed ^ splitmix64(first + s))
        out[s] = torch.tensor([splitmix64((base + t) & M) % vocab for t in range(seq + 1)])
    return out


def read_safetensors(path):
    """{name: float32 tensor} of a safetensors file (F32 tensors only, as --save-weights writes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(t["shape"])
    return out


def load_gridformer_weights(model, path):
    """Copies every tensor of `path` into the parameter of the same name (the Mixtral's under
    `net.ref.`, the GPT-2's under `net.`); every parameter must be covered."""
    w = read_safetensors(path)
    prefix = "net.ref." if isinstance(model.net, Mixtral) else "net."
    params = dict(model.named_parameters())
    missing = [n for n in params if n[len(prefix):] not in w]
    unknown = [n for n in w if prefix + n not in params]
    if missing or unknown:
        raise SystemExit(f"weights do not match the model: missing {missing[:5]}, unknown {unknown[:5]}")
    with torch.no_grad():
        for n, t in w.items():
            params[prefix + n].copy_(t.reshape(params[prefix + n].shape))


def check_gridformer(args, s):
    """gridformer's step-1 loss, aux_loss and objective (metrics.jsonl) against this model on the same
    weights and tokens; returns the JSON row it prints."""
    torch.manual_seed(0)
    model = MoELoss(s)
    load_gridformer_weights(model, args.weights)
    rows = [json.loads(l) for l in open(args.metrics) if '"loss"' in l]
    g = rows[0]
    tok = random_tokens(args.data_seed, s["vocab_size"], s["T"], 0, s["B"])
    with torch.no_grad():
        ce, auxes = model.net(tok[:, :-1], tok[:, 1:])
    aux = float(sum(auxes))
    obj = float(ce) + s["aux_loss_factor"] * aux
    res = dict(check="gridformer step 1", shape=args.shape, gridformer_loss=g["loss"], torch_loss=float(ce),
               gridformer_aux_loss=g.get("aux_loss"), torch_aux_loss=aux,
               gridformer_objective=g.get("objective"), torch_objective=obj)
    res["abs_diff_loss"] = abs(res["gridformer_loss"] - res["torch_loss"])
    res["abs_diff_objective"] = abs((res["gridformer_objective"] or float("nan")) - obj)
    res["abs_diff_aux_loss"] = abs((res["gridformer_aux_loss"] or float("nan")) - aux)
    res["ok"] = max(res["abs_diff_loss"], res["abs_diff_objective"]) <= args.tol
    print(json.dumps(res))
    return res


def check_reference(args, s):
    """The fast SparseMoE against tools/torch_moe.py's moe_forward on the same weights, in float64:
    the objective and every gradient."""
    import torch_moe as tm
    s = dict(s, B=2, T=32)                     # small: the reference's per-layer bookkeeping is slow
    torch.manual_seed(1)
    model = MoELoss(s).double()
    tok = torch.randint(0, s["vocab_size"], (s["B"], s["T"] + 1))
    moe = tm.MoEConfig(num_experts=s["experts"], top_k=s["top_k"], capacity_factor=0.0,
                       norm_topk_prob=s["norm_topk_prob"], aux_loss_factor=s["aux_loss_factor"])
    results = []
    for fast in (True, False):
        model.zero_grad(set_to_none=True)
        if isinstance(model.net, Mixtral):
            model.net.fast = fast
            loss = model(tok[:, :-1], tok[:, 1:])
        elif fast:
            loss = model(tok[:, :-1], tok[:, 1:])
        else:                                   # GPT-2 MoE through tm.moe_forward, layer by layer
            net = model.net
            B, T = s["B"], s["T"]
            x = net.wte(tok[:, :-1]) + net.wpe.weight[:T]
            stats = []
            for blk in net.h:
                x = x + blk.attn(blk.ln_1(x))
                y, st = tm.moe_forward(blk.ln_2(x).reshape(B * T, -1), blk.mlp.router.weight, blk.mlp.experts, moe, B, T)
                x = x + y.reshape(B, T, -1)
                stats.append(st)
            logits = net.ln_f(x).reshape(B * T, -1) @ net.wte.weight.t()
            loss = tm.objective(F.cross_entropy(logits, tok[:, 1:].reshape(-1)), stats, moe)
        loss.backward()
        results.append((float(loss), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (lf, gf), (lr, gr) = results
    worst = max(float((gf[n] - gr[n]).abs().max() / gr[n].abs().max().clamp_min(1e-300)) for n in gr)
    res = dict(check="fast SparseMoE vs tools/torch_moe.py moe_forward (float64)", shape=args.shape,
               fast_objective=lf, reference_objective=lr, abs_diff=abs(lf - lr), worst_grad_rel=worst,
               same_params=sorted(gf) == sorted(gr))
    res["ok"] = res["abs_diff"] <= 1e-10 and worst <= 1e-9 and res["same_params"]
    print(json.dumps(res))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(MOE_SHAPES), default="moe-tiny")
    ap.add_argument("--check-reference", action="store_true")
    ap.add_argument("--weights", help="gridformer --save-weights file of a 1-step run at learning rate 0")
    ap.add_argument("--metrics", help="that run's metrics.jsonl")
    ap.add_argument("--data-seed", type=int, default=0, help="train_dataset.data_loader.seed (RandomTokens)")
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    s = MOE_SHAPES[args.shape]
    ok = True
    if args.check_reference:
        ok &= check_reference(args, s)["ok"]
    if args.weights:
        ok &= check_gridformer(args, s)["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
