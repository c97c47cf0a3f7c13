#!/usr/bin/env python3
"""Pipeline parallelism: the bubble of each schedule, measured beside its analytic figure, and pp2
against dp2 and one rank in throughput, in one run on this machine.

    python3 bench/pipeline_bubble.py [--rounds 3] [--steps 6] [--build build] [--quick] [--json FILE]

1. Bubble. GPT-2 of gpt2-tiny's shape (hidden 256, 4 heads, seq 256, dropout 0, RandomTokens,
   AdamW + clipping: bench/train_vs_pytorch.py's YAML) but 8 layers, since 4 stages x 2 interleaved
   chunks are 8 virtual stages of one layer each; micro_batch_num 8 of batch_size 1 (global batch 8),
   OMP_NUM_THREADS=1 per rank, under each schedule: gpipe, 1f1b, interleaved (pipeline_interleave
   True, pp_interleave_num 2), zero_bubble_h1 and zero_bubble_v (ZB-V: two chunks a stage in a V; its
   "analytic" is the simulator's figure at f = b = w, no closed form). Two vocabularies:
     gpt2-tiny  vocab 50257, the issue's shape. Its LM head (256 x 50257, forward and backward over
                every token) costs about 14 transformer layers, all on the last stage, so the
                measured bubble is mostly that stage's excess, not the schedule's;
     balanced   vocab 512: the same stages with a head smaller than a layer, so the stages are
                about equal, as the analytic figures assume.
   At pp4 (4 ranks on this machine's 2 cores: oversubscribed, see below) and pp2 (2 ranks, one core
   each: the clean measurement here). A row's bubble is the median over the timed steps of all
   rounds of metrics.jsonl's "bubble" (per stage 1 - compute seconds / the slowest stage's seconds
   in the schedule, mean of the stages), "worst" the median of "bubble_max", "analytic" its
   "bubble_analytic" (closed form for equal stages and f = b = w). Beside each schedule, the planned
   activations of each stage from `gridformer plan` with the same overrides.
   The per-pass times are not logged, so beside the analytic figure a "FLOP model" counts the costs
   in Megatron's FLOPs: for gpipe and 1f1b the stages' unequal costs (a layer 72C^2 + 12TC per token,
   the LM head 6CV on the last stage; the step is sum(t_s) + (m - 1) max(t_s)); for zero_bubble_h1,
   (p-1)(f+b-w) / (m(f+b+w) + (p-1)(f+b-w)) at a layer's split f = 24C^2 + 4TC, b = 24C^2 + 8TC,
   w = 24C^2 (the attention products have no weights); none for interleaved.

   Oversubscription: at pp4 Open MPI sees 4 ranks on 2 slots and sets mpi_yield_when_idle itself
   (checked here with mpi_show_mca_params); the script passes --mca mpi_yield_when_idle 1 explicitly
   and runs, as an aside, the balanced 1f1b and zero_bubble_h1 rows with 0 (busy polling in waits).

   Shared memory: Open MPI's default single-copy mechanism (cma) is kept: a probe run checks it works
   (else every run falls back to btl_vader_single_copy_mechanism=none, and the output says so); the
   aside runs the balanced pp2 1f1b row with none, as the test scripts set it.

2. Throughput. gpt2-tiny itself (4 layers, vocab 50257) and its balanced variant (vocab 512), global
   batch 8, as one (1 rank x 2 threads, batch 8), dp2 (2 ranks x 1 thread, batch 4) and pp2 (2 ranks
   x 1 thread, 1f1b, micro_batch_num 8 of batch 1: the smallest bubble at the same global batch;
   m 4 x batch 2 and m 2 x batch 4 measured slower here). tokens/s medians, ratios against dp2.

Runs are in interleaved rounds; the first step of every run is not timed; each run starts from a
deleted output directory (metrics.jsonl appends).
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCHEDULES = ["1f1b", "interleaved", "zero_bubble_h1", "zero_bubble_v", "gpipe"]
VOCABS = {"gpt2-tiny": 50257, "balanced": 512}
C, T, HEADS = 256, 256, 4
GLOBAL_BATCH = 8


class Run:
    """One configuration: a YAML plus --set overrides, ranks and threads, and MCA settings."""

    def __init__(self, key, group, vocab, layers, pp=1, dp=1, m=1, batch=8, sched="1f1b", threads=1, mca=None,
                 aside=False, label=None):
        self.key, self.group, self.vocab, self.layers = key, group, vocab, layers
        self.pp, self.dp, self.m, self.batch, self.sched, self.threads = pp, dp, m, batch, sched, threads
        self.mca = dict(mca or {})
        self.aside = aside
        self.label = label or key

    @property
    def ranks(self):
        return self.pp * self.dp

    def sets(self):
        s = [f"model.model_config.vocab_size={self.vocab}", f"model.model_config.num_layers={self.layers}",
             f"parallel_config.pipeline_stage={self.pp}", f"parallel_config.data_parallel={self.dp}",
             f"parallel_config.micro_batch_num={self.m}", f"runner_config.batch_size={self.batch}"]
        if self.pp > 1:
            if self.sched in ("interleaved", "zero_bubble_v"):
                name = "1f1b" if self.sched == "interleaved" else self.sched  # 1f1b over two chunks interleaves
                s += [f"parallel.pipeline_config.pipeline_scheduler={name}",
                      "parallel.pipeline_config.pipeline_interleave=True", "model.model_config.pp_interleave_num=2"]
            else:
                s += [f"parallel.pipeline_config.pipeline_scheduler={self.sched}"]
        return s


BASE_YAML = """
seed: 1
output_dir: {out}
runner_config: {{batch_size: 1, train_steps: {steps}}}
runner_wrapper: {{use_clip_grad: True, max_grad_norm: 1.0}}
optimizer: {{type: AdamWeightDecay, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: 0.1}}
lr_schedule: {{type: constant, learning_rate: 1.0e-4}}
train_dataset: {{data_loader: {{type: RandomTokens, seed: 0}}}}
callbacks: [{{type: MFLossMonitor, per_print_times: 1}}]
parallel: {{pipeline_config: {{pipeline_scheduler: 1f1b, pipeline_interleave: False}}}}
parallel_config: {{data_parallel: 1, model_parallel: 1, pipeline_stage: 1, micro_batch_num: 1}}
model:
  arch: {{type: GPT2LMHeadModel}}
  model_config: {{type: GPT2Config, vocab_size: 50257, seq_length: {T}, max_position_embeddings: 1024,
                 hidden_size: {C}, num_layers: 4, num_heads: {H}, hidden_act: gelu_new,
                 hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0}}
