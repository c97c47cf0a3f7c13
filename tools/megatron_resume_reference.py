#!/usr/bin/python3
"""A Megatron-LM training run's checkpoint, written by PyTorch, and what the run does after it: the reference for
resuming a Megatron checkpoint (tests/integration/megatron_resume.sh).

    /usr/bin/python3 tools/megatron_resume_reference.py --data PREFIX --out DIR [--tp 2] [--apex]
        [--distributed per-bucket|bucket-sizes|coalesced|coalesced-aligned [--dp 2] [--bucket 2000]]
        [--distributed per-dp-rank [--dp 3] [--bf16]]

A GPT-2 of tools/make_golden.py (Hugging Face's names; 2 layers, 16 wide, 4 heads, 32 positions; the tanh GELU that
Megatron's default bias_gelu_fusion computes; the 100 ids NullTokenizer --vocab-size 99 gives, their softmax over those
100: gridformer drops the rows Megatron pads the vocabulary with, and masks their logits, docs/megatron.md, so the
continued run is this model's; the checkpoint holds the embedding padded to 128 x TP rows as saver_megatron.py pads it)
takes Megatron's steps on the data of PREFIX (.bin/.idx written by tests/integration/lib.py; every document the same
period-8 pattern, so every sample of Megatron's GPTDataset, whatever its shuffle, is the same 33 tokens: the batches
need no transcription of the dataset's index). Each iteration k (from 1): the mean token cross entropy of the global
batch (lm loss); the gradients clipped as megatron/optimizer/clip_grads.py clip_grad_norm_fp32 does (coefficient
max_norm / (norm + 1e-6) when below 1); the learning rate OptimizerParamScheduler.get_lr gives after (k - 1) x G
samples (megatron/optimizer_param_scheduler.py at 285068c: linear warmup from 0 over lr_warmup_steps samples, then
cosine to min_lr over lr_decay_steps); torch.optim.AdamW on Megatron's param groups (megatron/optimizer/__init__.py
get_param_groups: weight decay except on '.bias' and 1-D parameters).

After ITERS_SAVED iterations the state is saved as Megatron's save_checkpoint saves it (megatron/checkpointing.py at
285068c, non-distributed FP32Optimizer): DIR/latest_checkpointed_iteration.txt, DIR/iter_0000003/mp_rank_TT/
model_optim_rng.pt with 'args', 'checkpoint_version' 3.0, 'iteration', 'model' (the legacy GPTModel layout of
tools/make_megatron_golden.py's Case, cut for --tp), 'optimizer' (the state_dict of a torch AdamW built over that
shard's parameters in named_parameters order and Megatron's groups, holding the moments laid out as their parameters
are: torch itself numbers and writes it), 'opt_param_scheduler'. --apex: the step counts as apex's FusedAdam keeps
them (in each param group, none per parameter). --distributed: as Megatron's distributed optimizer saves it (apex's
group step, args.use_distributed_optimizer True): 'optimizer' is DistributedOptimizer.state_dict() (the inner
state dict without 'state', each group without 'params'), and beside it distrib_optim.pt holds save_parameter_state's
buffer (distrib_buffer below) in the FORM of a Megatron version: per-bucket (core_r0.6.0: a list of padded bucket
tensors, per_bucket_numel and per_bucket_numel_unpadded), bucket-sizes (late 2023: the padded list and bucket_sizes
alone), coalesced (core_r0.7.0 on: one tensor of the unpadded buckets, buckets_coalesced, numel_unpadded),
coalesced-aligned (core_r0.9 on: the same with each parameter's start at a multiple of 64 elements); padding
holds NaN, so a reader that takes it diverges at once. per-dp-rank (Megatron from 2022 to mid-2023): model_rng.pt without
'optimizer', and each data-parallel rank's DistributedOptimizer.state_dict() with the scheduler in
mp_rank_TT_DDD/optim.pt (dp_rank_optims below); --bf16 saves the model in bf16 and the exact fp32 weights as the
optimizer's main shards, which a reader must take (the bf16 weights alone continue ~1e-3 away). Then the run goes on to ITERS_TOTAL; DIR/expected.json holds its
losses of iterations ITERS_SAVED + 1 .. ITERS_TOTAL and the arguments the run had.
"""
import argparse
import collections
import json
import math
import os
import sys

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import make_megatron_golden as mg  # noqa: E402
from make_golden import GPT2, init_weights  # noqa: E402
from lib import documents  # noqa: E402

