#!/usr/bin/env bash
# The PyTorch peers of the speed benchmarks (bench/torch_gpt2.py, bench/torch_moe_bench.py,
# tools/torch_llama.py) take F.scaled_dot_product_attention(q, k, v, is_causal=True) where torch has it
# (--attention sdpa, the default "auto" on PyTorch >= 2.0, as Hugging Face's models use it there). This
# checks that path computes what the explicit softmax does, for GPT-2, GPT-2 MoE, Mixtral (grouped-query
# heads) and Llama: the same weights and tokens, loss and every gradient, in float64. Debian's torch 1.13
# has no F.scaled_dot_product_attention; there a stand-in written from PyTorch's documentation of it
# (softmax(q k^T / sqrt(d) + causal mask) v) takes its place, so what is checked is the models' side: q, k, v
# handed over as [B, heads, T, D] (key/value heads repeated for grouped-query attention), the output's
# heads put back in order. On torch >= 2.0 the real kernel is checked.
#
# Bound: both paths sum the same products in float64 in different orders; each value carries at most
# about K 2^-53 relative error for sums of K <= 256 terms here (3e-14), through a few layers; 1e-9 relative
# (on each gradient's largest entry) is far above that and far below what a layout error gives (O(1)).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
"$PY" - "$SRC" <<'PY'
import math, sys
import torch
import torch.nn.functional as F
src = sys.argv[1]
sys.path[:0] = [src + "/bench", src + "/tools"]
if not hasattr(F, "scaled_dot_product_attention"):
    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        assert attn_mask is None and dropout_p == 0.0
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if is_causal:
            T, S = q.size(-2), k.size(-2)
            s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
        return torch.softmax(s, dim=-1) @ v
    F.scaled_dot_product_attention = sdpa
    print(f"torch {torch.__version__}: a stand-in for F.scaled_dot_product_attention")
else:
    print(f"torch {torch.__version__}: its own F.scaled_dot_product_attention")
import torch_gpt2 as tg
import torch_moe_bench as tmb

small = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=61, n_positions=32, T=16, B=2)
shapes = {
    "gpt2": dict(small),
    "llama": dict(small, model="llama", n_kv_head=2, intermediate_size=40),
    "gpt2-moe": dict(small, model="gpt2-moe", experts=4, top_k=2, norm_topk_prob=False, aux_loss_factor=0.01),
    "mixtral": dict(small, model="mixtral", n_kv_head=2, intermediate_size=40, experts=4, top_k=2,
                    norm_topk_prob=True, aux_loss_factor=0.01),
}

def build(s, attention):
    s = dict(s, attention=attention)
    torch.manual_seed(3)
    if s.get("model") in ("gpt2-moe", "mixtral"):
        m = tmb.MoELoss(s, 3)
    elif s.get("model") == "llama":
        m = tg.LlamaLoss(s, 3)
    else:
        m = tg.GPT2(s)
    return m.double()

bad = 0
for name, s in shapes.items():
    tokens = torch.randint(0, s["vocab_size"], (s["B"], s["T"] + 1), generator=torch.Generator().manual_seed(5))
    out = {}
    for attention in ("eager", "sdpa"):
        m = build(s, attention)
        loss = m(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        out[attention] = (loss.item(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
    (le, ge), (ls, gs) = out["eager"], out["sdpa"]
    assert ge.keys() == gs.keys() and len(ge) > 0, name
    worst = max(((ge[n] - gs[n]).abs().max() / ge[n].abs().max().clamp_min(1e-300)).item() for n in ge)
    dl = abs(le - ls) / abs(le)
    ok = dl <= 1e-9 and worst <= 1e-9
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: loss {le:.12f} (eager) {ls:.12f} (sdpa), relative {dl:.1e}; "
          f"worst gradient {worst:.1e} over {len(ge)} tensors")
sys.exit(1 if bad else 0)
PY
