#!/usr/bin/python3
"""Golden files for LoRA training of the tiny Llama of tests/golden/families/llama.safetensors, from the plain-torch
transcription of PEFT's LoRA in tools/torch_peft_lora.py (see its docstring for the PEFT files and commits read).

Run with Debian's Python (the pyenv `python3` on PATH has no torch), from the repository root:

    /usr/bin/python3 tools/make_lora_golden.py [--family tests/golden/families/llama.safetensors]
                                               [--out tests/golden/lora] [--no-self-checks]

Writes, each < 1 MB:

  tests/golden/lora/llama_lora.safetensors            r 4, lora_alpha 8 (scaling 2), target_modules the LIST
                                                      ["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj",
                                                      "down_proj"] (14 modules), use_rslora false
  tests/golden/lora/llama_lora_qv_rslora.safetensors  r 4, lora_alpha 8, use_rslora true (scaling 8/sqrt(4) = 4),
                                                      target_modules the REGEX string ".*\\.(q_proj|v_proj)" (PEFT:
                                                      re.fullmatch on "model.layers.0.self_attn.q_proj"; 4 modules)
  tests/golden/lora/llama_lora_peft/                  adapter_config.json + adapter_model.safetensors of
                                                      llama_lora's FINAL adapters, as PeftModel.save_pretrained
                                                      writes them (keys base_model.model.<module>.lora_{A,B}.weight)

Each golden holds: weights.<HF name> and tokens [B, T+1] (int32), copied as they are from the family golden (its
metadata "hf_config" is the base's config.json); adapter.<module>.lora_A.weight [r, in] / .lora_B.weight [out, r]
(the initial adapters: A kaiming_uniform_(a=sqrt(5)) from torch.Generator().manual_seed(1234), one draw per targeted
module in named_modules() order, B zeros); 10 AdamW steps of the adapters only with the llama family's HP (warmup +
cosine lr, AdamW betas/eps, weight decay 0.1 on 2-D tensors: every A and B, global-norm clipping over the adapters'
gradients): train.lr, train.losses (loss before update s), train.grad_norms (pre-clip), train.final.<adapter name>
(every adapter tensor after the 10 steps); logits.final [B*T, V] (the adapter model at the final adapters);
merged.<HF name> for every targeted base weight (W + (B @ A) * scaling at the final adapters, float32).
Metadata: the family's optimizer/lr/clip keys, "hf_config", "lora_config" (the adapter_config.json text PEFT writes
for the adapter), "scaling", "peft_source", "semantics", "max_norm" (MAX_NORM, if the family's does not clip some
steps but not all), "clipped_steps".

Before writing: tools/torch_peft_lora.self_checks (kaiming init bitwise, PEFT's target rule, empty target set and
B = 0 == the base bitwise, finite differences in float64 w.r.t. A and B, merged == adapter logits, adapter directory
round trip), and, per variant, the first forward == the family golden's logits/loss (B = 0, to 1e-6), the written
files read back, and tools/check_peft_adapter.py's checks on the PEFT directory and on the merged weights.
"""
import os

# Pin the thread pools before torch is imported, as make_golden.py does.
os.environ["OMP_NUM_THREADS"] = "2"
os.environ["OPENBLAS_NUM_THREADS"] = "2"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import golden_adamw, golden_step, write_safetensors  # noqa: E402
import check_peft_adapter as cpa  # noqa: E402
import make_family_golden as mfg  # noqa: E402
import torch_peft_lora as pl  # noqa: E402

