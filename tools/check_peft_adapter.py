#!/usr/bin/python3
"""Check a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors, written by anyone, e.g.
gridformer's exporter) and/or a merged checkpoint against a LoRA golden of tools/make_lora_golden.py.

Run with Debian's Python (the pyenv `python3` on PATH has no torch), from the repository root:

    /usr/bin/python3 tools/check_peft_adapter.py DIR --golden tests/golden/lora/llama_lora.safetensors
    /usr/bin/python3 tools/check_peft_adapter.py --merged MERGED.safetensors \
        --golden tests/golden/lora/llama_lora.safetensors
    (both may be given at once; the golden may be either variant, llama_lora or llama_lora_qv_rslora)

DIR: the config is compared with the golden's "lora_config" (the adapter_config.json PEFT v0.20.0 writes): keys
PEFT's LoraConfig does not have, core keys missing, and values that differ (r, lora_alpha, use_rslora,
target_modules (a list compared as a set, as PEFT holds it), lora_dropout, bias, fan_in_fan_out, modules_to_save,
init_lora_weights, use_dora, rank/alpha patterns, peft_type, task_type, inference_mode, ...; a key left out counts
as its LoraConfig default); the tensors must be exactly base_model.model.<module>.lora_A.weight [r, in] and
.lora_B.weight [out, r], F32, for every module the config targets on the golden's base model (PEFT's rule), in a
well-formed safetensors file. Every difference is listed. If the keys and shapes are right, the adapter is applied
to the golden's base weights (tools/torch_peft_lora.py) and the logits of the golden's tokens must equal the
golden's logits.final within 1e-5 (max abs printed).
--merged: a safetensors of HF-named weights (model.layers.0.self_attn.q_proj.weight, ...): every key must be a
parameter of the base model with its shape, F32 (keys absent are taken from the golden's base weights, counted);
the plain model (no adapters) with them must give logits.final within 1e-5.
Exit status 0 when everything passes, 1 otherwise.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_peft_lora as pl  # noqa: E402

TOL = 1e-5
# Config keys whose values must equal the golden's (after normalisation); the rest (base_model_name_or_path,
# peft_version, revision, auto_mapping, megatron_core, ...) may differ.
VALUE_KEYS = ("peft_type", "task_type", "r", "lora_alpha", "use_rslora", "target_modules", "lora_dropout", "bias",
              "fan_in_fan_out", "modules_to_save", "init_lora_weights", "use_dora", "rank_pattern", "alpha_pattern",
              "layers_to_transform", "layers_pattern", "exclude_modules", "lora_bias", "layer_replication",
              "trainable_token_indices", "target_parameters", "inference_mode", "use_qalora", "alora_invocation_tokens",
              "ensure_weight_tying")


def read_golden(path):
    tensors, _, meta, problems = pl.read_safetensors(path)
    assert not problems, problems
    weights = {k[len("weights."):]: v for k, v in tensors.items() if k.startswith("weights.")}
    return dict(hf_config=json.loads(meta["hf_config"]), lora_config=json.loads(meta["lora_config"]), weights=weights,
                tokens=tensors["tokens"].long(), logits=tensors["logits.final"], meta=meta)


def _norm(key, value):
    """A config value as PEFT holds it: list target/exclude modules as sets, empty patterns/None alike."""
    if key in ("target_modules", "exclude_modules") and isinstance(value, list):
        return ("set", tuple(sorted(set(value))))
    if key in ("rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform", "trainable_token_indices",
               "target_parameters", "layer_replication", "alora_invocation_tokens") and not value:
        return None
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return json.dumps(value, sort_keys=True)


def _usable(cfg):
    """Can the adapter be applied at all (r a positive int, lora_alpha a number, target_modules a str or names)?"""
    r, alpha, tm = cfg.get("r"), cfg.get("lora_alpha"), cfg.get("target_modules")
    return (isinstance(r, int) and not isinstance(r, bool) and r > 0
            and isinstance(alpha, (int, float)) and not isinstance(alpha, bool)
            and (isinstance(tm, str) or (isinstance(tm, list) and all(isinstance(t, str) for t in tm))))


def check_config(cfg, want):
    """Differences between an adapter_config.json dict and the golden's."""
    diffs = []
    if not isinstance(cfg, dict):
        return [f"adapter_config.json is not a JSON object: {type(cfg).__name__}"]
    for k in sorted(set(cfg) - set(pl.LORA_CONFIG_DEFAULTS)):
        diffs.append(f"config: key {k!r} is not a LoraConfig field (PEFT {pl.PEFT_VERSION})")
    for k in pl.CORE_CONFIG_KEYS:
        if k not in cfg:
            diffs.append(f"config: key {k!r} missing (every PEFT LoRA config writes it)")
    for k in VALUE_KEYS:
        got = cfg.get(k, pl.LORA_CONFIG_DEFAULTS[k])
        exp = want.get(k, pl.LORA_CONFIG_DEFAULTS[k])
        if _norm(k, got) != _norm(k, exp):
            diffs.append(f"config: {k} = {json.dumps(got)}, PEFT's (the golden's) = {json.dumps(exp)}")
    if not isinstance(cfg.get("r"), int) or isinstance(cfg.get("r"), bool) or cfg.get("r", 0) <= 0:
        diffs.append(f"config: r = {json.dumps(cfg.get('r'))} is not a positive integer")
    if not isinstance(cfg.get("lora_alpha"), (int, float)) or isinstance(cfg.get("lora_alpha"), bool):
        diffs.append(f"config: lora_alpha = {json.dumps(cfg.get('lora_alpha'))} is not a number")
    tm = cfg.get("target_modules")
    if not (isinstance(tm, str) or (isinstance(tm, list) and all(isinstance(t, str) for t in tm))):
        diffs.append(f"config: target_modules = {json.dumps(tm)} is neither a regex string nor a list of names")
    return diffs


