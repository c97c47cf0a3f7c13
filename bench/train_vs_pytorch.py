#!/usr/bin/env python3
"""Training throughput of gridformer against PyTorch, side by side on this machine.

    python3 bench/train_vs_pytorch.py [--shapes gpt2-tiny,gpt2-124M,llama-tiny,moe-tiny,mixtral-tiny]
                                      [--dtypes fp32,bf16] [--steps 6] [--rounds 3] [--threads 2]
                                      [--build DIR[,DIR...]] [--no-gemm] [--no-pytorch] [--json FILE]
                                      [--wait-idle S] [--quiet 0.10] [--probe FILE] [--check-moe]
                                      [--batch B] [--seq T] [--python PATH]
    python3 bench/train_vs_pytorch.py --report FILE[,FILE...]     # the tables of earlier --json files

Each round first times the machine's GEMM ceiling (build/bin/bench_gemm --shape on OpenBLAS, Eigen
and oneDNN bf16, then torch.mm fp32 and bf16; dense NN 2048^3 and 1024x3072x768, --gemm-shapes),
then, for each shape and dtype, trains gridformer with each build given (`gridformer train`,
synthetic tokens; the builds' order rotates from round to round) and then PyTorch
(bench/torch_gpt2.py under Debian's /usr/bin/python3, or --python's) on the same shape, threads, optimizer (AdamW
+ clipping) and step count, so all see the same machine state. bf16 is gridformer's
`compute_dtype: bfloat16` against PyTorch's torch.autocast('cpu', bfloat16). Each run reports the
median of its timed steps (the first step is warm-up); the tables show medians over rounds. PyTorch's
attention is F.scaled_dot_product_attention where its torch has it (2.0 and later, as Hugging Face's
GPT-2 and Llama use it there by default), else the explicit softmax (--torch-attention; the table names
which ran).

The MoE shapes (moe-tiny: GPT-2 MoE, mixtral-tiny: Mixtral; 8 experts top-2, dropless, balancing
loss 0.01; SHAPES) train gridformer with moe_config against bench/torch_moe_bench.py's models (Hugging
Face's MixtralSparseMoeBlock loop: per expert, gather its rows by index, run the MLP, scale, index_add_).
Their FLOPs are the active ones: per MoE layer and token k experts' MLPs and the router's C E instead
of one dense MLP, as TransformerLM::flops_per_step counts. --check-moe first checks, per MoE shape,
that the PyTorch model computes what gridformer computes (its layer against tools/torch_moe.py's
reference in float64; gridformer's first-step loss and objective on the same weights and tokens).

TFLOP/s are computed here, from one formula for both sides (Megatron's count generalised to
grouped-query attention and SwiGLU, as gridformer's TransformerLM::flops_per_step; for GPT-2 it is
72 B T L h^2 (1 + T/(6h) + V/(12 L h))) over the run's median step time. "% ceiling" divides them by
the GEMM ceiling of the dtype measured in the same run: the best round of the fastest fp32
implementation (OpenBLAS, Eigen, torch.mm) over the shapes for fp32, of the fastest bf16 one (oneDNN
from fp32 or bf16 inputs, torch.mm bf16) for bf16 (a ceiling: the figure other processes lowered
least, as build/bin/machine_probe takes its own). "% of hardware peak" divides them by the machine
probe's own-kernel peaks (its "limits": the fp32 FMA peak; for bf16 AMX's where the CPU has it, else
AVX-512 BF16's), measured at the run's threads when the probe is the one this script ran.

Every run records how much of the machine it had: "cpu util", CPU seconds / (wall seconds x
threads) of the process (gridformer: the whole run, start-up included, from RUSAGE_CHILDREN;
PyTorch: the median over its timed steps; spinning threads count, so it is an upper bound), and
"others", the share of all CPUs' time spent on anything else while it ran (/proc/stat busy time,
the hypervisor's steal included, minus the run's own CPU time). The report gives medians over
every round and over the quiet rounds: those in which every run of that shape and dtype had
others <= --quiet (0.10). --wait-idle S: before the GEMM timing and before each shape and dtype's
runs (and before the machine probe), wait (at most S seconds) for a 5-second window in which other
processes used at most --quiet of the CPUs, so that the runs compared with each other start on a
quiet machine.

Every gridformer run reads the same machine probe (GF_MACHINE_PROBE, --probe; by default one
measured by build/bin/machine_probe at the start of this run), so every build makes the same fp32
GEMM backend choice; the backend each run used is printed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# The shapes, the gridformer runs and the FLOP count (SHAPES is one dict shared with that module: --batch and --seq
# set it here). Other bench scripts import these names from here.
from gridformer_runs import (ROOT, SHAPES, CpuWatch, gridformer_run, gridformer_train, gridformer_yaml,  # noqa: F401
                             model_flops)


def moe_checks(shape, threads, workdir, build, env_extra=None):
    """That bench/torch_moe_bench.py computes what gridformer computes, for an MoE shape: its fast
    layer against tools/torch_moe.py's reference (float64), then gridformer's first step (1 step at
    learning rate 0, --save-weights) against it on those weights and the same RandomTokens. Returns
    the checks' JSON rows."""
    weights = os.path.join(workdir, f"{shape}_check.safetensors")
    run = gridformer_train(shape, 1, threads, 0.33, workdir, build, tag=f"{shape}_check", env_extra=env_extra, lr=0.0,
                           extra_args=["--save-weights", weights])
    metrics = os.path.join(workdir, f"out_{shape}_check", "metrics.jsonl")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    rows = []
    for extra in (["--check-reference"], ["--weights", weights, "--metrics", metrics]):
        p = subprocess.run([PYTHON, os.path.join(ROOT, "bench", "torch_moe_bench.py"), "--shape", shape,
                            *extra], env=env, capture_output=True, text=True)
        if not p.stdout.strip():
            raise RuntimeError(f"torch_moe_bench.py {' '.join(extra)} failed:\n{p.stderr[-2000:]}")
        rows.append(dict(json.loads(p.stdout.strip().splitlines()[-1]),
                         git_commit=(run.get("start") or {}).get("git_commit")))
    return rows


