#!/usr/bin/env python3
"""LoRA against full fine-tuning, side by side in one run: tokens/s and peak RSS of the same model on the same
synthetic batches, trained in full (the reference: weights, gradients and AdamW moments of every parameter), with
LoRA r 16 (alpha 32) on the attention's and the MLP's projections over an fp32 base, and the same over a bf16 base
(pet_config.base_dtype: bfloat16). The Finetune issue's targets: LoRA's peak RSS <= 0.45x full fine-tuning's (fp32
weights), <= 0.3x with the base in bf16. Both LoRA runs compute the frozen head's loss --loss-chunk vocabulary rows
at a time (pet_config.loss_vocab_chunk; 0: the whole [tokens, vocabulary] logits at once, as full fine-tuning).

    python3 bench/lora_memory.py [--build build] [--shapes gpt2-124M,llama-1B] [--steps 4] [--rounds 3] [--loss-chunk 4096]

Each run trains --steps steps on one rank (2 threads by default, OMP_NUM_THREADS), the first untimed; tokens/s is
the median of the other steps' (metrics.jsonl), peak RSS the run's (resources.json, getrusage). Rounds interleave
the three runs; a figure is the median over rounds (peak RSS: the largest). Shapes: gpt2-124M (12 layers, 768
wide, seq 256, batch 4; targets c_attn, c_proj, c_fc) and llama-1B, Llama 3.2 1B's shape (16 layers, 2048 wide,
32 heads, 8 key/value heads, SwiGLU 8192, vocabulary 128256, tied embeddings; seq 128, batch 1; targets q, k, v,
o, gate, up, down). Full fine-tuning of llama-1B holds 16 B x 1.24e9 = 19.8 GB: it needs a machine with ~24 GB.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {
    "gpt2-124M": ("configs/gpt2/run_gpt2_tiny.yaml",
                  dict(hidden_size=768, num_layers=12, num_heads=12, seq_length=256, vocab_size=50257), 4,
                  "[c_attn, c_proj, c_fc]"),
    "llama-1B": ("configs/llama/run_llama_tiny.yaml",
                 dict(hidden_size=2048, num_layers=16, num_heads=32, n_kv_heads=8, intermediate_size=8192,
                      vocab_size=128256, seq_length=128, tie_word_embeddings=True), 1,
                 "[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]"),
}
KINDS = ("full", "lora", "lora_bf16")


def run(build, shape, kind, steps, recompute, loss_chunk):
    cfg, model, batch, targets = SHAPES[shape]
    with tempfile.TemporaryDirectory() as out:
        sets = [f"model.model_config.{k}={v}" for k, v in model.items()]
        sets += [f"runner_config.batch_size={batch}", f"runner_config.train_steps={steps}", f"output_dir={out}",
                 "train_dataset.data_loader.type=RandomTokens", "callbacks.0.per_print_times=1",
                 f"recompute_config.recompute={recompute}"]
        if kind != "full":
            pet = f"{{r: 16, lora_alpha: 32, target_modules: {targets}"
            pet += f", loss_vocab_chunk: {loss_chunk}"
            pet += ", base_dtype: bfloat16}" if kind == "lora_bf16" else "}"
            sets.append(f"model.model_config.pet_config={pet}")
        cmd = [os.path.join(build, "bin", "gridformer"), "train", "--config", os.path.join(ROOT, cfg)]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if p.returncode != 0:
            raise RuntimeError(f"{shape} {kind}: exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        tps, rss = [], None
        for dirpath, _, files in os.walk(out):
            if "metrics.jsonl" in files:
                for line in open(os.path.join(dirpath, "metrics.jsonl")):
                    r = json.loads(line)
                    if "tokens_per_s" in r and not r.get("startup"):
                        tps.append(r["tokens_per_s"])
            if "resources.json" in files:
                rss = json.load(open(os.path.join(dirpath, "resources.json")))["ranks"][0]["peak_rss_bytes"]
        return statistics.median(tps), rss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shapes", default="gpt2-124M,llama-1B")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--recompute", default="False,True", help="recompute_config.recompute values to run (full recompute)")
    ap.add_argument("--loss-chunk", type=int, default=4096,
                    help="the LoRA runs' pet_config.loss_vocab_chunk (0: the whole logits at once)")
    a = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"LoRA's loss_vocab_chunk {a.loss_chunk}")
    print(f"{'shape':<10} {'recompute':<9} {'run':<10} {'tokens/s':>9} {'/ full':>7} {'peak RSS':>10} {'RSS / full':>11} "
          f"{'target':>7}")
    gib = 2.0 ** 30
    for shape in a.shapes.split(","):
        for rc in a.recompute.split(","):
            res = {k: ([], []) for k in KINDS}
            for _ in range(a.rounds):
                for k in KINDS:
                    t, r = run(a.build, shape, k, a.steps, rc, a.loss_chunk)
                    res[k][0].append(t)
                    res[k][1].append(r)
            full_rss, full_t = max(res["full"][1]), statistics.median(res["full"][0])
            for k in KINDS:
                t, r = statistics.median(res[k][0]), max(res[k][1])
                target = {"full": "", "lora": "0.45", "lora_bf16": "0.30"}[k]
                ok = "" if not target else ("  ok" if r / full_rss <= float(target) else "  MISSED")
                print(f"{shape:<10} {rc:<9} {k:<10} {t:>9.1f} {t / full_t:>6.2f}x {r / gib:>8.2f}Gi {r / full_rss:>10.3f}x "
                      f"{target:>7}{ok}", flush=True)


if __name__ == "__main__":
    main()
