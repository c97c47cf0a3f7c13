#!/usr/bin/env python3
"""Megatron-core's GPTModel run by PyTorch on a checkpoint's own files: the logits of a Megatron-core checkpoint
(iter_*/ or release/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt, any tensor and expert degree, one pipeline stage) for
a golden file's inputs, compared with the golden's logits (which a Hugging Face transcription computed from the same
weights: tools/make_llama_golden.py, make_moe_golden.py, make_family_golden.py).

    megatron_core_forward.py MEGATRON_DIR GOLDEN.safetensors

What it transcribes, from Megatron-LM core_r0.6.0 (megatron/core/...):
  - the shards joined back as tensor_parallel/layers.py cuts them: ColumnParallelLinear's weight and bias by rows
    (linear_qkv, linear_fc1, the word embeddings, output_layer), RowParallelLinear's weight by columns (linear_proj,
    linear_fc2); a SwiGLU linear_fc1 shard is that rank's [gate; up] (mlp.py chunks each rank's output in two); an
    expert-parallel rank r holds experts r * local + i (moe/experts.py), SequentialMLP's local_experts.i or
    GroupedMLP's weight1.view(local, C, -1)[i] / weight2.view(local, -1, C)[i] (x @ w, not w^T);
  - models/gpt/gpt_model.py: word embeddings (+ learned positions), the layers, final_layernorm, output_layer (or the
    tied word embeddings), logits over the padded vocabulary of which the true vocabulary's columns are compared;
  - transformer/transformer_layer.py: x + attention(input_layernorm(x)), then x + mlp(pre_mlp_layernorm(x)), the norms
    under Transformer Engine's names (linear_qkv.layer_norm_weight, linear_fc1.layer_norm_weight) or the local spec's;
  - transformer/attention.py SelfAttention.get_query_key_value_tensors: linear_qkv's output viewed [s, groups,
    (heads/groups + 2) x head_dim] and split into the group's queries, its key and its value; models/common/embeddings/
    rotary_pos_embedding.py: inv_freq = 1 / base^(arange(0, d, 2) / d), emb = cat(freqs, freqs), t cos + rotate_half(t)
    sin (rotary_interleaved False); dot_product_attention.py: keys and values repeat_interleave'd to the heads,
    softmax(q k^T / sqrt(d)) causal;
  - transformer/mlp.py: fc2(act(fc1 x)), gated: silu(a) * b of fc1's two halves;
  - transformer/moe/router.py TopKRouter (aux_loss routing): logits = x W^T, top-k of the logits, softmax over those
    k; the output the scores' weighted sum of the chosen experts' MLPs (token_dispatcher.py);
  - the norms: RMSNorm x / sqrt(mean(x^2) + eps) * w, LayerNorm, eps = args.norm_epsilon.
"""
import glob
import os
import re
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st_io  # noqa: E402

torch.set_num_threads(1)


def shards(meg):
    it = open(os.path.join(meg, "latest_checkpointed_iteration.txt")).read().strip()
    sub = "release" if it == "release" else "iter_%07d" % int(it)
    files = {}
    for f in glob.glob(os.path.join(meg, sub, "mp_rank_*", "model_optim_rng.pt")):
        m = re.fullmatch(r"mp_rank_(\d\d)(?:_(\d\d\d))?", os.path.basename(os.path.dirname(f)))
        assert m, f
        files[(int(m.group(1)), int(m.group(2) or 0))] = torch.load(f, map_location="cpu", weights_only=False)
    return files


