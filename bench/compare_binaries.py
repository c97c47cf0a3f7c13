#!/usr/bin/env python3
"""Training speed of two gridformer binaries, side by side in one run (e.g. before and after a refactor).

    /usr/bin/python3 bench/compare_binaries.py --base /work/base/bin/gridformer --new build/bin/gridformer
                                              [--rounds 5] [--steps 30] [--out bench/results/FILE.json]
                                              [--probe FILE] [--workloads gpt2_tiny,mixtral_tiny]
                                              [--skip 5] [--timeout 900]

Workloads: the repo's own tiny fp32 configs, run from the repo root (their data paths are relative):
  gpt2_tiny            configs/gpt2/run_gpt2_tiny.yaml
  mixtral_tiny         configs/moe/run_mixtral_tiny.yaml
  gpt2_tiny_gelu       the first with --set model.model_config.hidden_act=gelu (exact, MindFormers' GPT-2)
  gpt2_tiny_fast_gelu  the same with fast_gelu
  llama_tiny           configs/llama/run_llama_tiny.yaml
  gpt2_tiny_bf16, llama_tiny_bf16, mixtral_tiny_bf16
                       gpt2_tiny, llama_tiny and mixtral_tiny with --set model.model_config.compute_dtype=bfloat16
each as `gridformer train --config C --set runner_config.train_steps=STEPS
--set callbacks='[{type: MFLossMonitor, per_print_times: 1}]' --set output_dir=<temp dir per run>`:
one line per step in metrics.jsonl, and no checkpoint (the callbacks override replaces the config's
CheckpointMonitor). One process, one rank, OMP_NUM_THREADS removed from the environment (the binary
picks its threads), GF_MACHINE_PROBE set to build/machine_probe.json (--probe) for both binaries so
they choose the same GEMM backend (each run's gemm_backend is reported).

Each run's figure is the median of `step_ms` over the steps > --skip (5): with per_print_times 1
every line's interval is its one step. For each workload the binaries alternate, base, new, base,
new, ... for --rounds rounds, so load drift hits both alike; the report gives, per workload and
binary, the median over rounds of the per-run medians, their min and max, and new/base of the
medians. Also: CPU model, nproc, load average before and after, each binary's git commit (the
run_start line of metrics.jsonl). The losses of every step of the first round's base and new runs
are compared as printed in metrics.jsonl (text, so "equal" means the same digits; fp32 at one rank
trains bitwise identically, so they should be equal).
"""
import argparse
import datetime
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKLOADS = {
    "gpt2_tiny": "configs/gpt2/run_gpt2_tiny.yaml",
    "mixtral_tiny": "configs/moe/run_mixtral_tiny.yaml",
    # MindFormers' own GPT-2 files say hidden_act gelu (erf) or fast_gelu
    "gpt2_tiny_gelu": ("configs/gpt2/run_gpt2_tiny.yaml", ["model.model_config.hidden_act=gelu"]),
    "gpt2_tiny_fast_gelu": ("configs/gpt2/run_gpt2_tiny.yaml", ["model.model_config.hidden_act=fast_gelu"]),
    # SwiGLU MLPs (Llama's dense one, Mixtral's experts), and the three models under bf16 compute
    "llama_tiny": "configs/llama/run_llama_tiny.yaml",
    "gpt2_tiny_bf16": ("configs/gpt2/run_gpt2_tiny.yaml", ["model.model_config.compute_dtype=bfloat16"]),
    "llama_tiny_bf16": ("configs/llama/run_llama_tiny.yaml", ["model.model_config.compute_dtype=bfloat16"]),
    "mixtral_tiny_bf16": ("configs/moe/run_mixtral_tiny.yaml", ["model.model_config.compute_dtype=bfloat16"]),
}
CALLBACKS = "callbacks=[{type: MFLossMonitor, per_print_times: 1}]"


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def loadavg():
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run_once(binary, config, steps, probe, skip, timeout):
    """One `gridformer train` run in a fresh output dir; returns its per-run median step_ms (steps >
    skip), the step lines (loss kept as its printed text), the run_start line and the wall time."""
    out = tempfile.mkdtemp(prefix="gf_cmp_")
    try:
        env = dict(os.environ)
        env.pop("OMP_NUM_THREADS", None)
        env["GF_MACHINE_PROBE"] = probe
        config, sets = (config, []) if isinstance(config, str) else config
        cmd = [binary, "train", "--config", config, *[a for x in sets for a in ("--set", x)],
               "--set", f"runner_config.train_steps={steps}",
               "--set", CALLBACKS,
               "--set", f"output_dir={out}"]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            tail = (e.stdout or b"")
            tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
            sys.exit(f"timed out after {timeout} s: {' '.join(cmd)}\n{tail[-3000:]}")
        wall = time.time() - t0
        if p.returncode != 0:
            sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")
        path = os.path.join(out, "metrics.jsonl")
        if not os.path.exists(path):
            sys.exit(f"no {path} after: {' '.join(cmd)}\n{p.stdout[-3000:]}")
        # parse_float=str keeps every number's printed text: the loss comparison is exact.
        lines = [json.loads(l, parse_float=str) for l in open(path) if l.strip()]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    start = next((r for r in lines if r.get("event") == "run_start"), None)
    rows = [r for r in lines if "loss" in r and "step" in r]
    warm = [float(r["step_ms"]) for r in rows
            if int(r["step"]) > skip and not r.get("startup") and "step_ms" in r]
    if not warm:
        sys.exit(f"no step after step {skip} with step_ms in the run of {binary} on {config} "
                 f"({len(rows)} step lines); raise --steps")
    return {"median_ms": statistics.median(warm), "warm_steps": len(warm), "rows": rows,
            "start": start, "wall_s": wall}


