#!/usr/bin/python3
"""Write small Megatron-LM checkpoints for models/weights/megatron_checkpoint (the test is
tests/models/megatron_checkpoint_test.cpp), each beside the same weights under Hugging Face's names.

Run with Debian's Python (python3-torch 1.13, python3-numpy):

    /usr/bin/python3 tools/make_megatron_golden.py [--out tests/golden/megatron]

Every checkpoint is a directory as Megatron's save_checkpoint leaves it
(megatron/checkpointing.py at 285068c; megatron/training/checkpointing.py at core_r0.6.0):
latest_checkpointed_iteration.txt, then iter_NNNNNNN/ (or release/) holding one
mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt per model-parallel rank, each a torch.save of
{'args', 'checkpoint_version', 'iteration', 'model' (or 'model0', 'model1', ...), 'optimizer',
'opt_param_scheduler', 'rng_state'}. The Megatron tensors are built here from the Hugging Face
tensors by transcribing Megatron's own code (cited at each function), never from gridformer's reader.
See tests/golden/megatron/README.md for the cases. Deterministic: rerunning rewrites every file
byte for byte (fixed seeds; torch.save's zip writer stores no time stamps).

Here: the Hugging Face weights, Megatron's layouts and Case. Megatron's enums and the training state are in
tools/megatron_golden_state.py; main, the list of cases and the hand-made checkpoints in
tools/megatron_golden_cases.py.
"""
import argparse
import collections
import os
import shutil
import sys

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Megatron's enums (registered under their module names on import) and what save_checkpoint stores beside the
# model; main, the list of cases and the hand-made checkpoints are tools/megatron_golden_cases.py's.
from megatron_golden_state import CoreModelType, LegacyModelType, dir_bytes, training_state  # noqa: E402

# ----------------------------------------------------------------------------
# The Hugging Face models (our parameter names and layouts: GPT2Model's Conv1D [in, out], Llama's and
# Mixtral's nn.Linear [out, in]).

VOCAB = 100
HIDDEN = 16
HEADS = 4
POSITIONS = 32


def bf16_exact(t):
    """Values a bfloat16 holds exactly, kept as float32 (the bf16 case stores the same numbers)."""
    return t.to(torch.bfloat16).to(torch.float32)


def randn(gen, *shape, scale=1.0, offset=0.0):
    return bf16_exact(torch.randn(*shape, generator=gen) * scale + offset)


def hf_gpt2(layers=4, seed=11):
    g = torch.Generator().manual_seed(seed)
    C, F = HIDDEN, 4 * HIDDEN
    t = collections.OrderedDict()
    t["wte.weight"] = randn(g, VOCAB, C, scale=0.5)
    t["wpe.weight"] = randn(g, POSITIONS, C, scale=0.1)
    for i in range(layers):
        h = f"h.{i}."
        t[h + "ln_1.weight"] = randn(g, C, scale=0.1, offset=1.0)
        t[h + "ln_1.bias"] = randn(g, C, scale=0.1)
        t[h + "attn.c_attn.weight"] = randn(g, C, 3 * C, scale=0.2)
        t[h + "attn.c_attn.bias"] = randn(g, 3 * C, scale=0.1)
        t[h + "attn.c_proj.weight"] = randn(g, C, C, scale=0.2)
        t[h + "attn.c_proj.bias"] = randn(g, C, scale=0.1)
        t[h + "ln_2.weight"] = randn(g, C, scale=0.1, offset=1.0)
        t[h + "ln_2.bias"] = randn(g, C, scale=0.1)
        t[h + "mlp.c_fc.weight"] = randn(g, C, F, scale=0.2)
        t[h + "mlp.c_fc.bias"] = randn(g, F, scale=0.1)
        t[h + "mlp.c_proj.weight"] = randn(g, F, C, scale=0.2)
        t[h + "mlp.c_proj.bias"] = randn(g, C, scale=0.1)
    t["ln_f.weight"] = randn(g, C, scale=0.1, offset=1.0)
    t["ln_f.bias"] = randn(g, C, scale=0.1)
    return t


