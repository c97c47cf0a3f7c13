#!/usr/bin/env bash
# Megatron-LM checkpoints as a run's whole state (the Megatron issue, items 3 and 4: "without --finetune a training run
# resumes where Megatron stopped: the Adam moments, the step, the consumed samples and the schedule"; "--save under
# the Megatron arguments writes the same format"):
#   (a) Checkpoints PyTorch wrote (tools/megatron_resume_reference.py: torch's AdamW took 3 iterations of Megatron's
#       steps and saved its state in Megatron's layout; torch's per-parameter step, apex's per-group step, TP 2) resume
#       under `pretrain_gpt --load`: iterations 4 to 13 give PyTorch's losses within 1e-5 relative, on 1 rank, on 2 with
#       the distributed optimizer (ZeRO-1: each rank takes its shard of the moments), and the TP 2 one on 2 ranks;
#       and checkpoints of Megatron's distributed optimizer (distrib_optim.pt's buffers in the four forms Megatron
#       versions write, padded for 7 data-parallel ranks with NaN in the padding, in buckets of 2000 elements; TP 2), and
#       of mid-2023's (model_rng.pt, each data-parallel rank's shards in its own optim.pt; bf16 with fp32 main shards).
#   (b) Ours out and back: `--save` writes Megatron's layout beside our checkpoints; a run resumed from the Megatron
#       files alone logs the 10 steps of the run resumed from ours and of the uninterrupted run bit for bit (fp32; fp16
#       with its fp32 master weights and loss scale; with the distributed optimizer, as 285068c saves it, at TP 2 and in
#       bf16 at DP 2).
#   (c) What we wrote is Megatron's: torch.load reads it, and torch's AdamW over the model's parameters in Megatron's
#       param groups takes its optimizer state dict, every moment of its parameter's shape; the distributed
#       optimizer's files hold each data-parallel rank's shards as 285068c cuts them (transcribed in the check).
#   (d) What cannot resume is refused by name: a release checkpoint, one saved without its optimizer, one of the
#       distributed optimizer without its distrib_optim.pt, one whose buffer is not the model's, mid-2023's without one
#       rank's optim.pt or with a shard of another size.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_python torch

# Two datasets of NullTokenizer ids (< 99): period-8 documents, whose every sample is the same 33 tokens (for the
# PyTorch reference), and random documents of random lengths (for the data's position across a resume).
PYTHONPATH="$SRC/tests/integration" "$PY" - <<'EOF'
import random
import lib
lib.write("period", [[5, 17, 42, 3, 88, 21, 60, 9] * 16 for _ in range(64)])
rng = random.Random(3)
lib.write("random", [[rng.randrange(99) for _ in range(rng.randrange(20, 90))] for _ in range(120)])
EOF

# ---- (a) PyTorch's checkpoints
DIST="--dp 7 --bucket 2000"
for form in "torch" "apex --apex" "tp2 --tp 2" "dpb --distributed per-bucket $DIST" "dbs --distributed bucket-sizes $DIST" \
            "dco --distributed coalesced $DIST" "dtp2 --tp 2 --distributed per-bucket --dp 7 --bucket 1000" \
            "dal --distributed coalesced-aligned $DIST" "dpr --distributed per-dp-rank --dp 7" \
            "dprb --tp 2 --distributed per-dp-rank --dp 5 --bf16"; do
  set -- $form
  name=$1; shift
  "$PY" "$SRC/tools/megatron_resume_reference.py" --data "$WORK/period" --out "$WORK/ref_$name" "$@" > "ref_$name.log" 2>&1 ||
    { cat "ref_$name.log"; fail "the PyTorch reference ($name)"; }
