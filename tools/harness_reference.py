#!/usr/bin/python3
"""lm-evaluation-harness's zero-shot scoring of seven tasks on a GPT-2, in PyTorch: the reference for `gridformer eval`.

    /usr/bin/python3 tools/harness_reference.py --weights W.safetensors --hf-config config.json \\
        --vocab data/gpt2/gpt2-vocab.json --merges data/gpt2/gpt2-merges.txt --data tests/data/harness \\
        --tasks hellaswag,arc_easy,arc_challenge,piqa,winogrande,lambada_openai,wikitext \\
        --max-length L --out ref.json [--bootstrap-iters 100000] [--dtype float32|float64]
    /usr/bin/python3 tools/harness_reference.py --self-check      (no weights: preprocessing, windows, metrics, forward)
    /usr/bin/python3 tools/harness_reference.py --write-random-model DIR [--seed S]   (DIR/model.safetensors and
        DIR/config.json: a random GPT-2 of vocab 50257, n_embd 32, 2 layers, 2 heads, n_positions 64)
Needs Debian's python3-torch and python3-regex. --data holds <task>.jsonl in the HF datasets' fields
(tests/data/harness/README.md). Output: {"results": {task: {"alias", "acc,none", "acc_stderr,none", ...}}, "samples":
{task: [{"doc_id", "requests": [{"arguments", "context", "continuation", "loglikelihood", "is_greedy"}], "metrics"}]}};
a loglikelihood is the float64 sum of the (float32) log_softmax values of its continuation tokens.

Transcribed (nothing imported) from EleutherAI/lm-evaluation-harness @ 4e7e0d47f33bc71070c1d38394bafbb52b117163:
lm_eval/tasks/{hellaswag/hellaswag.yaml, hellaswag/utils.py, arc/arc_easy.yaml, arc/arc_challenge.yaml, piqa/piqa.yaml,
winogrande/default.yaml, winogrande/preprocess_winogrande.py, lambada/lambada_openai.yaml, wikitext/wikitext.yaml,
wikitext/preprocess_wikitext.py}; lm_eval/api/task.py (ConfigurableTask doc_to_*, fewshot_context, build_qa_turn,
multiple_input_context, construct_requests, process_results); lm_eval/api/model.py (TemplateLM._encode_pair,
loglikelihood); lm_eval/models/huggingface.py (HFLM.prefix_token_id, loglikelihood_rolling, _loglikelihood_tokens);
lm_eval/utils.py (get_rolling_token_windows, make_disjoint_window); lm_eval/api/metrics.py; lm_eval/evaluator_utils.py
(_compute_task_aggregations). And from huggingface/transformers: src/transformers/models/gpt2/modeling_gpt2.py
@ 0010f60284ab4b9d14b7df9c6525b1a2ad44e640 (GPT2Attention._attn, GPT2MLP, GPT2Block, GPT2Model, GPT2LMHeadModel),
src/transformers/activations.py @ 00e12e7c54598e50e7bef1540db3408f81916de1 (NewGELUActivation: gelu_new).
The tokenizer is tools/gpt2_encoder_reference.py (GPT-2's byte-level BPE; HF's GPT-2 tokenizer adds no special tokens
and, with no "<|endoftext|>" in the text, gives the same ids). The prefix token of an empty context is the tokenizer's
bos_token_id, for GPT-2 "<|endoftext|>" = 50256.
"""
import argparse
import json
import math
import os
import random
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TASKS = ("hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "lambada_openai", "wikitext")
TARGET_DELIMITER = " "  # TaskConfig.target_delimiter's default; none of the seven YAMLs sets it


class Refusal(Exception):
    pass


# Task formatting: each YAML's doc_to_text / doc_to_target / doc_to_choice with its Jinja rendered by hand.

def hellaswag_preprocess(text):
    """lm_eval/tasks/hellaswag/utils.py preprocess."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    text = text.replace("  ", " ")
    return text


def hellaswag_process_doc(doc):
    """utils.py process_docs' _process_doc (note str.capitalize lowercases all but the first character)."""
    ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
    return {"query": hellaswag_preprocess(doc["activity_label"] + ": " + ctx),
            "choices": [hellaswag_preprocess(e) for e in doc["endings"]], "gold": int(doc["label"])}


def winogrande_split(doc):
    """preprocess_winogrande.py: (gold = doc_to_text, contexts = doc_to_choice, target = doc_to_target)."""
    idx = doc["sentence"].index("_")
    return ({"1": 0, "2": 1}[doc["answer"]], [doc["sentence"][:idx] + opt for opt in (doc["option1"], doc["option2"])],
            doc["sentence"][idx + 1:].strip())


def wikitext_detokenizer(page):
    """lm_eval/tasks/wikitext/preprocess_wikitext.py wikitext_detokenizer (of doc["page"])."""
    s = page.replace("s '", "s'")  # contractions
    s = re.sub(r"/' [0-9]/", r"/'[0-9]/", s)
    for a, b in ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" : ", ": "), (" ; ", "; "), (" . ", ". "),
                 (" ! ", "! "), (" ? ", "? "), (" , ", ", ")):  # number separators, punctuation
        s = s.replace(a, b)
    for pattern, repl in ((r"\(\s*([^\)]*?)\s*\)", r"(\1)"), (r"\[\s*([^\]]*?)\s*\]", r"[\1]"),
                          (r"{\s*([^}]*?)\s*}", r"{\1}"), (r"\"\s*([^\"]*?)\s*\"", r'"\1"'),
                          (r"'\s*([^']*?)\s*'", r"'\1'")):  # double brackets
        s = re.sub(pattern, repl, s)
    for a, b in (("= = = =", "===="), ("= = =", "==="), ("= =", "=="), (" " + chr(176) + " ", chr(176)), (" \n", "\n"),
                 ("\n ", "\n"), (" N ", " 1 "), (" 's", "'s")):  # miscellaneous
        s = s.replace(a, b)
    return s


