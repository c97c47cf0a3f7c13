"""PEFT's LoRA (Hugging Face `peft`, LoraConfig / lora.Linear, vanilla LoRA) in plain torch, over the Hugging Face
llama model of tools/torch_hf_families.py, plus PEFT's adapter directory format (adapter_config.json +
adapter_model.safetensors) written and read without `peft`, `safetensors` or `transformers`.

Not run by itself: tools/make_lora_golden.py runs self_checks() and writes the goldens, tools/check_peft_adapter.py
checks an adapter directory against them. Debian's Python (the pyenv `python3` on PATH has no torch):

    /usr/bin/python3 tools/make_lora_golden.py
    /usr/bin/python3 tools/check_peft_adapter.py tests/golden/lora/llama_lora_peft \
        --golden tests/golden/lora/llama_lora.safetensors

Transcribed from huggingface/peft (PEFT_SOURCE): release v0.20.0, commit a5526d27a9d47d1e8264d5e1b1f96c0fdc79464e;
also read at the newest stored commit 5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40 (0.20.1.dev0), the same in every
point below:

  src/peft/tuners/lora/layer.py    LoraLayer.update_layer: lora_A = nn.Linear(in_features, r, bias=False) (weight
      [r, in]), lora_B = nn.Linear(r, out_features, bias=lora_bias) (weight [out, r]); lora_dropout nn.Dropout(p) or
      nn.Identity() for p = 0; scaling = lora_alpha / r, or lora_alpha / math.sqrt(r) with use_rslora.
      reset_lora_parameters (init_lora_weights True): nn.init.kaiming_uniform_(lora_A.weight, a=math.sqrt(5)),
      nn.init.zeros_(lora_B.weight). Linear.forward (unmerged, vanilla LoRA): result = base_layer(x); then per active
      adapter result = result + lora_B(lora_A(dropout(x))) * scaling. Linear.get_delta_weight = transpose(B @ A,
      fan_in_fan_out) * scaling; merge: base_layer.weight.data += delta (W + (B @ A) * scaling, in W's dtype).
  src/peft/tuners/tuners_utils.py  check_target_module_exists: target_modules a str -> re.fullmatch(target_modules,
      key) (utils/other.py match_target_against_key); a list/set -> key in target_modules or key.endswith("." +
      entry), key = the module's name in the base model's named_modules() ("model.layers.0.self_attn.q_proj").
      No match at all raises ValueError; a match that is not a supported layer (nn.Linear here) raises too.
  src/peft/tuners/lora/config.py   LoraConfig fields and defaults (LORA_CONFIG_DEFAULTS); __post_init__ turns a list
      target_modules into a set; to_dict() = dataclasses.asdict minus runtime_config.
  src/peft/config.py               PeftConfigMixin.save_pretrained: sets -> list(value) (set iteration order, i.e.
      arbitrary: written sorted here), json.dumps(output_dict, indent=2, sort_keys=True), no trailing newline;
      peft_version = "0.20.0" for a release.
  src/peft/peft_model.py           PeftModel.save_pretrained: safe_save_file(state, "adapter_model.safetensors",
      metadata={"format": "pt"}); inference_mode True in the saved config; base_model_name_or_path filled in.
  src/peft/utils/save_and_load.py  get_peft_model_state_dict with bias "none": the keys containing "lora_" of the
      PeftModel's state_dict, adapter name removed: base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight.
  src/peft/tuners/lora/model.py / tuners_utils.py: every parameter but the adapters' is frozen (requires_grad False).
  src/peft/utils/other.py          modules_to_save: _set_trainable wraps every module whose name ends with an entry in
      a ModulesToSaveWrapper: the original frozen, copy.deepcopy(original) as modules_to_save[adapter] trained, and
      forward runs the copy (ModulesToSave here). save_and_load.py get_peft_model_state_dict then saves the copy
      under the module's own key: key.replace("modules_to_save.", "") and the adapter name removed
      (base_model.model.lm_head.weight); LoraConfig.modules_to_save is saved as the list given.

The adapters here are named as the golden files store them: HF module name + ".lora_A.weight" / ".lora_B.weight"
("model.layers.0.self_attn.q_proj.lora_A.weight"); PEFT's file adds the prefix "base_model.model." (PEFT_PREFIX).
A is drawn with a seeded torch.Generator (uniform(-1/sqrt(in), 1/sqrt(in)) = kaiming_uniform_(a=sqrt(5)), checked
bitwise against torch's), one draw per targeted module in named_modules() order; PEFT itself draws from the global
RNG and also consumes draws for nn.Linear's own init first, so equal seeds do not give PEFT's numbers.
"""
import copy
import json
import math
import os
import re
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_hf_families as hf  # noqa: E402

