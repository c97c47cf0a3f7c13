#!/usr/bin/env python3
"""Expert parallelism's all-to-all bytes, measured against a count derived from the routing.

    python3 bench/moe_alltoall.py [--steps 3] [--build build] [--layouts ep2,ep4,ep2-dp4,...] [--json FILE]

Trains bench/train_vs_pytorch.py's moe-tiny (GPT-2 MoE: 4 layers, hidden 256, 4 heads, every MLP 8
GELU experts with biases, top-2, dropless, aux 0.01; T 256, global batch 8, RandomTokens) for
--steps steps under `mpirun -np N --oversubscribe` (1 thread per rank) in these layouts:

  ep2          2 ranks: data_parallel 2, expert_parallel 2 (4 experts of each layer per rank)
  ep4          4 ranks: data_parallel 4, expert_parallel 4 (2 experts per rank)
  ep2-dp4      4 ranks: data_parallel 4, expert_parallel 2 (2 expert-data-parallel groups of 2)
  ep2-cap1     ep2 with capacity_factor 1.0 (tokens dropped: fewer rows travel)
  ep4-cap1     ep4 with capacity_factor 1.0
  ep1-dp2      2 ranks, data_parallel 2, no expert parallelism (every rank holds every expert)
  ep1-dp4      4 ranks, the same
  dense-dp2    gpt2-tiny (the same model with one dense MLP per layer), data_parallel 2
  dense-dp4    gpt2-tiny, data_parallel 4

and reads each rank's bytes from output_dir/resources.json: ep_bytes_sent (the expert-parallel
group: the all-to-all), edp_bytes_sent (the expert gradients over the ranks that hold the same
experts), dp_bytes_sent (the other gradients over data parallel).

The analytic side. The runs train at learning rate 0, so every step routes with the initial
weights; build/bin/moe_routing (bench/moe_routing.cpp) then runs, on ONE rank, the forward of each
data-parallel rank's samples of each step (the samples rank r reads at step i, runner/train/batch_source.h)
and prints the rows each expert computes for them (kept_per_expert, after capacity); summed over
the ranks, its assignments per expert must equal the run's own (metrics.jsonl's tokens_per_expert,
summed over data parallel) at every step and layer, which the script checks and prints. As in
tests/mpi/moe_mpi.cpp, per MoE layer and step rank `me` of an expert-parallel group sends
  (rows of its tokens bound for experts on the other ranks of its group
   + rows of the other ranks' tokens its experts computed, returned to them) x C x 4 B x 2
(forward dispatch and combine, and the same two in backward), plus the counts exchange, E/ep int64 to
each other rank of the group once per layer (forward only). Per step the expert-parallel group also
carries the experts' share of the gradient norm: one all-reduce of 1 double (the ring of
parallel/communicator.cpp: 8 B per rank for 2 and 4 ranks). The gradient bytes are the ring
all-reduce of the arena's regions (each parameter rounded up to 16 floats; 2 (p-1)/p x n floats per
rank when p divides every bucket, as here) plus the loss (1 double over data parallel): dense region
(wte 50304 x 256, wpe, attention, LayerNorms, routers) over dp, expert region (this rank's experts)
over the expert-data-parallel group.

What the comparison relies on: the one-rank forward routes each token exactly as the rank that
holds it does under expert parallelism (the same weights, generated from the seed and each
parameter's global name; the same GEMM backend, from the same machine probe; the MPI test checks the
losses and gradients of these layouts against one rank), and capacity is per sequence, so a rank's
rows do not depend on the other ranks'.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import train_vs_pytorch as tvp  # noqa: E402  (the moe-tiny shape and its YAML)
from distributed import ring_sent  # noqa: E402  (the ring's per-rank element count)

GLOBAL_BATCH = 8
ALIGN = 16

# name: (ranks, data_parallel, expert_parallel, shape, capacity_factor or None)
LAYOUTS = {
    "ep2": (2, 2, 2, "moe-tiny", None),
    "ep4": (4, 4, 4, "moe-tiny", None),
    "ep2-dp4": (4, 4, 2, "moe-tiny", None),
    "ep2-cap1": (2, 2, 2, "moe-tiny", 1.0),
    "ep4-cap1": (4, 4, 4, "moe-tiny", 1.0),
    "ep1-dp2": (2, 2, 1, "moe-tiny", None),
    "ep1-dp4": (4, 4, 1, "moe-tiny", None),
    "dense-dp2": (2, 2, 1, "gpt2-tiny", None),
    "dense-dp4": (4, 4, 1, "gpt2-tiny", None),
}


def shape_of(name, dp, capacity):
    s = dict(tvp.SHAPES[name], batch_size=GLOBAL_BATCH // dp)
    if s.get("moe") and capacity is not None:
        s["moe"] = dict(s["moe"], capacity_factor=capacity)
    return s


def write_config(layout, steps, work):
    ranks, dp, ep, name, cap = LAYOUTS[layout]
    out = os.path.join(work, f"out_{layout}")
    shutil.rmtree(out, ignore_errors=True)
    path = os.path.join(work, f"{layout}.yaml")
    with open(path, "w") as f:
        f.write(tvp.gridformer_yaml(shape_of(name, dp, cap), steps, 0.33, out, lr=0.0)
                + f"parallel_config: {{data_parallel: {dp}, expert_parallel: {ep}, model_parallel: 1}}\n")
    return path, out


def mpi_env(threads=1):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")


def train(layout, steps, build, work):
    ranks = LAYOUTS[layout][0]
    cfg, out = write_config(layout, steps, work)
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", os.path.join(build, "bin", "gridformer"), "train",
           "--config", cfg]
    p = subprocess.run(cmd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"{layout}: `{' '.join(cmd)}` failed ({p.returncode}):\n{p.stdout[-3000:]}")
    with open(os.path.join(out, "resources.json")) as f:
        res = json.load(f)
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    start = next((r for r in lines if r.get("event") == "run_start"), {})
    return cfg, res, start, [r for r in lines if "loss" in r]


def routing(cfg, dp, steps, build):
    """moe_routing's rows: {(step, dp rank): [per layer [rows per expert]]}."""
    cmd = [os.path.join(build, "bin", "moe_routing"), "--config", cfg, "--dp", str(dp), "--steps", str(steps)]
    p = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"`{' '.join(cmd)}` failed ({p.returncode}):\n{p.stderr[-3000:]}")
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return ({(r["step"], r["dp_rank"]): r["kept"] for r in rows},
            {(r["step"], r["dp_rank"]): r["assigned"] for r in rows}, rows[0].get("gemm_backend"))


