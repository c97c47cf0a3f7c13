#!/usr/bin/env python3
"""The KV cache's bytes per token and layer in generation, as `gridformer predict` allocates them (its log's "KV cache
N MiB (B bytes)"), for grouped-query attention (Llama-3.2-1B's and Qwen3-0.6B's heads) beside multi-head latent attention
(DeepSeek-V2-Lite's and DeepSeek-V3's latents), with what MLA's heads would take if every head's key and value were
cached (2 x heads x (qk_nope + qk_rope) floats: the training forward's q|k|v width).

    python3 bench/kv_cache_bytes.py [--build build] [--tokens 256]

Each model is its published config.json's attention (heads, head widths, latent ranks) on one layer with a small
vocabulary and FFN (the cache does not depend on them), random weights, one prompt of one token decoded greedily to --tokens
positions' capacity: the cache holds capacity x layers x per-token floats, so bytes / (tokens x layers) is the
per-token, per-layer figure. Nothing is timed; the figures are exact and the same on any CPU.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMALL = {"vocab_size": 512, "intermediate_size": 256, "num_hidden_layers": 1, "max_position_embeddings": 8192,
         "tie_word_embeddings": False, "eos_token_id": 1, "rms_norm_eps": 1e-6}
SHAPES = {
    # Published attention shapes (config.json keys).
    "llama3.2-1b (GQA 8 x 64)": dict(SMALL, architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=2048,
                                     num_attention_heads=32, num_key_value_heads=8, head_dim=64, rope_theta=500000.0),
    "qwen3-0.6b (GQA 8 x 128)": dict(SMALL, architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=1024,
                                     num_attention_heads=16, num_key_value_heads=8, head_dim=128, rope_theta=1e6),
    "deepseek-v2-lite (MLA 512 + 64)": dict(SMALL, architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2",
                                            hidden_size=2048, num_attention_heads=16, num_key_value_heads=16,
                                            q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128,
                                            qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=None,
                                            first_k_dense_replace=1, rope_theta=10000.0),
    "deepseek-v3 (MLA 512 + 64)": dict(SMALL, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
                                       hidden_size=7168, num_attention_heads=128, num_key_value_heads=128,
                                       q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                       v_head_dim=128, n_routed_experts=None, first_k_dense_replace=1,
                                       rope_theta=10000.0, rope_interleave=True),
}


def cache_bytes(binary, hf, tokens, tmp, name):
    d = os.path.join(tmp, re.sub(r"[^a-z0-9]+", "_", name))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf, f)
    yaml = subprocess.run([binary, "config", "--from-hf", d], capture_output=True, text=True, check=True).stdout
    cfg = os.path.join(d, "run.yaml")
    with open(cfg, "w") as f:
        f.write(yaml)
    out = subprocess.run([binary, "predict", "--config", cfg, "--set", f"model.model_config.seq_length={tokens}",
                          "--predict_ids", "2", "--max_decode_length", str(tokens), "--use_past", "true"],
                         capture_output=True, text=True)
    m = re.search(r"KV cache [0-9.]+ MiB \(([0-9]+) bytes\)", out.stderr)
    if not m:
        sys.exit(f"{name}: no 'KV cache' line in predict's log:\n{out.stderr[-2000:]}")
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--tokens", type=int, default=256)
    a = ap.parse_args()
    binary = os.path.join(a.build, "bin", "gridformer")
    print(f"KV cache per token and layer, float32, {a.tokens} positions of capacity ({binary} predict)")
    print(f"{'model':34s} {'bytes/token/layer':>18s} {'floats':>8s} {'full K/V of its heads':>22s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, hf in SHAPES.items():
            per = cache_bytes(binary, hf, a.tokens, tmp, name) / (a.tokens * hf["num_hidden_layers"])
            heads = hf["num_attention_heads"]
            if "kv_lora_rank" in hf:
                full = 2 * heads * (hf["qk_nope_head_dim"] + hf["qk_rope_head_dim"]) * 4
                expect = (hf["kv_lora_rank"] + hf["qk_rope_head_dim"]) * 4
                ratio = f"{full:>10.0f} B ({full / per:.1f}x)"
            else:
                expect = 2 * hf["num_key_value_heads"] * hf["head_dim"] * 4
                ratio = "-"
            assert abs(per - expect) < 1e-6 * expect + 1e-3, f"{name}: {per} bytes, expected {expect}"
            print(f"{name:34s} {per:>16.0f} B {per / 4:>8.0f} {ratio:>22s}")


if __name__ == "__main__":
    main()
