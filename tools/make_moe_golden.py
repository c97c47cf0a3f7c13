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

This file trains and writes the cases (train_case, problems, make_case_golden, the metadata, --search); the models,
cases and settings are in tools/moe_golden_models.py, the self-checks in tools/moe_golden_checks.py.
"""
import os

# Pin the thread pools before torch is imported, as make_golden.py does.
os.environ["OMP_NUM_THREADS"] = "2"
os.environ["OPENBLAS_NUM_THREADS"] = "2"

import argparse  # noqa: E402
import copy  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import clip_grad_norm_exact, lr_at, write_safetensors  # noqa: E402
import torch_moe as tm  # noqa: E402
# The models, cases and settings, and the self-checks.
from moe_golden_models import (CASES, GPT2_TINY, HP, INIT_GPT2, INIT_MIXTRAL, LLAMA_TINY, MIN_LOGIT_GAP,  # noqa: E402
                               MIN_PROB_GAP, build, expected_names, make_tokens, routing_margins)
from moe_golden_checks import self_checks  # noqa: E402

torch.set_num_threads(2)


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