def wikitext_counts(page):
    """preprocess_wikitext.py process_results: words and bytes of the *raw* page."""
    return len(re.split(r"\s+", page)), len(page.encode("utf-8"))


def build_doc(task, doc):
    """-> dict(kind, args, choices, gold): the requests' (context, continuation) strings as
    ConfigurableTask.fewshot_context (0-shot, no description, no chat template) and construct_requests make them."""
    if task == "lambada_openai":  # "{{text.split(' ')[:-1]|join(' ')}}", "{{' '+text.split(' ')[-1]}}"
        words = doc["text"].split(" ")
        return {"kind": "ll", "args": [(" ".join(words[:-1]), " " + words[-1])]}
    if task == "wikitext":  # loglikelihood_rolling of doc_to_target = the detokenized page
        return {"kind": "rolling", "args": [(wikitext_detokenizer(doc["page"]),)]}
    if task == "winogrande":  # doc_to_text returns an int: multiple_input, one context per option
        gold, contexts, target = winogrande_split(doc)
        return {"kind": "mc", "args": [(c, TARGET_DELIMITER + target) for c in contexts], "choices": contexts,
                "gold": gold}
    if task == "hellaswag":  # doc_to_text "{{query}}", doc_to_target "{{label}}" (digit string -> int), "choices"
        d = hellaswag_process_doc(doc)
        ctx, choices, gold = d["query"], d["choices"], int(str(doc["label"]))
    elif task in ("arc_easy", "arc_challenge"):  # {{choices.text}}, {{choices.label.index(answerKey)}}
        ctx = "Question: " + doc["question"] + "\nAnswer:"
        choices, gold = list(doc["choices"]["text"]), list(doc["choices"]["label"]).index(doc["answerKey"])
    elif task == "piqa":  # doc_to_target: label (a feature), doc_to_choice {{[sol1, sol2]}}
        if not isinstance(doc["label"], int):
            raise Refusal('piqa: "label" must be an integer 0 or 1, as in the HF dataset')
        ctx, choices, gold = "Question: " + doc["goal"] + "\nAnswer:", [doc["sol1"], doc["sol2"]], doc["label"]
    else:
        raise Refusal(f"unknown task {task}; known: {', '.join(TASKS)}")
    return {"kind": "mc", "args": [(ctx, TARGET_DELIMITER + c) for c in choices], "choices": choices, "gold": gold}


# Metric lists of the YAMLs (the order process_results writes them in).
MC_METRICS = {"hellaswag": ("acc", "acc_norm"), "arc_easy": ("acc", "acc_norm"), "arc_challenge": ("acc", "acc_norm"),
              "piqa": ("acc", "acc_norm"), "winogrande": ("acc",)}


