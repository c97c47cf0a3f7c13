#!/usr/bin/env bash
# Megatron-core checkpoints as a run's whole state (the Megatron issue, item 4: "--save under the Megatron arguments
# writes the same format, so Megatron-LM and its converters load what we trained"; item 3's resume): Llama and MoE
# models, and GPT-2 under --use-mcore-models, are written in Megatron-core's layout with core_r0.6.0's optimizer state.
# For each case, 13 iterations in one run; 3 with --save; then
#   (a) the Megatron files alone (copied away from ours) resume to the uninterrupted run's iterations 4-13 bit for bit;
#   (b) torch reads them as Megatron-core's: the param groups are those of core_r0.6.0's _get_param_groups as
#       transcribed below (megatron/core/optimizer/__init__.py: a group per (wd_mult, lr_mult, is_expert_parallel,
#       is_decoupled_lr) in the order each is first met; an expert's parameter is expert-parallel when its allreduce
#       is False, which tensor_parallel/layers.py sets to not (is_expert and expert_model_parallel_size > 1); the
#       expert-parallel groups in an optimizer of their own, ChainedOptimizer's state_dict() the list of the two), and
#       torch's AdamW over them takes each optimizer's state dict, every moment of its parameter's shape;
#   (c) the same state rebuilt by torch's own AdamW.state_dict() over the transcribed groups (for the PP 2 case in the
#       fixed group order of early-2024 Megatron, decay groups first) resumes to the same iterations bit for bit.
#   (d) under --use-distributed-optimizer the files hold core_r0.6.0's DistributedOptimizer state and distrib_optim.pt
#       (DP 2; bf16 at TP 2 x DP 2 with --overlap-grad-reduce; DP 3 in buckets of 5000 elements; experts at EP 2 x DP 4,
#       a ChainedOptimizer of two), which resume bit for bit.
# Cases: Llama (GQA, SwiGLU, RMSNorm, RoPE, untied head) fp32 with Transformer Engine's names; the same in bf16 at TP 2
# with local names; GPT-2 under --use-mcore-models at PP 2 (the tied head's copy on the last stage, whose first
# parameter is a norm); experts at EP 2 as GroupedMLP's weights (a ChainedOptimizer); experts at EP 1 as local_experts;
# the MindSpeed MoE script's GPT-2 MoE at TP 2 x EP 2 in bf16.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_python torch

PYTHONPATH="$SRC/tests/integration" "$PY" - <<'EOF'
import random
import lib
rng = random.Random(3)
lib.write("random", [[rng.randrange(99) for _ in range(rng.randrange(20, 90))] for _ in range(120)])
EOF

GPT2=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
      --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 2
      --lr-decay-iters 13 --clip-grad 1.0 --weight-decay 0.1 --attention-dropout 0 --hidden-dropout 0
      --tokenizer-type NullTokenizer --vocab-size 99 --split 100,0,0 --log-interval 1 --eval-iters 0 --seed 1234
      --data-path "$WORK/random")
LLAMA=("${GPT2[@]}" --group-query-attention --num-query-groups 2 --ffn-hidden-size 64 --swiglu --normalization RMSNorm
       --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights --use-mcore-models)
MOE=("${LLAMA[@]}" --num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall)

