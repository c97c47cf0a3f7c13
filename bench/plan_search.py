#!/usr/bin/env python3
"""`gridformer plan --search` held to account: the layouts it lists, trained side by side on this machine.

    python3 bench/plan_search.py [--build build] [--config configs/reference/run_gpt2_124m.yaml] [--ranks 2]
        [--set KEY=VALUE ...] [--steps 4] [--rounds 3] [--shapes 6]

The search runs first (`plan --search --json`); its candidates are the fastest modelled layout of each parallel
shape it lists (`best_per_shape`, the first of which is its choice). Each round trains every candidate once for
--steps steps (rounds interleaved, so that a slow moment of the machine hits every layout alike); a layout's measured
time is the median over the rounds of its run's own step time (resources.json `step_seconds_measured`: the median of
steps 2..), its noise the spread of the rounds. The script prints each layout's modelled and measured time and the
search's choice against the best measured: the issue's bar is within 10%. Nothing asserts: it is a benchmark, and
the figures are this machine's. With more ranks than cores it first measures the link within the host with that
many ranks (probe --network), as the search's model reads it.

The default is MindFormers' GPT-2 124M made to fit two cores: 256-token sequences, fp32, a global batch of 4.
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
DEFAULT_SETS = ["model.model_config.seq_length=256", "model.model_config.compute_dtype=float32",
                "runner_config.batch_size=1", "parallel_config.data_parallel=4"]


def env():
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    e.pop("OMP_NUM_THREADS", None)  # the cores shared among the ranks, as plan models them
    return e


def search(a):
    cmd = [os.path.join(a.build, "bin", "gridformer"), "plan", "--config", a.config, "--search", "--json",
           "--ranks", str(a.ranks), "--top", "1"]
    for s in a.sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, env=env())
    return json.loads(p.stdout)


def train(a, sets):
    with tempfile.TemporaryDirectory() as out:
        cmd = [os.path.join(a.build, "bin", "gridformer"), "train", "--config", a.config, "--set", f"output_dir={out}",
               "--set", f"runner_config.train_steps={a.steps}"]
        for s in a.sets:
            cmd += ["--set", s]
        for k, v in sets.items():
            cmd += ["--set", f"{k}={v}"]
        if a.ranks > 1:
            cmd = ["mpirun", "-np", str(a.ranks), "--oversubscribe"] + cmd
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env())
        if p.returncode != 0:
            raise SystemExit(f"training failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
        return json.load(open(os.path.join(out, "resources.json")))["step_seconds_measured"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs/reference/run_gpt2_124m.yaml"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--set", dest="sets", action="append", default=None)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", type=int, default=6, help="at most this many of the search's best-per-shape layouts")
    a = ap.parse_args()
    if a.sets is None:
        a.sets = DEFAULT_SETS
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; {a.config} on {a.ranks} ranks with {' '.join(a.sets)}; "
          f"{a.rounds} interleaved rounds of {a.steps} steps")
    cores = os.cpu_count() or 1
    if a.ranks > cores:
        # The latency a message sees when the ranks share cores: probe --network with as many ranks (two exchange,
        # the others spin), where plan's model reads it (runner/report/network_link.h).
        out = os.path.join(a.build, f"network_probe_host_{a.ranks}.json")
        subprocess.run(["mpirun", "-np", str(a.ranks), "--oversubscribe", os.path.join(a.build, "bin", "gridformer"),
                        "probe", "--network", "--max-bytes", "4194304", "--out", out], check=True, capture_output=True,
                       text=True, cwd=ROOT, env=env())
        link = json.load(open(out))
        print(f"host link with {a.ranks} ranks on {cores} cores (probe --network): {link['latency_us']:.1f} us a message, "
              f"{link['bandwidth_gbs']:.2f} GB/s")
    found = search(a)
    cands = found["best_per_shape"][:a.shapes]
    print(f"search: {found['checked']} layouts checked, {found['refused']} refused; measuring its best of each of "
          f"{len(cands)} parallel shapes (the first is its choice)")
    measured = [[] for _ in cands]
    for r in range(a.rounds):
        for i, c in enumerate(cands):
            measured[i].append(train(a, c["sets"]))
        print(f"  round {r + 1}: " + ", ".join(f"{m[-1]:.3f}" for m in measured), flush=True)
    med = [statistics.median(m) for m in measured]
    print(f"{'#':>2} {'layout':<64} {'modelled s':>10} {'measured s':>10} {'spread':>7}")
    for i, c in enumerate(cands):
        print(f"{i + 1:>2} {c['label'][:64]:<64} {c['step_seconds_modelled']['total']:>10.4f} {med[i]:>10.4f} "
              f"{max(measured[i]) - min(measured[i]):>7.4f}")
    best = min(range(len(cands)), key=lambda i: med[i])
    ratio = med[0] / med[best]
    print(f"the search's choice measured {med[0]:.4f} s; the best measured {med[best]:.4f} s ({cands[best]['label']}): "
          f"{ratio:.3f}x, {'within' if ratio <= 1.10 else 'NOT within'} 10%")
    order = sorted(range(len(cands)), key=lambda i: med[i])
    print("measured order: " + " < ".join(str(i + 1) for i in order) + " (the search's order is 1 < 2 < ...)")


if __name__ == "__main__":
    main()
