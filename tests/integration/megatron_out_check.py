#!/usr/bin/env python3
"""Checks a Megatron-LM checkpoint gridformer wrote (`convert --format megatron`) with PyTorch, against what
Megatron's layout makes of the same weights: tools/make_megatron_golden.py's transcription of megatron/model
(285068c) and tools/checkpoint/saver_megatron.py (the transcription whose PyTorch-written checkpoints our reader
is tested on), applied to the Hugging Face export of the same checkpoint.

    megatron_out_check.py MEGATRON_DIR HF.safetensors HEADS TP PP DTYPE [--core [--te] [--ep N] [--grouped]]

Every shard file loads with torch.load; its keys are Megatron's, in its order; every tensor has the expected
dtype, shape and values (torch.equal: the same bits); the args hold what check_checkpoint_args compares.
With --core the layout is Megatron-core's (core_r0.6.0 GPTModel, the transcription's "core" flavour): GPT-2's
weights (transformer.h.N...) or Llama's and Mixtral's (model.layers.N...), Transformer Engine's norm names with
--te (else the local spec's), experts over N expert-parallel ranks, as GroupedMLP's weight1/weight2 with
--grouped. The transcription's rotary_pos_emb.inv_freq buffer (which earlier core versions saved and
core_r0.6.0's RotaryEmbedding neither saves nor needs) is the one entry not expected; the args are compared
with the transcription's own args() for every key both describe.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import make_megatron_golden as mg  # noqa: E402
import st_io  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def compare(got, want, where, counts):
    if want is None:  # an `_extra_state` of core's parallel linears
        assert got is None, f"{where}: {type(got).__name__}, expected None"
        return
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {type(got).__name__}, expected a tensor"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, expected {want.dtype}"
        assert got.shape == want.shape, f"{where}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        assert torch.equal(got, want), f"{where}: values differ (largest {(got.float() - want.float()).abs().max():g})"
        counts[0] += 1
        counts[1] += got.numel()
        return
    assert isinstance(got, dict), f"{where}: {type(got).__name__}, expected a dict"
    assert list(got.keys()) == list(want.keys()), f"{where}: keys {list(got.keys())}, expected {list(want.keys())}"
    for k in want:
        compare(got[k], want[k], f"{where}.{k}", counts)


CORE_ARGS = ("num_layers", "hidden_size", "num_attention_heads", "kv_channels", "ffn_hidden_size",
             "make_vocab_size_divisible_by", "padded_vocab_size", "tokenizer_type", "tensor_model_parallel_size",
             "pipeline_model_parallel_size", "normalization", "swiglu", "position_embedding_type",
             "add_position_embedding", "rotary_percent", "add_bias_linear", "add_qkv_bias",
             "untie_embeddings_and_output_weights", "group_query_attention", "num_query_groups", "transformer_impl",
             "use_mcore_models", "expert_model_parallel_size", "num_experts", "moe_grouped_gemm", "qk_layernorm",
             "apply_layernorm_1p", "bf16")


def core_case(hf, heads, tp, pp, dtype, te, ep, grouped):
    """The transcription's Case for our Hugging Face export, its module-level sizes set from the tensors."""
    if "wte.weight" in hf:  # GPT-2 in core's layout (--use-mcore-models)
        layers = 1 + max(int(k.split(".")[1]) for k in hf if k.startswith("h."))
        mg.VOCAB, mg.HIDDEN = hf["wte.weight"].shape
        mg.HEADS, mg.POSITIONS = heads, hf["wpe.weight"].shape[0]
        return mg.Case("out", "core", hf, layers, tp=tp, pp=pp, release=True, dtype=dtype, te=te)
    layers = 1 + max(int(k.split(".")[2]) for k in hf if k.startswith("model.layers."))
    mg.VOCAB, mg.HIDDEN = hf["model.embed_tokens.weight"].shape
    mg.HEADS = heads
    mg.LLAMA_GROUPS = hf["model.layers.0.self_attn.k_proj.weight"].shape[0] // (mg.HIDDEN // heads)
    experts = sum(1 for k in hf if k.startswith("model.layers.0.block_sparse_moe.experts.") and k.endswith(".w1.weight"))
    if experts:
        mg.MOE_FFN = hf["model.layers.0.block_sparse_moe.experts.0.w1.weight"].shape[0]
    else:
        mg.LLAMA_FFN = hf["model.layers.0.mlp.gate_proj.weight"].shape[0]
    moe = ("grouped" if grouped else "local", experts) if experts else None
    return mg.Case("out", hf=hf, flavor="core", layers=layers, tp=tp, pp=pp, ep=ep, release=True, dtype=dtype, te=te,
                   moe=moe, glu=True, gqa=mg.LLAMA_GROUPS != heads, rope=True, bias=False,
                   untied="lm_head.weight" in hf, norm="RMSNorm")