LLAMA_GROUPS = 2
LLAMA_FFN = 48
MOE_EXPERTS = 4
MOE_FFN = 32


def hf_llama(layers=2, experts=0, seed=12):
    g = torch.Generator().manual_seed(seed)
    C, D = HIDDEN, HIDDEN // HEADS
    F = MOE_FFN if experts else LLAMA_FFN
    t = collections.OrderedDict()
    t["model.embed_tokens.weight"] = randn(g, VOCAB, C, scale=0.5)
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = randn(g, C, scale=0.1, offset=1.0)
        t[p + "self_attn.q_proj.weight"] = randn(g, HEADS * D, C, scale=0.2)
        t[p + "self_attn.k_proj.weight"] = randn(g, LLAMA_GROUPS * D, C, scale=0.2)
        t[p + "self_attn.v_proj.weight"] = randn(g, LLAMA_GROUPS * D, C, scale=0.2)
        t[p + "self_attn.o_proj.weight"] = randn(g, C, HEADS * D, scale=0.2)
        t[p + "post_attention_layernorm.weight"] = randn(g, C, scale=0.1, offset=1.0)
        if experts:
            t[p + "block_sparse_moe.gate.weight"] = randn(g, experts, C, scale=0.2)
            for e in range(experts):
                x = p + f"block_sparse_moe.experts.{e}."
                t[x + "w1.weight"] = randn(g, F, C, scale=0.2)
                t[x + "w2.weight"] = randn(g, C, F, scale=0.2)
                t[x + "w3.weight"] = randn(g, F, C, scale=0.2)
        else:
            t[p + "mlp.gate_proj.weight"] = randn(g, F, C, scale=0.2)
            t[p + "mlp.up_proj.weight"] = randn(g, F, C, scale=0.2)
            t[p + "mlp.down_proj.weight"] = randn(g, C, F, scale=0.2)
    t["model.norm.weight"] = randn(g, C, scale=0.1, offset=1.0)
    t["lm_head.weight"] = randn(g, VOCAB, C, scale=0.5)
    return t


# ----------------------------------------------------------------------------
# Megatron's full (TP = 1) tensors from Hugging Face's, in Megatron's [out, in] nn.Linear layout.

def qkv_grouped(q, k, v, heads, groups):
    """One query_key_value / linear_qkv tensor from q, k, v ([heads * D, ...], [groups * D, ...]):
    for each query group its heads_per_group q heads, then its k head, then its v head. Transcribes
    tools/checkpoint/loader_llama2_hf.py (core_r0.6.0) set_attn_state:
        torch.cat([q.reshape((ng, dim*nh, -1)), k.reshape((ng, dim, -1)), v.reshape((ng, dim, -1))],
                  dim=1).reshape((-1, hidden))
    (and the bias the same way), the layout megatron/core/transformer/attention.py
    SelfAttention.get_query_key_value_tensors reads ([sq, b, ng, (np/ng + 2) * hn]); with ng = np it is
    the legacy ParallelAttention's [np, 3, hn] (megatron/model/transformer.py at 285068c)."""
    D = q.shape[0] // heads
    nh = heads // groups
    tail = q.shape[1:]
    return torch.cat([q.reshape((groups, D * nh) + tail), k.reshape((groups, D) + tail),
                      v.reshape((groups, D) + tail)], dim=1).reshape((-1,) + tail)