# Requests as the HF model tokenizes and truncates them.

def encode_pair(encode, context, continuation, prefix_token):
    """TemplateLM.loglikelihood's tokenization: an empty context becomes [prefix_token] (or the continuation's first
    token when that is the prefix token); else _encode_pair moves the context's trailing whitespace to the
    continuation, encodes context+continuation whole and the context alone, and splits the whole at len(context)."""
    if context == "":
        cont = encode(continuation)
        return ([prefix_token], cont) if prefix_token != cont[0] else (cont[:1], cont[1:])
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = encode(context + continuation)
    ctx = encode(context)
    return ctx, whole[len(ctx):]


def get_rolling_token_windows(token_list, prefix_token, max_seq_len, context_len):
    """lm_eval/utils.py get_rolling_token_windows."""
    assert 1 <= context_len <= max_seq_len
    if not token_list:
        return
    pred_len = max_seq_len - context_len + 1
    predicted = 0
    first_seq_len = min(max_seq_len, len(token_list))
    yield [prefix_token] + token_list[:first_seq_len - 1], token_list[:first_seq_len]
    predicted += first_seq_len
    while predicted < len(token_list):
        window_pred_len = min(len(token_list) - predicted, pred_len)
        window_end = predicted + window_pred_len
        yield (token_list[window_end - max_seq_len - 1:window_end - 1],
               token_list[window_end - window_pred_len:window_end])
        predicted += window_pred_len


def rolling_windows(tokens, prefix_token, max_length):
    """HFLM.loglikelihood_rolling's windows (context_len=1), each through make_disjoint_window."""
    return [(a[:len(a) - (len(b) - 1)], b) for a, b in get_rolling_token_windows(tokens, prefix_token, max_length, 1)]


def model_input(context_enc, continuation_enc, max_length):
    """_loglikelihood_tokens (causal): the last max_length + 1 tokens of context+continuation, less the last."""
    if not context_enc or not continuation_enc or len(continuation_enc) > max_length:
        raise Refusal(f"a request of {len(context_enc)} context and {len(continuation_enc)} continuation tokens: the "
                      f"harness asserts both non-empty and the continuation at most max_length {max_length}")
    return (context_enc + continuation_enc)[-(max_length + 1):][:-1]


def score(model, context_enc, continuation_enc, max_length):
    """(loglikelihood, is_greedy): the continuation's log-probs are the last len(continuation) rows of log_softmax over
    the input; is_greedy when every row's argmax is the continuation token."""
    import torch

    inp = model_input(context_enc, continuation_enc, max_length)
    logp = model.log_probs(inp)
    n = len(continuation_enc)
    sel = logp[len(inp) - n:len(inp)]
    cont = torch.tensor(continuation_enc, dtype=torch.long)
    ll = float(sel.gather(1, cont[:, None]).to(torch.float64).sum())
    return ll, bool((sel.argmax(dim=-1) == cont).all())


# Metrics: lm_eval/api/metrics.py and task.py process_results.

def mean(arr):
    return sum(arr) / len(arr)


def sample_stddev(arr):
    mu = mean(arr)
    return math.sqrt(sum([(x - mu) ** 2 for x in arr]) / (len(arr) - 1))


def mean_stderr(arr):
    return sample_stddev(arr) / math.sqrt(len(arr))


def weighted_mean(items):
    a, b = zip(*items)
    return sum(a) / sum(b)


perplexity = lambda items: math.exp(-mean(items))  # noqa: E731  (the aggregations of metrics.py)
weighted_perplexity = lambda items: math.exp(-weighted_mean(items))  # noqa: E731
bits_per_byte = lambda items: -weighted_mean(items) / math.log(2)  # noqa: E731


