#!/usr/bin/env python3
"""gridformer's side of bench/train_vs_pytorch.py: the repository root (ROOT), the benchmark shapes (SHAPES), the
YAML of a run (gridformer_yaml), one `gridformer train` run and its per-step rows (gridformer_train, with CpuWatch's
CPU accounting), the medians of a run (gridformer_run), and the training FLOPs of a shape (model_flops). Moved out of
bench/train_vs_pytorch.py unchanged; it imports them from here (so the other bench scripts that import them from it
keep doing so), and its docstring describes the runs.
"""
import json
import os
import resource
import statistics
import subprocess
import time


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {
    "gpt2-124M": dict(num_layers=12, hidden_size=768, num_heads=12, seq_length=256, batch_size=4),
    "gpt2-tiny": dict(num_layers=4, hidden_size=256, num_heads=4, seq_length=256, batch_size=8),
    # 4 layers, hidden 256, 8 heads / 2 key-value heads, SwiGLU 704, untied head, GPT-2's vocabulary
    "llama-tiny": dict(model="llama", num_layers=4, hidden_size=256, num_heads=8, num_kv_heads=2,
                       intermediate_size=704, seq_length=256, batch_size=8),
    # Mixture of Experts (moe_config; PyTorch side bench/torch_moe_bench.py): every layer's MLP 8
    # experts, top-2, dropless (capacity_factor 0), balancing loss 0.01, no z-loss.
    # gpt2-tiny's shape with GELU experts of width 4C with biases; the top-2 probabilities not renormalised
    "moe-tiny": dict(num_layers=4, hidden_size=256, num_heads=4, seq_length=256, batch_size=8,
                     moe=dict(expert_num=8, num_experts_chosen=2, capacity_factor=0.0, aux_loss_factor=0.01,
                              norm_topk_prob=False)),
    # llama-tiny's shape with SwiGLU experts of width 704 (MixtralForCausalLM); renormalised, as Mixtral
    "mixtral-tiny": dict(model="llama", num_layers=4, hidden_size=256, num_heads=8, num_kv_heads=2,
                         intermediate_size=704, seq_length=256, batch_size=8,
                         moe=dict(expert_num=8, num_experts_chosen=2, capacity_factor=0.0, aux_loss_factor=0.01,
                                  norm_topk_prob=True)),
}


def _yaml_value(v):
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)


def _flow(d):
    return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in d.items()) + "}"


def gridformer_yaml(shape, steps, peak, out, model_extra=None, data_extra=None, lr=1.0e-4):
    """The training YAML of a run: `shape` is a name in SHAPES or a dict of the same keys (plus,
    optionally, vocab_size and max_position_embeddings, and moe: the moe_config keys); model_extra /
    data_extra add or override model.model_config / train_dataset.data_loader keys."""
    s = SHAPES[shape] if isinstance(shape, str) else shape
    llama = s.get("model") == "llama"
    mc = dict(type="LlamaConfig" if llama else "GPT2Config", vocab_size=s.get("vocab_size", 50257),
              seq_length=s["seq_length"], hidden_size=s["hidden_size"], num_layers=s["num_layers"],
              num_heads=s["num_heads"])
    if llama:  # MindFormers' LlamaConfig names (configs/llama/run_llama_tiny.yaml); it has no dropout
        mc.update(n_kv_heads=s["num_kv_heads"], intermediate_size=s["intermediate_size"], theta=10000.0,
                  rms_norm_eps=1.0e-5, tie_word_embeddings=False,
                  max_position_embedding=s.get("max_position_embeddings", 1024))
    else:
        mc.update(max_position_embeddings=s.get("max_position_embeddings", 1024), hidden_act="gelu_new",
                  hidden_dropout_rate=0.0, attention_dropout_rate=0.0)
    mc.update(model_extra or {})
    data = dict(type="RandomTokens", seed=0)
    data.update(data_extra or {})
    moe = s.get("moe")
    arch = ("MixtralForCausalLM" if moe else "LlamaForCausalLM") if llama else "GPT2LMHeadModel"
    return f"""
seed: 1
output_dir: {out}
runner_config: {{batch_size: {s['batch_size']}, train_steps: {steps}, peak_tflops: {peak}}}
runner_wrapper: {{use_clip_grad: True, max_grad_norm: 1.0}}
optimizer: {{type: AdamWeightDecay, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: 0.1}}
lr_schedule: {{type: constant, learning_rate: {lr}}}
train_dataset: {{data_loader: {_flow(data)}}}
callbacks: [{{type: MFLossMonitor, per_print_times: 1}}]
""" + (f"moe_config: {_flow(moe)}\n" if moe else "") + f"""model:
  arch: {{type: {arch}}}
  model_config: {_flow(mc)}
"""


