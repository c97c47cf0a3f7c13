#!/usr/bin/env python3
"""Reference loss curves for mixed precision: PyTorch trains the golden tiny GPT-2
(tests/golden/gpt2_tiny.safetensors: its initial weights, token batch and hyper-parameters) for
50 steps in fp32 and again under torch.autocast("cpu", dtype=torch.bfloat16), the same AdamW,
clipping and schedule (cosine over 50 steps).

    /usr/bin/python3 tools/make_mixed_golden.py    # Debian's python3-torch

Writes tests/golden/gpt2_tiny_mixed.safetensors with
    losses_fp32 [50], losses_bf16 [50]   loss before update s = 1..50
How far PyTorch's own bf16 curve strays from its fp32 curve is the yardstick the mixed-precision
test holds gridformer's bf16 curve to (tests/models/mixed_precision_test.cpp).
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (GPT2, lr_at, clip_grad_norm_exact, write_safetensors)

STEPS = 50
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    dt = {"F32": torch.float32, "I32": torch.int32}
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=dt[h["dtype"]]).reshape(h["shape"]).clone()
    return out, meta


def train(tensors, meta, autocast):
    cfg = dict(n_layer=int(meta["n_layer"]), n_embd=int(meta["n_embd"]), n_head=int(meta["n_head"]),
               vocab_size=int(meta["vocab_size"]), n_positions=int(meta["n_positions"]),
               activation=meta["activation"], layer_norm_epsilon=float(meta["layer_norm_epsilon"]))
    hp = dict(learning_rate=float(meta["learning_rate"]), lr_end=float(meta["lr_end"]),
              warmup_steps=int(meta["warmup_steps"]), total_steps=STEPS, lr_schedule=meta["lr_schedule"])
    model = mg.GPT2(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(tensors["weights." + name])
    tokens = tensors["tokens"].long()
    T = int(meta["T"])
    inputs, targets = tokens[:, :T], tokens[:, 1:]
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(meta["weight_decay"])},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=hp["learning_rate"], betas=(float(meta["beta1"]), float(meta["beta2"])),
                            eps=float(meta["adam_eps"]), foreach=False)
    params = list(model.parameters())
    losses = []
    for s in range(1, STEPS + 1):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            _, loss = model(inputs, targets)
        loss.float().backward()
        mg.clip_grad_norm_exact(params, float(meta["max_norm"]))
        for g in opt.param_groups:
            g["lr"] = mg.lr_at(s, hp)
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    torch.set_num_threads(2)
    tensors, meta = read_safetensors(os.path.join(GOLDEN, "gpt2_tiny.safetensors"))
    fp32 = train(tensors, meta, False)
    bf16 = train(tensors, meta, True)
    assert abs(fp32[0] - float(tensors["loss"][0])) < 1e-5 * fp32[0], "fp32 step 1 differs from the golden loss"
    worst = max(abs(b - f) / f for b, f in zip(bf16, fp32))
    for s in range(0, STEPS, 5):
        print(f"  step {s + 1:2d}  fp32 {fp32[s]:.6f}  bf16 {bf16[s]:.6f}  rel {abs(bf16[s] - fp32[s]) / fp32[s]:.2e}")
    print(f"  max relative |bf16 - fp32| over {STEPS} steps: {worst:.3e}")
    out = {"losses_fp32": torch.tensor(fp32, dtype=torch.float32),
           "losses_bf16": torch.tensor(bf16, dtype=torch.float32)}
    mg.write_safetensors(os.path.join(GOLDEN, "gpt2_tiny_mixed.safetensors"), out, {
        "format": "gridformer golden v1", "steps": str(STEPS), "torch": torch.__version__,
        "source": "gpt2_tiny.safetensors weights, tokens and hyper-parameters; cosine over 50 steps",
        "description": "loss before update s of PyTorch fp32 and torch.autocast('cpu', bfloat16) training"})


if __name__ == "__main__":
    main()
