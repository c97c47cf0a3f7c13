#!/usr/bin/python3
"""The self-checks tools/make_moe_golden.py runs before writing (self_checks; its docstring lists them): the MoE
layer of tools/torch_moe.py against a per-token loop, float64 finite differences of the files' objectives, capacity
and norm_topk_prob, the parameter names, and one expert == the dense models. Moved out of tools/make_moe_golden.py
unchanged; the models and cases are tools/moe_golden_models.py's.
"""
import dataclasses

import torch

from moe_golden_models import CASES, GPT2_TINY, LLAMA_TINY, build, expected_names, make_tokens, routing_margins
import torch_llama as tl
import torch_moe as tm


# ----------------------------------------------------------------------------
# the reference checks itself


def check_layer_against_naive(gen):
    """moe_forward vs moe_forward_naive (float64): outputs, aux, z, counts, dropped, kept, and gradients."""
    C, B, T, E = 16, 2, 12, 4
    settings = [
        tm.MoEConfig(4, 2, 0.0, "position", False),
        tm.MoEConfig(4, 2, 0.0, "position", True),
        tm.MoEConfig(4, 2, 1.0, "position", False),
        tm.MoEConfig(4, 2, 1.0, "probs", True),
        tm.MoEConfig(4, 1, 1.5, "probs", False),
        tm.MoEConfig(4, 3, 0.5, "position", True),
    ]
    n_checked = n_dropped = 0
    for kind in ("gpt2", "mixtral"):
        for moe in settings:
            for ties in (False, True):
                if kind == "gpt2":
                    experts = torch.nn.ModuleList([tm.GPT2Expert(dict(n_embd=C, activation="gelu_new"))
                                                   for _ in range(E)]).double()
                else:
                    experts = torch.nn.ModuleList([tm.MixtralExpert(C, 24) for _ in range(E)]).double()
                with torch.no_grad():
                    for p in experts.parameters():
                        p.copy_(0.3 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
                x = torch.randn(B * T, C, generator=gen, dtype=torch.float64)
                Wr = 0.6 * torch.randn(E, C, generator=gen, dtype=torch.float64)
                if ties:
                    Wr[2] = Wr[1]              # experts 1 and 2: equal probabilities for every token
                    x[5] = x[2]                # tokens 2 and 5 (and 14, 17 of sequence 1): equal p[t, e]
                    x[T + 5] = x[T + 2]
                x.requires_grad_(True)
                Wr.requires_grad_(True)
                y, st = tm.moe_forward(x, Wr, experts, moe, B, T)
                yn, auxn, zn, cn, dn, keptn = tm.moe_forward_naive(x, Wr, list(experts), moe, B, T)
                assert torch.allclose(y, yn, rtol=1e-12, atol=1e-13), (kind, moe, ties, (y - yn).abs().max())
                assert abs(st["aux"].item() - auxn.item()) < 1e-12 and abs(st["z"].item() - zn.item()) < 1e-12
                assert st["tokens_per_expert"].tolist() == cn and st["dropped"] == dn
                assert st["kept"].tolist() == keptn, (kind, moe, ties)
                if ties:   # the lower index wins a tie: expert 2 never precedes expert 1
                    ex = st["experts"].tolist()
                    assert all(not (1 in r and 2 in r and r.index(2) < r.index(1)) for r in ex)
                    assert all(not (2 in r and 1 not in r) for r in ex), "expert 2 chosen without its twin 1"
                # gradients of one scalar through both implementations
                R = torch.randn(B * T, C, generator=gen, dtype=torch.float64)
                params = [x, Wr] + list(experts.parameters())
                g1 = torch.autograd.grad((y * R).sum() + 0.7 * st["aux"] + 0.3 * st["z"], params, allow_unused=True)
                g2 = torch.autograd.grad((yn * R).sum() + 0.7 * auxn + 0.3 * zn, params, allow_unused=True)
                for p, a, b in zip(params, g1, g2):   # None: an expert that no kept assignment reaches
                    a = torch.zeros_like(p) if a is None else a
                    b = torch.zeros_like(p) if b is None else b
                    assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), (kind, moe, ties, (a - b).abs().max())
                n_checked += 1
                n_dropped += dn
    assert n_dropped > 0
    print(f"  self-check: moe_forward == the per-token loop in {n_checked} settings (GPT-2 and SwiGLU experts, "
          f"top-1/2/3, dropless / position / probs, exact ties), outputs, aux, z, counts, kept and gradients; "
          f"{n_dropped} drops among them")


