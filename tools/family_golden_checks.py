#!/usr/bin/python3
"""The self-checks tools/make_family_golden.py runs before writing (self_checks; its docstring lists them): the
references of tools/torch_hf_families.py and tools/torch_hf_gemma3.py against finite differences in float64, against
tools/torch_llama.py, against per-token loops and independent transcriptions. Moved out of
tools/make_family_golden.py unchanged; the variants' configs and initialisation are tools/family_golden_configs.py's.
"""
import torch

from family_golden_configs import (C, CONFIGS, E, FF, FF_MOE, FF_SHARED, H, KV, L, MOE_VARIANTS, P, V, build_model,
                                   init_golden_, rope_bands)
import torch_hf_families as hf
import torch_hf_gemma3 as g3
import torch_llama as tl


# ----------------------------------------------------------------------------
# the references check themselves


def tiny_cfg(family, **over):
    """A config dict: CONFIGS[family] with `over` applied."""
    return dict(CONFIGS[family], **over)


def _fd_picks(inputs, targets):
    """The elements _fd_check perturbs, each where the variant has it (attention, routers, experts, shared expert
    and its gate, dense MLPs, norms, embeddings, lm_head)."""
    return [("model.layers.0.self_attn.q_proj.weight", (5, 7)), ("model.layers.1.self_attn.k_proj.weight", (20, 3)),
            ("model.layers.0.self_attn.v_proj.weight", (11, 60)), ("model.layers.1.self_attn.o_proj.weight", (2, 40)),
            ("model.layers.0.self_attn.q_proj.bias", (9,)), ("model.layers.1.self_attn.k_proj.bias", (21,)),
            ("model.layers.0.self_attn.v_proj.bias", (4,)),
            ("model.layers.0.self_attn.q_norm.weight", (13,)), ("model.layers.1.self_attn.k_norm.weight", (30,)),
            # routers, experts, the shared expert and its gate
            ("model.layers.0.mlp.gate.weight", (1, 10)), ("model.layers.0.mlp.gate.weight", (3, 50)),
            ("model.layers.1.mlp.gate.weight", (0, 33)), ("model.layers.2.mlp.gate.weight", (2, 5)),
            ("model.layers.0.mlp.experts.0.gate_proj.weight", (7, 12)),
            ("model.layers.0.mlp.experts.1.up_proj.weight", (30, 63)),
            ("model.layers.0.mlp.experts.3.down_proj.weight", (40, 9)),
            ("model.layers.1.mlp.experts.2.gate_proj.weight", (1, 2)),
            ("model.layers.2.mlp.experts.1.down_proj.weight", (8, 31)),
            ("model.layers.0.mlp.shared_expert.gate_proj.weight", (47, 3)),
            ("model.layers.1.mlp.shared_expert.down_proj.weight", (5, 20)),
            ("model.layers.0.mlp.shared_expert_gate.weight", (0, 17)),
            ("model.layers.2.mlp.shared_expert_gate.weight", (0, 60)),
            # dense MLPs, norms, embeddings, head
            ("model.layers.0.mlp.gate_proj.weight", (90, 11)), ("model.layers.1.mlp.gate_proj.weight", (90, 11)),
            ("model.layers.1.mlp.down_proj.weight", (63, 95)), ("model.layers.0.input_layernorm.weight", (17,)),
            ("model.layers.0.post_attention_layernorm.weight", (3,)),
            ("model.layers.1.post_attention_layernorm.weight", (3,)),
            ("model.norm.weight", (42,)), ("model.embed_tokens.weight", (int(inputs[1, 2]), 30)),
            ("model.embed_tokens.weight", (int(targets[0, 0]), 8)), ("lm_head.weight", (int(targets[0, 0]), 8)),
            # gemma3's own: the norms around the MLP, the full layer's q/k norms, the last (sliding) layer
            ("model.layers.0.pre_feedforward_layernorm.weight", (5,)),
            ("model.layers.1.post_feedforward_layernorm.weight", (70,)),
            ("model.layers.2.self_attn.q_norm.weight", (3,)), ("model.layers.2.self_attn.k_norm.weight", (29,)),
            ("model.layers.3.self_attn.q_proj.weight", (100, 71)), ("model.layers.3.self_attn.v_proj.weight", (63, 0)),
            ("model.layers.3.mlp.up_proj.weight", (50, 20)), ("model.layers.3.post_attention_layernorm.weight", (66,))]


