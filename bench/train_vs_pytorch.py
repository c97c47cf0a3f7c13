#!/usr/bin/env python3
"""Training throughput of gridformer against PyTorch, side by side on this machine.

    python3 bench/train_vs_pytorch.py [--shapes gpt2-tiny,gpt2-124M] [--steps 6] [--rounds 3] [--threads 2] [--build DIR]

For each shape, runs `rounds` rounds; each round trains gridformer (build/bin/gridformer, synthetic
tokens) and then PyTorch (bench/torch_gpt2.py under Debian's /usr/bin/python3) on the same shape,
threads, optimizer (AdamW + clipping) and step count, so both see the same machine state. Each run
reports the median of its timed steps (the first step is warm-up); the table shows the median over
rounds and the ratio ours / PyTorch. Both use Megatron's FLOP count for TFLOP/s and MFU.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {
    "gpt2-124M": dict(num_layers=12, hidden_size=768, num_heads=12, seq_length=256, batch_size=4),
    "gpt2-tiny": dict(num_layers=4, hidden_size=256, num_heads=4, seq_length=256, batch_size=8),
}


def _yaml_value(v):
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)


def _flow(d):
    return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in d.items()) + "}"


def gridformer_yaml(shape, steps, peak, out, model_extra=None, data_extra=None):
    """The training YAML of a run: `shape` is a name in SHAPES or a dict of the same keys (plus,
    optionally, vocab_size and max_position_embeddings); model_extra / data_extra add or override
    model.model_config / train_dataset.data_loader keys."""
    s = SHAPES[shape] if isinstance(shape, str) else shape
    mc = dict(type="GPT2Config", vocab_size=s.get("vocab_size", 50257), seq_length=s["seq_length"],
              max_position_embeddings=s.get("max_position_embeddings", 1024), hidden_size=s["hidden_size"],
              num_layers=s["num_layers"], num_heads=s["num_heads"], hidden_act="gelu_new",
              hidden_dropout_rate=0.0, attention_dropout_rate=0.0)
    mc.update(model_extra or {})
    data = dict(type="RandomTokens", seed=0)
    data.update(data_extra or {})
    return f"""
seed: 1
output_dir: {out}
runner_config: {{batch_size: {s['batch_size']}, train_steps: {steps}, peak_tflops: {peak}}}
runner_wrapper: {{use_clip_grad: True, max_grad_norm: 1.0}}
optimizer: {{type: AdamWeightDecay, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: 0.1}}
lr_schedule: {{type: constant, learning_rate: 1.0e-4}}
train_dataset: {{data_loader: {_flow(data)}}}
callbacks: [{{type: MFLossMonitor, per_print_times: 1}}]
model:
  arch: {{type: GPT2LMHeadModel}}
  model_config: {_flow(mc)}
"""


def gridformer_train(shape, steps, threads, peak, workdir, build=None, tag=None, model_extra=None, data_extra=None):
    """One `gridformer train` run; returns every row of metrics.jsonl (step 1 included), the
    parsed resources.json and the run's console output (stdout and stderr)."""
    tag = tag or (shape if isinstance(shape, str) else "run")
    out = os.path.join(workdir, f"out_{tag}")
    path = os.path.join(workdir, f"{tag}.yaml")
    with open(path, "w") as f:
        f.write(gridformer_yaml(shape, steps, peak, out, model_extra, data_extra))
    for name in ("metrics.jsonl", "resources.json"):
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    binary = os.path.join(build or os.path.join(ROOT, "build"), "bin", "gridformer")
    p = subprocess.run([binary, "train", "--config", path], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{binary} train --config {path} failed ({p.returncode}):\n{p.stdout[-3000:]}")
    # The step lines (the run_start line has no "loss").
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in l]
    res_path = os.path.join(out, "resources.json")
    res = json.load(open(res_path)) if os.path.exists(res_path) else None
    return {"rows": rows, "resources": res, "log": p.stdout}


def gridformer_run(shape, steps, threads, peak, workdir, build=None, **kw):
    """Medians of the timed steps of one run (step 1 is warm-up), plus the run itself under "run"."""
    run = gridformer_train(shape, steps, threads, peak, workdir, build, **kw)
    rows = run["rows"][1:]  # step 1 is warm-up
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
            "tflops": statistics.median(r["tflops"] for r in rows),
            "step_ms": statistics.median(r["step_ms"] for r in rows),
            "run": run}


def pytorch_run(shape, steps, threads, dtype="fp32"):
    """bench/torch_gpt2.py's --json result (tokens_per_s, tflops, peak_rss_bytes, ...); the first
    of `steps` steps is warm-up."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_gpt2.py"), "--shape", shape,
                          "--steps", str(steps - 1), "--warmup", "1", "--threads", str(threads), "--json",
                          "--dtype", dtype],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="gpt2-tiny,gpt2-124M")
    ap.add_argument("--steps", type=int, default=6, help="steps per run (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peak-tflops", type=float, default=0.33)
    ap.add_argument("--no-pytorch", action="store_true")
    ap.add_argument("--build", default=None, help="build directory holding bin/gridformer (default: build)")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; threads {args.threads}; "
          f"{args.steps} steps per run, {args.rounds} rounds; MFU peak {args.peak_tflops} TFLOP/s")
    with tempfile.TemporaryDirectory() as work:
        for shape in args.shapes.split(","):
            ours, theirs = [], []
            for r in range(args.rounds):
                ours.append(gridformer_run(shape, args.steps, args.threads, args.peak_tflops, work, args.build))
                if not args.no_pytorch:
                    theirs.append(pytorch_run(shape, args.steps, args.threads))
                print(f"  {shape} round {r + 1}: gridformer {ours[-1]['tokens_per_s']:.1f} tok/s"
                      + ("" if args.no_pytorch else f", pytorch {theirs[-1]['tokens_per_s']:.1f} tok/s"), flush=True)
            o = statistics.median(x["tokens_per_s"] for x in ours)
            of = statistics.median(x["tflops"] for x in ours)
            line = f"{shape:10s} fp32  gridformer {o:8.1f} tok/s  {of:.4f} TFLOP/s  MFU {100 * of / args.peak_tflops:5.1f}%"
            if theirs:
                t = statistics.median(x["tokens_per_s"] for x in theirs)
                tf = statistics.median(x["tflops"] for x in theirs)
                line += f" | pytorch {t:8.1f} tok/s  {tf:.4f} TFLOP/s | ratio {o / t:.2f}x"
            print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