# The Python that runs PyTorch: Debian's by default; --python (or GF_BENCH_PYTHON) for another
# (a server's PyTorch 2.x).
PYTHON = os.environ.get("GF_BENCH_PYTHON", "/usr/bin/python3")


def pytorch_run(shape, steps, threads, dtype="fp32", attention="auto"):
    """bench/torch_gpt2.py's --json result (tokens_per_s, tflops, peak_rss_bytes, ...); the first
    of `steps` steps is warm-up. B and T as SHAPES has them (--batch/--seq may have changed them)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    watch = CpuWatch(threads)
    out = subprocess.run([PYTHON, os.path.join(ROOT, "bench", "torch_gpt2.py"), "--shape", shape,
                          "--steps", str(steps - 1), "--warmup", "1", "--threads", str(threads), "--json",
                          "--dtype", dtype, "--batch", str(SHAPES[shape]["batch_size"]),
                          "--seq", str(SHAPES[shape]["seq_length"]), "--attention", attention],
                         env=env, check=True, capture_output=True, text=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    res["process_cpu_util"], res["others"] = watch.stop()
    return res



# ---------------------------------------------------------------------------------------------
# GEMM ceiling

TORCH_MM = r"""
import json, statistics, sys, time, torch
threads, rounds, min_s, shapes = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
torch.set_num_threads(threads)
torch.manual_seed(0)
out = {}
for shp in shapes.split(","):
    M, N, K = map(int, shp.split("x"))
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = (0.1 * torch.randn(M, K)).to(dt), (0.1 * torch.randn(K, N)).to(dt)
        c = torch.empty(M, N, dtype=dt)
        torch.mm(a, b, out=c)                       # untimed first call
        t0 = time.perf_counter(); torch.mm(a, b, out=c); pace = time.perf_counter() - t0
        reps = max(1, int(min_s / pace + 0.999))
        ts = []
        for r in range(rounds if pace < 2.0 else 1):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b, out=c)
            ts.append((time.perf_counter() - t0) / reps)
        out[shp + " " + name] = 2.0 * M * N * K / statistics.median(ts) / 1e9
