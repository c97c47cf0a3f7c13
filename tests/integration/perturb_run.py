"""perturb_run.py SRC DST TENSOR DELTA [--row]: a copy of run directory SRC (its metrics.jsonl and weights.safetensors)
as DST with element 0 of TENSOR (with --row: its whole first row, shape[1] elements) moved by DELTA, the fault tests/integration/proof_faults.sh injects. DELTA is a number, or
`lr` (the mean logged learning rate, as compare_runs.check_can_fail takes it: one wrong update of that element), or `rel:X` (X times the tensor's
L2 norm). The safetensors file is rewritten with the same header (names, shapes, offsets) and only those bytes
changed."""
import json
import math
import os
import shutil
import struct
import sys

src, dst, name, delta = sys.argv[1:5]
row = "--row" in sys.argv[5:]
os.makedirs(dst, exist_ok=True)
shutil.copy(os.path.join(src, "metrics.jsonl"), os.path.join(dst, "metrics.jsonl"))
raw = bytearray(open(os.path.join(src, "weights.safetensors"), "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
if name not in head:
    sys.exit(f"perturb_run.py: {src} has no tensor {name}")
entry = head[name]
assert entry["dtype"] == "F32", entry
start, end = entry["data_offsets"]
at = 8 + n + start
values = struct.unpack("<%df" % ((end - start) // 4), raw[at:8 + n + end])
if delta == "lr":
    rows = [json.loads(l) for l in open(os.path.join(src, "metrics.jsonl"))]
    steps = [r for r in rows if "loss" in r]
    d = sum(r["lr"] for r in steps) / len(steps)
elif delta.startswith("rel:"):
    d = float(delta[4:]) * math.sqrt(sum(v * v for v in values))
else:
    d = float(delta)
count = entry["shape"][1] if row else 1
for i in range(count):
    raw[at + 4 * i:at + 4 * i + 4] = struct.pack("<f", values[i] + d)
open(os.path.join(dst, "weights.safetensors"), "wb").write(raw)
print(f"{dst}: {name}[0:{count}] moved by {d:.3e}")
