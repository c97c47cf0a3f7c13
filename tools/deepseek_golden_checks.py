#!/usr/bin/python3
"""The self-checks tools/make_deepseek_golden.py runs before writing (self_checks; its docstring lists them): the
reference tools/torch_hf_deepseek.py against independent transcriptions (yarn, RoPE forms, MLA absorbed over the
latent, per-token routing, Megatron's bias update, seq_aux) and float64 finite differences. Moved out of
tools/make_deepseek_golden.py unchanged; the variants' configs and initialisation are
tools/deepseek_golden_configs.py's.
"""
import math

import torch

from deepseek_golden_configs import BIAS_RATE, C, CONFIGS, H, L, V, VARIANTS, init_golden_, kv_cache_meta
import hf_rope_reference
import torch_hf_deepseek as ds


# ----------------------------------------------------------------------------
# self-checks


def tiny(variant, **over):
    return dict(CONFIGS[variant], **over)


def _yarn_deepseek(dim, base, factor, original, beta_fast, beta_slow, mscale, mscale_all_dim):
    """An independent transcription of DeepSeek's DeepseekV2YarnRotaryEmbedding (modeling_deepseek.py)."""
    def corr_dim(rot):
        return (dim * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(base))
    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    freq_extra = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    freq_inter = 1.0 / (factor * base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    mask = 1.0 - ramp
    inv = freq_inter * (1 - mask) + freq_extra * mask
    return inv, float(ds.yarn_get_mscale(factor, mscale) / ds.yarn_get_mscale(factor, mscale_all_dim))


def _rope_checks(gen):
    c2 = ds.DeepseekConfig.from_hf(CONFIGS["deepseek_v2_lite"])
    m2 = ds.DeepseekForCausalLM(CONFIGS["deepseek_v2_lite"])
    inv, sc = _yarn_deepseek(8, 10000, 4, 16, 32, 1, 0.707, 0.707)
    assert torch.equal(m2.inv_freq, inv) and m2.attention_scaling == sc == 1.0, (m2.inv_freq, inv, sc)
    base = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.int64).float() / 8))
    assert torch.equal(m2.inv_freq[:1], base[:1]) and torch.allclose(m2.inv_freq[1:], base[1:] / 4, rtol=1e-7, atol=0)
    distinct = dict(CONFIGS["deepseek_v2_lite"]["rope_scaling"], mscale=1.0)
    i3, s3 = hf_rope_reference.inv_freq_and_scaling(dict(CONFIGS["deepseek_v2_lite"], rope_scaling=distinct), 8)
    _, want = _yarn_deepseek(8, 10000, 4, 16, 32, 1, 1.0, 0.707)
    assert abs(s3 - want) < 1e-15 and s3 > 1.0
    mscale = 0.1 * 0.707 * math.log(4) + 1.0
    assert c2.softmax_scale == 24 ** -0.5 * mscale * mscale, c2.softmax_scale
    c3 = ds.DeepseekConfig.from_hf(CONFIGS["deepseek_v3"])
    m3 = ds.DeepseekForCausalLM(CONFIGS["deepseek_v3"])
    assert c3.softmax_scale == 24 ** -0.5 and m3.attention_scaling == 1.0 and torch.equal(m3.inv_freq, base)
    print(f"  self-check yarn (hf_rope_reference == DeepSeek's DeepseekV2YarnRotaryEmbedding, bitwise): inv_freq "
          f"{[f'{v:.9g}' for v in m2.inv_freq.tolist()]}, attention_scaling 1.0 (mscale == mscale_all_dim; {s3:.6f} with "
          f"mscale 1.0); softmax_scale 24**-0.5 * {mscale:.9f}**2 = {c2.softmax_scale:.12g}; V3 default RoPE, 24**-0.5")

    # interleaved (V2's complex form) vs half-split rotate_half after PERM, and V3's interleave path
    d, T = 8, 11
    perm = ds.rope_perm(d)
    assert perm == [0, 2, 4, 6, 1, 3, 5, 7]
    for dt, tol in ((torch.float32, 2e-6), (torch.float64, 1e-6)):
        q = torch.randn(2, 4, T, d, generator=gen, dtype=torch.float64).to(dt)
        k = torch.randn(2, 1, T, d, generator=gen, dtype=torch.float64).to(dt)
        fc = m2.rope(T)
        q2, k2 = ds.apply_rotary_emb_v2(q, k, fc)
        freqs = (m2.inv_freq[None, :, None] @ torch.arange(T)[None, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos().to(dt), emb.sin().to(dt)
        qh, kh = ds.apply_rotary_pos_emb_v3(q[..., perm], k[..., perm], cos, sin, interleave=False)
        qi, ki = ds.apply_rotary_pos_emb_v3(q, k, cos, sin, interleave=True)
        for a, b in ((q2[..., perm], qh), (k2[..., perm], kh), (q2[..., perm], qi), (k2[..., perm], ki)):
            assert (a - b).abs().max().item() < tol, (dt, (a - b).abs().max().item())
        # the pair form, explicitly: (x0 c - x1 s, x0 s + x1 c) with frequency i on pair (2i, 2i+1)
        c_, s_ = cos[:, :, :d // 2], sin[:, :, :d // 2]
        x0, x1 = q[..., 0::2], q[..., 1::2]
        assert (q2[..., 0::2] - (x0 * c_ - x1 * s_)).abs().max().item() < tol
        assert (q2[..., 1::2] - (x0 * s_ + x1 * c_)).abs().max().item() < tol
        # scores invariant
        sc_i = q2 @ k2.transpose(-1, -2)
        sc_h = qh @ kh.transpose(-1, -2)
        assert (sc_i - sc_h).abs().max().item() < 10 * tol
    print(f"  self-check RoPE: V2's complex interleaved form [..., PERM] == rotate_half form on x[..., PERM] == V3's "
          f"rope_interleave path (float32 < 2e-6, float64 < 1e-6: cos/sin are float32), PERM {perm}; pair form "
          f"(x0 c - x1 s, x0 s + x1 c); q.k invariant")


def _interleave_equals_permuted_weights(gen):
    """deepseek_v3 with rope_interleave true == rope_interleave false with the rope rows of q_b_proj (per head) and
    kv_a_proj_with_mqa permuted by PERM (float64)."""
    d = CONFIGS["deepseek_v3"]
    a = ds.DeepseekForCausalLM(d)
    init_golden_(a, gen)
    b = ds.DeepseekForCausalLM(d)
    b.cfg.rope_interleave = False
    assert a.cfg.rope_interleave and not b.cfg.rope_interleave
    cfg = a.cfg
    Dn, Dr, Dqk, R = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.qk_head_dim, cfg.kv_lora_rank
    perm = torch.tensor(ds.rope_perm(Dr))
    qrows = torch.cat([h * Dqk + torch.cat([torch.arange(Dn), Dn + perm]) for h in range(H)])
    kvrows = torch.cat([torch.arange(R), R + perm])
    sd = {k: v.clone() for k, v in a.state_dict().items()}
    for i in range(L):
        sd[f"model.layers.{i}.self_attn.q_b_proj.weight"] = sd[f"model.layers.{i}.self_attn.q_b_proj.weight"][qrows]
        key = f"model.layers.{i}.self_attn.kv_a_proj_with_mqa.weight"
        sd[key] = sd[key][kvrows]
    b.load_state_dict(sd)
    a, b = a.double(), b.double()
    toks = torch.randint(0, V, (2, 32), generator=gen)
    la, lb = a(toks)[0], b(toks)[0]
    err = (la - lb).abs().max().item()
    assert err < 1e-12, err
    print(f"  self-check deepseek_v3 rope_interleave true == false with q_b_proj / kv_a_proj_with_mqa rope rows permuted "
          f"by PERM (float64 logits, max diff {err:.1e})")


def _mla_absorbed(gen):
    """The attention output of a layer == the 'absorbed' MLA form over the cached latent: per head h,
    score(t, s) = q_nope_h(t) . (W_UK_h c_n(s)) + q_pe_h(t) . k_pe(s), out_h(t) = sum_s p(t, s) W_UV_h c_n(s)
    (float64; what a KV cache of kv_lora_rank + qk_rope_head_dim floats per token computes)."""
    for variant in VARIANTS:
        model = ds.DeepseekForCausalLM(CONFIGS[variant])
        init_golden_(model, gen)
        model = model.double()
        attn = model.model.layers[1].self_attn
        attn.record = True
        x = torch.randn(2, 13, C, generator=gen, dtype=torch.float64)
        T = x.shape[1]
        attn(x, model.rope(T))
        r = attn.records
        cfg = model.cfg
        Dn, Dr, Dv = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        Wkv = attn.kv_b_proj.weight.view(H, Dn + Dv, cfg.kv_lora_rank)
        W_uk, W_uv = Wkv[:, :Dn], Wkv[:, Dn:]                     # [H, Dn, R], [H, Dv, R]
        c = r["compressed_kv"].view(2, T, -1)
        q = r["q"].view(2, T, H, -1)
        q_nope, q_pe = q[..., :Dn], q[..., Dn:]
        k_pe = r["k_pe"].view(2, T, Dr)
        q_lat = torch.einsum("bthd,hdr->bthr", q_nope, W_uk)   # absorbed query in latent space
        scores = torch.einsum("bthr,bsr->bhts", q_lat, c) + torch.einsum("bthd,bsd->bhts", q_pe, k_pe)
        scores = scores * cfg.softmax_scale + torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
        p = scores.softmax(-1)
        o_lat = torch.einsum("bhts,bsr->bthr", p, c)
        out = torch.einsum("bthr,hvr->bthv", o_lat, W_uv).reshape(2 * T, H * Dv)
        err = (out - r["attn_out"]).abs().max().item()
        assert err < 1e-12, (variant, err)
        # and the records: k = cat(W_uk c, k_pe), v = W_uv c
        assert torch.allclose(r["k"].view(2, T, H, -1)[..., Dn:], k_pe[:, :, None].expand(2, T, H, Dr))
        assert torch.allclose(r["v"].view(2, T, H, Dv), torch.einsum("hvr,btr->bthv", W_uv, c), atol=1e-13)
        print(f"  self-check {variant} MLA == absorbed form over the latent (kv_lora_rank + qk_rope_head_dim per token): "
              f"max diff {err:.1e} (float64)")


def _naive_route(cfg, x2, gate_w, bias):
    """Per-token routing with Python lists (float64): -> list of (experts, weights)."""
    E, k, G, TG = cfg.n_routed_experts, cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group
    v3 = cfg.model_type == "deepseek_v3"
    res = []
    for t in range(x2.shape[0]):
        logits = (x2[t] @ gate_w.T).tolist()
        if v3:
            s = [1 / (1 + math.exp(-z)) for z in logits]
            b = [s[e] + bias[e] for e in range(E)]
        else:
            mx = max(logits)
            ex = [math.exp(z - mx) for z in logits]
            s = [v / sum(ex) for v in ex]
            b = list(s)
        n = E // G
        if v3 or cfg.topk_method == "group_limited_greedy":
            gs = [sum(sorted(b[g * n:(g + 1) * n], reverse=True)[:2]) if v3 else max(b[g * n:(g + 1) * n])
                  for g in range(G)]
            keep = sorted(range(G), key=lambda g: -gs[g])[:TG]
            b = [b[e] if e // n in keep else 0.0 for e in range(E)]
        chosen = sorted(range(E), key=lambda e: -b[e])[:k]
        w = [s[e] if v3 else b[e] for e in chosen]
        if v3 and cfg.norm_topk_prob:
            w = [v / (sum(w) + 1e-20) for v in w]
        res.append((chosen, [v * cfg.routed_scaling_factor for v in w]))
    return res


def _moe_vs_naive(gen):
    cases = [("deepseek_v2_lite", {}), ("deepseek_v2_lite", dict(num_experts_per_tok=3, routed_scaling_factor=1.5)),
             ("deepseek_v2_lite", dict(topk_method="group_limited_greedy", n_group=2, topk_group=1, n_routed_experts=6)),
             ("deepseek_v3", {}), ("deepseek_v3", dict(norm_topk_prob=False, n_group=2, topk_group=1)),
             ("deepseek_v3", dict(num_experts_per_tok=3, n_group=1, topk_group=1))]
    for variant, over in cases:
        cfg = ds.DeepseekConfig.from_hf(tiny(variant, **over))
        moe = ds.DeepseekMoE(cfg).double()
        with torch.no_grad():
            for name, p in moe.named_parameters():
                std = 0.3 if name == "gate.weight" else 0.1
                p.copy_(std * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            if moe.v3:
                moe.gate.e_score_correction_bias.copy_(0.05 * torch.randn(cfg.n_routed_experts, generator=gen))
        x = torch.randn(2, 7, C, generator=gen, dtype=torch.float64, requires_grad=True)
        R = torch.randn(2, 7, C, generator=gen, dtype=torch.float64)
        y = moe(x)
        x2 = x.reshape(-1, C)
        bias = moe.gate.e_score_correction_bias.tolist() if moe.v3 else None
        naive = _naive_route(cfg, x2.detach(), moe.gate.weight.detach(), bias)
        r = moe.last_route
        for t, (chosen, w) in enumerate(naive):
            assert r["idx"][t].tolist() == chosen, (variant, over, t, r["idx"][t].tolist(), chosen)
            assert max(abs(a - b) for a, b in zip(r["w"][t].tolist(), w)) < 1e-14
        # the output and every gradient, against a per-token loop that uses the routing's own (differentiable) weights
        rows = []
        for t in range(x2.shape[0]):
            rows.append(sum(r["w"][t, j] * moe.experts[e](x2[t:t + 1])[0] for j, e in enumerate(r["idx"][t].tolist()))
                        + moe.shared_experts(x2[t:t + 1])[0])
        yn = torch.stack(rows).view_as(y)
        assert (y - yn).abs().max().item() < 1e-13
        params = [x] + list(moe.parameters())
        g1 = torch.autograd.grad((y * R).sum(), params, allow_unused=True, retain_graph=True)
        g2 = torch.autograd.grad((yn * R).sum(), params, allow_unused=True)
        for a, b in zip(g1, g2):
            if a is None or b is None:
                assert a is None and b is None or (a if b is None else b).abs().max() == 0
                continue
            assert (a - b).abs().max().item() < 1e-12, (variant, over)
    print(f"  self-check MoE blocks == per-token Python routing + loop ({len(cases)} cases: V2 greedy top-2/3, "
          f"group_limited_greedy; V3 noaux_tc grouped, norm_topk_prob off, top-3): experts, weights, outputs, gradients")


def _expert_bias_checks(gen):
    E = 8
    for _ in range(3):
        counts = torch.randint(0, 40, (2, E), generator=gen).float()
        counts[0, 3] = counts[0].sum() / E if (counts[0].sum() % E) == 0 else counts[0, 3]
        bias = 0.05 * torch.randn(2, E, generator=gen)
        new = ds.get_updated_expert_bias(counts, bias, BIAS_RATE)
        for r in range(2):
            mean = counts[r].sum().item() / E
            for e in range(E):
                sign = (mean > counts[r, e].item()) - (mean < counts[r, e].item())
                want = torch.tensor(bias[r, e].item(), dtype=torch.float32) + sign * torch.tensor(BIAS_RATE)
                assert new[r, e].item() == want.item(), (r, e)
    # counted only in training forwards with grad; cleared by the update
    model = ds.DeepseekForCausalLM(CONFIGS["deepseek_v3"], enable_expert_bias=True)
    init_golden_(model, gen)
    toks = torch.randint(0, V, (2, 32), generator=gen)
    with torch.no_grad():
        model(toks)
    assert all(m.tokens_per_expert.sum() == 0 for _, m in model.sparse_blocks())
    model.eval()
    model(toks)
    assert all(m.tokens_per_expert.sum() == 0 for _, m in model.sparse_blocks())
    model.train()
    model(toks)
    model(toks)
    for _, m in model.sparse_blocks():
        assert m.tokens_per_expert.sum() == 2 * 64 * 2
        want = 2 * torch.bincount(m.last_route["idx"].reshape(-1), minlength=8).float()
        assert torch.equal(m.tokens_per_expert, want)
    before = torch.stack([m.gate.e_score_correction_bias.clone() for _, m in model.sparse_blocks()])
    cnt = torch.stack([m.tokens_per_expert.clone() for _, m in model.sparse_blocks()])
    new = model.update_expert_bias(BIAS_RATE)
    assert torch.equal(new, torch.stack([m.gate.e_score_correction_bias for _, m in model.sparse_blocks()]))
    step = (new.double() - before.double()) / BIAS_RATE
    want = torch.sign(cnt.sum(-1, keepdim=True) / cnt.shape[-1] - cnt).double()
    assert (step - want).abs().max() < 1e-4, (step, want)    # float32 rounding of bias + rate
    assert all(m.tokens_per_expert.sum() == 0 for _, m in model.sparse_blocks())
    try:
        ds.DeepseekForCausalLM(CONFIGS["deepseek_v2_lite"], enable_expert_bias=True)
        raise AssertionError("V2 with expert bias accepted")
    except ValueError:
        pass
    print("  self-check expert bias: get_updated_expert_bias == bias + rate * sign(mean - count) (float32, sign(0) = 0); "
          "counts only in training forwards with grad, cleared by the update")


def _seq_aux_check(gen):
    for variant in VARIANTS:
        model = ds.DeepseekForCausalLM(CONFIGS[variant])
        init_golden_(model, gen)
        toks = torch.randint(0, V, (2, 32), generator=gen)
        with torch.no_grad():
            model(toks)
        for (i, moe), got in zip(model.sparse_blocks(), model.aux_losses(2, 32)):
            r, E, k = moe.last_route, moe.cfg.n_routed_experts, moe.cfg.num_experts_per_tok
            p = r["scores"].double()
            if moe.v3:
                p = p / p.sum(-1, keepdim=True)
            total = 0.0
            for b in range(2):
                idx = r["idx"][b * 32:(b + 1) * 32].reshape(-1).tolist()
                total += sum(idx.count(e) / (32 * k / E) * p[b * 32:(b + 1) * 32, e].mean().item() for e in range(E))
            assert abs(total / 2 - got.item()) < 1e-6, (variant, i, total / 2, got.item())
    print("  self-check seq_aux balance loss == explicit per-sequence sum_e f_e P_e (both variants)")


def _fd_check(variant, gen):
    model = ds.DeepseekForCausalLM(CONFIGS[variant])
    init_golden_(model, gen)
    model = model.double()
    toks = torch.randint(0, V, (2, 10), generator=gen)
    inputs, targets = toks[:, :9], toks[:, 1:]
    _, loss = model(inputs, targets)
    loss.backward()

    def selections():
        return [m.last_route["idx"].clone() for _, m in model.sparse_blocks()]
    sel0 = selections()
    sd = dict(model.named_parameters())
    picks = [("model.layers.0.self_attn.q_proj.weight", (5, 7)), ("model.layers.1.self_attn.q_proj.weight", (90, 3)),
             ("model.layers.0.self_attn.q_a_proj.weight", (3, 9)),
             ("model.layers.1.self_attn.q_a_layernorm.weight", (5,)),
             ("model.layers.2.self_attn.q_b_proj.weight", (94, 20)),
             ("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", (2, 11)),
             ("model.layers.1.self_attn.kv_a_proj_with_mqa.weight", (37, 50)),    # a k_pe row
             ("model.layers.2.self_attn.kv_a_layernorm.weight", (7,)),
             ("model.layers.1.self_attn.kv_b_proj.weight", (3, 4)),
             ("model.layers.2.self_attn.kv_b_proj.weight", (120, 31)),            # a v row
             ("model.layers.0.self_attn.o_proj.weight", (6, 60)), ("model.layers.0.mlp.gate_proj.weight", (80, 2)),
             ("model.layers.0.mlp.down_proj.weight", (1, 95)), ("model.layers.1.mlp.gate.weight", (1, 10)),
             ("model.layers.2.mlp.gate.weight", (3, 40)), ("model.layers.2.mlp.gate.weight", (7, 1)),
             ("model.layers.1.mlp.experts.0.gate_proj.weight", (4, 12)),
             ("model.layers.2.mlp.experts.3.down_proj.weight", (40, 9)),
             ("model.layers.1.mlp.shared_experts.up_proj.weight", (10, 3)),
             ("model.layers.1.input_layernorm.weight", (17,)), ("model.layers.2.post_attention_layernorm.weight", (3,)),
             ("model.norm.weight", (42,)), ("model.embed_tokens.weight", (int(inputs[1, 2]), 30)),
             ("lm_head.weight", (int(targets[0, 0]), 8))]
    worst, n = 0.0, 0
    for name, idx in picks:
        if name not in sd or any(i >= n for i, n in zip(idx, sd[name].shape)):
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
        fd, an = (lp - lm) / (2 * h), (0.0 if p.grad is None else p.grad[idx].item())
        worst = max(worst, abs(fd - an) / max(abs(an), 1e-8))
        n += 1
        assert abs(fd - an) <= 1e-7 + 1e-5 * abs(an), f"{variant}: finite differences {name}{idx}: fd {fd} vs {an}"
    print(f"  self-check {variant}: finite differences (float64) agree with autograd on {n} elements, "
          f"worst rel err {worst:.1e}")


def _shape_checks():
    for variant in VARIANTS:
        d = CONFIGS[variant]
        cfg = ds.DeepseekConfig.from_hf(d)
        names = [(n, tuple(p.shape)) for n, p in ds.DeepseekForCausalLM(d).named_parameters()]
        Dqk, R, Dr, Dn, Dv, E, Fm = 24, 32, 8, 16, 16, cfg.n_routed_experts, cfg.moe_intermediate_size
        want = [("model.embed_tokens.weight", (V, C))]
        for i in range(L):
            pre = f"model.layers.{i}."
            if cfg.q_lora_rank is None:
                want += [(pre + "self_attn.q_proj.weight", (H * Dqk, C))]
            else:
                want += [(pre + "self_attn.q_a_proj.weight", (24, C)), (pre + "self_attn.q_a_layernorm.weight", (24,)),
                         (pre + "self_attn.q_b_proj.weight", (H * Dqk, 24))]
            want += [(pre + "self_attn.kv_a_proj_with_mqa.weight", (R + Dr, C)),
                     (pre + "self_attn.kv_a_layernorm.weight", (R,)),
                     (pre + "self_attn.kv_b_proj.weight", (H * (Dn + Dv), R)),
                     (pre + "self_attn.o_proj.weight", (C, H * Dv))]
            if i >= 1:
                for e in range(E):
                    want += [(pre + f"mlp.experts.{e}.gate_proj.weight", (Fm, C)),
                             (pre + f"mlp.experts.{e}.up_proj.weight", (Fm, C)),
                             (pre + f"mlp.experts.{e}.down_proj.weight", (C, Fm))]
                want += [(pre + "mlp.gate.weight", (E, C)), (pre + "mlp.shared_experts.gate_proj.weight", (Fm, C)),
                         (pre + "mlp.shared_experts.up_proj.weight", (Fm, C)),
                         (pre + "mlp.shared_experts.down_proj.weight", (C, Fm))]
            else:
                want += [(pre + "mlp.gate_proj.weight", (96, C)), (pre + "mlp.up_proj.weight", (96, C)),
                         (pre + "mlp.down_proj.weight", (C, 96))]
            want += [(pre + "input_layernorm.weight", (C,)), (pre + "post_attention_layernorm.weight", (C,))]
        want += [("model.norm.weight", (C,)), ("lm_head.weight", (V, C))]
        assert names == want, (variant, [a for a, b in zip(names, want) if a != b][:3])
        bufs = [n for n, _ in ds.DeepseekForCausalLM(d).named_buffers()]
        assert bufs == ([f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in (1, 2)]
                        if cfg.model_type == "deepseek_v3" else [])
    for bad in (dict(moe_layer_freq=2), dict(norm_topk_prob=True), dict(scoring_func="sigmoid"),
                dict(num_key_value_heads=2), dict(n_shared_experts=None), dict(hidden_act="gelu")):
        try:
            ds.DeepseekConfig.from_hf(tiny("deepseek_v2_lite", **bad))
            raise AssertionError(f"accepted {bad}")
        except ValueError:
            pass
    print("  self-check HF's parameter names, order and shapes (q_proj / q_a_proj+q_a_layernorm+q_b_proj, the MoE "
          "layers from first_k_dense_replace), V3's e_score_correction_bias buffers; refused configs")


def _kv_cache_print():
    for variant in VARIANTS:
        cfg = ds.DeepseekConfig.from_hf(CONFIGS[variant])
        _, text = kv_cache_meta(cfg)
        print(f"  KV cache ({variant}): {text}")


def self_checks():
    gen = torch.Generator().manual_seed(77)
    _shape_checks()
    _rope_checks(gen)
    _interleave_equals_permuted_weights(gen)
    _mla_absorbed(gen)
    _moe_vs_naive(gen)
    _expert_bias_checks(gen)
    _seq_aux_check(gen)
    for variant in VARIANTS:
        _fd_check(variant, gen)
    _kv_cache_print()