# check DIR ORDER OUT: (b) on DIR's files; with OUT, (c): the state rebuilt by torch in the groups' ORDER
# (first-met: core_r0.6.0's; fixed: early 2024's pre-seeded keys) written to a copy OUT.
check() {
  "$PY" - "$@" <<'EOF'
import collections, glob, os, shutil, sys
import torch
src, order, out = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None
if out:
    shutil.copytree(src, out)

def flat(state, prefix=""):
    res = []
    for k, v in state.items():
        if k.endswith("_extra_state"):
            continue  # a module's extra state (None, or Transformer Engine's uint8 tensor), not a parameter
        res += flat(v, prefix + k + ".") if isinstance(v, dict) else [(prefix + k, v)]
    return res

FIXED = [(1.0, 1.0, False, False), (1.0, 1.0, True, False), (0.0, 1.0, False, False), (0.0, 1.0, True, False)]

def chain_of(groups):
    """get_megatron_optimizer: the dense groups' optimizer, then the expert-parallel ones' (ChainedOptimizer)."""
    dense = [g for g in groups if not g["key"][2]]
    experts = [g for g in groups if g["key"][2]]
    return [dense, experts] if experts else [dense]

def param_groups(named, expert_parallel, order="first"):
    """core_r0.6.0 _get_param_groups (no_weight_decay_cond and scale_lr_cond None, no decoupled lr)."""
    params_map = collections.OrderedDict((k, []) for k in FIXED) if order == "fixed" else collections.OrderedDict()
    for name, p in named:
        is_expert = ".mlp.experts." in name            # SequentialMLP's / GroupedMLP's parameters
        allreduce = not (is_expert and expert_parallel)  # tensor_parallel/layers.py
        no_wd = name.endswith(".bias") or p.dim() == 1
        key = (0.0 if no_wd else 1.0, 1.0, not allreduce, False)
        params_map.setdefault(key, []).append((name, p))
    return [dict(key=k, named=v) for k, v in params_map.items() if v]

files = sorted(glob.glob(src + "/iter_0000003/mp_rank_*/model_optim_rng.pt"))
assert files, "no shard files"
for f in files:
    sd = torch.load(f, weights_only=False)
    args = sd["args"]
    assert sd["iteration"] == 3 and sd["checkpoint_version"] == 3.0 and args.consumed_train_samples == 12
    assert args.use_mcore_models, "not Megatron-core's args"
    named = [(n, torch.nn.Parameter(t.float())) for n, t in flat(sd["model"])]
    chain = chain_of(param_groups(named, args.expert_model_parallel_size > 1))
    saved = sd["optimizer"]
    parts = saved if isinstance(saved, list) else [saved]
    assert isinstance(saved, list) == (len(chain) == 2), f"{f}: 'optimizer' is a {type(saved).__name__}, {len(chain)} optimizers"
    assert len(parts) == len(chain), f"{f}: {len(parts)} optimizers, core's chain has {len(chain)}"
    rebuilt = []
    for part, gs in zip(parts, chain):
        mixed = "fp32_from_fp16_params" in part
        inner = part["optimizer"] if mixed else part
        got = [(g["wd_mult"], g["lr_mult"], g["is_expert_parallel"], g["is_decoupled_lr"]) for g in inner["param_groups"]]
        assert got == [g["key"] for g in gs], f"{f}: groups {got}, core_r0.6.0's {[g['key'] for g in gs]}"
        opt = torch.optim.AdamW([dict(params=[p for _, p in g["named"]]) for g in gs], lr=0.0)
        opt.load_state_dict(inner)
        by_name = {}
        for g in gs:
            for n, p in g["named"]:
                s = opt.state[p]
                assert s["exp_avg"].shape == p.shape and s["exp_avg_sq"].shape == p.shape, n
                assert float(s["step"]) == 3.0 and torch.all(s["exp_avg_sq"] >= 0), n
                by_name[n] = (s["exp_avg"], s["exp_avg_sq"])
        masters = {}
        if mixed:
            for g, ms in zip(gs, part["fp32_from_fp16_params"]):
                for (n, p), m in zip(g["named"], ms):
                    assert m.dtype == torch.float32 and m.shape == p.shape, n
                    assert torch.equal(m.to(dict(sd["model"])[n].dtype).float(), p), f"{n}: the model is not its master rounded"
                    masters[n] = m
        hyper = dict(inner["param_groups"][0], weight_decay=max(g["weight_decay"] for g in inner["param_groups"]))
        rebuilt.append((part, mixed, by_name, masters, hyper))
    print(f"{f}: {len(named)} parameters; optimizers (wd_mult, expert-parallel, parameters) "
          f"{[[(g['key'][0], g['key'][2], len(g['named'])) for g in gs] for gs in chain]}")
    if not out:
        continue
    # (c): torch's own state dict over the transcribed groups (in ORDER), holding the moments read above by name.
    new_parts = []
    for (part, mixed, by_name, masters, g0), gs in zip(rebuilt, chain_of(param_groups(named, args.expert_model_parallel_size > 1, order))):
        params = {n: torch.nn.Parameter(p.detach().clone()) for g in gs for n, p in g["named"]}
        opt = torch.optim.AdamW([dict(params=[params[n] for n, _ in g["named"]], wd_mult=g["key"][0], lr_mult=g["key"][1],
                                      is_expert_parallel=g["key"][2], is_decoupled_lr=g["key"][3],
                                      weight_decay=g0["weight_decay"] * g["key"][0], lr=g0["lr"])
                                 for g in gs], betas=g0["betas"], eps=g0["eps"])
        for n, p in params.items():
            opt.state[p] = {"step": torch.tensor(3.0), "exp_avg": by_name[n][0].clone(), "exp_avg_sq": by_name[n][1].clone()}
        state = opt.state_dict()
        if mixed:
            w = dict(part)
            w["optimizer"] = state
            w["fp32_from_fp16_params"] = [[masters[n] for n, _ in g["named"]] for g in gs]
            state = w
        new_parts.append(state)
    sd["optimizer"] = new_parts if isinstance(saved, list) else new_parts[0]
    torch.save(sd, os.path.join(out, os.path.relpath(f, src)))
EOF
}

