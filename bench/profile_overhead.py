#!/usr/bin/env python3
"""What the step timeline (`profile: True`, runner/report/profiler.h) costs a training run, on and off.

    python3 bench/profile_overhead.py [--shapes tiny,small,gpt2-tiny] [--steps N] [--rounds 3]
                                      [--threads 2] [--json FILE]

Each round trains each shape three times, one run after the other (the order rotating from round to
round): with profile: False; with profile: True over every step (profile_start_step 1 to the last,
profile_communication and profile_memory on: every span and counter there is); and with profile: True
over the second half of the steps only. A run's step time is the median step_ms of metrics.jsonl
over its steps after step 1 (start-up); "on / off" is the ratio of the first two runs' medians.
On this shared 2-vCPU machine two runs differ by more than the effect (other processes come and
go), so the third run also gives the ratio within one run: the median step of its profiled half over
that of its unprofiled half (steps 2 to N/2), divided by the same ratio of the off run's halves
(which removes a drift common to both). The tables give medians over the rounds.

Off, the spans are still in the code: each one tests a flag and returns. That cost is below what
two runs can tell apart on this machine, so it is stated from its parts instead: the spans a step
opens (counted in the profiled run's trace: its complete events per step) times what an inactive span
costs (build/bin/bench_trace_span: the median ns of 10^7 inactive spans back to back), as a share of
the step time.

Recording costs what the spans and counters cost when on: the figure beside the ratios is spans per
step times the cost of a recording span (bench_trace_span, formatted name), plus the RSS reads of
profile_memory (a pread of /proc/self/statm each, timed by their own spans in the trace).

Shapes: "tiny" is tests/integration/profile.sh's model (GPT-2, 4 layers, hidden 64, T 32, B 4,
vocabulary 64): a step of a few milliseconds with as many spans as a larger 4-layer model, the worst
case for the overhead as a share; "small" the same with hidden 256, T 128, B 4 and a vocabulary of
4096 (a step of tens of milliseconds); "gpt2-tiny" and "gpt2-124M" are bench/train_vs_pytorch.py's shapes
(fp32, synthetic tokens). Steps per run: 30 (tiny, small), 10 and 5 (a gpt2-124M step takes seconds here), or
--steps for all. The CPU is printed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_vs_pytorch as tvp  # noqa: E402  (the shapes, the YAML and the run helper)

STEPS = {"tiny": 30, "small": 30, "gpt2-tiny": 10, "gpt2-124M": 5}
SMALL = dict(num_layers=4, hidden_size=256, num_heads=4, seq_length=128, batch_size=4, vocab_size=4096,
             max_position_embeddings=128)
TINY = dict(num_layers=4, hidden_size=64, num_heads=4, seq_length=32, batch_size=4, vocab_size=64,
            max_position_embeddings=32)


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def run(shape, steps, threads, work, tag, profile):
    """profile: "off", "on" (every step) or "half" (the second half of the steps)."""
    sets = ["--set", f"profile={'False' if profile == 'off' else 'True'}"]
    if profile != "off":
        sets += ["--set", f"profile_start_step={1 if profile == 'on' else steps // 2 + 1}",
                 "--set", f"profile_stop_step={steps}",
                 "--set", "profile_communication=True", "--set", "profile_memory=True"]
    model = {"tiny": TINY, "small": SMALL}.get(shape, shape)
    r = tvp.gridformer_train(model, steps, threads, 1.0, work, tag=tag, extra_args=sets)
    rows = {row["step"]: row["step_ms"] for row in r["rows"]}
    ms = statistics.median(v for k, v in rows.items() if k > 1)
    half = steps // 2
    out = {"step_ms": ms, "steps_per_s": 1000.0 / ms, "others": r["others"],
           "first_half_ms": statistics.median(v for k, v in rows.items() if 1 < k <= half),
           "second_half_ms": statistics.median(v for k, v in rows.items() if k > half)}
    if profile != "off":
        trace = os.path.join(work, f"out_{tag}", "profile", "rank_0", "trace.json")
        ev = json.load(open(trace))["traceEvents"]
        spans = [e for e in ev if e.get("ph") == "X"]
        steps_seen = [e for e in spans if e.get("cat") == "step" and e["name"].startswith("step ")]
        out["spans_per_step"] = len(spans) / len(steps_seen)
        out["rss_read_us_per_step"] = sum(e["dur"] for e in spans if e["name"] == "read RSS") / len(steps_seen)
        out["events"] = len(ev)
        out["trace_bytes"] = os.path.getsize(trace)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="tiny,small,gpt2-tiny")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    steps = {sh: a.steps or STEPS.get(sh, 10) for sh in shapes}
    print(f"CPU: {cpu_name()} ({os.cpu_count()} CPUs), {a.threads} threads; steps per run {steps}, {a.rounds} rounds",
          flush=True)
    span = subprocess.run([os.path.join(tvp.ROOT, "build", "bin", "bench_trace_span")], check=True,
                          stdout=subprocess.PIPE, text=True)
    cost = json.loads(span.stdout)
    print(f"one span: off {cost['off_ns']:.2f} ns, on {cost['on_literal_ns']:.0f} ns (literal name), "
          f"{cost['on_formatted_ns']:.0f} ns (formatted name)", flush=True)
    results = {"cpu": cpu_name(), "threads": a.threads, "steps": steps, "span_cost": cost, "rounds": []}
    with tempfile.TemporaryDirectory() as work:
        for rnd in range(a.rounds):
            row = {}
            for shape in shapes:
                modes = ["off", "on", "half"]
                modes = modes[rnd % 3:] + modes[:rnd % 3]
                row[shape] = {m: run(shape, steps[shape], a.threads, work, f"{shape}_{m}_{rnd}", m) for m in modes}
                off, on, half = row[shape]["off"], row[shape]["on"], row[shape]["half"]
                within = (half["second_half_ms"] / half["first_half_ms"]) / (off["second_half_ms"] / off["first_half_ms"])
                row[shape]["within"] = within
                print(f"round {rnd + 1} {shape}: off {off['step_ms']:.2f} ms/step, on {on['step_ms']:.2f} ms/step "
                      f"(x{on['step_ms'] / off['step_ms']:.3f}); within a run x{within:.3f}; "
                      f"{on['spans_per_step']:.0f} spans per step", flush=True)
            results["rounds"].append(row)
    med = {}
    for shape in shapes:
        m = lambda mode, k: statistics.median(r[shape][mode][k] for r in results["rounds"])  # noqa: E731
        off_ms, on_ms, spans = m("off", "step_ms"), m("on", "step_ms"), m("on", "spans_per_step")
        within = statistics.median(r[shape]["within"] for r in results["rounds"])
        off_cost_ms = spans * cost["off_ns"] * 1e-6
        on_cost_ms = spans * cost["on_formatted_ns"] * 1e-6 + m("on", "rss_read_us_per_step") * 1e-3
        med[shape] = {"off_step_ms": off_ms, "on_step_ms": on_ms, "off_steps_per_s": 1000.0 / off_ms,
                      "on_steps_per_s": 1000.0 / on_ms, "on_over_off": on_ms / off_ms, "within_run": within,
                      "spans_per_step": spans, "on_record_cost_ms_per_step": on_cost_ms,
                      "on_record_share": on_cost_ms / off_ms,
                      "off_span_cost_ms_per_step": off_cost_ms, "off_share": off_cost_ms / off_ms,
                      "trace_bytes_per_step": m("on", "trace_bytes") / steps[shape]}
    results["median"] = med
    print()
    print(f"medians of {a.rounds} rounds:")
    print("| shape | steps/s, profile off | steps/s, profile on (every step, comm + memory) | on / off, two runs | "
          "on / off, within a run | spans per step | on: recording cost | off: spans x inactive span | trace per step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for shape in shapes:
        x = med[shape]
        print(f"| {shape} | {x['off_steps_per_s']:.2f} ({x['off_step_ms']:.2f} ms) | {x['on_steps_per_s']:.2f} "
              f"({x['on_step_ms']:.2f} ms) | {x['on_over_off']:.3f} | {x['within_run']:.3f} | {x['spans_per_step']:.0f} | "
              f"{1000 * x['on_record_cost_ms_per_step']:.0f} us = {100 * x['on_record_share']:.3f}% | "
              f"{1000 * x['off_span_cost_ms_per_step']:.3f} us = {100 * x['off_share']:.6f}% | "
              f"{x['trace_bytes_per_step'] / 1024:.0f} KiB |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