def routing_agrees(assigned, metrics, dp):
    """Whether the one-rank routing, summed over the data-parallel ranks, gives the run's own tokens per
    expert (metrics.jsonl, summed over data parallel) at every step and layer; None for a binary
    whose metrics.jsonl has no tokens_per_expert."""
    for row in metrics:
        for l, m in enumerate(row.get("moe", [])):
            if "tokens_per_expert" not in m:
                return None
            total = [sum(assigned[(row["step"], r)][l][e] for r in range(dp)) for e in range(len(m["tokens_per_expert"]))]
            if total != m["tokens_per_expert"]:
                return False
    return True


def alltoall_analytic(kept, dp, ep, E, C, steps):
    """{dp rank: (all-to-all bytes over the run, rows sent + returned, counts bytes)} from the routing."""
    El = E // ep
    out = {}
    for me in range(dp):
        group0, my_ep = me // ep * ep, me % ep
        rows = counts = 0
        for step in range(1, steps + 1):
            layers = kept[(step, me)]
            for l in range(len(layers)):
                for s in range(group0, group0 + ep):
                    if s == me:
                        continue
                    for e in range(E):
                        owner = e // El
                        if owner == s % ep:
                            rows += kept[(step, me)][l][e]      # my tokens to rank s's experts
                        if owner == my_ep:
                            rows += kept[(step, s)][l][e]       # rank s's tokens through my experts, returned
                counts += El * 8 * (ep - 1) if ep > 1 else 0
        out[me] = (2 * rows * C * 4 + counts, rows, counts)
    return out


def param_floats(s):
    """(dense region floats, floats of ONE expert of one layer), each parameter rounded up to 16 floats."""
    up = lambda n: (n + ALIGN - 1) // ALIGN * ALIGN  # noqa: E731
    C, L, F = s["hidden_size"], s["num_layers"], 4 * s["hidden_size"]
    Vp = (s.get("vocab_size", 50257) + 127) // 128 * 128
    moe = s.get("moe")
    dense = up(Vp * C) + up(1024 * C) + 2 * up(C)
    per_layer = 2 * up(C) + up(3 * C * C) + up(3 * C) + up(C * C) + up(C) + 2 * up(C)
    expert = up(C * F) + up(F) + up(F * C) + up(C)
    per_layer += up(moe["expert_num"] * C) if moe else expert
    return dense + L * per_layer, expert if moe else 0


