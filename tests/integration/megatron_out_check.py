#!/usr/bin/env python3
"""Checks a Megatron-LM checkpoint gridformer wrote (`convert --format megatron`) with PyTorch, against what
Megatron's layout makes of the same weights: tools/make_megatron_golden.py's transcription of megatron/model
(285068c) and tools/checkpoint/saver_megatron.py (the transcription whose PyTorch-written checkpoints our reader
is tested on), applied to the Hugging Face export of the same checkpoint.

    megatron_out_check.py MEGATRON_DIR HF.safetensors HEADS TP PP DTYPE

Every shard file loads with torch.load; its keys are Megatron's, in its order; every tensor has the expected
dtype, shape and values (torch.equal: the same bits); the args hold what check_checkpoint_args compares.
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


def main():
    root, hf_path, heads, tp, pp, dtype = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    raw, _ = st_io.read(hf_path)
    hf = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in raw.items()}
    layers = 1 + max(int(k.split(".")[1]) for k in hf if k.startswith("h."))
    mg.VOCAB, mg.HIDDEN = hf["wte.weight"].shape
    mg.HEADS, mg.POSITIONS = heads, hf["wpe.weight"].shape[0]
    case = mg.Case("out", "legacy", hf, layers, tp=tp, pp=pp, release=True, dtype=DTYPES[dtype])
    layer_dicts = case.layer_dicts()
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        assert f.read().strip() == "release", "the tracker file does not name release"
    counts = [0, 0]
    files = 0
    for p in range(pp):
        for t in range(tp):
            path = os.path.join(root, "release", case.rank_dir(t, p, 0), "model_optim_rng.pt")
            d = torch.load(path, map_location="cpu")
            assert d["checkpoint_version"] == 3.0, f"{path}: checkpoint_version {d['checkpoint_version']}"
            a = vars(d["args"])
            want = dict(num_layers=layers, hidden_size=mg.HIDDEN, num_attention_heads=heads, kv_channels=mg.HIDDEN // heads,
                        ffn_hidden_size=4 * mg.HIDDEN, max_position_embeddings=mg.POSITIONS, add_position_embedding=True,
                        make_vocab_size_divisible_by=128, padded_vocab_size=case.padded, tokenizer_type="GPT2BPETokenizer",
                        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, fp16=dtype == "float16",
                        bf16=dtype == "bfloat16", swiglu=False, untie_embeddings_and_output_weights=False)
            for k, v in want.items():
                assert a.get(k) == v, f"{path}: args.{k} is {a.get(k)!r}, expected {v!r}"
            compare(d["model"], case.chunk_state(t, p, 0, 0, layer_dicts), f"{path}: model", counts)
            files += 1
    print(f"{files} shard file(s) (TP {tp} x PP {pp}, {dtype}): {counts[0]} tensors, {counts[1]} elements equal to "
          f"make_megatron_golden.py's layout of the same weights; args as check_checkpoint_args reads them")


if __name__ == "__main__":
    main()
