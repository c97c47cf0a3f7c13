#!/usr/bin/python3
"""Golden files for gridformer's Mixture-of-Experts models, from the plain-torch MoE in tools/torch_moe.py
(GPT-2 with MoE MLPs, and Mixtral: Llama with sparse MoE blocks; Hugging Face's names and layouts).

Run with Debian's Python (the pyenv `python3` on PATH has no torch):

    /usr/bin/python3 tools/make_moe_golden.py [--out tests/golden]

The MoE layer, exactly as implemented (tools/torch_moe.py, moe_forward):
  * It takes the MLP's place: input x [N, C] = the post-attention-norm hidden state (GPT-2: ln_2,
    Mixtral: post_attention_layernorm), N = B*T rows ordered (sequence b, position t); its output goes
    where the MLP output goes (then the residual add). Layer i is MoE when i % moe_layer_freq == 0.
  * logits = x . Wr^T in float32 [N, E] (no bias); p = softmax(logits) in float32.
  * top-k per token: the k largest p in descending order, ties to the lower expert index (a stable
    descending sort of p; not torch.topk).
  * gate weights w[t, j] = p[t, e_j] / sum_j' p[t, e_j'] if norm_topk_prob else p[t, e_j].
  * capacity (capacity_factor cf > 0): cap = ceil(cf * T * k / E) (double) per SEQUENCE per expert.
    Within each sequence the assignments (t, j) to expert e are ordered by token_drop_policy:
    "position": t ascending; "probs": p[t, e] descending, ties t ascending. The first cap are kept;
    the rest are dropped: weight 0, the expert is not run on them. Kept weights are not
    renormalised. cf <= 0: dropless.
  * y[t] = sum over kept j of w[t, j] * expert_{e_j}(x[t]); GPT-2 expert = c_proj(gelu_new(c_fc(x)))
    with both biases (Conv1D, y = x W + b); Mixtral expert = w2(silu(w1 x) * w3 x) (y = x W^T).
  * balancing loss per MoE layer (Megatron's seq_aux_loss form), per sequence s:
    f_e = #{(t, j) in s: e_j = e} counted BEFORE capacity dropping / (T * k), a constant (no gradient);
    P_e = mean over t in s of p[t, e] (with gradient); aux_s = E * sum_e f_e * P_e.
  * z-loss per MoE layer: mean over the batch's N tokens of logsumexp(logits[t])^2.
  * objective = mean token cross-entropy + aux_loss_factor * sum over MoE layers of (mean over the
    batch's sequences of aux_s) + z_loss_factor * sum over MoE layers of (z-loss).
    Gradients and the AdamW steps are of the objective.

Files (tests/golden/), B 2, T 16, 4 experts, top-2, 10 AdamW steps (make_golden.py's AdamW, LR
schedule (warmup 3, cosine), float64-accurate clipping):
  gpt2_moe_tiny.safetensors      GPT-2 (vocab 96, hidden 64, 2 layers, 4 heads, gelu_new, learned
                                 positions (32), LayerNorm, tied head, biases), every layer MoE;
                                 dropless, norm_topk_prob False, aux 0.05, z 1e-3.
  gpt2_moe_tiny_cap.safetensors  the same with capacity_factor 1.0, policy "position",
                                 moe_layer_freq 2 (layer 0 MoE, layer 1 the dense MLP).
  mixtral_tiny.safetensors       Llama tiny (make_llama_golden.py's: vocab 96, hidden 64, 2 layers,
                                 4 heads / 2 kv heads, RoPE theta 1e6, RMSNorm, untied head) with
                                 sparse MoE blocks of SwiGLU experts (intermediate_size 96) in every
                                 layer; norm_topk_prob True, dropless, aux 0.02, z 0.
  mixtral_tiny_cap.safetensors   the same with capacity_factor 1.0, policy "probs".
The capacity files assert that tokens are dropped in every MoE layer at the first and the last step.
Every file asserts routing margins over all 10 steps (top-k logit gaps; for "probs", the probability
gap at each expert's capacity boundary) so that float32 rounding cannot flip a routing decision in
gridformer.

Keys (make_llama_golden.py's, plus the MoE ones):
  weights.<name>, tokens [B, T+1] I32, logits [B*T, V], loss [1] (mean CE), objective [1],
  grads.<name> (of the objective, pre-clip),
  moe.layer{i}.aux [1] (mean over sequences of aux_s, unweighted), moe.layer{i}.aux_per_sequence [B],
  moe.layer{i}.z [1] (mean over tokens of lse^2, unweighted), moe.layer{i}.tokens_per_expert I32 [E]
  (assignments before capacity, whole batch), moe.layer{i}.dropped I32 [1],
  moe.layer{i}.kept I32 [N, k] (1 kept, 0 dropped; slot j = the j-th largest p),
  moe.layer{i}.experts I32 [N, k], moe.layer{i}.gate_weights [N, k] (w before dropping),
  moe.layer{i}.probs [N, E] -- all of the first forward;
  train.lr, train.losses (CE before update s), train.objectives, train.grad_norms (pre-clip, of the
  objective's gradient), train.aux / train.z [steps, MoE layers], train.dropped I32 [steps, MoE layers],
  train.tokens_per_expert I32 [steps, MoE layers, E], train.final.<name> (spot checks after 10 steps).

Self-checks before writing (self_checks): the MoE layer against an independent per-token loop
(outputs, aux, z, counts, kept set, and the gradients through both), including exact ties; float64
finite differences of the objective of the files' models for router and expert weights, with the
files' factors and with amplified aux/z factors; capacity_factor huge == dropless; the
norm_topk_prob weights sum to 1; the parameter names and shapes; with one expert the models are
make_golden.py's GPT2 and torch_llama.py's Llama. Each file's own run then asserts the float64
cross-check, the routing margins, the drops, that every parameter gets a gradient, and clipping on
some steps but not all.

    /usr/bin/python3 tools/make_moe_golden.py --search CASE FIRST_SEED COUNT

prints which seeds make CASE fit (how the seeds in CASES were picked). The files are bit-identical on
reruns (thread pools pinned as make_golden.py does).
"""
import os

