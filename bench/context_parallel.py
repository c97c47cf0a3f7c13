#!/usr/bin/env python3
"""Context parallel on one machine: speed and memory of a 4-layer, 256-wide Llama (8 heads of 32,
fused attention core, fp32) at one long sequence under cp1, cp2 (ring and Ulysses), cp4 (ring) and
cp4 hybrid (Ulysses 2 x ring 2), the ring's measured overlap of its transfers with its products, and
the longest sequence each context degree can train on a machine of --memory-gib.

    /usr/bin/python3 bench/context_parallel.py [--seq 2048] [--rounds 3] [--steps 4] [--memory-gib 24]
                                               [--out bench/results/FILE.txt]

Training rows: every layout uses all the machine's cores (ranks x threads = nproc; cp4 on fewer than
4 cores is oversubscribed and says so). The layouts alternate within each round, so load drift hits
them alike; each run's figure is the median step time of the steps after the first, and the table
gives the median over rounds (min-max). Also per rank: peak RSS and planned activation bytes
(resources.json) and the context group's bytes per step.

Overlap: ring cp2 again with the step timeline (profile: True, steps 2..steps), once as built and
once with GF_RING_SERIAL=1, which waits for each block's transfer before its products start. A rank's
waits on the ring's transfers are its spans "ring wait" (and "ring transfer" in the serial run), summed
per step: serial, they are the whole cost of the transfers (nothing hides them); as built, what the
products did not hide. Overlap = 1 - (waits as built) / (waits serial), per rank, median over rounds.
Waits include a rank waiting for a slower partner, so imbalance lowers the figure; the step times of
both runs are given beside it.

Longest sequence: `gridformer plan` at growing seq_length (powers of two from 1024) with micro batch 1;
each degree's largest T whose planned bytes over its ranks, times the measured peak-RSS / plan ratio
of this run's cp1 row (the binary, libraries and buffers the plan does not count), fit --memory-gib.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from train_vs_pytorch import cpu_name  # noqa: E402

CONFIG = """seed: 1
runner_config: {{train_steps: {steps}, batch_size: 1}}
lr_schedule: {{type: constant, learning_rate: 0.0001, warmup_steps: 0}}
optimizer: {{type: AdamW}}
train_dataset: {{data_loader: {{type: RandomTokens, seed: 1, num_samples: 64}}}}
callbacks: [{{type: MFLossMonitor, per_print_times: 1}}]
model:
  arch: {{type: LlamaForCausalLM}}
  model_config: {{type: LlamaConfig, vocab_size: 1024, seq_length: {seq}, hidden_size: 256, num_layers: 4, num_heads: 8,
                 n_kv_heads: 8, intermediate_size: 688, use_flash_attention: True}}
"""

LAYOUTS = [("cp1", 1, "colossalai_cp"), ("cp2 ring", 2, "colossalai_cp"), ("cp2 ulysses", 2, "ulysses_cp"),
           ("cp4 ring", 4, "colossalai_cp"), ("cp4 hybrid", 4, "hybrid_cp")]


def run(binary, cfg, out, cp, algo, threads, extra=(), env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", **(env_extra or {}))
    cmd = [binary, "train", "--config", cfg, "--set", f"output_dir={out}",
           "--set", f"parallel_config.context_parallel={cp}", "--set", f"parallel_config.context_parallel_algo={algo}"]
    if algo == "hybrid_cp":
        cmd += ["--set", "parallel_config.ulysses_degree_in_cp=2"]
    cmd += list(extra)
    if cp > 1:
        cmd = ["mpirun", "-np", str(cp), "--oversubscribe", "--bind-to", "none"] + cmd
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    steps = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    ms = [s["step_ms"] for s in steps if "step_ms" in s and s.get("step", 0) > 1]
    res = json.load(open(os.path.join(out, "resources.json")))
    return statistics.median(ms), res


def ring_waits(trace_path, steps):
    """{rank: (waits per step in ms, products per step in ms)} from a profiled run's trace."""
    waits, products = {}, {}
    for e in json.load(open(trace_path))["traceEvents"]:
        if e.get("ph") != "X":
            continue
        if e["name"] in ("ring wait", "ring transfer"):
            waits[e["pid"]] = waits.get(e["pid"], 0.0) + e["dur"] / 1000
        elif e["name"].startswith("ring block"):
            products[e["pid"]] = products.get(e["pid"], 0.0) + e["dur"] / 1000
    return {r: (waits[r] / steps, products.get(r, 0.0) / steps) for r in waits}


