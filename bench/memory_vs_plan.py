#!/usr/bin/env python3
"""Peak RSS against the analytic bytes: what a run really holds beside what gridformer computed
before allocating anything (parameters, gradients, AdamW moments, the low-precision weight copy,
and the planned activations; models/transformer_lm.h's buffer plan).

    python3 bench/memory_vs_plan.py [--build build] [--shapes gpt2-124M,llama-tiny] [--dtypes float32]

Each shape trains 2 steps (synthetic tokens) on one rank; the figures come from the run's
resources.json (peak RSS from getrusage, the planned bytes the model reported). The issue's target:
gpt2-124M fp32 peak RSS within 1.15x of the analytic bytes. The rest of RSS is the binary, its
libraries (OpenBLAS, oneDNN, MPI), the data index, and the allocator's own overhead.
"""
import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {
    "gpt2-124M": ("configs/gpt2/run_gpt2_tiny.yaml",
                  dict(hidden_size=768, num_layers=12, num_heads=12, seq_length=256), 4),
    "gpt2-tiny": ("configs/gpt2/run_gpt2_tiny.yaml", {}, 8),
    "llama-tiny": ("configs/llama/run_llama_tiny.yaml", {}, 8),
}


def run(build, shape, dtype):
    cfg, model, batch = SHAPES[shape]
    with tempfile.TemporaryDirectory() as out:
        sets = [f"model.model_config.{k}={v}" for k, v in model.items()]
        sets += [f"runner_config.batch_size={batch}", "runner_config.train_steps=2", f"output_dir={out}",
                 f"model.model_config.compute_dtype={dtype}",
                 "train_dataset.data_loader.type=RandomTokens"]
        cmd = [os.path.join(build, "bin", "gridformer"), "train", "--config", os.path.join(ROOT, cfg)]
        for s in sets:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
        for dirpath, _, files in os.walk(out):
            if "resources.json" in files:
                with open(os.path.join(dirpath, "resources.json")) as f:
                    return json.load(f)["ranks"][0]
    raise RuntimeError("no resources.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shapes", default="gpt2-124M,llama-tiny")
    ap.add_argument("--dtypes", default="float32")
    a = ap.parse_args()
    print(f"{'shape':<12} {'dtype':<9} {'params+grads':>13} {'AdamW':>9} {'copy':>8} {'activations':>12} "
          f"{'analytic':>10} {'peak RSS':>10} {'ratio':>6}")
    mib = 2.0 ** 20
    for shape in a.shapes.split(","):
        for dtype in a.dtypes.split(","):
            r = run(a.build, shape, dtype)
            params = r["optimizer_state_bytes"] / 2  # the moments are two fp32 copies of the parameters
            analytic = 2 * params + r["optimizer_state_bytes"] + r["weight_copy_bytes"] + r["planned_activation_bytes"]
            print(f"{shape:<12} {dtype:<9} {2 * params / mib:>11.1f}Mi {r['optimizer_state_bytes'] / mib:>7.1f}Mi "
                  f"{r['weight_copy_bytes'] / mib:>6.1f}Mi {r['planned_activation_bytes'] / mib:>10.1f}Mi "
                  f"{analytic / mib:>8.1f}Mi {r['peak_rss_bytes'] / mib:>8.1f}Mi {r['peak_rss_bytes'] / analytic:>6.3f}")


if __name__ == "__main__":
    main()
