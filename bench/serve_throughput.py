#!/usr/bin/python3
"""Tokens/s of `gridformer serve` at 1, 4 and 16 concurrent clients, beside `gridformer predict` decoding the same
number of prompts as one batch (the same model loop without HTTP or arrivals: what continuous batching can reach).

    /usr/bin/python3 bench/serve_throughput.py [--gridformer build/bin/gridformer] [--clients 1,4,16]
        [--requests 3] [--prompt-len 32] [--new-tokens 32] [--rounds 3] [--threads 2]

Model: gpt2-124M's shape (12 layers, 768, 12 heads, vocabulary 50257, 1024 positions) with the seed's random fp32
weights, end-of-text off (eos_token_id -1) so that every request generates all --new-tokens. The server runs with
--slots = the largest client count and --threads OpenMP threads.

Each round, per client count C: C threads each send --requests requests one after another (a prompt of --prompt-len
random token ids, greedy, max_tokens --new-tokens); served tokens/s = the completion tokens of all requests / the
wall time from the first send to the last answer (prompt passes included, as a client sees it), and the median
request latency. Then `gridformer predict` on C of the same prompts as one batch (--predict_batch_size C,
--max_new_tokens --new-tokens): its metrics.jsonl decode tokens/s, and its (prompt + decode) tokens/s over both
phases' time, the like of the served figure. Medians over the rounds; ratio = served / predict (both phases).
"""
import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cpu_name():
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "?"


def config(path, out_dir):
    vocab, merges = os.path.join(ROOT, "data/gpt2/gpt2-vocab.json"), os.path.join(ROOT, "data/gpt2/gpt2-merges.txt")
    with open(path, "w") as f:
        f.write(f"""seed: 5
output_dir: {out_dir}
processor: {{tokenizer: {{type: GPT2Tokenizer, vocab_file: {vocab}, merge_file: {merges}}}}}
model:
  arch: {{type: GPT2LMHeadModel}}
  model_config: {{type: GPT2Config, vocab_size: 50257, seq_length: 1024, hidden_size: 768, num_layers: 12,
                 num_heads: 12, max_position_embeddings: 1024, use_past: True, do_sample: False, eos_token_id: -1}}
""")


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = json.loads(r.read())
    c.close()
    if r.status != 200:
        sys.exit(f"serve answered {r.status}: {out}")
    return out


def served(port, prompts, clients, requests, new):
    """(tokens/s, median latency s) of `clients` threads sending `requests` each."""
    lat, tokens, lock = [], [0], threading.Lock()

    def client(c):
        for r in range(requests):
            t0 = time.perf_counter()
            out = post(port, {"prompt": prompts[(c * requests + r) % len(prompts)], "max_tokens": new, "temperature": 0})
            with lock:
                lat.append(time.perf_counter() - t0)
                tokens[0] += out["usage"]["completion_tokens"]

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if tokens[0] != clients * requests * new:
        sys.exit(f"{tokens[0]} tokens served, expected {clients * requests * new}")
    return tokens[0] / wall, statistics.median(lat)


def predicted(binary, cfg, prompts, batch, new, env, work):
    """predict's (decode tokens/s, (prompt + decode) generated tokens/s) for `batch` prompts as one batch."""
    out = os.path.join(work, "predict")
    os.makedirs(out, exist_ok=True)
    metrics = os.path.join(out, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    args = [binary, "predict", "--config", cfg, "--set", f"output_dir={out}", "--predict_batch_size", str(batch),
            "--max_new_tokens", str(new)]
    for p in prompts[:batch]:
        args += ["--predict_ids", " ".join(map(str, p))]
    subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    line = [json.loads(l) for l in open(metrics) if '"predict"' in l][-1]
    both = line["prompt_seconds"] + line["decode_seconds"]
    return line["decode_tokens_per_s"], batch * new / both


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gridformer", default=os.path.join(ROOT, "build/bin/gridformer"))
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    clients = [int(c) for c in a.clients.split(",")]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    rng = random.Random(7)
    prompts = [[rng.randrange(50257) for _ in range(a.prompt_len)] for _ in range(max(clients) * a.requests)]
    with tempfile.TemporaryDirectory() as work:
        cfg = os.path.join(work, "gpt2_124m.yaml")
        config(cfg, work)
        log = open(os.path.join(work, "serve.log"), "w+")
        server = subprocess.Popen([a.gridformer, "serve", "--config", cfg, "--port", "0", "--slots", str(max(clients))],
                                  env=env, stdout=log, stderr=subprocess.STDOUT)
        port = None
        for _ in range(1200):
            log.seek(0)
            text = log.read()
            if "http://127.0.0.1:" in text:
                port = int(text.split("http://127.0.0.1:")[1].split("/")[0])
                break
            if server.poll() is not None:
                sys.exit("serve exited:\n" + text)
            time.sleep(0.1)
        try:
            post(port, {"prompt": prompts[0], "max_tokens": 2, "temperature": 0})  # warm-up
            rows = {c: {"served": [], "latency": [], "decode": [], "both": []} for c in clients}
            for r in range(a.rounds):
                for c in clients:
                    tps, lat = served(port, prompts, c, a.requests, a.new_tokens)
                    dec, both = predicted(a.gridformer, cfg, prompts, c, a.new_tokens, env, work)
                    for k, v in (("served", tps), ("latency", lat), ("decode", dec), ("both", both)):
                        rows[c][k].append(v)
                    print(f"round {r + 1} clients {c}: served {tps:.1f} tokens/s (latency {lat:.2f} s), predict "
                          f"decode {dec:.1f}, prompt + decode {both:.1f} tokens/s", flush=True)
        finally:
            server.terminate()
            server.wait(60)
    print(f"\nCPU: {cpu_name()}, {a.threads} thread(s); gpt2-124M shape, fp32, random weights; prompts of "
          f"{a.prompt_len} tokens, {a.new_tokens} new tokens each, {a.requests} requests per client; medians of "
          f"{a.rounds} rounds")
    print(f"{'clients':>8} {'served tok/s':>13} {'latency s':>10} {'predict decode':>15} {'predict p+d':>12} "
          f"{'served / p+d':>13} {'vs 1 client':>12}")
    base = statistics.median(rows[clients[0]]["served"])
    for c in clients:
        m = {k: statistics.median(v) for k, v in rows[c].items()}
        print(f"{c:>8} {m['served']:>13.1f} {m['latency']:>10.2f} {m['decode']:>15.1f} {m['both']:>12.1f} "
              f"{m['served'] / m['both']:>13.2f} {m['served'] / base:>12.2f}")


if __name__ == "__main__":
    main()
