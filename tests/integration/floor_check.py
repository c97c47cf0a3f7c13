"""floor_check.py MODE REF PROBES LAYOUTS [W0] (PROBES, LAYOUTS: comma-separated run directories).
MODE train: step losses, per-tensor weights (compare_runs.py's figure) and model L2, each layout held
to max(1e-5, 2 F), F the largest probe figure. MODE grad: each
tensor's step-1 gradient (w1 - w0), relative difference held to 2 F.

PROBES are the reference run again under other summation orders (another attention core, another
GEMM backend, accumulated micro-batches); tests/integration/context_parallel_rows.sh derives the rule."""
import math
import sys
import compare_runs as cr  # noqa: E402

mode, ref, probes, layouts = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4].split(",")


def l2(x):
    return math.sqrt(sum(v * v for v in x))


def figures(d, wa, budget, la, w0):
    wb = cr.tensors(d + "/weights.safetensors")
    out = {}
    if mode == "grad":
        for name, (shape, a) in wa.items():
            b, z = wb[name][1], w0[name][1]
            out[name] = l2([x - y for x, y in zip(a, b)]) / l2([x - y for x, y in zip(a, z)])
        return out
    lb = cr.losses(d)
    assert len(lb) == len(la), f"{d}: {len(lb)} steps, {ref} has {len(la)}"
    out["loss"] = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
    num = den = 0.0
    for name, (shape, a) in wa.items():
        b = wb[name][1]
        assert wb[name][0] == shape, (d, name)
        out[name] = cr.tensor_error(name, shape, a, b, budget)[0]
        num += sum((x - y) ** 2 for x, y in zip(a, b))
        den += sum(x * x for x in a)
    out["model L2"] = math.sqrt(num / den)
    return out


wa = cr.tensors(ref + "/weights.safetensors")
la = cr.losses(ref)
budget = cr.movement_budget(ref) if mode == "train" else 0.0
w0 = cr.tensors(sys.argv[5] + "/weights.safetensors") if mode == "grad" else None
floor = {}
for p in probes:
    for k, v in figures(p, wa, budget, la, w0).items():
        floor[k] = max(floor.get(k, 0.0), v)
least = 1e-5 if mode == "train" else 0.0
allow = {k: max(least, 2 * v) for k, v in floor.items()}
worst_f = max((k for k in floor if k not in ("loss", "model L2")), key=floor.get)
print(f"{mode}: floor from {'/'.join(probes)}: worst tensor {floor[worst_f]:.1e} ({worst_f})"
      + (f", loss {floor['loss']:.1e}, model L2 {floor['model L2']:.1e}" if mode == "train" else ""))
bad = []
for d in layouts:
    f = figures(d, wa, budget, la, w0)
    ratio = {k: v / allow[k] for k, v in f.items()}
    k = max(ratio, key=ratio.get)
    tensors = {n: v for n, v in f.items() if n not in ("loss", "model L2")}
    t = max(tensors, key=tensors.get)
    print(f"  {d:10s} worst tensor {f[t]:.1e} ({t})"
          + (f"  loss {f['loss']:.1e}  model L2 {f['model L2']:.1e}" if mode == "train" else "")
          + f"  | tightest: {k} at {ratio[k]:.2f} of its allowance {allow[k]:.1e}")
    bad += [f"{d}: {n} {v:.2e} > allowance {allow[n]:.2e} (2 x probe floor {floor[n]:.2e})"
            for n, v in f.items() if v > allow[n]]
if mode == "train" and la[-1] >= la[0]:
    bad.append(f"{ref}: loss did not fall ({la[0]} -> {la[-1]})")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
