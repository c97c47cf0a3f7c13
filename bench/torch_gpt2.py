#!/usr/bin/python3
"""PyTorch side of gridformer's GPT-2 and Llama training benchmarks (CPU).

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_gpt2.py --shape gpt2-tiny --steps 5 --warmup 2 --threads 2
    OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_gpt2.py --shape llama-tiny --dtype bf16
    OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_gpt2.py --shape moe-tiny      # or mixtral-tiny

The MoE shapes (moe-tiny: GPT-2 MoE, mixtral-tiny) are bench/torch_moe_bench.py's models, trained
by the same loop; their FLOPs are the active ones (its moe_flops).

Builds a GPT-2 (HF layout: Conv1D weights [in, out], tied LM head, gelu_new,
LayerNorm eps 1e-5, no dropout) or, for the llama-* shapes, tools/torch_llama.py's
LlamaForCausalLM (HF's modeling_llama.py in plain torch: RMSNorm, RoPE, grouped-query
attention through repeat_kv, eager attention, SwiGLU, untied head, nn.Linear [out, in],
HF's init), trains it on random tokens with
AdamW(betas 0.9/0.95, eps 1e-8, wd 0.1 on 2-D weights only) and
clip_grad_norm_(1.0), and times every optimizer step (zero_grad + forward +
backward + clip + step) after `--warmup` untimed steps.

Reported per timed step and as medians: tokens/s = B*T/t, samples/s = B/t,
achieved TFLOP/s with Megatron-LM's formula (Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters", eq. without activation
recomputation) for the FLOPs of one iteration (forward + backward):

    F = 72 * B * T * L * h^2 * (1 + T/(6h) + V/(12*L*h))

(B batch, T sequence length, L layers, h hidden size, V vocabulary). It counts
only matmul FLOPs (QKV/proj/MLP, attention scores and values, LM head), with
backward = 2x forward; the optimizer, LayerNorm, GELU, softmax are not counted.
Generalised to grouped-query attention (H query heads, Hkv key/value heads of
width D) and a gated MLP of width F (m = 3 products for SwiGLU, 2 for GELU), as
gridformer's TransformerLM::flops_per_step counts it:

    F = 6 * B * T * [L * (C*(H + 2*Hkv)*D + C*H*D + m*C*F + 2*T*C) + C*V]

which for GPT-2 (Hkv = H, H*D = C, F = 4C, m = 2) is the formula above.
MFU = achieved TFLOP/s / --peak-tflops (not printed without a peak).

Attention (--attention, default auto): F.scaled_dot_product_attention(q, k, v, is_causal=True)
where torch has it (2.0 and later; Hugging Face's GPT-2 and Llama use it by default there, and on
CPU it is a fused flash kernel), else the explicit softmax(q k^T / sqrt(d)) v with a causal mask
(Hugging Face's "eager"). The result's "attention" says which ran.

Notes for torch 1.13 (Debian's python3-torch): AdamW has no `fused` option in
1.13 (it was added in 2.0), so the plain for-loop implementation
(foreach=False, i.e. "fused=False", also the CPU default of 2.x) is used; there is no
scaled_dot_product_attention, so attention is the explicit one. Use /usr/bin/python3.
"""
import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_moe_bench import MOE_SHAPES, MoELoss, moe_flops

SHAPES = {
    # name: (n_layer, n_embd, n_head, vocab_size, n_positions, T, B); Llama adds its kv heads and SwiGLU width
    "gpt2-124M": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024, T=256, B=4),
    "gpt2-tiny": dict(n_layer=4, n_embd=256, n_head=4, vocab_size=50257, n_positions=1024, T=256, B=8),
    "llama-tiny": dict(model="llama", n_layer=4, n_embd=256, n_head=8, n_kv_head=2, intermediate_size=704,
                       vocab_size=50257, n_positions=1024, T=256, B=8),
}
# moe-tiny (GPT-2 MoE) and mixtral-tiny: bench/torch_moe_bench.py's models (HF's MixtralSparseMoeBlock loop)
SHAPES.update(MOE_SHAPES)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class Conv1D(nn.Module):
    """HF Conv1D: weight [in, out]; y = b + x @ W computed as one addmm."""

    def __init__(self, n_in, n_out, std):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * std)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        y = torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight)
        return y.view(*x.shape[:-1], -1)


