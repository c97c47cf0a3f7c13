#!/usr/bin/python3
"""LAMBADA cloze accuracy in PyTorch, Megatron-LM's way: the reference gridformer's evaluation is checked against.

    /usr/bin/python3 tools/lambada_torch.py --weights W.safetensors --num-heads H --seq-length T \\
        --data lambada_test.jsonl --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt [--strict]
        prints one JSON line: {"items": N, "correct": C, "accuracy": C/N}
    /usr/bin/python3 tools/lambada_torch.py --dump-items --data F.jsonl --vocab-file V --merge-file M [--strict]
        prints each line's split, {"line": n, "context": [...], "target": [...]}, one a line (no model)

The rules, from NVIDIA/Megatron-LM tasks/zeroshot_gpt/datasets.py (_LambadaDataset, get_tokens) and
tasks/zeroshot_gpt/evaluate.py (forward_step, eval_metric 'accuracy'), written again here in Python:
  * every line of the file is json.loads'd and its "text" split into context and target:
      not strict: tokens = tokenize(text); context, target = tokens[:-1], [tokens[-1]]
      strict (--strict-lambada): word = text.split()[-1]; start = text.rfind(word);
              context = tokenize(text[:start].strip()); target = tokenize(' ' + word)
  * the model reads context + target[:-1]; a sample is correct when the argmax of the logits after
    context[-1], target[0], ..., target[-2] is target[0], ..., target[-1]. Megatron pads every
    sample to seq_length + 1 tokens; the padding comes after the input under the causal mask and
    changes no scored logit, so here a batch is padded only to its longest input.
  * a sample longer than seq_length + 1 tokens is not truncated by Megatron (it fails on it): refused
    here, as gridformer (runner/infer/lambada.cpp) refuses it. A text of one word (an empty context, whose
    first target token Megatron would count right without a prediction) is refused too.
The tokenizer is tools/gpt2_encoder_reference.py (Python's `regex`, as Megatron's GPT2BPETokenizer).

The weights: a safetensors file with Hugging Face's names, as `gridformer train --save-weights` writes
(F32, F16, BF16 or F64, computed in float32):
  * GPT-2 (wte.weight, wpe.weight, h.{i}.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.*,
    ln_f.*; a "transformer." prefix is accepted): HF's GPT2LMHeadModel, Conv1D weights [in, out],
    LayerNorm (--norm-eps), learned positions, the LM head tied to wte; the activation is
    --hidden-act, as gridformer's core/ops/activation.cpp defines them: gelu (erf), gelu_new (tanh
    approximation, HF GPT-2's), fast_gelu (x * sigmoid(1.702 x)).
  * Llama (model.embed_tokens.weight, model.layers.{i}.*, model.norm.weight, lm_head.weight or tied):
    tools/torch_llama.py's LlamaForCausalLM (HF's modeling_llama.py), with --num-heads, --rope-theta,
    --norm-eps as RMSNorm's epsilon; the key/value heads, widths and layers are read off the shapes.
The number of heads is not in the file: give --num-heads (the YAML's model_config.num_heads), and
--seq-length (model_config.seq_length), the longest input. The argmax is taken over the tokenizer's
vocabulary (a model's padded rows, if its file has any, are never predicted).

Needs python3-torch and python3-regex (Debian); run with /usr/bin/python3.
"""
import argparse
import json
import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gpt2_encoder_reference import Encoder  # noqa: E402


class Refusal(Exception):
    """An input this tool refuses; the message names the file and what to do."""


# ---------------------------------------------------------------------------------------------
# The data: Megatron's get_tokens, line by line.

