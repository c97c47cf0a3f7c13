#!/usr/bin/python3
"""The models of tools/make_moe_golden.py: the tiny GPT-2 and Llama sizes, the optimizer and schedule (HP), the MoE
settings and the cases (CASES: kind, MoE settings, seed, max_norm), the routing-margin bounds, the initialisation
(INIT_GPT2, INIT_MIXTRAL, init_gpt2_, init_mixtral_), build, make_tokens, the expected parameter names and shapes,
and the routing margins of a forward. Moved out of tools/make_moe_golden.py unchanged (its docstring describes the
layer and the files); imported by it and by tools/moe_golden_checks.py (the self-checks).
"""
import dataclasses

import torch

import torch_llama as tl
import torch_moe as tm


GPT2_TINY = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=96, n_positions=32, activation="gelu_new",
                 layer_norm_epsilon=1e-5)
LLAMA_TINY = dict(vocab_size=96, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=96,
                  rope_theta=1e6, rms_norm_eps=1e-5, max_position_embeddings=32)
HP = dict(B=2, T=16, learning_rate=1e-3, lr_end=1e-4, warmup_steps=3, total_steps=10, beta1=0.9, beta2=0.95,
          adam_eps=1e-8, weight_decay=0.1, lr_schedule="cosine")

GPT2_MOE = tm.MoEConfig(num_experts=4, top_k=2, capacity_factor=0.0, token_drop_policy="position",
                        norm_topk_prob=False, aux_loss_factor=0.05, z_loss_factor=1e-3, moe_layer_freq=1)
MIXTRAL_MOE = tm.MoEConfig(num_experts=4, top_k=2, capacity_factor=0.0, token_drop_policy="position",
                           norm_topk_prob=True, aux_loss_factor=0.02, z_loss_factor=0.0, moe_layer_freq=1)

# name -> (model kind, MoE settings, seed, max_norm). The seeds are the fit ones with the widest routing
# margins that `--search CASE 3000 30` printed (fit: problems() finds nothing: margins, drops, every
# expert reached, clipping on some steps but not all).
CASES = {
    "gpt2_moe_tiny": ("gpt2", GPT2_MOE, 3020, 2.3),
    "gpt2_moe_tiny_cap": ("gpt2", dataclasses.replace(GPT2_MOE, capacity_factor=1.0, moe_layer_freq=2), 3025, 2.3),
    "mixtral_tiny": ("mixtral", MIXTRAL_MOE, 3001, 2.3),
    "mixtral_tiny_cap": ("mixtral", dataclasses.replace(MIXTRAL_MOE, capacity_factor=1.0, token_drop_policy="probs"),
                         3009, 2.3),
}
# The router's init: logits of a few units' spread, so that the routing is far from uniform (drops
# happen, margins are wide).
ROUTER_STD = 0.3
# Routing decisions must not depend on float32 rounding: the k-th and (k+1)-th router logits of every
# token differ by at least this much, and under "probs" the probabilities at each capacity boundary
# differ by at least this much relative to the larger one (every step).
MIN_LOGIT_GAP = 2e-3
MIN_PROB_GAP = 2e-3

INIT_GPT2 = ("make_golden.py's in named_parameters() order from one generator: LN weights 1 + N(0, 0.1), LN biases "
             f"N(0, 0.02), wpe N(0, 0.01), router weights N(0, {ROUTER_STD}), every other weight and bias N(0, 0.02)")
INIT_MIXTRAL = ("make_llama_golden.py's in named_parameters() order from one generator: RMSNorm weights 1 + N(0, 0.1); "
                f"q_proj and k_proj N(0, 0.08); block_sparse_moe.gate N(0, {ROUTER_STD}); "
                "every other weight N(0, 0.02)")