def planned_bytes(binary, cfg, seq, cp):
    out = subprocess.run([binary, "plan", "--config", cfg, "--set", f"model.model_config.seq_length={seq}",
                          "--set", f"parallel_config.context_parallel={cp}"],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"largest rank: ([0-9.]+) (B|KiB|MiB|GiB|TiB)", out)
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[m.group(2)]
    return float(m.group(1)) * scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "build/bin/gridformer"))
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--memory-gib", type=float, default=24.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    cores = os.cpu_count()
    work = tempfile.mkdtemp()
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    try:
        cfg = os.path.join(work, "llama.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG.format(steps=a.steps, seq=a.seq))
        say(f"context parallel, Llama 4 layers x 256 (8 heads of 32), fused core, fp32, micro batch 1 x {a.seq}; "
            f"{cpu_name()}, {cores} cores")
        times = {name: [] for name, _, _ in LAYOUTS}
        info = {}
        for r in range(a.rounds):
            for name, cp, algo in LAYOUTS:
                threads = max(1, cores // cp)
                ms, res = run(a.binary, cfg, os.path.join(work, f"{name.replace(' ', '_')}_{r}"), cp, algo, threads)
                times[name].append(ms)
                info[name] = (cp, threads, res)
        # The ring's overlap: cp2 profiled as built and with GF_RING_SERIAL (see the top).
        prof = ["--set", "profile=True", "--set", "profile_start_step=2", "--set", f"profile_stop_step={a.steps}"]
        ov = {"built": [], "serial": []}
        threads = max(1, cores // 2)
        for r in range(a.rounds):
            for kind in ("built", "serial"):
                out = os.path.join(work, f"overlap_{kind}_{r}")
                ms, _ = run(a.binary, cfg, out, 2, "colossalai_cp", threads, prof,
                            {"GF_RING_SERIAL": "1"} if kind == "serial" else None)
                ov[kind].append((ms, ring_waits(os.path.join(out, "profile", "trace.json"), a.steps - 1)))
        say(f"{'layout':12s} {'ranks x threads':>16s} {'ms/step':>22s} {'tokens/s':>9s} {'vs cp1':>7s} "
            f"{'peak RSS/rank':>14s} {'planned act./rank':>18s} {'context bytes/step/rank':>24s}")
        base = statistics.median(times["cp1"])
        for name, cp, algo in LAYOUTS:
            t = times[name]
            med = statistics.median(t)
            c, th, res = info[name]
            rk = res["ranks"][0]
            steps = res["steps"]
            over = " (oversubscribed)" if c * th > cores else ""
            say(f"{name:12s} {f'{c} x {th}{over}':>16s} {f'{med:.0f} ({min(t):.0f}-{max(t):.0f})':>22s} "
                f"{a.seq / med * 1000:9.0f} {base / med:7.2f} {rk['peak_rss_bytes'] / 2**20:11.0f} MiB "
                f"{rk['planned_activation_bytes'] / 2**20:15.0f} MiB {rk.get('cp_bytes_sent', 0) / steps / 2**20:21.1f} MiB")
        say()
        say(f"ring cp2 overlap (2 x {threads}, profiled steps 2-{a.steps}, median over {a.rounds} rounds; ms per step):")
        say(f"{'rank':>4s} {'waits serial':>13s} {'waits as built':>15s} {'overlap':>8s} {'ring products':>14s}")
        for rank in sorted(ov["built"][0][1]):
            ws = statistics.median(w[rank][0] for _, w in ov["serial"])
            wb = statistics.median(w[rank][0] for _, w in ov["built"])
            pb = statistics.median(w[rank][1] for _, w in ov["built"])
            say(f"{rank:>4d} {ws:13.1f} {wb:15.1f} {1 - wb / ws:8.2f} {pb:14.1f}")
        say(f"step: serial {statistics.median(m for m, _ in ov['serial']):.0f} ms, as built "
            f"{statistics.median(m for m, _ in ov['built']):.0f} ms (profiled)")
        # Longest sequence by the plan, scaled by the measured RSS / plan ratio of the cp1 run.
        _, _, res1 = info["cp1"]
        ratio = res1["ranks"][0]["peak_rss_bytes"] / planned_bytes(a.binary, cfg, a.seq, 1)
        budget = a.memory_gib * 2**30
        say()
        say(f"longest sequence on {a.memory_gib:g} GiB (plan x {ratio:.2f}, the cp1 run's peak RSS / plan; micro batch 1):")
        for cp in (1, 2, 4):
            best, seq = None, 1024
            while seq <= 2**22:
                total = cp * planned_bytes(a.binary, cfg, seq, cp) * ratio
                if total > budget:
                    break
                best, seq = (seq, total), seq * 2
            say(f"  cp{cp}: T = {best[0]} ({best[1] / 2**30:.1f} GiB over {cp} rank(s))" if best else f"  cp{cp}: none")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
