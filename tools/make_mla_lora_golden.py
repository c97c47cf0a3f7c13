#!/usr/bin/python3
"""LoRA golden files of DeepSeek's latent attention: PEFT's LoRA (tools/torch_peft_lora.py, the transcription of PEFT
v0.20.0 that tools/make_lora_golden.py uses) on the multi-head latent attention of tests/golden/families/
deepseek_v2_lite.safetensors and deepseek_v3.safetensors (tools/torch_hf_deepseek.py, Hugging Face's
DeepseekV2Attention names), the routers, experts and the rest of the base frozen.

Run with Debian's Python, from the repository root:

    /usr/bin/python3 tools/make_mla_lora_golden.py [--out tests/golden/lora] [--only VARIANT]

Writes tests/golden/lora/VARIANT_lora.safetensors, r 4, lora_alpha 8 (scaling 2), lora_dropout 0, target_modules
PEFT's list, which wraps each layer's nn.Linear of that name:
  deepseek_v2_lite: [q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj]  (q_lora_rank null: q_proj)
  deepseek_v3:      [q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj]
Keys as tools/make_lora_golden.py's: weights.<HF name> and tokens copied from the family golden (buffers.* too, V3's
initial e_score_correction_bias), adapter.<module>.lora_A / lora_B.weight (A kaiming_uniform_(a=sqrt(5)) from
torch.Generator().manual_seed(1234) in named_modules() order, B zeros), train.lr, train.losses (the family golden's
objective before update s), train.grad_norms (pre-clip, over the adapters), train.final.<adapter>, logits.final (the
adapter model after the 10 steps), merged.<HF name> (W + (B @ A) * scaling). The optimizer, schedule and objective
are the family golden's (its metadata). V3's e_score_correction_bias stays the base's: a buffer of Hugging Face's
model that no step of a PEFT run updates (Megatron's bias update, which the family golden runs, is pre-training's
rule; under LoRA the router and its bias are frozen with the rest of the base here too).
max_norm: the middle of the widest gap between the unclipped run's sorted pre-clip norms, third to eighth
(tools/make_moe_lora_golden.py's rule), so that clipping acts on some steps and not all; every norm is asserted more
than 1e-3 relative away from it. Routing: tools/make_deepseek_golden.py's margins asserted at every step.
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
from make_golden import golden_adamw, golden_step, write_safetensors  # noqa: E402
from make_deepseek_golden import check_margins  # noqa: E402
from deepseek_golden_configs import EXPERT_BIAS  # noqa: E402
import torch_hf_deepseek as ds  # noqa: E402
import torch_peft_lora as pl  # noqa: E402

torch.set_num_threads(2)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
R, ALPHA = 4, 8
# The adapters' A generator's seed (torch.Generator().manual_seed): 1234, or where its run routes within a margin of
# a tie, the next that keeps every margin (--seed tries another).
ADAPTER_SEED = {"deepseek_v2_lite": 1234, "deepseek_v3": 1234}
TARGETS = {"deepseek_v2_lite": ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"],
           "deepseek_v3": ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]}
HP_KEYS = ("learning_rate", "lr_end", "warmup_steps", "total_steps", "beta1", "beta2", "adam_eps", "weight_decay",
           "lr_schedule", "B", "T")


def read_family(variant):
    tensors, _, meta, problems = pl.read_safetensors(os.path.join(ROOT, "tests", "golden", "families",
                                                                  variant + ".safetensors"))
    assert not problems, problems
    hp = {k: (meta[k] if k == "lr_schedule" else (int(meta[k]) if k in ("warmup_steps", "total_steps", "B", "T")
                                                   else float(meta[k]))) for k in HP_KEYS}
    return tensors, meta, hp


def run(variant, tensors, meta, hp, max_norm):
    hp = dict(hp, max_norm=max_norm)
    model = ds.DeepseekForCausalLM(json.loads(meta["hf_config"]), enable_expert_bias=EXPERT_BIAS[variant])
    state = {k[len("weights."):]: v for k, v in tensors.items() if k.startswith("weights.")}
    state.update({k[len("buffers."):]: v for k, v in tensors.items() if k.startswith("buffers.")})
    model.load_state_dict(state, strict=True)
    names = pl.apply_lora(model, TARGETS[variant], R, ALPHA, False, 0.0, torch.Generator().manual_seed(ADAPTER_SEED[variant]))
    params = pl.trainable_parameters(model)
    assert len(params) == 2 * len(names) and all(p.dim() == 2 for p in params)
    initial = pl.adapter_state(model)
    opt, params = golden_adamw(pl_params(params), hp)
    B, T = hp["B"], hp["T"]
    tokens = tensors["tokens"]
    inputs, targets = tokens[:, :T].long(), tokens[:, 1:].long()
    V = model.cfg.vocab_size
    lrs, losses, norms = [], [], []
    for s in range(1, hp["total_steps"] + 1):
        opt.zero_grad(set_to_none=True)
        logits, loss = model(inputs, targets)
        check_margins(model, f"{variant} step {s}")
        if s == 1:  # B = 0: the base model's forward, as the family golden recorded it
            err = (logits.reshape(B * T, V) - tensors["logits"]).abs().max().item()
            assert err <= 1e-6 and abs(loss.item() - tensors["loss"].item()) <= 1e-6, (err, loss.item())
        loss.backward()
        assert all(p.grad is None for n, p in model.named_parameters() if ".lora_" not in n)
        norm, lr = golden_step(opt, params, s, hp)   # (V3's expert bias stays the base's: see the docstring)
        lrs.append(lr)
        losses.append(loss.item())
        norms.append(norm.item())
    with torch.no_grad():
        logits_final = model(inputs)[0].reshape(B * T, V).clone()
    return dict(names=names, initial=initial, final=pl.adapter_state(model), lrs=lrs, losses=losses, norms=norms,
                logits_final=logits_final, weights=state, hp=hp, model=model)


class pl_params:
    """What golden_adamw reads of a model: .parameters() (the adapters only, named_modules order, A before B)."""

    def __init__(self, params):
        self._params = list(params)

    def parameters(self):
        return iter(self._params)


def make(variant, outdir):
    tensors, meta, hp = read_family(variant)
    free = run(variant, tensors, meta, hp, math.inf)
    ranked = sorted(free["norms"])
    i = max(range(2, 7), key=lambda j: ranked[j + 1] - ranked[j])
    max_norm = float(f"{(ranked[i] + ranked[i + 1]) / 2:.4g}")
    r = run(variant, tensors, meta, hp, max_norm)
    clipped = [s + 1 for s, n in enumerate(r["norms"]) if n > max_norm]
    assert 0 < len(clipped) < len(r["norms"]), clipped
    assert all(abs(n / max_norm - 1) > 1e-3 for n in r["norms"]), "a norm is too close to max_norm"
    for s, (lr, loss, n) in enumerate(zip(r["lrs"], r["losses"], r["norms"]), 1):
        print(f"  step {s:2d}  lr {lr:.6e}  loss {loss:.6f}  grad_norm {n:.6f}{'  CLIPPED' if n > max_norm else ''}")
    scaling = pl.lora_scaling(R, ALPHA, False)
    merged = pl.merge(r["weights"], r["final"], scaling)
    assert sorted(merged) == sorted(n + ".weight" for n in r["names"])
    plain = ds.DeepseekForCausalLM(json.loads(meta["hf_config"]), enable_expert_bias=EXPERT_BIAS[variant])
    plain.load_state_dict(dict(r["weights"], **merged), strict=True)
    B, T, V = hp["B"], hp["T"], plain.cfg.vocab_size
    with torch.no_grad():
        merr = (plain(tensors["tokens"][:, :T].long())[0].reshape(B * T, V) - r["logits_final"]).abs().max().item()
    assert merr <= 1e-5, merr
    print(f"{variant}: {len(r['names'])} modules, max_norm {max_norm} clips {clipped}; merged model logits vs the "
          f"adapter model's: max diff {merr:.1e}")
    out = pl.golden_tensors(tensors, r, merged, copied=("weights.", "buffers."))
    cfg = pl.adapter_config(R, ALPHA, TARGETS[variant], False, 0.0, f"tests/golden/families/{variant}")
    skip = ("generator", "train_steps_description", "grad_clip", "seed", "max_norm")
    m = {k: v for k, v in meta.items() if k not in skip and not k.startswith("train")}
    m.update({
        "max_norm": str(max_norm),
        "lora_config": pl.config_text(cfg),
        "scaling": repr(scaling),
        "r": str(R),
        "lora_alpha": str(ALPHA),
        "use_rslora": "False",
        "lora_dropout": "0.0",
        "target_modules": json.dumps(TARGETS[variant]),
        "targeted_modules": ",".join(r["names"]),
        "peft_source": pl.PEFT_SOURCE,
        "format": "gridformer golden v1",
        "generator": "tools/make_mla_lora_golden.py (LoRA: tools/torch_peft_lora.py, model: tools/torch_hf_deepseek.py)",
        "base_golden": f"tests/golden/families/{variant}.safetensors (weights.*, buffers.* and tokens copied as they are)",
        "torch_version": torch.__version__,
        "adapter_seed": str(ADAPTER_SEED[variant]),
        "trainable": f"the A and B of the {len(r['names'])} latent-attention projections only; every base weight frozen",
        "grad_clip": "as torch.nn.utils.clip_grad_norm_ over the adapters' gradients: global L2 in float64; "
                     "g *= min(1, max_norm / (norm + 1e-6))",
        "clipped_steps": ",".join(map(str, clipped)),
    })
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, f"{variant}_lora.safetensors")
    write_safetensors(path, out, m)
    size = os.path.getsize(path)
    assert size < 2_000_000, size
    back, _, _, problems = pl.read_safetensors(path)
    assert not problems and set(back) == set(out) and all(torch.equal(back[k], out[k]) for k in out)
    print(f"wrote {path}: {size} bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "lora"))
    ap.add_argument("--only", choices=sorted(TARGETS))
    ap.add_argument("--seed", type=int, help="the adapters' seed for --only's variant")
    a = ap.parse_args()
    if a.seed is not None:
        ADAPTER_SEED[a.only] = a.seed
    for variant in TARGETS:
        if a.only is None or a.only == variant:
            make(variant, a.out)


if __name__ == "__main__":
    main()
