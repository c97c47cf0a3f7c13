#!/usr/bin/env python3
"""Reading a GPT-345M-shaped Megatron-LM checkpoint (24 layers, 1024 wide, 16 heads, 1024 positions, GPT-2's
vocabulary, fp16: the shape of NVIDIA's released megatron_lm_345m), beside the references, in one run:

    python3 bench/megatron_read.py [--build build] [--rounds 3] [--dir /tmp/gf_meg345m] [--layers 24]

The checkpoint is written once by PyTorch (tools/make_megatron_golden.py's transcription of megatron/model's
layout at 285068c: release/mp_rank_00/model_optim_rng.pt, checkpoint version 3.0), and the same weights as one
float32 Hugging Face safetensors file. Each round, in turn:
  - gridformer, `run_mode: eval` of one 32-token batch with `load_checkpoint` the Megatron directory: the load time
    its log line reports, and the process's peak RSS (getrusage of the child);
  - the same with `load_checkpoint` the safetensors file (the path our Hugging Face users take);
  - the same with no `load_checkpoint` (random initialisation): the process without any reading, so that peak RSS
    minus this one is what reading costs beyond the weights;
  - PyTorch: `torch.load(file, map_location='cpu')` in a fresh process (what Megatron's load_checkpoint does),
    its time and peak RSS above the same process's after `import torch`.
The table gives medians over rounds. The target (the Megatron issue): reading holds no more than one tensor's
copy beyond the weights, i.e. the extra peak RSS is at most the largest tensor as float32 (the padded word
embedding, 50304 x 1024 x 4 bytes = 206 MB) plus the page-granular slack.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def write_checkpoint(d, layers, hidden, heads, positions, vocab):
    import torch
    import make_megatron_golden as mg
    import st_io
    mg.VOCAB, mg.HIDDEN, mg.HEADS, mg.POSITIONS = vocab, hidden, heads, positions
    g = torch.Generator().manual_seed(345)
    hf = {"wte.weight": torch.randn(vocab, hidden, generator=g) * 0.02,
          "wpe.weight": torch.randn(positions, hidden, generator=g) * 0.01,
          "ln_f.weight": 1 + 0.1 * torch.randn(hidden, generator=g), "ln_f.bias": 0.1 * torch.randn(hidden, generator=g)}
    for i in range(layers):
        h = f"h.{i}."
        for name, shape in [("ln_1.weight", (hidden,)), ("ln_1.bias", (hidden,)), ("attn.c_attn.weight", (hidden, 3 * hidden)),
                            ("attn.c_attn.bias", (3 * hidden,)), ("attn.c_proj.weight", (hidden, hidden)),
                            ("attn.c_proj.bias", (hidden,)), ("ln_2.weight", (hidden,)), ("ln_2.bias", (hidden,)),
                            ("mlp.c_fc.weight", (hidden, 4 * hidden)), ("mlp.c_fc.bias", (4 * hidden,)),
                            ("mlp.c_proj.weight", (4 * hidden, hidden)), ("mlp.c_proj.bias", (hidden,))]:
            hf[h + name] = 0.02 * torch.randn(*shape, generator=g) + (1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") else 0.0)
    # The fp16 values, so that both files hold the same numbers.
    hf = {k: v.half().float() for k, v in hf.items()}
    case = mg.Case("meg", "legacy", hf, layers, release=True, dtype=torch.float16)
    case.write(d)
    st_io.write(os.path.join(d, "gpt345m.safetensors"), {"transformer." + k: v for k, v in hf.items()})
    with open(os.path.join(d, "done"), "w") as f:
        f.write("ok")


def config(d, layers, hidden, heads, positions, vocab):
    path = os.path.join(d, "gpt345m.yaml")
    with open(path, "w") as f:
        f.write(f"""seed: 1
run_mode: eval
runner_config: {{batch_size: 1}}
train_dataset: {{data_loader: {{type: RandomTokens, seed: 1, num_samples: 4}}}}
eval_dataset: {{data_loader: {{type: RandomTokens, seed: 2, num_samples: 4}}, eval_iters: 1}}
callbacks: [{{type: MFLossMonitor, per_print_times: 1}}]
model:
  arch: {{type: GPT2LMHeadModel}}
  model_config: {{type: GPT2Config, vocab_size: {vocab}, seq_length: 32, hidden_size: {hidden}, num_layers: {layers},
                 num_heads: {heads}, max_position_embeddings: {positions}, hidden_act: gelu_new}}
""")
    return path


RSS_WRAPPER = r"""
import resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
sys.stdout.write(p.stdout.decode("utf-8", "replace"))
print("__rss_mib", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0, time.perf_counter() - t0)
sys.exit(p.returncode)
"""

TORCH_LOAD = r"""
import resource, sys, time
import torch
sys.path.insert(0, sys.argv[2])
import make_megatron_golden  # noqa: F401  (its fake megatron modules: the args hold Megatron's ModelType enum)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
d = torch.load(sys.argv[1], map_location="cpu")
t = time.perf_counter() - t0
n = 0
def walk(x):
    global n
    if isinstance(x, torch.Tensor):
        n += x.numel()
    elif isinstance(x, dict):
        for v in x.values():
            walk(v)
