#!/usr/bin/env python3
"""Today's small open models at their real shapes: one training step at T 1024 (tokens/s, peak RSS beside what
`gridformer plan` computed before allocating anything), fp32 and bf16.

    python3 bench/models_step.py [--build build] [--shapes llama3.2-1b,qwen3-0.6b] [--dtypes float32,bfloat16]
                                 [--steps 3] [--seq 1024] [--moments float32|bfloat16]

Each shape is the model's own config.json (Llama-3.2-1B's and Qwen3-0.6B's published sizes, written here), read
by `gridformer config --from-hf` as a user's would be, trained on synthetic tokens (RandomTokens) with batch 1 on
one rank; the first step is untimed (first-touch of every page), the figure is the median of the others'
tokens/s. Peak RSS is the run's (getrusage, resources.json) against the plan's total (parameters, gradients,
AdamW moments, the low-precision weight copy, activations). Llama-3.2-1B's 1.24e9 parameters take 19.8 GB in
fp32 with fp32 moments before any activation: on a 24 GiB machine `--moments bfloat16` (optimizer.moment_dtype)
keeps it at 14.8 GB; the row says which.
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

# The published config.json of each model (the keys gridformer reads; values as released).
SHAPES = {
    "llama3.2-1b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0, "tie_word_embeddings": True, "eos_token_id": 128001,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    },
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
        "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000, "rope_scaling": None, "tie_word_embeddings": True, "eos_token_id": 151645,
        "attention_bias": False, "use_sliding_window": False, "sliding_window": None, "max_window_layers": 28,
    },
}


def gib(b):
    return b / 2**30


def run_shape(build, name, dtype, steps, seq, moments, work):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(SHAPES[name], f)
    binary = os.path.join(build, "bin", "gridformer")
    model = subprocess.run([binary, "config", "--from-hf", d], check=True, capture_output=True, text=True).stdout
    cfg = os.path.join(d, "run.yaml")
    with open(cfg, "w") as f:
        f.write(model + "train_dataset: {data_loader: {type: RandomTokens, seed: 1}}\n"
                "callbacks: [{type: MFLossMonitor, per_print_times: 1}]\n")
    sets = [f"model.model_config.seq_length={seq}", f"model.model_config.compute_dtype={dtype}",
            "runner_config.batch_size=1", f"runner_config.train_steps={steps}", f"optimizer.moment_dtype={moments}",
            "lr_schedule.warmup_steps=0"]
    args = sum((["--set", s] for s in sets), [])
    plan = subprocess.run([binary, "plan", "--config", cfg] + args, check=True, capture_output=True, text=True).stdout
    m = re.search(r"total ([0-9.]+) (GiB|MiB)", plan)
    planned = float(m.group(1)) * (2**30 if m.group(2) == "GiB" else 2**20)
    out = os.path.join(d, f"out_{dtype}")
    subprocess.run([binary, "train", "--config", cfg, "--set", f"output_dir={out}"] + args, check=True,
                   capture_output=True, text=True)
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    steps_rows = [r for r in rows if "step_ms" in r and "loss" in r]
    timed = [r["tokens_per_s"] for r in steps_rows[1:]]
    res = json.load(open(os.path.join(out, "resources.json")))["ranks"][0]
    params = re.search(r"parameters: (\d+) in the model", plan).group(1)
    return dict(shape=name, dtype=dtype, moments=moments, params=int(params), tokens_per_s=statistics.median(timed),
                steps=len(timed), tflops=statistics.median(r["tflops"] for r in steps_rows[1:]),
                peak_rss=res["peak_rss_bytes"], planned=planned, loss=steps_rows[-1]["loss"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shapes", default="qwen3-0.6b,llama3.2-1b")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--moments", default="", help="AdamW moment dtype (default: float32, bfloat16 for llama3.2-1b)")
    ap.add_argument("--json")
    a = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} logical CPUs; T {a.seq}, batch 1, {a.steps} steps (first untimed)")
    out = []
    with tempfile.TemporaryDirectory() as work:
        for shape in a.shapes.split(","):
            for dtype in a.dtypes.split(","):
                moments = a.moments or ("bfloat16" if shape == "llama3.2-1b" else "float32")
                r = run_shape(a.build, shape, dtype, a.steps, a.seq, moments, work)
                out.append(r)
                print(f"{shape:12s} {dtype:9s} params {r['params'] / 1e9:.2f}e9  moments {moments:8s} "
                      f"{r['tokens_per_s']:7.1f} tok/s ({r['tflops']:.3f} TFLOP/s)  peak RSS {gib(r['peak_rss']):6.2f} GiB "
                      f"vs plan {gib(r['planned']):6.2f} GiB ({r['peak_rss'] / r['planned']:.2f}x)  loss {r['loss']:.3f}",
                      flush=True)
    if a.json:
        json.dump(dict(cpu=cpu, rows=out), open(a.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