PEFT_SOURCE = ("huggingface/peft v0.20.0 (commit a5526d27a9d47d1e8264d5e1b1f96c0fdc79464e), also read at "
               "5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40 (0.20.1.dev0): src/peft/tuners/lora/layer.py (update_layer, "
               "reset_lora_parameters, Linear.forward, get_delta_weight, merge), src/peft/tuners/lora/config.py "
               "(LoraConfig), src/peft/tuners/tuners_utils.py (check_target_module_exists), src/peft/utils/other.py "
               "(match_target_against_key), src/peft/config.py (save_pretrained), src/peft/peft_model.py "
               "(save_pretrained), src/peft/utils/save_and_load.py (get_peft_model_state_dict)")
PEFT_VERSION = "0.20.0"
CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."

# LoraConfig (with PeftConfig's fields) as of v0.20.0: every key its to_dict() / save_pretrained writes, with the
# dataclass defaults (runtime_config is popped by to_dict).
LORA_CONFIG_DEFAULTS = {
    "task_type": None, "peft_type": "LORA", "auto_mapping": None, "peft_version": PEFT_VERSION,
    "base_model_name_or_path": None, "revision": None, "inference_mode": False,
    "r": 8, "target_modules": None, "exclude_modules": None, "lora_alpha": 8, "lora_dropout": 0.0,
    "fan_in_fan_out": False, "bias": "none", "use_rslora": False, "modules_to_save": None, "init_lora_weights": True,
    "layers_to_transform": None, "layers_pattern": None, "rank_pattern": {}, "alpha_pattern": {},
    "megatron_config": None, "megatron_core": "megatron.core", "trainable_token_indices": None, "loftq_config": {},
    "eva_config": None, "corda_config": None, "lora_ga_config": None, "use_dora": False, "velora_config": None,
    "alora_invocation_tokens": None, "use_qalora": False, "qalora_group_size": 16, "monteclora_config": None,
    "layer_replication": None, "lora_bias": False, "target_parameters": None, "use_bdlora": None,
    "arrow_config": None, "ensure_weight_tying": False,
}
# Keys every PEFT LoRA config of the last releases (0.6 on) writes.
CORE_CONFIG_KEYS = ("peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "target_modules", "bias",
                    "fan_in_fan_out", "modules_to_save", "init_lora_weights", "base_model_name_or_path",
                    "inference_mode", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern",
                    "revision")


def lora_scaling(r, lora_alpha, use_rslora):
    """LoraLayer.update_layer's scaling."""
    return lora_alpha / math.sqrt(r) if use_rslora else lora_alpha / r


def target_matches(target_modules, key):
    """check_target_module_exists (no exclude_modules, modules_to_save, layers_to_transform): a str is a regex that
    must fullmatch the module name; a list/set matches a name equal to an entry or ending with "." + entry."""
    if isinstance(target_modules, str):
        return re.fullmatch(target_modules, key) is not None
    return key in target_modules or any(key.endswith(f".{t}") for t in target_modules)


def all_linear(model):
    """tuners_utils.py _maybe_include_all_linear_layers for target_modules 'all-linear': the full names of every
    nn.Linear of the model but its output embedding (the PreTrainedModel's lm_head; these models' tied head is no
    module of its own), a set (PEFT saves it as the list of these names)."""
    return {name for name, mod in model.named_modules() if isinstance(mod, nn.Linear) and name != "lm_head"}


def find_targets(model, target_modules):
    """Names (named_modules() order) of the modules PEFT would wrap; a match that is not an nn.Linear is refused, as
    PEFT refuses a target of an unsupported type. 'all-linear' (any case) is expanded first, as PEFT does."""
    if isinstance(target_modules, str) and target_modules.lower() == "all-linear":
        target_modules = all_linear(model)
    names = []
    for name, mod in model.named_modules():
        if name and target_matches(target_modules, name):
            if not isinstance(mod, nn.Linear):
                raise ValueError(f"Target module {name} ({type(mod).__name__}) is not supported (only nn.Linear)")
            names.append(name)
    return names


