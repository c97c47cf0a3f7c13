"""PyTorch's step 1 for tests/integration/sft.sh, with Hugging Face's semantics (tools/torch_llama.py).

Run in sft.sh's work directory: the batch is the first GB samples of T + 1 tokens of
alpaca_text_document (Megatron's GPTDataset without shuffling, one epoch: sample j is tokens
[j T, j T + T + 1) of the documents in order), labels -100 where alpaca_text_document_loss_mask is 0,
Megatron's get_ltor_masks_and_position_ids with reset_position_ids and reset_attention_mask as
per-document position_ids and a block-diagonal causal 4D mask, and optionally Hugging Face's sliding
window (kv_idx > q_idx - window). The model is the tiny Llama whose weights sft.sh loads.
"""
import array
import json
import sys

import torch

EOD = 50256


def model(src):
    sys.path.insert(0, src + "/tools")
    import torch_llama as tl
    cfg = tl.LlamaConfig(vocab_size=50257, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                         intermediate_size=48, rope_theta=10000.0, rms_norm_eps=1e-5)
    m = tl.LlamaForCausalLM(cfg)
    tl.init_hf_(m, torch.Generator().manual_seed(3))
    return m


def batch(T, GB, window=0):
    """inputs, labels, position_ids, allowed [GB, 1, T, T]."""
    ids = array.array("H", open("alpaca_text_document.bin", "rb").read()).tolist()
    mask = array.array("B", open("alpaca_text_document_loss_mask.bin", "rb").read()).tolist()
    tok = torch.tensor([ids[j * T:j * T + T + 1] for j in range(GB)])
    msk = torch.tensor([mask[j * T:j * T + T + 1] for j in range(GB)])
    inputs, labels = tok[:, :-1], tok[:, 1:].clone()
    labels[msk[:, 1:] == 0] = -100
    pos = torch.zeros(GB, T, dtype=torch.long)
    allow = torch.ones(GB, 1, T, T, dtype=torch.bool)
    for b in range(GB):
        start = 0
        for i in range(T):
            pos[b, i] = i - start
            allow[b, 0, i, :start] = False
            if inputs[b, i] == EOD:
                start = i + 1
    if window > 0:
        i = torch.arange(T)
        allow &= (i[None, :] > i[:, None] - window)[None, None]
    return inputs, labels, pos, allow


def step1(src, T, GB, window=0):
    """The model after loss.backward(), the loss, the gradient norm and the batch."""
    m = model(src)
    inputs, labels, pos, allow = batch(T, GB, window)
    _, loss = m(inputs, labels, position_ids=pos, attn_mask=allow)
    loss.backward()
    gnorm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in m.parameters())).item()
    return m, loss, gnorm, (inputs, labels)


def logged_step1(run):
    """Step 1's line of RUN/metrics.jsonl."""
    return next(j for j in map(json.loads, open(f"{run}/metrics.jsonl")) if j.get("step") == 1 and "loss" in j)