# core NAME NP ORDER ARGS...: the case's runs and checks.
core() {
  local name=$1 np=$2 order=$3; shift 3
  pretrain "$name.full" "$np" "$@" --train-iters 13
  pretrain "$name.first" "$np" "$@" --train-iters 3 --save "$WORK/$name.ck" --save-interval 3
  grep -q "Megatron-LM layout written: .*(Megatron-core's, .*with the optimizer state" "$name.first.log" ||
    { grep -i megatron "$name.first.log"; fail "$name: no Megatron-core layout written beside the checkpoint"; }
  mkdir -p "$name.meg"
  cp -r "$name.ck/iter_0000003" "$name.ck/latest_checkpointed_iteration.txt" "$name.meg/"
  check "$name.meg" "$order" "$WORK/$name.torch" > "$name.check.log" 2>&1 ||
    { cat "$name.check.log"; fail "$name: torch does not take its Megatron-core layout as core_r0.6.0's"; }
  sed "s|^|  |" "$name.check.log"
  pretrain "$name.megatron" "$np" "$@" --train-iters 13 --load "$WORK/$name.meg"
  pretrain "$name.from_torch" "$np" "$@" --train-iters 13 --load "$WORK/$name.torch"
  resumed "$name.megatron" 3 12
  resumed "$name.from_torch" 3 12
  close_after 3 0 "$name.full/output" "$name.megatron/output" "$name.from_torch/output"
  ok "$name: Megatron-core's layout of our checkpoint, and torch's rebuild of its optimizer, resume bit for bit"
}

core llama 1 first "${LLAMA[@]}"
core llama_bf16_tp2 2 first "${LLAMA[@]}" --bf16 --tensor-model-parallel-size 2 --transformer-impl local
core gpt2_pp2 2 fixed "${GPT2[@]}" --use-mcore-models --pipeline-model-parallel-size 2
core moe_ep2 2 first "${MOE[@]}" --expert-model-parallel-size 2 --moe-grouped-gemm
core moe_ep1 1 first "${MOE[@]}" --transformer-impl local
# The MindSpeed MoE script's model and layout (GPT-2 MoE: LayerNorm, GELU experts, RoPE, no biases; TP 2 x EP 2 with
# sequence parallelism, grouped GEMM, bf16) on 4 ranks.
core mindspeed_tp2_ep2 4 first "${GPT2[@]}" --disable-bias-linear --position-embedding-type rope --use-mcore-models \
  --num-experts 4 --moe-router-topk 2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall --expert-model-parallel-size 2 \
  --tensor-model-parallel-size 2 --sequence-parallel --bf16