def kaiming_uniform_a_sqrt5_(w, gen):
    """nn.init.kaiming_uniform_(w, a=math.sqrt(5)) drawn from `gen`: gain sqrt(2 / (1 + 5)), fan_in = w.shape[1],
    bound = sqrt(3) * gain / sqrt(fan_in) = 1 / sqrt(fan_in); uniform_(-bound, bound)."""
    fan_in = w.shape[1]
    gain = math.sqrt(2.0 / (1 + math.sqrt(5) ** 2))
    bound = math.sqrt(3.0) * gain / math.sqrt(fan_in)
    with torch.no_grad():
        return w.uniform_(-bound, bound, generator=gen)


class LoraLinear(nn.Module):
    """peft.tuners.lora.Linear with one adapter, unmerged: base_layer(x) + lora_B(lora_A(dropout(x))) * scaling."""

    def __init__(self, base_layer, r, lora_alpha, use_rslora=False, lora_dropout=0.0, gen=None):
        super().__init__()
        self.base_layer = base_layer
        self.r, self.lora_alpha, self.use_rslora = r, lora_alpha, use_rslora
        self.lora_dropout = nn.Dropout(p=lora_dropout) if lora_dropout > 0.0 else nn.Identity()
        self.lora_A = nn.Linear(base_layer.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base_layer.out_features, bias=False)
        self.lora_A.to(base_layer.weight.dtype)
        self.lora_B.to(base_layer.weight.dtype)
        self.scaling = lora_scaling(r, lora_alpha, use_rslora)
        if gen is not None:
            kaiming_uniform_a_sqrt5_(self.lora_A.weight, gen)
        with torch.no_grad():
            self.lora_B.weight.zero_()

    def forward(self, x):
        result = self.base_layer(x)
        return result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def apply_lora(model, target_modules, r, lora_alpha, use_rslora=False, lora_dropout=0.0, gen=None, allow_empty=False):
    """Freeze every parameter of `model`, then replace each targeted nn.Linear by a LoraLinear (A from `gen`, B zero).
    Returns the targeted names. PEFT raises when nothing matches; allow_empty lets the self-checks try it."""
    names = find_targets(model, target_modules)
    if not names and not allow_empty:
        raise ValueError(f"Target modules {target_modules} not found in the base model")
    for p in model.parameters():
        p.requires_grad_(False)
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, LoraLinear(getattr(parent, child), r, lora_alpha, use_rslora, lora_dropout, gen))
    return names


class ModulesToSave(nn.Module):
    """PEFT's ModulesToSaveWrapper (peft/utils/other.py): the original module frozen and kept, a deep copy of it
    (modules_to_save["default"]) trained and used by forward. `weight` is the copy's too, for the models of
    tools/torch_moe.py that read a head's weight directly (F.linear(h, self.lm_head.weight))."""

    def __init__(self, module):
        super().__init__()
        self.original_module = module
        self.modules_to_save = nn.ModuleDict({"default": copy.deepcopy(module)})
        self.original_module.requires_grad_(False)
        self.modules_to_save["default"].requires_grad_(True)

    @property
    def weight(self):
        return self.modules_to_save["default"].weight

    def forward(self, *args, **kwargs):
        return self.modules_to_save["default"](*args, **kwargs)


def apply_modules_to_save(model, modules_to_save):
    """PEFT's _set_trainable: every module whose named_modules() name is an entry or ends with '.' + entry is wrapped
    (call after apply_lora, which freezes the rest). Returns the wrapped names, named_modules() order."""
    names = [n for n, _ in model.named_modules()
             if n and any(n == t or n.endswith("." + t) for t in modules_to_save)]
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, ModulesToSave(getattr(parent, child)))
    return names


def saved_state(model):
    """{module + ".weight": the trained copy} for every ModulesToSave, as get_peft_model_state_dict saves them (the
    key without "modules_to_save.default": base_model.model.lm_head.weight in the file)."""
    return {f"{n}.weight": m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, ModulesToSave)}