def split_text(text, encoder, strict):
    """(context, target) ids of one passage by Megatron's get_tokens; Refusal text for an empty or one-word passage."""
    words = text.split()
    if not words:
        raise Refusal('"text" is empty (or only whitespace); give the passage')
    if len(words) == 1:
        raise Refusal('"text" is one word, so there is no context to predict it from (Megatron would count its '
                      'first token correct without a prediction); give the passage with its last word')
    if not strict:
        tokens = encoder.encode(text)
        return tokens[:-1], [tokens[-1]]
    last_word = words[-1]
    start = text.rfind(last_word)
    return encoder.encode(text[:start].strip()), encoder.encode(" " + last_word)


def read_items(path, encoder, strict):
    """[(line, context, target)] of every line of `path`, in order, as Megatron's _LambadaDataset reads them."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise Refusal(f"LAMBADA file {path}: cannot open it ({e.strerror})")
    items = []
    for n, line in enumerate(lines, 1):
        where = f"LAMBADA file {path} line {n}"
        if not line.strip():
            raise Refusal(f"{where}: blank line; every line must be one JSON object such as {{\"text\": \"...\"}}")
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise Refusal(f"{where}: not JSON ({e}); every line must be one JSON object such as {{\"text\": \"...\"}}")
        if not isinstance(obj, dict):
            raise Refusal(f"{where}: a JSON {type(obj).__name__}, not an object with a \"text\" string")
        if "text" not in obj:
            raise Refusal(f"{where}: no \"text\" key; every line needs {{\"text\": \"the passage\"}}")
        if not isinstance(obj["text"], str):
            raise Refusal(f"{where}: \"text\" is not a string")
        try:
            context, target = split_text(obj["text"], encoder, strict)
        except Refusal as e:
            raise Refusal(f"{where}: {e}")
        items.append((n, context, target))
    if not items:
        raise Refusal(f"LAMBADA file {path}: no lines; give one {{\"text\": ...}} object a line")
    return items


# ---------------------------------------------------------------------------------------------
# The weights.

_ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I32": 4, "I64": 8}


def read_safetensors(path):
    """name -> torch tensor (floats as float32, integers as int64), by the safetensors layout (u64 header
    length, JSON header, data)."""
    import numpy as np
    import torch

    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise Refusal(f"weights {path}: shorter than a safetensors header")
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise Refusal(f"weights {path}: header length {n} runs past the end of the file")
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    data = buf[8 + n:]
    out = {}
    for name, info in header.items():
        dt, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        if dt not in _ITEMSIZE:
            raise Refusal(f"weights {path}: tensor {name} is {dt}; this tool reads F32, F16, BF16, F64, I32 and I64")
        if e - b != _ITEMSIZE[dt] * math.prod(shape) or e > len(data):
            raise Refusal(f"weights {path}: tensor {name}: {e - b} bytes do not hold {dt} {shape}")
        raw = data[b:e]
        if dt in ("I32", "I64"):
            out[name] = torch.from_numpy(np.frombuffer(raw, "<i4" if dt == "I32" else "<i8").astype(np.int64).reshape(shape))
            continue
        if dt == "F32":
            a = np.frombuffer(raw, "<f4")
        elif dt == "F64":
            a = np.frombuffer(raw, "<f8")
        elif dt == "F16":
            a = np.frombuffer(raw, "<f2")
        else:  # BF16: the upper 16 bits of a float32
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(a.astype(np.float32).reshape(shape))
    return out


def _need(w, name, path):
    if name not in w:
        raise Refusal(f"weights {path}: no tensor {name}")
    return w[name]


def _activation(kind):
    import torch

    if kind == "gelu":
        return lambda x: 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))
    if kind == "gelu_new":
        return lambda x: 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    if kind == "fast_gelu":
        return lambda x: x / (1.0 + torch.exp(-1.702 * x))
    raise Refusal(f"--hidden-act {kind}: known: gelu, gelu_new, fast_gelu")


class GPT2:
    """HF GPT2LMHeadModel's forward (eval: no dropout) over the tensors of a safetensors file."""

    def __init__(self, w, path, num_heads, norm_eps, hidden_act):
        w = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in w.items()}
        if any(".mlp.router." in k or ".mlp.experts." in k for k in w):
            raise Refusal(f"weights {path}: a mixture-of-experts GPT-2; this tool evaluates dense GPT-2 and Llama")
        self.wte, self.wpe = _need(w, "wte.weight", path), _need(w, "wpe.weight", path)
        self.C = self.wte.shape[1]
        if self.C % num_heads:
            raise Refusal(f"--num-heads {num_heads} does not divide the hidden size {self.C} of {path}")
        self.L = 0
        while f"h.{self.L}.ln_1.weight" in w:
            self.L += 1
        self.layers = []
        for i in range(self.L):
            p = f"h.{i}."
            self.layers.append({k: _need(w, p + k, path) for k in (
                "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                "mlp.c_proj.weight", "mlp.c_proj.bias")})
        self.ln_f = (_need(w, "ln_f.weight", path), _need(w, "ln_f.bias", path))
        self.H, self.eps, self.act = num_heads, norm_eps, _activation(hidden_act)
        self.vocab_rows = self.wte.shape[0]

    def logits(self, idx):
        import torch
        import torch.nn.functional as F

        B, T = idx.shape
        C, H = self.C, self.H
        D = C // H
        x = F.embedding(idx, self.wte) + self.wpe[:T]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        for p in self.layers:
            h = F.layer_norm(x, (C,), p["ln_1.weight"], p["ln_1.bias"], self.eps)
            q, k, v = (h @ p["attn.c_attn.weight"] + p["attn.c_attn.bias"]).split(C, dim=2)
            q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
            att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + y @ p["attn.c_proj.weight"] + p["attn.c_proj.bias"]
            h = F.layer_norm(x, (C,), p["ln_2.weight"], p["ln_2.bias"], self.eps)
            x = x + self.act(h @ p["mlp.c_fc.weight"] + p["mlp.c_fc.bias"]) @ p["mlp.c_proj.weight"] + p["mlp.c_proj.bias"]
        x = F.layer_norm(x, (C,), self.ln_f[0], self.ln_f[1], self.eps)
        return x @ self.wte.t()  # the tied LM head


class Llama:
    """tools/torch_llama.py's LlamaForCausalLM with the file's tensors; config read off the shapes."""

    def __init__(self, w, path, num_heads, norm_eps, rope_theta):
        import torch_llama as tl

        if any(".block_sparse_moe." in k or ".mlp.experts." in k for k in w):
            raise Refusal(f"weights {path}: a mixture-of-experts Llama; this tool evaluates dense GPT-2 and Llama")
        emb = _need(w, "model.embed_tokens.weight", path)
        V, C = emb.shape
        if C % num_heads:
            raise Refusal(f"--num-heads {num_heads} does not divide the hidden size {C} of {path}")
        L = 0
        while f"model.layers.{L}.input_layernorm.weight" in w:
            L += 1
        D = C // num_heads
        kv = _need(w, "model.layers.0.self_attn.k_proj.weight", path).shape[0] // D
        F_ = _need(w, "model.layers.0.mlp.gate_proj.weight", path).shape[0]
        cfg = tl.LlamaConfig(vocab_size=V, hidden_size=C, num_layers=L, num_heads=num_heads, num_kv_heads=kv,
                             intermediate_size=F_, rope_theta=rope_theta, rms_norm_eps=norm_eps,
                             tie_word_embeddings="lm_head.weight" not in w)
        self.model = tl.LlamaForCausalLM(cfg)
        try:
            self.model.load_state_dict(w, strict=True)
        except RuntimeError as e:
            raise Refusal(f"weights {path}: not a Llama of {num_heads} heads with Hugging Face's names: {e}")
        self.model.eval()
        self.vocab_rows = V

    def logits(self, idx):
        return self.model(idx)[0]


def load_model(args):
    w = read_safetensors(args.weights)
    if "model.embed_tokens.weight" in w:
        return Llama(w, args.weights, args.num_heads, args.norm_eps, args.rope_theta)
    if "wte.weight" in w or "transformer.wte.weight" in w:
        return GPT2(w, args.weights, args.num_heads, args.norm_eps, args.hidden_act)
    raise Refusal(f"weights {args.weights}: neither GPT-2 (wte.weight) nor Llama (model.embed_tokens.weight) "
                  "tensors with Hugging Face's names")


# ---------------------------------------------------------------------------------------------
# The score: evaluate.py's forward_step with eval_metric 'accuracy'.

def cloze_accuracy(model, items, seq_length, batch, vocab, pad_id, source):
    import torch

    for line, context, target in items:
        n = len(context) + len(target)
        if n - 1 > seq_length:
            raise Refusal(f"{source} line {line}: context and last word are {n} tokens, {n - 1 - seq_length} more "
                          f"than the model's seq_length {seq_length} + 1; Megatron does not truncate a passage (it "
                          "fails on it): shorten the passage or evaluate with a longer seq_length")
    if model.vocab_rows < vocab:
        raise Refusal(f"the model has {model.vocab_rows} vocabulary rows, fewer than the tokenizer's {vocab}")
    correct = 0
    with torch.no_grad():
        for first in range(0, len(items), batch):
            chunk = items[first:first + batch]
            inputs = [context + target[:-1] for _, context, target in chunk]
            T = max(len(x) for x in inputs)
            idx = torch.tensor([x + [pad_id] * (T - len(x)) for x in inputs], dtype=torch.long)
            pred = model.logits(idx)[:, :, :vocab].argmax(dim=-1)
            for (_, context, target), row in zip(chunk, pred.tolist()):
                at = len(context) - 1
                correct += all(row[at + j] == t for j, t in enumerate(target))
    return correct


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="JSON lines, one {\"text\": ...} a line")
    ap.add_argument("--vocab-file", required=True)
    ap.add_argument("--merge-file", required=True)
    ap.add_argument("--strict", action="store_true", help="Megatron's --strict-lambada: the whole last word")
    ap.add_argument("--dump-items", action="store_true", help="print each line's context and target ids; no model")
    ap.add_argument("--weights", help="safetensors with Hugging Face's names (gridformer train --save-weights)")
    ap.add_argument("--num-heads", type=int, help="attention heads (model_config.num_heads)")
    ap.add_argument("--seq-length", type=int, help="the longest model input (model_config.seq_length)")
    ap.add_argument("--hidden-act", default="gelu", help="GPT-2: gelu (gridformer's default), gelu_new, fast_gelu")
    ap.add_argument("--norm-eps", type=float, default=1e-5, help="LayerNorm (GPT-2) or RMSNorm (Llama) epsilon")
    ap.add_argument("--rope-theta", type=float, default=10000.0, help="Llama: RoPE base (model_config.theta)")
    ap.add_argument("--batch", type=int, default=8, help="passages per forward")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = ap.parse_args()

    try:
        encoder = Encoder.from_files(args.vocab_file, args.merge_file)
        items = read_items(args.data, encoder, args.strict)
        if args.dump_items:
            for line, context, target in items:
                print(json.dumps({"line": line, "context": context, "target": target}))
            return 0
        missing = [f for f, v in (("--weights", args.weights), ("--num-heads", args.num_heads),
                                  ("--seq-length", args.seq_length)) if v is None]
        if missing:
            raise Refusal(f"{', '.join(missing)} needed to evaluate (or --dump-items to only split the passages)")
        if args.num_heads < 1 or args.seq_length < 1 or args.batch < 1:
            raise Refusal("--num-heads, --seq-length and --batch must be at least 1")
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        model = load_model(args)
        correct = cloze_accuracy(model, items, args.seq_length, args.batch, len(encoder.encoder), encoder.eod,
                                 f"LAMBADA file {args.data}")
    except Refusal as e:
        print(f"lambada_torch: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"items": len(items), "correct": correct, "accuracy": correct / len(items)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
