#!/usr/bin/env python3
"""Sharded data parallelism (parallel.zero_stage): memory, bytes and speed of each stage, side by side.

    /usr/bin/python3 bench/zero.py [--seq 128] [--speed-rounds 3] [--speed-steps 6] [--skip-memory] [--skip-speed] [--out FILE]

Memory (gpt2-124M fp32 at dp4, micro batch 1, seq 128, 2 steps): each rank's measured peak RSS
(resources.json) beside the plan's analytic bytes for the same layout (`gridformer plan`), for
zero_stage 0-3 and hybrid 2 at stage 3. The reference is one rank's parameter + gradient + moment
bytes (16 per parameter): the issue's targets are ZeRO-3 <= 0.3x of it and ZeRO-2 <= 0.55x, plus
activations. Peak RSS also holds the binary, its libraries, MPI's buffers and the activations; the
table gives the planned activation bytes so that the model state's share can be read off.

Bytes (the same runs): each rank's data-parallel bytes per step against the analytic count from the
units the run logs (ring reduce-scatter and all-gather of each unit; see tests/integration/zero.sh).

Speed (gpt2-tiny: 4 layers, 256 wide, seq 256, micro batch 4, fp32): tokens/s of ZeRO-1, 2 and 3 at dp2
and dp4, the layouts alternating within each round; the median of each run's steady step times, then
the median over rounds. On a machine with fewer cores than ranks the ranks are oversubscribed (said so).

Prefetch (with the speed rows): ZeRO-3 at dp2 profiled, as built and with parallel.zero_prefetch: False (each
unit gathered only when its block needs it); the waits on weight all-gathers per step from the step
timeline, and the share of them the prefetch hides.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from train_vs_pytorch import cpu_name  # noqa: E402

MEM_CONFIG = """seed: 1
runner_config: {{train_steps: 2, batch_size: 1}}
lr_schedule: {{type: constant, learning_rate: 0.0001, warmup_steps: 0}}
optimizer: {{type: AdamW}}
train_dataset: {{data_loader: {{type: RandomTokens, seed: 1, num_samples: 64}}}}
callbacks: [{{type: MFLossMonitor, per_print_times: 1}}]
model:
  arch: {{type: GPT2LMHeadModel}}
  model_config: {{type: GPT2Config, vocab_size: 50257, seq_length: {seq}, hidden_size: 768, num_layers: 12,
                 num_heads: 12, use_flash_attention: True}}
"""

SPEED_CONFIG = """seed: 1
runner_config: {{train_steps: {steps}, batch_size: 4}}
lr_schedule: {{type: constant, learning_rate: 0.0001, warmup_steps: 0}}
optimizer: {{type: AdamW}}
train_dataset: {{data_loader: {{type: RandomTokens, seed: 1, num_samples: 256}}}}
callbacks: [{{type: MFLossMonitor, per_print_times: 1}}]
model:
  arch: {{type: GPT2LMHeadModel}}
  model_config: {{type: GPT2Config, vocab_size: 8192, seq_length: 256, hidden_size: 256, num_layers: 4,
                 num_heads: 8, use_flash_attention: True}}
