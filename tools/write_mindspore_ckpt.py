#!/usr/bin/python3
"""Write a Hugging Face GPT-2 safetensors file as MindFormers' GPT-2 in MindSpore's .ckpt format.

Run with Debian's Python (numpy and python3-protobuf; the pyenv `python3` on PATH has neither):

    /usr/bin/python3 tools/write_mindspore_ckpt.py model.safetensors gpt2.ckpt \\
        [--dtype float32|float16|bfloat16] [--with-optimizer-state] [--chunk-bytes N] [--crc]

What a MindFormers user would hold after running MindFormers' own converter and, with
--with-optimizer-state, after training: it is the test input of gridformer's .ckpt reader
(models/weights/mindspore_checkpoint.h), written without MindSpore or torch, from published sources:

  * Names and layouts: mindformers/models/gpt2/convert_weight.py (mindspore-lab/mindformers),
    followed exactly: its ms_name / torch_name and addition_* lists, its split of each layer's
    fused attn.c_attn weight and bias into three along the last dim (q, k, v -> attention.dense1,
    dense2, dense3), the transpose of those three weights to [out, in], no other transpose, and only
    the tensors of its map written (a tied lm_head.weight is not; the attn.bias / attn.masked_bias
    buffers of older transformers are, as attention.beta / masked_beta). Input names may carry
    Hugging Face's `transformer.` prefix (newer transformers save it; the original gpt2
    checkpoint convert_weight.py reads has none), which is dropped first.
  * The file: MindSpore's checkpoint.proto (mindspore-ai/mindspore, mindspore/ccsrc/utils/), copied
    to models/weights/proto/mindspore_checkpoint.proto; this script runs `protoc --python_out` on it into a
    temporary directory and writes with the generated classes. As serialization.py's _exec_save
    does: one serialized Checkpoint holding one Value per tensor, concatenated; tensor_type
    "Float32" / "Float16" / "BFloat16" / "Int32" / "Int64"; the row-major little-endian bytes; a
    tensor over --chunk-bytes (MindSpore: 512 MiB) cut into several Values with the same tag and the
    full dims; scalars with empty dims; with --crc the trailer b"crc_num" + the CRC-32 of all bytes
    before as a 10-byte big-endian integer (save_checkpoint's crc_check).
  * --with-optimizer-state adds what a MindFormers training checkpoint holds besides the weights:
    the optimizer's learning_rate and global_step, AdamW's adam_m.<name> / adam_v.<name> moments
    (mindformers/core/optim), the loss-scale cell's scale_sense, current_iterator_step and
    last_overflow_iterator_step, and CheckpointMonitor's epoch_num, step_num and loss_scale.

--dtype float16 / bfloat16 rounds the weights to nearest even (numpy's float16 cast; bfloat16 by
hand, numpy has none), as MindSpore's cast does; an input already in that type is written exactly.
"""
import argparse
import binascii
import importlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO = os.path.join(ROOT, "models", "weights", "proto", "mindspore_checkpoint.proto")

# mindformers/models/gpt2/convert_weight.py: per-layer names, MindFormers <- Hugging Face (torch).
MS_NAME = [
    "backbone.blocks.{}.layernorm1.gamma",
    "backbone.blocks.{}.layernorm1.beta",
    "backbone.blocks.{}.layernorm2.gamma",
    "backbone.blocks.{}.layernorm2.beta",
    "backbone.blocks.{}.attention.beta",
    "backbone.blocks.{}.attention.masked_beta",
    "backbone.blocks.{}.attention.projection.weight",
    "backbone.blocks.{}.attention.projection.bias",
    "backbone.blocks.{}.attention.dense1.weight",
    "backbone.blocks.{}.attention.dense1.bias",
    "backbone.blocks.{}.attention.dense2.weight",
    "backbone.blocks.{}.attention.dense2.bias",
    "backbone.blocks.{}.attention.dense3.weight",
    "backbone.blocks.{}.attention.dense3.bias",
    "backbone.blocks.{}.output.mapping.weight",
    "backbone.blocks.{}.output.mapping.bias",
    "backbone.blocks.{}.output.projection.weight",
    "backbone.blocks.{}.output.projection.bias",
]
TORCH_NAME = [
    "h.{}.ln_1.weight",
    "h.{}.ln_1.bias",
    "h.{}.ln_2.weight",
    "h.{}.ln_2.bias",
    "h.{}.attn.bias",
    "h.{}.attn.masked_bias",
    "h.{}.attn.c_proj.weight",
    "h.{}.attn.c_proj.bias",
    "h.{}.attn.c_attn.weight.q",
    "h.{}.attn.c_attn.bias.q",
    "h.{}.attn.c_attn.weight.k",
    "h.{}.attn.c_attn.bias.k",
    "h.{}.attn.c_attn.weight.v",
    "h.{}.attn.c_attn.bias.v",
    "h.{}.mlp.c_fc.weight",
    "h.{}.mlp.c_fc.bias",
    "h.{}.mlp.c_proj.weight",
    "h.{}.mlp.c_proj.bias",
]
ADDITION_MINDSPORE = [
    "backbone.layernorm.gamma",
    "backbone.layernorm.beta",
    "backbone.embedding.word_embedding.embedding_table",
    "backbone.embedding.position_embedding.embedding_table",
]
ADDITION_TORCH = ["ln_f.weight", "ln_f.bias", "wte.weight", "wpe.weight"]

MS_TYPE = {"float32": "Float32", "float16": "Float16", "bfloat16": "BFloat16"}