def bootstrap_stderr(f, xs, iters):
    """bootstrap_stderr: iters // 1000 chunks; chunk i draws with random.Random seeded i, 1000 resamples of len(xs)
    by rnd.choices; the sample stddev of the statistics."""
    res = []
    chunk_size = min(1000, iters)
    for i in range(iters // chunk_size):
        rnd = random.Random()
        rnd.seed(i)
        for _ in range(chunk_size):
            res.append(f(rnd.choices(xs, k=len(xs))))
    return sample_stddev(res)


AGGREGATION = {"acc": mean, "acc_norm": mean, "perplexity": perplexity, "word_perplexity": weighted_perplexity,
               "byte_perplexity": weighted_perplexity, "bits_per_byte": bits_per_byte}


def mc_metrics(task, lls, choices, gold):
    """process_results for multiple_choice: argmax (numpy: the first of ties) of lls and of lls / len(choice)."""
    import numpy as np

    completion_len = np.array([float(len(c)) for c in choices])
    pred = int(np.argmax(lls))
    pred_norm = int(np.argmax(np.array(lls) / completion_len))
    gold = gold if gold < len(choices) else -100
    out = {"acc": 1.0 if pred == gold else 0.0, "acc_norm": 1.0 if pred_norm == gold else 0.0}
    return {m: out[m] for m in MC_METRICS[task]}


def aggregate(task, per_doc, bootstrap_iters):
    """_compute_task_aggregations with stderr_for_metric: "<metric>,none", then "<metric>_stderr,none": the bootstrap
    for perplexity (bootstrappable), mean_stderr for mean; "N/A" for the weighted ones, one doc or bootstrap_iters 0."""
    res = {"name": task, "alias": task, "sample_len": len(per_doc)}
    for metric in per_doc[0]:
        items = [d[metric] for d in per_doc]
        agg = AGGREGATION[metric]
        res[f"{metric},none"] = agg(items)
        fn = {mean: mean_stderr, perplexity: lambda x: bootstrap_stderr(perplexity, x, bootstrap_iters)}.get(agg)
        res[f"{metric}_stderr,none"] = fn(items) if (fn and bootstrap_iters > 0 and len(items) > 1) else "N/A"
    return res


# The model: HF GPT2LMHeadModel's forward (eval mode, no dropout, no cache, one unpadded sequence).

def read_safetensors(path):
    """name -> float32 tensor; the safetensors layout: u64 little-endian header length, JSON header, data. F32 only."""
    import numpy as np
    import torch

    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    data, out = buf[8 + n:], {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        if info["dtype"] != "F32":
            raise Refusal(f"{path}: tensor {name} is {info['dtype']}; this reference reads F32")
        if e - b != 4 * math.prod(info["shape"]) or e > len(data):
            raise Refusal(f"{path}: tensor {name}: {e - b} bytes do not hold F32 {info['shape']}")
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], "<f4").copy().reshape(info["shape"]))
    return out


def write_safetensors(path, tensors):
    header, chunks, off = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().to("cpu").float().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


LAYER_KEYS = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
              "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
              "mlp.c_proj.weight", "mlp.c_proj.bias")