def qkv_checkpoint_version(shard, version, heads_per_shard):
    """A TP shard's query_key_value as an older checkpoint_version stored it, from the current
    [np, 3, hn] layout. megatron/checkpointing.py (285068c) fix_query_key_value_ordering turns the stored
    tensor into the current layout with _transpose_first_dim, whose docstrings name the stored layouts:
    version 0 "[num_splits * np * hn, h] -->(view) [num_splits, np, hn, h] -->(tranpose) [np, num_splits, hn, h]",
    version 1.0 "[np * hn * num_splits, h] -->(view) [np, hn, num_splits, h] -->(tranpose) [np, num_splits, hn, h]".
    This applies the inverse transposes to the shard's own heads."""
    if version >= 2.0:
        return shard
    tail = shard.shape[1:]
    hn = shard.shape[0] // (3 * heads_per_shard)
    t = shard.reshape((heads_per_shard, 3, hn) + tail)  # the current [np, 3, hn, h]
    t = t.transpose(0, 1) if version == 0 else t.transpose(1, 2)  # [3, np, hn, h] or [np, hn, 3, h]
    stored = t.contiguous().reshape(shard.shape)
    assert torch.equal(transpose_first_dim(stored, 3, version == 0, heads_per_shard, hn), shard)
    return stored


def transpose_first_dim(t, num_splits, num_splits_first, np_, hn):
    """megatron/checkpointing.py (285068c) _transpose_first_dim, as Megatron runs it on load (its model
    argument replaced by the two sizes it reads from the attention module)."""
    input_shape = t.size()
    if num_splits_first:
        t = t.view(*((num_splits, np_, hn) + input_shape[1:]))
        t = t.transpose(0, 1).contiguous()
    else:
        t = t.view(*((np_, hn, num_splits) + input_shape[1:]))
        t = t.transpose(1, 2).contiguous()
    return t.view(*input_shape)


def vocab_with_padding(true_vocab, divisible_by, tp):
    """megatron/tokenizer/tokenizer.py _vocab_size_with_padding: up to a multiple of
    make_vocab_size_divisible_by * tensor_model_parallel_size."""
    after, multiple = true_vocab, divisible_by * tp
    while after % multiple != 0:
        after += 1
    return after


def pad_vocab(w, padded):
    """tools/checkpoint/saver_megatron.py (core_r0.6.0): the padding rows replicate the last entry."""
    return torch.cat((w, w[-1].unsqueeze(0).expand(padded - w.shape[0], -1)))


def gpt2_layers(hf, layers):
    """Per layer, Megatron's tensors by role. GPT-2's Conv1D [in, out] transposed to [out, in];
    c_attn's q|k|v columns grouped per head (qkv_grouped with groups = heads)."""
    C = HIDDEN
    out = []
    for i in range(layers):
        h = f"h.{i}."
        w, b = hf[h + "attn.c_attn.weight"].t(), hf[h + "attn.c_attn.bias"]
        out.append({
            "norm1.weight": hf[h + "ln_1.weight"], "norm1.bias": hf[h + "ln_1.bias"],
            "qkv.weight": qkv_grouped(w[:C], w[C:2 * C], w[2 * C:], HEADS, HEADS),
            "qkv.bias": qkv_grouped(b[:C], b[C:2 * C], b[2 * C:], HEADS, HEADS),
            "proj.weight": hf[h + "attn.c_proj.weight"].t(), "proj.bias": hf[h + "attn.c_proj.bias"],
            "norm2.weight": hf[h + "ln_2.weight"], "norm2.bias": hf[h + "ln_2.bias"],
            "fc1.weight": hf[h + "mlp.c_fc.weight"].t(), "fc1.bias": hf[h + "mlp.c_fc.bias"],
            "fc2.weight": hf[h + "mlp.c_proj.weight"].t(), "fc2.bias": hf[h + "mlp.c_proj.bias"],
        })
    return out


