#!/usr/bin/python3
"""Decode of a tiny model when another process keeps the cores busy: gridformer predict's prompt and
decode tokens/s on one thread on a quiet machine, against two threads with a competing busy process.

    /usr/bin/python3 bench/decode_busy.py [--gridformer [LABEL=]BIN ...] [--rounds 5]
                                          [--prompt-len 32] [--new-tokens 128] [--vocab 512]
                                          [--cases 1q,2q,1b,2b] [--out bench/results/DATE-decode_busy.txt]

Models: a 2-layer, 64-wide GPT-2 (4 heads, learned positions, LayerNorm, gelu_new) and a Llama of the
same size (4 heads, 2 kv heads, FFN 96, RoPE, RMSNorm, SwiGLU), random weights (seed 1), vocabulary
--vocab (a small one: with GPT-2's 50257 the LM head's matrix-vector product would be most of a
token), fp32, KV cache (use_past), batch 1, end-of-text off so every run generates --new-tokens.
One `gridformer predict` process per run; the figures are its metrics.jsonl `predict` event:
prompt tokens/s (the prompt pass, which makes the first token) and decode tokens/s (the other tokens).

Cases, each run once per round, in an order that rotates from round to round:
  1q  OMP_NUM_THREADS=1, nothing else started by the script (the reference);
  2q  OMP_NUM_THREADS=2, quiet;
  1b  OMP_NUM_THREADS=1 beside a busy process;
  2b  OMP_NUM_THREADS=2 beside a busy process (the case the target is about: >= 0.8 of 1q).
The busy process (`--busy-kind`, `--busy N` threads, 2 by default: one per core of a 2-vCPU machine)
is either N shell busy loops (`loop`) or PyTorch multiplying 128 x 128 matrices on N OpenMP threads
(`torch`: another numeric job, whose threads sleep and wake at each product's barrier as ours do);
it is started by the script before the run and killed after it. Other processes are not controlled: before
each run the script waits (at most --wait-idle s) for 2 s in which the CPUs were >= 90% idle, and
reports the idle share it saw (the lowest and the median) with the figures. Medians over the rounds; ratio = the
case's median / 1q's median of the same model.
"""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = {
    "gpt2": """model:
  arch: {{type: GPT2LMHeadModel}}
  model_config: {{type: GPT2Config, vocab_size: {vocab}, seq_length: {seq}, hidden_size: 64, num_layers: 2,
                 num_heads: 4, max_position_embeddings: {seq}, use_past: True, max_decode_length: {seq},
                 compute_dtype: float32, eos_token_id: -1}}
""",
    "llama": """model:
  arch: {{type: LlamaForCausalLM}}
  model_config: {{type: LlamaConfig, vocab_size: {vocab}, seq_length: {seq}, hidden_size: 64, num_layers: 2,
                 num_heads: 4, n_kv_heads: 2, intermediate_size: 96, use_past: True, max_decode_length: {seq},
                 compute_dtype: float32, eos_token_id: -1}}
""",
}
CASES = {"1q": (1, False), "2q": (2, False), "1b": (1, True), "2b": (2, True)}


def cpu_name():
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def cpu_idle(seconds=2.0):
    """Share of all CPUs idle over the next `seconds` (/proc/stat)."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)
    i0, t0 = read()
    time.sleep(seconds)
    i1, t1 = read()
    return (i1 - i0) / max(1, t1 - t0)


def wait_idle(max_wait, need=0.9):
    """Waits (at most max_wait s) for 2 s in which the CPUs were at least `need` idle; returns the last share."""
    end = time.time() + max_wait
    while True:
        idle = cpu_idle()
        if idle >= need or time.time() >= end:
            return idle


TORCH_BUSY = """
import torch
torch.set_num_threads({n})
a = torch.ones(128, 128)
while True:
    a.mm(a)