"""


def write_yaml(path, out, steps):
    with open(path, "w") as f:
        f.write(BASE_YAML.format(out=out, steps=steps, T=T, C=C, H=HEADS))


def mpi_env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def command(binary, run, cfg, steps, mca, extra_mca=()):
    cmd = [binary, "train", "--config", cfg, "--set", f"runner_config.train_steps={steps}"]
    for s in run.sets():
        cmd += ["--set", s]
    if run.ranks > 1:
        pre = ["mpirun", "-np", str(run.ranks), "--oversubscribe"]
        for k, v in {**mca, **run.mca}.items():
            pre += ["--mca", k, str(v)]
        for k, v in extra_mca:
            pre += ["--mca", k, v]
        cmd = pre + cmd
    return cmd


def train(binary, run, work, steps, mca, timeout=600):
    """Trains `run`; returns its timed metrics rows (step 1 dropped)."""
    out = os.path.join(work, "out")
    shutil.rmtree(out, ignore_errors=True)  # metrics.jsonl appends
    cfg = os.path.join(work, "run.yaml")
    write_yaml(cfg, out, steps)
    cmd = command(binary, run, cfg, steps, mca)
    p = subprocess.run(cmd, env=mpi_env(run.threads), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"{run.label}: `{' '.join(cmd)}` failed ({p.returncode}):\n" + p.stdout[-3000:])
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in l]
    if len(rows) != steps:
        sys.exit(f"{run.label}: {len(rows)} step rows in metrics.jsonl for {steps} steps")
    return [r for r in rows if r["step"] > 1]


def plan(binary, run, work):
    """Per pipeline stage: (layer ranges and slots as printed, planned activations MiB)."""
    cfg = os.path.join(work, "plan.yaml")
    write_yaml(cfg, os.path.join(work, "plan_out"), 1)
    cmd = [binary, "plan", "--config", cfg]
    for s in run.sets():
        cmd += ["--set", s]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"plan for {run.label}: `{' '.join(cmd)}` failed:\n{p.stdout[-2000:]}")
    unit = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0}
    stages, cur = [], None
    for line in p.stdout.splitlines():
        m = re.match(r"pipeline stage (\d+): (.*)", line)
        if m:
            cur = {"stage": int(m.group(1)), "layers": m.group(2)}
            stages.append(cur)
            continue
        m = re.search(r"activations ([0-9.]+) (B|KiB|MiB|GiB)", line)
        if m and cur is not None and "activations_mib" not in cur:
            cur["activations_mib"] = float(m.group(1)) * unit[m.group(2)]
    if run.pp > 1 and (len(stages) != run.pp or any("activations_mib" not in s for s in stages)):
        sys.exit(f"plan for {run.label}: could not read each stage's activations from:\n{p.stdout[-2000:]}")
    return stages


def probe_mpi(binary, work):
    """A small pp2 and pp4 pipeline run with Open MPI's defaults (its activations, 16 KiB, above the
    shared-memory eager limit, so they go through the single-copy path). Returns (cma_ok, what the
    runs reported for mpi_yield_when_idle and btl_vader_single_copy_mechanism, error text)."""
    shown = {}
    for ranks in (2, 4):
        out = os.path.join(work, "probe")
        shutil.rmtree(out, ignore_errors=True)
        cfg = os.path.join(work, "probe.yaml")
        write_yaml(cfg, out, 2)
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--mca", "mpi_show_mca_params", "all", binary, "train",
               "--config", cfg]
        for s in ["model.model_config.vocab_size=512", "model.model_config.hidden_size=64",
                  "model.model_config.seq_length=64", f"model.model_config.num_layers={ranks}",
                  f"parallel_config.pipeline_stage={ranks}", f"parallel_config.micro_batch_num={ranks}",
                  "runner_config.batch_size=1", "runner_config.train_steps=2"]:
            cmd += ["--set", s]
        try:
            p = subprocess.run(cmd, env=mpi_env(1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=120)
            text, rc = p.stdout, p.returncode
        except subprocess.TimeoutExpired as e:
            text, rc = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), -1
        for key in ("mpi_yield_when_idle", "btl_vader_single_copy_mechanism"):
            m = re.search(rf"{key}=(\S+ \(\S+\))", text)
            if m:
                shown[f"{key} at {ranks} ranks"] = m.group(1)
        # Open MPI's vader BTL reports a failed single copy as "Read -1, expected N, errno = 1" (or
        # names process_vm_readv / CMA) and aborts or hangs.
        bad = re.search(r"process_vm_readv|process_vm_writev|errno = \d+|\bCMA\b[^\n]*(fail|not|denied)", text, re.I)
        if rc != 0 or bad:
            hint = [l for l in text.splitlines() if "=" not in l or "errno" in l]
            return False, shown, f"{ranks} ranks: exit {rc}" + (f", {bad.group(0)!r}" if bad else "") + ":\n" + \
                "\n".join(hint[-15:])
    return True, shown, ""


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def zbh1_analytic(p, m, f, b, w):
    return (p - 1) * (f + b - w) / (m * (f + b + w) + (p - 1) * (f + b - w))


def flop_costs():
    """Megatron's per-token FLOPs of one layer's forward, input-gradient and weight-gradient passes."""
    return 24 * C * C + 4 * T * C, 24 * C * C + 8 * T * C, 24 * C * C


def padded_vocab(v, multiple=128):  # model_config.vocab_pad_multiple
    return (v + multiple - 1) // multiple * multiple


def stage_flops(run):
    """Per stage, Megatron's FLOPs per token of forward + backward: 72C^2 + 12TC a layer, 6 C V the
    LM head (on the last stage); the embedding lookup, norms and loss not counted. Even layer split."""
    per = run.layers // run.pp
    t = [per * (72 * C * C + 12 * T * C) for _ in range(run.pp)]
    t[-1] += 6 * C * padded_vocab(run.vocab)
    return t


def model_bubble(run):
    """The bubble with the costs counted in FLOPs. GPipe and 1F1B with unequal stages: the step is
    sum(t_s) + (m - 1) max(t_s) (the first micro-batch fills the pipeline, the slowest stage then
    runs the others back to back, the last drains), so stage s idles 1 - m t_s / that. ZB-H1: the
    equal-stage closed form at the layers' f : b : w. Interleaved: none here (None)."""
    if run.sched in ("1f1b", "gpipe"):
        t = stage_flops(run)
        span = sum(t) + (run.m - 1) * max(t)
        return statistics.mean(1 - run.m * x / span for x in t)
    if run.sched == "zero_bubble_h1":
        return zbh1_analytic(run.pp, run.m, *flop_costs())
    return None


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        return m.group(1).strip() if m else "unknown"
    except OSError:
        return "unknown"


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %s"], stdout=subprocess.PIPE,
                              text=True).stdout.strip()
    except OSError:
        return "unknown"