print(json.dumps(out))
"""

GEMM_SHAPES = "2048x2048x2048,1024x3072x768"
# Which implementations count for which dtype's ceiling (bench_gemm's names, prefixed "gridformer").
FP32_IMPLS = ("gridformer blas", "gridformer eigen", "torch.mm fp32")
BF16_IMPLS = ("gridformer bf16", "gridformer bf16*", "torch.mm bf16")


def gemm_round(shapes, threads, gemm_bin):
    """GFLOP/s per (implementation, shape) for one round: bench_gemm --shape (median of 3 samples of
    >= 100 ms per backend: blas, eigen, bf16 = oneDNN from fp32 inputs, bf16* = on bf16 inputs), then
    torch.mm fp32 and bf16 (median of 3 samples of >= 100 ms)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([gemm_bin, "--shape", ",".join(shapes), "--threads", str(threads), "--rounds", "3",
                          "--min-ms", "100"], env=env, check=True, capture_output=True, text=True).stdout
    r = {}
    for line in out.splitlines():
        if line.startswith("shape "):
            f = line.split()
            for name, val in zip(f[2::2], f[3::2]):
                r[(f"gridformer {name}", f[1])] = float(val)
    tout = subprocess.run([PYTHON, "-c", TORCH_MM, str(threads), "3", "0.1", ",".join(shapes)],
                          env=env, check=True, capture_output=True, text=True).stdout
    for key, val in json.loads(tout.strip().splitlines()[-1]).items():
        shp, dt = key.split()
        r[(f"torch.mm {dt}", shp)] = val
    return r


def gemm_ceilings(rounds):
    """({(impl, shape): median GFLOP/s over the rounds}, {(impl, shape): best round's GFLOP/s},
    {"fp32": (GFLOP/s, impl, shape), "bf16": ...}): a dtype's ceiling is its fastest implementation's
    best round (the figure other processes lowered least, as machine_probe takes it)."""
    keys = sorted({k for g in rounds for k in g})
    medians = {k: statistics.median(g[k] for g in rounds if k in g) for k in keys}
    best_of = {k: max(g[k] for g in rounds if k in g) for k in keys}
    ceil = {}
    for dt, impls in (("fp32", FP32_IMPLS), ("bf16", BF16_IMPLS)):
        cand = {k: v for k, v in best_of.items() if k[0] in impls and v > 0}
        if cand:
            best = max(cand, key=cand.get)
            ceil[dt] = (cand[best], best[0], best[1])
    return medians, best_of, ceil


def run_machine_probe(build, threads, out):
    """build/bin/machine_probe --out OUT at `threads` threads; returns its JSON (None without the tool)."""
    tool = os.path.join(build, "bin", "machine_probe")
    if not os.path.exists(tool):
        return None
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    subprocess.run([tool, "--out", out, "--threads", str(threads)], env=env, check=True, capture_output=True, text=True)
    return json.load(open(out))


def wait_for_idle(max_busy, max_wait, window=5.0):
    """Waits until a `window`-second stretch in which everything else on the machine used at most
    max_busy of the CPUs (/proc/stat; we run nothing meanwhile), or max_wait seconds; returns (seconds
    waited, the last window's busy share)."""
    t0 = time.time()
    while True:
        b0, a0 = CpuWatch._stat()
        time.sleep(window)
        b1, a1 = CpuWatch._stat()
        busy = (b1 - b0) / (a1 - a0) if a1 > a0 else 0.0
        if busy <= max_busy or time.time() - t0 >= max_wait:
            return time.time() - t0, busy