def expected_tensors(golden, cfg):
    """{PEFT key: shape} of the adapter `cfg` describes on the golden's base model (PEFT's target rule)."""
    model = pl.build_model(golden["hf_config"], golden["weights"])
    names = pl.find_targets(model, cfg["target_modules"])
    mods = dict(model.named_modules())
    r = cfg["r"]
    out = {}
    for n in names:
        out[f"{pl.PEFT_PREFIX}{n}.lora_A.weight"] = (r, mods[n].in_features)
        out[f"{pl.PEFT_PREFIX}{n}.lora_B.weight"] = (mods[n].out_features, r)
    return names, out


def logits_error(golden, model):
    T = golden["tokens"].shape[1] - 1
    with torch.no_grad():
        logits = model(golden["tokens"][:, :T])[0].reshape(-1, golden["logits"].shape[1])
    return (logits - golden["logits"]).abs().max().item()


def check_adapter_dir(directory, golden):
    """(problems, notes, max abs logits error or None)."""
    problems, notes = [], []
    for f in (pl.CONFIG_NAME, pl.WEIGHTS_NAME):
        if not os.path.isfile(os.path.join(directory, f)):
            problems.append(f"{f}: missing in {directory}")
    if problems:
        return problems, notes, None
    try:
        adapters, cfg, dtypes, st_meta, st_problems = pl.read_peft_adapter(directory)
    except ValueError as e:
        return [f"{pl.CONFIG_NAME}: not JSON ({e})"], notes, None
    problems += [f"{pl.WEIGHTS_NAME}: {p}" for p in st_problems]
    problems += check_config(cfg, golden["lora_config"])
    if st_meta != {"format": "pt"}:
        notes.append(f"{pl.WEIGHTS_NAME}: __metadata__ {st_meta}, PEFT writes {{'format': 'pt'}} (not needed to load)")
    for k in ("base_model_name_or_path", "peft_version"):
        notes.append(f"config: {k} = {json.dumps(cfg.get(k))} (not compared)")
    if not _usable(cfg):
        return problems, notes, None
    try:
        names, want = expected_tensors(golden, cfg)
    except (ValueError, re.error) as e:
        return problems + [f"config: target_modules {json.dumps(cfg['target_modules'])}: {e}"], notes, None
    if not names:
        problems.append(f"config: target_modules {json.dumps(cfg['target_modules'])} targets no module "
                        f"(PEFT raises)")
    got_keys = set(dtypes)
    for k in sorted(set(want) - got_keys):
        problems.append(f"tensor {k}: missing")
    for k in sorted(got_keys - set(want)):
        problems.append(f"tensor {k}: not a key PEFT writes for this config")
    shapes_ok = True
    for k in sorted(set(want) & got_keys):
        short = k[len(pl.PEFT_PREFIX):]
        shape = tuple(adapters[short].shape) if short in adapters else None
        if shape != want[k]:
            problems.append(f"tensor {k}: shape {list(shape) if shape else None}, expected {list(want[k])}")
            shapes_ok = False
        if dtypes[k] != "F32":
            problems.append(f"tensor {k}: dtype {dtypes[k]}, expected F32 (the golden's float32 adapters)")
    if set(want) != got_keys or not shapes_ok or not names:
        return problems, notes, None
    model = pl.build_model(golden["hf_config"], golden["weights"])
    pl.apply_lora(model, cfg["target_modules"], cfg["r"], cfg["lora_alpha"], bool(cfg.get("use_rslora", False)),
                  0.0)
    pl.load_adapter_state(model, {k: v.float() for k, v in adapters.items()})
    err = logits_error(golden, model)
    scaling = pl.lora_scaling(cfg["r"], cfg["lora_alpha"], bool(cfg.get("use_rslora", False)))
    notes.append(f"applied {len(names)} LoRA modules (r {cfg['r']}, lora_alpha {cfg['lora_alpha']}, scaling "
                 f"{scaling!r}) to the golden's base weights")
    if not err <= TOL:
        problems.append(f"logits: max |adapter model - logits.final| = {err:.3e} > {TOL:g}")
    return problems, notes, err


