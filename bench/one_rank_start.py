#!/usr/bin/env python3
"""A one-rank start, side by side in one run: a one-step `train` of a small GPT-2 (one layer of width 64, one sample,
GPT-2's 50257-token vocabulary) as gridformer starts it (an Open MPI singleton on the ob1 point-to-point layer,
parallel/communicator.cpp), against the same binary with OMPI_MCA_pml set empty, which gives Open MPI 4.1 its own
choice back: it brings up UCX first, finds no transport it takes on these machines, and falls back to ob1 (the
reference: every one-rank start before this change).

    python3 bench/one_rank_start.py [--build build] [--rounds 9]

Rounds alternate the two; each figure is the median wall time of a whole process (start to exit) over the rounds.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_binaries import cpu_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def once(binary, out, env_extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", **env_extra)
    cmd = [binary, "train", "--config", os.path.join(ROOT, "configs/gpt2/run_gpt2_tiny.yaml"),
           "--set", "runner_config.train_steps=1", "--set", "runner_config.batch_size=1",
           "--set", "model.model_config.hidden_size=64", "--set", "model.model_config.num_layers=1",
           "--set", "train_dataset.data_loader.type=RandomTokens", "--set", f"output_dir={out}"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr[-1500:]}")
    return secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    binary = os.path.join(a.build, "bin", "gridformer")
    kinds = {"gridformer (ob1)": {}, "Open MPI's choice (UCX probed, then ob1)": {"OMPI_MCA_pml": ""}}
    times = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for k, env in kinds.items():  # one untimed start each: the page cache
            once(binary, os.path.join(tmp, "warm"), env)
        for r in range(a.rounds):
            for k, env in kinds.items():
                times[k].append(once(binary, os.path.join(tmp, f"r{r}"), env))
    print(f"one-rank one-step train, {a.rounds} rounds on {cpu_model()} ({os.cpu_count()} CPUs)")
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"  {k:44s} median {med[k] * 1000:7.1f} ms  (min {min(v) * 1000:.1f}, max {max(v) * 1000:.1f})")
    ours, ref = med["gridformer (ob1)"], med["Open MPI's choice (UCX probed, then ob1)"]
    print(f"  ratio {ours / ref:.2f}x of the reference ({(ref - ours) * 1000:.0f} ms less a start)")


if __name__ == "__main__":
    main()