def llama_layers(hf, layers, experts=0):
    """loader_llama2_hf.py (core_r0.6.0): set_attn_state (qkv_grouped, o_proj as dense), set_mlp_state
    (dense_h_to_4h = torch.cat([gate_proj, up_proj], dim=0): SwiGLU's gate half first, as
    megatron/core/transformer/mlp.py's glu reads it: silu(chunk 0) * chunk 1). The MoE layer's
    (megatron/core/transformer/moe/: router.weight [experts, hidden], each expert an MLP) from
    Mixtral's gate and w1 (gate) / w3 (up) / w2 (down)."""
    out = []
    for i in range(layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        d = {
            "norm1.weight": hf[p + "input_layernorm.weight"],
            "qkv.weight": qkv_grouped(hf[a + "q_proj.weight"], hf[a + "k_proj.weight"], hf[a + "v_proj.weight"],
                                      HEADS, LLAMA_GROUPS),
            "proj.weight": hf[a + "o_proj.weight"],
            "norm2.weight": hf[p + "post_attention_layernorm.weight"],
        }
        if experts:
            m = p + "block_sparse_moe."
            d["router.weight"] = hf[m + "gate.weight"]
            for e in range(experts):
                x = m + f"experts.{e}."
                d[f"expert{e}.fc1.weight"] = torch.cat([hf[x + "w1.weight"], hf[x + "w3.weight"]], dim=0)
                d[f"expert{e}.fc2.weight"] = hf[x + "w2.weight"]
        else:
            d["fc1.weight"] = torch.cat([hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]], dim=0)
            d["fc2.weight"] = hf[p + "mlp.down_proj.weight"]
        out.append(d)
    return out


# ----------------------------------------------------------------------------
# Tensor-parallel shards, as tools/checkpoint/saver_megatron.py / saver_mcore.py (core_r0.6.0) cut the
# full tensors: column-parallel weights and biases (qkv, fc1) and the vocabulary by rows
# (torch.chunk(..., dim=0)), row-parallel weights (dense / linear_proj, fc2) by columns (dim=1);
# norms, row-parallel biases, the router and the position table whole on every rank. SwiGLU's fc1:
#     mlp_l0_weight_W = torch.chunk(msg.pop("mlp l0 weight W"), tp, dim=0)
#     mlp_l0_weight_V = torch.chunk(msg.pop("mlp l0 weight V"), tp, dim=0)
#     mlp_l0_weight = [torch.cat(weights, dim=0) for weights in zip(mlp_l0_weight_W, mlp_l0_weight_V)]

def split_of(role):
    kind = role.rsplit(".", 1)[0].split(".")[-1]
    if kind in ("qkv", "fc1"):
        return "rows"
    if kind in ("proj", "fc2") and role.endswith(".weight"):
        return "cols"
    return "whole"


def shard(t, how, tp, rank, glu=False):
    if how == "rows" and glu:
        W, V = torch.chunk(t, 2, dim=0)
        return torch.cat([torch.chunk(W, tp, dim=0)[rank], torch.chunk(V, tp, dim=0)[rank]], dim=0)
    if how == "rows":
        return torch.chunk(t, tp, dim=0)[rank]
    if how == "cols":
        return torch.chunk(t, tp, dim=1)[rank]
    return t