# Pin the thread pools before torch is imported, as make_golden.py does.
os.environ["OMP_NUM_THREADS"] = "2"
os.environ["OPENBLAS_NUM_THREADS"] = "2"

import argparse  # noqa: E402
import copy  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import clip_grad_norm_exact, lr_at, write_safetensors  # noqa: E402
import torch_llama as tl  # noqa: E402
import torch_moe as tm  # noqa: E402

torch.set_num_threads(2)

GPT2_TINY = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=96, n_positions=32, activation="gelu_new",
                 layer_norm_epsilon=1e-5)
LLAMA_TINY = dict(vocab_size=96, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=96,
                  rope_theta=1e6, rms_norm_eps=1e-5, max_position_embeddings=32)
HP = dict(B=2, T=16, learning_rate=1e-3, lr_end=1e-4, warmup_steps=3, total_steps=10, beta1=0.9, beta2=0.95,
          adam_eps=1e-8, weight_decay=0.1, lr_schedule="cosine")

GPT2_MOE = tm.MoEConfig(num_experts=4, top_k=2, capacity_factor=0.0, token_drop_policy="position",
                        norm_topk_prob=False, aux_loss_factor=0.05, z_loss_factor=1e-3, moe_layer_freq=1)
MIXTRAL_MOE = tm.MoEConfig(num_experts=4, top_k=2, capacity_factor=0.0, token_drop_policy="position",
                           norm_topk_prob=True, aux_loss_factor=0.02, z_loss_factor=0.0, moe_layer_freq=1)

# name -> (model kind, MoE settings, seed, max_norm). The seeds are the fit ones with the widest routing
# margins that `--search CASE 3000 30` printed (fit: problems() finds nothing: margins, drops, every
# expert reached, clipping on some steps but not all).
CASES = {
    "gpt2_moe_tiny": ("gpt2", GPT2_MOE, 3020, 2.3),
    "gpt2_moe_tiny_cap": ("gpt2", dataclasses.replace(GPT2_MOE, capacity_factor=1.0, moe_layer_freq=2), 3025, 2.3),
    "mixtral_tiny": ("mixtral", MIXTRAL_MOE, 3001, 2.3),
    "mixtral_tiny_cap": ("mixtral", dataclasses.replace(MIXTRAL_MOE, capacity_factor=1.0, token_drop_policy="probs"),
                         3009, 2.3),
}
# The router's init: logits of a few units' spread, so that the routing is far from uniform (drops
# happen, margins are wide).
ROUTER_STD = 0.3
# Routing decisions must not depend on float32 rounding: the k-th and (k+1)-th router logits of every
# token differ by at least this much, and under "probs" the probabilities at each capacity boundary
# differ by at least this much relative to the larger one (every step).
MIN_LOGIT_GAP = 2e-3
MIN_PROB_GAP = 2e-3

INIT_GPT2 = ("make_golden.py's in named_parameters() order from one generator: LN weights 1 + N(0, 0.1), LN biases "
             f"N(0, 0.02), wpe N(0, 0.01), router weights N(0, {ROUTER_STD}), every other weight and bias N(0, 0.02)")
INIT_MIXTRAL = ("make_llama_golden.py's in named_parameters() order from one generator: RMSNorm weights 1 + N(0, 0.1); "
                f"q_proj and k_proj N(0, 0.08); block_sparse_moe.gate N(0, {ROUTER_STD}); "
                "every other weight N(0, 0.02)")