def init_gpt2_(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if ".ln_" in "." + name:
                p.copy_(1.0 + 0.1 * noise if name.endswith("weight") else 0.02 * noise)
            elif name == "wpe.weight":
                p.copy_(0.01 * noise)
            elif name.endswith("mlp.router.weight"):
                p.copy_(ROUTER_STD * noise)
            else:
                p.copy_(0.02 * noise)


def init_mixtral_(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(0.08 * noise)
            elif name.endswith("block_sparse_moe.gate.weight"):
                p.copy_(ROUTER_STD * noise)
            else:
                p.copy_(0.02 * noise)


def build(kind, moe, gen=None):
    if kind == "gpt2":
        model = tm.GPT2MoE(GPT2_TINY, moe)
        init = init_gpt2_
    else:
        model = tm.MixtralForCausalLM(tl.LlamaConfig(**LLAMA_TINY), moe)
        init = init_mixtral_
    if gen is not None:
        init(model, gen)
    return model


def make_tokens(gen, B, T, V):
    tokens = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    tokens[0, 3], tokens[1, 7], tokens[1, 12] = 0, V - 1, V - 1
    tokens[0, 9] = 0
    return tokens


def expected_names(kind, moe):
    """The parameter names and global shapes gridformer declares (the brief's table)."""
    names = {}
    E = moe.num_experts
    if kind == "gpt2":
        C, V, L, P = GPT2_TINY["n_embd"], GPT2_TINY["vocab_size"], GPT2_TINY["n_layer"], GPT2_TINY["n_positions"]
        names.update({"wte.weight": [V, C], "wpe.weight": [P, C], "ln_f.weight": [C], "ln_f.bias": [C]})
        for i in range(L):
            h = f"h.{i}."
            names.update({h + "ln_1.weight": [C], h + "ln_1.bias": [C], h + "ln_2.weight": [C], h + "ln_2.bias": [C],
                          h + "attn.c_attn.weight": [C, 3 * C], h + "attn.c_attn.bias": [3 * C],
                          h + "attn.c_proj.weight": [C, C], h + "attn.c_proj.bias": [C]})
            if moe.is_moe_layer(i):
                names[h + "mlp.router.weight"] = [E, C]
                for e in range(E):
                    x = f"{h}mlp.experts.{e}."
                    names.update({x + "c_fc.weight": [C, 4 * C], x + "c_fc.bias": [4 * C],
                                  x + "c_proj.weight": [4 * C, C], x + "c_proj.bias": [C]})
            else:
                names.update({h + "mlp.c_fc.weight": [C, 4 * C], h + "mlp.c_fc.bias": [4 * C],
                              h + "mlp.c_proj.weight": [4 * C, C], h + "mlp.c_proj.bias": [C]})
        return names
    C, V, L, Fi = LLAMA_TINY["hidden_size"], LLAMA_TINY["vocab_size"], LLAMA_TINY["num_layers"], \
        LLAMA_TINY["intermediate_size"]
    D = C // LLAMA_TINY["num_heads"]
    KV = LLAMA_TINY["num_kv_heads"]
    names.update({"model.embed_tokens.weight": [V, C], "model.norm.weight": [C], "lm_head.weight": [V, C]})
    for i in range(L):
        h = f"model.layers.{i}."
        names.update({h + "input_layernorm.weight": [C], h + "post_attention_layernorm.weight": [C],
                      h + "self_attn.q_proj.weight": [C, C], h + "self_attn.k_proj.weight": [KV * D, C],
                      h + "self_attn.v_proj.weight": [KV * D, C], h + "self_attn.o_proj.weight": [C, C]})
        if moe.is_moe_layer(i):
            names[h + "block_sparse_moe.gate.weight"] = [E, C]
            for e in range(E):
                x = f"{h}block_sparse_moe.experts.{e}."
                names.update({x + "w1.weight": [Fi, C], x + "w3.weight": [Fi, C], x + "w2.weight": [C, Fi]})
        else:
            names.update({h + "mlp.gate_proj.weight": [Fi, C], h + "mlp.up_proj.weight": [Fi, C],
                          h + "mlp.down_proj.weight": [C, Fi]})
    return names


def routing_margins(stats, moe, T):
    """(min top-k logit gap, min relative prob gap at a "probs" capacity boundary (inf if none)) of one forward."""
    k, E = moe.top_k, moe.num_experts
    logit_gap, prob_gap = float("inf"), float("inf")
    for s in stats:
        lg = torch.sort(s["logits"].detach().double(), dim=-1, descending=True).values
        if k < E:
            logit_gap = min(logit_gap, (lg[:, k - 1] - lg[:, k]).min().item())
        if moe.capacity_factor > 0 and moe.token_drop_policy == "probs":
            cap = moe.capacity(T)
            p, ex = s["probs"].detach().double(), s["experts"]
            B = p.shape[0] // T
            for b in range(B):
                for e in range(E):
                    rows = torch.nonzero((ex[b * T:(b + 1) * T] == e).any(-1), as_tuple=True)[0]
                    if rows.numel() > cap:
                        v = torch.sort(p[b * T + rows, e], descending=True).values
                        prob_gap = min(prob_gap, ((v[cap - 1] - v[cap]) / v[cap - 1]).item())
    return logit_gap, prob_gap