torch.set_num_threads(2)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FAMILY = "llama"
HP = mfg.HP                                   # the llama family's optimizer and schedule, as make_family_golden.py
ADAPTER_SEED = 1234
BASE_MODEL_NAME = "tests/golden/families/llama"   # base_model_name_or_path written in adapter_config.json
VARIANTS = {
    "llama_lora": dict(r=4, lora_alpha=8, use_rslora=False,
                       target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                       peft_dir="llama_lora_peft"),
    "llama_lora_qv_rslora": dict(r=4, lora_alpha=8, use_rslora=True, target_modules=r".*\.(q_proj|v_proj)",
                                 peft_dir=None),
    # Qwen2-MoE (tests/golden/families/qwen2_moe.safetensors): PEFT's list names every router (mlp.gate), every
    # shared expert's projections (mlp.shared_expert.{gate,up,down}_proj) and every routed expert's
    # (mlp.experts.E.{gate,up,down}_proj) beside the attention's q and v; the shared expert's sigmoid gate
    # (mlp.shared_expert_gate) stays frozen (no entry matches it).
    # The family's tied Llama with PEFT's modules_to_save [lm_head, embed_tokens] beside q and v's adapters: as in
    # Hugging Face's model, lm_head's weight is embed_tokens' (tie_weights); PEFT deep-copies each module, so the head's
    # copy (from the shared weight) and the embedding's copy train apart, untied.
    "llama_saved_tied": dict(r=4, lora_alpha=8, use_rslora=False, target_modules=["q_proj", "v_proj"],
                             modules_to_save=["lm_head", "embed_tokens"], peft_dir=None),
    # The same Qwen2-MoE with PEFT's 'all-linear': every nn.Linear but the head, the shared experts' sigmoid gates
    # (mlp.shared_expert_gate, [1, hidden]) among them; PEFT saves target_modules as the full names it became.
    # Seed 1238: with 1234's adapters the ten steps amplify rounding (every router margin of PyTorch's run above 1e-4,
    # yet gridformer's run on OpenBLAS's products and on Eigen's end 1.5e-4 apart on layer 1's q_proj and v_proj B,
    # past tests/models/lora_golden_test.cpp's 1e-4 ceiling on such a probe); 1236's routes within 3.7e-5 of a tie;
    # 1235, 1237 and 1238 agree with PyTorch within 1e-5 on OpenBLAS, Eigen and oneDNN alike (an AVX2 EPYC).
    "qwen2_moe_all_linear": dict(r=4, lora_alpha=8, use_rslora=False, target_modules="all-linear", peft_dir=None,
                                 family="qwen2_moe", seed=1238),
    "qwen2_moe_lora": dict(r=4, lora_alpha=8, use_rslora=False,
                           target_modules=["q_proj", "v_proj", "gate", "gate_proj", "up_proj", "down_proj"],
                           peft_dir=None, family="qwen2_moe"),
}
# The family's max_norm (1.5) clips no step of the adapters' gradients (pre-clip norms 0.2997 .. 0.3078 for
# llama_lora, 0.405 .. 0.446 for llama_lora_qv_rslora: nearly flat, B starts at 0 and lr is small). Picked after
# looking at them: clipping some steps but not all, every norm > 1e-3 relative away from max_norm (asserted).
# Adam is nearly blind to a gradient scale, so the clipping moves the final adapters by ~5.7e-5 and logits.final by
# ~4.6e-5 (llama_lora) / ~2.6e-4 (qv_rslora) against no clipping: above the 1e-5 tolerance, not by much.
MAX_NORM = {"llama_lora": 0.303, "llama_lora_qv_rslora": 0.42, "qwen2_moe_lora": None, "llama_saved_tied": None,
            "qwen2_moe_all_linear": None}
MAX_BYTES = 1_000_000


class _Params:
    """What golden_adamw reads of a model: .parameters() (the adapters only, named_modules order, A before B)."""

    def __init__(self, params):
        self._params = list(params)

    def parameters(self):
        return iter(self._params)


def read_family(path):
    tensors, dtypes, meta, problems = pl.read_safetensors(path)
    assert not problems, problems
    weights = {k[len("weights."):]: v for k, v in tensors.items() if k.startswith("weights.")}
    for k, v in HP.items():                   # the family golden was made with these
        assert meta[k] == str(v), (k, meta[k], v)
    return tensors, meta, json.loads(meta["hf_config"]), weights