torch.set_num_threads(1)

LAYERS, SEQ, VOCAB_ARG = 2, 32, 99
MICRO, GLOBAL = 2, 4
ITERS_SAVED, ITERS_TOTAL = 3, 13
LR, MIN_LR, WARMUP_ITERS, CLIP, WD, BETA2, EPS = 5e-3, 5e-4, 2, 1.0, 0.01, 0.95, 1e-8

# What the gridformer run is given (pretrain_gpt's arguments beside --data-path, --load and --train-iters).
ARGS = ["--num-layers", str(LAYERS), "--hidden-size", str(mg.HIDDEN), "--num-attention-heads", str(mg.HEADS),
        "--seq-length", str(SEQ), "--max-position-embeddings", str(mg.POSITIONS), "--micro-batch-size", str(MICRO),
        "--global-batch-size", str(GLOBAL), "--lr", str(LR), "--min-lr", str(MIN_LR), "--lr-decay-style", "cosine",
        "--lr-warmup-iters", str(WARMUP_ITERS), "--lr-decay-iters", str(ITERS_TOTAL), "--clip-grad", str(CLIP),
        "--weight-decay", str(WD), "--adam-beta2", str(BETA2), "--adam-eps", str(EPS), "--attention-dropout", "0",
        "--hidden-dropout", "0", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(VOCAB_ARG),
        "--split", "100,0,0", "--log-interval", "1", "--eval-iters", "0", "--seed", "1234"]


def megatron_lr(num_steps):
    """OptimizerParamScheduler.get_lr (285068c), its steps in samples: warmup then cosine decay."""
    warmup, decay = WARMUP_ITERS * GLOBAL, ITERS_TOTAL * GLOBAL
    if warmup > 0 and num_steps <= warmup:
        return LR * num_steps / warmup
    if num_steps > decay:
        return MIN_LR
    ratio = (num_steps - warmup) / (decay - warmup)
    return MIN_LR + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (LR - MIN_LR)


def no_wd(name, p):
    return name.endswith(".bias") or p.dim() == 1


def param_groups(named):
    """get_param_groups: [weight decay group, no weight decay group], each in named_parameters order."""
    return [dict(params=[p for n, p in named if not no_wd(n, p)], wd_mult=1.0, lr_mult=1.0, weight_decay=WD),
            dict(params=[p for n, p in named if no_wd(n, p)], wd_mult=0.0, lr_mult=1.0, weight_decay=0.0)]


def flat(state, prefix=""):
    """A Megatron model state dict's tensors in order, under dotted names (its parameters' named_parameters order)."""
    out = []
    for k, v in state.items():
        name = prefix + k
        out += flat(v, name + ".") if isinstance(v, dict) else [(name, v)]
    return out


def sample(prefix):
    """The one sample every index of the dataset gives: its documents are all the same period-8 pattern."""
    docs = documents(prefix)
    first = docs[0]
    assert all(d == first for d in docs) and len(first) % 8 == 0 and SEQ % 8 == 0
    period = first[:8]
    assert all(first[i] == period[i % 8] for i in range(len(first))), "the documents are not period-8"
    return torch.tensor([period[i % 8] for i in range(SEQ + 1)], dtype=torch.long)


def step(model, opt, tokens, k):
    x = tokens[:-1].unsqueeze(0).repeat(GLOBAL, 1)
    y = tokens[1:].unsqueeze(0).repeat(GLOBAL, 1)
    _, loss = model(x, y)  # the mean over the global batch's tokens: Megatron's lm loss
    opt.zero_grad()
    loss.backward()
    params = [p for p in model.parameters()]
    norm = torch.sqrt(sum(torch.sum(p.grad.double() ** 2) for p in params))
    coef = CLIP / (norm.item() + 1e-6)
    if coef < 1.0:
        for p in params:
            p.grad.mul_(coef)
    lr = megatron_lr((k - 1) * GLOBAL)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    return loss.item()


