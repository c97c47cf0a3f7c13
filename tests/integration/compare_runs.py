"""Compares training runs with the first one given: per-step losses (metrics.jsonl) within 1e-5
relative, and the gathered weights (weights.safetensors, written by --save-weights) tensor by tensor.

The weight criterion, and why it is not ||a - b|| / ||a||. A layout changes only the order of float
sums (a GEMM's K split over tensor-parallel ranks, a ring all-reduce over data-parallel ranks), so
the two runs differ by rounding, and what matters is how far training turns rounding into weight
differences. AdamW's update of an element is lr * u with u = m_hat / (sqrt(v_hat) + eps), and u is
scale-free: to first order a gradient perturbed by dg changes u by at most about 2 * |dg| /
sqrt(v_hat) (the m_hat term gives |dg| / sqrt(v_hat), the v_hat term at most |u| times the same), i.e.
twice the gradient's relative rounding rho. After T steps an element has moved by at most
B = sum_t lr_t (|u| <= 1 for a steady gradient) and its error is at most 2 * sum_t lr_t * rho_t, so
the error scales with the movement budget B, not with the element's final value. For a tensor that
starts at zero (every bias) the final value is the sum of the updates, and when their signs alternate
it is much smaller than B: h.0.mlp.c_fc.bias of the layout test ends at rms 9.2e-3 per element
against B = 3.3e-2, so ||a - b|| / ||a|| there reports rho times 3.6 on top of the factor 2, and a
bias gradient is a sum over every token of the batch whose terms nearly cancel (rho ~ 1e-6 where a
well-conditioned sum has ~1e-7). That ratio measured how much the trajectory cancelled, not the layout:
it moved past 1e-5 on an AMD EPYC with OpenBLAS's Haswell kernels (dp4_mp2_vp: 1.09e-5, mp2 9.7e-6),
and one rank with the Haswell against the SkylakeX kernels already differs by 3.6e-6 there.

Held to 1e-5 of sqrt(n) * B, a layout may perturb a tensor's gradients by rho ~ 5e-6 (rms), 80 times
fp32's unit roundoff 6e-8: room for the sqrt(N) growth of a sum over N = 128 tokens (11x) and a
cancellation factor of 7, while a missing or doubled reduction (rho ~ 1) is off by 5 orders.

So each tensor is held to   ||a - b|| <= 1e-5 * max(||a||, sqrt(n) * B),   B = sum of the logged lr
of the reference run (every step must be logged): relative to the tensor itself, or to the distance
AdamW could have moved it, whichever is larger. For a tensor whose initial values dominate (every
weight matrix, LayerNorm gains) this is the old criterion. It still catches a real layout bug by
orders of magnitude: one wrong update of a single element of a 128-element bias is lr / (sqrt(128) *
B) ~ 4e-3 of the scale here (check_can_fail() shows on the reference's own weights that it fails).
On that EPYC the largest figure under the new criterion is 3.1e-6 (dp4_mp2_vp, Haswell kernels).
The whole model must also agree within 1e-5 relative in L2 norm. The largest single-element
difference (max |a - b| / max |a|) is printed; it is not a criterion, for the reason above.

One slice is checked differently, and the reason is mathematics, not the layout: the key third of
each attn.c_attn.bias. Adding a constant vector to every key adds the same number to every score of
a query's row, which softmax ignores, so that bias's gradient is exactly zero and what the float
computation returns is rounding noise (rho is unbounded). AdamW divides by the square root of the
second moment, so it turns that noise into updates of a fixed size, and any change in summation order
(a layout, a thread count) moves those weights by up to lr * steps * 1e-2. For that slice we check
that the whole model still agrees within 1e-5 relative in L2 norm, and print the slice's own
difference.

A floor from the reference itself (--floor DIR[,DIR...]: the reference's layout run again with its products
on the other fp32 GEMM backend, GF_GEMM=eigen, which changes only the order of float sums inside
each product; a thread count is no such probe where the products' bits do not depend on it, as the
MoE layers' grouped products do not; or, for a reference that accumulates micro-batches, the same
rank on the whole batch at once, which sums each weight gradient over the tokens in one piece). Some weight elements have a
gradient that is a sum of terms cancelling to near zero at some step (an MLP unit whose activation
is ~0 on every token routed to it, a dead unit of a model without biases): its rounding is then a
large fraction of it, and AdamW, which divides by the element's own running magnitude (at step 1
its update is lr * g / (|g| + eps)), turns that fraction into a fraction of a whole step. One rank
against itself at 1 and 2 threads then differs in such a tensor by more than the 1e-5 above
(MindSpeed-style GPT MoE, h.0.mlp.experts.3.c_proj.weight: 4.5e-5 after one step, element [3684],
whose step-1 gradient is ~1e-9; 3.0e-5 on Eigen against OpenBLAS). A layout cannot be held closer to one rank than one rank is to
itself: with a floor, each tensor is held to the larger of 1e-5 and twice its own floor figure (two
independent reorderings: the layout's and the reference's), and the loss and model L2 criteria stay
as they are. A missing or doubled reduction is still off by orders of magnitude."""
import json
import math
import struct
import sys


