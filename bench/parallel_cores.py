#!/usr/bin/env python3
"""Pipeline bubbles and expert parallelism with a core for every thread: the Speed issue's pp4 and ep8
rows, for a machine with many cores (16 in the issue; on 2 cores everything is oversubscribed).

    python3 bench/parallel_cores.py [--build build] [--cores N] [--steps 6] [--rounds 2] [--only pp,ep]
                                    [--old OTHER/gridformer] [--mca K=V,...] [--no-profile] [--json FILE]

N defaults to the machine's CPUs. Every rank is bound to its own N / ranks cores
(`mpirun --map-by slot:PE=t --bind-to core`), OMP_NUM_THREADS=t; rounds interleave the layouts, the order
rotating from round to round.

1. Pipeline, pp4 with 8 micro-batches, balanced stages (the issue's shape): GPT-2, 8 layers of 768 (12
   heads), T 256, vocabulary 512 (a head smaller than a layer, so the 4 stages of 2 layers are equal
   but for the embedding and the head, which the analytic figures ignore), dropout 0, RandomTokens,
   AdamW + clipping; micro_batch_num 8 of batch_size 1. Layouts:
     pp4-1f1b, pp4-zbh1   4 ranks x N/4 threads, bound;
     pp4-1f1b-unbound     the same with --bind-to none (the threads of the ranks float over the cores);
     dp4                  4 ranks x N/4 threads, data_parallel 4, batch 2 (the same global batch of 8);
     one                  1 rank x N threads, batch 8.
   A layout's bubble is metrics.jsonl's (per stage 1 - its compute seconds / the slowest stage's
   seconds in the schedule; mean over stages), median over the timed steps of all rounds, beside the
   closed form for equal stages ("bubble_analytic"). Then one profiled run of each pp4 schedule
   (profile: True over the timed steps) is read per stage from the merged Chrome trace: compute (the
   Forward / Backward / BackwardInput / BackwardWeight spans less the MPI_Wait spans inside them),
   waits for a neighbour inside the schedule, the final drain of sends, the pipeline's reductions,
   the optimizer and the step's other phases; and the schedule replayed with each stage's own
   measured pass times and no communication (an event simulation of the same action lists), which
   separates the bubble of the schedule with these passes from what waits and transfers add.

2. Experts: Mixtral-tiny (bench/train_vs_pytorch.py's shape: 4 layers, hidden 256, 8 heads / 2 kv
   heads, 8 SwiGLU experts of 704, top-2, dropless), T 256, global batch 16:
     ep8    8 ranks x N/8 threads, data_parallel 8, expert_parallel 8 (one expert of each layer a rank);
     dp8    8 ranks x N/8 threads, data_parallel 8 (every rank all experts);
     one    1 rank x N threads, batch 16.
   Ratios of median tokens/s against dp8 (the issue asks ep8 >= 0.95x of data parallel on the same
   cores), and profiled ep8 and dp8 runs' step phases per rank (profile_communication: the all-to-all's
   spans inside the passes, "all-to-all", are taken out of their compute).

--old BINARY runs the pp schedules with another build's gridformer too (pp4-1f1b@old, ...; each
new one's ratio is against its old one); --mca K=V,... sets Open MPI parameters for every run (e.g.
btl_vader_single_copy_mechanism=none: shared memory without CMA); --only pp-schedules runs only the
two pp4 schedules, pp2-schedules the same at pp2 with 4 layers (2 cores); --no-profile skips the
profiled runs.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pipeline_bubble as pb  # noqa: E402
import train_vs_pytorch as tvp  # noqa: E402

# The pp layouts' model: bench/pipeline_bubble.py's YAML at 768 wide, 12 heads, T 256, with
# vocabulary 512 and 8 layers set on top (PP_SETS, before each layout's own).
PP_SHAPE = dict(T=256, C=768, H=12)
PP_SETS = ["model.model_config.vocab_size=512", "model.model_config.num_layers=8"]


class Layout:
    def __init__(self, name, group, ranks, sets, bind=True, profile=False, binary=None, env=None):
        self.name, self.group, self.ranks, self.sets, self.bind, self.profile = name, group, ranks, sets, bind, profile
        self.binary, self.env = binary, dict(env or {})  # another build's gridformer; more environment


def layouts(cores, only):
    pp = lambda s: ["parallel_config.pipeline_stage=4", "parallel_config.micro_batch_num=8",
                    "runner_config.batch_size=1", f"parallel.pipeline_config.pipeline_scheduler={s}"]
    out = []
    if "pp-schedules" in only:
        out += [Layout("pp4-1f1b", "pp", 4, pp("1f1b")), Layout("pp4-zbh1", "pp", 4, pp("zero_bubble_h1"))]
    if "pp2-schedules" in only:  # a 2-core machine's clean case: 2 stages of 2 layers, a core each
        pp2 = lambda s: [x.replace("pipeline_stage=4", "pipeline_stage=2") for x in pp(s)] + \
            ["model.model_config.num_layers=4"]
        out += [Layout("pp2-1f1b", "pp", 2, pp2("1f1b")), Layout("pp2-zbh1", "pp", 2, pp2("zero_bubble_h1"))]
    if "pp" in only:
        out += [Layout("pp4-1f1b", "pp", 4, pp("1f1b")),
                Layout("pp4-zbh1", "pp", 4, pp("zero_bubble_h1")),
                Layout("pp4-1f1b-unbound", "pp", 4, pp("1f1b"), bind=False),
                Layout("dp4", "pp", 4, ["parallel_config.data_parallel=4", "runner_config.batch_size=2"]),
                Layout("one", "pp", 1, ["runner_config.batch_size=8"])]
    if "ep" in only:
        out += [Layout("ep8", "ep", 8, ["parallel_config.data_parallel=8", "parallel_config.expert_parallel=8",
                                         "runner_config.batch_size=2"]),
                Layout("dp8", "ep", 8, ["parallel_config.data_parallel=8", "runner_config.batch_size=2"]),
                Layout("one-moe", "ep", 1, ["runner_config.batch_size=16"])]
    return [l for l in out if cores % l.ranks == 0]


def write_yaml(lay, path, out, steps):
    with open(path, "w") as f:
        if lay.group == "pp":
            f.write(pb.BASE_YAML.format(out=out, steps=steps, **PP_SHAPE))
        else:
            f.write(tvp.gridformer_yaml("mixtral-tiny", steps, 0, out))


def run(binary, lay, cores, steps, work, profile=False, timeout=900):
    binary = lay.binary or binary
    out = os.path.join(work, f"out_{lay.name}")
    shutil.rmtree(out, ignore_errors=True)
    cfg = os.path.join(work, f"{lay.name}.yaml")
    write_yaml(lay, cfg, out, steps)
    threads = cores // lay.ranks
    cmd = [binary, "train", "--config", cfg]
    for s in (PP_SETS if lay.group == "pp" else []) + lay.sets:
        cmd += ["--set", s]
    if profile:
        cmd += ["--set", "profile=True", "--set", "profile_start_step=2", "--set", f"profile_stop_step={steps}"]
        if lay.group == "ep":  # the all-to-all's spans
            cmd += ["--set", "profile_communication=True"]
    if lay.ranks > 1:
        # Binding needs a core for every thread: on a smaller machine (a dry run) every rank floats.
        own = lay.bind and cores <= (os.cpu_count() or 1)
        bind = ["--map-by", f"slot:PE={threads}", "--bind-to", "core"] if own else ["--bind-to", "none"]
        cmd = ["mpirun", "-np", str(lay.ranks), "--oversubscribe", *bind, "-x", "OMP_NUM_THREADS", *cmd]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **lay.env)
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if p.returncode != 0 and "binding more" in p.stdout and "--bind-to" in cmd:
        # The CPUs are hardware threads (2 a core, say): bind to them instead.
        cmd.insert(cmd.index("--bind-to"), "--use-hwthread-cpus")
        print(f"{lay.name}: not enough cores to bind, retrying with --use-hwthread-cpus", flush=True)
        t0 = time.time()
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"{lay.name}: `{' '.join(cmd)}` failed ({p.returncode}):\n" + p.stdout[-3000:])
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in l]
    if len(rows) != steps:
        sys.exit(f"{lay.name}: {len(rows)} step rows for {steps} steps")
    return {"rows": [r for r in rows if r["step"] > 1], "wall_s": time.time() - t0, "out": out, "cmd": cmd}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


# ---------- the profiled pipeline run, per stage ----------

PASSES = ("Forward", "Backward", "BackwardInput", "BackwardWeight")


def stage_breakdown(trace_path):
    """Per rank (= stage): seconds per step in each phase, and each pass's median duration."""
    ev = [e for e in json.load(open(trace_path))["traceEvents"] if e.get("ph") == "X"]
    ranks = sorted({e["pid"] for e in ev})
    res = {}
    for r in ranks:
        mine = sorted((e for e in ev if e["pid"] == r and e.get("tid", 0) == 0), key=lambda e: (e["ts"], -e["dur"]))
        steps = [e for e in mine if e.get("cat") == "step" and e["name"].startswith("step ")]
        n = max(len(steps), 1)
        inside = lambda e, outer: outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + 1e-3
        waits = [e for e in mine if e["name"] == "MPI_Wait"]
        passes = [e for e in mine if e["name"] in PASSES]
        ph = {"step": sum(e["dur"] for e in steps)}
        a2a = [e for e in mine if e["name"].startswith("all-to-all")]
        comp, wait_in_pass, a2a_in_pass, durs = 0.0, 0.0, 0.0, {}
        for p in passes:
            w = sum(x["dur"] for x in waits if inside(x, p))
            x2 = sum(x["dur"] for x in a2a if inside(x, p))
            comp += p["dur"] - w - x2
            wait_in_pass += w
            a2a_in_pass += x2
            durs.setdefault(p["name"], []).append(p["dur"] - w - x2)
        ph["compute"] = comp
        ph["wait for a neighbour"] = wait_in_pass
        ph["all-to-all"] = a2a_in_pass
        sched = [e for e in mine if e["name"] in ("pipeline schedule", "micro-batches")]
        drains = [e for e in mine if e["name"] == "drain sends"]
        ph["drain sends"] = sum(e["dur"] for e in drains)
        ph["schedule, other"] = sum(e["dur"] for e in sched) - comp - wait_in_pass - a2a_in_pass - ph["drain sends"]
        ph["pipeline reductions"] = sum(e["dur"] for e in mine if e["name"] == "pipeline reductions")
        ph["optimizer"] = sum(e["dur"] for e in mine if e["name"] == "optimizer")
        ph["grad norm, clip, sync"] = sum(e["dur"] for e in mine if e["name"] in
                                          ("grad norm", "grad clip", "grad sync", "grad sync begin", "unscale grads",
                                           "loss all-reduce"))
        ph["step, other"] = ph["step"] - sum(v for k, v in ph.items() if k != "step")
        first = [p for p in passes if steps and inside(p, steps[0])]
        res[r] = {"ms_per_step": {k: v / n / 1e3 for k, v in ph.items()},
                  "pass_ms": {k: med(v) / 1e3 for k, v in durs.items()}, "steps": n,
                  "order": [(p["name"], p.get("args", {}).get("micro", 0)) for p in first]}
    return res