def idle_gate(args, what):
    """wait_for_idle before `what` when --wait-idle is set; prints what it waited."""
    if not args.wait_idle:
        return
    waited, busy = wait_for_idle(args.quiet, args.wait_idle)
    print(f"  (waited {waited:.0f} s before {what}: others {busy:.2f} of the CPUs in the last 5 s"
          + ("" if busy <= args.quiet else f", above {args.quiet}: gave up waiting") + ")", flush=True)


def cpu_name():
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "?"


def loadavg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="gpt2-tiny,gpt2-124M")
    ap.add_argument("--dtypes", default="fp32", help="fp32, bf16 or both (fp32,bf16)")
    ap.add_argument("--steps", type=int, default=6, help="steps per run (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peak-tflops", type=float, default=0.33,
                    help="runner_config.peak_tflops of the gridformer runs (their own MFU; not used here)")
    ap.add_argument("--no-pytorch", action="store_true")
    ap.add_argument("--no-gemm", action="store_true", help="skip the GEMM ceiling")
    ap.add_argument("--gemm-shapes", default=GEMM_SHAPES)
    ap.add_argument("--build", default=None,
                    help="build directories holding bin/gridformer, comma-separated (default: build); "
                         "bench_gemm and machine_probe come from the first")
    ap.add_argument("--probe", default=None, help="machine probe JSON for every gridformer run (GF_MACHINE_PROBE; "
                    "default: measure one now with the first build's machine_probe)")
    ap.add_argument("--json", default=None, help="write every measurement to this file")
    ap.add_argument("--report", default=None,
                    help="measure nothing: print the tables of these --json files (comma-separated; their rounds "
                         "pooled, each keeping its own builds)")
    ap.add_argument("--wait-idle", type=float, default=0,
                    help="wait up to this many seconds for a quiet 5 s before the GEMM timing and each shape and "
                         "dtype's runs (0: don't wait)")
    ap.add_argument("--quiet", type=float, default=0.10,
                    help="a round is quiet for a shape and dtype when every run of it had others <= this")
    ap.add_argument("--batch", type=int, default=None, help="override every shape's batch size (both sides)")
    ap.add_argument("--seq", type=int, default=None, help="override every shape's sequence length (both sides)")
    ap.add_argument("--python", default=None, help="the Python with PyTorch (default: $GF_BENCH_PYTHON, else "
                                                   "/usr/bin/python3)")
    ap.add_argument("--torch-attention", choices=["auto", "sdpa", "eager"], default="auto",
                    help="PyTorch's attention (bench/torch_gpt2.py --attention): auto is F.scaled_dot_product_attention "
                         "where torch has it (>= 2.0), else the explicit softmax")
    ap.add_argument("--check-moe", action="store_true",
                    help="before the rounds, check for each MoE shape that the PyTorch model computes what gridformer "
                         "does (bench/torch_moe_bench.py: its layer against tools/torch_moe.py; gridformer's first "
                         "step on the same weights and tokens within 1e-4)")
    args = ap.parse_args()
    global PYTHON
    if args.python:
        PYTHON = args.python
    for sh in SHAPES.values():
        if args.batch:
            sh["batch_size"] = args.batch
        if args.seq:
            sh["seq_length"] = args.seq
    if args.report:
        return report_files(args, args.report.split(","))
    builds = [os.path.abspath(b) for b in (args.build or os.path.join(ROOT, "build")).split(",")]
    dtypes = args.dtypes.split(",")
    shapes = args.shapes.split(",")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; CPU {cpu_name()}, {os.cpu_count()} cores; load average "
          f"{loadavg()}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; threads {args.threads}; "
          f"{args.steps} steps per run (first untimed), {args.rounds} rounds", flush=True)
    record = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpu": cpu_name(), "loadavg_start": os.getloadavg(),
              "threads": args.threads, "steps": args.steps, "builds": builds, "gemm": [], "runs": [],
              "argv": sys.argv[1:], "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")}
    with tempfile.TemporaryDirectory() as work:
        probe = args.probe
        if probe is not None and os.path.exists(probe):
            record["machine_probe"] = json.load(open(probe))
        if probe is None:
            probe = os.path.join(work, "machine_probe.json")
            idle_gate(args, "the machine probe")
            pj = run_machine_probe(builds[0], args.threads, probe)
            if pj is None:
                probe = None
            else:
                print(f"machine_probe: fp32 backend {pj.get('fp32_backend')}, GFLOP/s {pj.get('gflops')}, peak TFLOP/s "
                      f"{pj.get('peak_tflops')}, core share {pj.get('cores_share', '?')}", flush=True)
                record["machine_probe"] = pj
        env_extra = {"GF_MACHINE_PROBE": probe} if probe else {}
        if args.check_moe:
            for shape in [x for x in shapes if SHAPES[x].get("moe")]:
                for row in moe_checks(shape, args.threads, work, builds[0], env_extra):
                    record.setdefault("checks", []).append(row)
                    save(args.json, record)
                    print(f"  check {shape}: {row['check']}: " + ("ok" if row["ok"] else "FAILED") + "; "
                          + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                                      if k not in ("check", "shape", "ok")), flush=True)
        gemm_bin = os.path.join(builds[0], "bin", "bench_gemm")
        runs = {}  # (shape, dtype, impl) -> [result per round]
        cannot = set()  # (shape, build) that failed once
        gemm = []  # per round, {(impl, shape): GFLOP/s}
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds} (load average {loadavg()})", flush=True)
            record.setdefault("round_loadavg", []).append(os.getloadavg())
            if not args.no_gemm:
                idle_gate(args, "the GEMM timing")
                g = gemm_round(args.gemm_shapes.split(","), args.threads, gemm_bin)
                gemm.append(g)
                record["gemm"].append({f"{k[0]} {k[1]}": v for k, v in g.items()})
                print("  gemm GFLOP/s: " + ", ".join(f"{k[0]} {k[1]} {v:.0f}" for k, v in sorted(g.items())),
                      flush=True)
            order = builds[r % len(builds):] + builds[:r % len(builds)]
            for shape in shapes:
                for dt in dtypes:
                    extra = dict(compute_dtype="bfloat16") if dt == "bf16" else None
                    idle_gate(args, f"{shape} {dt}")
                    for b in order:
                        if (shape, b) in cannot:
                            continue
                        try:
                            x = gridformer_run(shape, args.steps, args.threads, args.peak_tflops, work, b,
                                               tag=f"{shape}_{dt}", model_extra=extra, env_extra=env_extra)
                        except RuntimeError as e:  # e.g. an older build without this model: skip it for this shape
                            cannot.add((shape, b))
                            why = [l for l in str(e).splitlines() if "error" in l.lower() or "refus" in l.lower()]
                            print(f"  {shape} {dt} {b}: failed, skipped for {shape} from now on: "
                                  f"{(why or str(e).splitlines())[0][:300]}", flush=True)
                            continue
                        st = x["run"].get("start") or {}
                        warn = [l.strip() for l in x["run"]["log"].splitlines() if "warn" in l.lower()]
                        res = {"tokens_per_s": x["tokens_per_s"], "step_ms": x["step_ms"],
                               "tflops": model_flops(shape) / (x["step_ms"] * 1e-3) / 1e12,
                               "gemm_backend": st.get("gemm_backend"), "git_commit": st.get("git_commit"),
                               "cpu_util": x["run"]["cpu_util"], "others": x["run"]["others"], "warnings": warn}
                        runs.setdefault((shape, dt, b), []).append(res)
                        record["runs"].append(dict(res, shape=shape, dtype=dt, impl=b, round=r + 1))
                        save(args.json, record)
                        print(f"  {shape} {dt} gridformer {st.get('git_commit', os.path.basename(os.path.dirname(b)))}"
                              f" ({st.get('gemm_backend')}): {res['tokens_per_s']:.1f} tok/s (cpu util "
                              f"{res['cpu_util']:.2f}, others {res['others']:.2f})"
                              + ("; " + "; ".join(warn) if warn else ""), flush=True)
                    if not args.no_pytorch:
                        p = pytorch_run(shape, args.steps, args.threads, dtype=dt, attention=args.torch_attention)
                        res = {"tokens_per_s": p["tokens_per_s"], "step_ms": 1e3 * p["median_step_s"],
                               "tflops": model_flops(shape) / p["median_step_s"] / 1e12,
                               "cpu_util": p["median_cpu_util"], "others": p["others"],
                               "attention": p.get("attention", "eager"), "torch_version": p.get("torch_version")}
                        runs.setdefault((shape, dt, "pytorch"), []).append(res)
                        record["runs"].append(dict(res, shape=shape, dtype=dt, impl="pytorch", round=r + 1))
                        save(args.json, record)
                        print(f"  {shape} {dt} pytorch {res['torch_version']} ({res['attention']} attention): "
                              f"{res['tokens_per_s']:.1f} tok/s (cpu util "
                              f"{res['cpu_util']:.2f}, others {res['others']:.2f})", flush=True)
    record["loadavg_end"] = os.getloadavg()
    save(args.json, record)
    report(args, builds, shapes, dtypes, runs, gemm, record)


