#!/usr/bin/env python3
"""What the Resilience issue's checks cost: spike checks and health records per step, and the final
checkpoint a stop signal writes (gpt2-124M).

    python3 bench/resilience_overhead.py [--shapes tiny,gpt2-tiny] [--steps 30] [--rounds 3]
                                         [--signal-rounds 3] [--threads 2] [--json FILE]

Per step. Each round trains each shape twice, one run after the other (the order alternating from round to
round): without spike checks, and with monitor_config.loss_spike_factor 3, grad_norm_spike_factor 10 and
spike_window 5 (so that every step after the fifth is judged against the window's means). A run's step
time is the median step_ms of metrics.jsonl after step 1; "on / off" is the ratio of the two runs'
medians. On this noisy machine two runs differ by more than the effect, so the check is also timed by
itself: a third run with the checks on and `profile: True` records the "spike check" span of every
step (core/trace), and the row gives its median duration as a share of the step. A health record is a
flag per checkpoint (state.healthy, spikes_in_a_row and the window's values in index.json): nothing
per step; its cost at a save is the index's extra bytes, printed.

Signal. Each signal round trains gpt2-124M (bench/train_vs_pytorch.py's shape, fp32, T 256, B 4) with
checkpoints on but none periodic, sends SIGTERM once step 2's line is in metrics.jsonl, and takes the
time from the signal to the process's exit, and the save's own time from its log line ("checkpoint
saved: ... X s in all"); the run stops after the step under way, so the wall time is the rest of that
step plus the save. The CPU is printed.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_vs_pytorch as tvp  # noqa: E402

TINY = dict(num_layers=4, hidden_size=64, num_heads=4, seq_length=32, batch_size=4, vocab_size=64,
            max_position_embeddings=32)
SPIKES = ["--set", "monitor_config.loss_spike_factor=3.0", "--set", "monitor_config.grad_norm_spike_factor=10.0",
          "--set", "monitor_config.spike_window=5"]


def step_run(shape, steps, threads, work, tag, mode):
    """mode: off, on, or profiled (on, with the step timeline)."""
    args = [] if mode == "off" else list(SPIKES)
    if mode == "profiled":
        args += ["--set", "profile=True", "--set", "profile_start_step=2", "--set", f"profile_stop_step={steps}"]
    model = {"tiny": TINY}.get(shape, shape)
    r = tvp.gridformer_train(model, steps, threads, 1.0, work, tag=tag, extra_args=args)
    out = {"step_ms": statistics.median(row["step_ms"] for row in r["rows"] if row["step"] > 1),
           "spikes": sum(1 for row in r["rows"] if row.get("spike"))}
    if mode == "profiled":
        trace = os.path.join(work, f"out_{tag}", "profile", "rank_0", "trace.json")
        ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
        checks = [e["dur"] for e in ev if e["name"] == "spike check"]
        stepdur = [e["dur"] for e in ev if e.get("cat") == "step" and e["name"].startswith("step ")]
        out["check_us"] = statistics.median(checks) if checks else None
        out["checks"] = len(checks)
        out["step_span_us"] = statistics.median(stepdur)
    return out


def signal_run(threads, work, tag):
    out = os.path.join(work, f"out_{tag}")
    yaml = os.path.join(work, f"{tag}.yaml")
    with open(yaml, "w") as f:
        f.write(tvp.gridformer_yaml("gpt2-124M", 20, 1.0, out) +
                "callbacks:\n  - {type: MFLossMonitor, per_print_times: 1}\n"
                "  - {type: CheckpointMonitor, prefix: sig, save_checkpoint_steps: 1000}\n")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    log = open(os.path.join(work, f"{tag}.log"), "w+")
    p = subprocess.Popen([os.path.join(tvp.ROOT, "build", "bin", "gridformer"), "train", "--config", yaml], env=env,
                         stdout=log, stderr=subprocess.STDOUT)
    metrics = os.path.join(out, "metrics.jsonl")
    while p.poll() is None:
        if os.path.exists(metrics) and sum('"loss"' in l for l in open(metrics)) >= 2:
            break
        time.sleep(0.05)
    t0 = time.perf_counter()
    p.send_signal(signal.SIGTERM)
    status = p.wait()
    wall = time.perf_counter() - t0
    log.seek(0)
    text = log.read()
    m = re.search(r"checkpoint saved: \S+ \(step (\d+), ([\d.]+) MiB; snapshot ([\d.]+) s, written in ([\d.]+) s, ([\d.]+) s in all\)",
                  text)
    if status != 143 or not m:
        raise RuntimeError(f"signal run: status {status}, no checkpoint line:\n{text[-2000:]}")
    return {"status": status, "signal_to_exit_s": wall, "step": int(m.group(1)), "mib": float(m.group(2)),
            "save_s": float(m.group(5)), "write_s": float(m.group(4))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="tiny,gpt2-tiny")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--signal-rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    shapes = [s for s in a.shapes.split(",") if s]
    print(f"CPU: {tvp.cpu_name()} ({os.cpu_count()} CPUs), {a.threads} threads, {a.steps} steps per run, {a.rounds} rounds",
          flush=True)
    record = {"cpu": tvp.cpu_name(), "threads": a.threads, "steps": a.steps, "rounds": [], "signal": []}
    with tempfile.TemporaryDirectory() as work:
        for rnd in range(a.rounds):
            row = {}
            for shape in shapes:
                modes = ["off", "on"] if rnd % 2 == 0 else ["on", "off"]
                r = {m: step_run(shape, a.steps, a.threads, work, f"{shape}_{m}_{rnd}", m) for m in modes}
                r["profiled"] = step_run(shape, a.steps, a.threads, work, f"{shape}_p_{rnd}", "profiled")
                row[shape] = r
                print(f"round {rnd + 1} {shape}: off {r['off']['step_ms']:.2f} ms, on {r['on']['step_ms']:.2f} ms "
                      f"(x{r['on']['step_ms'] / r['off']['step_ms']:.3f}); spike check {r['profiled']['check_us']:.2f} us "
                      f"of a {r['profiled']['step_span_us'] / 1000:.2f} ms step ({r['profiled']['checks']} checks)", flush=True)
            record["rounds"].append(row)
        for rnd in range(a.signal_rounds):
            s = signal_run(a.threads, work, f"sig_{rnd}")
            record["signal"].append(s)
            print(f"signal round {rnd + 1}: SIGTERM during step {s['step']}: exit {s['signal_to_exit_s']:.2f} s later "
                  f"(status 143) with the checkpoint of step {s['step']} ({s['mib']:.0f} MiB) saved in {s['save_s']:.2f} s",
                  flush=True)
    print("\n| per step (medians over rounds) | checks off | checks on | on / off | spike check alone | share of a step |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for shape in shapes:
        rows = [r[shape] for r in record["rounds"]]
        off = statistics.median(r["off"]["step_ms"] for r in rows)
        on = statistics.median(r["on"]["step_ms"] for r in rows)
        ratio = statistics.median(r["on"]["step_ms"] / r["off"]["step_ms"] for r in rows)
        check = statistics.median(r["profiled"]["check_us"] for r in rows)
        share = statistics.median(r["profiled"]["check_us"] / r["profiled"]["step_span_us"] for r in rows)
        print(f"| {shape} | {off:.2f} ms | {on:.2f} ms | {ratio:.3f} | {check:.2f} us | {100 * share:.4f}% (target < 1%) |")
    if record["signal"]:
        sig = record["signal"]
        print(f"\ngpt2-124M, SIGTERM mid-run (medians of {len(sig)}): exit {statistics.median(s['signal_to_exit_s'] for s in sig):.2f} s "
              f"after the signal; the final checkpoint ({sig[0]['mib']:.0f} MiB) saved in "
              f"{statistics.median(s['save_s'] for s in sig):.2f} s (written in {statistics.median(s['write_s'] for s in sig):.2f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