def rows(d):
    return [r for r in (json.loads(l) for l in open(d + "/metrics.jsonl")) if "loss" in r]


def losses(d):
    return [r["loss"] for r in rows(d)]


def movement_budget(d):
    """B = sum of the lr of every step; the run must have logged every step (per_print_times: 1)."""
    steps = [r["step"] for r in rows(d)]
    assert steps == list(range(1, len(steps) + 1)), f"{d}: every step must be logged (per_print_times: 1)"
    return sum(r["lr"] for r in rows(d))


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


# --rope=THETA,HEAD_DIM,SEQ: the runs rotate keys with RoPE at base THETA over SEQ positions (a key bias is
# then not exactly softmax-invariant, see ROPE_TURN below).
ROPE = None
# Under RoPE a key bias b enters query i's scores as q_i . R(f_p j) b for each rotary pair p, and since the score
# gradients of a query sum to zero, b's gradient in pair p is sum_j (R(f_p j)^T - I) dL/dk_j: at most f_p (SEQ - 1)
# times the size of its own terms, while its rounding stays theirs. A pair that turns less than ROPE_TURN radians
# over the sequence has a gradient >= 100x below its terms, and AdamW turns a reordered sum there into a visible
# fraction of each update (Qwen2, theta 1e6, head_dim 16, SEQ 32: pairs 5-7, f_p (SEQ - 1) = 5.5e-3, 9.8e-4,
# 1.7e-4), as it does for the key third of GPT-2's c_attn.bias (exactly invariant). Between ROPE_TURN and one radian
# the same holds in proportion: a key bias element's difference is weighted by min(1, f_p (SEQ - 1)) (turn_weights;
# Qwen2-MoE's pairs 3 and 4, 0.17 and 0.031 rad, moved 6 and 30 times a turning pair's under ring cp2). The same holds for the rows of
# k_proj.weight in those pairs along the tokens' mean input x: their gradient sum_j (R_j^T dL/dk_j) x_j^T has the key
# bias's gradient times mean(x) as a part (Qwen2's layer-1 row 29, pair 5: 8.8e-6 under mp2, 0.8e-6 under the GEMM
# probe, every row outside the slow pairs <= 5.7e-6). Those elements are left to the model L2 criterion and printed
# as the key-bias slice.
ROPE_TURN = 1e-2