# distributed NAME NP BUCKET ARGS...: with --use-distributed-optimizer, each shard's optimizer state is core_r0.6.0's
# DistributedOptimizer's (its param groups alone in model_optim_rng.pt; the fp32 main parameters and moments in
# distrib_optim.pt beside it), which resumes bit for bit; the buffer is the one tools/megatron_resume_reference.py's
# transcription of ParamAndGradBuffer builds from the same parameters (reverse order, padded for DP ranks).
# BUCKET > 0: the first run is config --from-megatron's YAML with CheckpointMonitor's megatron_ddp_bucket_size BUCKET.
distributed() {
  local name=$1 np=$2 bucket=$3; shift 3
  pretrain "$name.full" "$np" "$@" --use-distributed-optimizer --train-iters 13
  if ((bucket == 0)); then
    pretrain "$name.first" "$np" "$@" --use-distributed-optimizer --train-iters 3 --save "$WORK/$name.ck" --save-interval 3
  else
    "$BIN" config --from-megatron "$@" --use-distributed-optimizer --train-iters 3 --save "$WORK/$name.ck" --save-interval 3 \
      --ranks "$np" > "$name.yaml" 2> "$name.yaml.err" || { cat "$name.yaml.err"; fail "$name: config --from-megatron"; }
    "$PY" - "$name.yaml" "$bucket" <<'EOF2' || fail "$name: the YAML's CheckpointMonitor"
import sys, yaml
y = yaml.safe_load(open(sys.argv[1]))
[ck] = [c for c in y["callbacks"] if c["type"] == "CheckpointMonitor"]
ck["megatron_ddp_bucket_size"] = int(sys.argv[2])
yaml.safe_dump(y, open(sys.argv[1], "w"), sort_keys=False)
EOF2
    mkdir -p "$name.first"
    run "$name.first" bash -c 'cd "$0" && exec "$@"' "$name.first" mpirun -np "$np" --oversubscribe "$BIN" train --config "$WORK/$name.yaml"
    ((STATUS == 0)) || { tail -30 "$name.first.log"; fail "$name.first: train exited with status $STATUS"; }
  fi
  grep -q "Megatron-LM layout written: .*of the distributed optimizer (distrib_optim.pt for DP " "$name.first.log" ||
    { grep -i megatron "$name.first.log"; fail "$name: no distributed optimizer's state written"; }
  mkdir -p "$name.meg"
  cp -r "$name.ck/iter_0000003" "$name.ck/latest_checkpointed_iteration.txt" "$name.meg/"
  "$PY" - "$name.meg" "$SRC/tools" <<'EOF2' > "$name.check.log" 2>&1 || { cat "$name.check.log"; fail "$name: distrib_optim.pt"; }
import glob, os, sys
import torch
sys.path.insert(0, sys.argv[2])
from megatron_resume_reference import distrib_buffer
def check_buffer(d, named, dp, bucket, bf16, what, shared=()):
    """d: one DistributedOptimizer's get_parameter_state_dp_zero() over the parameters `named` (in named_parameters
    order), against the buffer core_r0.6.0's ParamAndGradBuffer lays out for `dp` data-parallel ranks."""
    zeros = [torch.zeros_like(t, dtype=torch.float32) for _, t in named]
    want = distrib_buffer([(n, t.float()) for n, t in named], (zeros, zeros), "per-bucket", dp, bucket, shared)
    assert list(d.keys()) == list(want.keys()), f"{what}: keys {list(d.keys())}, core_r0.6.0's {list(want.keys())}"
    assert d["per_bucket_numel"] == want["per_bucket_numel"], (what, d["per_bucket_numel"], want["per_bucket_numel"])
    assert d["per_bucket_numel_unpadded"] == want["per_bucket_numel_unpadded"], what
    got, ref = d[0][torch.float32], want[0][torch.float32]
    lo = torch.bfloat16 if bf16 else torch.float32
    for t, r in zip(got["param"], ref["param"]):  # the main parameters, rounded, are the model's weights
        n = int(torch.isfinite(r).sum())  # the reference pads with NaN, Megatron's buffers hold whatever was there
        assert torch.equal(t[:n].to(lo).float(), r[:n]), f"{what}: the main parameters are not the model's, in the buffer's order"
    for k in ("exp_avg", "exp_avg_sq"):
        assert [t.shape for t in got[k]] == [t.shape for t in ref[k]], (what, k)
    assert all(torch.all(t >= 0) for t in got["exp_avg_sq"]), what
    return f"{what} buckets {d['per_bucket_numel']} (unpadded {d['per_bucket_numel_unpadded']})"

for f in sorted(glob.glob(sys.argv[1] + "/iter_0000003/mp_rank_*/model_optim_rng.pt")):
    sd = torch.load(f, weights_only=False)
    args = sd["args"]
    assert args.use_distributed_optimizer, "args.use_distributed_optimizer is not set"
    ep = args.expert_model_parallel_size
    model = [(n, t) for n, t in sd["model"].items() if not n.endswith("_extra_state")]
    # core_r0.6.0's get_megatron_optimizer: with expert-parallel parameters (an expert's, allreduce False at EP > 1)
    # a ChainedOptimizer of the dense parameters' distributed optimizer and the experts'.
    experts = [(n, t) for n, t in model if ep > 1 and ".mlp.experts." in n]
    dense = [(n, t) for n, t in model if not (ep > 1 and ".mlp.experts." in n)]
    parts = sd["optimizer"] if experts else [sd["optimizer"]]
    assert isinstance(sd["optimizer"], list) == bool(experts) and len(parts) == (2 if experts else 1), \
        f"'optimizer' is a {type(sd['optimizer']).__name__} for {len(experts)} expert-parallel parameters"
    for o in parts:
        assert "state" not in o["optimizer"] and all("params" not in g for g in o["optimizer"]["param_groups"]), \
            "DistributedOptimizer.state_dict() keeps neither the state nor the groups' params"
        assert all(g["step"] == 3 for g in o["optimizer"]["param_groups"]), "apex FusedAdam's step"
    if experts:
        assert all(g["is_expert_parallel"] for g in parts[1]["optimizer"]["param_groups"]), "the experts' groups"
        assert not any(g["is_expert_parallel"] for g in parts[0]["optimizer"]["param_groups"]), "the dense groups"
    d = torch.load(os.path.join(os.path.dirname(f), "distrib_optim.pt"), weights_only=False)
    dp = args.data_parallel_size
    bucket = (args.ddp_bucket_size or max(40000000, 1000000 * dp)) if args.overlap_grad_reduce else 0
    rank_dir = os.path.basename(os.path.dirname(f)).split("_")  # mp_rank_TT[_PPP][_EEE]
    shared = ()
    if args.pipeline_model_parallel_size > 1:
        if int(rank_dir[3]) > 0:
            bucket = 0  # DistributedDataParallel turns bucketing off on every pipeline stage but the first
        if not args.untie_embeddings_and_output_weights:  # language_module.py: the tied copies' shared_embedding
            shared = ("embedding.word_embeddings.weight", "output_layer.weight")
    if not experts:
        print(f"{f}: DP {dp}, " + check_buffer(d, dense, dp, bucket, args.bf16, "the buffer", shared))
        continue
    # ChainedOptimizer.save_parameter_state: [dense, experts], each saved by its data-parallel group's rank 0: the
    # dense group's (DP ranks) is expert rank 0, the experts' (the DP / EP data-modulo-expert-parallel ranks) each
    # expert rank has.
    e = int(rank_dir[-1])
    assert isinstance(d, list) and len(d) == 2, f"distrib_optim.pt holds a {type(d).__name__}, not [dense, experts]"
    assert (d[0] is None) == (e > 0), f"expert rank {e}: the dense state {'missing' if d[0] is None else 'saved'}"
    line = f"{f}: DP {dp}, EP {ep}, " + check_buffer(d[1], experts, dp // ep, bucket, args.bf16, "experts'")
    if e == 0:
        line += ", " + check_buffer(d[0], dense, dp, bucket, args.bf16, "dense", shared)
    print(line)
EOF2
  sed "s|^|  |" "$name.check.log"
  pretrain "$name.megatron" "$np" "$@" --use-distributed-optimizer --train-iters 13 --load "$WORK/$name.meg"
  grep -qE "fp32 master weights from distrib_optim.pt \((chained )?per-bucket buffers\)" "$name.megatron.log" ||
    { grep -i resum "$name.megatron.log"; fail "$name: the resume did not read distrib_optim.pt"; }
  local global=4 prev=
  for w in "$@"; do [[ $prev == --global-batch-size ]] && global=$w; prev=$w; done
  resumed "$name.megatron" 3 $((3 * global))
  close_after 3 0 "$name.full/output" "$name.megatron/output"
  ok "$name: the distributed optimizer's Megatron-core files resume bit for bit"
}
distributed llama_distrib 2 0 "${LLAMA[@]}"
distributed llama_distrib_bf16 4 0 "${LLAMA[@]}" --bf16 --tensor-model-parallel-size 2 --overlap-grad-reduce
distributed llama_buckets 3 5000 "${LLAMA[@]}" --global-batch-size 6  # buckets of 5000 elements or more, padded for 3
# At PP 2 the first stage's buffer in buckets of 5000, the second's in one (core's DistributedDataParallel).
distributed llama_pp_buckets 4 5000 "${LLAMA[@]}" --pipeline-model-parallel-size 2 --global-batch-size 8
# GPT-2's tied head at PP 2: the first stage's word embeddings and the last stage's output layer (the embedding's copy)
# each in a bucket of their own (language_module.py's shared_embedding), the first stage's other parameters in buckets
# of 5000 elements.
distributed gpt2_pp2_distrib 4 5000 "${GPT2[@]}" --use-mcore-models --pipeline-model-parallel-size 2 --global-batch-size 8
# The MindSpeed MoE script's model (GPT-2 MoE: GELU experts) at EP 2 over DP 6 in bf16: core_r0.6.0 chains the dense
# parameters' distributed optimizer (its buffer padded for 6 ranks, saved in expert rank 0's directory) and the
# experts' (padded for the 3 data-modulo-expert-parallel ranks, one in each expert rank's directory).
distributed mindspeed_distrib 6 0 "${GPT2[@]}" --disable-bias-linear --position-embedding-type rope --use-mcore-models \
  --num-experts 4 --moe-router-topk 2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall --expert-model-parallel-size 2 \
  --bf16 --global-batch-size 12

# A chained distrib_optim.pt whose dense state was saved in no directory (expert rank 0's holds None) is refused by
# name, before any step.
"$PY" - <<'EOF2' || fail "writing the chained case without a dense state"
import shutil
import torch
shutil.copytree("mindspeed_distrib.meg", "no_dense")
f = "no_dense/iter_0000003/mp_rank_00_000/distrib_optim.pt"
d = torch.load(f, weights_only=False)
d[0] = None
torch.save(d, f)
EOF2
mkdir -p no_dense.run
refused 2 "mp_rank_00_000/distrib_optim.pt: not a ChainedOptimizer's [dense, experts] states with the dense one saved" \
  no_dense.run bash -c 'cd "$0" && exec "$@"' no_dense.run "$BIN" pretrain_gpt "${GPT2[@]}" --disable-bias-linear \
  --position-embedding-type rope --use-mcore-models --num-experts 4 --moe-router-topk 2 --moe-grouped-gemm --bf16 \
  --use-distributed-optimizer --train-iters 13 --load "$WORK/no_dense"

# The names the job's flags chose: Transformer Engine's fused norms, local's, GroupedMLP's weights.
"$PY" - <<'EOF' || fail "the layouts' names are not those the flags choose"
import glob
import torch
def keys(case):
    f = sorted(glob.glob(f"{case}.meg/iter_0000003/mp_rank_*/model_optim_rng.pt"))[0]
    return set(torch.load(f, weights_only=False)["model"])
assert "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight" in keys("llama")
assert "decoder.layers.0.input_layernorm.weight" in keys("llama_bf16_tp2")
assert "decoder.layers.0.mlp.experts.weight1" in keys("moe_ep2")
assert "decoder.layers.0.mlp.experts.local_experts.3.linear_fc1.weight" in keys("moe_ep1")
assert "output_layer.weight" in set(torch.load("gpt2_pp2.meg/iter_0000003/mp_rank_00_001/model_optim_rng.pt", weights_only=False)["model"])
print("names: TE's fused norms, local's, GroupedMLP's, SequentialMLP's, the tied head's copy on the last stage")
EOF
ok "the layouts' names follow --transformer-impl and --moe-grouped-gemm"

# A mid-2023 checkpoint of the distributed optimizer (model_rng.pt, its moments in per-data-parallel-rank optim.pt files;
# megatron_resume.sh resumes those) whose optim.pt files are gone is refused naming the first missing one, not as one
# saved without its optimizer.
"$PY" - <<'EOF2' || fail "writing the model_rng.pt case"
import os, shutil
import torch
shutil.copytree("llama.meg", "model_rng")
d = "model_rng/iter_0000003/mp_rank_00"
sd = torch.load(os.path.join(d, "model_optim_rng.pt"), weights_only=False)
sd.pop("optimizer")
sd["args"].use_distributed_optimizer, sd["args"].data_parallel_size = True, 2
torch.save(sd, os.path.join(d, "model_rng.pt"))
os.remove(os.path.join(d, "model_optim_rng.pt"))
EOF2
mkdir -p model_rng.run
refused 2 "over 2 data-parallel ranks (args.data_parallel_size), and $WORK/model_rng/iter_0000003/mp_rank_00_000/optim.pt is missing" \
  model_rng.run bash -c 'cd "$0" && exec "$@"' model_rng.run "$BIN" pretrain_gpt "${LLAMA[@]}" --train-iters 13 --load "$WORK/model_rng"

# Megatron-core's distributed checkpointing (metadata.json naming torch_dist; --use-dist-ckpt, and core_r0.9's default
# --ckpt-format) is not the torch format: refused naming it and how Megatron-LM converts it.
mkdir -p dist_ckpt/iter_0000003 dist_ckpt.run
echo 3 > dist_ckpt/latest_checkpointed_iteration.txt
echo '{"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch", "common_backend_version": 1}' \
  > dist_ckpt/iter_0000003/metadata.json
touch dist_ckpt/iter_0000003/common.pt dist_ckpt/iter_0000003/__0_0.distcp
refused 2 "a Megatron distributed checkpoint (metadata.json: torch_dist" dist_ckpt.run \
  bash -c 'cd "$0" && exec "$@"' dist_ckpt.run "$BIN" pretrain_gpt "${LLAMA[@]}" --train-iters 13 --load "$WORK/dist_ckpt"
grep -qF -- "--ckpt-convert-format torch --ckpt-convert-save" dist_ckpt.run.log || fail "dist_ckpt: the refusal does not say how to convert"