def read_safetensors(path):
    """{name: float32 array} and {name: safetensors dtype}: 8-byte LE header size, JSON header, data."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out, dtypes = {}, {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        buf = data[b:e]
        if t["dtype"] == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif t["dtype"] == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            sys.exit(f"{path}: tensor {name} has dtype {t['dtype']}; GPT-2 weights are F32, F16 or BF16")
        out[name] = a.reshape(t["shape"])
        dtypes[name] = t["dtype"]
    return out, dtypes


def to_bfloat16_bits(a):
    """float32 -> bfloat16 bit patterns, round to nearest even (NaN kept quiet)."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), np.uint16(0x7FC0), rounded)


def tensor_bytes(a, dtype):
    if dtype == "float32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if dtype == "float16":
        return np.ascontiguousarray(a.astype(np.float16), dtype="<f2").tobytes()
    return np.ascontiguousarray(to_bfloat16_bits(a), dtype="<u2").tobytes()


def load_proto_module(tmp):
    try:
        subprocess.run(["protoc", f"--python_out={tmp}", f"-I{os.path.dirname(PROTO)}", PROTO], check=True)
    except FileNotFoundError:
        sys.exit("protoc not found: install protobuf-compiler (scripts/setup.sh does)")
    sys.path.insert(0, tmp)
    return importlib.import_module("mindspore_checkpoint_pb2")


def convert(weights):
    """convert_weight.py's convert_pt_to_ms, without torch/MindSpore: [(MindFormers name, array)]."""
    state = {}
    for name, value in weights.items():  # split_torch_attention
        if name.endswith("attn.c_attn.weight") or name.endswith("attn.c_attn.bias"):
            q, k, v = np.split(value, 3, -1)
            state[name + ".q"], state[name + ".k"], state[name + ".v"] = q, k, v
        else:
            state[name] = value
    layers = 1 + max((int(m.group(1)) for m in (re.match(r"h\.(\d+)\.", n) for n in state) if m), default=-1)
    mapped = [(ms.format(i), pt.format(i)) for i in range(layers) for ms, pt in zip(MS_NAME, TORCH_NAME)]
    mapped += list(zip(ADDITION_MINDSPORE, ADDITION_TORCH))
    out = []
    for src, tgt in mapped:
        if tgt in state:
            value = state[tgt]
            if "c_attn.weight" in tgt:
                value = value.transpose([1, 0])
            out.append((src, value))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", help="Hugging Face GPT-2 .safetensors (F32, F16 or BF16)")
    ap.add_argument("output", help="the .ckpt to write")
    ap.add_argument("--dtype", choices=sorted(MS_TYPE), default="float32", help="the weights' type in the .ckpt")
    ap.add_argument("--with-optimizer-state", action="store_true",
                    help="also write AdamW moments, step counters and loss-scale state, as a training checkpoint")
    ap.add_argument("--chunk-bytes", type=int, default=512 * 1024 * 1024,
                    help="cut tensors into Values of at most this many bytes (MindSpore: 512 MiB)")
    ap.add_argument("--crc", action="store_true", help="append save_checkpoint(crc_check=True)'s CRC-32 trailer")
    args = ap.parse_args()
    if args.chunk_bytes <= 0:
        ap.error("--chunk-bytes must be positive")

    raw, _ = read_safetensors(args.input)
    weights = {}
    for name, a in raw.items():
        n = name[len("transformer."):] if name.startswith("transformer.") else name
        if n in weights:
            sys.exit(f"{args.input}: {n} appears with and without the transformer. prefix")
        weights[n] = a
    entries = [(name, MS_TYPE[args.dtype], list(a.shape), tensor_bytes(a, args.dtype)) for name, a in convert(weights)]
    if not entries:
        sys.exit(f"{args.input}: no GPT-2 tensor (wte.weight, h.0.ln_1.weight, ...) found")
    if args.with_optimizer_state:
        scalar = lambda name, typ, fmt, x: (name, typ, [], struct.pack(fmt, x))
        state = [("learning_rate", "Float32", [], struct.pack("<f", 3e-4)),
                 ("global_step", "Int32", [1], struct.pack("<i", 100))]
        for prefix, fill in (("adam_m.", 1e-3), ("adam_v.", 1e-6)):
            for name, typ, dims, b in entries:
                n = int(np.prod(dims)) if dims else 1
                state.append((prefix + name, "Float32", dims, np.full(n, fill, dtype="<f4").tobytes()))
        state += [scalar("scale_sense", "Float32", "<f", 65536.0),
                  scalar("current_iterator_step", "Int32", "<i", 100),
                  scalar("last_overflow_iterator_step", "Int32", "<i", 0),
                  scalar("epoch_num", "Int64", "<q", 1), scalar("step_num", "Int64", "<q", 100),
                  scalar("loss_scale", "Float32", "<f", 65536.0)]
        entries += state

    with tempfile.TemporaryDirectory() as tmp:
        pb = load_proto_module(tmp)
        out_tmp = args.output + ".tmp"
        crc, values = 0, 0
        with open(out_tmp, "wb") as f:
            for name, typ, dims, b in entries:
                for i in range(0, max(len(b), 1), args.chunk_bytes):
                    ckpt = pb.Checkpoint()
                    value = ckpt.value.add()
                    value.tag = name
                    value.tensor.dims.extend(dims)
                    value.tensor.tensor_type = typ
                    value.tensor.tensor_content = b[i:i + args.chunk_bytes]
                    s = ckpt.SerializeToString()
                    crc = binascii.crc32(s, crc)
                    f.write(s)
                    values += 1
            if args.crc:
                f.write(b"crc_num" + crc.to_bytes(10, byteorder="big"))
        os.replace(out_tmp, args.output)
    print(f"{args.output}: {len(entries)} tensors in {values} entries ({args.dtype}"
          f"{', with optimizer state' if args.with_optimizer_state else ''}{', CRC' if args.crc else ''}), "
          f"{os.path.getsize(args.output)} bytes")


if __name__ == "__main__":
    main()