def main():
    root, hf_path, heads, tp, pp, dtype = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    flags = sys.argv[7:]
    core, te, grouped = "--core" in flags, "--te" in flags, "--grouped" in flags
    ep = int(flags[flags.index("--ep") + 1]) if "--ep" in flags else 1
    raw, _ = st_io.read(hf_path)
    hf = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in raw.items()}
    if core:
        case = core_case(hf, heads, tp, pp, DTYPES[dtype], te, ep, grouped)
        layers = case.layers
    else:
        layers = 1 + max(int(k.split(".")[1]) for k in hf if k.startswith("h."))
        mg.VOCAB, mg.HIDDEN = hf["wte.weight"].shape
        mg.HEADS, mg.POSITIONS = heads, hf["wpe.weight"].shape[0]
        case = mg.Case("out", "legacy", hf, layers, tp=tp, pp=pp, release=True, dtype=DTYPES[dtype])
    layer_dicts = case.layer_dicts()
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        assert f.read().strip() == "release", "the tracker file does not name release"
    counts = [0, 0]
    files = 0
    for e in range(ep):
        for p in range(pp):
            for t in range(tp):
                path = os.path.join(root, "release", case.rank_dir(t, p, e), "model_optim_rng.pt")
                d = torch.load(path, map_location="cpu")
                assert d["checkpoint_version"] == 3.0, f"{path}: checkpoint_version {d['checkpoint_version']}"
                a = vars(d["args"])
                if core:
                    golden = vars(case.args())
                    want = {k: golden[k] for k in CORE_ARGS}
                    if case.moe:
                        want["moe_router_topk"] = golden["moe_router_topk"]
                    want["fp16"] = dtype == "float16"
                else:
                    want = dict(num_layers=layers, hidden_size=mg.HIDDEN, num_attention_heads=heads,
                                kv_channels=mg.HIDDEN // heads, ffn_hidden_size=4 * mg.HIDDEN,
                                max_position_embeddings=mg.POSITIONS, add_position_embedding=True,
                                make_vocab_size_divisible_by=128, padded_vocab_size=case.padded,
                                tokenizer_type="GPT2BPETokenizer", tensor_model_parallel_size=tp,
                                pipeline_model_parallel_size=pp, fp16=dtype == "float16", bf16=dtype == "bfloat16",
                                swiglu=False, untie_embeddings_and_output_weights=False)
                for k, v in want.items():
                    assert a.get(k) == v, f"{path}: args.{k} is {a.get(k)!r}, expected {v!r}"
                expected = case.chunk_state(t, p, 0, e, layer_dicts)
                expected.pop("rotary_pos_emb.inv_freq", None)
                compare(d["model"], expected, f"{path}: model", counts)
                files += 1
    layout = f"Megatron-core ({'Transformer Engine' if te else 'local'} names)" if core else "megatron/model"
    print(f"{files} shard file(s) of {layout} (TP {tp} x PP {pp}{f' x EP {ep}' if core else ''}, {dtype}): "
          f"{counts[0]} tensors, {counts[1]} elements equal to make_megatron_golden.py's layout of the same weights; "
          "args as check_checkpoint_args reads them")


if __name__ == "__main__":
    main()
