#!/usr/bin/python3
"""PyTorch side of gridformer's decode benchmark: GPT-2 greedy generation with a KV cache (CPU, fp32).

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_decode.py --weights W.safetensors --prompts P.json \
        --new-tokens 64 [--batch 8] [--rounds 3] [--warmup 1] [--threads 2] [--ids-out F] [--json]
    OMP_NUM_THREADS=2 /usr/bin/python3 bench/torch_decode.py --check [--shape gpt2-124M]

The model is Hugging Face's GPT2LMHeadModel in plain torch, written from
huggingface/transformers src/transformers/models/gpt2/modeling_gpt2.py (GPT2Attention, GPT2MLP,
GPT2Block, GPT2Model, GPT2LMHeadModel): Conv1D weights [in, out] applied as one addmm, learned
position embeddings, pre-LayerNorm blocks (eps 1e-5), gelu_new, the LM head tied to wte. Attention
is GPT2Attention._attn, the "eager" path (torch 1.13 has no scaled_dot_product_attention): q k^T
divided by sqrt(head_dim), the causal mask taken from the tril `bias` buffer at rows
[key_length - query_length, key_length) and applied with torch.where(mask, w, finfo.min), softmax,
times v. The parameters have Hugging Face's names (wte.weight, h.0.attn.c_attn.weight, ...,
ln_f.bias), so a safetensors file written for gridformer's load_checkpoint loads here unchanged.

The generation loop is the one generate() runs for greedy search (GenerationMixin._sample with
do_sample False) with a DynamicCache: the prompt pass computes the logits of the last position only
(generate() passes logits_to_keep=1), each later step feeds one token per sequence at position
past_length, and every layer's keys and values are appended to its cache by concatenation, as
huggingface/transformers src/transformers/cache_utils.py DynamicLayer.update does
(self.keys = torch.cat([self.keys, key_states], dim=-2)); the next token is argmax of the last
logits; input_ids grows by one column per step. Everything runs under torch.inference_mode().
generate()'s own bookkeeping (logits processors, stopping criteria, attention-mask and
cache_position updates, the model-input preparation) is left out, so PyTorch's figures here are an
upper bound of what generate() itself gives.

Timing, the same split as gridformer predict's: the prompt pass (all prompts of the batch at once,
including the argmax of the first generated token, which the prompt pass produces) is prompt time,
prompt tokens/s = batch x prompt length / prompt time; the other new_tokens - 1 steps are decode
time, decode tokens/s = batch x (new_tokens - 1) / decode time. --warmup generations run untimed
first (PyTorch's first call creates its OpenMP pool and oneDNN primitives); the timed ones are
--rounds, reported each and as medians.

--check tests this reference itself: greedy generation with the cache against recomputing the whole
prefix every step without one (the same model, random weights of --shape, a short prompt): the
token ids must be equal, and the last-position logits of every step within --check-rtol of the
largest |logit|.
"""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import Conv1D, gelu_new  # noqa: E402  (HF's Conv1D addmm and NewGELUActivation)

SHAPES = {
    # name: GPT2Config's n_layer, n_embd, n_head, vocab_size, n_positions
    "gpt2-124M": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
    "gpt2-tiny": dict(n_layer=4, n_embd=256, n_head=4, vocab_size=50257, n_positions=1024),
}


# ---------------------------------------------------------------- safetensors (no package needed)

def save_safetensors(path, tensors, metadata=None):
    """Writes fp32 `tensors` (name -> tensor, in this order) as a safetensors file: an 8-byte
    little-endian header length, the JSON header (dtype, shape, data_offsets per tensor; padded with
    spaces to a multiple of 8 bytes, as the safetensors package pads it), then the data. Written to a
    temporary name and renamed, so an interrupted write never leaves a file that looks complete."""
    header, off = {}, 0
    for name, t in tensors.items():
        if t.dtype != torch.float32:
            raise ValueError(f"save_safetensors({path}): {name} is {t.dtype}; only float32 is written")
        n = t.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for t in tensors.values():
            f.write(t.detach().contiguous().numpy().tobytes())
    os.replace(tmp, path)


