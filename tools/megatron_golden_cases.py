#!/usr/bin/python3
"""The checkpoints tools/make_megatron_golden.py writes (main: the Hugging Face weights, the yaml configs, the list
of cases) and the hand-made ones: the malicious pickle, `partial` and `unmapped`. Moved out of
tools/make_megatron_golden.py unchanged; that file, run as a script, calls main here. Its Case and layout functions
stay there (tests/integration/megatron_out_check.py and bench/megatron_read.py set its VOCAB, HIDDEN, HEADS and
POSITIONS and build Case objects).
"""
import argparse
import collections
import os
import shutil

import torch

from make_golden import write_safetensors
import make_megatron_golden as mg
from make_megatron_golden import (HEADS, HIDDEN, LEGACY_NAMES, LLAMA_FFN, MOE_EXPERTS, MOE_FFN, Case, dir_bytes,
                                  hf_gpt2, hf_llama, pad_vocab)


MARKER = "gf_megatron_MARKER"  # created in the working directory if the malicious payload ever ran


# ----------------------------------------------------------------------------
# A checkpoint whose pickle would run os.system if a general unpickler loaded it.

class SystemPayload:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


def write_malicious(out_dir):
    root = os.path.join(out_dir, "malicious")
    shutil.rmtree(root, ignore_errors=True)
    path = os.path.join(root, "iter_0000001", "mp_rank_00", "model_optim_rng.pt")
    os.makedirs(os.path.dirname(path))
    args = argparse.Namespace(num_layers=4, hidden_size=HIDDEN, num_attention_heads=HEADS, tokenizer_type=SystemPayload())
    torch.save({"args": args, "checkpoint_version": 3.0, "iteration": 1,
                "model": {"language_model": {}}}, path)  # pickled only, never loaded here
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("1")
    print(f"wrote {root} (refusal must name {os.system.__module__}.system)")


def write_single(out_dir, name, case, model):
    """A one-file checkpoint with `case`'s args (so that it passes the args check) and `model`."""
    root = os.path.join(out_dir, name)
    shutil.rmtree(root, ignore_errors=True)
    path = os.path.join(root, "iter_0000001", "mp_rank_00", "model_optim_rng.pt")
    os.makedirs(os.path.dirname(path))
    torch.save({"args": case.args(), "checkpoint_version": 3.0, "iteration": 1, "model": model}, path)
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("1")
    print(f"wrote {root}: {dir_bytes(root)} bytes")


