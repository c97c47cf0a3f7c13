#!/usr/bin/env python3
"""The step-time model (runner/report/step_time.h) held to account: measured step times beside modelled ones for
several layouts of one model on this machine, and whether the model orders the layouts as the measurements do.

    python3 bench/step_time_model.py [--build build] [--steps 6] [--rounds 3] [--batch 8]

Layouts of the shipped tiny GPT-2 (16M parameters), each a global batch of 8 x 256 tokens a step, 1-2 ranks: one
rank of 2 threads, dp2 (4 a rank), mp2 + SP, pp2 1F1B and ZB-H1 (4 micro-batches of 2), cp2 (ring), dp2 ZeRO-2. Each round runs every layout once
(rounds interleaved, so that a slow moment hits every layout alike); a layout's measured time is the median over
the rounds of the run's own median step (steps 2.., from resources.json), its noise the spread of the rounds. For
every pair whose measured times differ by more than both noises, the model must order them the same way: the
script prints each pair and the count that agree. Nothing asserts: it is a benchmark, and the figures are this
machine's.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_binaries import cpu_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
P = "parallel_config."
LAYOUTS = {
    "1 rank x 2 threads": (1, {}),
    "dp2": (2, {P + "data_parallel": 2, "runner_config.batch_size": 4}),
    "mp2 + SP": (2, {P + "model_parallel": 2, P + "use_seq_parallel": True}),
    "pp2 1F1B": (2, {P + "pipeline_stage": 2, P + "micro_batch_num": 4, "runner_config.batch_size": 2}),
    "pp2 ZB-H1": (2, {P + "pipeline_stage": 2, P + "micro_batch_num": 4, "runner_config.batch_size": 2,
                      "parallel.pipeline_config.pipeline_scheduler": "zbh1"}),
    "cp2 ring": (2, {P + "context_parallel": 2}),
    "dp2 ZeRO-2": (2, {P + "data_parallel": 2, "parallel.zero_stage": 2, "runner_config.batch_size": 4}),
}


def run(build, np, sets, steps, batch):
    with tempfile.TemporaryDirectory() as out:
        cmd = [os.path.join(build, "bin", "gridformer"), "train", "--config",
               os.path.join(ROOT, "configs/gpt2/run_gpt2_tiny.yaml"), "--set", f"output_dir={out}",
               "--set", f"runner_config.train_steps={steps}", "--set", f"runner_config.batch_size={batch}"]
        for k, v in sets.items():
            cmd += ["--set", f"{k}={v}"]
        if np > 1:
            cmd = ["mpirun", "-np", str(np), "--oversubscribe"] + cmd
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        env.pop("OMP_NUM_THREADS", None)  # the cores shared among the ranks, as a user's run
        subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, env=env)
        j = json.load(open(os.path.join(out, "resources.json")))
        modelled = j.get("step_seconds_modelled", {}).get("total")
        return j["step_seconds_measured"], modelled


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; {a.rounds} interleaved rounds of {a.steps} steps")
    measured = {k: [] for k in LAYOUTS}
    modelled = {}
    for r in range(a.rounds):
        for name, (np, sets) in LAYOUTS.items():
            m, p = run(a.build, np, sets, a.steps, a.batch)
            measured[name].append(m)
            modelled[name] = p
    print(f"{'layout':<20} {'measured s':>11} {'spread':>8} {'modelled s':>11} {'model/measured':>15}")
    med = {}
    for name in LAYOUTS:
        xs = measured[name]
        med[name] = statistics.median(xs)
        p = modelled[name]
        print(f"{name:<20} {med[name]:>11.4f} {max(xs) - min(xs):>8.4f} "
              f"{(f'{p:.4f}' if p else 'none'):>11} {(f'{p / med[name]:.2f}' if p else ''):>15}")
    names = list(LAYOUTS)
    agree = pairs = 0
    for i in range(len(names)):
        for k in range(i + 1, len(names)):
            a_, b_ = names[i], names[k]
            noise = max(max(measured[a_]) - min(measured[a_]), max(measured[b_]) - min(measured[b_]))
            if abs(med[a_] - med[b_]) <= noise or not modelled[a_] or not modelled[b_]:
                continue
            pairs += 1
            same = (med[a_] < med[b_]) == (modelled[a_] < modelled[b_])
            agree += same
            print(f"  {a_} {'<' if med[a_] < med[b_] else '>'} {b_} measured; model {'agrees' if same else 'DISAGREES'}")
    print(f"order: the model agrees on {agree} of the {pairs} pairs whose measured times differ by more than their noise")


if __name__ == "__main__":
    main()
