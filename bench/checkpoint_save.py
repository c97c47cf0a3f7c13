#!/usr/bin/env python3
"""What saving a checkpoint costs a gpt2-124M training run, with async_save and without.

    python3 bench/checkpoint_save.py [--steps 9] [--every 3] [--rounds 3] [--threads 2] [--json FILE]

Each round trains gpt2-124M (fp32, T 256, B 4, synthetic tokens; bench/train_vs_pytorch.py's shape)
twice, one run after the other: with a CheckpointMonitor saving every --every steps synchronously,
and the same with async_save: True.

The cost of one save, from the runs' own records (metrics.jsonl: every step's step_ms, and each
save's `checkpoint` event with its snapshot and write seconds):
  * synchronous: the training pauses for the snapshot and the write: snapshot_s + write_s;
  * asynchronous: the training pauses for the snapshot only, and the steps that run while the
    background thread writes are slower (the thread competes for the cores, the memory bus and the
    disk): snapshot_s + the sum over those steps of (step_ms - the run's own step time), where the
    steps that overlap a write are the ones after the save until write_s has passed, and the run's
    own step time is the median of its other steps (step 1, start-up, left out). The baseline is
    taken within the run because on this shared machine separate runs differ by more than the
    effect (a first version measured it against a run without checkpoints and got a negative cost).
The issue's figure is that cost over the time of save_checkpoint_steps: 50 steps,
cost / (50 x step time), which must stay under 10% with async_save. The run's saves at --every
steps stand for the saves every 50 steps: each save's cost does not depend on the steps between saves
as long as a write finishes before the next save starts (at 50 steps apart it does: write_s is
printed beside the step time). The final save (after the last step) is not counted: it waits for its
write.

Medians over the rounds and over the saves of each run; the CPU is printed.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_vs_pytorch as tvp  # noqa: E402  (the gpt2-124M shape, the YAML and the run helper)

SHAPE = "gpt2-124M"


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def run(mode, steps, every, threads, workdir, tag):
    """One training run: mode sync | async. Returns its step rows and checkpoint events."""
    out = os.path.join(workdir, f"out_{tag}")
    y = tvp.gridformer_yaml(SHAPE, steps, 1.0, out)
    cb = (f"{{type: CheckpointMonitor, prefix: bench, save_checkpoint_steps: {every}, keep_checkpoint_max: 1, "
          f"async_save: {'True' if mode == 'async' else 'False'}}}")
    y = y.replace("callbacks: [{type: MFLossMonitor, per_print_times: 1}]",
                  f"callbacks: [{{type: MFLossMonitor, per_print_times: 1}}, {cb}]")
    path = os.path.join(workdir, f"{tag}.yaml")
    with open(path, "w") as f:
        f.write(y)
    if os.path.exists(os.path.join(out, "metrics.jsonl")):
        os.remove(os.path.join(out, "metrics.jsonl"))
    import subprocess
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run([os.path.join(tvp.ROOT, "build", "bin", "gridformer"), "train", "--config", path], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"gridformer train ({mode}) failed ({p.returncode}):\n{p.stdout[-3000:]}")
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    return {"rows": [r for r in lines if "loss" in r], "saves": [r for r in lines if r.get("event") == "checkpoint"]}


def save_costs(r, steps):
    """The run's own step time (ms) and, per save but the final one: (blocking seconds, slowdown
    seconds of the overlapped steps, write_s, bytes)."""
    ms = {row["step"]: row["step_ms"] for row in r["rows"] if not row.get("startup")}
    overlapped = {}  # save step -> the steps that ran beside its write
    for s in r["saves"]:
        k, t, over = s["step"] + 1, 0.0, []
        if s["async"]:
            while k in ms and t < s["write_s"]:
                over.append(k)
                t += ms[k] / 1000.0
                k += 1
        overlapped[s["step"]] = over
    busy = {k for over in overlapped.values() for k in over}
    base = statistics.median(v for k, v in ms.items() if k not in busy)
    out = []
    for s in r["saves"]:
        if s["step"] >= steps:
            continue
        if s["async"]:
            slow = sum((ms[k] - base) / 1000.0 for k in overlapped[s["step"]])
            out.append((s["snapshot_s"], slow, s["write_s"], s["bytes"]))
        else:
            out.append((s["snapshot_s"] + s["write_s"], 0.0, s["write_s"], s["bytes"]))
    return base, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    print(f"CPU: {cpu_name()} ({os.cpu_count()} CPUs), {a.threads} threads; {SHAPE} fp32 T256 B4, {a.steps} steps, "
          f"a save every {a.every}", flush=True)
    results = {"cpu": cpu_name(), "threads": a.threads, "steps": a.steps, "every": a.every, "rounds": []}
    with tempfile.TemporaryDirectory() as work:
        for rnd in range(a.rounds):
            rr, row = {}, {}
            for mode in ("sync", "async"):
                rr[mode] = run(mode, a.steps, a.every, a.threads, work, f"{mode}{rnd}")
            for mode in ("sync", "async"):
                base, c = save_costs(rr[mode], a.steps)
                row[mode] = {"step_ms": base, "block_s": statistics.median(x[0] for x in c),
                             "slow_s": statistics.median(x[1] for x in c), "write_s": statistics.median(x[2] for x in c),
                             "bytes": c[0][3], "cost_s": statistics.median(x[0] + x[1] for x in c), "saves": len(c),
                             "rows": rr[mode]["rows"], "events": rr[mode]["saves"]}
                row[mode]["per_50_steps"] = row[mode]["cost_s"] / (50 * base / 1000.0)
            print(f"round {rnd + 1}: sync: step {row['sync']['step_ms']:.0f} ms, save {row['sync']['cost_s']:.2f} s "
                  f"({100 * row['sync']['per_50_steps']:.2f}% of 50 steps); async: step {row['async']['step_ms']:.0f} ms, "
                  f"snapshot {row['async']['block_s']:.2f} s + slower steps {row['async']['slow_s']:.2f} s beside a "
                  f"{row['async']['write_s']:.2f} s write = {row['async']['cost_s']:.2f} s "
                  f"({100 * row['async']['per_50_steps']:.2f}% of 50 steps); {row['async']['bytes'] / 2**20:.0f} MiB "
                  f"per checkpoint", flush=True)
            results["rounds"].append(row)
    med = lambda mode, k: statistics.median(r[mode][k] for r in results["rounds"])  # noqa: E731
    results["median"] = {m: {k: med(m, k) for k in ("step_ms", "block_s", "slow_s", "write_s", "cost_s", "per_50_steps")}
                         for m in ("sync", "async")}
    m = results["median"]
    print()
    print(f"medians of {a.rounds} rounds:")
    print("| gpt2-124M fp32, save_checkpoint_steps: 50 | cost per save | of 50 steps' time | target |")
    print("| --- | --- | --- | --- |")
    print(f"| synchronous save | {m['sync']['cost_s']:.2f} s (snapshot + write; step {m['sync']['step_ms']:.0f} ms) | "
          f"{100 * m['sync']['per_50_steps']:.2f}% | - |")
    print(f"| async_save: True | {m['async']['cost_s']:.2f} s (snapshot {m['async']['block_s']:.2f} s + slower steps "
          f"{m['async']['slow_s']:.2f} s beside a {m['async']['write_s']:.2f} s write; step {m['async']['step_ms']:.0f} ms) | "
          f"{100 * m['async']['per_50_steps']:.2f}% | < 10% {'PASS' if m['async']['per_50_steps'] < 0.10 else 'FAIL'} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
