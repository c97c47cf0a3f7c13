#!/usr/bin/python3
"""Write the golden PyTorch checkpoint files for core/io/torch_file (tests/core/torch_file_test.cpp).

Run with Debian's Python (python3-torch, python3-numpy):

    /usr/bin/python3 tools/make_torch_file_golden.py [--out tests/golden/torch_file]

Files written (see tests/golden/torch_file/README.md):
  megatron_zip.pt        a Megatron-LM-like model_optim_rng.pt, torch.save's zip format (protocol 2)
  megatron_legacy.pt     the same object, _use_new_zipfile_serialization=False
  megatron_zip_p4.pt     the same object, zip format, pickle protocol 4 (FRAME, MEMOIZE, STACK_GLOBAL)
  megatron_zip64.pt      megatron_zip.pt rewritten with ZIP64 records (checked loadable by torch.load)
  megatron_deflated.pt   megatron_zip.pt rewritten with deflated entries (must be refused)
  mal_*.pt               pickles that would run code or build arbitrary classes, in torch's zip layout
  expected.json          every tensor/array/scalar of the object, computed here, and what each
                         mal_*.pt must be refused for
Deterministic (fixed seeds, the same object rebuilt for every file), except megatron_legacy.pt's
storage keys: PyTorch's legacy writer names each storage by its memory address.
"""
import argparse
import collections
import enum
import json
import os
import pickle
import random
import struct
import subprocess
import sys
import types
import zipfile
import zlib

os.environ["OMP_NUM_THREADS"] = "1"
import numpy as np  # noqa: E402
import torch  # noqa: E402

MARKER = "gf_torch_file_MARKER"  # created in the working directory if a payload ever ran


class ModelType(enum.Enum):  # Megatron-LM's megatron/core/enums.py, which get_model stores as args.model_type
    encoder_or_decoder = 1
    encoder_and_decoder = 2


def fake_module(name, **members):
    """Registers `name` (and its parents) in this process only, so pickle can name classes defined here."""
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    for k, v in members.items():
        v.__module__ = name
        setattr(sys.modules[name], k, v)


fake_module("megatron.core.enums", ModelType=ModelType)


def megatron_like():
    """A small model_optim_rng.pt as Megatron-LM writes it, with every case the reader must handle."""
    torch.manual_seed(1234)
    np.random.seed(1234)
    random.seed(1234)
    args = argparse.Namespace(
        num_layers=2, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, seq_length=16,
        max_position_embeddings=16, padded_vocab_size=32, params_dtype=torch.float16, fp16=True,
        bf16=False, lr=1.5e-4, min_lr=1.0e-5, tokenizer_type="GPT2BPETokenizer",
        data_path=["1.0", "data/my-gpt2_text_document"], rampup_batch_size=None,
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1, consumed_train_samples=3200,
        adam_betas=(0.9, 0.95), vocab_extra_ids=0, model_type=ModelType.encoder_or_decoder)
    base = torch.randn(48)  # one storage, two biases at different offsets
    encoder = collections.OrderedDict([
        ("layers.0.input_layernorm.weight", (1 + 0.1 * torch.randn(8)).to(torch.bfloat16)),
        ("layers.0.input_layernorm.bias", torch.randn(8).to(torch.bfloat16)),
        ("layers.0.self_attention.query_key_value.weight", torch.randn(24, 8)),
        ("layers.0.self_attention.dense.weight", torch.randn(8, 8).t()),  # non-contiguous view
        ("layers.0.mlp.dense_h_to_4h.bias", base[4:36]),
        ("layers.0.mlp.dense_4h_to_h.bias", base[38:46]),
        ("final_layernorm.weight", torch.randn(8).half()),
    ])
    output_layer = torch.nn.Linear(8, 4)  # a real state_dict: OrderedDict with _metadata (BUILD)
    model = {"language_model": {
        "embedding": {
            "word_embeddings": collections.OrderedDict(weight=torch.randn(32, 8)),
            "position_embeddings": collections.OrderedDict(weight=torch.randn(16, 8).half()),
        },
        "encoder": encoder,
        "output_layer": output_layer.state_dict(),
    }}
    optimizer = {
        "optimizer": {
            "state": {0: {"exp_avg": torch.randn(4), "exp_avg_sq": torch.rand(4)}},
            "param_groups": [{"lr": 1.5e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.01,
                              "params": [0]}],
        },
        "fp32_from_fp16_params": [[torch.randn(4)]],
    }
    extra = {
        "f64": torch.randn(3, dtype=torch.float64),
        "i64": torch.tensor([0, -1, 2**40 + 3, -(2**62), 2**62 + 7], dtype=torch.int64),
        "i32": torch.tensor([[-(2**31), 5], [7, 2**31 - 1]], dtype=torch.int32),
        "i16": torch.tensor([-300, 300], dtype=torch.int16),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 200, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "param": torch.nn.Parameter(torch.randn(2, 3)),
        "expanded": torch.randn(3, 1).expand(3, 4),  # stride 0
        "strided": torch.arange(20.0)[1::3],        # step 3
        "np_c": np.arange(6, dtype=np.float32).reshape(2, 3),
        "np_f": np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
        "device": torch.device("cpu"),
        "size": torch.Size([2, 3]),
        "big_int": 2**70 + 1,
    }
    return {
        "args": args,
        "checkpoint_version": 3.0,
        "iteration": 100,
        "model": model,
        "optimizer": optimizer,
        "opt_param_scheduler": {"max_lr": np.float64(1.5e-4), "num_steps": np.int64(3200),
                                "warmup": np.float32(0.25), "decay": np.bool_(True)},
        "rng_state": [{
            "random_rng_state": random.getstate(),
            "np_rng_state": np.random.get_state(),
            "torch_rng_state": torch.get_rng_state(),
            "cuda_rng_state": torch.get_rng_state()[:16].clone(),
            "rng_tracker_states": {"model-parallel-rng": torch.get_rng_state()[16:48].clone()},
        }],
        "extra": extra,
    }