def join(files, tp, ep):
    """The whole model's tensors in fp32, experts by their global index."""
    first = files[(0, 0)]
    model, args = first["model"], first["args"]
    glu = args.swiglu

    def cat(name, dim, ep_rank=0):
        return torch.cat([files[(t, ep_rank)]["model"][name].float() for t in range(tp)], dim)

    def fc1_cat(name, ep_rank=0, transposed=False):
        parts = [files[(t, ep_rank)]["model"][name].float() for t in range(tp)]
        if transposed:
            parts = [p.t() for p in parts]
        if not glu:
            return torch.cat(parts, 0)
        halves = [p.chunk(2, 0) for p in parts]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], 0)

    out = {}
    for name, v in model.items():
        if name.endswith("_extra_state") or not isinstance(v, torch.Tensor) or ".mlp.experts." in name:
            continue
        if re.search(r"linear_qkv\.(weight|bias)$|word_embeddings\.weight$|output_layer\.weight$", name):
            out[name] = cat(name, 0)
        elif re.search(r"linear_proj\.weight$|mlp\.linear_fc2\.weight$", name):
            out[name] = cat(name, 1)
        elif name.endswith("mlp.linear_fc1.weight"):
            out[name] = fc1_cat(name)
        elif name.endswith("mlp.linear_fc1.bias"):
            out[name] = fc1_cat(name) if glu else cat(name, 0)
        else:
            out[name] = v.float()
    experts = {}  # (layer, global expert) -> (fc1 [2F or F, C], fc2 [C, F])
    for r in range(ep):
        m = files[(0, r)]["model"]
        for name in m:
            g = re.fullmatch(r"decoder\.layers\.(\d+)\.mlp\.experts\.local_experts\.(\d+)\.linear_fc1\.weight", name)
            if g:
                layer, i = int(g.group(1)), int(g.group(2))
                local = sum(1 for k in m if re.fullmatch(rf"decoder\.layers\.{layer}\.mlp\.experts\.local_experts\.\d+\.linear_fc1\.weight", k))
                fc2 = name.replace("linear_fc1", "linear_fc2")
                experts[(layer, r * local + i)] = (fc1_cat(name, r), cat(fc2, 1, r))
            g = re.fullmatch(r"decoder\.layers\.(\d+)\.mlp\.experts\.weight1", name)
            if g:
                layer, C = int(g.group(1)), args.hidden_size
                local = args.num_experts // ep
                w1 = [files[(t, r)]["model"][name].float().view(local, C, -1) for t in range(tp)]
                w2 = [files[(t, r)]["model"][name.replace("weight1", "weight2")].float().view(local, -1, C) for t in range(tp)]
                for i in range(local):
                    parts = [w[i].t() for w in w1]  # each rank's [2F/tp or F/tp, C]
                    if glu:
                        halves = [p.chunk(2, 0) for p in parts]
                        fc1 = torch.cat([h[0] for h in halves] + [h[1] for h in halves], 0)
                    else:
                        fc1 = torch.cat(parts, 0)
                    experts[(layer, r * local + i)] = (fc1, torch.cat([w[i].t() for w in w2], 1))
    return out, experts, args


def norm(x, w, b, args):
    if args.normalization == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + args.norm_epsilon) * w
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, args.norm_epsilon)


def rotate_half(x):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def mlp(x, fc1, fc2, b1=None, b2=None, glu=True, gelu=None):
    h = x @ fc1.t() + (b1 if b1 is not None else 0)
    if glu:
        a, b = torch.chunk(h, 2, dim=-1)
        h = torch.nn.functional.silu(a) * b
    else:
        h = gelu(h)
    return h @ fc2.t() + (b2 if b2 is not None else 0)