def replay(orders, pass_ms):
    """Event simulation of each stage's own order of passes (from the trace: [(pass, micro), ...]) with
    its measured median pass times (pass_ms[s] = {"Forward": ms, ...}) and instant transfers: a
    forward of micro-batch i waits for the previous stage's, an input backward (Backward or
    BackwardInput) for the next stage's. Returns the makespan and the bubble as the runner counts it
    (mean over stages of 1 - busy / makespan)."""
    p = len(orders)
    done, clock, busy, idx = {}, [0.0] * p, [0.0] * p, [0] * p
    progress = True
    while progress:
        progress = False
        for s in range(p):
            while idx[s] < len(orders[s]):
                name, i = orders[s][idx[s]]
                kind = "F" if name == "Forward" else "W" if name == "BackwardWeight" else "B"
                dep = 0.0
                src = (kind, s - 1, i) if kind == "F" and s > 0 else (kind, s + 1, i) if kind == "B" and s < p - 1 \
                    else None
                if src is not None:
                    if src not in done:
                        break
                    dep = done[src]
                d = pass_ms[s].get(name, 0.0)
                clock[s] = max(clock[s], dep) + d
                busy[s] += d
                done[(kind, s, i)] = clock[s]
                idx[s] += 1
                progress = True
    if any(idx[s] < len(orders[s]) for s in range(p)):
        raise RuntimeError("replay: the stages' orders deadlock")
    span = max(clock)
    return span, sum(1 - b / span for b in busy) / p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default="pp,ep", help="pp, ep, or both; pp-schedules: only pp4-1f1b and pp4-zbh1; pp2-schedules: "
                    "pp2-1f1b and pp2-zbh1 (4 layers, 2 a stage, for 2 cores)")
    ap.add_argument("--no-profile", dest="profile", action="store_false", help="no profiled runs")
    ap.add_argument("--json")
    ap.add_argument("--probe", help="GF_MACHINE_PROBE for every run, --old's included (default: the --build's "
                    "machine_probe.json, when there is one): both builds then take the same GEMM backend")
    ap.add_argument("--old", help="another gridformer binary: the pp4 schedules run with it too (name@old)")
    ap.add_argument("--mca", default="", help="K=V,...: Open MPI MCA settings for every run (OMPI_MCA_K=V), "
                    "e.g. btl_vader_single_copy_mechanism=none")
    a = ap.parse_args()
    binary = os.path.join(a.build, "bin", "gridformer")
    only = a.only.split(",")
    lays = layouts(a.cores, only)
    mca = {f"OMPI_MCA_{kv.split('=', 1)[0]}": kv.split("=", 1)[1] for kv in a.mca.split(",") if kv}
    if a.old:
        lays += [Layout(l.name + "@old", l.group, l.ranks, l.sets, l.bind, binary=a.old)
                 for l in lays if l.name in ("pp4-1f1b", "pp4-zbh1", "pp2-1f1b", "pp2-zbh1")]
    probe = a.probe or os.environ.get("GF_MACHINE_PROBE") or os.path.join(a.build, "machine_probe.json")
    for l in lays:
        l.env.update(mca)
        if os.path.exists(probe):
            l.env["GF_MACHINE_PROBE"] = probe
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"== {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC; {cpu}, {os.cpu_count()} CPUs, "
          f"{a.cores} cores used; {a.rounds} rounds x {a.steps} steps (step 1 untimed); load {os.getloadavg()}",
          flush=True)
    work = tempfile.mkdtemp(prefix="parallel_cores_")
    results = {l.name: [] for l in lays}
    for rnd in range(a.rounds):
        for l in lays[rnd % len(lays):] + lays[:rnd % len(lays)]:  # the order rotates from round to round
            r = run(binary, l, a.cores, a.steps, work)
            tok = [x["tokens_per_s"] for x in r["rows"]]
            bub = [x["bubble"] for x in r["rows"] if "bubble" in x]
            results[l.name].append(r)
            print(f"round {rnd + 1} {l.name}: {med(tok):.1f} tok/s" +
                  (f", bubble {100 * med(bub):.1f}% (analytic {100 * r['rows'][0]['bubble_analytic']:.1f}%)"
                   if bub else "") + f" [{r['wall_s']:.0f} s]", flush=True)
    report = {"cpu": cpu, "cpus": os.cpu_count(), "cores": a.cores, "steps": a.steps, "rounds": a.rounds, "rows": []}
    ref = {"pp": "dp4", "ep": "dp8"}
    if a.old:  # each pp4 schedule against the other build's
        for l in lays:
            if l.name.endswith("@old"):
                ref[l.name[:-4]] = l.name
    report["mca"] = mca
    report["probe"] = probe if os.path.exists(probe) else None
    report["old"] = a.old
    tok_of = {n: med([x["tokens_per_s"] for r in rs for x in r["rows"]]) for n, rs in results.items()}
    print("\n| layout | ranks x threads | tok/s (median) | per round | ratio | against | bubble measured | worst | analytic |")
    print("|---|---|---:|---|---:|---|---:|---:|---:|")
    for l in lays:
        rs = results[l.name]
        rows = [x for r in rs for x in r["rows"]]
        per_round = [med([x["tokens_per_s"] for x in r["rows"]]) for r in rs]
        bub = [x["bubble"] for x in rows if "bubble" in x]
        worst = [x["bubble_max"] for x in rows if "bubble_max" in x]
        an = rows[0].get("bubble_analytic")
        against = ref.get(l.name, ref[l.group])
        if against not in tok_of:
            against = None
        vs = tok_of[l.name] / tok_of[against] if against else None
        row = {"layout": l.name, "ranks": l.ranks, "threads": a.cores // l.ranks, "bound": l.bind,
               "tok_s": tok_of[l.name], "per_round": per_round, "ratio": vs, "against": against,
               "bubble": med(bub) if bub else None, "bubble_max": med(worst) if worst else None,
               "bubble_analytic": an, "cmd": " ".join(rs[0]["cmd"])}
        report["rows"].append(row)
        pc = lambda v: f"{100 * v:.1f}%" if v is not None else ""
        print(f"| {l.name} | {l.ranks} x {a.cores // l.ranks}{'' if l.bind or l.ranks == 1 else ' (unbound)'} | "
              f"{tok_of[l.name]:.1f} | {', '.join(f'{x:.0f}' for x in per_round)} | "
              f"{f'{vs:.3f}x' if vs else ''} | {against or ''} | "
              f"{pc(row['bubble'])} | {pc(row['bubble_max'])} | {pc(an)} |")
    # Profiled runs: the pipeline per stage, ep8 per rank.
    report["profiles"] = {}
    for l in lays:
        if l.name not in ("pp4-1f1b", "pp4-zbh1", "pp2-1f1b", "pp2-zbh1", "ep8", "dp8") or not a.profile:
            continue
        r = run(binary, l, a.cores, a.steps, work, profile=True)
        br = stage_breakdown(os.path.join(r["out"], "profile", "trace.json"))
        prof = {"tok_s": med([x["tokens_per_s"] for x in r["rows"]]), "ranks": br}
        print(f"\n{l.name} profiled ({prof['tok_s']:.1f} tok/s): ms per step by phase, per rank")
        keys = list(next(iter(br.values()))["ms_per_step"].keys())
        print("| rank | " + " | ".join(keys) + " | pass medians (ms) |")
        print("|---:|" + "---:|" * len(keys) + "---|")
        for rk, v in br.items():
            print(f"| {rk} | " + " | ".join(f"{v['ms_per_step'][k]:.1f}" for k in keys) + " | " +
                  ", ".join(f"{k} {x:.2f}" for k, x in v["pass_ms"].items()) + " |")
        if l.group == "pp":
            span, bub = replay([br[s]["order"] for s in sorted(br)], [br[s]["pass_ms"] for s in sorted(br)])
            step = med([br[s]["ms_per_step"]["step"] for s in br])
            prof["replay"] = {"makespan_ms": span, "bubble": bub, "step_ms": step}
            print(f"replay of the schedule with these passes and instant transfers: makespan {span:.1f} ms, "
                  f"bubble {100 * bub:.1f}%; measured step {step:.1f} ms")
        report["profiles"][l.name] = prof
    if a.json:
        json.dump(report, open(a.json, "w"), indent=1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
