"""A small safetensors reader (F32, BF16, I32) and writer (F32, BF16) with torch, for the integration scripts' checks:
read(path) -> ({name: tensor}, metadata); write(path, {name: tensor}, metadata)."""
import json
import struct

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "I32": torch.int32}


def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for k, v in header.items():
        s, e = v["data_offsets"]
        raw = bytearray(b[8 + n + s:8 + n + e])
        out[k] = torch.frombuffer(raw, dtype=DTYPES[v["dtype"]]).reshape(v["shape"]).clone()
    return out, meta


def write(path, tensors, meta=None):
    header, data, off = {"__metadata__": meta or {"format": "pt"}}, [], 0
    for k in sorted(tensors):
        t = tensors[k].contiguous()
        bf16 = t.dtype == torch.bfloat16
        raw = t.view(torch.int16).numpy().tobytes() if bf16 else t.float().numpy().tobytes()
        header[k] = {"dtype": "BF16" if bf16 else "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        data.append(raw)
        off += len(raw)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(hj)) + hj + b"".join(data))
