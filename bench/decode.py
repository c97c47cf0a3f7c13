#!/usr/bin/python3
"""Decode speed of gridformer predict against PyTorch's KV-cache loop, gpt2-124M fp32, same weights.

    /usr/bin/python3 bench/decode.py [--gridformer build/bin/gridformer] [--batches 1,8] [--prompt-len 128]
                                     [--new-tokens 64] [--rounds 3] [--threads 2] [--wait-idle S]
                                     [--json bench/results/DATE-decode.json]

Weights: gpt2-124M (12 layers, 768, 12 heads, vocabulary 50257, 1024 positions) with random fp32
values written once as a Hugging Face-named safetensors file (bench/torch_decode.py's
random_state_dict, whose scales make greedy generation vary; cached under --cache-dir, rewritten
when its metadata does not match). Both sides load that file: gridformer through load_checkpoint
(its Hugging Face loader), PyTorch through bench/torch_decode.py.

Prompts: --prompt-len random token ids each (the same for both sides and every round); batch B
decodes the first B of them together. --new-tokens greedy tokens per prompt, end-of-text off
(eos_token_id -1), so every sequence generates all of them.

Each round runs, per batch size, `gridformer predict` (one generation per process: its prompt pass
and decode, as a user runs it; metrics.jsonl's `predict` event) and bench/torch_decode.py (one
untimed warm-up generation, then one timed, in its own process); the order of the two alternates from
round to round (PyTorch's warm-up generates 8 tokens). Both with --threads threads (OMP_NUM_THREADS,
torch.set_num_threads) and the environment's OPENBLAS_CORETYPE. The figures:
prompt tokens/s = B x prompt length / prompt time, and decode tokens/s = B x (new tokens - 1) /
decode time: the first generated token comes out of the prompt pass and counts as prompt time on
both sides. Medians over the rounds; ratio = gridformer's median / PyTorch's.

Ids: every round, each side's generated ids must equal the other's. fp32 sums in another order can
flip the argmax where the top two logits are within rounding of each other, after which the two
continuations differ legitimately; so at the first differing token the script takes PyTorch's
logits at that position (one pass over prompt + the common prefix) and compares the logits of the two
candidates: within --tie-tol of the largest |logit| it is reported as a near-tie (the tokens before
it compared equal, the ones after it not compared), otherwise the sides disagree and the script
exits with status 1 after writing its results.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_decode as td  # noqa: E402
import train_vs_pytorch as tvp  # noqa: E402  (CpuWatch, wait_for_idle, the YAML of a gpt2-124M run)

SHAPE = "gpt2-124M"
FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
         "amx_int8")
WEIGHTS_FORMAT = "decodebench-1"  # bump when random_state_dict changes: the cached file is rewritten


def cpu_info():
    """lscpu's model name and the instruction-set flags that decide the GEMM kernels."""
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name, flags = "?", []
    for line in out.splitlines():
        if line.startswith("Model name:"):
            name = line.split(":", 1)[1].strip()
        if line.startswith("Flags:"):
            have = set(line.split(":", 1)[1].split())
            flags = [f for f in FLAGS if f in have]
    return {"model_name": name, "cpus": os.cpu_count(), "flags": flags,
            "missing_flags": [f for f in FLAGS if f not in flags]}


def weights_file(cache_dir, seed):
    """The cached safetensors file of random gpt2-124M weights (written on first use)."""
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, f"gpt2-124M-random-seed{seed}.safetensors")
    meta = {"format": WEIGHTS_FORMAT, "seed": str(seed), "shape": SHAPE}
    if os.path.exists(path):
        try:
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                if json.loads(f.read(n)).get("__metadata__") == meta:
                    return path
        except (OSError, ValueError):
            pass
        print(f"{path}: not this benchmark's weights (metadata differs); rewriting it", flush=True)
    t0 = time.time()
    td.save_safetensors(path, td.random_state_dict(td.SHAPES[SHAPE], seed), meta)
    print(f"wrote {path} ({os.path.getsize(path) / 2**20:.0f} MiB) in {time.time() - t0:.1f} s", flush=True)
    return path