def schedules(pp, vname):
    """pp2 gpt2-tiny runs 1f1b and zero_bubble_h1 only: there every schedule measures the head stage's
    excess (pp4 shows all four), and its 2.4 s steps would take a minute a round."""
    return ["1f1b", "zero_bubble_h1"] if (pp, vname) == (2, "gpt2-tiny") else SCHEDULES


def build_runs(args):
    runs = []
    yield1 = {"mpi_yield_when_idle": 1}
    for pp in (4, 2):
        for vname, v in VOCABS.items():
            for s in schedules(pp, vname):
                runs.append(Run(f"pp{pp} {vname} {s}", f"bubble pp{pp}", v, 8, pp=pp, m=8, batch=1, sched=s,
                                mca=yield1 if pp == 4 else None))
    if not args.quick:
        for s in ("1f1b", "zero_bubble_h1"):
            runs.append(Run(f"pp4 balanced {s} yield0", "aside", VOCABS["balanced"], 8, pp=4, m=8, batch=1, sched=s,
                            mca={"mpi_yield_when_idle": 0}, aside=True,
                            label=f"pp4 balanced {s}, mpi_yield_when_idle 0 (busy polling)"))
        runs.append(Run("pp2 balanced 1f1b none", "aside", VOCABS["balanced"], 8, pp=2, m=8, batch=1, sched="1f1b",
                        mca={"btl_vader_single_copy_mechanism": "none"}, aside=True,
                        label="pp2 balanced 1f1b, btl_vader_single_copy_mechanism none"))
    for vname, v in VOCABS.items():
        runs.append(Run(f"tput {vname} one", "throughput", v, 4, batch=8, threads=2, label=f"{vname} one"))
        runs.append(Run(f"tput {vname} dp2", "throughput", v, 4, dp=2, batch=4, label=f"{vname} dp2"))
        runs.append(Run(f"tput {vname} pp2", "throughput", v, 4, pp=2, m=8, batch=1, sched="1f1b",
                        label=f"{vname} pp2"))
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6, help="steps per run (the first is not timed)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--quick", action="store_true", help="1 round of 3 steps, no asides")
    ap.add_argument("--json", default=None, help="write the figures and per-round raw figures here")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.steps = 1, 3
    if args.steps < 2:
        sys.exit("--steps must be at least 2 (the first step is not timed)")
    binary = os.path.join(os.path.abspath(args.build), "bin", "gridformer")
    if not os.path.exists(binary):
        sys.exit(f"{binary} not found: build it (bash scripts/setup.sh) or pass --build DIR")
    t_start = time.time()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    load0 = os.getloadavg()
    cpu = cpu_model()
    commit = git_commit()
    cmdline = "python3 " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    print(f"{cmdline}\ncpu: {cpu}, {os.cpu_count()} cores; load average {load0[0]:.2f} at the start; "
          f"commit {commit}; {args.rounds} round(s) x {args.steps} steps per run (first not timed)", flush=True)
    runs = build_runs(args)
    record = {"date": started, "cpu": cpu, "cores": os.cpu_count(), "command": cmdline, "commit": commit,
              "rounds": args.rounds, "steps": args.steps, "load_average_start": load0[0]}
    with tempfile.TemporaryDirectory() as work:
        cma_ok, shown, err = probe_mpi(binary, work)
        base_mca = {} if cma_ok else {"btl_vader_single_copy_mechanism": "none"}
        print("mpi probe: " + ", ".join(f"{k} = {v}" for k, v in shown.items()), flush=True)
        if not cma_ok:
            print("mpi probe: the default single-copy mechanism (cma) FAILED here; every run falls back to "
                  "btl_vader_single_copy_mechanism=none (the aside row is then the same setting):\n" + err, flush=True)
        record["mpi"] = {"cma_works": cma_ok, "shown": shown, "base_mca": base_mca}
        plans = {}
        for r in runs:
            if r.pp > 1 and r.group.startswith("bubble"):
                plans[r.key] = plan(binary, r, work)
        rows = {r.key: [] for r in runs}
        per_round = {r.key: [] for r in runs}
        for rd in range(args.rounds):
            t0 = time.time()
            for r in runs:
                got = train(binary, r, work, args.steps, base_mca)
                rows[r.key] += got
                per_round[r.key].append({
                    "steps": [{k: x.get(k) for k in ("step", "step_ms", "tokens_per_s", "bubble", "bubble_max")}
                              for x in got],
                    "bubble": med([x["bubble"] for x in got]) if r.pp > 1 else None,
                    "tokens_per_s": med([x["tokens_per_s"] for x in got])})
            summary = ", ".join(
                f"{r.key.replace('zero_bubble_h1', 'zbh1')} " +
                (f"{100 * per_round[r.key][-1]['bubble']:.1f}%" if r.pp > 1 and r.group != "throughput"
                 else f"{per_round[r.key][-1]['tokens_per_s']:.0f} tok/s") for r in runs)
            print(f"  round {rd + 1} ({time.time() - t0:.0f} s, load {os.getloadavg()[0]:.2f}): {summary}", flush=True)
    load1 = os.getloadavg()
    record["load_average_end"] = load1[0]

    fw, fb, fww = flop_costs()
    res = {}
    for r in runs:
        xs = rows[r.key]
        e = {"label": r.label, "group": r.group, "pp": r.pp, "dp": r.dp, "micro_batch_num": r.m,
             "batch_size": r.batch, "schedule": r.sched if r.pp > 1 else None, "vocab_size": r.vocab,
             "num_layers": r.layers, "ranks": r.ranks, "threads_per_rank": r.threads,
             "mca": {**base_mca, **r.mca}, "sets": r.sets(),
             "step_ms": med([x["step_ms"] for x in xs]), "tokens_per_s": med([x["tokens_per_s"] for x in xs]),
             "per_round": per_round[r.key]}
        if r.pp > 1:
            e["bubble"] = med([x["bubble"] for x in xs])
            e["bubble_max"] = med([x["bubble_max"] for x in xs])
            e["bubble_analytic"] = xs[0]["bubble_analytic"]
            e["bubble_flop_model"] = model_bubble(r)
            e["stage_flops_per_token"] = stage_flops(r)
        if r.key in plans:
            e["plan_stages"] = plans[r.key]
        res[r.key] = e
    record["runs"] = res
    record["flop_costs_per_token"] = {"f": fw, "b": fb, "w": fww}

    # ---- tables
    def pct(x):
        return f"{100 * x:5.1f}%"

    print(f"\nBubble (median over {args.steps - 1} timed steps x {args.rounds} rounds; 8 layers, hidden 256, "
          f"seq 256, m 8 x batch 1; load average {load1[0]:.2f} at the end)")
    hdr = (f"{'pp':>3s} {'model':10s} {'schedule':15s} {'measured':>8s} {'worst':>7s} {'analytic':>8s} {'FLOPmodel':>9s} "
           f"{'step ms':>8s} {'tok/s':>7s}  planned activations per stage (MiB)  per-round bubbles")
    print(hdr)
    print("-" * len(hdr))
    for pp in (4, 2):
        for vname in VOCABS:
            for s in schedules(pp, vname):
                e = res[f"pp{pp} {vname} {s}"]
                acts = "/".join(f"{st['activations_mib']:.1f}" for st in e.get("plan_stages", []))
                fm = "-" if e["bubble_flop_model"] is None else pct(e["bubble_flop_model"])
                print(f"{pp:3d} {vname:10s} {s:15s} {pct(e['bubble']):>8s} {pct(e['bubble_max']):>7s} "
                      f"{pct(e['bubble_analytic']):>8s} {fm:>9s} {e['step_ms']:8.1f} {e['tokens_per_s']:7.1f}  {acts:35s}  "
                      + ", ".join(pct(x["bubble"]).strip() for x in e["per_round"]))
    f, b, w = flop_costs()
    layer = 72 * C * C + 12 * T * C
    print(f"(analytic: equal stages, f = b = w. FLOP model: 1f1b and gpipe over the stages' FLOPs, a layer "
          f"{layer / 1e6:.3f} MFLOP/token forward + backward, the head 6CV on the last stage; zero_bubble_h1 equal "
          f"stages at a layer's f:b:w = {f / 1e6:.3f}:{b / 1e6:.3f}:{w / 1e6:.3f} MFLOP/token; interleaved none)")
    print("\nZB-H1, ZB-V and interleaved against 1F1B (ratios of the medians)")
    ratios = {}
    for pp in (4, 2):
        for vname in VOCABS:
            a = res[f"pp{pp} {vname} 1f1b"]
            for other in [x for x in ("zero_bubble_h1", "zero_bubble_v", "interleaved") if x in schedules(pp, vname)]:
                z = res[f"pp{pp} {vname} {other}"]
                k = f"pp{pp} {vname} {other}/1f1b"
                ratios[k] = {"measured": z["bubble"] / a["bubble"], "analytic": z["bubble_analytic"] / a["bubble_analytic"],
                             "step_ms": z["step_ms"] / a["step_ms"]}
                extra = ""
                if other == "zero_bubble_h1":
                    # both equal-stage figures: ZB-H1 at a layer's f:b:w over 1F1B's (independent of f:b:w)
                    ratios[k]["flop_split"] = z["bubble_flop_model"] / a["bubble_analytic"]
                    extra = f"; at a layer's f:b:w {ratios[k]['flop_split']:.3f}"
                print(f"  pp{pp} {vname:10s} {other:15s}/1f1b: bubble measured {ratios[k]['measured']:.3f}, analytic "
                      f"{ratios[k]['analytic']:.3f}; step time {ratios[k]['step_ms']:.3f}{extra}")
    record["ratios"] = ratios
    asides = [r for r in runs if r.aside]
    if asides:
        print("\nAsides (same medians; compare with the rows above)")
        for r in asides:
            e = res[r.key]
            print(f"  {r.label:62s} bubble {pct(e['bubble'])} worst {pct(e['bubble_max'])} analytic "
                  f"{pct(e['bubble_analytic'])}, step {e['step_ms']:.1f} ms, per round "
                  + ", ".join(pct(x["bubble"]).strip() for x in e["per_round"]))
    print(f"\nThroughput (4 layers, global batch 8; median tokens/s over {args.steps - 1} timed steps x "
          f"{args.rounds} rounds)")
    hdr = f"{'model':10s} {'layout':40s} {'ranks x thr':>11s} {'tok/s':>8s} {'step ms':>8s} {'vs dp2':>7s}  per-round"
    print(hdr)
    print("-" * len(hdr))
    for vname in VOCABS:
        base = res[f"tput {vname} dp2"]["tokens_per_s"]
        for lay, desc in (("one", "one rank, batch 8"), ("dp2", "dp2, batch 4"),
                          ("pp2", "pp2 1f1b, m 8 x batch 1")):
            e = res[f"tput {vname} {lay}"]
            e["vs_dp2"] = e["tokens_per_s"] / base
            extra = f" (bubble {pct(e['bubble']).strip()})" if lay == "pp2" else ""
            print(f"{vname:10s} {desc + extra:40s} {e['ranks']:>5d} x {e['threads_per_rank']:<3d} "
                  f"{e['tokens_per_s']:8.1f} {e['step_ms']:8.1f} {e['vs_dp2']:6.3f}x  "
                  + ", ".join(f"{x['tokens_per_s']:.0f}" for x in e["per_round"]))
    total = time.time() - t_start
    record["total_seconds"] = total
    print(f"\nload average {load1[0]:.2f} at the end; total time {total:.0f} s")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