walk(d["model"])
print("__torch", t, base / 1024.0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, n)
"""


def measured(cmd):
    p = subprocess.run([sys.executable, "-c", RSS_WRAPPER] + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{out[-3000:]}")
    tail = [l for l in out.splitlines() if l.startswith("__rss_mib")][-1].split()
    load = None
    for line in out.splitlines():
        if "loaded weights from" in line and line.rstrip().endswith(" s"):
            load = float(line.rstrip().rsplit(" in ", 1)[1][:-2])
    return float(tail[1]), float(tail[2]), load, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/gf_meg345m")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--json")
    a = ap.parse_args()
    vocab = 50257
    os.makedirs(a.dir, exist_ok=True)
    if not os.path.exists(os.path.join(a.dir, "done")):
        t0 = time.perf_counter()
        write_checkpoint(a.dir, a.layers, a.hidden, a.heads, a.positions, vocab)
        print(f"wrote the checkpoint with PyTorch in {time.perf_counter() - t0:.1f} s")
    meg = os.path.join(a.dir, "meg")
    shard = os.path.join(meg, "release", "mp_rank_00", "model_optim_rng.pt")
    st = os.path.join(a.dir, "gpt345m.safetensors")
    cfg = config(a.dir, a.layers, a.hidden, a.heads, a.positions, vocab)
    bin_ = os.path.join(a.build, "bin", "gridformer")
    env_threads = ["env", "OMP_NUM_THREADS=2"]
    rows = {k: [] for k in ("meg", "st", "none", "torch")}
    for r in range(a.rounds):
        for key, extra in (("meg", ["--set", "load_checkpoint=" + meg]), ("st", ["--set", "load_checkpoint=" + st]),
                           ("none", [])):
            out_dir = os.path.join(a.dir, "out_" + key)
            rss, wall, load, out = measured(env_threads + [bin_, "train", "--config", cfg, "--set", "output_dir=" + out_dir] + extra)
            if key != "none" and load is None:
                sys.exit(f"no load time in the log of {key}:\n{out[-2000:]}")
            rows[key].append((rss, wall, load))
        p = subprocess.run([sys.executable, "-c", TORCH_LOAD, shard, os.path.join(ROOT, "tools")], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        line = [l for l in p.stdout.decode().splitlines() if l.startswith("__torch")]
        if p.returncode != 0 or not line:
            sys.exit("torch.load failed:\n" + p.stdout.decode()[-2000:])
        _, t, base, peak, numel = line[-1].split()
        rows["torch"].append((float(peak) - float(base), float(t), int(numel)))
    med = lambda key, i: statistics.median(x[i] for x in rows[key])
    params = rows["torch"][0][2]
    file_mib = os.path.getsize(shard) / 2**20
    weights_mib = params * 4 / 2**20
    largest_mib = 50304 * a.hidden * 4 / 2**20
    extra_meg = med("meg", 0) - med("none", 0)
    extra_st = med("st", 0) - med("none", 0)
    print(f"GPT-345M-shaped Megatron-LM checkpoint: {a.layers} layers x {a.hidden}, fp16, {params} elements, "
          f"{file_mib:.0f} MiB file; {cpu_name()}, {os.cpu_count()} CPUs; medians of {a.rounds} rounds")
    print(f"{'':44s} {'load s':>8s} {'peak RSS MiB':>13s} {'beyond the weights':>19s}")
    print(f"{'gridformer, Megatron checkpoint (fp16)':44s} {med('meg', 2):8.2f} {med('meg', 0):13.0f} {extra_meg:19.0f}")
    print(f"{'gridformer, safetensors (fp32) [reference]':44s} {med('st', 2):8.2f} {med('st', 0):13.0f} {extra_st:19.0f}")
    print(f"{'gridformer, no checkpoint (random init)':44s} {'-':>8s} {med('none', 0):13.0f} {0:19.0f}")
    print(f"{'PyTorch torch.load of the .pt [reference]':44s} {med('torch', 1):8.2f} {med('torch', 0):13.0f} "
          f"{'(the whole file)':>19s}")
    print(f"the weights as float32: {weights_mib:.0f} MiB; the largest tensor as float32 (padded word embedding): "
          f"{largest_mib:.0f} MiB; reading the Megatron checkpoint held {extra_meg:.0f} MiB beyond the weights "
          f"({extra_meg / largest_mib:.2f} of that tensor)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "cpu": cpu_name(), "params": params}, f, indent=1)


if __name__ == "__main__":
    main()