def gradient_analytic(s, dp, ep, rank):
    """(dp bytes per step, edp bytes per step) of rank `rank`: the ring all-reduces of the gradient
    regions, the loss (1 double over dp) and the trainer's router statistics (L (3 + E) doubles over dp)."""
    dense, expert = param_floats(s)
    L = s["num_layers"]
    moe = s.get("moe")
    dpb = 4 * ring_sent("allreduce", dense, dp, rank) + 8 * ring_sent("allreduce", 1, dp, rank)
    edpb = 0
    if moe:  # the trainer's router statistics: per MoE layer aux, z, dropped and E tokens per expert (doubles)
        dpb += 8 * ring_sent("allreduce", L * (3 + moe["expert_num"]), dp, rank)
        q = dp // ep                        # the expert-data-parallel group: ranks with the same experts
        n = L * (moe["expert_num"] // ep) * expert
        edpb = 4 * ring_sent("allreduce", n, q, rank // ep)
    return dpb, edpb


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; CPU {tvp.cpu_name()}, {os.cpu_count()} cores; load average "
          f"{tvp.loadavg()}; {args.steps} steps per run at learning rate 0; global batch {GLOBAL_BATCH}", flush=True)
    record = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpu": tvp.cpu_name(), "steps": args.steps,
              "global_batch": GLOBAL_BATCH, "layouts": []}
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for layout in args.layouts.split(","):
            ranks, dp, ep, name, cap = LAYOUTS[layout]
            s = shape_of(name, dp, cap)
            cfg, res, start, metrics = train(layout, args.steps, build, work)
            steps = res["steps"]
            per_rank = {r["rank"]: r for r in res["ranks"]}
            a2a, backend, agrees = {}, None, None
            if s.get("moe") and ep > 1:
                kept, assigned, backend = routing(cfg, dp, steps, build)
                a2a = alltoall_analytic(kept, dp, ep, s["moe"]["expert_num"], s["hidden_size"], steps)
                agrees = routing_agrees(assigned, metrics, dp)
            entry = {"layout": layout, "ranks": ranks, "data_parallel": dp, "expert_parallel": ep, "shape": name,
                     "capacity_factor": cap, "steps": steps, "git_commit": start.get("git_commit"),
                     "run_gemm_backend": start.get("gemm_backend"), "routing_gemm_backend": backend,
                     "routing_matches_run_tokens_per_expert": agrees,
                     "dropped": [sum(m["dropped"] for m in r.get("moe", [])) for r in metrics], "per_rank": []}
            for w in range(ranks):
                r = per_rank[w]
                dpb, edpb = gradient_analytic(s, dp, ep, w)
                norm = 8 * ring_sent("allreduce", 1, ep, w % ep) if ep > 1 else 0
                x = {"rank": w, "ep_measured": r["ep_bytes_sent"] / steps,
                     "ep_analytic": (a2a[w][0] / steps + norm) if w in a2a else 0.0,
                     "alltoall_rows_per_step": a2a[w][1] / steps if w in a2a else 0,
                     "counts_bytes_per_step": a2a[w][2] / steps if w in a2a else 0,
                     "norm_bytes_per_step": norm,
                     "dp_measured": r["dp_bytes_sent"] / steps, "dp_analytic": dpb,
                     "edp_measured": r["edp_bytes_sent"] / steps, "edp_analytic": edpb}
                entry["per_rank"].append(x)
                rows.append((layout, x))
            record["layouts"].append(entry)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(record, f, indent=1)
            print(f"  {layout}: done ({ranks} ranks, dropped per step {entry['dropped']}, GEMM backend run "
                  f"{entry['run_gemm_backend']} / routing {backend}"
                  + ("" if agrees is None else f"; one-rank routing summed over dp = the run's tokens per expert at "
                     f"every step and layer: {agrees}") + ")", flush=True)
    print("\nBytes sent per rank per step (resources.json / steps), measured | analytic:\n")
    print("| layout | rank | all-to-all rows sent+returned | ep measured | ep analytic | ratio | dp measured | "
          "dp analytic | edp measured | edp analytic |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    bad = 0
    for layout, x in rows:
        ratio = x["ep_measured"] / x["ep_analytic"] if x["ep_analytic"] else float("nan")
        ok = all(abs(x[f"{g}_measured"] - x[f"{g}_analytic"]) < 0.5 for g in ("ep", "dp", "edp"))
        bad += not ok
        print(f"| {layout} | {x['rank']} | {x['alltoall_rows_per_step']:,.1f} | {x['ep_measured']:,.0f} | "
              f"{x['ep_analytic']:,.0f} | {ratio:.6f} | {x['dp_measured']:,.0f} | {x['dp_analytic']:,.0f} | "
              f"{x['edp_measured']:,.0f} | {x['edp_analytic']:,.0f} |" + ("" if ok else " DIFFERS"))
    print(f"\n{len(rows) - bad} of {len(rows)} rank rows equal to the analytic count in all three groups")
    record["equal_rows"], record["rows"] = len(rows) - bad, len(rows)
    record["loadavg_end"] = os.getloadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