def tensor_record(path, t):
    if isinstance(t, np.ndarray):
        values = t.flatten(order="C").tolist()
        return {"path": path, "kind": "ndarray", "dtype": str(t.dtype), "shape": list(t.shape), "values": values}
    floating = t.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)
    values = t.detach().double().flatten().tolist() if floating else t.flatten().long().tolist()
    return {"path": path, "kind": "tensor", "dtype": str(t.dtype).replace("torch.", ""),
            "shape": list(t.shape), "stride": list(t.stride()), "storage_offset": t.storage_offset(),
            "values": values}


def collect(path, v, out):
    if isinstance(v, (torch.Tensor, np.ndarray)):
        out.append(tensor_record(path, v))
    elif isinstance(v, dict):
        for k, x in v.items():
            collect(path + [k], x, out)
    elif isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
        for i, x in enumerate(v):
            collect(path + [i], x, out)


def plain(v):
    """JSON form of a non-tensor value (dtypes as 'torch.float16', tuples as lists)."""
    if isinstance(v, torch.dtype):
        return str(v)
    if isinstance(v, enum.Enum):
        return {"enum": type(v).__module__ + "." + type(v).__name__, "value": v.value, "name": v.name}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def write_zip64(src, dst):
    """Rewrites a torch zip with every size and offset in ZIP64 form (and 64-byte aligned data)."""
    out, central = bytearray(), bytearray()
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        for info in infos:
            data, name = zin.read(info.filename), info.filename.encode()
            crc, off = zlib.crc32(data), len(out)
            pad = (-(off + 30 + len(name) + 20 + 4)) % 64
            extra = struct.pack("<HHQQ", 1, 16, len(data), len(data)) + struct.pack("<HH", 0x4246, pad) + b"Z" * pad
            out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                               len(name), len(extra)) + name + extra + data
            cextra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), off)
            central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF,
                                   0xFFFFFFFF, len(name), len(cextra), 0, 0, 0, 0, 0xFFFFFFFF) + name + cextra
    cd_off = len(out)
    out += central
    z64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(infos), len(infos), len(central), cd_off)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(dst, "wb") as f:
        f.write(out)


def write_deflated(src, dst):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))  # reproducible bytes
            zout.writestr(fixed, zin.read(info.filename), compress_type=zipfile.ZIP_DEFLATED)


# Payloads: pickled here, never unpickled. Each __reduce__ names the callable the reader must refuse.
class SystemPayload:
    def __reduce__(self):
        return (os.system, ("touch " + MARKER,))


class EvalPayload:
    def __reduce__(self):
        return (eval, ("__import__('os').system('touch %s')" % MARKER,))


class PopenPayload:
    def __reduce__(self):
        return (subprocess.Popen, (["touch", MARKER],))


class Innocent:  # an unknown class: its module cannot be imported by a loader
    pass


fake_module("evil_module", Innocent=Innocent)


def write_torch_zip(path, pkl):
    """data.pkl (and version) in exactly the layout torch.save writes, through torch's own writer."""
    writer = torch._C.PyTorchFileWriter(path)
    writer.write_record("data.pkl", pkl, len(pkl))
    writer.write_end_of_file()
    del writer