def predict_yaml(out):
    """gridformer's config of the runs: the gpt2-124M model of the training benchmarks (GPT2Config,
    gelu_new, no dropout; its training keys are not used by predict)."""
    return tvp.gridformer_yaml(tvp.SHAPES[SHAPE], 1, 1.0, out)


def run_gridformer(binary, cfg, out, weights, prompts, new_tokens, threads, workdir, tag):
    """One `gridformer predict`: returns its predict event, generated ids per prompt and CPU shares."""
    ids_out = os.path.join(workdir, f"ids_{tag}.jsonl")
    metrics = os.path.join(out, "metrics.jsonl")
    for p in (ids_out, metrics):
        if os.path.exists(p):
            os.remove(p)
    cmd = [binary, "predict", "--config", cfg, "--load_checkpoint", weights, "--max_new_tokens", str(new_tokens),
           "--predict_batch_size", str(len(prompts)), "--use_past", "true",
           "--set", "model.model_config.eos_token_id=-1", "--ids_out", ids_out]
    for p in prompts:
        cmd += ["--predict_ids", " ".join(map(str, p))]
    watch = tvp.CpuWatch(threads)
    p = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS=str(threads)), capture_output=True, text=True)
    cpu_util, others = watch.stop()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({p.returncode}):\n{p.stderr[-3000:]}")
    events = [json.loads(l) for l in open(metrics) if l.strip()]
    ev = [e for e in events if e.get("event") == "predict"]
    if len(ev) != 1:
        raise RuntimeError(f"{metrics}: {len(ev)} predict events, expected one")
    rows = [json.loads(l) for l in open(ids_out) if l.strip()]
    if [r["prompt"] for r in rows] != prompts:
        raise RuntimeError(f"{ids_out}: the prompts it lists are not the ones given, in order")
    line = next((l for l in p.stderr.splitlines() if "predict:" in l and "tokens/s" in l), None)
    return {"event": ev[0], "generated": [r["generated"] for r in rows], "log_line": line,
            "cpu_util": cpu_util, "others": others}


def run_pytorch(weights, prompts_file, new_tokens, threads, workdir, tag):
    ids_out = os.path.join(workdir, f"torch_ids_{tag}.jsonl")
    cmd = [sys.executable, os.path.join(HERE, "torch_decode.py"), "--weights", weights, "--prompts", prompts_file,
           "--new-tokens", str(new_tokens), "--rounds", "1", "--warmup", "1", "--warmup-new-tokens", "8",
           "--threads", str(threads), "--json", "--ids-out", ids_out]
    watch = tvp.CpuWatch(threads)
    p = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS=str(threads)), capture_output=True, text=True)
    cpu_util, others = watch.stop()
    if p.returncode != 0:
        raise RuntimeError(f"torch_decode.py failed ({p.returncode}):\n{p.stderr[-3000:]}")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    return {"event": res["rounds"][0], "generated": res["generated"], "cpu_util": cpu_util, "others": others}


class Judge:
    """Compares two sides' greedy ids; judges a first difference with PyTorch's own logits."""

    def __init__(self, weights, tie_tol):
        self.weights, self.tie_tol, self.model = weights, tie_tol, None

    def compare(self, prompts, ours, theirs):
        """Per prompt: {"equal": True} or the first difference, judged (near_tie True/False)."""
        out = []
        for i, (p, a, b) in enumerate(zip(prompts, ours, theirs)):
            if a == b:
                out.append({"prompt": i, "equal": True})
                continue
            if len(a) != len(b):
                out.append({"prompt": i, "equal": False, "near_tie": False,
                            "why": f"{len(a)} generated ids against PyTorch's {len(b)}"})
                continue
            k = next(j for j in range(len(a)) if a[j] != b[j])
            if self.model is None:
                sd = td.load_safetensors(self.weights)
                self.model = td.build_model(td.infer_shape(sd, 12), sd, self.weights)
            logits = td.teacher_forced_logits(self.model, p, b[:k + 1])[k]
            la, lb, top = logits[a[k]].item(), logits[b[k]].item(), logits.abs().max().item()
            gap = lb - la
            out.append({"prompt": i, "equal": False, "index": k, "ours": a[k], "pytorch": b[k],
                        "pytorch_logit_ours": la, "pytorch_logit_pytorch": lb, "gap": gap, "max_abs_logit": top,
                        "near_tie": abs(gap) <= self.tie_tol * top})
        return out