class GPT2:
    """wte + wpe; per block x += attn(ln_1(x)); x += mlp(ln_2(x)); ln_f; logits = x @ wte^T (the tied lm_head).
    Conv1D: x @ W + b with W [in, out]. Attention: q k^T / sqrt(head_dim) (a division, as _attn), the causal mask
    filled with finfo.min, softmax, @ v. MLP: c_proj(gelu_new(c_fc(x)))."""

    def __init__(self, tensors, config, dtype=None):
        import torch

        dtype = dtype or torch.float32
        w = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in tensors.items()}
        w.pop("lm_head.weight", None)  # tied to wte in GPT2LMHeadModel
        need = ["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"] + \
            [f"h.{i}.{k}" for i in range(config["n_layer"]) for k in LAYER_KEYS]
        missing = [k for k in need if k not in w]
        if missing:
            raise Refusal(f"weights: no tensor {missing[0]} (with or without the transformer. prefix)")
        self.w = {k: w[k].to(dtype) for k in need}
        self.C, self.L, self.H = config["n_embd"], config["n_layer"], config["n_head"]
        self.eps, self.n_positions = config.get("layer_norm_epsilon", 1e-5), config["n_positions"]
        self.act = config.get("activation_function", "gelu_new")
        if self.act not in ("gelu_new", "gelu"):
            raise Refusal(f"activation_function {self.act}: this reference does gelu_new and gelu")
        for k, shape in (("wte.weight", (config["vocab_size"], self.C)), ("wpe.weight", (self.n_positions, self.C)),
                         ("h.0.attn.c_attn.weight", (self.C, 3 * self.C))):
            if tuple(self.w[k].shape) != shape:
                raise Refusal(f"weights: {k} is {list(self.w[k].shape)}, the config says {list(shape)}")
        if self.C % self.H:
            raise Refusal(f"n_head {self.H} does not divide n_embd {self.C}")

    def log_probs(self, ids):
        """log_softmax of the logits of one sequence of ids, [len(ids), vocab_size]."""
        import torch
        import torch.nn.functional as F

        with torch.no_grad():
            return F.log_softmax(self.logits(ids), dim=-1)

    def logits(self, ids):
        import torch
        import torch.nn.functional as F

        w, C, H = self.w, self.C, self.H
        D = C // H
        T = len(ids)
        if T > self.n_positions:
            raise Refusal(f"an input of {T} tokens, more than n_positions {self.n_positions}")
        idx = torch.tensor(ids, dtype=torch.long)
        x = w["wte.weight"][idx] + w["wpe.weight"][:T]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        for i in range(self.L):
            p = lambda k: w[f"h.{i}.{k}"]  # noqa: E731
            h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), self.eps)
            q, k, v = (h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")).split(C, dim=-1)
            q, k, v = (t.view(T, H, D).permute(1, 0, 2) for t in (q, k, v))
            att = (q @ k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=q.dtype)
            att = torch.where(causal, att, torch.full([], torch.finfo(att.dtype).min, dtype=att.dtype))
            y = (F.softmax(att, dim=-1) @ v).permute(1, 0, 2).reshape(T, C)
            x = x + (y @ p("attn.c_proj.weight") + p("attn.c_proj.bias"))
            h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), self.eps)
            a = h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias")
            if self.act == "gelu":  # GELUActivation
                a = a * 0.5 * (1.0 + torch.erf(a / math.sqrt(2.0)))
            else:  # NewGELUActivation
                a = 0.5 * a * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * torch.pow(a, 3.0))))
            x = x + (a @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias"))
        x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], self.eps)
        return x @ w["wte.weight"].t()


def random_gpt2(seed=0, vocab=50257, n_embd=32, n_layer=2, n_head=2, n_positions=64):
    """(tensors with HF names, config): GPT-2's init (normal 0.02, c_proj 0.02/sqrt(2 n_layer)) with random LayerNorm
    and biases so that every parameter matters."""
    import torch

    g = torch.Generator().manual_seed(seed)
    r = lambda *s, std=0.02: torch.randn(*s, generator=g) * std  # noqa: E731
    C, t = n_embd, {}
    t["wte.weight"], t["wpe.weight"] = r(vocab, C, std=0.5), r(n_positions, C, std=0.1)
    for i in range(n_layer):
        for k, shape in (("attn.c_attn", (C, 3 * C)), ("attn.c_proj", (C, C)), ("mlp.c_fc", (C, 4 * C)),
                         ("mlp.c_proj", (4 * C, C))):
            t[f"h.{i}.{k}.weight"] = r(*shape, std=0.2 if k.endswith("c_attn") else 0.1)
            t[f"h.{i}.{k}.bias"] = r(shape[1])
        for ln in ("ln_1", "ln_2"):
            t[f"h.{i}.{ln}.weight"], t[f"h.{i}.{ln}.bias"] = 1.0 + r(C, std=0.1), r(C, std=0.1)
    t["ln_f.weight"], t["ln_f.bias"] = 1.0 + r(C, std=0.1), r(C, std=0.1)
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new",
              "n_embd": C, "n_layer": n_layer, "n_head": n_head, "n_positions": n_positions, "n_ctx": n_positions,
              "vocab_size": vocab, "layer_norm_epsilon": 1e-5, "bos_token_id": 50256, "eos_token_id": 50256}
    return t, config


# Evaluation.