"""

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")


def train(binary, cfg, out, dp, sets, threads=1, extra_env=None):
    env = dict(ENV, OMP_NUM_THREADS=str(threads), **(extra_env or {}))
    cmd = [binary, "train", "--config", cfg, "--set", f"output_dir={out}", "--set", f"parallel_config.data_parallel={dp}"]
    for s in sets:
        cmd += ["--set", s]
    if dp > 1:
        cmd = ["mpirun", "-np", str(dp), "--oversubscribe", "--bind-to", "none"] + cmd
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-3000:]}")
    steps = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    ms = [s["step_ms"] for s in steps if "step_ms" in s and s.get("step", 0) > 1]
    res = json.load(open(os.path.join(out, "resources.json")))
    return p.stdout, (statistics.median(ms) if ms else None), res


def plan_total(binary, cfg, dp, sets):
    cmd = [binary, "plan", "--config", cfg, "--set", f"parallel_config.data_parallel={dp}"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=True).stdout
    m = re.search(r"tensor-parallel rank 0.*?: parameters (.*?), gradients (.*?), optimizer state (.*?) \(.*?weight copy "
                  r"(.*?), activations (.*?); total (.*)", out)
    return m.groups() if m else None, out


def gather_waits(trace_path, steps):
    """{rank: ms per step waiting for ZeRO-3's weight all-gathers} from a profiled run's trace."""
    waits = {}
    for e in json.load(open(trace_path))["traceEvents"]:
        if e.get("ph") == "X" and e["name"] == "wait weight all-gather":
            waits[e["pid"]] = waits.get(e["pid"], 0.0) + e["dur"] / 1000
    return {r: w / steps for r, w in waits.items()}


def rs_ag_bytes(units, d, r, gathers):
    def cnt(n, k):  # shard k of n over d ranks: the first n % d shards hold one more (shard_begin)
        k %= d
        return n // d + (1 if k < n % d else 0)
    rs = lambda n: sum(cnt(n, r - s - 1) for s in range(d - 1))
    ag = lambda n: sum(cnt(n, r - s) for s in range(d - 1))
    return 4 * sum(rs(n) + g * ag(n) for n, g in zip(units, gathers))


def mib(b):
    return f"{b / 2**20:.0f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "build/bin/gridformer"))
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--speed-rounds", type=int, default=3)
    ap.add_argument("--speed-steps", type=int, default=6)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    lines = [f"# bench/zero.py on {cpu_name()} ({os.cpu_count()} cores)"]
    tmp = tempfile.mkdtemp()
    if not a.skip_memory:
        cfg = os.path.join(tmp, "mem.yaml")
        open(cfg, "w").write(MEM_CONFIG.format(seq=a.seq))
        params = 124_439_808  # gpt2-124M (tied head): the plan's count is checked below
        ref = 16 * params
        lines.append(f"\n## memory: gpt2-124M fp32, dp4, micro batch 1, seq {a.seq}; one rank's parameters + gradients + "
                     f"moments = {mib(ref)}")
        lines.append("| layout | peak RSS per rank (max) | / one rank's P+G+M | plan: params, grads, moments, activations, total | "
                     "dp bytes/step rank 0 (analytic) |")
        lines.append("|---|---|---|---|---|")
        for name, sets in [("ZeRO-0", ["parallel.zero_stage=0"]), ("ZeRO-1", ["parallel.zero_stage=1"]),
                           ("ZeRO-2", ["parallel.zero_stage=2"]), ("ZeRO-3", ["parallel.zero_stage=3"]),
                           ("ZeRO-3 hybrid 2", ["parallel.zero_stage=3", "parallel_config.hybrid_shard_degree=2"])]:
            out = os.path.join(tmp, name.replace(" ", "_"))
            log, _, res = train(a.binary, cfg, out, 4, sets)
            rss = max(r["peak_rss_bytes"] for r in res["ranks"])
            plan, _ = plan_total(a.binary, cfg, 4, sets)
            stage = int(name[5])
            got = res["ranks"][0]["dp_bytes_sent"] / 2
            m = re.search(r"ZeRO-\d units \(floats\): (\[[^\]]*\])", log)
            c = re.search(r"vocabulary chunks, each a unit gathered and reduced on its own: units (\[[^\]]*\])", log)
            chunks = json.loads(c.group(1)) if c else []
            want = "-"
            if m and "hybrid" not in name:
                units = json.loads(m.group(1))
                # ZeRO-3's gathers: the tied embedding's vocabulary chunks for the lookup and the head's two
                # passes, the position embedding's unit (after the chunks) for the lookup, the others twice;
                # without chunks the embedding's unit three times.
                if stage <= 2:
                    gathers = [1] * len(units)
                elif chunks:
                    gathers = [3 if i in chunks else 1 if i == len(chunks) else 2 for i in range(len(units))]
                else:
                    gathers = [3] + [2] * (len(units) - 1)
                want = rs_ag_bytes(units, 4, 0, gathers) + 2 * rs_ag_bytes([1], 4, 0, [1]) * 2  # + the loss and norm doubles
                if chunks:  # the lookup's rows to their owners: the most rows (a double), every rank's rows and ids
                    want += 2 * rs_ag_bytes([1], 4, 0, [1]) + rs_ag_bytes([4 * a.seq * 769], 4, 0, [1]) - \
                        rs_ag_bytes([4 * a.seq * 769], 4, 0, [0])
            elif stage == 0:
                want = "(bucket all-reduces)"
            lines.append(f"| {name} | {mib(rss)} | {rss / ref:.2f}x | {', '.join(plan) if plan else '?'} | "
                         f"{got:.0f} ({want}) |")
            print(lines[-1], flush=True)
    cfg = os.path.join(tmp, "speed.yaml")
    open(cfg, "w").write(SPEED_CONFIG.format(steps=a.speed_steps))
    dps = () if a.skip_speed else (2, 4)
    lines.append(f"\n## speed: gpt2-tiny (4 layers, 256 wide, seq 256, micro batch 4, fp32), 1 thread per rank"
                 f"{' (ranks oversubscribed)' if os.cpu_count() < 4 else ''}; median step ms over "
                 f"{a.speed_rounds} rounds (min-max), tokens/s, ratio to ZeRO-1 at the same dp")
    lines.append("| dp | ZeRO-1 | ZeRO-2 | ZeRO-3 | ZeRO-3 / ZeRO-1 tokens/s |")
    lines.append("|---|---|---|---|---|")
    for dp in dps:
        runs = {s: [] for s in (1, 2, 3)}
        for _ in range(a.speed_rounds):
            for s in (1, 2, 3):
                _, ms, _ = train(a.binary, cfg, os.path.join(tmp, f"s{dp}_{s}"), dp, [f"parallel.zero_stage={s}"])
                runs[s].append(ms)
        med = {s: statistics.median(v) for s, v in runs.items()}
        tok = lambda s: 4 * 256 * dp / (med[s] / 1000)
        cell = lambda s: f"{med[s]:.0f} ms ({min(runs[s]):.0f}-{max(runs[s]):.0f}), {tok(s):.0f} tok/s"
        lines.append(f"| {dp} | {cell(1)} | {cell(2)} | {cell(3)} | {tok(3) / tok(1):.2f} |")
        print(lines[-1], flush=True)
    if not a.skip_speed:
        # The prefetch's overlap: ZeRO-3 at dp2 profiled (steps 2..), as built and with parallel.zero_prefetch: False
        # (each unit gathered only when its block needs it, so every gather is waited for in full). A
        # rank's waits are its "wait weight all-gather" spans; overlap = 1 - built / no prefetch.
        prof = ["parallel.zero_stage=3", "profile=True", "profile_start_step=2", f"profile_stop_step={a.speed_steps}"]
        ov = {"built": [], "none": []}
        for _ in range(a.speed_rounds):
            for kind in ("built", "none"):
                out = os.path.join(tmp, f"ov_{kind}")
                _, ms, _ = train(a.binary, cfg, out, 2, prof + (["parallel.zero_prefetch=False"] if kind == "none" else []))
                ov[kind].append((ms, gather_waits(os.path.join(out, "profile", "trace.json"), a.speed_steps - 1)))
        lines.append(f"\n## ZeRO-3's prefetch at dp2 (profiled steps 2-{a.speed_steps}, median over {a.speed_rounds} rounds): "
                     "waits on weight all-gathers, ms per step")
        lines.append("| rank | no prefetch | as built | overlap |")
        lines.append("|---|---|---|---|")
        for rank in sorted(ov["built"][0][1]):
            wn = statistics.median(w.get(rank, 0.0) for _, w in ov["none"])
            wb = statistics.median(w.get(rank, 0.0) for _, w in ov["built"])
            lines.append(f"| {rank} | {wn:.1f} | {wb:.1f} | {1 - wb / wn if wn > 0 else float('nan'):.2f} |")
        lines.append(f"step (profiled): no prefetch {statistics.median(m for m, _ in ov['none']):.0f} ms, as built "
                     f"{statistics.median(m for m, _ in ov['built']):.0f} ms")
        print("\n".join(lines[-5:]), flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