def _fd_check(variant, gen, loud_aux=False):
    """Finite differences in float64 on a tiny instance (T 9) of a variant; MoE: decisive routers, and no routing
    decision flipped by the perturbations. With loud_aux also output_router_logits true and router_aux_loss_coef
    0.5 (the balancing loss's gradient)."""
    over = dict(output_router_logits=True, router_aux_loss_coef=0.5) if loud_aux else {}
    model = build_model(tiny_cfg(variant, **over))
    init_golden_(model, gen)
    model = model.double()
    B, T = 2, 9
    toks = torch.randint(0, V, (B, T + 1), generator=gen)
    inputs, targets = toks[:, :T], toks[:, 1:]
    _, loss = model(inputs, targets)
    sparse = model.cfg.sparse_layers()                    # none in a dense model

    def selections():
        return [model.model.layers[i].mlp.last_routing[1].clone() for i in sparse]
    sel0 = selections()
    if loud_aux:
        ce = torch.nn.functional.cross_entropy(model(inputs)[0].reshape(-1, V), targets.reshape(-1))
        assert abs(loss.item() - (ce.item() + 0.5 * model.aux_loss().item())) < 1e-12
    loss.backward()
    sd = dict(model.named_parameters())
    worst, n = 0.0, 0
    for name, idx in _fd_picks(inputs, targets):
        if name not in sd:
            continue
        p, h = sd[name], 1e-5
        with torch.no_grad():
            old = p[idx].item()
            p[idx] = old + h
            lp = model(inputs, targets)[1].item()
            assert all(torch.equal(a, b) for a, b in zip(selections(), sel0)), f"{name}{idx}: +h changes the routing"
            p[idx] = old - h
            lm = model(inputs, targets)[1].item()
            assert all(torch.equal(a, b) for a, b in zip(selections(), sel0)), f"{name}{idx}: -h changes the routing"
            p[idx] = old
        fd, an = (lp - lm) / (2 * h), (0.0 if p.grad is None else p.grad[idx].item())   # None: an unpicked expert
        worst = max(worst, abs(fd - an) / max(abs(an), 1e-8))
        n += 1
        assert abs(fd - an) <= 1e-7 + 1e-5 * abs(an), f"{variant}: finite differences {name}{idx}: fd {fd} vs {an}"
    print(f"  self-check {variant}{' (output_router_logits, aux coef 0.5)' if loud_aux else ''}: finite differences "
          f"(float64) agree with autograd on {n} elements, worst rel err {worst:.1e}")


def _same_model(model, ref, toks, pairs, label):
    """model and ref on toks [2, 33] (T 32): the logits and, after backward, the gradients of each (model's, ref's)
    parameter pair agree to 1e-6 (printed: bitwise or not)."""
    out, loss = model(toks[:, :32], toks[:, 1:])
    rout, rloss = ref(toks[:, :32], toks[:, 1:])
    loss.backward()
    rloss.backward()
    err = (out - rout).abs().max().item()
    gerr = max((a.grad - b.grad).abs().max().item() for a, b in pairs)
    assert err <= 1e-6 and gerr <= 1e-6, (label, err, gerr)
    print(f"  self-check {label}: max |logits diff| {err:.1e}{' (bitwise)' if err == 0 else ''}, "
          f"max |grad diff| {gerr:.1e}")


