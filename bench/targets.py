#!/usr/bin/env python3
"""The targets table of the performance issue, measured in one run beside PyTorch on this machine.

    python3 bench/targets.py [--rounds 5] [--steps 6] [--threads 2] [--build DIR] [--rows gemm,fp32,bf16,tiny,rss,seq]
                             [--quick] [--json FILE]

Rows (each target is printed with its reference figure from the same run):

  gemm  The fp32 GEMM ceiling: dense NN products (2048x2048x2048 and the model-shaped 1024x3072x768,
        --gemm-shapes) timed with gridformer's backends (build/bin/bench_gemm --shape: OpenBLAS,
        Eigen, oneDNN bf16) and with torch.mm (fp32 and bf16) at --threads threads. The ceiling is the
        largest fp32 median (over rounds) of OpenBLAS and torch.mm over the shapes.
  fp32  gpt2-124M fp32 (T 256, B 4): gridformer against bench/torch_gpt2.py, tokens/s; target >= 1.5x
        PyTorch, and gridformer's TFLOP/s (Megatron's count) >= 55% of the ceiling.
  bf16  gpt2-124M with model_config.compute_dtype: bfloat16 against torch_gpt2.py --dtype bf16
        (torch.autocast); target >= 1.5x. Loss curve: the fp32 and bf16 runs of a round train the same
        steps from the same seed on the same data (RandomTokens seed 0, num_samples = B: one batch
        repeated, so the loss falls instead of sitting at ln V); the row reports the largest relative
        loss difference over the steps, tolerance 2e-2 (--loss-tol). A binary without mixed precision
        warns "mixed precision is not built yet; computing in float32": the row then says so.
  tiny  gpt2-tiny fp32 (4 layers, hidden 256, T 256, B 8): target >= 1.5x PyTorch.
  rss   gpt2-124M fp32 peak RSS (output_dir/resources.json, the largest over rounds) <= 1.15x the
        analytic bytes: parameters + gradients (4 B x the arena, each parameter rounded up to 16
        floats, bench/distributed.py's param_list) + the AdamW moments (optimizer_state_bytes, checked
        against 2 x 4 B x the arena) + the planned activations (planned_activation_bytes). PyTorch's
        peak RSS (ru_maxrss of torch_gpt2.py's process) beside it.
  seq   Fused attention at long sequences: the model of tests/integration/flash_attention_memory.sh
        (2 layers, hidden 64, 2 heads, vocabulary 1000, batch 1, dropout 0.1), one step at T 4096 and
        8192 with use_flash_attention True and False: planned activation bytes and peak RSS. Target:
        doubling T doubles the fused path's planned bytes (ratio <= 2.1), where the unfused path's
        B*H*T*T probabilities quadruple. (--quick skips the unfused T 8192 run, ~2.5 GiB.)

Each round runs, in turn, the GEMM ceiling (gridformer, then torch), gpt2-124M fp32 (gridformer,
PyTorch), gpt2-124M bf16 (gridformer, PyTorch) and gpt2-tiny (gridformer, PyTorch), so both sides
see the same machine state; every training run takes --steps steps, the first not timed, and
reports the median of the others; the table shows the median over rounds. The seq row runs once.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_vs_pytorch import ROOT, SHAPES, gemm_round, gridformer_run, gridformer_train, pytorch_run  # noqa: E402
from distributed import param_list  # noqa: E402

MiB = 2.0 ** 20
ROWS = ["gemm", "fp32", "bf16", "tiny", "rss", "seq"]
NOT_BUILT = "mixed precision is not built yet"

# tests/integration/flash_attention_memory.sh's model
SEQ_MODEL = dict(vocab_size=1000, max_position_embeddings=8192, hidden_size=64, num_layers=2, num_heads=2,
                 batch_size=1)

def machine():
    model = "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return model, os.cpu_count()


def load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def round_ratios(ours, theirs):
    """Per-round ratios ours / theirs, and their median: on a noisy machine, the two sides of one
    round shared its load, so this is a second view of the ratio of the medians."""
    rs = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(ours, theirs)]
    return "per-round ratios " + ", ".join(f"{r:.2f}" for r in rs) + f" (median {med(rs):.2f}x)"


# ---------------------------------------------------------------------------------------------
# Analytic memory

def arena_floats(shape):
    s = SHAPES[shape]
    m = dict(vocab_size=50257, max_position_embeddings=1024, hidden_size=s["hidden_size"],
             num_layers=s["num_layers"])
    return param_list(m, 1, False)[1]


def rank0(res):
    return res["ranks"][0]


def memory_line(log):
    for line in log.splitlines():
        if "memory on rank 0" in line:
            return line.split("memory on rank 0:", 1)[1].strip()
    return "?"


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 5; 2 with --quick)")
    ap.add_argument("--steps", type=int, default=None,
                    help="steps per training run, the first not timed (default 6; 3 with --quick)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=None, help="build directory of bin/gridformer (default: this checkout's build)")
    ap.add_argument("--gemm-bin", default=os.path.join(ROOT, "build", "bin", "bench_gemm"),
                    help="bench_gemm with --shape (default: this checkout's)")
    ap.add_argument("--rows", default=",".join(ROWS), help="subset of " + ",".join(ROWS))
    ap.add_argument("--quick", action="store_true", help="2 rounds of 3 steps unless given, no unfused T 8192 run")
    ap.add_argument("--gemm-shapes", default="2048x2048x2048,1024x3072x768")
    ap.add_argument("--seq-lengths", default="4096,8192")
    ap.add_argument("--loss-tol", type=float, default=2e-2)
    ap.add_argument("--peak-tflops", type=float, default=0.33, help="only for gridformer's logged MFU")
    ap.add_argument("--json", default=None, help="write every measurement to this file")
    args = ap.parse_args()
    if args.rounds is None:
        args.rounds = 2 if args.quick else 5
    if args.steps is None:
        args.steps = 3 if args.quick else 6
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    for r in rows:
        if r not in ROWS:
            sys.exit(f"unknown row {r}; rows are {','.join(ROWS)}")
    if args.steps < 2:
        sys.exit("--steps must be >= 2 (the first step is not timed)")
    build = args.build or os.path.join(ROOT, "build")
    gf_bin = os.path.join(build, "bin", "gridformer")
    for b in [gf_bin] + ([args.gemm_bin] if "gemm" in rows else []):
        if not os.path.exists(b):
            sys.exit(f"{b} not found (build first, or --build / --gemm-bin)")

    cpu, ncpu = machine()
    load0 = load()
    t_start = time.time()
    print(f"machine: {cpu}; nproc {ncpu}; load average {load0} at the start")
    print(f"gridformer {gf_bin}; {args.threads} threads; {args.steps} steps per run ({args.steps - 1} timed), "
          f"{args.rounds} rounds; rows {','.join(rows)}", flush=True)

    B124 = SHAPES["gpt2-124M"]["batch_size"]
    data124 = dict(num_samples=B124)  # one batch repeated: the fp32/bf16 loss curves fall
    need_gf32 = any(r in rows for r in ("fp32", "bf16", "rss"))
    need_pt32 = any(r in rows for r in ("fp32", "rss"))
    shapes = args.gemm_shapes.split(",")
    M = {"gemm": [], "gf32": [], "pt32": [], "gf16": [], "pt16": [], "gftiny": [], "pttiny": [], "loss": [],
         "seq": {}}
    bf16_built = None  # unknown until the first bf16 run

    with tempfile.TemporaryDirectory() as work:
        for rnd in range(1, args.rounds + 1):
            print(f"round {rnd}/{args.rounds} (load {load()})", flush=True)
            if "gemm" in rows:
                g = gemm_round(shapes, args.threads, args.gemm_bin)
                M["gemm"].append(g)
                print("  gemm GFLOP/s: " + ", ".join(f"{k[0]} {k[1]} {v:.0f}" for k, v in sorted(g.items())),
                      flush=True)
            gf32 = None
            if need_gf32:
                gf32 = gridformer_run("gpt2-124M", args.steps, args.threads, args.peak_tflops, work, build,
                                      tag="124M_fp32", data_extra=data124)
                M["gf32"].append(gf32)
                print(f"  gpt2-124M fp32 gridformer {gf32['tokens_per_s']:.1f} tok/s {gf32['tflops']:.4f} TFLOP/s, "
                      f"peak RSS {rank0(gf32['run']['resources'])['peak_rss_bytes'] / MiB:.0f} MiB", flush=True)
            if need_pt32:
                p = pytorch_run("gpt2-124M", args.steps, args.threads)
                M["pt32"].append(p)
                print(f"  gpt2-124M fp32 pytorch    {p['tokens_per_s']:.1f} tok/s {p['tflops']:.4f} TFLOP/s, "
                      f"peak RSS {p['peak_rss_bytes'] / MiB:.0f} MiB, cpu util {p['median_cpu_util']:.2f}", flush=True)
            if "bf16" in rows:
                if bf16_built is not False:
                    gf16 = gridformer_run("gpt2-124M", args.steps, args.threads, args.peak_tflops, work, build,
                                          tag="124M_bf16", data_extra=data124,
                                          model_extra=dict(compute_dtype="bfloat16"))
                    bf16_built = NOT_BUILT not in gf16["run"]["log"]
                    if bf16_built:
                        M["gf16"].append(gf16)
                        l32 = [r["loss"] for r in gf32["run"]["rows"]]
                        l16 = [r["loss"] for r in gf16["run"]["rows"]]
                        rel = max(abs(a - b) / abs(a) for a, b in zip(l32, l16))
                        M["loss"].append(dict(fp32=l32, bf16=l16, max_rel=rel))
                        print(f"  gpt2-124M bf16 gridformer {gf16['tokens_per_s']:.1f} tok/s "
                              f"{gf16['tflops']:.4f} TFLOP/s; loss fp32 {l32[0]:.4f} -> {l32[-1]:.4f}, "
                              f"bf16 {l16[0]:.4f} -> {l16[-1]:.4f}, max relative difference {rel:.2e}", flush=True)
                    else:
                        print("  gpt2-124M bf16 gridformer: the binary warns \"" + NOT_BUILT +
                              "; computing in float32\": bf16 not built (not run again)", flush=True)
                p = pytorch_run("gpt2-124M", args.steps, args.threads, dtype="bf16")
                M["pt16"].append(p)
                print(f"  gpt2-124M bf16 pytorch    {p['tokens_per_s']:.1f} tok/s {p['tflops']:.4f} TFLOP/s, "
                      f"cpu util {p['median_cpu_util']:.2f}", flush=True)
            if "tiny" in rows:
                g = gridformer_run("gpt2-tiny", args.steps, args.threads, args.peak_tflops, work, build, tag="tiny")
                p = pytorch_run("gpt2-tiny", args.steps, args.threads)
                M["gftiny"].append(g)
                M["pttiny"].append(p)
                print(f"  gpt2-tiny fp32 gridformer {g['tokens_per_s']:.1f} tok/s, pytorch {p['tokens_per_s']:.1f} tok/s",
                      flush=True)

        if "seq" in rows:
            lengths = [int(x) for x in args.seq_lengths.split(",")]
            for fused in (True, False):
                for T in lengths:
                    if not fused and args.quick and T > lengths[0]:
                        continue
                    shape = dict(SEQ_MODEL, seq_length=T)
                    run = gridformer_train(shape, 1, args.threads, args.peak_tflops, work, build,
                                           tag=f"seq{T}_{'fused' if fused else 'unfused'}",
                                           model_extra=dict(use_flash_attention=fused, hidden_dropout_rate=0.1,
                                                            attention_dropout_rate=0.1),
                                           data_extra=dict(seed=5, num_samples=4))
                    r0 = rank0(run["resources"])
                    M["seq"][(fused, T)] = dict(planned=r0["planned_activation_bytes"], rss=r0["peak_rss_bytes"],
                                                weights=2 * r0["optimizer_state_bytes"],
                                                step_ms=run["rows"][0]["step_ms"], loss=run["rows"][0]["loss"])
                    print(f"  seq {T} {'fused  ' if fused else 'unfused'}: planned activations "
                          f"{r0['planned_activation_bytes'] / MiB:.1f} MiB, peak RSS {r0['peak_rss_bytes'] / MiB:.1f} MiB, "
                          f"step {run['rows'][0]['step_ms']:.0f} ms, loss {run['rows'][0]['loss']:.4f}", flush=True)

    load1 = load()
    elapsed = time.time() - t_start

    # -----------------------------------------------------------------------------------------
    # Details, then the table
    table = []  # (target, ours, reference, ratio, goal, verdict)

    def verdict(ok):
        return "PASS" if ok else "FAIL"

    ceiling = None
    if M["gemm"]:
        keys = sorted(M["gemm"][0])
        medians = {k: med(g.get(k) for g in M["gemm"]) for k in keys}
        print(f"\nGEMM GFLOP/s at {args.threads} threads, medians over {len(M['gemm'])} rounds (each a median of 3):")
        print("| implementation | " + " | ".join(shapes) + " |")
        print("|---|" + "---:|" * len(shapes))
        for impl in sorted({k[0] for k in keys}):
            print(f"| {impl} | " + " | ".join(f"{medians.get((impl, s), float('nan')):.0f}" for s in shapes) + " |")
        fp32 = {k: v for k, v in medians.items() if k[0] in ("gridformer blas", "torch.mm fp32")}
        best = max(fp32, key=fp32.get)
        ceiling = fp32[best] / 1e3  # TFLOP/s
        ours = max(v for k, v in fp32.items() if k[0] == "gridformer blas")
        theirs = max(v for k, v in fp32.items() if k[0] == "torch.mm fp32")
        print(f"fp32 ceiling: {fp32[best]:.0f} GFLOP/s ({best[0]}, {best[1]})")
        table.append(("fp32 GEMM ceiling (max over " + ", ".join(shapes) + ")", f"{ours:.0f} GFLOP/s (OpenBLAS)",
                      f"{theirs:.0f} GFLOP/s (torch.mm)", f"{ours / theirs:.2f}x",
                      f"ceiling = {fp32[best]:.0f} GFLOP/s", "(measured)"))

    if M["gf32"] and M["pt32"] and "fp32" in rows:
        o, t = med(x["tokens_per_s"] for x in M["gf32"]), med(x["tokens_per_s"] for x in M["pt32"])
        of, tf = med(x["tflops"] for x in M["gf32"]), med(x["tflops"] for x in M["pt32"])
        print(f"\ngpt2-124M fp32: gridformer {o:.1f} tok/s ({of:.4f} TFLOP/s; rounds "
              + ", ".join(f"{x['tokens_per_s']:.1f}" for x in M["gf32"]) + f"), PyTorch {t:.1f} tok/s ({tf:.4f} TFLOP/s; "
              "rounds " + ", ".join(f"{x['tokens_per_s']:.1f}" for x in M["pt32"]) + ")")
        print("  " + round_ratios(M["gf32"], M["pt32"]))
        table.append(("gpt2-124M fp32, T 256 B 4: tokens/s", f"{o:.1f} tok/s", f"{t:.1f} tok/s (PyTorch)",
                      f"{o / t:.2f}x", ">= 1.5x", verdict(o / t >= 1.5)))
        if ceiling:
            table.append(("gpt2-124M fp32: Megatron TFLOP/s / fp32 GEMM ceiling", f"{of:.4f} TFLOP/s",
                          f"{ceiling:.4f} TFLOP/s (ceiling); PyTorch {tf:.4f}", f"{100 * of / ceiling:.1f}%", ">= 55%",
                          verdict(of / ceiling >= 0.55)))
        else:
            table.append(("gpt2-124M fp32: Megatron TFLOP/s / fp32 GEMM ceiling", f"{of:.4f} TFLOP/s",
                          "n/a (gemm row not run)", "n/a", ">= 55%", "n/a"))

    if "bf16" in rows:
        t = med(x["tokens_per_s"] for x in M["pt16"])
        print(f"\ngpt2-124M bf16: PyTorch autocast {t:.1f} tok/s (rounds "
              + ", ".join(f"{x['tokens_per_s']:.1f}" for x in M["pt16"]) + ")")
        if bf16_built:
            o = med(x["tokens_per_s"] for x in M["gf16"])
            print(f"  gridformer bf16 {o:.1f} tok/s (rounds " + ", ".join(f"{x['tokens_per_s']:.1f}" for x in M["gf16"])
                  + ")")
            print("  " + round_ratios(M["gf16"], M["pt16"]))
            log16 = M["gf16"][0]["run"]["log"]
            for line in log16.splitlines():
                if "mixed precision:" in line:
                    print("  " + line.split("] ", 3)[-1])
            r16 = rank0(M["gf16"][0]["run"]["resources"])
            a16 = 8 * arena_floats("gpt2-124M") + r16["optimizer_state_bytes"] + r16["planned_activation_bytes"] \
                + r16.get("weight_copy_bytes", 0)
            print(f"  bf16 peak RSS {max(rank0(x['run']['resources'])['peak_rss_bytes'] for x in M['gf16']) / MiB:.0f} MiB "
                  f"against {a16 / MiB:.0f} MiB analytic (the fp32 sum + the bf16 weight copy "
                  f"{r16.get('weight_copy_bytes', 0) / MiB:.1f} MiB, planned activations "
                  f"{r16['planned_activation_bytes'] / MiB:.1f} MiB); PyTorch autocast peak RSS "
                  f"{max(x['peak_rss_bytes'] for x in M['pt16']) / MiB:.0f} MiB")
            for i, lc in enumerate(M["loss"]):
                print(f"  round {i + 1} losses fp32 " + " ".join(f"{x:.5f}" for x in lc["fp32"]))
                print(f"  round {i + 1} losses bf16 " + " ".join(f"{x:.5f}" for x in lc["bf16"]))
            rel = max(lc["max_rel"] for lc in M["loss"])
            table.append(("gpt2-124M bf16: tokens/s", f"{o:.1f} tok/s", f"{t:.1f} tok/s (PyTorch autocast)",
                          f"{o / t:.2f}x", ">= 1.5x", verdict(o / t >= 1.5)))
            table.append((f"gpt2-124M bf16 loss curve vs fp32 ({args.steps} steps, same seed and data)",
                          f"max rel. diff {rel:.2e}", f"fp32 loss {M['loss'][0]['fp32'][0]:.4f} -> "
                          f"{M['loss'][0]['fp32'][-1]:.4f}", f"{rel / args.loss_tol:.4f} of tol",
                          f"<= {args.loss_tol:g} relative", verdict(rel <= args.loss_tol)))
        else:
            table.append(("gpt2-124M bf16: tokens/s", "bf16 not built", f"{t:.1f} tok/s (PyTorch autocast)", "—",
                          ">= 1.5x", "not built"))
            table.append(("gpt2-124M bf16 loss curve vs fp32", "bf16 not built", "—", "—",
                          f"<= {args.loss_tol:g} relative", "not built"))

    if M["gftiny"]:
        o, t = med(x["tokens_per_s"] for x in M["gftiny"]), med(x["tokens_per_s"] for x in M["pttiny"])
        print(f"\ngpt2-tiny fp32: gridformer {o:.1f} tok/s (rounds " + ", ".join(f"{x['tokens_per_s']:.1f}" for x in M["gftiny"])
              + f"), PyTorch {t:.1f} tok/s (rounds " + ", ".join(f"{x['tokens_per_s']:.1f}" for x in M["pttiny"]) + ")")
        print("  " + round_ratios(M["gftiny"], M["pttiny"]))
        table.append(("gpt2-tiny fp32 (4 L, 256 h, T 256 B 8): tokens/s", f"{o:.1f} tok/s", f"{t:.1f} tok/s (PyTorch)",
                      f"{o / t:.2f}x", ">= 1.5x", verdict(o / t >= 1.5)))

    if "rss" in rows and M["gf32"]:
        res = [rank0(x["run"]["resources"]) for x in M["gf32"]]
        peak = max(r["peak_rss_bytes"] for r in res)
        arena = arena_floats("gpt2-124M")
        opt, planned = res[0]["optimizer_state_bytes"], res[0]["planned_activation_bytes"]
        analytic = 2 * 4 * arena + opt + planned
        print(f"\ngpt2-124M fp32 memory: {memory_line(M['gf32'][0]['run']['log'])}")
        print(f"  arena {arena} floats: parameters + gradients {8 * arena / MiB:.1f} MiB; AdamW moments "
              f"{opt / MiB:.1f} MiB (2 x 4 B x arena = {8 * arena / MiB:.1f} MiB: "
              f"{'equal' if opt == 8 * arena else 'DIFFERENT'}); planned activations {planned / MiB:.1f} MiB; "
              f"analytic {analytic / MiB:.1f} MiB")
        print("  peak RSS per round: " + ", ".join(f"{r['peak_rss_bytes'] / MiB:.0f}" for r in res) + " MiB")
        pt = max(x["peak_rss_bytes"] for x in M["pt32"]) if M["pt32"] else None
        table.append(("gpt2-124M fp32 peak RSS / analytic (params + grads + 2 moments + planned activations)",
                      f"{peak / MiB:.0f} MiB", f"{analytic / MiB:.0f} MiB analytic"
                      + (f"; PyTorch peak RSS {pt / MiB:.0f} MiB" if pt else ""),
                      f"{peak / analytic:.3f}x", "<= 1.15x", verdict(peak / analytic <= 1.15)))

    if M["seq"]:
        lengths = sorted({T for _, T in M["seq"]})
        print("\nLong sequences (2 layers, hidden 64, 2 heads, vocabulary 1000, batch 1, 1 step):")
        print("| attention | T | planned activations | peak RSS | params+grads+moments | step |")
        print("|---|---:|---:|---:|---:|---:|")
        for (fused, T), v in sorted(M["seq"].items(), key=lambda kv: (not kv[0][0], kv[0][1])):
            print(f"| {'fused' if fused else 'unfused'} | {T} | {v['planned'] / MiB:.1f} MiB | {v['rss'] / MiB:.1f} MiB | "
                  f"{v['weights'] / MiB:.1f} MiB | {v['step_ms'] / 1e3:.1f} s |")
        lo, hi = lengths[0], lengths[-1]
        f_lo, f_hi = M["seq"].get((True, lo)), M["seq"].get((True, hi))
        u_lo, u_hi = M["seq"].get((False, lo)), M["seq"].get((False, hi))
        if f_lo and f_hi and hi == 2 * lo:
            ratio = f_hi["planned"] / f_lo["planned"]
            ref = (f"unfused planned {u_lo['planned'] / MiB:.0f} -> {u_hi['planned'] / MiB:.0f} MiB "
                   f"({u_hi['planned'] / u_lo['planned']:.2f}x)" if u_lo and u_hi else
                   f"unfused planned at T {lo}: {u_lo['planned'] / MiB:.0f} MiB" if u_lo else "")
            table.append((f"fused attention, T {lo} -> {hi}: planned activation bytes (peak RSS)",
                          f"{f_lo['planned'] / MiB:.1f} -> {f_hi['planned'] / MiB:.1f} MiB "
                          f"(RSS {f_lo['rss'] / MiB:.0f} -> {f_hi['rss'] / MiB:.0f} MiB, "
                          f"{f_hi['rss'] / f_lo['rss']:.2f}x)", ref, f"{ratio:.3f}x", "~2x (<= 2.1x), not 4x",
                          verdict(ratio <= 2.1)))

    print(f"\nload average {load0} at the start, {load1} at the end; {elapsed / 60:.1f} min")
    print(f"\n## Targets ({cpu}, {ncpu} CPUs, {args.threads} threads; medians of {args.steps - 1} timed steps x "
          f"{args.rounds} rounds)\n")
    print("| target | gridformer | reference (same run) | ratio | goal | |")
    print("|---|---:|---:|---:|---|---|")
    for row in table:
        print("| " + " | ".join(row) + " |")

    if args.json:
        def keyfix(d):
            return {f"{k[0]} {k[1]}" if isinstance(k, tuple) else k: v for k, v in d.items()}
        dump = dict(machine=cpu, nproc=ncpu, load_start=load0, load_end=load1, args=vars(args), table=table,
                    gemm=[keyfix(g) for g in M["gemm"]],
                    gf32=[{k: v for k, v in x.items() if k != "run"} | {"resources": x["run"]["resources"]}
                          for x in M["gf32"]],
                    pt32=M["pt32"], pt16=M["pt16"], gf16=[{k: v for k, v in x.items() if k != "run"} for x in M["gf16"]],
                    gftiny=[{k: v for k, v in x.items() if k != "run"} for x in M["gftiny"]], pttiny=M["pttiny"],
                    loss=M["loss"], bf16_built=bf16_built,
                    seq={f"{'fused' if f else 'unfused'} {T}": v for (f, T), v in M["seq"].items()})
        with open(args.json, "w") as f:
            json.dump(dump, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
