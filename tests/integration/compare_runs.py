"""Compares training runs with the first one given: per-step losses (metrics.jsonl) within 1e-5
relative, and the gathered weights (weights.safetensors, written by --save-weights) within 1e-5
relative, tensor by tensor in L2 norm (||a - b|| / ||a||). The largest single-element difference
(max |a - b| / max |a|) is printed too; it is not the criterion because AdamW normalises every
element's update by its own gradient scale, so an element whose gradient is a near-cancelling sum
moves by lr * (relative rounding of that sum), and any change of summation order (a layout, and to a
lesser degree a thread count) shows up there first: up to 3e-5 of the tensor's largest element here.

One slice is checked differently, and the reason is mathematics, not the layout: the key third of
each attn.c_attn.bias. Adding a constant vector to every key adds the same number to every score of
a query's row, which softmax ignores, so that bias's gradient is exactly zero and what the float
computation returns is rounding noise. AdamW divides by the square root of the second moment, so it
turns that noise into updates of a fixed size, and any change in summation order (a layout, a thread
count) moves those weights by up to lr * steps * 1e-2. For that slice we check that the whole model
still agrees within 1e-5 relative in L2 norm, and print the slice's own difference."""
import json
import math
import struct
import sys


def losses(d):
    return [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]


def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        s, e = v["data_offsets"]
        out[k] = (v["shape"], struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e]))
    return out


def key_bias_slice(name, shape):
    if name.endswith("attn.c_attn.bias"):
        third = shape[0] // 3
        return range(third, 2 * third)
    return range(0)


def main(ref, others):
    la, wa = losses(ref), tensors(ref + "/weights.safetensors")
    bad = []
    for d in others:
        lb, wb = losses(d), tensors(d + "/weights.safetensors")
        if len(lb) != len(la):
            bad.append(f"{d}: {len(lb)} logged steps, {ref} has {len(la)}")
            continue
        worst_loss = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
        if worst_loss > 1e-5:
            step = max(range(len(la)), key=lambda i: abs(la[i] - lb[i]) / abs(la[i]))
            bad.append(f"{d}: step {step + 1} loss {lb[step]} vs {la[step]}")
        worst_w, worst_name, kb, worst_elem = 0.0, "", 0.0, 0.0
        num = den = 0.0
        for name, (shape, a) in wa.items():
            if name not in wb:
                bad.append(f"{d}: tensor {name} missing")
                continue
            shape_b, b = wb[name]
            if shape_b != shape:
                bad.append(f"{d}: {name} shape {shape_b} vs {shape}")
                continue
            skip = key_bias_slice(name, shape)
            scale = max(abs(x) for x in a)
            keep = [i for i in range(len(a)) if i not in skip]
            diff = math.sqrt(sum((a[i] - b[i]) ** 2 for i in keep) / sum(a[i] ** 2 for i in keep))
            if diff > worst_w:
                worst_w, worst_name = diff, name
            worst_elem = max([worst_elem] + [abs(a[i] - b[i]) / scale for i in keep])
            kb = max([kb] + [abs(a[i] - b[i]) / scale for i in skip])
            num += sum((x - y) ** 2 for x, y in zip(a, b))
            den += sum(x * x for x in a)
        l2 = math.sqrt(num / den)
        print(f"{d:24s} steps {len(lb)}  loss rel {worst_loss:.1e}  weights L2 rel {worst_w:.1e} ({worst_name}), "
              f"max element {worst_elem:.1e}  model L2 rel {l2:.1e}  key-bias slice rel {kb:.1e}")
        if worst_w > 1e-5:
            bad.append(f"{d}: {worst_name} differs by {worst_w:.2e} relative")
        if l2 > 1e-5:
            bad.append(f"{d}: the weights differ by {l2:.2e} relative (L2)")
    if la[-1] >= la[0]:
        bad.append(f"{ref}: loss did not fall ({la[0]} -> {la[-1]})")
    for b in bad:
        print("FAIL:", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