def save(path, record):
    """Writes the measurements so far to --json (after every run, so an interrupted run keeps them)."""
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(record, f, indent=1)
        os.replace(path + ".tmp", path)


def report_files(args, paths):
    """The report of earlier --json files, their rounds pooled (in file order)."""
    records = [json.load(open(p)) for p in paths]
    builds, shapes, dtypes, runs, gemm = [], [], [], {}, []
    for rec in records:
        builds += [b for b in rec["builds"] if b not in builds]
        for g in rec["gemm"]:
            gemm.append({tuple(k.rsplit(" ", 1)): v for k, v in g.items()})
        for x in sorted(rec["runs"], key=lambda x: x["round"]):
            shapes += [x["shape"]] if x["shape"] not in shapes else []
            dtypes += [x["dtype"]] if x["dtype"] not in dtypes else []
            runs.setdefault((x["shape"], x["dtype"], x["impl"]), []).append(x)
    print("report of " + ", ".join(f"{p} ({r['date']}, load average at the start "
                                    f"{' '.join(f'{v:.2f}' for v in r['loadavg_start'])})" for p, r in zip(paths, records)))
    args.gemm_shapes = ",".join(dict.fromkeys(k[1] for g in gemm for k in g))
    report(args, builds, shapes, dtypes, runs, gemm, dict(records[0], threads=records[0]["threads"]))