def finite_differences(kind, moe, seed, probes, label):
    """Float64 central differences of the whole objective against autograd for the given (name, index), at
    the initial weights and batch of the golden file with this seed."""
    gen = torch.Generator().manual_seed(seed)
    model = build(kind, moe, gen).double()
    B, T = 2, 16
    V = GPT2_TINY["vocab_size"] if kind == "gpt2" else LLAMA_TINY["vocab_size"]
    toks = make_tokens(gen, B, T, V)
    inputs, targets = toks[:, :T], toks[:, 1:]

    def obj_of():
        _, ce, st = model(inputs, targets)
        return tm.objective(ce, st, moe), st

    obj, st0 = obj_of()
    obj.backward()
    lgap, _ = routing_margins(st0, moe, T)
    assert lgap > 1e-3, f"finite differences need routing margins: {lgap}"
    sd = dict(model.named_parameters())
    worst = 0.0
    h = 1e-5
    for name, idx in probes:
        p = sd[name]
        with torch.no_grad():
            old = p[idx].item()
            p[idx] = old + h
            lp, stp = obj_of()
            p[idx] = old - h
            lm, stm = obj_of()
            p[idx] = old
        for a, b in ((stp, st0), (stm, st0)):   # the routing is the same at the three points
            assert all(torch.equal(x["experts"], y["experts"]) and torch.equal(x["kept"], y["kept"])
                       for x, y in zip(a, b))
        assert p.grad is not None, f"{label}: no gradient reaches {name}"
        fd, an = (lp.item() - lm.item()) / (2 * h), p.grad[idx].item()
        err = abs(fd - an) / max(abs(an), 1e-8)
        worst = max(worst, err)
        assert abs(fd - an) <= 1e-8 + 1e-5 * abs(an), f"finite differences {label}: {name}{idx}: fd {fd} vs {an}"
        assert an != 0.0, f"{name}{idx}: zero gradient probes nothing"
    print(f"  self-check: finite differences (float64) of the objective, {label}: {len(probes)} probes, "
          f"worst rel err {worst:.1e}")