done
mapfile -t ARGS < <("$PY" -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["args"]))' ref_torch/expected.json)
# from_pytorch NAME REF NP ARGS...: resumes REF's checkpoint for iterations 4 to 13; their losses are PyTorch's.
from_pytorch() {
  local name=$1 ref=$2 np=$3; shift 3
  pretrain "$name" "$np" "${ARGS[@]}" --data-path "$WORK/period" --train-iters 13 --load "$WORK/$ref" "$@"
  resumed "$name" 3 12
  "$PY" - "$ref/expected.json" "$name/output/metrics.jsonl" <<'EOF' || fail "$name: the losses after the resume are not PyTorch's"
import json, sys
want = {int(k): v for k, v in json.load(open(sys.argv[1]))["losses"].items()}
got = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "loss" in r and "step" in r}
assert sorted(got) == sorted(want), f"logged steps {sorted(got)}, PyTorch's {sorted(want)}"
worst = max(abs(got[k] - want[k]) / abs(want[k]) for k in want)
print(f"steps {min(want)}-{max(want)}: within {worst:.1e} relative of PyTorch's ({', '.join(f'{want[k]:.6f}' for k in sorted(want))})")
assert worst <= 1e-5, f"{worst:.2e} relative"
EOF
  ok "$name: resumed PyTorch's Megatron checkpoint at iteration 3 on $np rank(s), its losses"
}
from_pytorch a_torch ref_torch 1
from_pytorch a_apex ref_apex 1
from_pytorch a_zero ref_torch 2 --use-distributed-optimizer
from_pytorch a_tp2 ref_tp2 2 --tensor-model-parallel-size 2
from_pytorch a_dpb ref_dpb 1
grep -q "fp32 master weights from distrib_optim.pt (per-bucket buffers)" a_dpb.log || fail "a_dpb: the log does not name distrib_optim.pt"
from_pytorch a_dbs ref_dbs 2 --use-distributed-optimizer
from_pytorch a_dco ref_dco 1
grep -q "distrib_optim.pt (coalesced buffers)" a_dco.log || fail "a_dco: the log does not name the coalesced form"
from_pytorch a_dtp2 ref_dtp2 2 --tensor-model-parallel-size 2 --use-distributed-optimizer
# core_r0.9 on: each parameter's start aligned to 64 elements in buckets of args.ddp_bucket_size (NaN in the gaps).
from_pytorch a_dal ref_dal 2 --use-distributed-optimizer
grep -q "distrib_optim.pt (coalesced, parameter-aligned buffers)" a_dal.log || fail "a_dal: the log does not name the aligned form"
# Mid-2023: model_rng.pt, and each of 7 (5) data-parallel ranks' shards in its own optim.pt, ranks whose shards are of
# one kind holding one param group; TP 2 in bf16, the weights from the optimizer's fp32 main shards.
from_pytorch a_dpr ref_dpr 1
grep -q "Adam's moments at step 3 from per-data-parallel-rank optim.pt, 7 ranks)" a_dpr.log ||
  fail "a_dpr: the log does not name the per-data-parallel-rank files"
from_pytorch a_dprb ref_dprb 2 --tensor-model-parallel-size 2 --use-distributed-optimizer
grep -q "fp32 master weights from per-data-parallel-rank optim.pt, 5 ranks" a_dprb.log ||
  fail "a_dprb: the log does not say the weights came from the fp32 main shards"