def golden_tensors(source, r, merged, copied=("weights.",), after_losses=None):
    """A LoRA golden's tensors (tools/make_moe_lora_golden.py's and make_mla_lora_golden.py's layout): the source
    golden's `copied` keys and tokens, adapter.* (r["initial"]), train.lr / losses / (after_losses) / grad_norms,
    train.final.* (r["final"]), logits.final, merged.*."""
    out = {k: t.clone() for k, t in source.items() if k.startswith(copied)}
    out["tokens"] = source["tokens"].clone()
    for k, t in r["initial"].items():
        out[f"adapter.{k}"] = t
    out["train.lr"] = torch.tensor(r["lrs"], dtype=torch.float32)
    out["train.losses"] = torch.tensor(r["losses"], dtype=torch.float32)
    out.update(after_losses or {})
    out["train.grad_norms"] = torch.tensor(r["norms"], dtype=torch.float32)
    for k, t in r["final"].items():
        out[f"train.final.{k}"] = t
    out["logits.final"] = r["logits_final"]
    for k, t in merged.items():
        out[f"merged.{k}"] = t
    return out


def lora_modules(model):
    return {n: m for n, m in model.named_modules() if isinstance(m, LoraLinear)}


def adapter_state(model):
    """{module + ".lora_A.weight": A [r, in], module + ".lora_B.weight": B [out, r]} (detached copies), named_modules
    order, A before B (PEFT's registration order)."""
    out = {}
    for n, m in lora_modules(model).items():
        out[f"{n}.lora_A.weight"] = m.lora_A.weight.detach().clone()
        out[f"{n}.lora_B.weight"] = m.lora_B.weight.detach().clone()
    return out


def load_adapter_state(model, adapters):
    mods = lora_modules(model)
    want = {f"{n}.lora_{ab}.weight" for n in mods for ab in "AB"}
    assert set(adapters) == want, (sorted(set(adapters) ^ want)[:4])
    with torch.no_grad():
        for n, m in mods.items():
            m.lora_A.weight.copy_(adapters[f"{n}.lora_A.weight"])
            m.lora_B.weight.copy_(adapters[f"{n}.lora_B.weight"])


def trainable_parameters(model):
    return [p for p in model.parameters() if p.requires_grad]


def merge(base_state, adapters, scaling, dtype=torch.float32):
    """{HF weight name: W + (B @ A) * scaling} for every adapted module, in float32 (PEFT's get_delta_weight + merge
    on float32 weights; (B @ A) * scaling == scaling * (B @ A) elementwise); dtype float64 for the self-checks."""
    out = {}
    for key in adapters:
        if not key.endswith(".lora_A.weight"):
            continue
        mod = key[:-len(".lora_A.weight")]
        W = base_state[mod + ".weight"].to(dtype)
        A, B = adapters[key].to(dtype), adapters[mod + ".lora_B.weight"].to(dtype)
        out[mod + ".weight"] = W + (B @ A) * scaling
    return out


def build_model(hf_config, weights, dtype=torch.float32):
    """The tools/torch_hf_families.py model of a config.json dict with `weights` (HF names) loaded."""
    model = hf.FamilyForCausalLM(hf_config).to(dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in weights.items()}, strict=True)
    return model


# ---- adapter_config.json and adapter_model.safetensors


def adapter_config(r, lora_alpha, target_modules, use_rslora=False, lora_dropout=0.0, base_model_name_or_path=None):
    """The dict PeftModel.save_pretrained writes for LoraConfig(r, lora_alpha, target_modules, use_rslora,
    lora_dropout, task_type="CAUSAL_LM") at v0.20.0 (inference_mode True as saved; a list target_modules is a set
    in PEFT, saved as a list in set order: sorted here)."""
    cfg = dict(LORA_CONFIG_DEFAULTS)
    cfg.update(task_type="CAUSAL_LM", base_model_name_or_path=base_model_name_or_path, inference_mode=True, r=r,
               lora_alpha=lora_alpha, lora_dropout=lora_dropout, use_rslora=use_rslora,
               target_modules=target_modules if isinstance(target_modules, str) else sorted(set(target_modules)))
    return cfg


def config_text(cfg):
    """PeftConfigMixin.save_pretrained's text: json.dumps(indent=2, sort_keys=True), no trailing newline."""
    return json.dumps(cfg, indent=2, sort_keys=True)