def self_checks():
    gen = torch.Generator().manual_seed(77)
    check_layer_against_naive(gen)

    gpt2_probes = [("h.0.mlp.router.weight", (1, 5)), ("h.0.mlp.router.weight", (3, 40)),
                   ("h.1.mlp.router.weight", (0, 63)), ("h.1.mlp.router.weight", (2, 17)),
                   ("h.0.mlp.experts.1.c_fc.weight", (3, 7)), ("h.0.mlp.experts.2.c_proj.bias", (9,)),
                   ("h.1.mlp.experts.0.c_proj.weight", (100, 20)), ("h.1.mlp.experts.3.c_fc.bias", (200,)),
                   ("h.0.ln_2.weight", (11,)), ("h.1.attn.c_attn.weight", (30, 150)), ("wte.weight", (5, 33))]
    gpt2_cap_probes = [p for p in gpt2_probes if not p[0].startswith("h.1.mlp")] + \
        [("h.1.mlp.c_fc.weight", (4, 100)), ("h.1.mlp.c_proj.bias", (3,))]
    mix_probes = [("model.layers.0.block_sparse_moe.gate.weight", (1, 5)),
                  ("model.layers.0.block_sparse_moe.gate.weight", (3, 40)),
                  ("model.layers.1.block_sparse_moe.gate.weight", (2, 63)),
                  ("model.layers.0.block_sparse_moe.experts.2.w1.weight", (50, 3)),
                  ("model.layers.1.block_sparse_moe.experts.1.w2.weight", (12, 90)),
                  ("model.layers.1.block_sparse_moe.experts.3.w3.weight", (7, 60)),
                  ("model.layers.0.post_attention_layernorm.weight", (19,)),
                  ("model.layers.1.self_attn.q_proj.weight", (8, 9)), ("lm_head.weight", (4, 4))]
    for name, (kind, moe, seed, _) in CASES.items():
        probes = gpt2_cap_probes if name == "gpt2_moe_tiny_cap" else gpt2_probes if kind == "gpt2" else mix_probes
        finite_differences(kind, moe, seed, probes, name)
        # the router terms amplified, so that a wrong aux or z gradient cannot hide under the CE's
        loud = dataclasses.replace(moe, aux_loss_factor=0.5, z_loss_factor=0.1)
        finite_differences(kind, loud, seed, [p for p in probes if "router" in p[0] or "gate.weight" in p[0]],
                           name + " with aux 0.5, z 0.1")

    # capacity_factor huge == dropless; norm_topk_prob weights sum to 1.
    for name, (kind, moe, _, _) in CASES.items():
        if moe.capacity_factor <= 0:
            continue
        seed = int(torch.randint(0, 2**31, (1,), generator=gen))
        a = build(kind, moe, torch.Generator().manual_seed(seed))
        huge = dataclasses.replace(moe, capacity_factor=1e6)
        free = dataclasses.replace(moe, capacity_factor=0.0)
        V = GPT2_TINY["vocab_size"] if kind == "gpt2" else LLAMA_TINY["vocab_size"]
        toks = make_tokens(gen, 2, 16, V)
        results = []
        for m in (huge, free):
            model = build(kind, m)
            model.load_state_dict(a.state_dict())
            _, ce, st = model(toks[:, :16], toks[:, 1:])
            obj = tm.objective(ce, st, m)
            obj.backward()
            assert all(s["dropped"] == 0 for s in st)
            results.append((obj.item(), [p.grad.clone() for p in model.parameters()]))
        assert results[0][0] == results[1][0] and all(torch.equal(x, y) for x, y in zip(results[0][1], results[1][1]))
        _, _, st = a(toks[:, :16], toks[:, 1:])
        assert sum(s["dropped"] for s in st) > 0, "capacity 1.0 should drop here"
    print("  self-check: capacity_factor 1e6 gives the dropless objective and gradients bit for bit")
    x = torch.randn(64, 8, generator=gen)
    experts = torch.nn.ModuleList([tm.MixtralExpert(8, 4) for _ in range(4)])
    for norm in (True, False):
        moe = tm.MoEConfig(4, 2, 0.0, "position", norm)
        _, st = tm.moe_forward(x, torch.randn(4, 8, generator=gen), experts, moe, 4, 16)
        if norm:
            assert torch.allclose(st["weights"].sum(-1), torch.ones(64), atol=1e-6)
        else:
            assert (st["weights"].sum(-1) < 1).all()
    print("  self-check: norm_topk_prob weights sum to 1 (and without it to less than 1)")
    for name, (kind, moe, _, _) in CASES.items():
        m = build(kind, moe)
        assert {n: list(p.shape) for n, p in m.named_parameters()} == expected_names(kind, moe), name
    print("  self-check: parameter names and shapes are the brief's table")
    check_one_expert_is_the_dense_model(gen)


def check_one_expert_is_the_dense_model(gen):
    """With one expert (top-1, p = 1) the MoE models are the dense references of the existing golden files:
    make_golden.py's GPT2 and torch_llama.py's LlamaForCausalLM, the expert's weights as the MLP's."""
    import make_golden
    one = tm.MoEConfig(num_experts=1, top_k=1, capacity_factor=0.0, norm_topk_prob=False)
    toks = make_tokens(gen, 2, 16, 96)
    for kind in ("gpt2", "mixtral"):
        moe_model = build(kind, one, gen).double()
        if kind == "gpt2":
            dense = make_golden.GPT2(GPT2_TINY).double()
            rename = {".mlp.c_fc.": ".mlp.experts.0.c_fc.", ".mlp.c_proj.": ".mlp.experts.0.c_proj."}
        else:
            dense = tl.LlamaForCausalLM(tl.LlamaConfig(**LLAMA_TINY)).double()
            x = ".block_sparse_moe.experts.0."
            rename = {".mlp.gate_proj.": x + "w1.", ".mlp.up_proj.": x + "w3.", ".mlp.down_proj.": x + "w2."}
        src = dict(moe_model.named_parameters())
        with torch.no_grad():
            for n, p in dense.named_parameters():
                for a, b in rename.items():
                    n = n.replace(a, b)
                p.copy_(src[n])
        lm, _, st = moe_model(toks[:, :16], toks[:, 1:])
        ld = dense(toks[:, :16], toks[:, 1:])[0]
        assert torch.allclose(lm, ld, rtol=0, atol=1e-12), (kind, (lm - ld).abs().max())
        assert all(abs(s["aux"].item() - 1.0) < 1e-12 for s in st)
    print("  self-check: with one expert, GPT-2 MoE == make_golden.py's GPT2 and Mixtral == torch_llama's Llama")
