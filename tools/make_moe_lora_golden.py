#!/usr/bin/python3
"""The LoRA golden file of a Mixture-of-Experts model: PEFT's LoRA (tools/torch_peft_lora.py, the transcription of
PEFT v0.20.0 that tools/make_lora_golden.py uses) on the attention of tests/golden/mixtral_tiny.safetensors' Mixtral
(tools/torch_moe.py, HF modeling_mixtral.py's names), the router and experts frozen with the rest of the base.

Run with Debian's Python (the pyenv `python3` on PATH has no torch), from the repository root:

    /usr/bin/python3 tools/make_moe_lora_golden.py [--out tests/golden/lora] [--variant attention|experts]

Writes tests/golden/lora/mixtral_lora.safetensors (< 2 MB; --variant saved --seed 1241: mixtral_saved_lora.safetensors (the default seed's run routes within 4.1e-4 of a tie), q_proj and v_proj adapted and modules_to_save [lm_head, embed_tokens], PEFT's trained copies of the untied head and the token embedding): r 4, lora_alpha 8 (scaling 2), target_modules the list
["q_proj", "k_proj", "v_proj", "o_proj"] (PEFT's default for Mixtral is q_proj and v_proj: its
TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING), use_rslora false, lora_dropout 0. --variant experts writes
mixtral_experts_lora.safetensors instead (with --seed 1235: the default seed's adapters put a top-2 routing margin at 6.3e-4, under MIN_LOGIT_GAP): target_modules ["q_proj", "v_proj", "w1", "w2", "w3"], so that PEFT wraps
every expert's three nn.Linear (block_sparse_moe.experts.E.w1 / w2 / w3) beside the attention's q and v; the router
stays frozen. Its keys are
tools/make_lora_golden.py's: weights.<HF name> and tokens copied from mixtral_tiny.safetensors, adapter.<module>.lora_A
/ lora_B.weight (A kaiming_uniform_(a=sqrt(5)) from torch.Generator().manual_seed(1234), B zeros), train.lr,
train.losses (mean cross-entropy before update s), train.objectives, train.grad_norms (pre-clip, of the objective's
gradient over the adapters), train.final.<adapter>, logits.final, merged.<HF name>.

The objective is mixtral_tiny's: cross-entropy + aux_loss_factor x the layers' balancing losses (tools/torch_moe.py's
objective), so the balancing loss's gradient reaches the attention's adapters through the frozen router, as it does
in PEFT over Hugging Face's Mixtral with output_router_logits (the router's logits are a function of the adapted
attention's output). max_norm: the pre-clip norms of an unclipped run, sorted, the middle of the widest gap between
neighbours from the third to the eighth (to four digits), so that clipping acts on some steps and not all; every norm is asserted more than 1e-3
relative away from it. Routing: every step's top-k logit gap at least tools/moe_golden_models.py's MIN_LOGIT_GAP, so
that float reordering cannot change a token's experts.
"""
import os

os.environ["OMP_NUM_THREADS"] = "2"
os.environ["OPENBLAS_NUM_THREADS"] = "2"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import clip_grad_norm_exact, lr_at, write_safetensors  # noqa: E402
import torch_moe as tm  # noqa: E402
import torch_peft_lora as pl  # noqa: E402
from moe_golden_models import CASES, MIN_LOGIT_GAP, build, routing_margins  # noqa: E402

torch.set_num_threads(2)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SOURCE = os.path.join(ROOT, "tests", "golden", "mixtral_tiny.safetensors")
CASE = "mixtral_tiny"
R, ALPHA, ADAPTER_SEED = 4, 8, 1234
VARIANTS = {"attention": (["q_proj", "k_proj", "v_proj", "o_proj"], "mixtral_lora.safetensors", None),
            "experts": (["q_proj", "v_proj", "w1", "w2", "w3"], "mixtral_experts_lora.safetensors", None),
            # PEFT's modules_to_save: the untied head and the token embedding trained whole beside q and v's adapters.
            "saved": (["q_proj", "v_proj"], "mixtral_saved_lora.safetensors", ["lm_head", "embed_tokens"])}
TARGETS, FILE, SAVED = VARIANTS["attention"]
MAX_BYTES = 2_000_000  # the experts variant: 1.6 MB (its merged.* holds the 24 experts' weights)


def read_source():
    tensors, _, meta, problems = pl.read_safetensors(SOURCE)
    assert not problems, problems
    return tensors, meta