def compare_losses(a, b):
    """(equal, first difference as text) of the per-step losses of two runs, as printed."""
    la = {int(r["step"]): r["loss"] for r in a}
    lb = {int(r["step"]): r["loss"] for r in b}
    if sorted(la) != sorted(lb):
        return False, f"different steps logged: base {sorted(la)} vs new {sorted(lb)}"
    for s in sorted(la):
        if la[s] != lb[s]:
            return False, f"first difference at step {s}: base loss {la[s]} vs new {lb[s]}"
    return True, None


def summary(medians):
    return {"median_ms": statistics.median(medians), "min_ms": min(medians), "max_ms": max(medians),
            "per_run_ms": medians}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the reference gridformer binary")
    ap.add_argument("--new", required=True, help="the gridformer binary under test")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30, help="training steps per run")
    ap.add_argument("--skip", type=int, default=5, help="steps 1..SKIP are warm-up, not timed (default 5)")
    ap.add_argument("--probe", default=os.path.join(ROOT, "build", "machine_probe.json"),
                    help="GF_MACHINE_PROBE for both binaries (default build/machine_probe.json)")
    ap.add_argument("--workloads", default="gpt2_tiny,mixtral_tiny,gpt2_tiny_gelu,gpt2_tiny_fast_gelu", help="comma-separated subset of "
                    + ", ".join(WORKLOADS))
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run before giving up")
    ap.add_argument("--out", help="write the results as JSON to this file")
    args = ap.parse_args()

    # Paths given relative to where the script is called from; the runs go from the repo root.
    base, new = os.path.abspath(args.base), os.path.abspath(args.new)
    probe = os.path.abspath(args.probe) if args.probe != "off" else "off"
    for b in (base, new):
        if not (os.path.isfile(b) and os.access(b, os.X_OK)):
            sys.exit(f"not an executable: {b}")
    if probe != "off" and not os.path.isfile(probe):
        sys.exit(f"no machine probe at {probe} (run build/bin/machine_probe, or pass --probe FILE or --probe off)")
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in names:
        if w not in WORKLOADS:
            sys.exit(f"unknown workload {w!r}; known: {', '.join(WORKLOADS)}")
    if args.steps <= args.skip:
        sys.exit(f"--steps {args.steps} leaves no step after the {args.skip} warm-up steps")
    if args.rounds < 1:
        sys.exit("--rounds must be >= 1")

    meta = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "cpu": cpu_model(), "nproc": os.cpu_count(),
        "loadavg_before": loadavg(),
        "rounds": args.rounds, "steps": args.steps, "skip": args.skip, "probe": probe,
        "omp_num_threads": "unset", "gf_gemm": os.environ.get("GF_GEMM"),
        "binaries": {"base": {"path": base, "sha256": sha256(base)},
                     "new": {"path": new, "sha256": sha256(new)}},
    }
    print(f"cpu: {meta['cpu']}, nproc {meta['nproc']}, load average before {meta['loadavg_before']}")
    print(f"base: {base}\nnew:  {new}\nprobe: {probe}; {args.rounds} rounds x {args.steps} steps, "
          f"median of step_ms over steps > {args.skip}", flush=True)

    results = {}
    commits = {"base": set(), "new": set()}
    backends = {"base": set(), "new": set()}
    for w in names:
        config = WORKLOADS[w]
        per = {"base": [], "new": []}
        first = {}
        for r in range(args.rounds):
            for side, binary in (("base", base), ("new", new)):
                res = run_once(binary, config, args.steps, probe, args.skip, args.timeout)
                st = res["start"] or {}
                commits[side].add(str(st.get("git_commit", "unknown (no run_start line)")))
                backends[side].add(str(st.get("gemm_backend", "unknown")))
                per[side].append(res["median_ms"])
                if r == 0:
                    first[side] = res["rows"]
                print(f"  {w:13s} round {r + 1}/{args.rounds} {side:4s}: median {res['median_ms']:9.2f} ms "
                      f"over {res['warm_steps']} steps (run {res['wall_s']:.1f} s, "
                      f"threads {st.get('threads', '?')}, gemm {st.get('gemm_backend', '?')})", flush=True)
        equal, diff = compare_losses(first["base"], first["new"])
        b, n = summary(per["base"]), summary(per["new"])
        results[w] = {"config": config, "base": b, "new": n, "ratio_new_over_base": n["median_ms"] / b["median_ms"],
                      "losses_bitwise_equal": equal, "loss_first_difference": diff,
                      "loss_steps_compared": len(first["base"])}
        print(f"  {w}: " + ("losses bitwise equal" if equal else diff)
              + f" ({len(first['base'])} steps, round 1)", flush=True)

    meta["loadavg_after"] = loadavg()
    for side in ("base", "new"):
        meta["binaries"][side]["git_commit"] = sorted(commits[side])
        meta["binaries"][side]["gemm_backend"] = sorted(backends[side])

    print()
    print(f"cpu: {meta['cpu']}, nproc {meta['nproc']}, load average before {meta['loadavg_before']}, "
          f"after {meta['loadavg_after']}")
    for side in ("base", "new"):
        m = meta["binaries"][side]
        print(f"{side:4s}: git {', '.join(m['git_commit'])}, gemm {', '.join(m['gemm_backend'])}, {m['path']}")
    print(f"step time, ms: median over {args.rounds} rounds of each run's median over steps "
          f"{args.skip + 1}..{args.steps}; [min, max] of the runs")
    hdr = f"{'workload':13s} | {'base ms':>9s} {'[min, max]':>19s} | {'new ms':>9s} {'[min, max]':>19s} | {'new/base':>8s} | losses"
    print(hdr)
    print("-" * len(hdr))
    for w, r in results.items():
        b, n = r["base"], r["new"]
        rng = lambda s: f"[{s['min_ms']:.2f}, {s['max_ms']:.2f}]"
        print(f"{w:13s} | {b['median_ms']:9.2f} {rng(b):>19s} | {n['median_ms']:9.2f} {rng(n):>19s} | "
              f"{r['ratio_new_over_base']:8.4f} | {'bitwise equal' if r['losses_bitwise_equal'] else 'DIFFER'}")
    for w, r in results.items():
        if not r["losses_bitwise_equal"]:
            print(f"{w}: {r['loss_first_difference']}")

    if args.out:
        d = os.path.dirname(os.path.abspath(args.out))
        os.makedirs(d, exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "workloads": results}, f, indent=2)
            f.write("\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