def _llama_equals_torch_llama(gen):
    """head_dim = hidden/heads, no rope_scaling: the same model as tools/torch_llama.py, bit for bit."""
    for tied in (True, False):
        d = tiny_cfg("llama", rope_scaling=None, rope_theta=1e6, rms_norm_eps=1e-5, tie_word_embeddings=tied)
        del d["head_dim"]
        fam = hf.FamilyForCausalLM(d)
        ref = tl.LlamaForCausalLM(tl.LlamaConfig(vocab_size=V, hidden_size=C, num_layers=L, num_heads=H,
                                                 num_kv_heads=KV, intermediate_size=FF, rope_theta=1e6,
                                                 rms_norm_eps=1e-5, tie_word_embeddings=tied,
                                                 max_position_embeddings=P))
        init_golden_(ref, gen)
        assert [n for n, _ in fam.named_parameters()] == [n for n, _ in ref.named_parameters()]
        fam.load_state_dict(ref.state_dict())
        toks = torch.randint(0, V, (2, 33), generator=gen)
        _same_model(fam, ref, toks, list(zip(fam.parameters(), ref.parameters())),
                    f"llama (head_dim = hidden/heads, default RoPE, tied={tied}) == tools/torch_llama.py")

    # qwen2 with its q/k/v biases zero is that Llama too.
    q2 = hf.FamilyForCausalLM(tiny_cfg("qwen2", rms_norm_eps=1e-5))
    ll = hf.FamilyForCausalLM(tiny_cfg("llama", rope_scaling=None, rope_theta=1e6, rms_norm_eps=1e-5, head_dim=None))
    init_golden_(ll, gen)
    sd = ll.state_dict()
    with torch.no_grad():
        for name, p in q2.named_parameters():
            p.copy_(sd[name] if name in sd else torch.zeros_like(p))
    toks = torch.randint(0, V, (2, 32), generator=gen)
    assert torch.equal(q2(toks)[0], ll(toks)[0]), "qwen2 with zero biases is not the Llama"
    print("  self-check qwen2 with zero q/k/v biases == the llama family (bitwise)")


def _qwen3_qk_norm(gen):
    """Weights 1, eps 0: q_norm(q) = q / rms(q) per head, and the model no longer sees q_proj's / k_proj's scale."""
    d = tiny_cfg("qwen3", rms_norm_eps=0.0)
    model = hf.FamilyForCausalLM(d).double()
    init_golden_(model, gen)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                p.fill_(1.0)
    attn = model.model.layers[0].self_attn
    x = torch.randn(2, 5, C, generator=gen, dtype=torch.float64)
    q = attn.q_proj(x).view(2, 5, H, -1)
    want = q / q.pow(2).mean(-1, keepdim=True).sqrt()
    got = attn.q_norm(q)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert torch.allclose(got.pow(2).mean(-1), torch.ones(2, 5, H, dtype=torch.float64), atol=1e-12)
    toks = torch.randint(0, V, (2, 32), generator=gen)
    base = model(toks)[0]
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(3.0)
            layer.self_attn.k_proj.weight.mul_(0.25)
    scaled = model(toks)[0]
    assert torch.allclose(base, scaled, rtol=0, atol=1e-10), (base - scaled).abs().max()
    print("  self-check qwen3: q_norm/k_norm (weights 1, eps 0) = q / rms(q) per head; logits invariant to "
          "scaling q_proj by 3 and k_proj by 1/4")