def init_gpt2_(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if ".ln_" in "." + name:
                p.copy_(1.0 + 0.1 * noise if name.endswith("weight") else 0.02 * noise)
            elif name == "wpe.weight":
                p.copy_(0.01 * noise)
            elif name.endswith("mlp.router.weight"):
                p.copy_(ROUTER_STD * noise)
            else:
                p.copy_(0.02 * noise)


def init_mixtral_(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(0.08 * noise)
            elif name.endswith("block_sparse_moe.gate.weight"):
                p.copy_(ROUTER_STD * noise)
            else:
                p.copy_(0.02 * noise)


def build(kind, moe, gen=None):
    if kind == "gpt2":
        model = tm.GPT2MoE(GPT2_TINY, moe)
        init = init_gpt2_
    else:
        model = tm.MixtralForCausalLM(tl.LlamaConfig(**LLAMA_TINY), moe)
        init = init_mixtral_
    if gen is not None:
        init(model, gen)
    return model


def make_tokens(gen, B, T, V):
    tokens = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    tokens[0, 3], tokens[1, 7], tokens[1, 12] = 0, V - 1, V - 1
    tokens[0, 9] = 0
    return tokens


def expected_names(kind, moe):
    """The parameter names and global shapes gridformer declares (the brief's table)."""
    names = {}
    E = moe.num_experts
    if kind == "gpt2":
        C, V, L, P = GPT2_TINY["n_embd"], GPT2_TINY["vocab_size"], GPT2_TINY["n_layer"], GPT2_TINY["n_positions"]
        names.update({"wte.weight": [V, C], "wpe.weight": [P, C], "ln_f.weight": [C], "ln_f.bias": [C]})
        for i in range(L):
            h = f"h.{i}."
            names.update({h + "ln_1.weight": [C], h + "ln_1.bias": [C], h + "ln_2.weight": [C], h + "ln_2.bias": [C],
                          h + "attn.c_attn.weight": [C, 3 * C], h + "attn.c_attn.bias": [3 * C],
                          h + "attn.c_proj.weight": [C, C], h + "attn.c_proj.bias": [C]})
            if moe.is_moe_layer(i):
                names[h + "mlp.router.weight"] = [E, C]
                for e in range(E):
                    x = f"{h}mlp.experts.{e}."
                    names.update({x + "c_fc.weight": [C, 4 * C], x + "c_fc.bias": [4 * C],
                                  x + "c_proj.weight": [4 * C, C], x + "c_proj.bias": [C]})
            else:
                names.update({h + "mlp.c_fc.weight": [C, 4 * C], h + "mlp.c_fc.bias": [4 * C],
                              h + "mlp.c_proj.weight": [4 * C, C], h + "mlp.c_proj.bias": [C]})
        return names
    C, V, L, Fi = LLAMA_TINY["hidden_size"], LLAMA_TINY["vocab_size"], LLAMA_TINY["num_layers"], \
        LLAMA_TINY["intermediate_size"]
    D = C // LLAMA_TINY["num_heads"]
    KV = LLAMA_TINY["num_kv_heads"]
    names.update({"model.embed_tokens.weight": [V, C], "model.norm.weight": [C], "lm_head.weight": [V, C]})
    for i in range(L):
        h = f"model.layers.{i}."
        names.update({h + "input_layernorm.weight": [C], h + "post_attention_layernorm.weight": [C],
                      h + "self_attn.q_proj.weight": [C, C], h + "self_attn.k_proj.weight": [KV * D, C],
                      h + "self_attn.v_proj.weight": [KV * D, C], h + "self_attn.o_proj.weight": [C, C]})
        if moe.is_moe_layer(i):
            names[h + "block_sparse_moe.gate.weight"] = [E, C]
            for e in range(E):
                x = f"{h}block_sparse_moe.experts.{e}."
                names.update({x + "w1.weight": [Fi, C], x + "w3.weight": [Fi, C], x + "w2.weight": [C, Fi]})
        else:
            names.update({h + "mlp.gate_proj.weight": [Fi, C], h + "mlp.up_proj.weight": [Fi, C],
                          h + "mlp.down_proj.weight": [C, Fi]})
    return names


def routing_margins(stats, moe, T):
    """(min top-k logit gap, min relative prob gap at a "probs" capacity boundary (inf if none)) of one forward."""
    k, E = moe.top_k, moe.num_experts
    logit_gap, prob_gap = float("inf"), float("inf")
    for s in stats:
        lg = torch.sort(s["logits"].detach().double(), dim=-1, descending=True).values
        if k < E:
            logit_gap = min(logit_gap, (lg[:, k - 1] - lg[:, k]).min().item())
        if moe.capacity_factor > 0 and moe.token_drop_policy == "probs":
            cap = moe.capacity(T)
            p, ex = s["probs"].detach().double(), s["experts"]
            B = p.shape[0] // T
            for b in range(B):
                for e in range(E):
                    rows = torch.nonzero((ex[b * T:(b + 1) * T] == e).any(-1), as_tuple=True)[0]
                    if rows.numel() > cap:
                        v = torch.sort(p[b * T + rows, e], descending=True).values
                        prob_gap = min(prob_gap, ((v[cap - 1] - v[cap]) / v[cap - 1]).item())
    return logit_gap, prob_gap


def f64_grad_error(model, moe, inputs, targets):
    """Max |grad_f32 - grad_f64| / max|grad_f64| over the parameters at the current weights (diagnostic)."""
    m64 = copy.deepcopy(model).double()
    _, ce64, st64 = m64(inputs, targets)
    obj64 = tm.objective(ce64, st64, moe)
    obj64.backward()
    worst = 0.0
    for p, p64 in zip(model.parameters(), m64.parameters()):
        worst = max(worst, ((p.grad.double() - p64.grad).abs().max() / p64.grad.abs().max()).item())
    return obj64.item(), worst


def train_case(kind, moe, seed, max_norm, verbose=True):
    """The golden run: initial forward/backward, then 10 AdamW steps on the objective. Returns what the
    file stores (out), the per-step figures and the routing margins."""
    hp = dict(HP, max_norm=max_norm)
    gen = torch.Generator().manual_seed(seed)
    model = build(kind, moe, gen)
    B, T = hp["B"], hp["T"]
    V = GPT2_TINY["vocab_size"] if kind == "gpt2" else LLAMA_TINY["vocab_size"]
    tokens = make_tokens(gen, B, T, V)
    inputs, targets = tokens[:, :T], tokens[:, 1:]

    sd = dict(model.named_parameters())
    assert {n: list(p.shape) for n, p in sd.items()} == expected_names(kind, moe), \
        "parameter names/shapes differ from the brief's table"

    out = {f"weights.{n}": p.detach().clone() for n, p in model.named_parameters()}
    out["tokens"] = tokens.to(torch.int32)

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": hp["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=hp["learning_rate"], betas=(hp["beta1"], hp["beta2"]), eps=hp["adam_eps"],
                            foreach=False)
    params = list(model.parameters())

    run = dict(model=model, out=out, hp=hp, V=V, lrs=[], losses=[], objs=[], norms=[], auxs=[], zs=[], drops=[],
               counts=[], min_logit_gap=float("inf"), min_prob_gap=float("inf"), moe_layers=None, silent=[])
    for s in range(1, hp["total_steps"] + 1):
        opt.zero_grad(set_to_none=True)
        logits, ce, stats = model(inputs, targets)
        obj = tm.objective(ce, stats, moe)
        obj.backward()
        lgap, pgap = routing_margins(stats, moe, T)
        run["min_logit_gap"] = min(run["min_logit_gap"], lgap)
        run["min_prob_gap"] = min(run["min_prob_gap"], pgap)
        if run["moe_layers"] is None:
            run["moe_layers"] = [st["layer"] for st in stats]
        if s == 1:
            out["logits"] = logits.detach().reshape(B * T, V).clone()
            out["loss"] = ce.detach().reshape(1).clone()
            out["objective"] = obj.detach().reshape(1).clone()
            for st in stats:
                key = f"moe.layer{st['layer']}."
                out[key + "aux"] = st["aux"].detach().reshape(1).float()
                out[key + "aux_per_sequence"] = st["aux_per_sequence"].detach().float()
                out[key + "z"] = st["z"].detach().reshape(1).float()
                out[key + "tokens_per_expert"] = st["tokens_per_expert"].to(torch.int32)
                out[key + "dropped"] = torch.tensor([st["dropped"]], dtype=torch.int32)
                out[key + "kept"] = st["kept"].to(torch.int32)
                out[key + "experts"] = st["experts"].to(torch.int32)
                out[key + "gate_weights"] = st["weights"].detach().float()
                out[key + "probs"] = st["probs"].detach().float()
                if moe.norm_topk_prob:
                    assert torch.allclose(st["weights"].sum(-1), torch.ones(B * T), atol=1e-6)
            for n, p in model.named_parameters():
                if p.grad is None or not (p.grad != 0).any():
                    run["silent"].append(n)     # no gradient reaches it (an expert without kept tokens)
                    p.grad = torch.zeros_like(p)
                out[f"grads.{n}"] = p.grad.detach().clone()
            if verbose:
                obj64, gerr = f64_grad_error(model, moe, inputs, targets)
                print(f"  float64 cross-check at init: objective64 {obj64:.9f} (f32 {obj.item():.9f}), "
                      f"max grad err / max|grad| = {gerr:.2e}")
        norm = clip_grad_norm_exact(params, hp["max_norm"])
        lr = lr_at(s, hp)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        run["lrs"].append(lr)
        run["losses"].append(ce.item())
        run["objs"].append(obj.item())
        run["norms"].append(norm.item())
        run["auxs"].append([st["aux"].item() for st in stats])
        run["zs"].append([st["z"].item() for st in stats])
        run["drops"].append([st["dropped"] for st in stats])
        run["counts"].append([st["tokens_per_expert"].tolist() for st in stats])
        if verbose:
            print(f"  step {s:2d}  lr {lr:.6e}  ce {ce.item():.6f}  objective {obj.item():.6f}  "
                  f"grad_norm {norm.item():.6f}  dropped {run['drops'][-1]}  tokens/expert {run['counts'][-1]}  "
                  f"{'CLIPPED' if norm.item() > hp['max_norm'] else ''}")
    return run


def problems(run, moe):
    """What makes a run unfit for a golden file (empty: fit)."""
    bad = []
    if run["min_logit_gap"] < MIN_LOGIT_GAP:
        bad.append(f"top-k logit gap {run['min_logit_gap']:.2e} < {MIN_LOGIT_GAP}")
    if run["min_prob_gap"] < MIN_PROB_GAP:
        bad.append(f"probs capacity-boundary gap {run['min_prob_gap']:.2e} < {MIN_PROB_GAP}")
    if run["silent"]:
        bad.append(f"no gradient reaches {run['silent']}")
    norms, max_norm = run["norms"], run["hp"]["max_norm"]
    n_clipped = sum(n > max_norm for n in norms)
    if not 0 < n_clipped < len(norms):
        bad.append(f"max_norm {max_norm} clips {n_clipped} of {len(norms)} steps (want some but not all)")
    if not all(abs(n / max_norm - 1) > 1e-3 for n in norms):
        bad.append("a norm is within 1e-3 of max_norm")
    drops = run["drops"]
    if moe.capacity_factor > 0:
        if not (all(d > 0 for d in drops[0]) and all(d > 0 for d in drops[-1])):
            bad.append(f"capacity should drop in every MoE layer at the first and last step: {drops[0]}, {drops[-1]}")
    elif any(d for row in drops for d in row):
        bad.append("dropless dropped")
    return bad


def make_case_golden(path, name):
    kind, moe, seed, max_norm = CASES[name]
    run = train_case(kind, moe, seed, max_norm)
    out, hp, V, T, B = run["out"], run["hp"], run["V"], HP["T"], HP["B"]
    min_logit_gap, min_prob_gap, moe_layers = run["min_logit_gap"], run["min_prob_gap"], run["moe_layers"]
    drops = run["drops"]
    print(f"  routing margins over the 10 steps: top-k logit gap {min_logit_gap:.3e}, "
          f"probs capacity-boundary gap {min_prob_gap:.3e}")
    bad = problems(run, moe)
    assert not bad, f"{name}: " + "; ".join(bad)
    n_clipped = sum(n > max_norm for n in run["norms"])
    if moe.capacity_factor > 0:
        print(f"  dropped assignments per MoE layer {moe_layers}: first step {drops[0]}, last step {drops[-1]} "
              f"(of {B * T * moe.top_k}; capacity {moe.capacity(T)} per sequence per expert)")
    lrs, losses, objs, norms = run["lrs"], run["losses"], run["objs"], run["norms"]
    auxs, zs, counts, model = run["auxs"], run["zs"], run["counts"], run["model"]

    out["train.lr"] = torch.tensor(lrs, dtype=torch.float32)
    out["train.losses"] = torch.tensor(losses, dtype=torch.float32)
    out["train.objectives"] = torch.tensor(objs, dtype=torch.float32)
    out["train.grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    out["train.aux"] = torch.tensor(auxs, dtype=torch.float32)
    out["train.z"] = torch.tensor(zs, dtype=torch.float32)
    out["train.dropped"] = torch.tensor(drops, dtype=torch.int32)
    out["train.tokens_per_expert"] = torch.tensor(counts, dtype=torch.int32)
    finals = final_names(kind, moe)
    sd = dict(model.named_parameters())
    for n in finals:
        out[f"train.final.{n}"] = sd[n].detach().clone()

    meta = {k: str(v) for k, v in (GPT2_TINY if kind == "gpt2" else LLAMA_TINY).items()}
    meta.update({k: str(v) for k, v in hp.items()})
    meta.update(moe_metadata(moe, moe_layers, T))
    if kind == "gpt2":
        meta.update({
            "arch": "GPT2LMHeadModel",
            "model_type": "gpt2",
            "loss": "mean cross-entropy over all B*T positions; logits = ln_f(x) @ wte^T (tied)",
            "semantics": "make_golden.py's GPT-2 (Conv1D y = x W + b, gelu_new, learned positions, LayerNorm, "
                         "pre-norm residual blocks, tied head) with MoE MLPs (moe_semantics)",
            "weight_layout": "HF Conv1D: weight [in, out], y = x @ W + b; router [E, C], logits = x @ router^T",
            "init": INIT_GPT2,
            "weight_decay_applies_to": "2-D tensors only (wte, wpe, c_attn/c_proj/c_fc weights, router and expert "
                                       "weights); 0 for biases and LN",
        })
    else:
        meta.update({
            "arch": "MixtralForCausalLM",
            "model_type": "mixtral",
            "tie_word_embeddings": "False",
            "hidden_act": "silu",
            "head_dim": str(LLAMA_TINY["hidden_size"] // LLAMA_TINY["num_heads"]),
            "loss": "mean cross-entropy over all B*T positions; logits = norm(x) @ lm_head.weight^T",
            "semantics": "tools/torch_llama.py's Llama (HF modeling_llama.py: RMSNorm, RoPE, GQA, eager causal "
                         "attention, untied head) with MixtralSparseMoeBlock in place of the MLP (moe_semantics); "
                         "expert = w2(silu(w1 x) * w3 x)",
            "weight_layout": "HF names; nn.Linear weights [out, in], y = x @ W^T; gate [E, C]",
            "init": INIT_MIXTRAL,
            "weight_decay_applies_to": "2-D tensors only (embed_tokens, lm_head, *_proj, gate and expert weights); "
                                       "0 for the RMSNorm weights",
        })
    meta.update({
        "seed": str(seed),
        "format": "gridformer golden v1",
        "generator": "tools/make_moe_golden.py (model: tools/torch_moe.py)",
        "torch_version": torch.__version__,
        "compute_dtype": "float32",
        "inputs": "tokens[:, :T]",
        "targets": "tokens[:, 1:]",
        "tokens": f"int32 ids in [0, {V}); 0 and {V - 1} appear as inputs and as targets",
        "logits_layout": "[B*T, V], row b*T + t",
        "optimizer": "torch.optim.AdamW (torch 1.13, foreach=False): p *= 1 - lr*wd; m = b1*m + (1-b1)*g; "
                     "v = b2*v + (1-b2)*g*g; p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)",
        "grad_clip": "as torch.nn.utils.clip_grad_norm_ on the objective's gradients: norm = global L2, accumulated "
                     "in float64; g *= min(1, max_norm / (norm + 1e-6)) (applied always)",
        "lr_formula": "s<=warmup: lr*s/warmup; else p=(s-warmup)/(total-warmup), "
                      "lr_end + 0.5*(lr-lr_end)*(1+cos(pi*p))",
        "train_steps_description": "train.lr[s-1] = lr at step s; train.losses[s-1] = mean CE before update s "
                                   "(losses[0] == loss); train.objectives[s-1] = objective before update s; "
                                   "train.grad_norms = pre-clip norm of the objective's gradient; train.aux/z/dropped/"
                                   "tokens_per_expert [step, MoE layer (moe_layers order)(, expert)] of the forward "
                                   "before update s; train.final.* = weights after all steps",
        "train_final": ",".join(finals),
        "num_clipped_steps": str(n_clipped),
        "routing_min_topk_logit_gap": f"{min_logit_gap:.6e}",
        "routing_min_probs_boundary_gap": f"{min_prob_gap:.6e}" if min_prob_gap != float("inf") else "none",
    })
    write_safetensors(path, out, meta)


MOE_SEMANTICS = (
    "x [N, C] = post-attention-norm hidden, rows (b, t); logits = x . Wr^T (fp32); p = softmax(logits) (fp32); "
    "top-k = stable descending sort of p (ties to the lower expert index); w[t,j] = p[t,e_j] / sum_j' p[t,e_j'] "
    "if norm_topk_prob else p[t,e_j]; capacity (cf > 0): cap = ceil(cf*T*k/E) per sequence per expert, "
    "assignments to e within a sequence ordered by token_drop_policy (position: t ascending; probs: p[t,e] "
    "descending, ties t ascending), the first cap kept, the rest contribute nothing, kept weights not "
    "renormalised; y[t] = sum over kept j of w[t,j] * expert_{e_j}(x[t]); aux_s = E * sum_e f_e * P_e with "
    "f_e = assignments of sequence s to e before capacity / (T*k) (constant), P_e = mean_t p[t,e]; "
    "z = mean over tokens of logsumexp(logits)^2; objective = mean CE + aux_loss_factor * sum_layers mean_s aux_s "
    "+ z_loss_factor * sum_layers z")


def moe_metadata(moe, moe_layers, T):
    return {
        "expert_num": str(moe.num_experts),
        "num_experts_chosen": str(moe.top_k),
        "capacity_factor": str(float(moe.capacity_factor)),
        "aux_loss_factor": str(moe.aux_loss_factor),
        "z_loss_factor": str(moe.z_loss_factor),
        "norm_topk_prob": str(moe.norm_topk_prob),
        "token_drop_policy": moe.token_drop_policy,
        "moe_layer_freq": str(moe.moe_layer_freq),
        "moe_layers": ",".join(str(i) for i in moe_layers),
        "capacity": str(moe.capacity(T)) if moe.capacity_factor > 0 else "dropless",
        "moe_semantics": MOE_SEMANTICS,
        "moe_stats": "moe.layer{i}.*: of the first forward; aux = mean over sequences of aux_s (unweighted), "
                     "z = mean over tokens of lse^2 (unweighted), tokens_per_expert = (token, slot) assignments "
                     "per expert before capacity over the batch, dropped = assignments capacity dropped, "
                     "kept/experts/gate_weights [N, k] with slot j = the j-th largest p, probs [N, E]",
    }


def final_names(kind, moe):
    """Spot checks after the 10 steps: every router, one expert's every tensor per MoE layer, a dense layer's
    MLP when there is one, an attention weight, the embedding and the final norm."""
    if kind == "gpt2":
        names = ["wte.weight", "ln_f.weight", "h.1.attn.c_attn.weight"]
        for i in range(GPT2_TINY["n_layer"]):
            if moe.is_moe_layer(i):
                e = 3 - i
                names += [f"h.{i}.mlp.router.weight"] + [f"h.{i}.mlp.experts.{e}.{t}" for t in
                                                          ("c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias")]
            else:
                names += [f"h.{i}.mlp.c_fc.weight"]
        return names
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
             "model.layers.0.self_attn.k_proj.weight"]
    for i in range(LLAMA_TINY["num_layers"]):
        if moe.is_moe_layer(i):
            e = 3 - i
            names += [f"model.layers.{i}.block_sparse_moe.gate.weight"] + \
                [f"model.layers.{i}.block_sparse_moe.experts.{e}.{w}.weight" for w in ("w1", "w2", "w3")]
        else:
            names += [f"model.layers.{i}.mlp.gate_proj.weight"]
    return names


# ----------------------------------------------------------------------------
# the reference checks itself


def check_layer_against_naive(gen):
    """moe_forward vs moe_forward_naive (float64): outputs, aux, z, counts, dropped, kept, and gradients."""
    C, B, T, E = 16, 2, 12, 4
    settings = [
        tm.MoEConfig(4, 2, 0.0, "position", False),
        tm.MoEConfig(4, 2, 0.0, "position", True),
        tm.MoEConfig(4, 2, 1.0, "position", False),
        tm.MoEConfig(4, 2, 1.0, "probs", True),
        tm.MoEConfig(4, 1, 1.5, "probs", False),
        tm.MoEConfig(4, 3, 0.5, "position", True),
    ]
    n_checked = n_dropped = 0
    for kind in ("gpt2", "mixtral"):
        for moe in settings:
            for ties in (False, True):
                if kind == "gpt2":
                    experts = torch.nn.ModuleList([tm.GPT2Expert(dict(n_embd=C, activation="gelu_new"))
                                                   for _ in range(E)]).double()
                else:
                    experts = torch.nn.ModuleList([tm.MixtralExpert(C, 24) for _ in range(E)]).double()
                with torch.no_grad():
                    for p in experts.parameters():
                        p.copy_(0.3 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
                x = torch.randn(B * T, C, generator=gen, dtype=torch.float64)
                Wr = 0.6 * torch.randn(E, C, generator=gen, dtype=torch.float64)
                if ties:
                    Wr[2] = Wr[1]              # experts 1 and 2: equal probabilities for every token
                    x[5] = x[2]                # tokens 2 and 5 (and 14, 17 of sequence 1): equal p[t, e]
                    x[T + 5] = x[T + 2]
                x.requires_grad_(True)
                Wr.requires_grad_(True)
                y, st = tm.moe_forward(x, Wr, experts, moe, B, T)
                yn, auxn, zn, cn, dn, keptn = tm.moe_forward_naive(x, Wr, list(experts), moe, B, T)
                assert torch.allclose(y, yn, rtol=1e-12, atol=1e-13), (kind, moe, ties, (y - yn).abs().max())
                assert abs(st["aux"].item() - auxn.item()) < 1e-12 and abs(st["z"].item() - zn.item()) < 1e-12
                assert st["tokens_per_expert"].tolist() == cn and st["dropped"] == dn
                assert st["kept"].tolist() == keptn, (kind, moe, ties)
                if ties:   # the lower index wins a tie: expert 2 never precedes expert 1
                    ex = st["experts"].tolist()
                    assert all(not (1 in r and 2 in r and r.index(2) < r.index(1)) for r in ex)
                    assert all(not (2 in r and 1 not in r) for r in ex), "expert 2 chosen without its twin 1"
                # gradients of one scalar through both implementations
                R = torch.randn(B * T, C, generator=gen, dtype=torch.float64)
                params = [x, Wr] + list(experts.parameters())
                g1 = torch.autograd.grad((y * R).sum() + 0.7 * st["aux"] + 0.3 * st["z"], params, allow_unused=True)
                g2 = torch.autograd.grad((yn * R).sum() + 0.7 * auxn + 0.3 * zn, params, allow_unused=True)
                for p, a, b in zip(params, g1, g2):   # None: an expert that no kept assignment reaches
                    a = torch.zeros_like(p) if a is None else a
                    b = torch.zeros_like(p) if b is None else b
                    assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), (kind, moe, ties, (a - b).abs().max())
                n_checked += 1
                n_dropped += dn
    assert n_dropped > 0
    print(f"  self-check: moe_forward == the per-token loop in {n_checked} settings (GPT-2 and SwiGLU experts, "
          f"top-1/2/3, dropless / position / probs, exact ties), outputs, aux, z, counts, kept and gradients; "
          f"{n_dropped} drops among them")


def finite_differences(kind, moe, seed, probes, label):
    """Float64 central differences of the whole objective against autograd for the given (name, index), at
    the initial weights and batch of the golden file with this seed."""
    gen = torch.Generator().manual_seed(seed)
    model = build(kind, moe, gen).double()
    B, T = 2, 16
    V = GPT2_TINY["vocab_size"] if kind == "gpt2" else LLAMA_TINY["vocab_size"]
    toks = make_tokens(gen, B, T, V)
    inputs, targets = toks[:, :T], toks[:, 1:]

    def obj_of():
        _, ce, st = model(inputs, targets)
        return tm.objective(ce, st, moe), st

    obj, st0 = obj_of()
    obj.backward()
    lgap, _ = routing_margins(st0, moe, T)
    assert lgap > 1e-3, f"finite differences need routing margins: {lgap}"
    sd = dict(model.named_parameters())
    worst = 0.0
    h = 1e-5
    for name, idx in probes:
        p = sd[name]
        with torch.no_grad():
            old = p[idx].item()
            p[idx] = old + h
            lp, stp = obj_of()
            p[idx] = old - h
            lm, stm = obj_of()
            p[idx] = old
        for a, b in ((stp, st0), (stm, st0)):   # the routing is the same at the three points
            assert all(torch.equal(x["experts"], y["experts"]) and torch.equal(x["kept"], y["kept"])
                       for x, y in zip(a, b))
        assert p.grad is not None, f"{label}: no gradient reaches {name}"
        fd, an = (lp.item() - lm.item()) / (2 * h), p.grad[idx].item()
        err = abs(fd - an) / max(abs(an), 1e-8)
        worst = max(worst, err)
        assert abs(fd - an) <= 1e-8 + 1e-5 * abs(an), f"finite differences {label}: {name}{idx}: fd {fd} vs {an}"
        assert an != 0.0, f"{name}{idx}: zero gradient probes nothing"
    print(f"  self-check: finite differences (float64) of the objective, {label}: {len(probes)} probes, "
          f"worst rel err {worst:.1e}")


def self_checks():
    gen = torch.Generator().manual_seed(77)
    check_layer_against_naive(gen)

    gpt2_probes = [("h.0.mlp.router.weight", (1, 5)), ("h.0.mlp.router.weight", (3, 40)),
                   ("h.1.mlp.router.weight", (0, 63)), ("h.1.mlp.router.weight", (2, 17)),
                   ("h.0.mlp.experts.1.c_fc.weight", (3, 7)), ("h.0.mlp.experts.2.c_proj.bias", (9,)),
                   ("h.1.mlp.experts.0.c_proj.weight", (100, 20)), ("h.1.mlp.experts.3.c_fc.bias", (200,)),
                   ("h.0.ln_2.weight", (11,)), ("h.1.attn.c_attn.weight", (30, 150)), ("wte.weight", (5, 33))]
    gpt2_cap_probes = [p for p in gpt2_probes if not p[0].startswith("h.1.mlp")] + \
        [("h.1.mlp.c_fc.weight", (4, 100)), ("h.1.mlp.c_proj.bias", (3,))]
    mix_probes = [("model.layers.0.block_sparse_moe.gate.weight", (1, 5)),
                  ("model.layers.0.block_sparse_moe.gate.weight", (3, 40)),
                  ("model.layers.1.block_sparse_moe.gate.weight", (2, 63)),
                  ("model.layers.0.block_sparse_moe.experts.2.w1.weight", (50, 3)),
                  ("model.layers.1.block_sparse_moe.experts.1.w2.weight", (12, 90)),
                  ("model.layers.1.block_sparse_moe.experts.3.w3.weight", (7, 60)),
                  ("model.layers.0.post_attention_layernorm.weight", (19,)),
                  ("model.layers.1.self_attn.q_proj.weight", (8, 9)), ("lm_head.weight", (4, 4))]
    for name, (kind, moe, seed, _) in CASES.items():
        probes = gpt2_cap_probes if name == "gpt2_moe_tiny_cap" else gpt2_probes if kind == "gpt2" else mix_probes
        finite_differences(kind, moe, seed, probes, name)
        # the router terms amplified, so that a wrong aux or z gradient cannot hide under the CE's
        loud = dataclasses.replace(moe, aux_loss_factor=0.5, z_loss_factor=0.1)
        finite_differences(kind, loud, seed, [p for p in probes if "router" in p[0] or "gate.weight" in p[0]],
                           name + " with aux 0.5, z 0.1")

    # capacity_factor huge == dropless; norm_topk_prob weights sum to 1.
    for name, (kind, moe, _, _) in CASES.items():
        if moe.capacity_factor <= 0:
            continue
        seed = int(torch.randint(0, 2**31, (1,), generator=gen))
        a = build(kind, moe, torch.Generator().manual_seed(seed))
        huge = dataclasses.replace(moe, capacity_factor=1e6)
        free = dataclasses.replace(moe, capacity_factor=0.0)
        V = GPT2_TINY["vocab_size"] if kind == "gpt2" else LLAMA_TINY["vocab_size"]
        toks = make_tokens(gen, 2, 16, V)
        results = []
        for m in (huge, free):
            model = build(kind, m)
            model.load_state_dict(a.state_dict())
            _, ce, st = model(toks[:, :16], toks[:, 1:])
            obj = tm.objective(ce, st, m)
            obj.backward()
            assert all(s["dropped"] == 0 for s in st)
            results.append((obj.item(), [p.grad.clone() for p in model.parameters()]))
        assert results[0][0] == results[1][0] and all(torch.equal(x, y) for x, y in zip(results[0][1], results[1][1]))
        _, _, st = a(toks[:, :16], toks[:, 1:])
        assert sum(s["dropped"] for s in st) > 0, "capacity 1.0 should drop here"
    print("  self-check: capacity_factor 1e6 gives the dropless objective and gradients bit for bit")
    x = torch.randn(64, 8, generator=gen)
    experts = torch.nn.ModuleList([tm.MixtralExpert(8, 4) for _ in range(4)])
    for norm in (True, False):
        moe = tm.MoEConfig(4, 2, 0.0, "position", norm)
        _, st = tm.moe_forward(x, torch.randn(4, 8, generator=gen), experts, moe, 4, 16)
        if norm:
            assert torch.allclose(st["weights"].sum(-1), torch.ones(64), atol=1e-6)
        else:
            assert (st["weights"].sum(-1) < 1).all()
    print("  self-check: norm_topk_prob weights sum to 1 (and without it to less than 1)")
    for name, (kind, moe, _, _) in CASES.items():
        m = build(kind, moe)
        assert {n: list(p.shape) for n, p in m.named_parameters()} == expected_names(kind, moe), name
    print("  self-check: parameter names and shapes are the brief's table")
    check_one_expert_is_the_dense_model(gen)


def check_one_expert_is_the_dense_model(gen):
    """With one expert (top-1, p = 1) the MoE models are the dense references of the existing golden files:
    make_golden.py's GPT2 and torch_llama.py's LlamaForCausalLM, the expert's weights as the MLP's."""
    import make_golden
    one = tm.MoEConfig(num_experts=1, top_k=1, capacity_factor=0.0, norm_topk_prob=False)
    toks = make_tokens(gen, 2, 16, 96)
    for kind in ("gpt2", "mixtral"):
        moe_model = build(kind, one, gen).double()
        if kind == "gpt2":
            dense = make_golden.GPT2(GPT2_TINY).double()
            rename = {".mlp.c_fc.": ".mlp.experts.0.c_fc.", ".mlp.c_proj.": ".mlp.experts.0.c_proj."}
        else:
            dense = tl.LlamaForCausalLM(tl.LlamaConfig(**LLAMA_TINY)).double()
            x = ".block_sparse_moe.experts.0."
            rename = {".mlp.gate_proj.": x + "w1.", ".mlp.up_proj.": x + "w3.", ".mlp.down_proj.": x + "w2."}
        src = dict(moe_model.named_parameters())
        with torch.no_grad():
            for n, p in dense.named_parameters():
                for a, b in rename.items():
                    n = n.replace(a, b)
                p.copy_(src[n])
        lm, _, st = moe_model(toks[:, :16], toks[:, 1:])
        ld = dense(toks[:, :16], toks[:, 1:])[0]
        assert torch.allclose(lm, ld, rtol=0, atol=1e-12), (kind, (lm - ld).abs().max())
        assert all(abs(s["aux"].item() - 1.0) < 1e-12 for s in st)
    print("  self-check: with one expert, GPT-2 MoE == make_golden.py's GPT2 and Mixtral == torch_llama's Llama")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
    ap.add_argument("--skip-checks", action="store_true", help="write the files without the self-checks")
    ap.add_argument("--only", default=None, help="one case name")
    ap.add_argument("--search", nargs=3, metavar=("CASE", "FIRST_SEED", "COUNT"),
                    help="print which seeds make CASE fit for a golden file (how the seeds were picked)")
    args = ap.parse_args()
    if args.search:
        name, first, count = args.search[0], int(args.search[1]), int(args.search[2])
        kind, moe, _, max_norm = CASES[name]
        for seed in range(first, first + count):
            run = train_case(kind, moe, seed, max_norm, verbose=False)
            bad = problems(run, moe)
            print(f"{name} seed {seed}: {'fit' if not bad else '; '.join(bad)}  (logit gap {run['min_logit_gap']:.2e}, "
                  f"drops first/last {run['drops'][0]}/{run['drops'][-1]}, norms "
                  f"{' '.join(f'{n:.3f}' for n in run['norms'])})", flush=True)
        return
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    if not args.skip_checks:
        print("self checks")
        self_checks()
    for name in CASES:
        if args.only and name != args.only:
            continue
        print(name)
        make_case_golden(os.path.join(out, f"{name}.safetensors"), name)


if __name__ == "__main__":
    main()