def distrib_buffer(named, moments, form, dp, bucket_size, shared=()):
    """save_parameter_state's state for one shard: one grad buffer of fp32 parameters (core_r0.6.0
    megatron/core/distributed/param_and_grad_buffer.py ParamAndGradBuffer: params[::-1], a bucket closed once it holds
    bucket_size elements or more, its end padded to a multiple of the data-parallel size; the gathered world tensor of a
    bucket is that whole padded bucket: "param" the main parameters, "exp_avg", "exp_avg_sq" Adam's moments).
    shared: the names of parameters whose `shared_embedding` is set (language_module.py: a tied embedding's copies at
    pp > 1), each of which _does_param_require_new_bucket gives a bucket of its own."""
    buckets, cur, size = [], [], 0
    for i in reversed(range(len(named))):
        own = named[i][0] in shared
        if own and cur:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(i)
        size += named[i][1].numel()
        if (bucket_size and size >= bucket_size) or own:
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)
    pick = {"param": lambda i: named[i][1].detach(), "exp_avg": lambda i: moments[0][i], "exp_avg_sq": lambda i: moments[1][i]}
    unpadded = [sum(named[i][1].numel() for i in b) for b in buckets]

    def padded(b, f):
        data = torch.cat([f(i).reshape(-1).float() for i in b])
        t = torch.full((-(-data.numel() // dp) * dp,), float("nan"))
        t[:data.numel()] = data
        return t
    if form == "coalesced-aligned":
        return aligned_buffer(named, pick, bucket_size)
    per_bucket = {k: [padded(b, f) for b in buckets] for k, f in pick.items()}
    if form == "coalesced":
        world = {k: torch.cat([t[:n] for t, n in zip(ts, unpadded)]) for k, ts in per_bucket.items()}
        world["numel_unpadded"] = sum(unpadded)
        return {"buckets_coalesced": True, 0: {(torch.float32, torch.float32): world}}
    sizes = [t.numel() for t in per_bucket["param"]]
    if form == "bucket-sizes":
        return {"bucket_sizes": sizes, 0: {torch.float32: per_bucket}}
    return {"per_bucket_numel": [{torch.float32: sizes}], "per_bucket_numel_unpadded": [{torch.float32: unpadded}],
            0: {torch.float32: per_bucket}}


def dp_rank_optims(named, moments, dp, bf16):
    """Mid-2023's distributed optimizer (megatron/optimizer/distrib_optimizer.py and megatron/model/distributed.py of
    2022 to mid-2023): DistributedOptimizer.state_dict() of each data-parallel rank. DDP's one grad buffer gives the
    parameters, walked in parameters() order, the elements from its end down (type_num_elements -= numel); rank r owns
    [r m, min(n, (r + 1) m)), m = ceil(n / dp) (build_model_gbuf_range); each parameter overlapping it is a 1-D shard of
    its flattened elements there (build_model_gbuf_param_range_map); the inner optimizer's groups are Megatron's param
    groups with the shards in buffer-map order (parameters() order), empty groups squeezed out
    (build_optimizer_group_ranges); 'shard_fp32_from_float16_groups' the fp32 main shards of bf16 parameters (empty
    lists for fp32 ones). apex's FusedAdam keeps the step in each group."""
    n = sum(p.numel() for _, p in named)
    start, below = [], n
    for _, p in named:
        below -= p.numel()
        start.append(below)
    size = -(-n // dp)
    out = []
    for r in range(dp):
        lo, hi = r * size, min(n, (r + 1) * size)
        shards = {}
        for i, (_, p) in enumerate(named):
            a, b = max(lo, start[i]), min(hi, start[i] + p.numel())
            if b > a:
                shards[i] = (a - start[i], b - start[i])
        groups = []
        for g in param_groups(named):
            members = [i for i, (_, p) in enumerate(named) if any(p is q for q in g["params"]) and i in shards]
            if members:
                groups.append((g, members))
        piece = {}
        opt_groups = []
        for g, members in groups:
            params = []
            for i in members:
                a, b = shards[i]
                params.append(torch.nn.Parameter(named[i][1].detach().reshape(-1)[a:b].clone()))
                piece[params[-1]] = i
            opt_groups.append(dict({k: v for k, v in g.items() if k != "params"}, params=params))
        inner = torch.optim.AdamW(opt_groups, lr=0.0, betas=(0.9, BETA2), eps=EPS, foreach=False)
        for grp in inner.param_groups:
            for q in grp["params"]:
                i = piece[q]
                a, b = shards[i]
                inner.state[q] = {"exp_avg": moments[0][i].reshape(-1)[a:b].clone(),
                                  "exp_avg_sq": moments[1][i].reshape(-1)[a:b].clone()}
        osd = inner.state_dict()
        for grp in osd["param_groups"]:
            grp["step"] = ITERS_SAVED
        masters = [[q.detach().clone() for q in grp["params"]] if bf16 else [] for grp in inner.param_groups]
        out.append({"optimizer": osd, "shard_fp32_from_float16_groups": masters})
    return out


def aligned_buffer(named, pick, bucket_size):
    """core_r0.9 on (megatron/core/distributed/param_and_grad_buffer.py, _pad_start_of_param_if_needed): each
    parameter starts at a multiple of 64 elements, a bucket closes once it holds bucket_size elements or more (its
    end, padded to lcm(dp, 128), is not saved), and get_parameter_state_dp_zero's coalesced tensor holds each bucket
    up to its last parameter's end (numel_unpadded), one after another. The gaps before aligned starts are NaN here
    (Megatron's are zeros) so that a reader that takes them is seen."""
    world = {k: [] for k in pick}
    used, total = 0, 0
    pending = {k: [] for k in pick}

    def close():
        nonlocal used, total
        for k in pick:
            world[k].append(torch.cat(pending[k]) if pending[k] else torch.zeros(0))
            pending[k] = []
        total += used
        used = 0
    for i in reversed(range(len(named))):
        start = -(-used // 64) * 64
        for k, f in pick.items():
            pending[k].append(torch.full((start - used,), float("nan")))
            pending[k].append(f(i).reshape(-1).float())
        used = start + named[i][1].numel()
        if bucket_size and used >= bucket_size:
            close()
    if used:
        close()
    out = {k: torch.cat(ts) for k, ts in world.items()}
    out["numel_unpadded"] = total
    return {"buckets_coalesced": True, 0: {(torch.float32, torch.float32): out}}


def to_bf16(state):
    return collections.OrderedDict((k, to_bf16(v) if isinstance(v, dict) else v.to(torch.bfloat16))
                                   for k, v in state.items())


def save(out, model, opt, tp, apex, distributed=None, dp=2, bucket_size=0, bf16=False):
    hf = collections.OrderedDict((n, p.detach().clone()) for n, p in model.named_parameters())
    moments = [collections.OrderedDict((n, opt.state[p][key].clone()) for n, p in model.named_parameters())
               for key in ("exp_avg", "exp_avg_sq")]
    it_dir = os.path.join(out, "iter_%07d" % ITERS_SAVED)
    for rank in range(tp):
        cases = [mg.Case("resume", "legacy", h, LAYERS, tp=tp, iteration=ITERS_SAVED) for h in [hf] + moments]
        states = [c.chunk_state(rank, 0, 0, 0, c.layer_dicts()) for c in cases]
        named = [(n, torch.nn.Parameter(t.clone())) for n, t in flat(states[0])]
        shard_opt = torch.optim.AdamW(param_groups(named), lr=megatron_lr((ITERS_SAVED - 1) * GLOBAL),
                                      betas=(0.9, BETA2), eps=EPS, foreach=False)
        for (n, p), (_, m), (_, v) in zip(named, flat(states[1]), flat(states[2])):
            shard_opt.state[p] = {"step": torch.tensor(float(ITERS_SAVED)), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
        osd = shard_opt.state_dict()
        if distributed == "per-dp-rank":  # mid-2023: model_rng.pt, and each data-parallel rank's optim.pt
            per_rank = dp_rank_optims(named, [[m for _, m in flat(states[1])], [v for _, v in flat(states[2])]], dp, bf16)
        elif distributed:  # DistributedOptimizer.state_dict(): the groups (apex's step in each), the state elsewhere
            groups = [{k: v for k, v in g.items() if k != "params"} for g in osd["param_groups"]]
            for g in groups:
                g["step"] = ITERS_SAVED
            shard_moments = [[m for _, m in flat(states[1])], [v for _, v in flat(states[2])]]
            distrib = distrib_buffer(named, shard_moments, distributed, dp, bucket_size)
            osd = {"optimizer": {"param_groups": groups}}
        elif apex:  # FusedAdam: the count in each group, none per parameter
            for s in osd["state"].values():
                del s["step"]
            for g in osd["param_groups"]:
                g["step"] = ITERS_SAVED
        args = cases[0].args()
        args.tokenizer_type = "NullTokenizer"
        args.vocab_size = VOCAB_ARG
        args.micro_batch_size, args.global_batch_size = MICRO, GLOBAL
        args.consumed_train_samples = ITERS_SAVED * GLOBAL
        args.lr, args.min_lr, args.weight_decay, args.clip_grad = LR, MIN_LR, WD, CLIP
        args.ffn_hidden_size = 4 * mg.HIDDEN
        args.use_distributed_optimizer = bool(distributed)
        if distributed == "coalesced-aligned" and bucket_size:  # the bucket size DistributedDataParallel had
            args.overlap_grad_reduce, args.ddp_bucket_size = True, bucket_size
        sched = {"max_lr": LR, "lr_warmup_steps": WARMUP_ITERS * GLOBAL, "num_steps": ITERS_SAVED * GLOBAL,
                 "lr_decay_style": "cosine", "lr_decay_steps": ITERS_TOTAL * GLOBAL, "min_lr": MIN_LR, "start_wd": WD,
                 "end_wd": WD, "wd_incr_style": "constant", "wd_incr_steps": ITERS_TOTAL * GLOBAL}
        d = os.path.join(it_dir, "mp_rank_%02d" % rank)
        os.makedirs(d, exist_ok=True)
        if distributed == "per-dp-rank":
            args.data_parallel_size = dp
            if bf16:  # the model's parameters in bf16; their fp32 main copies are the optimizer's
                args.bf16, args.params_dtype = True, torch.bfloat16
                states[0] = to_bf16(states[0])
            torch.save(collections.OrderedDict([("args", args), ("checkpoint_version", 3.0), ("iteration", ITERS_SAVED),
                                                ("model", states[0])]), os.path.join(d, "model_rng.pt"))
            for r, rank_osd in enumerate(per_rank):
                od = os.path.join(it_dir, "mp_rank_%02d_%03d" % (rank, r))
                os.makedirs(od, exist_ok=True)
                torch.save({"optimizer": rank_osd, "opt_param_scheduler": sched}, os.path.join(od, "optim.pt"))
            continue
        sd = collections.OrderedDict([
            ("args", args), ("checkpoint_version", 3.0), ("iteration", ITERS_SAVED), ("model", states[0]),
            ("optimizer", osd), ("opt_param_scheduler", sched)])
        torch.save(sd, os.path.join(d, "model_optim_rng.pt"))
        if distributed:
            torch.save(distrib, os.path.join(d, "distrib_optim.pt"))
    with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(ITERS_SAVED))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--apex", action="store_true")
    ap.add_argument("--distributed", choices=["per-bucket", "bucket-sizes", "coalesced", "coalesced-aligned",
                                                  "per-dp-rank"])
    ap.add_argument("--bf16", action="store_true", help="per-dp-rank: bf16 parameters, fp32 main shards")
    ap.add_argument("--dp", type=int, default=2, help="the data-parallel size the buckets are padded for")
    ap.add_argument("--bucket", type=int, default=0, help="the bucket size in elements (0: one bucket)")
    a = ap.parse_args()
    cfg = dict(vocab_size=VOCAB_ARG + 1, n_positions=mg.POSITIONS, n_embd=mg.HIDDEN, n_head=mg.HEADS, n_layer=LAYERS,
               layer_norm_epsilon=1e-5, activation="gelu_new")
    mg.VOCAB = cfg["vocab_size"]  # Case pads the embedding (and its moments) from these rows to 128 x TP
    model = GPT2(cfg)
    init_weights(model, torch.Generator().manual_seed(5))
    opt = torch.optim.AdamW(param_groups(list(model.named_parameters())), lr=0.0, betas=(0.9, BETA2), eps=EPS,
                            foreach=False)
    tokens = sample(a.data)
    losses = {}
    for k in range(1, ITERS_TOTAL + 1):
        loss = step(model, opt, tokens, k)
        if k > ITERS_SAVED:
            losses[k] = loss
        if k == ITERS_SAVED:
            save(a.out, model, opt, a.tp, a.apex, a.distributed, a.dp, a.bucket, a.bf16)
    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump({"losses": losses, "args": ARGS, "iters": ITERS_TOTAL, "saved": ITERS_SAVED,
                   "padded_vocab": cfg["vocab_size"]}, f, indent=1)


if __name__ == "__main__":
    main()