def load_safetensors(path):
    """name -> fp32 tensor of the safetensors file `path` (F32 tensors only)."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (hlen,) = struct.unpack("<Q", data[:8])
    if 8 + hlen > len(data):
        raise ValueError(f"{path}: header length {hlen} runs past the end of the file ({len(data)} bytes)")
    header = json.loads(data[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} is {e['dtype']}; this benchmark reads fp32 (F32) weights only")
        b, end = e["data_offsets"]
        n = math.prod(e["shape"])
        if end - b != 4 * n or base + end > len(data):
            raise ValueError(f"{path}: tensor {name}: data_offsets {b}..{end} do not hold shape {e['shape']} in F32")
        out[name] = torch.frombuffer(data, dtype=torch.float32, count=n, offset=base + b).view(e["shape"])
    return out


# ---------------------------------------------------------------- the model (HF names)

class GPT2Attention(nn.Module):
    def __init__(self, C, H, P):
        super().__init__()
        self.H, self.D = H, C // H
        self.c_attn = Conv1D(C, 3 * C, 0.02)
        self.c_proj = Conv1D(C, C, 0.02)
        # HF's `bias` buffer: the causal mask, sliced per call (not a parameter, not in the file)
        self.register_buffer("bias", torch.tril(torch.ones(P, P, dtype=torch.bool)).view(1, 1, P, P),
                             persistent=False)

    def _heads(self, t):
        B, T, _ = t.shape
        return t.view(B, T, self.H, self.D).permute(0, 2, 1, 3)  # (batch, head, seq, head_dim)

    def forward(self, x, layer_past):
        C = self.H * self.D
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        if layer_past is not None:  # DynamicLayer.update: append by concatenation
            k = torch.cat((layer_past[0], k), dim=-2)
            v = torch.cat((layer_past[1], v), dim=-2)
        present = (k, v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)
        ql, kl = q.size(-2), k.size(-2)
        mask = self.bias[:, :, kl - ql:kl, :kl]
        w = torch.where(mask, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
        w = F.softmax(w, dim=-1)
        y = torch.matmul(w, v)
        B = y.size(0)
        y = y.permute(0, 2, 1, 3).contiguous().view(B, ql, C)
        return self.c_proj(y), present


class GPT2MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = Conv1D(C, 4 * C, 0.02)
        self.c_proj = Conv1D(4 * C, C, 0.02)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, C, H, P):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = GPT2Attention(C, H, P)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = GPT2MLP(C)

    def forward(self, x, layer_past):
        a, present = self.attn(self.ln_1(x), layer_past)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, present


class GPT2LMHeadModel(nn.Module):
    """GPT2Model's parameters without the `transformer.` prefix (as the gpt2 hub file stores them);
    the LM head is wte (tied), so there is no lm_head.weight."""

    def __init__(self, s):
        super().__init__()
        C, P = s["n_embd"], s["n_positions"]
        self.n_positions = P
        self.wte = nn.Embedding(s["vocab_size"], C)
        self.wpe = nn.Embedding(P, C)
        self.h = nn.ModuleList([GPT2Block(C, s["n_head"], P) for _ in range(s["n_layer"])])
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, ids, past=None, last_only=True):
        """Logits (of the last position only when last_only, as generate()'s logits_to_keep=1) and
        the new cache: one (keys, values) pair per layer, [batch, head, past + T, head_dim]."""
        past_len = past[0][0].size(-2) if past is not None else 0
        T = ids.size(1)
        if past_len + T > self.n_positions:
            raise ValueError(f"{past_len + T} positions exceed n_positions {self.n_positions}")
        pos = torch.arange(past_len, past_len + T, dtype=torch.long).unsqueeze(0)
        x = self.wte(ids) + self.wpe(pos)
        presents = []
        for i, blk in enumerate(self.h):
            x, p = blk(x, past[i] if past is not None else None)
            presents.append(p)
        x = self.ln_f(x)
        if last_only:
            x = x[:, -1:, :]
        return F.linear(x, self.wte.weight), presents


def random_state_dict(s, seed):
    """Random GPT-2 weights with HF's names, in fp32, for a benchmark that compares generated ids.
    GPT-2's own init (N(0, 0.02), residual projections / sqrt(2 n_layer), zero biases, unit
    LayerNorm gains) makes a random model repeat one token forever (measured: 1-2 distinct ids in
    24 steps), which would make the comparison of two sides' ids weak. Here the block matrices have
    std 0.08 (the residual projections 0.08 / sqrt(2 n_layer)), wte 0.1 and wpe 0.05: greedy
    generation then varies (gpt2-124M: 17-29 distinct ids in 32 steps of each of 8 prompts) and the
    top-2 logit margins stay wide against fp32 rounding (median 0.43 at logits up to ~15; cache
    against recompute differ by 2.5e-6 of the largest logit). Twice these block scales (0.16)
    varied as much but amplified rounding 20x (cache against recompute 5e-5), too close to the
    margins. Biases and LayerNorm parameters are random too, so a side that ignored a bias or a
    gain would generate other tokens."""
    g = torch.Generator().manual_seed(seed)
    C, L, V, P = s["n_embd"], s["n_layer"], s["vocab_size"], s["n_positions"]
    r = lambda *shape, std: torch.randn(*shape, generator=g) * std  # noqa: E731
    sd = {"wte.weight": r(V, C, std=0.1), "wpe.weight": r(P, C, std=0.05)}
    w, proj = 0.08, 0.08 / math.sqrt(2 * L)
    for i in range(L):
        p = f"h.{i}."
        sd.update({
            p + "ln_1.weight": 1.0 + r(C, std=0.1), p + "ln_1.bias": r(C, std=0.02),
            p + "attn.c_attn.weight": r(C, 3 * C, std=w), p + "attn.c_attn.bias": r(3 * C, std=0.02),
            p + "attn.c_proj.weight": r(C, C, std=proj), p + "attn.c_proj.bias": r(C, std=0.02),
            p + "ln_2.weight": 1.0 + r(C, std=0.1), p + "ln_2.bias": r(C, std=0.02),
            p + "mlp.c_fc.weight": r(C, 4 * C, std=w), p + "mlp.c_fc.bias": r(4 * C, std=0.02),
            p + "mlp.c_proj.weight": r(4 * C, C, std=proj), p + "mlp.c_proj.bias": r(C, std=0.02),
        })
    sd.update({"ln_f.weight": 1.0 + r(C, std=0.1), "ln_f.bias": r(C, std=0.02)})
    return sd


def build_model(s, state_dict, source):
    """The model of shape `s` holding `state_dict` (HF names; a `transformer.` prefix is dropped and
    lm_head.weight, tied to wte, is skipped, as gridformer's loader does). Every parameter must be
    present with its shape."""
    sd = {(k[12:] if k.startswith("transformer.") else k): v for k, v in state_dict.items()}
    sd = {k: v for k, v in sd.items() if k != "lm_head.weight" and not k.endswith((".attn.bias", ".attn.masked_bias"))}
    model = GPT2LMHeadModel(s)
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = sorted(set(want) - set(sd))
    extra = sorted(set(sd) - set(want))
    if missing or extra:
        raise ValueError(f"{source}: missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                         f"unexpected {extra[:5]}{'...' if len(extra) > 5 else ''} for shape {s}")
    for k, shape in want.items():
        if tuple(sd[k].shape) != shape:
            raise ValueError(f"{source}: {k} has shape {tuple(sd[k].shape)}, the model needs {shape}")
    model.load_state_dict(sd)
    model.eval()
    return model


def infer_shape(sd, n_head, n_positions=None):
    """GPT2Config of a state dict: layers from h.N., hidden and vocabulary from wte (heads are not
    recorded in the weights: given)."""
    sd = {(k[12:] if k.startswith("transformer.") else k): v for k, v in sd.items()}
    V, C = sd["wte.weight"].shape
    L = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("h."))
    return dict(n_layer=L, n_embd=C, n_head=n_head, vocab_size=V, n_positions=n_positions or sd["wpe.weight"].shape[0])


# ---------------------------------------------------------------- generation

def generate_cached(model, prompt, new_tokens):
    """Greedy generation with the KV cache (see the module doc). prompt: [B, T] int64. Returns
    (generated [B, new_tokens], prompt seconds, decode seconds, per-step last logits)."""
    logits_steps = []
    with torch.inference_mode():
        input_ids = prompt
        t0 = time.perf_counter()
        logits, past = model(input_ids, None, last_only=True)
        nxt = logits[:, -1, :].float().argmax(dim=-1)
        t1 = time.perf_counter()
        logits_steps.append(logits[:, -1, :])
        input_ids = torch.cat([input_ids, nxt[:, None]], dim=-1)
        for _ in range(new_tokens - 1):
            logits, past = model(nxt[:, None], past, last_only=True)
            nxt = logits[:, -1, :].float().argmax(dim=-1)
            logits_steps.append(logits[:, -1, :])
            input_ids = torch.cat([input_ids, nxt[:, None]], dim=-1)
        t2 = time.perf_counter()
    return input_ids[:, prompt.size(1):], t1 - t0, t2 - t1, logits_steps


def generate_recompute(model, prompt, new_tokens):
    """Greedy generation without a cache: every step runs the whole prefix (prompt and the tokens
    generated so far) and takes the last position's logits."""
    ids, logits_steps = prompt, []
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits, _ = model(ids, None, last_only=True)
            nxt = logits[:, -1, :].float().argmax(dim=-1)
            logits_steps.append(logits[:, -1, :])
            ids = torch.cat([ids, nxt[:, None]], dim=-1)
    return ids[:, prompt.size(1):], logits_steps


def teacher_forced_logits(model, prompt_row, generated_row):
    """Logits [new_tokens, V] of the positions that produce each generated token, from one pass over
    prompt + generated (no cache): what the benchmark uses to judge a divergence between two sides."""
    ids = torch.tensor([list(prompt_row) + list(generated_row)], dtype=torch.long)
    with torch.inference_mode():
        logits, _ = model(ids, None, last_only=False)
    T = len(prompt_row)
    return logits[0, T - 1:T - 1 + len(generated_row), :]


def check(args):
    s = SHAPES[args.shape]
    model = build_model(s, random_state_dict(s, args.seed), f"random {args.shape} (seed {args.seed})")
    g = torch.Generator().manual_seed(args.seed + 1)
    B, T, N = args.check_batch, args.check_prompt_len, args.check_new_tokens
    prompt = torch.randint(0, s["vocab_size"], (B, T), generator=g)
    cached, _, _, lc = generate_cached(model, prompt, N)
    recomputed, lr = generate_recompute(model, prompt, N)
    diff = max((a - b).abs().max().item() for a, b in zip(lc, lr))
    scale = max(b.abs().max().item() for b in lr)
    same = torch.equal(cached, recomputed)
    distinct = len(set(cached.flatten().tolist()))
    print(f"check {args.shape} (random weights, seed {args.seed}), batch {B}, prompt {T}, {N} new tokens: "
          f"ids {'equal' if same else 'DIFFER'}; last-position logits max |cache - recompute| {diff:.3g} "
          f"(largest |logit| {scale:.3g}, relative {diff / scale:.2g}, tolerance {args.check_rtol:g}); "
          f"{distinct} distinct generated ids")
    if not same:
        bad = (cached != recomputed).nonzero()[0].tolist()
        print(f"FAIL: first difference at sequence {bad[0]}, new token {bad[1]}: cache {cached[bad[0], bad[1]].item()}, "
              f"recompute {recomputed[bad[0], bad[1]].item()}")
        return 1
    if diff > args.check_rtol * scale:
        print(f"FAIL: logits differ by {diff:.3g} > {args.check_rtol:g} x {scale:.3g}")
        return 1
    print("PASS")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", help="safetensors file of HF-named fp32 GPT-2 weights")
    ap.add_argument("--n-head", type=int, default=12, help="attention heads (not in the weights)")
    ap.add_argument("--prompts", help="JSON file: a list of prompts, each a list of token ids (all the same length)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=None, help="prompts decoded together (default: all)")
    ap.add_argument("--rounds", type=int, default=3, help="timed generations")
    ap.add_argument("--warmup", type=int, default=1, help="untimed generations first")
    ap.add_argument("--warmup-new-tokens", type=int, default=None,
                    help="new tokens of a warm-up generation (default --new-tokens; a few suffice to create "
                         "the thread pool, the primitives and the cache's allocations)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: OMP_NUM_THREADS or nproc)")
    ap.add_argument("--ids-out", help="JSON lines {prompt, generated} per prompt (of the last timed round)")
    ap.add_argument("--json", action="store_true", help="print one JSON line of the results on stdout (logs on stderr)")
    ap.add_argument("--check", action="store_true", help="test the cache loop against a no-cache recompute, then exit")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="gpt2-tiny", help="--check's shape (gpt2-124M takes minutes)")
    ap.add_argument("--seed", type=int, default=0, help="--check's weights and prompt")
    ap.add_argument("--check-batch", type=int, default=2)
    ap.add_argument("--check-prompt-len", type=int, default=32)
    ap.add_argument("--check-new-tokens", type=int, default=24)
    ap.add_argument("--check-rtol", type=float, default=1e-5,
                    help="largest |logit| difference between cache and recompute over the largest |logit| "
                         "(fp32 sums in another order)")
    args = ap.parse_args()

    env_threads = os.environ.get("OMP_NUM_THREADS")
    K = args.threads or (int(env_threads) if env_threads else os.cpu_count())
    torch.set_num_threads(K)
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else (lambda *a: print(*a, flush=True))
    if env_threads != str(K):
        log(f"warning: OMP_NUM_THREADS={env_threads!r} but {K} threads; set OMP_NUM_THREADS={K} "
            f"(the OpenMP pool is sized from it at startup)")
    if args.check:
        sys.exit(check(args))
    if not args.weights or not args.prompts:
        ap.error("--weights and --prompts are needed (or --check)")

    sd = load_safetensors(args.weights)
    s = infer_shape(sd, args.n_head)
    model = build_model(s, sd, args.weights)
    with open(args.prompts) as f:
        prompts = json.load(f)
    if not prompts or len({len(p) for p in prompts}) != 1:
        raise SystemExit(f"{args.prompts}: needs one or more prompts, all of the same length (no padding here)")
    B = args.batch or len(prompts)
    if len(prompts) % B:
        raise SystemExit(f"{len(prompts)} prompts do not split into batches of {B}")
    T, N = len(prompts[0]), args.new_tokens
    batches = [torch.tensor(prompts[i:i + B], dtype=torch.long) for i in range(0, len(prompts), B)]
    log(f"torch {torch.__version__}, threads {torch.get_num_threads()}, GPT-2 L={s['n_layer']} C={s['n_embd']} "
        f"H={s['n_head']} V={s['vocab_size']}, {len(prompts)} prompts of {T} tokens, batch {B}, {N} new tokens")

    rounds = []
    for r in range(args.warmup + args.rounds):
        pt = dt = 0.0
        gens = []
        timed = r >= args.warmup
        for b in batches:
            gen, p_s, d_s, _ = generate_cached(model, b, N if timed else (args.warmup_new_tokens or N))
            pt, dt = pt + p_s, dt + d_s
            gens.append(gen)
        P, D = len(prompts) * T, len(prompts) * (gens[0].size(1) - 1)
        row = {"prompt_tokens": P, "prompt_seconds": pt, "prompt_tokens_per_s": P / pt,
               "decode_tokens": D, "decode_seconds": dt, "decode_tokens_per_s": D / dt if dt > 0 else None}
        log(f"generation {r + 1}{'' if timed else ' (warmup)'}: {P} prompt tokens in {pt:.3f} s "
            f"({P / pt:.1f} tokens/s), {D} decode tokens in {dt:.3f} s ({row['decode_tokens_per_s'] or 0:.2f} tokens/s)")
        if timed:
            rounds.append(row)
            last = torch.cat(gens)
    med = {k: statistics.median(r[k] for r in rounds) for k in ("prompt_seconds", "decode_seconds",
                                                                 "prompt_tokens_per_s", "decode_tokens_per_s")}
    if args.ids_out:
        with open(args.ids_out, "w") as f:
            for p, g in zip(prompts, last.tolist()):
                f.write(json.dumps({"prompt": p, "generated": g}) + "\n")
    res = {"impl": "pytorch", "torch_version": torch.__version__, "threads": torch.get_num_threads(),
           "prompts": len(prompts), "batch": B, "prompt_len": T, "new_tokens": N,
           "prompt_tokens": len(prompts) * T, "decode_tokens": len(prompts) * (N - 1),
           "rounds": rounds, "median": med, "generated": last.tolist()}
    if args.json:
        print(json.dumps(res))
    else:
        print(f"median of {len(rounds)}: prompt {med['prompt_tokens_per_s']:.1f} tokens/s, "
              f"decode {med['decode_tokens_per_s']:.2f} tokens/s")


if __name__ == "__main__":
    main()