def write_broken(out_dir, gpt2):
    """core_gpt's args with a model that lacks every tensor but the embedding (`partial`), and one that
    also holds a tensor no rule maps (`unmapped`: q_layernorm, which get_gpt_layer_local_spec adds with
    qk_layernorm=True)."""
    case = Case("core_gpt_tp1", "core", gpt2, 4)
    word = pad_vocab(gpt2["wte.weight"], case.padded)
    write_single(out_dir, "partial", case, collections.OrderedDict([("embedding.word_embeddings.weight", word)]))
    write_single(out_dir, "unmapped", case, collections.OrderedDict([
        ("embedding.word_embeddings.weight", word),
        ("decoder.layers.0.self_attention.q_layernorm.weight", torch.ones(HIDDEN // HEADS))]))


# ----------------------------------------------------------------------------

def yaml_configs(out_dir):
    common = "seq_length: 32, vocab_size: 100, hidden_size: 16, num_heads: 4"
    files = {
        "gpt2.yaml": "model:\n  model_config: {type: GPT2Config, " + common + ", num_layers: 4, max_position_embeddings: 32,"
                     " expand_ratio: 4, layernorm_epsilon: 1.0e-5, hidden_act: gelu_new}\n  arch: {type: GPT2LMHeadModel}\n",
        "llama.yaml": "model:\n  model_config: {type: LlamaConfig, " + common + ", num_layers: 2, n_kv_heads: 2,"
                      f" intermediate_size: {LLAMA_FFN}, rms_norm_eps: 1.0e-5, tie_word_embeddings: False}}\n"
                      "  arch: {type: LlamaForCausalLM}\n",
        "mixtral.yaml": "model:\n  model_config: {type: LlamaConfig, " + common + ", num_layers: 2, n_kv_heads: 2,"
                        f" intermediate_size: {MOE_FFN}, rms_norm_eps: 1.0e-5, tie_word_embeddings: False}}\n"
                        "  arch: {type: MixtralForCausalLM}\n"
                        f"moe_config: {{expert_num: {MOE_EXPERTS}, num_experts_chosen: 2, capacity_factor: -1}}\n",
    }
    for name, text in files.items():
        with open(os.path.join(out_dir, name), "w") as f:
            f.write("# Written by tools/make_megatron_golden.py: the model the Megatron checkpoints beside it hold.\n" + text)


def main():
    ap = argparse.ArgumentParser(description=mg.__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "golden", "megatron"))
    out = os.path.normpath(ap.parse_args().out)
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)

    gpt2, llama, mixtral = hf_gpt2(), hf_llama(), hf_llama(experts=MOE_EXPERTS, seed=13)
    meta = {"format": "pt", "written_by": "tools/make_megatron_golden.py"}
    write_safetensors(os.path.join(out, "gpt2.safetensors"), gpt2, meta)
    write_safetensors(os.path.join(out, "llama.safetensors"), llama, meta)
    write_safetensors(os.path.join(out, "mixtral.safetensors"), mixtral, meta)
    yaml_configs(out)

    L = 4
    llama_core = dict(flavor="core", layers=2, glu=True, gqa=True, rope=True, bias=False, untied=True,
                      norm="RMSNorm", divisible_by=64)
    cases = [
        # (a) the first Megatron-LM's layout: 'transformer' and '.attention.', qkv as [3, np, hn]
        Case("legacy_v0_tp1", "legacy", gpt2, L, version=0, container="transformer", attention="attention",
             iteration=500, save_rng=True),
        # version 1.0's qkv ([np, hn, 3]) on each of two TP shards' heads
        Case("legacy_v1_tp2", "legacy", gpt2, L, tp=2, version=1.0, container="transformer", attention="attention",
             divisible_by=64),
        # (b) TP 2 x PP 2: stage-local layer numbers, word_embeddings_for_head, 112 padded vocabulary rows
        Case("legacy_v2_tp2_pp2", "legacy", gpt2, L, tp=2, pp=2, version=2.0, divisible_by=8, iteration=2000),
        # PP 2 x 2 virtual stages ('model0', 'model1'), the later legacy names (input_norm, final_norm)
        Case("legacy_v3_pp2_vp2", "legacy", gpt2, L, pp=2, vp=2, version=3.0,
             names=dict(LEGACY_NAMES, norm1="input_norm", norm2="post_attention_norm"), final="final_norm"),
        # (c) release/ directory, bfloat16 weights
        Case("legacy_v3_release_bf16", "legacy", gpt2, L, version=3.0, release=True, dtype=torch.bfloat16),
        # (d) Megatron-core GPT, TP 2: local spec names and Transformer Engine's fused-norm names
        Case("core_gpt_local_tp2", "core", gpt2, L, tp=2, divisible_by=64),
        Case("core_gpt_te_tp2", "core", gpt2, L, tp=2, te=True, divisible_by=64),
        # (e) Megatron-core Llama: RMSNorm, SwiGLU, RoPE, GQA (4 heads, 2 groups), untied output, TP 2
        Case("core_llama_te_tp2", hf=llama, tp=2, te=True, **llama_core),
        # (f) Megatron-core MoE (Mixtral-style, 4 experts, top 2), TP 1 x EP 2: per-expert and grouped
        Case("core_moe_ep2", hf=mixtral, ep=2, moe=("local", MOE_EXPERTS), save_rng=True, **llama_core),
        Case("core_moe_grouped_ep2", hf=mixtral, ep=2, moe=("grouped", MOE_EXPERTS), **llama_core),
    ]
    for c in cases:
        c.write(out)
    write_malicious(out)
    write_broken(out, gpt2)
    print(f"{out}: {dir_bytes(out)} bytes in all")