"""


def start_busy(n, kind):
    """The competing process, in a process group of its own (killed whole by stop_busy): `loop`, n shell
    busy loops; `torch`, PyTorch on n OpenMP threads multiplying 128 x 128 matrices in a loop (a numeric
    job whose threads meet at a barrier per product, as ours do)."""
    if kind == "loop":
        cmd = ["sh", "-c", " & ".join(["while :; do :; done"] * n)]
    else:
        cmd = ["/usr/bin/python3", "-c", TORCH_BUSY.format(n=n)]
    p = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=dict(os.environ, OMP_NUM_THREADS=str(n)))
    time.sleep(0.3 if kind == "loop" else 2.0)  # started (PyTorch's import takes a second or so)
    return p


def stop_busy(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def run_predict(binary, cfg, out, prompt, new_tokens, threads):
    """One `gridformer predict`: its metrics.jsonl predict event and the ids it generated."""
    if os.path.exists(os.path.join(out, "metrics.jsonl")):
        os.remove(os.path.join(out, "metrics.jsonl"))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    ids = os.path.join(out, "ids.jsonl")
    cmd = [binary, "predict", "--config", cfg, "--max_new_tokens", str(new_tokens), "--predict_batch_size", "1",
           "--use_past", "true", "--set", f"output_dir={out}", "--ids_out", ids,
           "--predict_ids", " ".join(map(str, prompt))]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-3000:])
        raise RuntimeError(f"gridformer predict failed ({p.returncode}): {' '.join(cmd)}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        ev = [e for e in map(json.loads, f) if e.get("event") == "predict"]
    if len(ev) != 1:
        raise RuntimeError(f"{out}: {len(ev)} predict events, expected one")
    with open(ids) as f:
        generated = [json.loads(line)["generated"] for line in f]
    return ev[0], generated


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gridformer", action="append", default=[],
                    help="[LABEL=]binary, repeatable: several binaries run interleaved (default build/bin/gridformer)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--busy", type=int, default=2, help="threads of the competing process")
    ap.add_argument("--busy-kind", choices=["loop", "torch"], default="torch", help="the competing process (start_busy)")
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--cases", default="1q,2q,1b,2b")
    ap.add_argument("--wait-idle", type=float, default=60.0,
                    help="before each run, wait up to this many seconds for 2 s with the CPUs >= 90%% idle")
    ap.add_argument("--out", default="", help="also write the report (text) here")
    ap.add_argument("--json", default="", help="also write every run's figures here")
    ap.add_argument("--probe", default=None,
                    help="GF_MACHINE_PROBE for every binary (a file, or off): one fp32 GEMM backend for all "
                         "(default: $GF_MACHINE_PROBE, else build/machine_probe.json if there is one, else off). "
                         "A binary copied elsewhere finds no probe beside it and would fall back to OpenBLAS, "
                         "and oneDNN's first products of a new shape cost the prompt pass tens of ms")
    args = ap.parse_args()
    probe = args.probe or os.environ.get("GF_MACHINE_PROBE")
    if not probe:
        built = os.path.join(ROOT, "build", "machine_probe.json")
        probe = built if os.path.exists(built) else "off"
    os.environ["GF_MACHINE_PROBE"] = probe  # every run inherits it
    bins = []
    for g in args.gridformer or [os.path.join(ROOT, "build/bin/gridformer")]:
        label, _, path = g.rpartition("=")
        bins.append((label or os.path.basename(os.path.dirname(os.path.realpath(path))), path))
    models = args.models.split(",")
    cases = args.cases.split(",")
    if "1q" not in cases:
        sys.exit("--cases must include 1q, the reference")
    seq = args.prompt_len + args.new_tokens
    prompt = [(7 * i + 3) % args.vocab for i in range(args.prompt_len)]
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    for label, path in bins:
        say(f"decode_busy: {label} = {os.path.realpath(path)}")
    say(f"CPU: {cpu_name()}, {os.cpu_count()} CPUs; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')}, GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', '')}, "
        f"GF_GEMM={os.environ.get('GF_GEMM', '')}, GF_MACHINE_PROBE={probe}")
    say(f"models: 2 layers, hidden 64, vocabulary {args.vocab}, fp32, batch 1, prompt {args.prompt_len} tokens, "
        f"{args.new_tokens} new tokens; busy process: {args.busy_kind}, {args.busy} threads; {args.rounds} rounds, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="gf-decode-busy-") as work:
        cfgs = {}
        for m in models:
            cfgs[m] = os.path.join(work, f"{m}.yaml")
            with open(cfgs[m], "w") as f:
                f.write("seed: 1\n" + MODELS[m].format(vocab=args.vocab, seq=seq))
        order = [(b, m, c) for b in bins for m in models for c in cases]
        for r in range(args.rounds):
            say(f"round {r + 1}: load average {os.getloadavg()[0]:.2f}")
            k = r % len(order)
            for (label, binary), m, c in order[k:] + order[:k]:
                threads, busy = CASES[c]
                idle = wait_idle(args.wait_idle)
                bp = start_busy(args.busy, args.busy_kind) if busy else None
                try:
                    ev, ids = run_predict(binary, cfgs[m], os.path.join(work, f"out-{m}-{c}"), prompt,
                                          args.new_tokens, threads)
                finally:
                    if bp:
                        stop_busy(bp)
                runs.append({"binary": label, "round": r + 1, "model": m, "case": c, "ids": ids,
                             "prompt_tps": ev["prompt_tokens_per_s"],
                             "decode_tps": ev["decode_tokens_per_s"], "idle_before": round(idle, 3)})
                time.sleep(0.2)
    say()
    say("| binary | model | case | threads | busy process | prompt tok/s | ratio to 1q | decode tok/s | ratio to 1q |")
    say("|---|---|---|---:|---|---:|---:|---:|---:|")
    for label, _ in bins:
        for m in models:
            med = {}
            for c in cases:
                rs = [x for x in runs if x["binary"] == label and x["model"] == m and x["case"] == c]
                med[c] = (statistics.median(x["prompt_tps"] for x in rs),
                          statistics.median(x["decode_tps"] for x in rs))
            for c in cases:
                threads, busy = CASES[c]
                p, d = med[c]
                say(f"| {label} | {m} | {c} | {threads} | {'yes' if busy else 'no'} | {p:.0f} | {p / med['1q'][0]:.2f} | "
                    f"{d:.0f} | {d / med['1q'][1]:.2f} |")
    say()
    idles = sorted(x["idle_before"] for x in runs)
    say(f"CPUs idle in the 2 s before each run: lowest {idles[0]:.2f}, median {statistics.median(idles):.2f}")
    for m in models:
        distinct = {json.dumps(x["ids"]) for x in runs if x["model"] == m}
        say(f"{m}: generated ids {'the same in every run' if len(distinct) == 1 else f'DIFFER ({len(distinct)} variants)'}"
            f" ({sum(1 for x in runs if x['model'] == m)} runs, every binary and case)")
    say("per round, decode tok/s:")
    for label, _ in bins:
        for m in models:
            for c in cases:
                rs = [x for x in runs if x["binary"] == label and x["model"] == m and x["case"] == c]
                say(f"  {label} {m} {c}: " + ", ".join(f"{x['decode_tps']:.0f}" for x in rs))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:  # a run a line
            f.write(f'{{"cpu": {json.dumps(cpu_name())}, "args": {json.dumps(vars(args))}, "runs": [\n')
            f.write(",\n".join(json.dumps(x) for x in runs) + "\n]}\n")


if __name__ == "__main__":
    main()