def _rope_checks():
    # tools/hf_rope_reference.py's llama3 frequencies == an independent transcription, bit for bit.
    cfg = CONFIGS["llama"]
    inv, sc = hf.rope_parameters(hf.FamilyConfig.from_hf(cfg))
    mine, _ = hf.llama3_inv_freq_transcribed(cfg, cfg["head_dim"])
    assert torch.equal(inv, mine) and sc == 1.0, (inv, mine, sc)
    hi, mid, lo = rope_bands(cfg, cfg["head_dim"])
    assert hi and mid and lo, (hi, mid, lo)
    base = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, 32, 2, dtype=torch.int64).float() / 32))
    assert torch.equal(inv[hi], base[hi]) and torch.equal(inv[lo], base[lo] / 4.0)
    assert all(base[i] / 4 < inv[i] < base[i] for i in mid)
    print(f"  self-check llama3 inv_freq (hf_rope_reference == own transcription): unchanged {hi}, smoothed {mid}, "
          f"/factor {lo}; inv_freq[:3] = {[f'{v:.9g}' for v in inv[:3].tolist()]}")
    # The model's cos/sin == hf_rope_reference.cos_sin (HF's matmul form), positions 0..63.
    pos = torch.arange(P)
    cos, sin = hf.rope_cos_sin(inv, sc, pos)
    rcos, rsin = hf.hf_rope_reference.cos_sin(inv, sc, pos)
    assert torch.equal(cos, rcos) and torch.equal(sin, rsin)
    # default RoPE for qwen2 (head_dim 16) and qwen3 (head_dim 32).
    for fam in ("qwen2", "qwen3"):
        c = hf.FamilyConfig.from_hf(CONFIGS[fam])
        inv, sc = hf.rope_parameters(c)
        d = c.head_dim
        want = 1.0 / (float(CONFIGS[fam]["rope_theta"]) ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        assert torch.equal(inv, want) and sc == 1.0, fam
    print("  self-check qwen2/qwen3: default inv_freq = 1/theta**(arange(0, head_dim, 2)/head_dim) over head_dim")


def _shape_checks():
    for fam, (dq, dkv) in {"llama": (128, 64), "qwen2": (64, 32), "qwen3": (128, 64)}.items():
        sd = dict(hf.FamilyForCausalLM(CONFIGS[fam]).named_parameters())
        assert sd["model.layers.0.self_attn.q_proj.weight"].shape == (dq, C)
        assert sd["model.layers.0.self_attn.k_proj.weight"].shape == (dkv, C)
        assert sd["model.layers.0.self_attn.o_proj.weight"].shape == (C, dq)
        assert "lm_head.weight" not in sd
        assert ("model.layers.0.self_attn.q_proj.bias" in sd) == (fam == "qwen2")
        assert "model.layers.0.self_attn.o_proj.bias" not in sd
        assert ("model.layers.0.self_attn.q_norm.weight" in sd) == (fam == "qwen3")
        if fam == "qwen3":
            assert sd["model.layers.0.self_attn.q_norm.weight"].shape == (32,)
            assert sd["model.layers.0.self_attn.k_norm.weight"].shape == (32,)


# ---- the mixtures of experts


def _moe_shape_checks():
    # The dense/sparse layer rule (an independent statement of Qwen2MoeDecoderLayer's condition).
    cases = [(dict(num_experts=4, decoder_sparse_step=1, mlp_only_layers=[]), 4, [0, 1, 2, 3]),
             (dict(num_experts=4, decoder_sparse_step=2, mlp_only_layers=[]), 4, [1, 3]),
             (dict(num_experts=4, decoder_sparse_step=1, mlp_only_layers=[0, 3]), 4, [1, 2]),
             (dict(num_experts=4, decoder_sparse_step=3, mlp_only_layers=[5]), 6, [2]),
             (dict(num_experts=0, decoder_sparse_step=1, mlp_only_layers=[]), 3, []),
             (dict(num_experts=4, decoder_sparse_step=1, mlp_only_layers=[1]), 3, [0, 2])]
    for fam in hf.MOE_FAMILIES:
        for over, layers, want in cases:
            d = tiny_cfg(fam, num_hidden_layers=layers, **over)
            if d["num_experts"] == 0:
                d["num_experts_per_tok"] = 0
            cfg = hf.FamilyConfig.from_hf(d)
            assert cfg.sparse_layers() == want, (fam, over, cfg.sparse_layers())
            sd = dict(hf.FamilyForCausalLM(d).named_parameters())
            for i in range(layers):
                assert (f"model.layers.{i}.mlp.gate.weight" in sd) == (i in want), (fam, over, i)
                assert (f"model.layers.{i}.mlp.gate_proj.weight" in sd) == (i not in want), (fam, over, i)
    # Names, order and shapes of a sparse layer (HF's registration order).
    for variant in MOE_VARIANTS:
        d = CONFIGS[variant]
        cfg = hf.FamilyConfig.from_hf(d)
        names = [(n, tuple(p.shape)) for n, p in hf.FamilyForCausalLM(d).named_parameters()]
        D = cfg.head_dim
        want = [("model.embed_tokens.weight", (V, C))]
        for i in range(cfg.num_hidden_layers):
            pre = f"model.layers.{i}."
            want += [(pre + "self_attn.q_proj.weight", (H * D, C))]
            want += [(pre + "self_attn.q_proj.bias", (H * D,))] if cfg.qkv_bias else []
            want += [(pre + "self_attn.k_proj.weight", (KV * D, C))]
            want += [(pre + "self_attn.k_proj.bias", (KV * D,))] if cfg.qkv_bias else []
            want += [(pre + "self_attn.v_proj.weight", (KV * D, C))]
            want += [(pre + "self_attn.v_proj.bias", (KV * D,))] if cfg.qkv_bias else []
            want += [(pre + "self_attn.o_proj.weight", (C, H * D))]
            if cfg.qk_norm:
                want += [(pre + "self_attn.q_norm.weight", (D,)), (pre + "self_attn.k_norm.weight", (D,))]
            if cfg.is_sparse(i):
                want += [(pre + "mlp.gate.weight", (E, C))]
                for e in range(E):
                    want += [(pre + f"mlp.experts.{e}.gate_proj.weight", (FF_MOE, C)),
                             (pre + f"mlp.experts.{e}.up_proj.weight", (FF_MOE, C)),
                             (pre + f"mlp.experts.{e}.down_proj.weight", (C, FF_MOE))]
                if d["model_type"] == "qwen2_moe":
                    want += [(pre + "mlp.shared_expert.gate_proj.weight", (FF_SHARED, C)),
                             (pre + "mlp.shared_expert.up_proj.weight", (FF_SHARED, C)),
                             (pre + "mlp.shared_expert.down_proj.weight", (C, FF_SHARED)),
                             (pre + "mlp.shared_expert_gate.weight", (1, C))]
            else:
                want += [(pre + "mlp.gate_proj.weight", (FF, C)), (pre + "mlp.up_proj.weight", (FF, C)),
                         (pre + "mlp.down_proj.weight", (C, FF))]
            want += [(pre + "input_layernorm.weight", (C,)), (pre + "post_attention_layernorm.weight", (C,))]
        want += [("model.norm.weight", (C,)), ("lm_head.weight", (V, C))]
        assert names == want, (variant, [a for a, b in zip(names, want) if a != b][:3])
    print("  self-check MoE: the dense/sparse layer rule on 6 configs x 2 families; HF's parameter names, order "
          "and shapes for " + ", ".join(MOE_VARIANTS))


def _naive_moe(block, x2, k, norm, shared):
    """Per-token loop (float64): p = softmax(x W_g^T); the k largest p (stable descending sort); weights p (or
    renormalised); y = sum_j w_j expert_{e_j}(x) (+ sigmoid(g . x) * shared(x))."""
    rows = []
    for t in range(x2.shape[0]):
        xt = x2[t:t + 1]
        p = torch.softmax(xt @ block.gate.weight.T, -1)[0]
        order = sorted(range(p.shape[0]), key=lambda e: -p[e].item())[:k]
        w = torch.stack([p[e] for e in order])
        if norm:
            w = w / w.sum()
        y = sum(w[j] * block.experts[e](xt)[0] for j, e in enumerate(order))
        if shared:
            y = y + torch.sigmoid(xt @ block.shared_expert_gate.weight.T)[0] * block.shared_expert(xt)[0]
        rows.append(y)
    return torch.stack(rows)


def _moe_block_vs_naive(gen):
    n = 0
    for fam in hf.MOE_FAMILIES:
        for k in (1, 2, 3):
            for norm in (False, True):
                cfg = hf.FamilyConfig.from_hf(tiny_cfg(fam, num_experts_per_tok=k, norm_topk_prob=norm))
                block = hf.FamilySparseMoeBlock(cfg).double()
                shared = cfg.shared_expert_intermediate_size > 0
                assert shared == (fam == "qwen2_moe")
                with torch.no_grad():
                    for name, p in block.named_parameters():
                        std = 0.3 if name in ("gate.weight", "shared_expert_gate.weight") else 0.1
                        p.copy_(std * torch.randn(p.shape, generator=gen, dtype=torch.float64))
                x = torch.randn(2, 7, C, generator=gen, dtype=torch.float64, requires_grad=True)
                R = torch.randn(2, 7, C, generator=gen, dtype=torch.float64)
                y, rl = block(x)
                yn = _naive_moe(block, x.reshape(-1, C), k, norm, shared).reshape(2, 7, C)
                assert torch.allclose(rl, x.reshape(-1, C) @ block.gate.weight.T, rtol=0, atol=1e-13)
                err = (y - yn).abs().max().item()
                assert err < 1e-13, (fam, k, norm, err)
                params = [x] + list(block.parameters())
                g1 = torch.autograd.grad((y * R).sum(), params, allow_unused=True)
                g2 = torch.autograd.grad((yn * R).sum(), params, allow_unused=True)
                for a, b in zip(g1, g2):
                    if a is None and b is None:          # an expert no token picked
                        continue
                    a = torch.zeros_like(b) if a is None else a
                    b = torch.zeros_like(a) if b is None else b
                    assert (a - b).abs().max().item() < 1e-12, (fam, k, norm)
                # norm_topk_prob: the k weights sum to 1; else they are the raw top-k probabilities.
                w, sel = block.last_routing
                p = torch.softmax(rl, -1)
                if norm:
                    assert torch.allclose(w.sum(-1), torch.ones_like(w[:, 0]), rtol=0, atol=1e-14)
                else:
                    assert torch.equal(w, p.gather(1, sel))
                n += 1
    print(f"  self-check MoE block == a per-token loop ({n} cases: qwen2_moe with the shared expert, qwen3_moe "
          f"without; top-1/2/3; norm_topk_prob false/true): outputs, router logits and every gradient (float64)")


def _aux_vs_naive(gen):
    for k in (1, 2):
        layers = tuple(torch.randn(13, E, generator=gen, dtype=torch.float64).mul(2).requires_grad_() for _ in range(3))
        aux = hf.load_balancing_loss_func(layers, E, k)
        # explicit: f_e = #assignments to e / rows, P_e = mean prob, pooled over the layers
        Z = torch.cat(layers)
        P = torch.softmax(Z, -1)
        counts = [0] * E
        for r in range(Z.shape[0]):
            for e in sorted(range(E), key=lambda e: -P[r, e].item())[:k]:
                counts[e] += 1
        want = E * sum(counts[e] / Z.shape[0] * P[:, e].mean() for e in range(E))
        # HF's tokens_per_expert is mean(expert_mask.float()): float32 fractions even here (count / 39 rounded)
        assert abs(aux.item() - want.item()) < 1e-7, (aux.item(), want.item())
        g1 = torch.autograd.grad(aux, layers)
        g2 = torch.autograd.grad(want, layers)
        assert all((a - b).abs().max().item() < 1e-8 for a, b in zip(g1, g2))
        # not the sum (nor the mean) of the per-layer values
        per = [hf.load_balancing_loss_func((l,), E, k).item() for l in layers]
        assert abs(sum(per) / len(per) - aux.item()) > 1e-6 and abs(sum(per) - aux.item()) > 1e-6
    # Balanced routing (every expert chosen equally often, uniform mean probabilities) gives k.
    Z = torch.zeros(8, E, dtype=torch.float64)
    for r in range(8):
        Z[r, r % E] = 1.0
        Z[r, (r + 1) % E] = 0.5
    assert abs(hf.load_balancing_loss_func((Z,), E, 2).item() - 2.0) < 1e-12
    print("  self-check load_balancing_loss_func == E * sum_e f_e * P_e pooled over the layers' tokens (values and "
          "gradients, float64), != the sum or mean of per-layer values; balanced routing gives k")


def _moe_equals_dense(gen):
    """One expert, top-1 (weight softmax = 1), no shared expert (qwen2_moe: its down_proj zero): the MoE model is
    the dense family with mlp.experts.0.* as mlp.*. And qwen2_moe with every layer in mlp_only_layers is qwen2."""
    toks = torch.randint(0, V, (2, 33), generator=gen)
    for fam, dense in (("qwen3_moe", "qwen3"), ("qwen2_moe", "qwen2")):
        for norm in (False, True):
            d = tiny_cfg(dense, model_type=fam, architectures=CONFIGS[fam]["architectures"], num_experts=1,
                         num_experts_per_tok=1, moe_intermediate_size=FF, norm_topk_prob=norm, decoder_sparse_step=1,
                         mlp_only_layers=[], shared_expert_intermediate_size=FF_SHARED)
            m = hf.FamilyForCausalLM(d)
            ref = hf.FamilyForCausalLM(CONFIGS[dense])
            init_golden_(ref, gen)
            init_golden_(m, gen)
            rsd = ref.state_dict()
            mapped = {}
            with torch.no_grad():
                for name, p in m.named_parameters():
                    rn = name.replace(".mlp.experts.0.", ".mlp.")
                    if rn in rsd:
                        p.copy_(rsd[rn])
                        mapped[name] = rn
                    elif name.endswith("shared_expert.down_proj.weight"):
                        p.zero_()
            assert len(mapped) == len(rsd), (fam, len(mapped), len(rsd))
            rp = dict(ref.named_parameters())
            _same_model(m, ref, toks, [(p, rp[mapped[n]]) for n, p in m.named_parameters() if n in mapped],
                        f"{fam}, 1 expert, top-1, norm_topk_prob {norm}, no shared expert == {dense}")
    # qwen2_moe with mlp_only_layers = every layer: qwen2 itself (same names, bitwise).
    d = tiny_cfg("qwen2_moe", mlp_only_layers=[0, 1], tie_word_embeddings=True)
    m = hf.FamilyForCausalLM(d)
    ref = hf.FamilyForCausalLM(CONFIGS["qwen2"])
    init_golden_(ref, gen)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in ref.named_parameters()]
    m.load_state_dict(ref.state_dict())
    assert torch.equal(m(toks[:, :32])[0], ref(toks[:, :32])[0]) and m.router_logits == ()
    assert m.aux_loss() == 0
    print("  self-check qwen2_moe with every layer in mlp_only_layers == qwen2 (bitwise), no router logits")


def self_checks():
    gen = torch.Generator().manual_seed(99)
    _shape_checks()
    for fam in hf.DENSE_FAMILIES:
        _fd_check(fam, gen)
    _llama_equals_torch_llama(gen)
    _qwen3_qk_norm(gen)
    _rope_checks()
    # the mixtures of experts (after the dense checks: their generator draws are unchanged)
    _moe_shape_checks()
    _moe_block_vs_naive(gen)
    _aux_vs_naive(gen)
    for variant in MOE_VARIANTS:
        _fd_check(variant, gen)
    _fd_check("qwen2_moe_mixed", gen, loud_aux=True)
    _fd_check("qwen3_moe", gen, loud_aux=True)
    _moe_equals_dense(gen)
    # gemma3 (tools/torch_hf_gemma3.py's checks: masks, RoPE per layer type, Gemma3RMSNorm, embedding scale, ...)
    g3.self_checks(CONFIGS["gemma3"], init_golden_, gen)
    _fd_check("gemma3", gen)
