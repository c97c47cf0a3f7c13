#!/usr/bin/python3
"""Where a training step's time goes, from the step timeline (`profile: True` with `profile_ops: True`).

    /usr/bin/python3 bench/step_breakdown.py [--build build] [--threads 2]
        [--runs gpt2-124M:fp32:1024:2,gpt2-124M:bf16:1024:2,llama-tiny:fp32,mixtral-tiny:fp32]
        [--batch B] [--steps 4] [--json FILE] [--top N]
    /usr/bin/python3 bench/step_breakdown.py --threads 1,2 --top 12 --runs gpt2-124M:bf16:1024:2
        # each run at each thread count, and each category's speedup from the fewest to the most
        # threads: work that stays serial (speedup near 1 on 2 cores) is what a 16-core step waits on

Each run is SHAPE:DTYPE[:SEQ[:BATCH]] (shapes of bench/train_vs_pytorch.py's SHAPES, their batch
unless --batch or BATCH; SEQ overrides the sequence length). One `gridformer train` per run on synthetic tokens,
profiling steps 2..STEPS (step 1 warms up), with one span per op (profile_ops: runner/report/
profiler.h). Every span's exclusive time (its duration minus its direct children's; the spans of one
thread nest) is summed per category over the profiled steps:

  GEMM         the fp32 and bf16 matrix products (gemm, gemm_bf16) and the grouped expert products
  attention    the attention kernels (fused, unfused, ring) apart from GEMMs they call outside a
               parallel region (the per-head products inside OpenMP loops stay attention's)
  norms        LayerNorm / RMSNorm forward and backward
  elementwise  activations, SwiGLU, RoPE, dropout, embedding lookups and their gradients, cross-entropy
  MoE routing  the router's softmax, top-k and backward
  dtype conversion  bf16/fp16 runs: weights and activations rounded to the compute dtype (the
               products' operands, their outputs' rounding, the weights' copy once per step)
  other compute  the model's own time around the ops (bias adds, residual adds, copies, memsets,
               dtype conversions, MoE dispatch and combine)
  optimizer    the optimizer step, gradient norm, clipping, zeroing and unscaling
  communication  collectives and waits (none on one rank)
  data         the batch
  untraced     the step span's own time outside every span below it

Percentages are of the profiled steps' total (the step spans' durations). The recording costs a
clock read per op; the script prints the run's median step time with and without the profile to
show it (step 1 excluded both times).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_vs_pytorch as tvp  # noqa: E402

OPTIMIZER = {"optimizer", "grad norm", "grad clip", "zero grads", "unscale grads", "param all-gather"}
ORDER = ["GEMM", "attention", "norms", "elementwise", "MoE routing", "dtype conversion", "other compute", "optimizer", "communication",
         "data", "untraced", "other"]


# The trace's span categories (runner/report/profiler.h, core/trace/trace.h) and what they count as.
CATEGORIES = {"gemm": "GEMM", "attention": "attention", "norm": "norms", "elementwise": "elementwise",
              "moe": "MoE routing", "convert": "dtype conversion", "compute": "other compute",
              "pipeline": "other compute", "comm": "communication", "wait": "communication", "data": "data"}


def category(ev):
    cat, name = ev.get("cat", ""), ev.get("name", "")
    if cat == "step":
        if name.startswith("step "):
            return "untraced"
        return "optimizer" if name in OPTIMIZER else "other"
    return CATEGORIES.get(cat, "other")


def breakdown(trace_path, by_name=None):
    """{category: exclusive microseconds} over the step spans of the trace's rank 0, thread 0, and
    the step spans' total microseconds. by_name, a dict, gets {(category, span name): exclusive
    microseconds} too."""
    events = [e for e in json.load(open(trace_path))["traceEvents"]
              if e.get("ph") == "X" and e.get("pid", 0) == 0 and e.get("tid", 0) == 0]
    events.sort(key=lambda e: (e["ts"], -e["dur"]))
    steps = [e for e in events if e.get("cat") == "step" and e["name"].startswith("step ")]
    total = sum(e["dur"] for e in steps)
    excl = {}
    for st in steps:
        inside = [e for e in events if e["ts"] >= st["ts"] and e["ts"] + e["dur"] <= st["ts"] + st["dur"] + 1e-3]
        # direct children by a stack over the nested spans (sorted by start, longer first)
        stack, own = [], {}
        for e in inside:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
                stack.pop()
            key = id(e)
            own[key] = [e, e["dur"]]
            if stack:
                own[id(stack[-1])][1] -= e["dur"]
            stack.append(e)
        for e, t in own.values():
            c = category(e)
            excl[c] = excl.get(c, 0.0) + max(t, 0.0)
            if by_name is not None:
                nm = re.sub(r"\d+", "N", e.get("name", ""))  # "layer 3 fwd" -> "layer N fwd"
                by_name[(c, nm)] = by_name.get((c, nm), 0.0) + max(t, 0.0)
    return excl, total, len(steps)


def profile_run(spec, threads, a, work, env_extra):
    """One plain and one profiled `gridformer train` of SHAPE:DTYPE[:SEQ[:BATCH]] on `threads`
    threads: the row of the JSON record, with the (category, span name) exclusive times in "_names"."""
    parts = spec.split(":")
    shape, dtype = parts[0], parts[1] if len(parts) > 1 else "fp32"
    s = dict(tvp.SHAPES[shape])
    if len(parts) > 2:
        s["seq_length"] = int(parts[2])
        s["max_position_embeddings"] = max(1024, int(parts[2]))
    if len(parts) > 3:
        s["batch_size"] = int(parts[3])
    elif a.batch:
        s["batch_size"] = a.batch
    extra = dict(compute_dtype="bfloat16") if dtype == "bf16" else None
    tag = spec.replace(":", "_").replace("-", "_") + f"_t{threads}"
    prof = ["--set", "profile=True", "--set", "profile_start_step=2", "--set", f"profile_stop_step={a.steps}",
            "--set", "profile_ops=True"]
    plain = tvp.gridformer_train(s, a.steps, threads, 0.33, work, a.build, tag=tag + "_plain",
                                 model_extra=extra, env_extra=env_extra)
    run = tvp.gridformer_train(s, a.steps, threads, 0.33, work, a.build, tag=tag, model_extra=extra,
                               env_extra=env_extra, extra_args=prof)
    names = {}
    excl, total, n = breakdown(os.path.join(work, f"out_{tag}", "profile", "trace.json"), names)
    ms_plain = statistics.median(r["step_ms"] for r in plain["rows"][1:])
    ms_prof = statistics.median(r["step_ms"] for r in run["rows"][1:])
    start = run.get("start") or {}
    row = {"run": spec, "threads": threads, "batch": s["batch_size"], "seq": s["seq_length"], "steps_profiled": n,
           "step_ms_profiled": ms_prof, "step_ms_plain": ms_plain, "gemm_backend": start.get("gemm_backend"),
           "git_commit": start.get("git_commit"), "others": run["others"],
           "ms_per_step": {k: v / 1000.0 / max(n, 1) for k, v in excl.items()},
           "percent": {k: 100.0 * v / total for k, v in excl.items()},
           "_names": {k: v / 1000.0 / max(n, 1) for k, v in names.items()}}
    if a.top:
        top = sorted(names.items(), key=lambda kv: -kv[1])[:a.top]
        row["top_spans"] = [{"category": c, "name": nm, "ms_per_step": v / 1000.0 / max(n, 1),
                             "percent": 100.0 * v / total} for (c, nm), v in top]
    print(f"\n{spec} on {threads} thread(s) (B {s['batch_size']}, T {s['seq_length']}, fp32 GEMM {row['gemm_backend']}, "
          f"{row['git_commit']}): step {ms_prof:.0f} ms profiled, {ms_plain:.0f} ms without the profile; "
          f"others {run['others']:.2f}", flush=True)
    print("| category | ms / step | % of step |\n|---|---:|---:|")
    for k in ORDER:
        if k in row["ms_per_step"]:
            print(f"| {k} | {row['ms_per_step'][k]:.1f} | {row['percent'][k]:.1f}% |")
    for t in row.get("top_spans", []):
        print(f"|   {t['name']} ({t['category']}) | {t['ms_per_step']:.1f} | {t['percent']:.1f}% |")
    return row


def print_scaling(rows, top):
    """Each category's (and, with --top, each of the slowest spans') ms per step at the fewest and the
    most threads, and the speedup between them: what stays serial shows as a speedup near 1."""
    lo, hi = rows[0], rows[-1]
    tl, th = lo["threads"], hi["threads"]
    print(f"\n{lo['run']}: {tl} -> {th} threads (ideal speedup {th / tl:.1f}x)")
    print(f"| category | ms / step, {tl} | ms / step, {th} | speedup |\n|---|---:|---:|---:|")
    keys = [k for k in ORDER if k in lo["ms_per_step"] or k in hi["ms_per_step"]] + ["step"]
    for k in keys:
        a = lo["step_ms_profiled"] if k == "step" else lo["ms_per_step"].get(k, 0.0)
        b = hi["step_ms_profiled"] if k == "step" else hi["ms_per_step"].get(k, 0.0)
        print(f"| {k} | {a:.1f} | {b:.1f} | {a / b if b > 0 else float('nan'):.2f}x |")
    if top:
        names = sorted(lo["_names"].items(), key=lambda kv: -kv[1])[:top]
        for (c, nm), a in names:
            b = hi["_names"].get((c, nm), 0.0)
            print(f"|   {nm} ({c}) | {a:.1f} | {b:.1f} | {a / b if b > 0 else float('nan'):.2f}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(tvp.ROOT, "build"))
    ap.add_argument("--threads", default="2",
                    help="thread count, or a list (1,2): each run at each, with the speedup per category")
    ap.add_argument("--runs", default="gpt2-124M:fp32:1024:2,gpt2-124M:bf16:1024:2,llama-tiny:fp32,mixtral-tiny:fp32")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--probe", default=None, help="GF_MACHINE_PROBE for the runs (default: the build's)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--top", type=int, default=0,
                    help="also list the N span names with the most exclusive time, with their category")
    a = ap.parse_args()
    threads = sorted(int(t) for t in a.threads.split(","))
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; CPU {tvp.cpu_name()}, {os.cpu_count()} cores; threads {a.threads}; "
          f"load average {tvp.loadavg()}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}",
          flush=True)
    record = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpu": tvp.cpu_name(),
              "threads": threads[0] if len(threads) == 1 else threads, "runs": []}
    env_extra = {"GF_MACHINE_PROBE": a.probe} if a.probe else {}
    with tempfile.TemporaryDirectory() as work:
        for spec in a.runs.split(","):
            rows = [profile_run(spec, t, a, work, env_extra) for t in threads]
            if len(rows) > 1:
                print_scaling(rows, a.top)
            for row in rows:
                row.pop("_names")
                record["runs"].append(row)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