def evaluate(model, encoder, tasks, data_dir, max_length, bootstrap_iters, prefix_token):
    results, samples = {}, {}
    for task in tasks:
        path = os.path.join(data_dir, f"{task}.jsonl")
        if not os.path.exists(path):
            raise Refusal(f"{path}: no such file")
        with open(path, "r", encoding="utf-8") as f:
            docs = [json.loads(line) for line in f if line.strip()]
        if not docs:
            raise Refusal(f"{data_dir}/{task}.jsonl has no documents")
        per_doc, out = [], []
        for doc_id, doc in enumerate(docs):
            try:
                b = build_doc(task, doc)
            except (KeyError, ValueError) as e:
                raise Refusal(f"{task}.jsonl document {doc_id}: {type(e).__name__} {e}: not the HF dataset's fields")
            reqs = []
            if b["kind"] == "rolling":
                (string,) = b["args"][0]
                total = 0.0
                for ctx, cont in rolling_windows(encoder.encode(string), prefix_token, max_length):
                    ll, greedy = score(model, ctx, cont, max_length)
                    total += ll
                    reqs.append({"context": ctx, "continuation": cont, "loglikelihood": ll, "is_greedy": greedy})
                words, nbytes = wikitext_counts(doc["page"])
                m = {"word_perplexity": (total, words), "byte_perplexity": (total, nbytes),
                     "bits_per_byte": (total, nbytes)}
                out.append({"doc_id": doc_id, "arguments": [string], "loglikelihood": total, "words": words,
                            "bytes": nbytes, "requests": reqs, "metrics": m})
                per_doc.append(m)
                continue
            for context, continuation in b["args"]:
                ctx, cont = encode_pair(encoder.encode, context, continuation, prefix_token)
                ll, greedy = score(model, ctx, cont, max_length)
                reqs.append({"arguments": [context, continuation], "context": ctx, "continuation": cont,
                             "loglikelihood": ll, "is_greedy": greedy})
            if b["kind"] == "ll":
                m = {"perplexity": reqs[0]["loglikelihood"], "acc": int(reqs[0]["is_greedy"])}
                out.append({"doc_id": doc_id, "requests": reqs, "metrics": m})
            else:
                m = mc_metrics(task, [r["loglikelihood"] for r in reqs], b["choices"], b["gold"])
                out.append({"doc_id": doc_id, "choices": b["choices"], "target": b["gold"], "requests": reqs,
                            "metrics": m})
            per_doc.append(m)
        results[task] = aggregate(task, per_doc, bootstrap_iters)
        samples[task] = out
    return {"results": results, "samples": samples}


# Self-check: hand-derived expectations from reading the harness code.

