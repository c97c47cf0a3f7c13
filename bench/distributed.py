#!/usr/bin/env python3
"""Data parallel against threads, and bytes on the wire, measured in one run on this machine.

    python3 bench/distributed.py [--steps 6] [--rounds 5] [--build build] [--no-throughput] [--no-bytes] [--breakdown]

1. Throughput. gpt2-tiny (4 layers, hidden 256, 4 heads, vocab 50257, seq 256, global batch 8,
   dropout 0, RandomTokens, AdamW + clipping: the shape and YAML of bench/train_vs_pytorch.py)
   trained as
     one    1 rank x OMP_NUM_THREADS=2, batch_size 8
     dp2    2 ranks x 1 thread under mpirun, data_parallel 2, batch_size 4
     mp2    2 ranks x 1 thread, model_parallel 2, vocab_emb_dp False, batch_size 8
     zero   2 ranks x 1 thread, data_parallel 2 + parallel.enable_parallel_optimizer, batch_size 4
   in interleaved rounds (one, dp2, mp2, zero, one, dp2, ...). The first step of each run is not
   timed; a layout's figure is the median tokens/s (rank 0's metrics.jsonl) over all timed steps
   of all rounds, and the ratio is against `one`.

2. Bytes on the wire. For every layout, the bytes each rank sent per step in the tensor, data and
   world groups (output_dir/resources.json divided by train_steps) against a count derived here
   from the model shape and the layout alone: the flat parameter arena (each parameter's local
   numel rounded up to 16 floats), N = B*T token rows, hidden C, layers L, and the ring formulas
   with the chunking of shard_begin() in parallel/communicator.cpp (an all-reduce is a
   reduce-scatter then an all-gather; in a ring of p ranks, rank r sends every chunk but its own
   in the reduce-scatter and every chunk but chunk r+1 in the all-gather). Besides the throughput
   layouts, gpt2-tiny runs briefly as mp2 with vocab_emb_dp True and as mp2 + sequence parallel
   (both vocabulary layouts), and a small model runs on 3 ranks (dp3, dp3 + ZeRO: chunks of
   unequal size) and on 4 (dp2 x mp2 + sequence parallel + ZeRO).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {
    # bench/train_vs_pytorch.py's gpt2-tiny (max_position_embeddings 1024 as there)
    "gpt2-tiny": dict(vocab_size=50257, seq_length=256, max_position_embeddings=1024, hidden_size=256, num_layers=4,
                      num_heads=4, global_batch=8),
    # small enough that a run is start-up time; vocabulary 101 is padded to 128 (256 when split over 2)
    "small": dict(vocab_size=101, seq_length=16, max_position_embeddings=16, hidden_size=32, num_layers=2,
                  num_heads=4, global_batch=12),
}
EXPAND = 4       # model_config.expand_ratio default
PAD = 128        # model_config vocab_pad_multiple
ALIGN = 16       # Placement rounds each parameter up to 16 floats
BUCKETS = 4      # parallel_config.gradient_aggregation_group default
F32, F64 = 4, 8


class Layout:
    def __init__(self, name, model, dp=1, mp=1, sp=False, vocab_emb_dp=True, zero=False, threads=1, tag=None):
        self.name, self.model, self.dp, self.mp, self.sp = name, model, dp, mp, sp
        self.tag = tag or name
        self.vocab_emb_dp, self.zero, self.threads = vocab_emb_dp, zero, threads

    @property
    def world(self):
        return self.dp * self.mp

    @property
    def batch(self):  # per rank (runner_config.batch_size): the global batch split over dp
        return MODELS[self.model]["global_batch"] // self.dp


THROUGHPUT = [
    Layout("one (1 rank x 2 threads)", "gpt2-tiny", threads=2, tag="one"),
    Layout("dp2 (2 ranks x 1 thread)", "gpt2-tiny", dp=2, tag="dp2"),
    Layout("mp2, vocab_emb_dp False", "gpt2-tiny", mp=2, vocab_emb_dp=False, tag="mp2"),
    Layout("dp2 + ZeRO-1", "gpt2-tiny", dp=2, zero=True, tag="dp2+zero"),
]
BYTES_ONLY = [
    Layout("mp2, vocab_emb_dp True", "gpt2-tiny", mp=2),
    Layout("mp2 + SP, vocab_emb_dp False", "gpt2-tiny", mp=2, sp=True, vocab_emb_dp=False),
    Layout("mp2 + SP, vocab_emb_dp True", "gpt2-tiny", mp=2, sp=True),
    Layout("small dp3", "small", dp=3),
    Layout("small dp3 + ZeRO-1", "small", dp=3, zero=True),
    Layout("small dp2 x mp2 + SP + ZeRO-1, vocab_emb_dp False", "small", dp=2, mp=2, sp=True, vocab_emb_dp=False,
           zero=True),
]


# ---------------------------------------------------------------------------------------------
# Running gridformer

def write_config(lay, steps, path, out):
    m = MODELS[lay.model]
    cfg = f"""