def stage_layers(num_layers, pp, vp, pp_rank, vp_rank):
    """Global numbers of the layers model chunk (pp_rank, vp_rank) holds: megatron/model/transformer.py
    (285068c) ParallelTransformer.__init__ and megatron/core/transformer/transformer_layer.py
    (core_r0.6.0) _get_layer_offset: offset = vp_rank * (num_layers // vp) + pp_rank * chunk, with
    chunk = num_layers // pp // vp layers per chunk; the state dict numbers them from 0."""
    chunk = num_layers // pp // vp
    offset = vp_rank * (num_layers // vp) + pp_rank * chunk
    return list(range(offset, offset + chunk))


# ----------------------------------------------------------------------------
# State dicts of one model chunk of one rank.

# Megatron's names for the roles above. Legacy: megatron/model/transformer.py (285068c)
# ParallelTransformerLayer / ParallelAttention / ParallelMLP, and the renames of later legacy code
# (megatron/legacy/model/transformer.py at core_r0.6.0: input_norm, post_attention_norm, final_norm).
LEGACY_NAMES = {
    "norm1": "input_layernorm", "qkv": "self_attention.query_key_value", "proj": "self_attention.dense",
    "norm2": "post_attention_layernorm", "fc1": "mlp.dense_h_to_4h", "fc2": "mlp.dense_4h_to_h",
}
# core_r0.6.0 megatron/core/models/gpt/gpt_layer_specs.py: get_gpt_layer_local_spec (FusedLayerNorm,
# ColumnParallelLinear, RowParallelLinear) and get_gpt_layer_with_transformer_engine_spec (the input
# and pre-MLP norms fused into TELayerNormColumnParallelLinear as layer_norm_weight / layer_norm_bias).
CORE_LOCAL_NAMES = {
    "norm1": "input_layernorm", "qkv": "self_attention.linear_qkv", "proj": "self_attention.linear_proj",
    "norm2": "pre_mlp_layernorm", "fc1": "mlp.linear_fc1", "fc2": "mlp.linear_fc2",
    "router": "mlp.router",
}
CORE_TE_NAMES = dict(CORE_LOCAL_NAMES, **{"norm1": "self_attention.linear_qkv.layer_norm_",
                                          "norm2": "mlp.linear_fc1.layer_norm_"})
# Modules whose state_dict holds an `_extra_state`: core's ColumnParallelLinear / RowParallelLinear
# (tensor_parallel/layers.py: get_extra_state returns None) and Transformer Engine's modules
# (TransformerEngineBaseModule.get_extra_state: an empty uint8 tensor without fp8 state in the TE
# versions that return a tensor).
CORE_LOCAL_EXTRA = ["self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2"]
CORE_TE_EXTRA = ["self_attention.linear_qkv", "self_attention.core_attention", "self_attention.linear_proj",
                 "mlp.linear_fc1", "mlp.linear_fc2"]


def layer_entries(d, names, tp, rank, glu, version, moe=None, ep_rank=0):
    """(suffix, tensor) of one layer's state dict on TP rank `rank` (EP rank `ep_rank`)."""
    out = []
    for role, t in d.items():
        if role.startswith("expert"):
            continue
        kind, param = role.split(".")
        name = names[kind]
        full = name + param if name.endswith("_") else f"{name}.{param}"
        s = shard(t, split_of(role), tp, rank, glu and kind == "fc1")
        if kind == "qkv":
            s = qkv_checkpoint_version(s, version, HEADS // tp)
        out.append((full, s))
    if moe:
        out += expert_entries(d, tp, rank, glu, moe, ep_rank)
    return out


def expert_entries(d, tp, rank, glu, moe, ep_rank):
    """The MoE layer's experts on EP rank `ep_rank`. megatron/core/transformer/moe/moe_layer.py
    (core_r0.6.0): local expert i of EP rank r is global expert r * num_local_experts + i. SequentialMLP
    (moe/experts.py) holds them as local_experts.{i} MLPs (linear_fc1 / linear_fc2, sharded as the dense
    MLP); GroupedMLP as weight1 [hidden, local * ffn * 2 / tp] and weight2 [local * ffn / tp, hidden],
    which its forward reads as weight1.view(num_local_experts, hidden, -1) (expert i's fc1 transposed:
    x @ w1[i], then glu) and weight2.view(num_local_experts, -1, hidden) (x @ w2[i])."""
    kind, experts, ep = moe
    local = experts // ep
    fc1 = [shard(d[f"expert{ep_rank * local + i}.fc1.weight"], "rows", tp, rank, glu) for i in range(local)]
    fc2 = [shard(d[f"expert{ep_rank * local + i}.fc2.weight"], "cols", tp, rank) for i in range(local)]
    if kind == "grouped":
        weight1 = torch.stack([w.t() for w in fc1]).reshape(HIDDEN, -1).contiguous()  # [hidden, local * 2 ffn / tp]
        weight2 = torch.stack([w.t() for w in fc2]).reshape(-1, HIDDEN).contiguous()  # [local * ffn / tp, hidden]
        for i in range(local):  # GroupedMLP.forward's views give back each expert's x @ fc1.T and x @ fc2.T
            assert torch.equal(weight1.view(local, HIDDEN, -1)[i], fc1[i].t())
            assert torch.equal(weight2.view(local, -1, HIDDEN)[i], fc2[i].t())
        return [("mlp.experts.weight1", weight1), ("mlp.experts.weight2", weight2)]
    out = []
    for i in range(local):
        x = f"mlp.experts.local_experts.{i}."
        out += [(x + "linear_fc1.weight", fc1[i]), (x + "linear_fc1._extra_state", None),
                (x + "linear_fc2.weight", fc2[i]), (x + "linear_fc2._extra_state", None)]
    return out


def state_dict(items):
    """An OrderedDict as nn.Module.state_dict() returns it: with the `_metadata` attribute it pickles
    (BUILD on the dict), which a reader must accept and drop."""
    d = collections.OrderedDict(items)
    d._metadata = collections.OrderedDict([("", {"version": 1})])
    return d


def cast(t, dtype):
    """The weights in the checkpoint's dtype (args.params_dtype); `_extra_state` entries as they are."""
    return t if t is None or not t.is_floating_point() else t.to(dtype).clone()


class Case:
    """One checkpoint: its layout and flavour, and the model it holds."""

    def __init__(self, name, flavor, hf, layers, tp=1, pp=1, vp=1, ep=1, version=3.0, divisible_by=128,
                 release=False, dtype=torch.float32, names=None, container="encoder", attention="self_attention",
                 final="final_layernorm", te=False, moe=None, glu=False, gqa=False, rope=False, bias=True,
                 untied=False, norm="LayerNorm", iteration=1000, save_rng=False):
        self.__dict__.update(locals())
        del self.__dict__["self"]
        self.padded = vocab_with_padding(VOCAB, divisible_by, tp)

    # -- args, as megatron/arguments.py leaves them (the keys check_checkpoint_args and the readers use)
    def args(self):
        a = dict(
            num_layers=self.layers, hidden_size=HIDDEN, num_attention_heads=HEADS,
            kv_channels=HIDDEN // HEADS, max_position_embeddings=POSITIONS, seq_length=POSITIONS,
            make_vocab_size_divisible_by=self.divisible_by, padded_vocab_size=self.padded,
            tokenizer_type="GPT2BPETokenizer", vocab_file="gpt2-vocab.json", merge_file="gpt2-merges.txt",
            micro_batch_size=2, global_batch_size=8, lr=1.5e-4, min_lr=1e-5, seed=1234,
            consumed_train_samples=8 * self.iteration, consumed_valid_samples=0, fp16=False,
            bf16=self.dtype == torch.bfloat16, params_dtype=self.dtype, rampup_batch_size=None,
            data_path=["1.0", "data/my-gpt2_text_document"], adam_betas=None, adam_beta1=0.9, adam_beta2=0.95,
            use_distributed_optimizer=False)
        if self.version == 0:  # the arguments of the first Megatron-LM (2019): one model-parallel size
            a.update(model_parallel_size=self.tp)
        else:
            a.update(tensor_model_parallel_size=self.tp, pipeline_model_parallel_size=self.pp,
                     virtual_pipeline_model_parallel_size=self.vp if self.vp > 1 else None,
                     num_layers_per_virtual_pipeline_stage=self.layers // self.pp // self.vp if self.vp > 1 else None,
                     ffn_hidden_size=self.ffn(), layernorm_epsilon=1e-5, bias_gelu_fusion=True,
                     openai_gelu=False, apply_residual_connection_post_layernorm=False,
                     model_type=LegacyModelType.encoder_or_decoder)
        if self.flavor == "core":
            a.update(norm_epsilon=1e-5, normalization=self.norm, swiglu=self.glu,
                     position_embedding_type="rope" if self.rope else "learned_absolute",
                     add_position_embedding=True, rotary_percent=1.0, add_bias_linear=self.bias,
                     add_qkv_bias=False, untie_embeddings_and_output_weights=self.untied,
                     group_query_attention=self.gqa, num_query_groups=LLAMA_GROUPS if self.gqa else 1,
                     transformer_impl="transformer_engine" if self.te else "local", use_mcore_models=True,
                     expert_model_parallel_size=self.ep, num_experts=self.moe[1] if self.moe else None,
                     moe_router_topk=2, moe_grouped_gemm=bool(self.moe and self.moe[0] == "grouped"),
                     qk_layernorm=False, apply_layernorm_1p=False, model_type=CoreModelType.encoder_or_decoder)
            del a["layernorm_epsilon"]
        return argparse.Namespace(**a)

    def ffn(self):
        if self.moe:
            return MOE_FFN
        return LLAMA_FFN if self.glu else 4 * HIDDEN

    def layer_dicts(self):
        return llama_layers(self.hf, self.layers, self.moe[1] if self.moe else 0) if self.glu \
            else gpt2_layers(self.hf, self.layers)

    def embedding(self):
        return self.hf["model.embed_tokens.weight" if self.glu else "wte.weight"]

    # -- one model chunk's state dict
    def chunk_state(self, tp_rank, pp_rank, vp_rank, ep_rank, layer_dicts):
        first = pp_rank == 0 and vp_rank == 0
        last = pp_rank == self.pp - 1 and vp_rank == self.vp - 1
        word = shard(pad_vocab(self.embedding(), self.padded), "rows", self.tp, tp_rank)
        names = self.names or (LEGACY_NAMES if self.flavor == "legacy" else
                               CORE_TE_NAMES if self.te else CORE_LOCAL_NAMES)
        layers = []
        for local, layer in enumerate(stage_layers(self.layers, self.pp, self.vp, pp_rank, vp_rank)):
            entries = layer_entries(layer_dicts[layer], names, self.tp, tp_rank, self.glu, self.version,
                                    self.moe and (self.moe[0], self.moe[1], self.ep), ep_rank)
            if self.flavor == "core":
                extra = CORE_TE_EXTRA if self.te else CORE_LOCAL_EXTRA
                if self.moe:
                    extra = ["self_attention.linear_qkv", "self_attention.linear_proj"]
                entries += [(m + "._extra_state", torch.empty(0, dtype=torch.uint8) if self.te else None)
                            for m in extra]
            layers += [(f"layers.{local}.{k}", cast(v, self.dtype)) for k, v in entries]
        if self.flavor == "legacy":
            return self.legacy_state(first, last, word, layers)
        return self.core_state(first, last, word, layers, tp_rank)

    def legacy_state(self, first, last, word, layers):
        """megatron/model/gpt_model.py (285068c) GPTModel.state_dict_for_save_checkpoint:
        {'language_model': TransformerLanguageModel's {'embedding': {'word_embeddings': {'weight'},
        'position_embeddings': {'weight'}}, 'encoder' ('transformer' before version 3.0): the
        ParallelTransformer's flat state dict}, 'word_embeddings_for_head': {'weight'} on a last stage
        that is not also the first (its copy of the tied embedding)}."""
        lm = collections.OrderedDict()
        if first:
            lm["embedding"] = collections.OrderedDict([
                ("word_embeddings", state_dict([("weight", cast(word, self.dtype))])),
                ("position_embeddings", state_dict([("weight", cast(self.hf["wpe.weight"], self.dtype))]))])
        enc = state_dict([])
        for k, v in layers:
            enc[k.replace(".self_attention.", f".{self.attention}.")] = v
        if last:
            enc[f"{self.final}.weight"] = cast(self.hf["ln_f.weight"], self.dtype)
            enc[f"{self.final}.bias"] = cast(self.hf["ln_f.bias"], self.dtype)
        lm[self.container] = enc
        state = collections.OrderedDict([("language_model", lm)])
        if last and not first:
            state["word_embeddings_for_head"] = state_dict([("weight", cast(word, self.dtype))])
        return state

    def core_state(self, first, last, word, layers, tp_rank):
        """megatron/core/models/gpt/gpt_model.py (core_r0.6.0) GPTModel.state_dict(): embedding.*,
        decoder.layers.*, decoder.final_layernorm.*, output_layer (its weight when untied, or on a last
        stage that is not the first: skip_weight_param_allocation = pre_process and
        share_embeddings_and_output_weights)."""
        s = state_dict([])
        if first:
            s["embedding.word_embeddings.weight"] = cast(word, self.dtype)
            if not self.rope:
                s["embedding.position_embeddings.weight"] = cast(self.hf["wpe.weight"], self.dtype)
        if self.rope:  # GPTModel.rotary_pos_emb's frequencies: a buffer in the state dict of earlier core versions
            d = HIDDEN // HEADS  # (core_r0.6.0's RotaryEmbedding keeps them out of it and drops them on load)
            s["rotary_pos_emb.inv_freq"] = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        for k, v in layers:
            s["decoder." + k] = v
        if last:
            norm = "model.norm.weight" if self.glu else "ln_f.weight"
            s["decoder.final_layernorm.weight"] = cast(self.hf[norm], self.dtype)
            if self.norm == "LayerNorm":
                s["decoder.final_layernorm.bias"] = cast(self.hf["ln_f.bias"], self.dtype)
            if self.untied:
                head = shard(pad_vocab(self.hf["lm_head.weight"], self.padded), "rows", self.tp, tp_rank)
                s["output_layer.weight"] = cast(head, self.dtype)
            elif not first:
                s["output_layer.weight"] = cast(word, self.dtype)
            s["output_layer._extra_state"] = None
        return s

    # -- the files
    def rank_dir(self, tp_rank, pp_rank, ep_rank):
        """megatron/training/checkpointing.py (core_r0.6.0) get_checkpoint_name: mp_rank_TT, _PPP when
        pipeline-parallel, _EEE when expert-parallel."""
        d = f"mp_rank_{tp_rank:02d}"
        if self.pp > 1:
            d += f"_{pp_rank:03d}"
        if self.ep > 1:
            d += f"_{ep_rank:03d}"
        return d

    def write(self, out_dir):
        root = os.path.join(out_dir, self.name)
        shutil.rmtree(root, ignore_errors=True)
        it_dir = os.path.join(root, "release" if self.release else f"iter_{self.iteration:07d}")
        layer_dicts = self.layer_dicts()
        for ep_rank in range(self.ep):
            for pp_rank in range(self.pp):
                for tp_rank in range(self.tp):
                    obj = collections.OrderedDict()
                    obj["args"] = self.args()
                    obj["checkpoint_version"] = self.version
                    obj["iteration"] = self.iteration
                    chunks = [self.chunk_state(tp_rank, pp_rank, v, ep_rank, layer_dicts) for v in range(self.vp)]
                    if self.vp == 1:
                        obj["model"] = chunks[0]
                    else:
                        for v, c in enumerate(chunks):
                            obj[f"model{v}"] = c
                    obj.update(training_state(tp_rank, pp_rank, ep_rank, self.save_rng))
                    path = os.path.join(it_dir, self.rank_dir(tp_rank, pp_rank, ep_rank), "model_optim_rng.pt")
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    torch.save(obj, path)
        with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("release" if self.release else str(self.iteration))
        print(f"wrote {root}: {self.tp * self.pp * self.ep} shard file(s), {dir_bytes(root)} bytes")


if __name__ == "__main__":
    # megatron_golden_cases imports this module by name: give this run that name first, so that it finds this module
    # (its Case, the enum classes registered above) rather than loading a second copy.
    sys.modules.setdefault("make_megatron_golden", sys.modules[__name__])
    import megatron_golden_cases
    megatron_golden_cases.main()