def check_merged(path, golden):
    problems, notes = [], []
    tensors, dtypes, _, st_problems = pl.read_safetensors(path)
    problems += [f"{os.path.basename(path)}: {p}" for p in st_problems]
    base = golden["weights"]
    weights = dict(base)
    for k in sorted(tensors):
        if k not in base:
            if k == "lm_head.weight" and torch.equal(tensors[k].float(), base["model.embed_tokens.weight"]):
                notes.append("lm_head.weight present and == model.embed_tokens.weight (tied): ignored")
                continue
            problems.append(f"tensor {k}: not a parameter of the base model")
        elif tuple(tensors[k].shape) != tuple(base[k].shape):
            problems.append(f"tensor {k}: shape {list(tensors[k].shape)}, expected {list(base[k].shape)}")
        elif dtypes[k] != "F32":
            problems.append(f"tensor {k}: dtype {dtypes[k]}, expected F32")
        else:
            weights[k] = tensors[k]
    missing = sorted(set(base) - set(tensors))
    changed = [k for k in tensors if k in base and not torch.equal(tensors[k].float(), base[k])]
    notes.append(f"{len(tensors)} tensors read, {len(changed)} differ from the base, {len(missing)} taken from the "
                 f"golden's base weights")
    if problems:
        return problems, notes, None
    err = logits_error(golden, pl.build_model(golden["hf_config"], weights))
    if not err <= TOL:
        problems.append(f"logits: max |merged model - logits.final| = {err:.3e} > {TOL:g}")
    return problems, notes, err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", help="adapter directory (adapter_config.json + adapter_model.safetensors)")
    ap.add_argument("--golden", required=True, help="tests/golden/lora/llama_lora.safetensors (or the qv_rslora one)")
    ap.add_argument("--merged", help="a safetensors of HF-named merged weights")
    args = ap.parse_args(argv)
    if not args.dir and not args.merged:
        ap.error("give an adapter DIR, --merged FILE, or both")
    torch.set_num_threads(2)
    golden = read_golden(args.golden)
    print(f"golden {args.golden}: r {golden['lora_config']['r']}, lora_alpha {golden['lora_config']['lora_alpha']}, "
          f"use_rslora {golden['lora_config']['use_rslora']}, target_modules "
          f"{json.dumps(golden['lora_config']['target_modules'])}, scaling {golden['meta']['scaling']}")
    failed = False
    for label, run, what in (("adapter", check_adapter_dir, args.dir), ("merged", check_merged, args.merged)):
        if not what:
            continue
        problems, notes, err = run(what, golden)
        for n in notes:
            print(f"  note: {n}")
        for p in problems:
            print(f"  DIFF: {p}")
        shown = "not computed" if err is None else f"{err:.3e}"
        status = "FAIL" if problems else "OK"
        print(f"{label} {what}: {status} ({len(problems)} differences; max |logits - logits.final| {shown}, "
              f"tolerance {TOL:g})")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