# ---- (b) ours -> Megatron's layout -> ours
# roundtrip NAME NP ARGS...: 13 iterations in one run; 3 saved (ours and Megatron's layout); 10 more from ours, and 10
# more from the Megatron files alone (copied away from ours): both log the uninterrupted run's iterations 4 to 13 bit for bit.
roundtrip() {
  local name=$1 np=$2; shift 2
  local run=("${ARGS[@]}" --data-path "$WORK/random" "$@")
  pretrain "$name.full" "$np" "${run[@]}" --train-iters 13
  pretrain "$name.first" "$np" "${run[@]}" --train-iters 3 --save "$WORK/$name.ck" --save-interval 3
  grep -q "Megatron-LM layout written" "$name.first.log" || fail "$name: no Megatron layout written beside the checkpoint"
  [ -f "$name.ck/iter_0000003/mp_rank_00/model_optim_rng.pt" ] || [ -f "$name.ck/iter_0000003/mp_rank_00_000/model_optim_rng.pt" ] ||
    [ -f "$name.ck/iter_0000003/mp_rank_00/model_rng.pt" ] || fail "$name: no iter_0000003 in $(ls "$name.ck")"
  [ "$(cat "$name.ck/latest_checkpointed_iteration.txt")" = 3 ] || fail "$name: the tracker does not name iteration 3"
  mkdir -p "$name.meg"
  cp -r "$name.ck/iter_0000003" "$name.ck/latest_checkpointed_iteration.txt" "$name.meg/"
  pretrain "$name.ours" "$np" "${run[@]}" --train-iters 13 --load "$WORK/$name.ck" --save "$WORK/$name.ck" --save-interval 100
  pretrain "$name.megatron" "$np" "${run[@]}" --train-iters 13 --load "$WORK/$name.meg"
  grep -q "resumed from .*$name.ck/" "$name.ours.log" || fail "$name.ours: did not resume from our checkpoint"
  resumed "$name.megatron" 3 12
  close_after 3 0 "$name.full/output" "$name.ours/output" "$name.megatron/output"
  ok "$name: resumed from Megatron's layout of our checkpoint, bit for bit the uninterrupted run's steps 4-13"
}
roundtrip b_fp32 1
roundtrip b_fp16 1 --fp16 --initial-loss-scale 4096
# Under --use-distributed-optimizer GPT-2 is written as 285068c's distributed optimizer saves it: model_rng.pt, and each
# data-parallel rank's shards in mp_rank_TT_DDD/optim.pt (TP 2 at DP 1; bf16 at DP 2, the fp32 main shards beside).
roundtrip b_tp2 2 --tensor-model-parallel-size 2 --use-distributed-optimizer
roundtrip b_dp2 2 --use-distributed-optimizer --bf16
grep -q "of the distributed optimizer (285068c's: model_rng.pt, optim.pt for each of DP 2)" b_dp2.first.log ||
  fail "b_dp2: the log does not say 285068c's distributed optimizer files were written"

# ---- (c) torch reads it as Megatron's: the optimizer state dict fits torch's AdamW over the model in Megatron's groups
for d in b_fp32.ck b_fp16.ck; do
  PYTHONPATH="$SRC/tests/integration" "$PY" - "$d" <<'EOF' || fail "$d: torch does not take its Megatron layout"
import glob, sys
import torch
from lib import state_flat as flat
files = sorted(glob.glob(sys.argv[1] + "/iter_0000003/mp_rank_*/model_optim_rng.pt"))
assert files, "no shard files"
for f in files:
    sd = torch.load(f)
    assert sd["iteration"] == 3 and sd["checkpoint_version"] == 3.0 and sd["args"].consumed_train_samples == 12
    named = [(n, torch.nn.Parameter(t.float())) for n, t in flat(sd["model"])]
    no_wd = [n.endswith(".bias") or p.dim() == 1 for n, p in named]
    groups = [dict(params=[p for (n, p), x in zip(named, no_wd) if not x]), dict(params=[p for (n, p), x in zip(named, no_wd) if x])]
    opt = torch.optim.AdamW(groups, lr=0.0)
    o = sd["optimizer"]
    fp16 = "fp32_from_fp16_params" in o
    opt.load_state_dict(o["optimizer"] if fp16 else o)
    for n, p in named:
        s = opt.state[p]
        assert s["exp_avg"].shape == p.shape and s["exp_avg_sq"].shape == p.shape, n
        assert float(s["step"]) == 3.0 and torch.all(s["exp_avg_sq"] >= 0), n
    if fp16:
        masters = [t for g in o["fp32_from_fp16_params"] for t in g]
        ordered = [p for g in groups for p in g["params"]]
        assert all(m.dtype == torch.float32 and m.shape == p.shape for m, p in zip(masters, ordered))
        assert all(torch.equal(m.half().float(), p) for m, p in zip(masters, ordered)), "the model is not its masters rounded"
        assert float(o["grad_scaler"]["scale"]) > 0
    sch = sd["opt_param_scheduler"]
    assert sch["num_steps"] == 12 and sch["lr_decay_steps"] == 13 * 4 and sch["lr_warmup_steps"] == 2 * 4, sch
    print(f"{f}: {len(named)} parameters, {len(opt.state)} states, groups {[len(g['params']) for g in groups]}")