def describe(cmp):
    bad = [c for c in cmp if not c["equal"]]
    if not bad:
        return f"ids equal ({len(cmp)} prompts)"
    parts = []
    for c in bad:
        if "index" not in c:
            parts.append(f"prompt {c['prompt']}: {c['why']}")
        else:
            parts.append(f"prompt {c['prompt']} token {c['index']}: ours {c['ours']}, PyTorch {c['pytorch']}, "
                         f"PyTorch's logits {c['pytorch_logit_ours']:.6f} / {c['pytorch_logit_pytorch']:.6f} "
                         f"(gap {c['gap']:.2g}, {'near-tie' if c['near_tie'] else 'NOT a near-tie'})")
    return f"ids equal for {len(cmp) - len(bad)} of {len(cmp)} prompts; " + "; ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gridformer", default=os.path.join(tvp.ROOT, "build", "bin", "gridformer"))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=0, help="weights (seed) and prompts (seed + 1)")
    ap.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "gridformer-decodebench"))
    ap.add_argument("--tie-tol", type=float, default=1e-4,
                    help="a first differing token is a near-tie when PyTorch's logits of the two candidates "
                         "differ by at most this times the largest |logit|")
    ap.add_argument("--wait-idle", type=float, default=0,
                    help="before each run wait (at most S s) for 5 s in which others used <= --quiet of the CPUs")
    ap.add_argument("--quiet", type=float, default=0.10)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    if not os.access(a.gridformer, os.X_OK):
        sys.exit(f"{a.gridformer}: no gridformer binary there; build it (cmake --build build) or give --gridformer")
    batches = [int(b) for b in a.batches.split(",")]
    cpu = cpu_info()
    print(f"CPU: {cpu['model_name']} ({cpu['cpus']} CPUs; {' '.join(cpu['flags']) or 'no AVX2'}; without: "
          f"{' '.join(cpu['missing_flags']) or '-'}), {a.threads} threads, torch {torch.__version__}", flush=True)
    print(f"{SHAPE} fp32, prompt {a.prompt_len} tokens, {a.new_tokens} new tokens, batches {batches}, "
          f"{a.rounds} rounds; gridformer {a.gridformer}", flush=True)
    weights = weights_file(a.cache_dir, a.seed)
    g = torch.Generator().manual_seed(a.seed + 1)
    all_prompts = torch.randint(0, 50257, (max(batches), a.prompt_len), generator=g).tolist()
    judge = Judge(weights, a.tie_tol)
    results = {"cpu": cpu, "threads": a.threads, "torch_version": torch.__version__, "shape": SHAPE, "dtype": "fp32",
               "prompt_len": a.prompt_len, "new_tokens": a.new_tokens, "rounds": a.rounds, "weights": weights,
               "gridformer": a.gridformer, "tie_tol": a.tie_tol,
               "counting": "prompt tokens/s = B*prompt_len / prompt pass (incl. the first generated token); "
                           "decode tokens/s = B*(new_tokens-1) / the remaining steps",
               "runs": {str(b): [] for b in batches}}
    failed = False
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "out")
        cfg = os.path.join(work, "predict.yaml")
        with open(cfg, "w") as f:
            f.write(predict_yaml(out))
        for rnd in range(a.rounds):
            for B in batches:
                prompts = all_prompts[:B]
                pf = os.path.join(work, f"prompts{B}.json")
                with open(pf, "w") as f:
                    json.dump(prompts, f)
                order = ("gridformer", "pytorch") if rnd % 2 == 0 else ("pytorch", "gridformer")
                row = {}
                for side in order:
                    if a.wait_idle:
                        waited, busy = tvp.wait_for_idle(a.quiet, a.wait_idle)
                        row[f"{side}_waited_s"], row[f"{side}_busy_before"] = waited, busy
                    if side == "gridformer":
                        row[side] = run_gridformer(a.gridformer, cfg, out, weights, prompts, a.new_tokens, a.threads,
                                                   work, f"{B}_{rnd}")
                    else:
                        row[side] = run_pytorch(weights, pf, a.new_tokens, a.threads, work, f"{B}_{rnd}")
                gf, pt = row["gridformer"], row["pytorch"]
                if gf["event"]["decode_tokens"] != pt["event"]["decode_tokens"] or \
                        gf["event"]["prompt_tokens"] != pt["event"]["prompt_tokens"]:
                    raise RuntimeError(f"batch {B}: gridformer counted {gf['event']['prompt_tokens']} prompt and "
                                       f"{gf['event']['decode_tokens']} decode tokens, PyTorch "
                                       f"{pt['event']['prompt_tokens']} and {pt['event']['decode_tokens']}: the "
                                       f"figures would not be comparable")
                row["ids"] = judge.compare(prompts, gf["generated"], pt["generated"])
                failed |= any(not c["equal"] and not c["near_tie"] for c in row["ids"])
                results["runs"][str(B)].append(row)
                print(f"round {rnd + 1} batch {B}: gridformer prompt {gf['event']['prompt_tokens_per_s']:.1f} tok/s, "
                      f"decode {gf['event']['decode_tokens_per_s']:.2f} tok/s (others {gf['others']:.2f}); PyTorch "
                      f"prompt {pt['event']['prompt_tokens_per_s']:.1f} tok/s, decode "
                      f"{pt['event']['decode_tokens_per_s']:.2f} tok/s (others {pt['others']:.2f}); "
                      f"{describe(row['ids'])}", flush=True)

    med = {}
    for B in batches:
        rows = results["runs"][str(B)]
        m = {f"{side}_{k}": statistics.median(r[side]["event"][k] for r in rows)
             for side in ("gridformer", "pytorch") for k in ("prompt_tokens_per_s", "decode_tokens_per_s")}
        m["prompt_ratio"] = m["gridformer_prompt_tokens_per_s"] / m["pytorch_prompt_tokens_per_s"]
        m["decode_ratio"] = m["gridformer_decode_tokens_per_s"] / m["pytorch_decode_tokens_per_s"]
        m["others_max"] = max(max(r["gridformer"]["others"], r["pytorch"]["others"]) for r in rows)
        med[str(B)] = m
    results["median"] = med
    print()
    print(f"medians of {a.rounds} rounds ({SHAPE} fp32, prompt {a.prompt_len}, {a.new_tokens} new tokens, "
          f"{a.threads} threads, {cpu['model_name']}):")
    print("| batch | gridformer prompt tok/s | PyTorch prompt tok/s | ratio | gridformer decode tok/s | "
          "PyTorch decode tok/s | ratio (target >= 1.5) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for B in batches:
        m = med[str(B)]
        print(f"| {B} | {m['gridformer_prompt_tokens_per_s']:.1f} | {m['pytorch_prompt_tokens_per_s']:.1f} | "
              f"{m['prompt_ratio']:.2f}x | {m['gridformer_decode_tokens_per_s']:.2f} | "
              f"{m['pytorch_decode_tokens_per_s']:.2f} | {m['decode_ratio']:.2f}x "
              f"{'PASS' if m['decode_ratio'] >= 1.5 else 'FAIL'} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"results in {a.json}")
    if failed:
        print("FAIL: the two sides generated different ids at a token that is not a near-tie (see above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