def malicious(out_dir):
    """Writes mal_*.pt; returns {file: the name its refusal message must contain}."""
    def wrapped(payload):
        return {"iteration": 1, "model": {"w": [1, 2]}, "args": payload}
    cases = {
        "mal_os_system.pt": (pickle.dumps(wrapped(SystemPayload()), protocol=2), os.system.__module__ + ".system"),
        "mal_stack_global.pt": (pickle.dumps(wrapped(SystemPayload()), protocol=4), os.system.__module__ + ".system"),
        # protocol 2 writes Python 2 names by default (fix_imports): both spellings
        "mal_eval.pt": (pickle.dumps(wrapped(EvalPayload()), protocol=2, fix_imports=False), "builtins.eval"),
        "mal_eval_py2.pt": (pickle.dumps(wrapped(EvalPayload()), protocol=2), "__builtin__.eval"),
        "mal_popen.pt": (pickle.dumps(wrapped(PopenPayload()), protocol=2, fix_imports=False), "subprocess.Popen"),
        "mal_popen_py2.pt": (pickle.dumps(wrapped(PopenPayload()), protocol=2), "commands.Popen"),
        "mal_unknown_class.pt": (pickle.dumps(wrapped(Innocent()), protocol=2), "evil_module.Innocent"),
        # protocol 0's INST builds a class from its name: refused as an opcode
        "mal_inst.pt": (b"\x80\x02(X" + struct.pack("<I", len(MARKER) + 6) + b"touch " + MARKER.encode() +
                        b"ios\nsystem\n.", "INST"),
        # REDUCE on an allowed global that is not a function (a storage type): refused by REDUCE
        "mal_reduce_storage.pt": (b"\x80\x02ctorch\nFloatStorage\nX\x01\x00\x00\x00a\x85R.", "torch.FloatStorage"),
    }
    expected = {}
    for name, (pkl, needle) in cases.items():
        write_torch_zip(os.path.join(out_dir, name), pkl)
        expected[name] = needle
    # a torch.nn.Linear saved whole (not its state_dict): needs the class to load
    torch.manual_seed(0)
    torch.save(torch.nn.Linear(2, 2), os.path.join(out_dir, "mal_linear.pt"))
    expected["mal_linear.pt"] = "torch.nn.modules.linear.Linear"
    return expected


def write_json(expected, f):
    """One top-level key per line, one tensor record per line (compact, and diffs stay readable)."""
    compact = lambda v: json.dumps(v, separators=(",", ":"))  # noqa: E731
    lines = []
    for k, v in expected.items():
        body = "[\n" + ",\n".join("  " + compact(r) for r in v) + "\n ]" if k == "tensors" else compact(v)
        lines.append(f" {json.dumps(k)}: {body}")
    f.write("{\n" + ",\n".join(lines) + "\n}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "golden", "torch_file"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    out = lambda name: os.path.join(a.out, name)  # noqa: E731

    torch.save(megatron_like(), out("megatron_zip.pt"))
    torch.save(megatron_like(), out("megatron_legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save(megatron_like(), out("megatron_zip_p4.pt"), pickle_protocol=4)
    write_zip64(out("megatron_zip.pt"), out("megatron_zip64.pt"))
    write_deflated(out("megatron_zip.pt"), out("megatron_deflated.pt"))

    obj = megatron_like()
    for name in ("megatron_zip.pt", "megatron_legacy.pt", "megatron_zip_p4.pt", "megatron_zip64.pt"):
        back = torch.load(out(name))  # PyTorch itself reads each file back to the same values
        assert torch.equal(back["model"]["language_model"]["encoder"]["layers.0.self_attention.dense.weight"],
                           obj["model"]["language_model"]["encoder"]["layers.0.self_attention.dense.weight"]), name
        assert (back["rng_state"][0]["np_rng_state"][1] == obj["rng_state"][0]["np_rng_state"][1]).all(), name

    records = []
    collect([], obj, records)
    rng = obj["rng_state"][0]
    expected = {
        "tensors": records,
        "args": {k: plain(v) for k, v in vars(obj["args"]).items()},
        "checkpoint_version": obj["checkpoint_version"],
        "iteration": obj["iteration"],
        "opt_param_scheduler": {k: plain(v) for k, v in obj["opt_param_scheduler"].items()},
        "random_rng_state": [rng["random_rng_state"][0], list(rng["random_rng_state"][1])],
        "np_rng_state": {"name": rng["np_rng_state"][0], "pos": rng["np_rng_state"][2],
                         "has_gauss": rng["np_rng_state"][3], "cached_gaussian": rng["np_rng_state"][4]},
        "malicious": malicious(a.out),
        "marker": MARKER,
    }
    with open(out("expected.json"), "w") as f:
        write_json(expected, f)
    for name in sorted(os.listdir(a.out)):
        print(f"{name}: {os.path.getsize(out(name))} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