def key_bias_slice(name, shape):
    if name.endswith("attn.c_attn.bias"):
        third = shape[0] // 3
        return range(third, 2 * third)
    if ROPE and (name.endswith("self_attn.k_proj.bias") or name.endswith("self_attn.k_proj.weight")):
        theta, d, seq = ROPE
        cols = shape[1] if len(shape) == 2 else 1
        return [i for i in range(shape[0] * cols)
                if theta ** (-2.0 * (i // cols % d % (d // 2)) / d) * (seq - 1) < ROPE_TURN]
    return range(0)


def turn_weights(name, shape):
    """Per element of a RoPE key bias, min(1, f_p (SEQ - 1)): its gradient is at most that fraction of its terms
    (ROPE_TURN's derivation), so its rounding, and AdamW's difference from it, is 1 / that larger than a turning
    element's; the difference is weighted back by it. Other tensors: None (every element weight 1)."""
    if not (ROPE and name.endswith("self_attn.k_proj.bias")):
        return None
    theta, d, seq = ROPE
    return [min(1.0, theta ** (-2.0 * (i % d % (d // 2)) / d) * (seq - 1)) for i in range(shape[0])]


def tensor_error(name, shape, a, b, budget):
    """(||a - b|| / max(||a||, sqrt(n) * budget), ||a - b|| / ||a||) over the checked elements (a RoPE key bias's
    differences weighted by turn_weights)."""
    skip = set(key_bias_slice(name, shape))
    keep = [i for i in range(len(a)) if i not in skip]
    w = turn_weights(name, shape)
    diff = math.sqrt(sum(((a[i] - b[i]) * (w[i] if w else 1.0)) ** 2 for i in keep))
    norm = math.sqrt(sum(a[i] ** 2 for i in keep))
    return diff / max(norm, math.sqrt(len(keep)) * budget), diff / norm


# The tensors check_can_fail perturbs: the final norm (every model has one), GPT-2's zero-initialised MLP bias,
# attention output and MoE router, the Llama-like models' kinds (an MLP or expert down projection, a q/k/v bias,
# a q/k norm, a router), and LoRA's adapters (a run that trains nothing else).
CAN_FAIL_KINDS = ("ln_f.weight", "model.norm.weight", "c_fc.bias", "attn.c_proj.weight", "mlp.router.weight",
                  "mlp.down_proj.weight", "down_proj.weight", "k_proj.bias", "q_norm.weight", "mlp.gate.weight",
                  "block_sparse_moe.gate.weight", "lora_A.weight", "lora_B.weight")


def check_can_fail(wa, budget, la):
    """The criterion is not vacuous: one wrong update (lr of the last step) of one element of each kind of
    CAN_FAIL_KINDS present must fail it (and at least one kind is present)."""
    lr = budget / len(la) if la else 0.0
    checked = 0
    for name, (shape, a) in wa.items():
        if not name.endswith(CAN_FAIL_KINDS):
            continue
        b = list(a)
        b[0] += lr
        err, _ = tensor_error(name, shape, a, b, budget)
        assert err > 1e-5, f"self-check: a wrong update of {name}[0] by lr {lr:.1e} passes ({err:.1e})"
        checked += 1
    assert checked > 0, "self-check: none of the model's tensors is of a kind check_can_fail perturbs"


def nearest_tie(ref, before=None):
    """The reference's routing choice nearest a tie (moe[].margin, ops::RouteStats::margin: the least gap between a
    token's last chosen expert or group and the best not chosen), over its steps before `before`: (margin, step,
    layer), or None for a run without MoE statistics. A layout's other summation orders move each score by rounding
    (the nearest choice's own figure moved by up to 1.0e-6 between one rank and a layout over the MoE equivalence
    scripts of this suite, 20 steps), so a choice nearer a tie than that may go the other way and the two runs then
    differ by a token's routing, which is no layout's error: DeepSeek-V2-Lite's families run on seed 5 met an exact
    tie (margin 0) at step 9 that every layout but dp2 resolved otherwise. Each comparison prints both figures."""
    near = [(m["margin"], r["step"], m["layer"]) for r in rows(ref) for m in r.get("moe", [])
            if m.get("margin") is not None and (before is None or r["step"] < before)]
    return min(near) if near else None


MOVED = {}  # per compared run: how far it moved the nearest choice to a tie, while it routed as the reference


def compare_moe(ref, d):
    """MoE runs: at every step and MoE layer the same dropped count and assignments (which tokens drop
    depends on the sample alone, never on the layout) and the router losses within 1e-5 relative."""
    ra, rb = rows(ref), rows(d)
    if not any("moe" in r for r in ra):
        return []
    ra = [r for r in ra if r["step"] >= rb[0]["step"]] if rb else ra  # a resumed run: its steps
    bad, worst, moved, same_routing = [], 0.0, 0.0, True
    for x, y in zip(ra, rb):
        if "moe" not in y:
            return [f"{d}: step {x['step']} has no MoE statistics"]
        for a, b in zip(x["moe"], y["moe"]):
            same_routing = same_routing and a.get("tokens_per_expert") == b.get("tokens_per_expert")
            if same_routing and a.get("margin") is not None and b.get("margin") is not None:
                moved = max(moved, abs(a["margin"] - b["margin"]))
            for k in ("layer", "dropped", "assignments", "tokens_max"):
                if a[k] != b[k]:
                    bad.append(f"{d}: step {x['step']} layer {a['layer']} {k} {b[k]} vs {a[k]}")
            for k in ("aux_loss", "z_loss"):
                if a[k] != 0:
                    worst = max(worst, abs(a[k] - b[k]) / abs(a[k]))
    if worst > 1e-5:
        bad.append(f"{d}: router losses differ by {worst:.2e} relative")
    MOVED[d] = moved
    drops = sum(m["dropped"] for r in ra for m in r["moe"])
    print(f"{d:24s} MoE: dropped counts and assignments equal at every step and layer ({drops} drops in all), "
          f"router losses rel {worst:.1e}, nearest choice to a tie moved by {moved:.1e}")
    return bad


# A probe's figure may widen a tensor's allowance up to twice this: 1e-4 of max(||a||, sqrt(n) B) is a
# gradient perturbation of rho ~ 5e-5 (rms), 800 times fp32's unit roundoff, the most a reordered sum over a
# near-cancelling row has been seen to reach (one rank, OpenBLAS against oneDNN: 8.3e-6 on the tensor, a row
# of it 5.5e-5); a missing or doubled reduction (rho ~ 1) stays four orders beyond it.
FLOOR_CEILING = 1e-4


def main(ref, others):
    global ROPE
    if others and others[0].startswith("--rope="):
        theta, d, seq = others[0][len("--rope="):].split(",")
        ROPE, others = (float(theta), int(d), int(seq)), others[1:]
    floor_dirs = []
    if others and others[0].startswith("--floor="):
        floor_dirs, others = others[0][len("--floor="):].split(","), others[1:]
    la, wa = losses(ref), tensors(ref + "/weights.safetensors")
    budget = movement_budget(ref)
    check_can_fail(wa, budget, la)
    print(f"{ref}: movement budget B = sum of lr = {budget:.3e} per element")
    floor = {}
    bad = []
    tie = nearest_tie(ref)
    if tie:
        print(f"{ref}: the routing choice nearest a tie: {tie[0]:.1e} (step {tie[1]}, layer {tie[2]})")
    for floor_dir in floor_dirs:  # several probes: each tensor's floor is the largest of their figures
        wf = tensors(floor_dir + "/weights.safetensors")
        figures = {name: tensor_error(name, shape, a, wf[name][1], budget)[0] for name, (shape, a) in wa.items()}
        for name, f in figures.items():
            floor[name] = max(floor.get(name, 0.0), f)
        name = max(figures, key=figures.get)
        print(f"{floor_dir}: the reference against itself with other summation orders: worst {figures[name]:.1e} ({name})")
        # The ceiling: a probe is one rank against itself, rounding only; a figure above FLOOR_CEILING is a bug
        # on the probe's own code path, which must not widen the allowance of every layout it judges.
        if figures[name] > FLOOR_CEILING:
            bad.append(f"{floor_dir}: the probe's {name} moved by {figures[name]:.2e} of max(||a||, sqrt(n) B), above the "
                       f"floor's ceiling {FLOOR_CEILING:g}: a probe that far from its reference is not rounding")
    for d in others:
        bad_before = len(bad)
        lb, wb = losses(d), tensors(d + "/weights.safetensors")
        # A run resumed from a checkpoint logs only the steps after it: those are compared.
        steps_a, steps_b = [r["step"] for r in rows(ref)], [r["step"] for r in rows(d)]
        first = 0
        if steps_b and steps_b != steps_a and steps_b == steps_a[len(steps_a) - len(steps_b):]:
            first = len(steps_a) - len(steps_b)
            print(f"{d}: resumed, steps {steps_b[0]}-{steps_b[-1]} compared")
        elif len(lb) != len(la):
            bad.append(f"{d}: {len(lb)} logged steps, {ref} has {len(la)}")
            continue
        worst_loss = max(abs(x - y) / abs(x) for x, y in zip(la[first:], lb))
        if worst_loss > 1e-5:
            i = max(range(len(lb)), key=lambda i: abs(la[first + i] - lb[i]) / abs(la[first + i]))
            bad.append(f"{d}: step {steps_b[i]} loss {lb[i]} vs {la[first + i]}")
        bad += compare_moe(ref, d)
        worst_w, worst_name, worst_old, kb, worst_elem = 0.0, "", 0.0, 0.0, 0.0
        num = den = 0.0
        for name, (shape, a) in wa.items():
            if name not in wb:
                bad.append(f"{d}: tensor {name} missing")
                continue
            shape_b, b = wb[name]
            if shape_b != shape:
                bad.append(f"{d}: {name} shape {shape_b} vs {shape}")
                continue
            err, old = tensor_error(name, shape, a, b, budget)
            err /= max(1.0, 2.0 * floor.get(name, 0.0) / 1e-5)  # in units of the tensor's allowance / 1e-5
            if err > worst_w:
                worst_w, worst_name = err, name
            worst_old = max(worst_old, old)
            skip = key_bias_slice(name, shape)
            scale = max(abs(x) for x in a)
            worst_elem = max([worst_elem] + [abs(a[i] - b[i]) / scale for i in range(len(a)) if i not in skip])
            kb = max([kb] + [abs(a[i] - b[i]) / scale for i in skip])
            num += sum((x - y) ** 2 for x, y in zip(a, b))
            den += sum(x * x for x in a)
        l2 = math.sqrt(num / den)
        print(f"{d:24s} steps {len(lb)}  loss rel {worst_loss:.1e}  weights {worst_w:.1e} ({worst_name}; "
              f"||a-b||/||a|| {worst_old:.1e}), max element {worst_elem:.1e}  model L2 rel {l2:.1e}  "
              f"key-bias slice rel {kb:.1e}")
        if worst_w > 1e-5:
            bad.append(f"{d}: {worst_name} differs by {worst_w:.2e} of max(||a||, sqrt(n) B)"
                       + (" (scaled to the floor's allowance)" if floor else ""))
        if l2 > 1e-5:
            bad.append(f"{d}: the weights differ by {l2:.2e} relative (L2)")
        tie = nearest_tie(ref)
        if len(bad) > bad_before and tie and d in MOVED:
            bad.append(f"{d}: (the reference's routing choice nearest a tie: {tie[0]:.1e} at step {tie[1]} layer {tie[2]}; "
                       f"this layout moved the nearest choice by up to {MOVED[d]:.1e} while it routed the same: a "
                       f"choice within that of a tie may go the other way, which is no layout's error)")
    if la[-1] >= la[0]:
        bad.append(f"{ref}: loss did not fall ({la[0]} -> {la[-1]})")
    for b in bad:
        print("FAIL:", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