class Block(nn.Module):
    def __init__(self, C, H, L, P, attention="eager"):
        super().__init__()
        self.H = H
        self.sdpa = attention == "sdpa"
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = Conv1D(C, 3 * C, 0.02)
        self.attn_proj = Conv1D(C, C, 0.02 / math.sqrt(2 * L))
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = Conv1D(C, 4 * C, 0.02)
        self.mlp_proj = Conv1D(4 * C, C, 0.02 / math.sqrt(2 * L))
        self.register_buffer("mask", torch.tril(torch.ones(P, P, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        H, D = self.H, C // self.H
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, H, D).transpose(1, 2)
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        if self.sdpa:  # HF's GPT2SdpaAttention (PyTorch >= 2.0): the fused kernel, causal
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.attn_proj(y)
        x = x + self.mlp_proj(gelu_new(self.c_fc(self.ln_2(x))))
        return x


class GPT2(nn.Module):
    def __init__(self, s):
        super().__init__()
        C, L = s["n_embd"], s["n_layer"]
        self.wte = nn.Parameter(torch.randn(s["vocab_size"], C) * 0.02)
        self.wpe = nn.Parameter(torch.randn(s["n_positions"], C) * 0.01)
        self.h = nn.ModuleList([Block(C, s["n_head"], L, s["n_positions"], s.get("attention", "eager")) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = F.embedding(idx, self.wte) + self.wpe[:T]
        for blk in self.h:
            x = blk(x)
        x = self.ln_f(x)
        logits = x.reshape(B * T, -1) @ self.wte.t()          # tied LM head
        return F.cross_entropy(logits.float(), targets.reshape(-1))


def megatron_flops(B, T, L, h, V):
    """Training FLOPs per iteration, Megatron-LM formula without recomputation (see module doc)."""
    return 72.0 * B * T * L * h * h * (1.0 + T / (6.0 * h) + V / (12.0 * L * h))


def model_flops(B, T, L, C, V, H, Hkv=None, F=None, gated=False):
    """Megatron's count generalised to grouped-query attention and a gated (SwiGLU) MLP, as
    gridformer's TransformerLM::flops_per_step: 6 B T [L (C (H + 2 Hkv) D + C H D + m C F + 2 T C) + C V]."""
    Hkv = Hkv or H
    F = F or 4 * C
    D = C // H
    m = 3.0 if gated else 2.0
    per_token = L * (C * (H + 2 * Hkv) * D + C * H * D + m * C * F + 2.0 * T * C) + C * V
    return 6.0 * B * T * per_token


class LlamaLoss(nn.Module):
    """tools/torch_llama.py's LlamaForCausalLM, called as GPT2 is: (idx, targets) -> loss."""

    def __init__(self, s, seed):
        super().__init__()
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
        import torch_llama as tl
        cfg = tl.LlamaConfig(vocab_size=s["vocab_size"], hidden_size=s["n_embd"], num_layers=s["n_layer"],
                             num_heads=s["n_head"], num_kv_heads=s["n_kv_head"],
                             intermediate_size=s["intermediate_size"], rope_theta=10000.0, rms_norm_eps=1e-5,
                             tie_word_embeddings=False, max_position_embeddings=s["n_positions"],
                             attn_implementation=s.get("attention", "eager"))
        self.llama = tl.LlamaForCausalLM(cfg)
        tl.init_hf_(self.llama, torch.Generator().manual_seed(seed))

    def forward(self, idx, targets):
        return self.llama(idx, targets)[1]


def shape_flops(s):
    """FLOPs of one training step of shape `s` (a SHAPES entry, B and T possibly overridden)."""
    if s.get("model") in ("gpt2-moe", "mixtral"):
        return moe_flops(s)
    if s.get("model") == "llama":
        return model_flops(s["B"], s["T"], s["n_layer"], s["n_embd"], s["vocab_size"], s["n_head"], s["n_kv_head"],
                           s["intermediate_size"], gated=True)
    return megatron_flops(s["B"], s["T"], s["n_layer"], s["n_embd"], s["vocab_size"])


# torch.profiler's op names, by what gridformer's step breakdown (bench/step_breakdown.py) calls them.
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::_mkldnn_matmul",
            "aten::mkldnn_linear", "aten::_addmm_activation"}
ATTENTION_OPS = ("scaled_dot_product", "flash_attention", "aten::_softmax", "aten::_softmax_backward_data",
                 "aten::masked_fill", "aten::_masked_softmax")
CAST_OPS = {"aten::_to_copy", "aten::to", "aten::copy_"}
LOSS_OPS = ("aten::_log_softmax", "aten::nll_loss", "aten::cross_entropy")  # and their backward ops


def profile_breakdown(prof, steps, wall_s):
    """ms per step: the step (wall clock), the three phases (their record_function spans), and inside
    forward and backward the own time of the GEMM ops, of the attention ops (the fused kernel, or the
    explicit softmax and mask), of the loss (log-softmax and NLL over the vocabulary, both directions)
    and of copies (aten::_to_copy, to, copy_: autocast's casts and other copies), the rest of the two phases as
    "other"; gemm_share = GEMM / step. Op times are the calling thread's (intra-op threads inside)."""
    tot = {"gf.forward": 0.0, "gf.backward": 0.0, "gf.optimizer": 0.0}
    gemm = att = cast = loss = 0.0
    for e in prof.key_averages():
        us = e.self_cpu_time_total
        if e.key in tot:
            tot[e.key] = e.cpu_time_total
        elif e.key in GEMM_OPS:
            gemm += us
        elif any(k in e.key for k in ATTENTION_OPS):
            att += us
        elif any(e.key.startswith(k) for k in LOSS_OPS):
            loss += us
        elif e.key in CAST_OPS:
            cast += us
    ms = lambda us: us / 1e3 / steps
    fb = tot["gf.forward"] + tot["gf.backward"]
    out = {"step": 1e3 * wall_s / steps, "forward": ms(tot["gf.forward"]), "backward": ms(tot["gf.backward"]),
           "clip_and_optimizer": ms(tot["gf.optimizer"]), "gemm": ms(gemm), "attention": ms(att),
           "loss": ms(loss), "copies": ms(cast), "other": ms(fb - gemm - att - loss - cast)}
    out["gemm_share"] = out["gemm"] / out["step"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="gpt2-tiny")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: OMP_NUM_THREADS or nproc)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16 = torch.autocast('cpu', bfloat16)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="peak TFLOP/s of the machine, for MFU")
    ap.add_argument("--batch", type=int, default=None, help="override B")
    ap.add_argument("--seq", type=int, default=None, help="override T")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--attention", choices=["auto", "sdpa", "eager"], default="auto",
                    help="auto: F.scaled_dot_product_attention where torch has it (>= 2.0, what Hugging Face's GPT-2 "
                         "and Llama use by default there), else the explicit softmax")
    ap.add_argument("--json", action="store_true", help="print only one JSON line")
    ap.add_argument("--profile", action="store_true",
                    help="torch.profiler over the timed steps: where PyTorch's step goes (see profile_breakdown)")
    args = ap.parse_args()

    env_threads = os.environ.get("OMP_NUM_THREADS")
    K = args.threads or (int(env_threads) if env_threads else os.cpu_count())
    torch.set_num_threads(K)
    log = (lambda *a, **k: print(*a, **k, file=sys.stderr)) if args.json else print
    if env_threads != str(K):
        log(f"warning: OMP_NUM_THREADS={env_threads!r} but --threads {K}; set OMP_NUM_THREADS={K} "
            f"(OpenMP/OpenBLAS pools are sized from it at startup)")

    s = dict(SHAPES[args.shape])
    if args.batch:
        s["B"] = args.batch
    if args.seq:
        s["T"] = args.seq
    B, T, L, C, V = s["B"], s["T"], s["n_layer"], s["n_embd"], s["vocab_size"]
    assert T <= s["n_positions"]
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
    import torch_llama as tl
    s["attention"] = tl.resolve_attention(args.attention)

    torch.manual_seed(args.seed)
    if s.get("model") in ("gpt2-moe", "mixtral"):
        model = MoELoss(s, args.seed)
    else:
        model = LlamaLoss(s, args.seed) if s.get("model") == "llama" else GPT2(s)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=False)  # no `fused` in 1.13

    n_total = args.warmup + args.steps
    data = torch.randint(0, V, (n_total, B, T + 1))
    flops = shape_flops(s)
    log(f"torch {torch.__version__}, threads {torch.get_num_threads()}, shape {args.shape} "
        f"(L={L} C={C} H={s['n_head']}" + (f" Hkv={s['n_kv_head']} F={s['intermediate_size']}" if "n_kv_head" in s else "")
        + (f" E={s['experts']} k={s['top_k']}" if "experts" in s else "")
        + f" V={V} B={B} T={T}), params {n_params / 1e6:.2f}M, dtype {args.dtype}, attention {s['attention']}, "
        f"{flops / 1e9:.1f} GFLOP/step (Megatron formula" + (", active" if "experts" in s else "") + ")")

    load_before = os.getloadavg()[0]
    if load_before > 0.5:
        log(f"warning: 1-min load average is {load_before:.2f} before the run; other processes "
            f"compete for the cores and the timings will be pessimistic")
    times, losses, utils = [], [], []
    prof = None
    phase = contextlib.nullcontext
    if args.profile:
        from torch.profiler import ProfilerActivity, profile, record_function
        phase = record_function
    for i in range(n_total):
        x, y = data[i, :, :T], data[i, :, 1:]
        if prof is None and args.profile and i == args.warmup:
            prof = profile(activities=[ProfilerActivity.CPU])
            prof.__enter__()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        with phase("gf.forward"):
            if args.dtype == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = model(x, y)
            else:
                loss = model(x, y)
        with phase("gf.backward"):
            loss.backward()
        with phase("gf.optimizer"):
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
        dt = time.perf_counter() - t0
        util = (time.process_time() - c0) / (dt * K)   # <~1 when our threads got the cores
        lv = loss.item()
        timed = i >= args.warmup
        if timed:
            times.append(dt)
            utils.append(util)
            losses.append(lv)
        log(f"step {i + 1:3d}{'' if timed else ' (warmup)'}: {dt * 1e3:9.1f} ms  loss {lv:.4f}  "
            f"{B * T / dt:9.1f} tok/s  {flops / dt / 1e12:.4f} TFLOP/s  cpu util {util:.2f}")

    breakdown = None
    if prof is not None:
        prof.__exit__(None, None, None)
        breakdown = profile_breakdown(prof, len(times), sum(times))
        log("profile (torch.profiler, ms per timed step; GEMM, attention, loss and copies are their ops' own time, "
            "other = the rest of forward and backward): "
            + ", ".join(f"{k} {v:.1f}" for k, v in breakdown.items() if k != "gemm_share")
            + f"; GEMM {100 * breakdown['gemm_share']:.1f}% of the step")
    if not times:
        log("no timed steps")
        return
    med = statistics.median(times)
    tflops = flops / med / 1e12
    res = {
        "impl": "pytorch", "shape": args.shape, "dtype": args.dtype, "threads": torch.get_num_threads(),
        "model": s.get("model", "gpt2"), "B": B, "T": T, "n_layer": L, "n_embd": C, "n_head": s["n_head"],
        "n_kv_head": s.get("n_kv_head", s["n_head"]), "intermediate_size": s.get("intermediate_size", 4 * C),
        "vocab_size": V,
        "params": n_params, "steps": args.steps, "warmup": args.warmup,
        "step_times_s": [round(t, 6) for t in times], "median_step_s": med,
        "tokens_per_s": B * T / med, "samples_per_s": B / med,
        "flops_per_step": flops, "tflops": tflops,
        "mfu": (tflops / args.peak_tflops) if args.peak_tflops else None,
        "peak_tflops": args.peak_tflops, "torch_version": torch.__version__, "attention": s["attention"],
        "final_loss": losses[-1],
        "median_cpu_util": statistics.median(utils),  # process CPU time / (wall * threads)
        "loadavg_1min_before": load_before, "loadavg_1min_after": os.getloadavg()[0],
        "peak_rss_bytes": 1024 * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,  # the process's, KiB on Linux
        "profile_ms_per_step": breakdown,
    }
    if args.json:
        print(json.dumps(res))
    else:
        print(f"median over {len(times)} steps: {med * 1e3:.1f} ms/step, {res['tokens_per_s']:.1f} tokens/s, "
              f"{res['samples_per_s']:.3f} samples/s, {tflops:.4f} TFLOP/s"
              + (f", MFU {100 * res['mfu']:.1f}% of {args.peak_tflops} TFLOP/s" if args.peak_tflops else "")
              + f"; peak RSS {res['peak_rss_bytes'] / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
