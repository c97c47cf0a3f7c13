#!/usr/bin/env python3
"""Golden RoPE frequencies and cos/sin tables of Hugging Face's RoPE variants, for
tests/core/rope_scaling_test.cpp, from tools/hf_rope_reference.py (a torch transcription of
transformers' modeling_rope_utils.py, 5.x; see its docstring for the version and the 4.x differences).

Each case is a realistic config.json, given in both forms (transformers 4.x `rope_scaling` +
`rope_theta`, 5.x `rope_parameters`), which must give the same frequencies here and the same
RopeConfig in C++. Stored per case: inv_freq (float32, as numbers and as their bit patterns),
attention_scaling (the Python float), and cos/sin at a few positions, some past the pretraining
context, in float32 as LlamaRotaryEmbedding computes them (only the first rotary_dim / 2 columns:
HF's emb is cat(freqs, freqs)). Written by Debian's torch on this machine's CPU.

  /usr/bin/python3 tools/make_rope_golden.py [--out tests/golden/rope/rope_cases.json]
"""
import argparse
import copy
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_rope_reference as ref  # noqa: E402


def phi3_factors(n):
    """Phi-3-mini-128k-like longrope divisors (the real ones are tuned; these have their shape):
    short ~1 rising to ~1.2, long 1 rising to ~60 over the slow half of the frequencies."""
    short = [round(1.0 + 0.2 * (i / (n - 1)) ** 3, 6) for i in range(n)]
    long = [round(1.0 + 59.0 * (i / (n - 1)) ** 2.5, 6) for i in range(n)]
    return short, long


def case(name, head_dim, theta, max_pos, scaling, seq_len=None, top=None, positions=None):
    """config.json in both forms. scaling: the rope dict without rope_theta (None = default RoPE);
    top: extra top-level keys (partial_rotary_factor, Phi-3's original_max_position_embeddings)."""
    top = dict(top or {})
    c4 = {"max_position_embeddings": max_pos, "head_dim": head_dim, "rope_theta": theta,
          "rope_scaling": copy.deepcopy(scaling), **top}
    params = {"rope_type": "default"} if scaling is None else copy.deepcopy(scaling)
    if "type" in params:  # 5.x writes rope_type
        params["rope_type"] = params.pop("type")
    params["rope_theta"] = theta
    top5 = dict(top)
    for k in ("partial_rotary_factor", "original_max_position_embeddings"):  # 5.x keeps them in the rope dict
        if k in top5:
            params[k] = top5.pop(k)
    c5 = {"max_position_embeddings": max_pos, "head_dim": head_dim, "rope_parameters": params, **top5}
    return {"name": name, "head_dim": head_dim, "seq_len": seq_len, "config_4x": c4, "config_5x": c5,
            "positions": positions}


def cases():
    short, long = phi3_factors(48)
    phi3 = {"type": "longrope", "short_factor": short, "long_factor": long}
    phi3_top = {"original_max_position_embeddings": 4096}
    far = lambda orig: [1, 777, orig - 1, 2 * orig + 3, 4 * orig]  # noqa: E731
    llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    llama32 = dict(llama31, factor=32.0)
    return [
        case("default_llama2", 128, 10000.0, 4096, None, positions=far(4096)),
        case("llama3_1_8b", 128, 500000.0, 131072, llama31, positions=far(8192)),
        case("llama3_2_1b", 64, 500000.0, 131072, llama32, positions=far(8192)),
        # Llama 4 Scout's text rope: low == high, so HF's smooth factor divides by zero (unused: no
        # wavelength is in the empty band).
        case("llama3_llama4_scout", 128, 500000.0, 10485760, dict(llama31, factor=16.0, high_freq_factor=1.0),
             positions=far(8192)),
        # Not a released model: llama3 at theta 1e4 puts frequencies in the smoothed band where HF's
        # `2 * math.pi / inv_freq` (t.reciprocal() * c, two roundings) differs from one division.
        case("llama3_theta1e4", 64, 10000.0, 65536, llama31, positions=far(8192)),
        # DeepSeek-V2-Lite: the rope part of its heads (qk_rope_head_dim 64), 4.x's "type" key.
        case("yarn_deepseek_v2_lite", 64, 10000.0, 163840,
             {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "mscale": 0.707,
              "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1}, positions=far(4096)),
        # Qwen3's long-context recipe: factor 4 over 32768, max_position_embeddings left at 40960.
        case("yarn_qwen3", 128, 1000000.0, 40960,
             {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, positions=far(32768)),
        # gpt-oss-like: no truncation of the correction range.
        case("yarn_untruncated", 64, 150000.0, 131072,
             {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
              "beta_slow": 1.0, "truncate": False}, positions=far(4096)),
        case("linear_2", 128, 10000.0, 4096, {"type": "linear", "factor": 2.0}, positions=far(4096)),
        case("dynamic_2_at_2x", 128, 10000.0, 4096, {"type": "dynamic", "factor": 2.0}, seq_len=8192,
             positions=[1, 777, 4095, 6000, 8191]),
        case("dynamic_2_within", 128, 10000.0, 4096, {"type": "dynamic", "factor": 2.0}, seq_len=2048,
             positions=[1, 777, 2047]),
        case("longrope_phi3_short", 96, 10000.0, 131072, phi3, seq_len=4096, top=phi3_top, positions=[1, 777, 4095]),
        case("longrope_phi3_long", 96, 10000.0, 131072, phi3, seq_len=16384, top=phi3_top, positions=far(4096)),
        case("partial_half_glm", 128, 10000.0, 8192, None, top={"partial_rotary_factor": 0.5}, positions=far(8192)),
        case("partial_phi2", 80, 10000.0, 2048, None, top={"partial_rotary_factor": 0.4}, positions=far(2048)),
        case("partial_llama3", 128, 500000.0, 131072, llama31, top={"partial_rotary_factor": 0.5},
             positions=far(8192)),
    ]


def f32(t):
    return [float(np.float32(x)) for x in t.numpy()]


def f32_short(t):
    return [float(repr(np.float32(x))) for x in t.numpy()]  # shortest float32 digits (small file)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                  "golden", "rope", "rope_cases.json"))
    args = ap.parse_args()
    out = []
    for c in cases():
        inv4, s4 = ref.inv_freq_and_scaling(c["config_4x"], c["head_dim"], c["seq_len"])
        inv5, s5 = ref.inv_freq_and_scaling(c["config_5x"], c["head_dim"], c["seq_len"])
        assert torch.equal(inv4, inv5) and s4 == s5, c["name"]
        half = inv4.numel()
        cos, sin = ref.cos_sin(inv4, s4, c["positions"])
        assert torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:])
        out.append({
            "name": c["name"], "head_dim": c["head_dim"], "seq_len": c["seq_len"],
            "rotary_dim": ref.rotary_dim(c["config_4x"], c["head_dim"]),
            "config_4x": c["config_4x"], "config_5x": c["config_5x"],
            "inv_freq": f32(inv4), "inv_freq_bits": inv4.numpy().view(np.uint32).tolist(),
            "attention_scaling": s4, "positions": c["positions"],
            "cos": [f32_short(r) for r in cos[:, :half]], "sin": [f32_short(r) for r in sin[:, :half]],
        })
        print(f"{c['name']:24s} rotary_dim {2 * half:3d} attention_scaling {s4:.9f}")
    doc = {"generator": "tools/make_rope_golden.py (tools/hf_rope_reference.py: transformers 5.x "
                        "modeling_rope_utils.py)",
           "torch": torch.__version__, "cases": out}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(doc, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {args.out}: {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