def gridformer_train(shape, steps, threads, peak, workdir, build=None, tag=None, model_extra=None, data_extra=None,
                     env_extra=None, lr=1.0e-4, extra_args=()):
    """One `gridformer train` run; returns every step row of metrics.jsonl (step 1 included), its
    run_start row ("start", None from a binary without one), the parsed resources.json and the run's
    console output (stdout and stderr). env_extra: more environment variables for the run; lr: the
    constant learning rate; extra_args: more arguments of `gridformer train` (e.g. --save-weights F)."""
    tag = tag or (shape if isinstance(shape, str) else "run")
    out = os.path.join(workdir, f"out_{tag}")
    path = os.path.join(workdir, f"{tag}.yaml")
    with open(path, "w") as f:
        f.write(gridformer_yaml(shape, steps, peak, out, model_extra, data_extra, lr=lr))
    for name in ("metrics.jsonl", "resources.json"):
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), **(env_extra or {}))
    binary = os.path.join(build or os.path.join(ROOT, "build"), "bin", "gridformer")
    watch = CpuWatch(threads)
    p = subprocess.run([binary, "train", "--config", path, *extra_args], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    cpu_util, others = watch.stop()
    if p.returncode != 0:
        raise RuntimeError(f"{binary} train --config {path} failed ({p.returncode}):\n{p.stdout[-3000:]}")
    # The step lines (the run_start line has no "loss").
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
    rows = [r for r in lines if "loss" in r]
    start = next((r for r in lines if r.get("event") == "run_start"), None)
    res_path = os.path.join(out, "resources.json")
    res = json.load(open(res_path)) if os.path.exists(res_path) else None
    return {"rows": rows, "start": start, "resources": res, "log": p.stdout, "cpu_util": cpu_util,
            "others": others}


class CpuWatch:
    """What the machine's CPUs did while one child process ran (one child runs at a time):
    stop() returns (the child's CPU seconds / (wall seconds x threads), the share of all CPUs' time
    busy with anything else, the hypervisor's steal included; from /proc/stat and RUSAGE_CHILDREN)."""

    def __init__(self, threads):
        self.threads = threads
        self.t0, self.c0, self.stat0 = time.perf_counter(), self._children(), self._stat()

    @staticmethod
    def _children():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    @staticmethod
    def _stat():
        """(busy, total) jiffies over all CPUs: busy = user nice system irq softirq steal."""
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        v += [0] * (8 - len(v))
        return v[0] + v[1] + v[2] + v[5] + v[6] + v[7], sum(v[:8])

    def stop(self):
        wall, child = time.perf_counter() - self.t0, self._children() - self.c0
        (b0, t0), (b1, t1) = self.stat0, self._stat()
        jiffy = 1.0 / os.sysconf("SC_CLK_TCK")
        total = (t1 - t0) * jiffy
        others = max(0.0, ((b1 - b0) * jiffy - child) / total) if total > 0 else None
        return child / (wall * self.threads), others


def gridformer_run(shape, steps, threads, peak, workdir, build=None, **kw):
    """Medians of the timed steps of one run (step 1 is warm-up), plus the run itself under "run"."""
    run = gridformer_train(shape, steps, threads, peak, workdir, build, **kw)
    rows = run["rows"][1:]  # step 1 is warm-up
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
            "tflops": statistics.median(r["tflops"] for r in rows),
            "step_ms": statistics.median(r["step_ms"] for r in rows),
            "run": run}


def model_flops(shape):
    """Training FLOPs per step of `shape` (a name in SHAPES or a dict of its keys): Megatron's count
    generalised to grouped-query attention and a gated MLP, gridformer's TransformerLM::flops_per_step
    and torch_gpt2.py's model_flops: 6 B T [L (C (H + 2 Hkv) D + C H D + m C F + 2 T C) + C V]."""
    s = SHAPES[shape] if isinstance(shape, str) else shape
    B, T, L, C, H = s["batch_size"], s["seq_length"], s["num_layers"], s["hidden_size"], s["num_heads"]
    V = s.get("vocab_size", 50257)
    llama = s.get("model") == "llama"
    Hkv = s.get("num_kv_heads", H) if llama else H
    F = s["intermediate_size"] if llama else 4 * C
    D = C // H
    m = 3.0 if llama else 2.0
    mlp = L * m * C * F
    if s.get("moe"):  # every layer MoE (moe_layer_freq 1): active FLOPs, k experts' MLPs + the router's C E
        k, E = s["moe"]["num_experts_chosen"], s["moe"]["expert_num"]
        mlp = L * (k * m * C * F + C * E)
    return 6.0 * B * T * (L * (C * (H + 2 * Hkv) * D + C * H * D + 2.0 * T * C) + mlp + C * V)