def self_check(vocab, merges):
    import torch

    P, Q, toks = 50256, "Question: Q?\nAnswer:", list(range(100, 110))
    hs = hellaswag_process_doc({"activity_label": "Home and Garden", "ctx_b": "", "label": "1",
                                "ctx_a": "[header] How to repot a plant [title] Choose a bigger pot.",
                                "endings": [" [substeps] Water it first.", "[title] Cut   it.", "Go [step] on."]})
    page = (" = Test Page = \n \n The builders ' tools made a 1 @,@ 200 m well @-@ known bridge ; it is 3 @.@ 5 m "
            "wide . \n \n = = History = = \n \n In 1901 , the bridge ( old ) was \" famous \" . \n")
    enc = lambda s: [ord(c) for c in s]  # noqa: E731  (a fake encoder: one id per character)
    arc = build_doc("arc_easy", {"question": "Q?", "choices": {"text": ["a", "bb"], "label": ["1", "2"]},
                                 "answerKey": "2"})
    wino = {"sentence": "Sam gave it to Alex as _ had read it.", "option1": "Sam", "option2": "Alex", "answer": "2"}
    cases = [
        # HellaSwag: strip; " [title]" -> ". " (leaves ".  "); [..] removed (leaves double spaces); "  " -> " " once.
        ("hellaswag query, endings, gold", hs, {"query": "Home and Garden: How to repot a plant. Choose a bigger pot.",
                                                "choices": [" Water it first.", " Cut  it.", "Go on."], "gold": 1}),
        ("hellaswag capitalize", hellaswag_process_doc({"activity_label": "Music", "ctx_a": "A man holds a Guitar.",
                                                        "ctx_b": "then he Plays", "endings": [], "label": "0"}),
         {"query": "Music: A man holds a Guitar. Then he plays", "choices": [], "gold": 0}),
        # WikiText: every artifact; the raw page's words (45 + "" at each end) and UTF-8 bytes.
        ("wikitext detokenizer", wikitext_detokenizer(page),
         " = Test Page =\n\nThe builders' tools made a 1,200 m well-known bridge; it is 3.5 m wide.\n\n"
         "== History ==\n\nIn 1901, the bridge (old) was \"famous\".\n"),
        ("wikitext === N 's", wikitext_detokenizer(" = = = A = = = \n her father 's N cats \n"),
         " === A ===\nher father's 1 cats\n"),
        ("wikitext words/bytes", (wikitext_counts(page), wikitext_counts("a \u2013 b")), ((47, len(page)), (3, 7))),
        # WinoGrande: the sentence up to "_" + each option as contexts; the rest, stripped, the shared continuation.
        ("winogrande split", winogrande_split(wino),
         (1, ["Sam gave it to Alex as Sam", "Sam gave it to Alex as Alex"], "had read it.")),
        ("winogrande requests", build_doc("winogrande", wino)["args"],
         [("Sam gave it to Alex as Sam", " had read it."), ("Sam gave it to Alex as Alex", " had read it.")]),
        ("arc requests", (arc["args"], arc["gold"]), ([(Q, " a"), (Q, " bb")], 1)),
        ("lambada split", build_doc("lambada_openai", {"text": "one two  three four"})["args"],
         [("one two  three", " four")]),
        # Rolling windows of tokens 100..109, max_seq_len 4, context_len 1, derived by hand: pred_len 4; the first
        # window predicts 100..103 after [P,100,101,102]; then window_end 8: ([103..106], [104..107]); window_end 10:
        # ([105..108], [108,109]); disjoint keeps the first len(a) - (len(b) - 1) context tokens.
        ("rolling windows", list(get_rolling_token_windows(toks, P, 4, 1)),
         [([P, 100, 101, 102], [100, 101, 102, 103]), ([103, 104, 105, 106], [104, 105, 106, 107]),
          ([105, 106, 107, 108], [108, 109])]),
        ("disjoint windows", (rolling_windows(toks, P, 4), rolling_windows([7, 8], P, 4)),
         ([([P], [100, 101, 102, 103]), ([103], [104, 105, 106, 107]), ([105, 106, 107], [108, 109])],
          [([P], [7, 8])])),
        ("truncation", (model_input([1, 2, 3, 4, 5, 6], [7, 8], 4), model_input([1, 2], [3], 4)),
         ([4, 5, 6, 7], [1, 2])),
        ("empty context", (encode_pair(enc, "", "ab", P), encode_pair(enc, "", "ab", 97)),
         (([P], [97, 98]), ([97], [98]))),
        ("trailing space moved", encode_pair(enc, "a  ", "b", P), ([97], [32, 32, 98])),
        # Metrics.
        ("acc / acc_norm differ", mc_metrics("piqa", [-10.0, -12.0], ["abcde", "x" * 20], 1),
         {"acc": 0.0, "acc_norm": 1.0}),
        ("ties: the first", mc_metrics("arc_easy", [-5.0, -5.0], ["ab", "cd"], 0), {"acc": 1.0, "acc_norm": 1.0}),
        ("winogrande acc only", mc_metrics("winogrande", [-1.0, -2.0], ["a", "b"], 0), {"acc": 1.0}),
        ("mean_stderr [1,0,1,1]", mean_stderr([1.0, 0.0, 1.0, 1.0]), 0.25),
        ("weighted_perplexity", weighted_perplexity([(-10.0, 5), (-20.0, 5)]), math.exp(3.0)),
        ("bits_per_byte", abs(bits_per_byte([(-10.0, 20), (-20.0, 40)]) - 0.5 / math.log(2)) < 1e-15, True),
        ("aggregate keys", list(aggregate("arc_easy", [{"acc": 1.0, "acc_norm": 0.0}], 0)),
         ["name", "alias", "sample_len", "acc,none", "acc_stderr,none", "acc_norm,none", "acc_norm_stderr,none"]),
        ("bootstrap deterministic", bootstrap_stderr(perplexity, [-1.0, -2.0, -3.0], 2000)
         == bootstrap_stderr(perplexity, [-1.0, -2.0, -3.0], 2000) > 0, True),
    ]
    # GPT-2 forward: float32 against float64 of the same weights; causality; the prefix; lambada_torch's GPT2.
    tensors, config = random_gpt2(seed=1, vocab=300, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    m32, m64 = GPT2(tensors, config), GPT2(tensors, config, dtype=torch.float64)
    ids = [int(i) for i in torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(2))]
    lp32, lp64 = m32.log_probs(ids), m64.log_probs(ids)
    err = float((lp32.double() - lp64).abs().max())
    print(f"     forward float32 vs float64: max |diff| of log-probs {err:.3g}")
    mp = GPT2({"transformer." + k: v for k, v in tensors.items()}, config, dtype=torch.float64)
    cases += [("forward float32 ~ float64 (< 1e-4)", err < 1e-4, True),
              ("forward causal", float((m64.log_probs(ids[:25]) - lp64[:25]).abs().max()) < 1e-12, True),
              ("transformer. prefix", bool(torch.equal(mp.log_probs(ids), lp64)), True),
              ("log-probs normalized", float((lp64.exp().sum(-1) - 1).abs().max()) < 1e-12, True)]
    try:
        import lambada_torch

        other = lambada_torch.GPT2({k: v.double() for k, v in tensors.items()}, "-", 2, 1e-5, "gelu_new")
        diff = float((torch.log_softmax(other.logits(torch.tensor([ids]))[0], -1) - lp64).abs().max())
        cases.append(("tools/lambada_torch.py GPT2 agrees (< 1e-10)", diff < 1e-10, True))
    except ImportError as e:
        print(f"skip lambada_torch comparison: {e}")
    if vocab and os.path.exists(vocab) and os.path.exists(merges):
        from gpt2_encoder_reference import Encoder

        e = Encoder.from_files(vocab, merges)
        c, t = encode_pair(e.encode, Q, " bb", P)
        cases += [("BPE split at the context", e.decode(c) + "|" + e.decode(t), Q + "| bb"),
                  ("eot id", e.encoder["<|endoftext|>"], P)]
    else:
        print(f"skip BPE checks: {vocab} or {merges} missing (scripts/setup.sh creates them)")
    for name, got, want in cases:
        print(("ok   " if got == want else "FAIL ") + name + ("" if got == want else f"\n got {got!r}\n want {want!r}"))
    fails = [name for name, got, want in cases if got != want]
    print("self-check:", "FAILED " + ", ".join(fails) if fails else "all %d passed" % len(cases))
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights")
    ap.add_argument("--hf-config")
    ap.add_argument("--vocab", default=os.path.join(HERE, "..", "data", "gpt2", "gpt2-vocab.json"))
    ap.add_argument("--merges", default=os.path.join(HERE, "..", "data", "gpt2", "gpt2-merges.txt"))
    ap.add_argument("--data", default=os.path.join(HERE, "..", "tests", "data", "harness"))
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--max-length", type=int, help="the harness's max_length (HFLM: n_positions unless set)")
    ap.add_argument("--bootstrap-iters", type=int, default=100000, help="simple_evaluate's default 100000")
    ap.add_argument("--out")
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--write-random-model", metavar="DIR")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="the forward's precision")
    args = ap.parse_args()
    try:
        if args.self_check:
            return self_check(args.vocab, args.merges)
        if args.write_random_model:
            tensors, config = random_gpt2(seed=args.seed)
            os.makedirs(args.write_random_model, exist_ok=True)
            write_safetensors(os.path.join(args.write_random_model, "model.safetensors"), tensors)
            with open(os.path.join(args.write_random_model, "config.json"), "w") as f:
                json.dump(config, f, indent=2)
            return 0
        if not (args.weights and args.hf_config and args.out):
            raise Refusal("--weights, --hf-config and --out are needed (or --self-check)")
        tasks = [t for t in args.tasks.split(",") if t]
        if any(t not in TASKS for t in tasks):
            raise Refusal(f"--tasks {args.tasks}: known: {', '.join(TASKS)}")
        with open(args.hf_config, "r", encoding="utf-8") as f:
            config = json.load(f)
        import torch

        model = GPT2(read_safetensors(args.weights), config, dtype=getattr(torch, args.dtype))
        max_length = args.max_length or config["n_positions"]
        if not 1 <= max_length <= config["n_positions"]:
            raise Refusal(f"--max-length {max_length}: must be 1..n_positions {config['n_positions']}")
        from gpt2_encoder_reference import Encoder

        encoder = Encoder.from_files(args.vocab, args.merges)
        prefix = encoder.encoder["<|endoftext|>"]
        out = evaluate(model, encoder, tasks, args.data, max_length, args.bootstrap_iters, prefix)
        out["config"] = {"max_length": max_length, "bootstrap_iters": args.bootstrap_iters, "prefix_token": prefix,
                         "loglikelihood": f"float64 sum of {args.dtype} log_softmax values"}
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, ensure_ascii=False)
    except Refusal as e:
        print(f"harness_reference: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
