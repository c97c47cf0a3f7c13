#!/usr/bin/env python3
"""Context parallel on one machine: speed and memory of a 4-layer, 256-wide Llama (8 heads of 32,
fused attention core, fp32) at one long sequence under cp1, cp2 (ring and Ulysses) and cp4 (ring),
and the longest sequence each context degree can train on a machine of --memory-gib.

    /usr/bin/python3 bench/context_parallel.py [--seq 2048] [--rounds 3] [--steps 4] [--memory-gib 24]
                                               [--out bench/results/FILE.txt]

Training rows: every layout uses all the machine's cores (ranks x threads = nproc; cp4 on fewer than
4 cores is oversubscribed and says so). The layouts alternate within each round, so load drift hits
them alike; each run's figure is the median step time of the steps after the first, and the table
gives the median over rounds (min-max). Also per rank: peak RSS and planned activation bytes
(resources.json) and the context group's bytes per step.

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
           ("cp4 ring", 4, "colossalai_cp")]


def run(binary, cfg, out, cp, algo, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    cmd = [binary, "train", "--config", cfg, "--set", f"output_dir={out}",
           "--set", f"parallel_config.context_parallel={cp}", "--set", f"parallel_config.context_parallel_algo={algo}"]
    if cp > 1:
        cmd = ["mpirun", "-np", str(cp), "--oversubscribe", "--bind-to", "none"] + cmd
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    steps = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    ms = [s["step_ms"] for s in steps if "step_ms" in s and s.get("step", 0) > 1]
    res = json.load(open(os.path.join(out, "resources.json")))
    return statistics.median(ms), res


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