_DT = {"F32": ("<f4", torch.float32, 4), "F64": ("<f8", torch.float64, 8), "F16": ("<f2", torch.float16, 2),
       "I32": ("<i4", torch.int32, 4), "I64": ("<i8", torch.int64, 8), "BF16": (None, torch.bfloat16, 2)}


def write_safetensors_st(path, tensors, metadata=None):
    """A safetensors file laid out as the `safetensors` library (Rust serializer) writes it: tensors sorted by
    descending dtype alignment, then name; compact JSON header "__metadata__" first, then the tensors in data order,
    each {"dtype", "shape", "data_offsets"}; space padded to a multiple of 8. float32 tensors only."""
    items = sorted(tensors.items(), key=lambda kv: kv[0])
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    for name, t in items:
        assert t.dtype == torch.float32, (name, t.dtype)
        raw = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """(tensors name -> torch tensor, dtypes name -> str, metadata dict or None, problems [str]): the structure is
    checked (header length, JSON, known dtypes, sizes, contiguous offsets covering the data) and what is wrong listed
    in problems instead of raising (tensors that cannot be read are left out)."""
    with open(path, "rb") as f:
        buf = f.read()
    problems = []
    if len(buf) < 8:
        return {}, {}, None, [f"{path}: {len(buf)} bytes, not a safetensors file"]
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        return {}, {}, None, [f"{path}: header length {n} past the end of the file"]
    try:
        header = json.loads(buf[8:8 + n].decode("utf-8"))
    except ValueError as e:
        return {}, {}, None, [f"{path}: header is not JSON ({e})"]
    meta = header.pop("__metadata__", None)
    data = buf[8 + n:]
    tensors, dtypes, spans = {}, {}, []
    for name, info in header.items():
        dt, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dt not in _DT or not isinstance(shape, list) or not isinstance(offs, list) or len(offs) != 2:
            problems.append(f"{name}: bad header entry {info}")
            continue
        b, e = offs
        if e - b != _DT[dt][2] * math.prod(shape) or e > len(data):
            problems.append(f"{name}: data_offsets {offs} do not fit {dt} {shape}")
            continue
        spans.append((b, e, name))
        raw = data[b:e]
        if dt == "BF16":
            t = torch.from_numpy((np.frombuffer(raw, "<u2").astype(np.int32) << 16).view(np.float32).copy())
            t = t.to(torch.bfloat16)
        else:
            t = torch.from_numpy(np.frombuffer(raw, _DT[dt][0]).copy())
        tensors[name], dtypes[name] = t.reshape(shape), dt
    pos = 0
    for b, e, name in sorted(spans):
        if b != pos:
            problems.append(f"{name}: data starts at {b}, expected {pos} (gap or overlap)")
        pos = e
    if pos != len(data):
        problems.append(f"{path}: tensors cover {pos} of {len(data)} data bytes")
    return tensors, dtypes, meta, problems


def write_peft_adapter(directory, adapters, config):
    """PeftModel.save_pretrained's two files: adapter_config.json (config_text(config)) and
    adapter_model.safetensors (PEFT_PREFIX + name for every adapter tensor, float32, metadata {"format": "pt"})."""
    os.makedirs(directory, exist_ok=True)
    write_safetensors_st(os.path.join(directory, WEIGHTS_NAME),
                         {PEFT_PREFIX + k: v.float() for k, v in adapters.items()}, {"format": "pt"})
    with open(os.path.join(directory, CONFIG_NAME), "w") as f:
        f.write(config_text(config))


def read_peft_adapter(directory):
    """(adapters with PEFT_PREFIX removed, config dict, dtypes by file key, safetensors metadata, problems)."""
    with open(os.path.join(directory, CONFIG_NAME)) as f:
        config = json.load(f)
    tensors, dtypes, meta, problems = read_safetensors(os.path.join(directory, WEIGHTS_NAME))
    adapters = {}
    for k, v in tensors.items():
        if k.startswith(PEFT_PREFIX):
            adapters[k[len(PEFT_PREFIX):]] = v
        else:
            problems.append(f"{k}: does not start with {PEFT_PREFIX!r}")
    return adapters, config, dtypes, meta, problems


# ---- self-checks (run by tools/make_lora_golden.py)