seed: 1
output_dir: {out}
runner_config: {{batch_size: {lay.batch}, train_steps: {steps}}}
runner_wrapper: {{use_clip_grad: True, max_grad_norm: 1.0}}
optimizer: {{type: AdamWeightDecay, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: 0.1}}
lr_schedule: {{type: constant, learning_rate: 1.0e-4}}
train_dataset: {{data_loader: {{type: RandomTokens, seed: 0}}}}
callbacks: [{{type: MFLossMonitor, per_print_times: 1}}]
parallel: {{enable_parallel_optimizer: {lay.zero}}}
parallel_config: {{data_parallel: {lay.dp}, model_parallel: {lay.mp}, use_seq_parallel: {lay.sp},
                  vocab_emb_dp: {lay.vocab_emb_dp}}}
model:
  arch: {{type: GPT2LMHeadModel}}
  model_config: {{type: GPT2Config, vocab_size: {m['vocab_size']}, seq_length: {m['seq_length']},
                 max_position_embeddings: {m['max_position_embeddings']}, hidden_size: {m['hidden_size']},
                 num_layers: {m['num_layers']}, num_heads: {m['num_heads']},
                 hidden_act: gelu_new, hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0}}
"""
    with open(path, "w") as f:
        f.write(cfg)


def run(lay, steps, build, work, tag):
    """Trains `lay` for `steps` steps; returns (timed metrics rows, resources.json)."""
    out = os.path.join(work, tag)
    shutil.rmtree(out, ignore_errors=True)
    cfg = os.path.join(work, tag + ".yaml")
    write_config(lay, steps, cfg, out)
    binary = os.path.join(build, "bin", "gridformer")
    env = dict(os.environ, OMP_NUM_THREADS=str(lay.threads), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
    cmd = [binary, "train", "--config", cfg]
    if lay.world > 1:
        cmd = ["mpirun", "-np", str(lay.world), "--oversubscribe"] + cmd
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"{lay.name}: `{' '.join(cmd)}` failed ({p.returncode}):\n" + p.stdout[-3000:])
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in l]  # not run_start
    with open(os.path.join(out, "resources.json")) as f:
        res = json.load(f)
    return rows[1:], res  # step 1 is warm-up


# ---------------------------------------------------------------------------------------------
# The analytic count, from the model shape and the layout

def shard_begin(n, parts, k):  # parallel/communicator.cpp
    base, extra = divmod(n, parts)
    return k * base + min(k, extra)


def chunk(n, p, k):
    k %= p
    return shard_begin(n, p, k + 1) - shard_begin(n, p, k)


def ring_sent(kind, n, p, r):
    """Elements rank r of a ring of p sends for one collective over n elements."""
    if p == 1:
        return 0
    rs = n - chunk(n, p, r)          # every chunk but its own
    ag = n - chunk(n, p, r + 1)      # every chunk but chunk r+1
    return {"allreduce": rs + ag, "reduce_scatter": rs, "allgather": ag}[kind]


def padded_vocab(v, tp):
    m = PAD * tp
    return (v + m - 1) // m * m


def param_list(m, tp, vocab_split):
    """(name, local numel, replicated across the tensor group) in arena order (models/arch/gpt2.cpp)."""
    C, L, F, V = m["hidden_size"], m["num_layers"], EXPAND * m["hidden_size"], m["vocab_size"]
    split = vocab_split and tp > 1
    Vp = padded_vocab(V, tp if split else 1)
    ps = [("wte", (Vp // tp if split else Vp) * C, not split),
          ("wpe", m["max_position_embeddings"] * C, True)]
    for l in range(L):
        ps += [(f"h{l}.ln_1.w", C, True), (f"h{l}.ln_1.b", C, True),
               (f"h{l}.c_attn.w", C * 3 * C // tp, False), (f"h{l}.c_attn.b", 3 * C // tp, False),
               (f"h{l}.attn.c_proj.w", C // tp * C, False), (f"h{l}.attn.c_proj.b", C, True),
               (f"h{l}.ln_2.w", C, True), (f"h{l}.ln_2.b", C, True),
               (f"h{l}.c_fc.w", C * F // tp, False), (f"h{l}.c_fc.b", F // tp, False),
               (f"h{l}.mlp.c_proj.w", F // tp * C, False), (f"h{l}.mlp.c_proj.b", C, True)]
    ps += [("ln_f.w", C, True), ("ln_f.b", C, True)]
    out, off = [], 0
    for name, n, rep in ps:
        out.append((name, off, n, rep))
        off += (n + ALIGN - 1) // ALIGN * ALIGN
    return out, off


def buckets(params, total, groups=BUCKETS):
    """Gradient buckets (parallel/grad_sync.cpp): cut from the end at parameter boundaries; a
    parameter larger than total/groups is a bucket of its own and the rest is cut into ~groups."""
    groups = max(1, groups)
    span = [(params[i + 1][1] if i + 1 < len(params) else total) - params[i][1] for i in range(len(params))]
    big = [sp > total // groups for sp in span]
    target = max(1, (total - sum(sp for sp, bg in zip(span, big) if bg)) // groups)
    out, end = [], total
    for i in range(len(params) - 1, -1, -1):
        b = 0 if i == 0 else params[i][1]
        if i == 0 or big[i] or big[i - 1] or end - b >= target:
            out.append((b, end))
            end = b
    return out


def collectives(lay):
    """Every collective of one training step: (group, kind, elements, bytes per element, what)."""
    m = MODELS[lay.model]
    C, L = m["hidden_size"], m["num_layers"]
    N = lay.batch * m["seq_length"]
    NC = N * C
    tp, dp = lay.mp, lay.dp
    vp = not lay.vocab_emb_dp and tp > 1
    sp = lay.sp and tp > 1
    params, total = param_list(m, tp, not lay.vocab_emb_dp)
    ev = []  # (group, kind, elements, bytes per element, what)
    if lay.world > 1:
        ev.append(("world", "allreduce", 1, F64, "stop signal (max)"))
    if dp > 1:
        ev.append(("dp", "allreduce", 1, F64, "loss"))
        if lay.zero:
            ev.append(("dp", "reduce_scatter", total, F32, f"gradient arena ({total} floats)"))
            ev.append(("dp", "allgather", total, F32, "parameter arena"))
            ev.append(("dp", "allreduce", 1, F64, "gradient norm (shards)"))
        else:
            for b, e in buckets(params, total):
                ev.append(("dp", "allreduce", e - b, F32, f"gradient bucket [{b}, {e})"))
    if tp > 1:
        ev.append(("tp", "allreduce", 1, F64, "gradient norm"))
        if not sp:
            ev += [("tp", "allreduce", NC, F32, "row-parallel output (fwd)")] * (2 * L)
            ev += [("tp", "allreduce", NC, F32, "column-parallel input gradient (bwd)")] * (2 * L)
            if vp:
                ev.append(("tp", "allreduce", NC, F32, "vocab-parallel embedding (fwd)"))
                ev.append(("tp", "allreduce", NC, F32, "LM head input gradient (bwd)"))
        else:
            ev += [("tp", "allgather", NC, F32, "column-parallel input (fwd)")] * (2 * L)
            ev += [("tp", "reduce_scatter", NC, F32, "row-parallel output (fwd)")] * (2 * L)
            ev += [("tp", "allgather", NC, F32, "row-parallel output gradient (bwd)")] * (2 * L)
            ev += [("tp", "allgather", NC, F32, "column-parallel input again (bwd)")] * (2 * L)
            ev += [("tp", "reduce_scatter", NC, F32, "column-parallel input gradient (bwd)")] * (2 * L)
            if vp:
                ev.append(("tp", "reduce_scatter", NC, F32, "vocab-parallel embedding (fwd)"))
                ev.append(("tp", "allgather", NC, F32, "LM head input (fwd)"))
                ev.append(("tp", "reduce_scatter", NC, F32, "LM head input gradient (bwd)"))
                ev.append(("tp", "allgather", NC, F32, "embedding output gradient (bwd)"))
            else:
                ev.append(("tp", "allreduce", 1, F64, "loss of the local rows"))
            # replicated parameters' partial gradients, this rank's ZeRO shard of them
            ev.append(("tp", "allreduce", "sp_grads", F32, "replicated parameters' gradients (SP)"))
        if vp:
            ev.append(("tp", "allreduce", N, F32, "cross-entropy row max"))
            ev.append(("tp", "allreduce", 2 * N, F32, "cross-entropy sum of exp, target logit"))
    return ev, params, total


def sp_grad_floats(params, lo, hi):
    """Floats of the replicated parameters inside the arena range [lo, hi) (numel, not the padding)."""
    return sum(max(0, min(off + n, hi) - max(off, lo)) for _, off, n, rep in params if rep)


def analytic(lay):
    """{(group, world rank): bytes per step} and the list of collectives."""
    ev, params, total = collectives(lay)
    out = {}
    for w in range(lay.world):
        tpr, dpr = w % lay.mp, (w // lay.mp) % lay.dp
        if lay.zero and lay.dp > 1:
            lo, hi = shard_begin(total, lay.dp, dpr), shard_begin(total, lay.dp, dpr + 1)
        else:
            lo, hi = 0, total
        sp_n = sp_grad_floats(params, lo, hi)
        for group, kind, n, eb, _ in ev:
            n = sp_n if n == "sp_grads" else n
            p, r = {"world": (lay.world, w), "dp": (lay.dp, dpr), "tp": (lay.mp, tpr)}[group]
            out[(group, w)] = out.get((group, w), 0) + eb * ring_sent(kind, n, p, r)
    return out, ev, total


def measured(lay, res):
    steps = res["steps"]
    out = {}
    for r in res["ranks"]:
        for group, key in (("tp", "tp_bytes_sent"), ("dp", "dp_bytes_sent"), ("world", "world_bytes_sent")):
            out[(group, r["rank"])] = r[key] / steps
    return out


# ---------------------------------------------------------------------------------------------

def fmt_bytes(b):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(b) < 1024 or unit == "GiB":
            return f"{b:.0f} B" if unit == "B" else f"{b:.2f} {unit}"
        b /= 1024


def bytes_table(results):
    """results: [(layout, resources.json)]. Prints the table; returns the rows that disagree."""
    print("\nBytes sent per rank per step: measured (resources.json / train_steps) against the analytic count")
    hdr = f"{'layout':52s} {'group':5s} {'ranks':>5s} {'measured B/step':>16s} {'analytic B/step':>16s} {'ratio':>8s}"
    print(hdr)
    print("-" * len(hdr))
    bad = []
    for lay, res in results:
        meas = measured(lay, res)
        ana, _, _ = analytic(lay)
        for group in ("dp", "tp", "world"):
            ranks = list(range(lay.world))
            pairs = [(meas[(group, w)], ana.get((group, w), 0)) for w in ranks]
            if all(a == 0 and mm == 0 for mm, a in pairs):
                continue
            # one row when every rank agrees, else one row per rank
            groups = [("all", pairs[0])] if len(set(pairs)) == 1 else [(str(w), pairs[w]) for w in ranks]
            for rk, (mm, a) in groups:
                ratio = mm / a if a else float("inf")
                flag = "" if mm == a else "  <-- differs"
                if mm != a:
                    bad.append((lay.name, group, rk, mm, a))
                print(f"{lay.name:52s} {group:5s} {rk:>5s} {mm:16,.0f} {a:16,.0f} {ratio:8.6f}{flag}")
    return bad


def optimizer_state_check(results):
    """AdamW's two moments over this rank's shard of the arena: a check of the arena size itself."""
    print("\nOptimizer state per rank (resources.json optimizer_state_bytes) against 2 moments x 4 B x the arena "
          "(its 1/dp shard under ZeRO)")
    bad = []
    for lay, res in results:
        _, total = param_list(MODELS[lay.model], lay.mp, not lay.vocab_emb_dp)
        cells = []
        for r in res["ranks"]:
            dpr = (r["rank"] // lay.mp) % lay.dp
            n = shard_begin(total, lay.dp, dpr + 1) - shard_begin(total, lay.dp, dpr) if lay.zero else total
            m = r["optimizer_state_bytes"]
            cells.append(f"{m:,.0f}" + ("" if m == 8 * n else f" (analytic {8 * n:,})"))
            if m != 8 * n:
                bad.append((lay.name, "optimizer state", r["rank"], m, 8 * n))
        same = len(set(cells)) == 1
        print(f"  {lay.name:52s} " + (f"all ranks {cells[0]}" if same else ", ".join(cells))
              + ("" if any("analytic" in c for c in cells) else "  = analytic"))
    return bad


def breakdown(lay):
    ev, params, total = collectives(lay)
    if lay.zero and lay.dp > 1:
        per_dp = [sp_grad_floats(params, shard_begin(total, lay.dp, k), shard_begin(total, lay.dp, k + 1))
                  for k in range(lay.dp)]
        sp_text = "/".join(map(str, per_dp)) + " (by data-parallel rank: its ZeRO shard)"
    else:
        sp_text = str(sp_grad_floats(params, 0, total))
    seen = {}
    for group, kind, n, eb, what in ev:
        n = sp_text if n == "sp_grads" else n
        key = (group, kind, n, eb, what)
        seen[key] = seen.get(key, 0) + 1
    parts = []
    for (group, kind, n, eb, what), k in seen.items():
        parts.append(f"{group}: {k}x {kind} of {n} x {eb} B ({what})")
    return f"{lay.name} (arena {total} floats per rank):\n    " + "\n    ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6, help="steps per throughput run (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--bytes-steps", type=int, default=2, help="steps of the runs made for the byte count only")
    ap.add_argument("--no-throughput", action="store_true", help="byte count only (one short run per layout)")
    ap.add_argument("--no-bytes", action="store_true", help="throughput only")
    ap.add_argument("--breakdown", action="store_true", help="list each layout's collectives")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.build, "bin", "gridformer")):
        sys.exit(f"{args.build}/bin/gridformer not found: build it (or pass --build DIR)")
    t_start = time.time()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start; gpt2-tiny "
          f"(4 L, 256 h, 4 heads, V 50257, T 256, global batch 8); {args.steps} steps per run "
          f"(first not timed), {args.rounds} rounds", flush=True)
    results = []  # (layout, resources.json) for the byte table
    with tempfile.TemporaryDirectory() as work:
        if not args.no_throughput:
            steps = {l.name: [] for l in THROUGHPUT}
            per_round = {l.name: [] for l in THROUGHPUT}
            last = {}
            for r in range(args.rounds):
                line = []
                for i, lay in enumerate(THROUGHPUT):
                    rows, res = run(lay, args.steps, args.build, work, f"tp{i}")
                    steps[lay.name] += rows
                    med = statistics.median(x["tokens_per_s"] for x in rows)
                    per_round[lay.name].append(med)
                    last[lay.name] = (lay, res)
                    line.append(f"{lay.tag} {med:.1f}")
                print(f"  round {r + 1}: " + ", ".join(line) + " tok/s", flush=True)
            print(f"\nThroughput (median over {args.steps - 1} timed steps x {args.rounds} rounds; "
                  f"load average {os.getloadavg()[0]:.2f} at the end)")
            hdr = f"{'layout':28s} {'ranks x thr':>11s} {'tok/s':>8s} {'step ms':>8s} {'vs one':>7s}  per-round medians"
            print(hdr)
            print("-" * len(hdr))
            base = statistics.median(x["tokens_per_s"] for x in steps[THROUGHPUT[0].name])
            for lay in THROUGHPUT:
                rows = steps[lay.name]
                tok = statistics.median(x["tokens_per_s"] for x in rows)
                ms = statistics.median(x["step_ms"] for x in rows)
                print(f"{lay.name:28s} {lay.world:>5d} x {lay.threads:<3d} {tok:8.1f} {ms:8.1f} {tok / base:6.3f}x  "
                      + ", ".join(f"{v:.1f}" for v in per_round[lay.name]))
            print("\nPer rank at the end of a run (resources.json): peak RSS, optimizer state")
            for lay in THROUGHPUT:
                res = last[lay.name][1]
                print(f"  {lay.name:28s} " + "; ".join(
                    f"rank {r['rank']}: {fmt_bytes(r['peak_rss_bytes'])}, {fmt_bytes(r['optimizer_state_bytes'])}"
                    for r in res["ranks"]))
            results += [last[l.name] for l in THROUGHPUT if l.world > 1]
        if not args.no_bytes:
            extra = BYTES_ONLY + ([l for l in THROUGHPUT if l.world > 1] if args.no_throughput else [])
            for i, lay in enumerate(extra):
                results.append((lay, run(lay, args.bytes_steps, args.build, work, f"b{i}")[1]))
            bad = bytes_table(results)
            if args.breakdown:
                print()
                for lay, _ in results:
                    print(breakdown(lay))
            bad += optimizer_state_check(results)
            print("\nall measured counts equal the analytic ones" if not bad else
                  f"\n{len(bad)} row(s) differ: see above")
    print(f"\ntotal time {time.time() - t_start:.0f} s")
    return 1 if (not args.no_bytes and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