def forward(tokens, w, experts, args):
    S = tokens.shape[1]
    heads, D = args.num_attention_heads, args.kv_channels
    groups = args.num_query_groups if args.group_query_attention else heads
    per = heads // groups
    gelu = (lambda t: torch.nn.functional.gelu(t, approximate="tanh")) if args.openai_gelu else torch.nn.functional.gelu
    x = w["embedding.word_embeddings.weight"][tokens]
    if "embedding.position_embeddings.weight" in w:
        x = x + w["embedding.position_embeddings.weight"][:S]
    inv_freq = 1.0 / (args.rotary_base ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    emb = torch.cat([torch.outer(torch.arange(S, dtype=torch.float32), inv_freq)] * 2, -1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    causal = torch.ones(S, S, dtype=torch.bool).tril()
    for layer in range(args.num_layers):
        p = f"decoder.layers.{layer}."
        g = lambda n: w.get(p + n)  # noqa: E731
        n1w = g("self_attention.linear_qkv.layer_norm_weight")
        n1b = g("self_attention.linear_qkv.layer_norm_bias")
        if n1w is None:
            n1w, n1b = g("input_layernorm.weight"), g("input_layernorm.bias")
        h = norm(x, n1w, n1b, args)
        qkv = h @ g("self_attention.linear_qkv.weight").t()
        if g("self_attention.linear_qkv.bias") is not None:
            qkv = qkv + g("self_attention.linear_qkv.bias")
        qkv = qkv.view(*qkv.shape[:2], groups, (per + 2) * D)
        q, k, v = torch.split(qkv, [per * D, D, D], dim=-1)
        q = q.reshape(*q.shape[:2], heads, D)
        if args.position_embedding_type == "rope":
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(per, dim=2), v.repeat_interleave(per, dim=2)
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / D ** 0.5
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), -1)
        o = torch.einsum("bhqk,bkhd->bqhd", a, v).reshape(*x.shape[:2], heads * D)
        o = o @ g("self_attention.linear_proj.weight").t()
        if g("self_attention.linear_proj.bias") is not None:
            o = o + g("self_attention.linear_proj.bias")
        x = x + o
        n2w, n2b = g("mlp.linear_fc1.layer_norm_weight"), g("mlp.linear_fc1.layer_norm_bias")
        if n2w is None:
            n2w, n2b = g("pre_mlp_layernorm.weight"), g("pre_mlp_layernorm.bias")
        h = norm(x, n2w, n2b, args)
        if g("mlp.router.weight") is not None:
            flat = h.reshape(-1, h.shape[-1])
            top, idx = torch.topk(flat @ g("mlp.router.weight").t(), args.moe_router_topk, dim=-1)
            scores = torch.softmax(top, dim=-1)
            y = torch.zeros_like(flat)
            for t in range(flat.shape[0]):
                for j in range(args.moe_router_topk):
                    fc1, fc2 = experts[(layer, int(idx[t, j]))]
                    y[t] += scores[t, j] * mlp(flat[t:t + 1], fc1, fc2, glu=args.swiglu, gelu=gelu)[0]
            x = x + y.view_as(h)
        else:
            x = x + mlp(h, g("mlp.linear_fc1.weight"), g("mlp.linear_fc2.weight"), g("mlp.linear_fc1.bias"),
                        g("mlp.linear_fc2.bias"), args.swiglu, gelu)
    x = norm(x, w["decoder.final_layernorm.weight"], w.get("decoder.final_layernorm.bias"), args)
    head = w.get("output_layer.weight", w["embedding.word_embeddings.weight"])
    return x @ head.t()


def main():
    meg, golden = sys.argv[1], sys.argv[2]
    files = shards(meg)
    tp = 1 + max(t for t, _ in files)
    ep = 1 + max(e for _, e in files)
    assert len(files) == tp * ep, f"{len(files)} shard files for TP {tp} x EP {ep} (one pipeline stage is read)"
    w, experts, args = join(files, tp, ep)
    g, _ = st_io.read(golden)
    logits_key = "logits64.logits" if "logits64.logits" in g else "logits"
    tokens = g["logits64.tokens" if "logits64.tokens" in g else "tokens"].long()
    vocab = g[logits_key].shape[-1]
    if logits_key == "logits":  # [B*T, V] of inputs tokens[:, :T]
        tokens = tokens[:, :g["logits"].shape[0] // tokens.shape[0]]
    with torch.no_grad():
        got = forward(tokens, w, experts, args)[..., :vocab].reshape(-1, vocab)
    want = g[logits_key].reshape(-1, vocab).float()
    rel = ((got - want).abs().max() / want.abs().max()).item()
    print(f"{meg}: TP {tp} x EP {ep}, {len(experts)} expert MLPs over the layers; Megatron-core's forward on {tuple(tokens.shape)} tokens: "
          f"logits within {rel:.2e} (relative to the largest) of the golden's")
    assert rel <= 1e-5, f"{rel:.3e}"


if __name__ == "__main__":
    main()