def _logits(model, tokens):
    with torch.no_grad():
        return model(tokens)[0]


def self_checks(hf_config, weights, tokens):
    """hf_config / weights / tokens: the base model of the golden (tests/golden/families/llama.safetensors)."""
    gen = torch.Generator().manual_seed(77)
    T = tokens.shape[1] - 1
    inputs, targets = tokens[:, :T].long(), tokens[:, 1:].long()
    all7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

    # kaiming_uniform_a_sqrt5_ == torch's nn.init.kaiming_uniform_(a=sqrt(5)) (same draws, bitwise).
    for shape in ((4, 64), (4, 96), (8, 128)):
        torch.manual_seed(31)
        want = nn.init.kaiming_uniform_(torch.empty(shape), a=math.sqrt(5))
        got = kaiming_uniform_a_sqrt5_(torch.empty(shape), torch.Generator().manual_seed(31))
        assert torch.equal(got, want), shape
        assert got.abs().max().item() <= 1 / math.sqrt(shape[1])
    print("  self-check kaiming_uniform_a_sqrt5_ == nn.init.kaiming_uniform_(a=sqrt(5)) bitwise, |A| <= 1/sqrt(in)")

    # Target selection (PEFT's rule).
    m = build_model(hf_config, weights)
    L = m.cfg.num_hidden_layers
    assert find_targets(m, all7) == [f"model.layers.{i}.{p}" for i in range(L) for p in
                                     ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                      "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
    qv = [f"model.layers.{i}.self_attn.{p}" for i in range(L) for p in ("q_proj", "v_proj")]
    assert find_targets(m, r".*\.(q_proj|v_proj)") == qv
    assert find_targets(m, ["q_proj", "v_proj"]) == qv
    assert find_targets(m, ["self_attn.q_proj"]) == qv[::2]                # a dotted entry: suffix on a "." boundary
    assert find_targets(m, ["model.layers.1.mlp.up_proj"]) == ["model.layers.1.mlp.up_proj"]   # exact name
    assert find_targets(m, "q_proj") == [] and find_targets(m, ["proj", "_proj", "layers.1.mlp.up"]) == []
    assert find_targets(m, r"model\.layers\.0\..*_proj") == [f"model.layers.0.{p}" for p in (
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
        "mlp.up_proj", "mlp.down_proj")]
    for bad in (["input_layernorm"], r".*\.mlp"):
        try:
            find_targets(m, bad)
            raise AssertionError(f"{bad}: a non-Linear target was accepted")
        except ValueError:
            pass
    print("  self-check target selection: list = exact name or '.'+entry suffix, str = re.fullmatch; non-Linear "
          "targets refused")

    # An empty target set: the base model, bitwise; and PEFT's "not found" without allow_empty.
    base = build_model(hf_config, weights)
    ref_logits, ref_loss = base(inputs, targets)
    assert apply_lora(m, [], 4, 8, allow_empty=True) == [] and not trainable_parameters(m)
    assert torch.equal(_logits(m, inputs), ref_logits.detach())
    try:
        apply_lora(build_model(hf_config, weights), ["nothing_here"], 4, 8)
        raise AssertionError("no match accepted")
    except ValueError:
        pass

    # B = 0 (PEFT's init): the base logits and loss, bitwise; only A and B train; A's gradient is exactly zero then.
    for tm, rs in ((all7, False), (r".*\.(q_proj|v_proj)", True)):
        m = build_model(hf_config, weights)
        names = apply_lora(m, tm, 4, 8, use_rslora=rs, gen=gen)
        logits, loss = m(inputs, targets)
        assert torch.equal(logits, ref_logits) and torch.equal(loss, ref_loss), tm
        loss.backward()
        tr = trainable_parameters(m)
        assert len(tr) == 2 * len(names) and all(p.dim() == 2 for p in tr)
        assert all(p.grad is None for n, p in m.named_parameters() if ".lora_" not in n)
        for n, mod in lora_modules(m).items():
            assert torch.count_nonzero(mod.lora_A.weight.grad) == 0 and mod.lora_B.weight.grad.abs().max() > 0, n
            assert mod.scaling == (4.0 if rs else 2.0)
    print("  self-check empty target set == base model (bitwise); B = 0 gives the base logits and loss (bitwise), "
          "A's grad exactly 0, B's nonzero, only A and B trainable, base grads None")

    # Finite differences (float64) of the loss w.r.t. A and B, B made nonzero.
    Tf = 9
    fi, ft = inputs[:, :Tf], targets[:, :Tf]
    m = build_model(hf_config, weights, torch.float64)
    apply_lora(m, all7, 4, 8, gen=gen)
    with torch.no_grad():
        for mod in lora_modules(m).values():
            mod.lora_B.weight.copy_(0.05 * torch.randn(mod.lora_B.weight.shape, generator=gen, dtype=torch.float64))
    _, loss = m(fi, ft)
    loss.backward()
    sd = dict(m.named_parameters())
    worst, n = 0.0, 0
    for mod, idx in [("model.layers.0.self_attn.q_proj", (1, 7)), ("model.layers.0.self_attn.k_proj", (3, 60)),
                     ("model.layers.1.self_attn.v_proj", (0, 11)), ("model.layers.1.self_attn.o_proj", (2, 100)),
                     ("model.layers.0.mlp.gate_proj", (3, 5)), ("model.layers.1.mlp.up_proj", (1, 40)),
                     ("model.layers.0.mlp.down_proj", (0, 90))]:
        for ab, ij in (("A", idx), ("B", (idx[1] % sd[f"{mod}.lora_B.weight"].shape[0], idx[0]))):
            p, h = sd[f"{mod}.lora_{ab}.weight"], 1e-5
            with torch.no_grad():
                old = p[ij].item()
                p[ij] = old + h
                lp = m(fi, ft)[1].item()
                p[ij] = old - h
                lm = m(fi, ft)[1].item()
                p[ij] = old
            fd, an = (lp - lm) / (2 * h), p.grad[ij].item()
            worst = max(worst, abs(fd - an) / max(abs(an), 1e-8))
            n += 1
            assert abs(fd - an) <= 1e-7 + 1e-5 * abs(an), f"finite differences {mod}.lora_{ab}{ij}: fd {fd} vs {an}"
    print(f"  self-check finite differences (float64, B nonzero) agree with autograd on {n} elements of A and B, "
          f"worst rel err {worst:.1e}")

    # Merged weights == the adapter model: float64 to 1e-12, float32 to 1e-5 (nonzero B, both scalings).
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        for tm, rs in ((all7, False), (r".*\.(q_proj|v_proj)", True)):
            m = build_model(hf_config, weights, dtype)
            apply_lora(m, tm, 4, 8, use_rslora=rs, gen=gen)
            with torch.no_grad():
                for mod in lora_modules(m).values():
                    mod.lora_B.weight.copy_(0.05 * torch.randn(mod.lora_B.weight.shape, generator=gen).to(dtype))
            ad = adapter_state(m)
            sc = lora_scaling(4, 8, rs)
            mw = merge({k: v.to(dtype) for k, v in weights.items()}, ad, sc, dtype)
            merged = build_model(hf_config, dict(weights, **mw), dtype)
            err = (_logits(merged, inputs) - _logits(m, inputs)).abs().max().item()
            assert err <= tol, (dtype, tm, err)
            print(f"  self-check merged weights (W + (B @ A) * {sc}) == adapter model ({str(dtype)[6:]}, "
                  f"{'list of 7' if isinstance(tm, list) else 'regex q|v'}): max |logits diff| {err:.1e}")

    # The adapter directory round trip (keys, shapes, dtype, config).
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        cfg = adapter_config(4, 8, all7)
        ad_all = adapter_state(_fresh(hf_config, weights, all7, gen))
        write_peft_adapter(tmp, ad_all, cfg)
        back, cfg_back, dts, meta, problems = read_peft_adapter(tmp)
        assert not problems and meta == {"format": "pt"} and cfg_back == cfg and set(dts.values()) == {"F32"}
        assert list(back) == sorted(ad_all) and all(torch.equal(back[k], ad_all[k]) for k in ad_all)
        assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in dts
    print("  self-check write_peft_adapter / read_peft_adapter round trip (keys base_model.model.<module>.lora_{A,B}"
          ".weight, F32, metadata format pt, config)")


def _fresh(hf_config, weights, tm, gen):
    m = build_model(hf_config, weights)
    apply_lora(m, tm, 4, 8, gen=gen)
    return m