def report(args, builds, shapes, dtypes, runs, gemm, record):
    med = statistics.median
    print(f"\n{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average at the start "
          f"{' '.join(f'{x:.2f}' for x in record['loadavg_start'])}, at the end {loadavg()}")
    ceil = {}
    if gemm:
        medians, best_of, ceil = gemm_ceilings(gemm)
        gshapes = args.gemm_shapes.split(",")
        print(f"\nGEMM GFLOP/s at {args.threads} threads, median / best of {len(gemm)} rounds:\n")
        print("| implementation | " + " | ".join(gshapes) + " |")
        print("|---|" + "---:|" * len(gshapes))
        for impl in sorted({k[0] for k in medians}):
            print(f"| {impl} | " + " | ".join(f"{medians.get((impl, s), float('nan')):.0f} / "
                                             f"{best_of.get((impl, s), float('nan')):.0f}" for s in gshapes) + " |")
        for dt, (v, impl, shp) in ceil.items():
            print(f"{dt} ceiling: {v:.0f} GFLOP/s ({impl}, {shp})")
        record["ceiling_gflops"] = {dt: v[0] for dt, v in ceil.items()}
    # The hardware's peaks from the machine probe's own kernels (version 2: its "limits"), at the
    # probe's threads: the fp32 FMA peak, and the bf16 one (AMX where the CPU has it).
    lim = (record.get("machine_probe") or {}).get("limits") or {}
    peak = {"fp32": lim.get("fp32_fma_tflops"), "bf16": lim.get("bf16_tflops")}
    if any(peak.values()):
        print(f"\nhardware peaks (machine_probe): fp32 {peak['fp32']} TFLOP/s ({lim.get('fp32_fma_isa')}), "
              f"bf16 {peak['bf16']} TFLOP/s ({lim.get('bf16_isa')})")
    names = {b: (os.path.relpath(b, ROOT) if b.startswith(ROOT) else b) for b in builds}
    names["pytorch"] = "PyTorch"
    impls = builds + ["pytorch"]
    for quiet in (False, True):
        print("\n" + (f"Quiet rounds only (every run of the shape and dtype had others <= {args.quiet}):"
                      if quiet else "Every round:") + "\n")
        print("| shape | dtype | implementation | tok/s (median) | rounds | TFLOP/s | % of GEMM ceiling | "
              "% of hardware peak | vs PyTorch |" + (f" vs {names[builds[0]]} |" if len(builds) > 1 else ""))
        print("|---|---|---|---:|---|---:|---:|---:|---:|" + ("---:|" if len(builds) > 1 else ""))
        notes = []
        for shape in shapes:
            for dt in dtypes:
                per = {i: runs.get((shape, dt, i)) for i in impls if runs.get((shape, dt, i))}
                if not per:
                    continue
                n = min(len(v) for v in per.values())
                keep = [r for r in range(n)
                        if not quiet or all((per[i][r]["others"] or 0.0) <= args.quiet for i in per)]
                if not keep:
                    notes.append(f"{shape} {dt}: no quiet round")
                    continue
                sel = {i: [per[i][r] for r in keep] for i in per}
                tok = {i: med(x["tokens_per_s"] for x in v) for i, v in sel.items()}
                for i, xs in sel.items():
                    tf = med(x["tflops"] for x in xs)
                    c = ceil.get(dt)
                    label = (f"PyTorch {xs[0].get('torch_version') or ''} ({xs[0].get('attention', 'eager')} attention)"
                             if i == "pytorch" else f"gridformer {names[i]} ({xs[0].get('git_commit')})")
                    line = (f"| {shape} | {dt} | {label} | {tok[i]:.1f} | "
                            + ", ".join(f"{x['tokens_per_s']:.0f}" for x in xs) + f" | {tf:.4f} | "
                            + (f"{100e3 * tf / c[0]:.1f}%" if c else "n/a") + " | "
                            + (f"{100 * tf / peak[dt]:.1f}%" if peak.get(dt) else "n/a") + " | "
                            + (f"{tok[i] / tok['pytorch']:.2f}x" if "pytorch" in tok and i != "pytorch" else "") + " |")
                    if len(builds) > 1:
                        line += (f" {tok[i] / tok[builds[0]]:.3f}x |" if i != "pytorch" and builds[0] in tok else " |")
                    print(line)
                note = (f"{shape} {dt}, rounds {', '.join(str(r + 1) for r in keep)}: others per round "
                        + "; ".join(f"{names[i]} " + ", ".join(f"{x['others']:.2f}" for x in v) for i, v in sel.items())
                        + "; cpu util " + "; ".join(f"{names[i]} " + ", ".join(f"{x['cpu_util']:.2f}" for x in v)
                                                    for i, v in sel.items()))
                for i in [x for x in impls if x != builds[0] and x in sel]:
                    if builds[0] in sel:
                        rs = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(sel[builds[0]], sel[i])]
                        note += (f"; per-round ratios {names[builds[0]]} / {names[i]} "
                                 + ", ".join(f"{x:.3f}" for x in rs) + f" (median {med(rs):.3f})")
                notes.append(note)
        print("\n" + "\n".join(f"- {x}" for x in notes))

if __name__ == "__main__":
    sys.exit(main())