EOF
done
ok "torch.load and torch's AdamW take the optimizer state we wrote"
# 285068c's distributed optimizer, transcribed here (megatron/model/distributed.py: parameters() given the buffer's
# elements from its end down; distrib_optimizer.py: rank r owns [r m, min(n, (r + 1) m)), m = ceil(n / dp), its groups
# the decay then no-decay shards in parameters() order, a group with none squeezed out): each rank's optim.pt holds
# exactly those shards, numbered as torch numbers them (torch's own load_state_dict takes it over the shards), and
# the shards piece together every element once; under bf16 the fp32 main shards round to the model's weights.
for d in b_tp2.ck b_dp2.ck; do
  PYTHONPATH="$SRC/tests/integration" "$PY" - "$d" <<'EOF' || fail "$d: not 285068c's distributed optimizer files"
import glob, sys
import torch
from lib import state_flat as flat
files = sorted(glob.glob(sys.argv[1] + "/iter_0000003/mp_rank_??/model_rng.pt"))
assert files and not glob.glob(sys.argv[1] + "/iter_0000003/*/model_optim_rng.pt"), "no model_rng.pt (or a model_optim_rng.pt)"
for f in files:
    sd = torch.load(f)
    assert "optimizer" not in sd and sd["iteration"] == 3 and sd["args"].use_distributed_optimizer
    dp = sd["args"].data_parallel_size
    named = flat(sd["model"])
    n = sum(t.numel() for _, t in named)
    start, below = [], n
    for _, t in named:
        below -= t.numel()
        start.append(below)
    m = -(-n // dp)
    covered = [torch.zeros(t.numel(), dtype=torch.int32) for _, t in named]
    for r in range(dp):
        lo, hi = r * m, min(n, (r + 1) * m)
        groups = []
        for no_wd in (False, True):
            g = [(i, max(lo, start[i]) - start[i], min(hi, start[i] + t.numel()) - start[i]) for i, (name, t) in enumerate(named)
                 if (name.endswith(".bias") or t.dim() == 1) == no_wd and min(hi, start[i] + t.numel()) > max(lo, start[i])]
            if g:
                groups.append((no_wd, g))
        o = torch.load(f.replace("/model_rng.pt", "_%03d/optim.pt" % r))
        assert o["opt_param_scheduler"]["num_steps"] == 12, o["opt_param_scheduler"]
        inner = o["optimizer"]["optimizer"]
        assert [(g["wd_mult"], g["step"]) for g in inner["param_groups"]] == [(0.0 if k else 1.0, 3) for k, _ in groups]
        shards = [[torch.nn.Parameter(torch.zeros(b - a)) for _, a, b in g] for _, g in groups]
        torch.optim.SGD([{"params": p} for p in shards], lr=0.0).load_state_dict(inner)  # torch's numbering check
        ids = [i for g in inner["param_groups"] for i in g["params"]]
        assert ids == list(range(len(ids))), ids
        masters = o["optimizer"]["shard_fp32_from_float16_groups"]
        bf16 = sd["args"].bf16
        for (_, g), got_ids, mg in zip(groups, [g["params"] for g in inner["param_groups"]], masters):
            assert len(mg) == (len(g) if bf16 else 0)
            for j, ((i, a, b), k) in enumerate(zip(g, got_ids)):
                st = inner["state"][k]
                assert st["exp_avg"].shape == st["exp_avg_sq"].shape == (b - a,) and torch.all(st["exp_avg_sq"] >= 0)
                covered[i][a:b] += 1
                if bf16:
                    assert torch.equal(mg[j].bfloat16(), named[i][1].reshape(-1)[a:b]), named[i][0]
    assert all(torch.all(c == 1) for c in covered), "the ranks' shards do not cover every element once"
    print(f"{f}: DP {dp}, {len(named)} parameters in {dp} optim.pt file(s){', fp32 main shards' if sd['args'].bf16 else ''}")
EOF
done
ok "285068c's distributed optimizer files: each rank's shards as Megatron cuts them"

# ---- (d) refusals
mkdir -p d_release && cp -r b_fp32.ck/iter_0000003 d_release/release && echo release > d_release/latest_checkpointed_iteration.txt
"$PY" - ref_torch "$SRC/tools" <<'EOF'
import os, shutil, sys
sys.path.insert(0, sys.argv[2])
import megatron_golden_state  # noqa: F401  (Megatron's enums, which the args hold, under their module names)
import torch
src = sys.argv[1]
for name, change in [("d_no_optim", lambda sd: sd.pop("optimizer"))]:
    shutil.copytree(src, name)
    f = os.path.join(name, "iter_0000003", "mp_rank_00", "model_optim_rng.pt")
    sd = torch.load(f)
    change(sd)
    torch.save(sd, f)
# The distributed optimizer's: its distrib_optim.pt gone; a bucket one element short of what the model fills.
shutil.copytree("ref_dpb", "d_distrib_gone")
os.remove(os.path.join("d_distrib_gone", "iter_0000003", "mp_rank_00", "distrib_optim.pt"))
shutil.copytree("ref_dpb", "d_distrib_other")
f = os.path.join("d_distrib_other", "iter_0000003", "mp_rank_00", "distrib_optim.pt")
sd = torch.load(f)
sd["per_bucket_numel_unpadded"][0][torch.float32][1] -= 1
torch.save(sd, f)
# An aligned buffer one element short: neither contiguous nor aligned adds up.
shutil.copytree("ref_dal", "d_aligned_other")
f = os.path.join("d_aligned_other", "iter_0000003", "mp_rank_00", "distrib_optim.pt")
sd = torch.load(f)
sd[0][(torch.float32, torch.float32)]["numel_unpadded"] -= 1
torch.save(sd, f)
# Mid-2023's: one data-parallel rank's optim.pt gone; one rank's shard a different size (a model of other widths).
shutil.copytree("ref_dpr", "d_dp_gone")
shutil.rmtree(os.path.join("d_dp_gone", "iter_0000003", "mp_rank_00_004"))
shutil.copytree("ref_dpr", "d_dp_other")
f = os.path.join("d_dp_other", "iter_0000003", "mp_rank_00_002", "optim.pt")
sd = torch.load(f)
st = sd["optimizer"]["optimizer"]["state"][0]
st["exp_avg"] = st["exp_avg"][1:]
torch.save(sd, f)
EOF
for c in "d_release:a release checkpoint holds weights only" "d_no_optim:holds no optimizer state" \
         "d_distrib_gone:distrib_optim.pt is missing" "d_distrib_other:bucket 1 holds 2191 elements, its parameters in Megatron's order fill" \
         "d_aligned_other:contiguously (nor as core_r0.9 on aligns them, to 64 elements): not this model's buffer" \
         "d_dp_gone:mp_rank_00_004/optim.pt is missing: a resume needs every rank's moments" \
         "d_dp_other:its exp_avg is not a 1-D tensor of the shard's"; do
  dir=${c%%:*} pattern=${c#*:}
  refused 2 "$pattern" "$dir.run" bash -c "cd $WORK && mkdir -p $dir.run && cd $dir.run && exec $BIN pretrain_gpt $(printf '%q ' "${ARGS[@]}") --data-path $WORK/period --train-iters 13 --load $WORK/$dir"
done