def run(tensors, meta, max_norm):
    kind, moe, _, _ = CASES[CASE]
    hp = {k: meta[k] for k in ("learning_rate", "lr_end", "warmup_steps", "total_steps", "beta1", "beta2", "adam_eps",
                                "weight_decay", "lr_schedule", "B", "T")}
    hp = {k: (v if k == "lr_schedule" else (int(v) if k in ("warmup_steps", "total_steps", "B", "T") else float(v)))
          for k, v in hp.items()}
    hp["max_norm"] = max_norm
    model = build(kind, moe, torch.Generator().manual_seed(0))
    weights = {k[len("weights."):]: v for k, v in tensors.items() if k.startswith("weights.")}
    missing, unexpected = model.load_state_dict(weights, strict=True), None
    del missing, unexpected
    gen = torch.Generator().manual_seed(ADAPTER_SEED)
    names = pl.apply_lora(model, TARGETS, R, ALPHA, False, 0.0, gen)
    saved = pl.apply_modules_to_save(model, SAVED) if SAVED else []
    assert len(saved) == len(SAVED or []), saved
    params = pl.trainable_parameters(model)
    assert len(params) == 2 * len(names) + len(saved) and all(p.dim() == 2 for p in params)
    initial = dict(pl.adapter_state(model), **pl.saved_state(model))
    opt = torch.optim.AdamW([dict(params=params, weight_decay=hp["weight_decay"])], lr=hp["learning_rate"],
                            betas=(hp["beta1"], hp["beta2"]), eps=hp["adam_eps"], foreach=False)
    B, T = hp["B"], hp["T"]
    tokens = tensors["tokens"]
    inputs, targets = tokens[:, :T].long(), tokens[:, 1:].long()
    V = int(meta["vocab_size"])
    lrs, losses, objs, norms, gap = [], [], [], [], float("inf")
    for s in range(1, hp["total_steps"] + 1):
        opt.zero_grad(set_to_none=True)
        logits, ce, stats = model(inputs, targets)
        obj = tm.objective(ce, stats, moe)
        if s == 1:  # B = 0: the base model's forward, as mixtral_tiny recorded it
            err = (logits.reshape(B * T, V) - tensors["logits"]).abs().max().item()
            assert err <= 1e-6 and abs(obj.item() - tensors["objective"].item()) <= 1e-6, (err, obj.item())
        obj.backward()
        assert all(p.grad is not None for p in params)
        assert all(p.grad is None for n, p in model.named_parameters() if ".lora_" not in n and ".modules_to_save." not in n)
        gap = min(gap, routing_margins(stats, moe, T)[0])
        norm = clip_grad_norm_exact(params, max_norm)
        lr = lr_at(s, hp)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        lrs.append(lr)
        losses.append(ce.item())
        objs.append(obj.item())
        norms.append(norm.item())
    with torch.no_grad():
        logits_final = model(inputs)[0].reshape(B * T, V).clone()
    return dict(model=model, names=names, saved=saved, initial=initial,
                final=dict(pl.adapter_state(model), **pl.saved_state(model)), lrs=lrs, losses=losses,
                objs=objs, norms=norms, gap=gap, logits_final=logits_final, weights=weights, hp=hp, moe=moe)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "lora"))
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="attention")
    ap.add_argument("--seed", type=int, default=1234, help="the adapters' A generator's seed (default 1234)")
    a = ap.parse_args()
    global TARGETS, FILE, SAVED, ADAPTER_SEED
    ADAPTER_SEED = a.seed
    TARGETS, FILE, SAVED = VARIANTS[a.variant]
    tensors, meta = read_source()
    free = run(tensors, meta, math.inf)
    ranked = sorted(free["norms"])
    i = max(range(2, 7), key=lambda j: ranked[j + 1] - ranked[j])  # the widest gap in the middle of the norms
    max_norm = float(f"{(ranked[i] + ranked[i + 1]) / 2:.4g}")
    r = run(tensors, meta, max_norm)
    clipped = [s + 1 for s, n in enumerate(r["norms"]) if n > max_norm]
    print(f"pre-clip norms {min(r['norms']):.4f} .. {max(r['norms']):.4f}; max_norm {max_norm} clips steps {clipped}")
    assert 0 < len(clipped) < len(r["norms"])
    assert all(abs(n / max_norm - 1) > 1e-3 for n in r["norms"]), "a norm is too close to max_norm"
    assert r["gap"] >= MIN_LOGIT_GAP, f"routing margin {r['gap']:.3e} under {MIN_LOGIT_GAP}"
    for s, (lr, ce, obj, n) in enumerate(zip(r["lrs"], r["losses"], r["objs"], r["norms"]), 1):
        print(f"  step {s:2d}  lr {lr:.6e}  ce {ce:.6f}  objective {obj:.6f}  grad_norm {n:.6f}")
    scaling = pl.lora_scaling(R, ALPHA, False)
    merged = pl.merge(r["weights"], r["final"], scaling)
    assert sorted(merged) == sorted(n + ".weight" for n in r["names"])
    # PEFT's merge_and_unload puts each saved module's trained copy in the original's place.
    merged.update({f"{n}.weight": r["final"][f"{n}.weight"] for n in r["saved"]})
    kind, moe, _, _ = CASES[CASE]
    plain = build(kind, moe, torch.Generator().manual_seed(0))
    plain.load_state_dict(dict(r["weights"], **merged), strict=True)
    B, T, V = r["hp"]["B"], r["hp"]["T"], int(meta["vocab_size"])
    with torch.no_grad():
        merr = (plain(tensors["tokens"][:, :T].long())[0].reshape(B * T, V) - r["logits_final"]).abs().max().item()
    assert merr <= 1e-5, merr
    print(f"routing margin {r['gap']:.3e}; merged model logits vs the adapter model's: max diff {merr:.1e}")

    out = pl.golden_tensors(tensors, r, merged,
                            after_losses={"train.objectives": torch.tensor(r["objs"], dtype=torch.float32)})
    cfg = pl.adapter_config(R, ALPHA, TARGETS, False, 0.0, "tests/golden/mixtral_tiny")
    cfg["modules_to_save"] = SAVED
    skip = ("generator", "train_steps_description", "grad_clip", "seed")
    m = {k: v for k, v in meta.items() if k not in skip}
    m.update({
        "max_norm": str(max_norm),
        "lora_config": pl.config_text(cfg),
        "scaling": repr(scaling),
        "r": str(R),
        "lora_alpha": str(ALPHA),
        "use_rslora": "False",
        "lora_dropout": "0.0",
        "target_modules": json.dumps(TARGETS),
        "targeted_modules": ",".join(r["names"]),
        "modules_to_save": json.dumps(SAVED),
        "saved_modules": ",".join(r["saved"]),
        "peft_source": pl.PEFT_SOURCE,
        "format": "gridformer golden v1",
        "generator": "tools/make_moe_lora_golden.py (LoRA: tools/torch_peft_lora.py, model: tools/torch_moe.py)",
        "base_golden": "tests/golden/mixtral_tiny.safetensors (weights.* and tokens copied as they are)",
        "torch_version": torch.__version__,
        "trainable": (f"the A and B of the {len(r['names'])} attention projections only; every base weight frozen, "
                      "the router and experts among them") if FILE == "mixtral_lora.safetensors" else
                     (f"the A and B of q_proj and v_proj ({len(r['names'])} modules) and the trained copies of "
                      f"{', '.join(r['saved'])} (PEFT's modules_to_save, initially the base's; adapter.<module>.weight, "
                      "train.final.<module>.weight); every other base weight frozen") if SAVED else
                     (f"the A and B of the {len(r['names'])} targeted projections ({', '.join(TARGETS)}) only; every "
                      "base weight frozen, the router among them"),
        "grad_clip": "as torch.nn.utils.clip_grad_norm_ over the adapters' gradients of the objective: global L2 in "
                     "float64; g *= min(1, max_norm / (norm + 1e-6))",
        "train_steps_description": "train.losses[s-1] = mean CE before update s; train.objectives[s-1] = the objective "
                                   "(CE + aux_loss_factor x the layers' balancing losses) before update s, whose "
                                   "gradient trains the adapters; train.grad_norms its pre-clip norm over the adapters",
        "clipped_steps": ",".join(map(str, clipped)),
        "routing_min_logit_gap": f"{r['gap']:.6e}",
    })
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, FILE)
    write_safetensors(path, out, m)
    size = os.path.getsize(path)
    assert size < MAX_BYTES, size
    back, _, bmeta, problems = pl.read_safetensors(path)
    assert not problems and set(back) == set(out) and all(torch.equal(back[k], out[k]) for k in out)
    print(f"wrote {path}: {size} bytes")


if __name__ == "__main__":
    main()