def semantics(v, scaling, names):
    family = v.get("family", FAMILY)
    tm = v["target_modules"]
    rule = ("a list: a module is targeted iff its name equals an entry or ends with '.' + entry" if isinstance(tm, list)
            else "'all-linear': every nn.Linear but the output embedding (lm_head)" if tm.lower() == "all-linear"
            else "a str: a module is targeted iff re.fullmatch(target_modules, name)")
    return (f"PEFT LoRA (vanilla, one adapter, unmerged) on the {family} model of hf_config: every nn.Linear whose "
            f"named_modules() name is targeted ({rule}; here {len(names)} modules: {','.join(names)}) computes "
            f"y = x @ W^T + ((x @ A^T) @ B^T) * scaling, i.e. result = base_layer(x) + lora_B(lora_A(dropout(x))) * "
            f"scaling in that order of operations, float32, with A = lora_A.weight [r, in], B = lora_B.weight "
            f"[out, r], "
            f"dropout the identity (lora_dropout 0), scaling = lora_alpha / " +
            ("sqrt(r) (use_rslora)" if v["use_rslora"] else "r") + f" = {scaling!r}. Backward: dL/dB = scaling * "
            f"G^T (x A^T), dL/dA = scaling * (G B)^T x with G = dL/dy; the base weights (W of every layer, embeddings, "
            f"norms) are frozen (no gradient, no update, no decay): only the A's and B's train. Init (PEFT "
            f"init_lora_weights true): A = kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), B = 0, so the "
            f"first forward is the base model's exactly and A's gradient is exactly 0 at step 1 (A still decays: "
            f"p *= 1 - lr*wd). Merged (PEFT merge): W' = W + (B @ A) * scaling, the plain model with W' gives the "
            f"same logits (to ~1e-6). Saved by PEFT as base_model.model.<module>.lora_A.weight / .lora_B.weight.")


def make_variant(name, v, family_tensors, family_meta, hf_cfg, weights, outdir, max_norm=None, dry=False):
    max_norm = max_norm or MAX_NORM[name]
    hp = dict(HP, max_norm=max_norm)
    B, T = hp["B"], hp["T"]
    tokens = family_tensors["tokens"]
    assert tuple(tokens.shape) == (B, T + 1) and tokens.dtype == torch.int32
    inputs, targets = tokens[:, :T].long(), tokens[:, 1:].long()
    V = hf_cfg["vocab_size"]

    model = pl.build_model(hf_cfg, weights)
    saved_names = v.get("modules_to_save") or []
    if saved_names and model.lm_head is None:   # tied: Hugging Face's lm_head, its weight the embedding's (tie_weights)
        model.lm_head = torch.nn.Linear(hf_cfg["hidden_size"], V, bias=False)
        model.lm_head.weight = model.model.embed_tokens.weight
    gen = torch.Generator().manual_seed(v.get("seed", ADAPTER_SEED))
    names = pl.apply_lora(model, v["target_modules"], v["r"], v["lora_alpha"], v["use_rslora"], 0.0, gen)
    saved = pl.apply_modules_to_save(model, saved_names) if saved_names else []
    assert len(saved) == len(saved_names), saved
    scaling = pl.lora_scaling(v["r"], v["lora_alpha"], v["use_rslora"])
    params = pl.trainable_parameters(model)
    assert len(params) == 2 * len(names) + len(saved)
    cfg = pl.adapter_config(v["r"], v["lora_alpha"], v["target_modules"], v["use_rslora"], 0.0, BASE_MODEL_NAME)
    if v["target_modules"] == "all-linear":   # saved as what it became: the names wrapped
        cfg["target_modules"] = sorted(names)
    if saved_names:
        cfg["modules_to_save"] = saved_names
    cfg_text = pl.config_text(cfg)

    out = {}
    for k, t in family_tensors.items():
        if k.startswith("weights."):
            out[k] = t.clone()
    out["tokens"] = tokens.clone()
    initial = dict(pl.adapter_state(model), **pl.saved_state(model))
    for k, t in initial.items():
        out[f"adapter.{k}"] = t

    opt, params = golden_adamw(_Params(params), hp)
    assert [len(g["params"]) for g in opt.param_groups] == [len(params), 0]    # every A, B and copy is 2-D: all decay
    lrs, losses, norms = [], [], []
    for s in range(1, hp["total_steps"] + 1):
        opt.zero_grad(set_to_none=True)
        logits, loss = model(inputs, targets)
        if hf_cfg.get("num_experts"):   # MoE: no token's choice of experts within float reordering of a tie
            gap = mfg.router_gaps(model)
            assert gap > mfg.ROUTER_MARGIN, f"{name} step {s}: router logits within {gap:.2e}"
        if s == 1:   # B = 0: the base model's forward, as the family golden recorded it
            err = (logits.reshape(B * T, V) - family_tensors["logits"]).abs().max().item()
            assert err <= 1e-6 and abs(loss.item() - family_tensors["loss"].item()) <= 1e-6, (err, loss.item())
            print(f"  step 1 == the family golden's logits (max diff {err:.1e}) and loss "
                  f"({'bitwise' if loss.item() == family_tensors['loss'].item() else 'within 1e-6'})")
        loss.backward()
        assert all(p.grad is not None for p in params)
        assert all(p.grad is None for n, p in model.named_parameters()
                   if ".lora_" not in n and ".modules_to_save." not in n)
        norm, lr = golden_step(opt, params, s, hp)
        lrs.append(lr)
        losses.append(loss.item())
        norms.append(norm.item())
        print(f"  step {s:2d}  lr {lr:.6e}  loss {loss.item():.6f}  grad_norm {norm.item():.6f}"
              f"  {'CLIPPED' if norm.item() > max_norm else ''}")
    if dry:   # the unclipped norms alone (main picks max_norm from them)
        return dict(norms=norms)
    clipped = [s + 1 for s, n in enumerate(norms) if n > max_norm]
    print(f"  pre-clip norms {min(norms):.4f} .. {max(norms):.4f}; the family's max_norm {mfg.MAX_NORM[FAMILY]} "
          f"would clip {sum(n > mfg.MAX_NORM[FAMILY] for n in norms)} steps; max_norm {max_norm} clips {clipped}")
    assert 0 < len(clipped) < len(norms), f"{name}: max_norm should clip on some steps but not all"
    assert all(abs(n / max_norm - 1) > 1e-3 for n in norms), f"{name}: a norm is too close to max_norm"

    final = dict(pl.adapter_state(model), **pl.saved_state(model))
    with torch.no_grad():
        logits_final = model(inputs)[0].reshape(B * T, V).clone()
    merged = pl.merge(weights, final, scaling)
    assert sorted(merged) == sorted(n + ".weight" for n in names)
    merged.update({f"{n}.weight": final[f"{n}.weight"] for n in saved})   # PEFT's merge_and_unload: the copies
    # A trained copy of a tied head: the merged model's head is its own (untied).
    plain_cfg = dict(hf_cfg, tie_word_embeddings=False) if "lm_head.weight" in merged else hf_cfg
    plain = pl.build_model(plain_cfg, dict(weights, **merged))
    with torch.no_grad():
        merr = (plain(inputs)[0].reshape(B * T, V) - logits_final).abs().max().item()
    assert merr <= 1e-5, merr
    print(f"  merged model logits vs adapter model logits (final adapters): max diff {merr:.1e}")

    out["train.lr"] = torch.tensor(lrs, dtype=torch.float32)
    out["train.losses"] = torch.tensor(losses, dtype=torch.float32)
    out["train.grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    for k, t in final.items():
        out[f"train.final.{k}"] = t
    out["logits.final"] = logits_final
    for k, t in merged.items():
        out[f"merged.{k}"] = t

    meta = {k: str(val) for k, val in hp.items()}
    keep = ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size", "rope_theta",
            "rms_norm_eps", "max_position_embeddings", "arch", "model_type", "tie_word_embeddings", "hidden_act",
            "head_dim", "rope_type", "rope_scaling", "tokens", "inputs", "targets", "logits_layout", "optimizer",
            "grad_clip", "lr_formula")
    meta.update({k: family_meta[k] for k in keep})
    meta.update({
        "hf_config": family_meta["hf_config"],
        "lora_config": cfg_text,
        "scaling": repr(scaling),
        "r": str(v["r"]),
        "lora_alpha": str(v["lora_alpha"]),
        "use_rslora": str(v["use_rslora"]),
        "lora_dropout": "0.0",
        "target_modules": json.dumps(v["target_modules"]),
        "targeted_modules": ",".join(names),
        "modules_to_save": json.dumps(saved_names or None),
        "peft_source": pl.PEFT_SOURCE,
        "semantics": semantics(v, scaling, names),
        "format": "gridformer golden v1",
        "generator": "tools/make_lora_golden.py (LoRA: tools/torch_peft_lora.py, model: tools/torch_hf_families.py)",
        "base_golden": "tests/golden/families/llama.safetensors (weights.* and tokens copied as they are)",
        "torch_version": torch.__version__,
        "compute_dtype": "float32",
        "adapter_init": f"adapter.*: A = uniform(-1/sqrt(in), 1/sqrt(in)) (nn.init.kaiming_uniform_(a=sqrt(5)), "
                        f"bitwise) from torch.Generator().manual_seed({v.get('seed', ADAPTER_SEED)}), one [r, in] draw per targeted "
                        f"module in named_modules() order (targeted_modules); B = 0. (PEFT draws from the global RNG "
                        f"after nn.Linear's own init draws: the same law, not the same numbers.)",
        "adapter_seed": str(v.get("seed", ADAPTER_SEED)),
        "adapter_layout": "adapter.<module>.lora_A.weight [r, in], adapter.<module>.lora_B.weight [out, r] (nn.Linear "
                          "layout); PEFT's file names them base_model.model.<module>.lora_A.weight / .lora_B.weight",
        "loss": "mean cross-entropy over all B*T positions of the adapter model (tied head embed_tokens, not adapted)",
        "trainable": "the A and B of every targeted module only (" + str(2 * len(names)) + " tensors); every base "
                     "weight frozen",
        "weight_decay_applies_to": "2-D tensors only: every lora_A / lora_B weight (all of them); the frozen base "
                                   "weights are not in the optimizer",
        "grad_clip": "as torch.nn.utils.clip_grad_norm_ over the adapters' gradients only: norm = global L2 over the "
                     "A and B grads, accumulated in float64; g *= min(1, max_norm / (norm + 1e-6)) (applied always)",
        "max_norm_note": f"the llama family's max_norm {mfg.MAX_NORM[FAMILY]} clips no step of the adapters' "
                         f"gradients: max_norm {max_norm} is used here (some steps clipped, not all)",
        "train_steps_description": "train.lr[s-1] = lr at optimizer step s; train.losses[s-1] = loss before update s "
                                   "(losses[0] == the family golden's loss: B = 0); train.grad_norms = pre-clip norm "
                                   "over the adapters; train.final.<module>.lora_{A,B}.weight = every adapter tensor "
                                   "after all steps; logits.final [B*T, V] = the adapter model at train.final; "
                                   "merged.<module>.weight = W + (B @ A) * scaling at train.final, float32",
        "num_clipped_steps": str(len(clipped)),
        "clipped_steps": ",".join(map(str, clipped)),
    })
    path = os.path.join(outdir, f"{name}.safetensors")
    write_safetensors(path, out, meta)
    size = os.path.getsize(path)
    assert size < MAX_BYTES, f"{path}: {size} bytes"

    # Read back.
    back, _, bmeta, problems = pl.read_safetensors(path)
    assert not problems and set(back) == set(out) and all(torch.equal(back[k], out[k]) for k in out)
    assert bmeta["lora_config"] == cfg_text and json.loads(cfg_text) == cfg

    if v["peft_dir"]:
        d = os.path.join(outdir, v["peft_dir"])
        pl.write_peft_adapter(d, final, cfg)
        for f in (pl.CONFIG_NAME, pl.WEIGHTS_NAME):
            print(f"wrote {os.path.join(d, f)}: {os.path.getsize(os.path.join(d, f))} bytes")
        ad, cfg_back, dts, st_meta, problems = pl.read_peft_adapter(d)
        assert not problems and cfg_back == cfg and st_meta == {"format": "pt"} and set(dts.values()) == {"F32"}
        assert set(ad) == set(final) and all(torch.equal(ad[k], final[k]) for k in final)
    # tools/check_peft_adapter.py's checks on what was written: the PEFT directory, and the merged weights.
    golden = cpa.read_golden(path)
    with tempfile.TemporaryDirectory() as tmp:
        mpath = os.path.join(tmp, "merged.safetensors")
        pl.write_safetensors_st(mpath, merged, {"format": "pt"})
        # (a trained copy of a tied head is no parameter of the tied base check_merged builds: the merged model
        # above, untied, is its check)
        checks = [] if saved else [("merged", cpa.check_merged(mpath, golden))]
        if v["peft_dir"]:
            checks.append((v["peft_dir"], cpa.check_adapter_dir(os.path.join(outdir, v["peft_dir"]), golden)))
        for what, (problems, _, err) in checks:
            assert not problems and err <= cpa.TOL, (what, problems)
            print(f"  tools/check_peft_adapter.py on {what}: OK, max |logits - logits.final| {err:.1e}")
    return dict(losses=losses, norms=norms, clipped=clipped, size=size, max_norm=max_norm, scaling=scaling,
                modules=len(names), merr=merr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default=os.path.join(ROOT, "tests", "golden", "families", "llama.safetensors"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden", "lora"))
    ap.add_argument("--no-self-checks", action="store_true")
    ap.add_argument("--only", help="write this variant alone")
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    os.makedirs(out, exist_ok=True)
    tensors, meta, hf_cfg, weights = read_family(args.family)
    if not args.no_self_checks:
        print("self checks")
        pl.self_checks(hf_cfg, weights, tensors["tokens"])
    summary = {}
    families = {FAMILY: (tensors, meta, hf_cfg, weights)}
    for name, v in VARIANTS.items():
        if args.only and name != args.only:
            continue
        fam = v.get("family", FAMILY)
        if fam not in families:
            families[fam] = read_family(os.path.join(os.path.dirname(args.family), fam + ".safetensors"))
        tensors, meta, hf_cfg, weights = families[fam]
        if MAX_NORM[name] is None:
            # The pre-clip norms of an unclipped run, sorted: max_norm the middle of the widest gap between
            # neighbours from the third to the eighth (tools/make_moe_lora_golden.py's rule).
            free = make_variant(name, v, tensors, meta, hf_cfg, weights, out, max_norm=math.inf, dry=True)
            ranked = sorted(free["norms"])
            i = max(range(2, 7), key=lambda j: ranked[j + 1] - ranked[j])
            MAX_NORM[name] = float(f"{(ranked[i] + ranked[i + 1]) / 2:.4g}")
        print(f"{name} (r {v['r']}, lora_alpha {v['lora_alpha']}, use_rslora {v['use_rslora']}, target_modules "
              f"{v['target_modules']!r})")
        summary[name] = make_variant(name, v, tensors, meta, hf_cfg, weights, out)
    print("summary")
    for name, s in summary.items():
        print(f"  {name}: {s['modules']} modules, scaling {s['scaling']}, max_norm {s['max_norm']}, clipped steps "
              f"{s['clipped']}, {s['size']} bytes")
        print(f"    losses     {' '.join(f'{x:.6f}' for x in s['losses'])}")
        print(f"    grad_norms {' '.join(f'{x:.6f}' for x in s['norms'])}")


if __name__ == "__main__":
    main()
