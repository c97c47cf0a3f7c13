#!/usr/bin/env bash
# Checkpoints resume training exactly. Each reference run trains 20 steps uninterrupted with a
# CheckpointMonitor saving every 10 steps; a second run resumes from the reference's step-10
# checkpoint (resume_training: True, load_checkpoint: that directory) and trains steps 11-20.
#
#  * Same layout: bitwise. The resumed run's losses of steps 11-20 and its final weights are the
#    reference's, bit for bit: fp32 on one rank with dropout and dynamic loss scaling whose scale
#    overflows, is halved and grows again before and after the checkpoint (the scale, its counters
#    and the skipped-step count are in the checkpoint); bf16, the same; and dp2 with ZeRO (the moments saved
#    as each rank's shard) with async_save (the files written by a background thread).
#  * Another layout: the checkpoint's boxes are read into the new layout's slices, and the resumed
#    run is held to compare_runs.py's criteria against the uninterrupted one (losses of steps 11-20
#    within 1e-5 relative, final weights as it checks them): dp2 -> mp2, mp2+sp -> dp2+ZeRO,
#    ZeRO -> no ZeRO, 2 ranks -> 1 rank, pp2 -> pp1 and pp1 -> pp2, and Mixtral-style experts
#    ep2 -> ep1.
#  * A checkpoint of another model (more layers, another vocabulary) is refused before any step
#    (status 2), naming the tensor or its shape. (A global batch that differs from the checkpoint's is
#    taken since the Resilience issue: resume_batch.sh.)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
CK="prefix: tiny, save_checkpoint_steps: 10, keep_checkpoint_max: 3"
random_gpt2 gpt2.yaml batch=8 ckpt="$CK" layers=4
random_llama mixtral.yaml batch=8 ckpt="$CK" hidden=32 theta= eps= \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: True}"

# ctrain MODEL NAME NP [--set ...]: lib.sh's layout_train into MODEL/NAME
ctrain() {
  local model=$1 name=$2 np=$3; shift 3
  layout_train "$np" "$model/$name" "$model.yaml" "$@"
}
# resume MODEL REF NAME NP [--set ...]: steps 11-20 from REF's step-10 checkpoint
resume() {
  local model=$1 ref=$2 name=$3 np=$4; shift 4
  ctrain "$model" "$name" "$np" --set resume_training=True --set load_checkpoint="$model/$ref/checkpoint/tiny-1_10" "$@"
  grep -q "resumed from .*tiny-1_10: step 10" "$model/$name.log" || fail "$model $name did not resume"
}
DP2="--set parallel_config.data_parallel=2 --set runner_config.batch_size=4"
MP2="--set parallel_config.model_parallel=2"
SP="--set parallel_config.use_seq_parallel=True"
ZERO="--set parallel.enable_parallel_optimizer=True"
PP2="--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=4 --set runner_config.batch_size=2"
GAS4="--set runner_config.gradient_accumulation_steps=4 --set runner_config.batch_size=2"
# Dynamic loss scaling that overflows: from 2^130 the scale doubles every 3 good steps, and at about 2^132 the
# scaled gradients pass float's range, so a step is skipped and the scale halves (steps 7, 11, 17 here).
DYN="--set runner_wrapper.scale_sense.type=DynamicLossScaleUpdateCell --set runner_wrapper.scale_sense.loss_scale_value=1.36e39 --set runner_wrapper.scale_sense.scale_factor=2 --set runner_wrapper.scale_sense.scale_window=3"
BF16="--set model.model_config.compute_dtype=bfloat16"

bitwise() {  # MODEL REF RUN: lib.sh's same_after 10: steps 11-20 (loss and loss scale) and the final weights bitwise equal
  same_after 10 "$1/$2" "$1/$3"
}
close() {  # MODEL REF RUN...: compare_runs.py's criteria over the resumed steps
  local m=$1 ref=$2; shift 2
  (cd "$m" && "$PY" "$SRC/tests/integration/compare_runs.py" "$ref" "$@") || fail "$m resumed runs differ from $ref"
}

# Same layout, bitwise.
ctrain gpt2 one_dyn 1 $DYN
grep -q "overflow, step skipped" gpt2/one_dyn.log || fail "the dynamic loss scale never overflowed"
"$PY" - gpt2/one_dyn/metrics.jsonl <<'PY' || fail "the loss scale did not change after step 10 or no step was skipped before it"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
scales = [r["loss_scale"] for r in rows]
assert len(set(scales[10:])) > 1 and any(r["skipped"] for r in rows[:10]), scales
print("loss scale over the 20 steps:", scales)
PY
resume gpt2 one_dyn one_dyn_resumed 1 $DYN
bitwise gpt2 one_dyn one_dyn_resumed
ctrain gpt2 one_bf16 1 $BF16 $DYN
resume gpt2 one_bf16 one_bf16_resumed 1 $BF16 $DYN
bitwise gpt2 one_bf16 one_bf16_resumed
ASYNC="--set callbacks.1.async_save=True"  # the files written by a background thread
ctrain gpt2 dp2_zero 2 $DP2 $ZERO $ASYNC
resume gpt2 dp2_zero dp2_zero_resumed 2 $DP2 $ZERO $ASYNC
bitwise gpt2 dp2_zero dp2_zero_resumed
# keep_checkpoint_max 3 with saves at 10 and 20: both kept, latest names step 20.
[ "$(cat gpt2/dp2_zero/checkpoint/latest)" = "tiny-2_20" ] || [ "$(cat gpt2/dp2_zero/checkpoint/latest)" = "tiny-1_20" ] \
  || fail "latest is $(cat gpt2/dp2_zero/checkpoint/latest)"

# Another layout: the boxes resharded on load.
ctrain gpt2 dp2 2 $DP2
resume gpt2 dp2 dp2_to_mp2 2 $MP2
resume gpt2 dp2 dp2_to_one 1
ctrain gpt2 mp2_sp 2 $MP2 $SP
resume gpt2 mp2_sp mp2_sp_to_dp2_zero 2 $DP2 $ZERO
resume gpt2 dp2_zero dp2_zero_to_dp2 2 $DP2
close gpt2 dp2 dp2_to_mp2 dp2_to_one
close gpt2 mp2_sp mp2_sp_to_dp2_zero
close gpt2 dp2_zero dp2_zero_to_dp2
# Pipeline stages: pp2 (4 micro-batches of 2) against one rank accumulating the same micro-batches.
ctrain gpt2 pp2 2 $PP2
resume gpt2 pp2 pp2_to_gas4 1 $GAS4
ctrain gpt2 gas4 1 $GAS4
resume gpt2 gas4 gas4_to_pp2 2 $PP2
close gpt2 pp2 pp2_to_gas4
close gpt2 gas4 gas4_to_pp2
# Experts: ep2 within dp2 -> one rank.
ctrain mixtral ep2 2 $DP2 --set parallel_config.expert_parallel=2
resume mixtral ep2 ep2_to_one 1
close mixtral ep2 ep2_to_one

# Refused before any step: another model's checkpoint. (Another global batch is taken since the
# Resilience issue: tests/integration/resume_batch.sh.)
# crefused NAME PATTERN ARGS...: lib.sh's refused (status 2, PATTERN) of gpt2.yaml into refused/NAME
crefused() {
  local name=$1 pattern=$2; shift 2
  mkdir -p refused
  refused 2 "$pattern" "refused/$name" "$BIN" train --config gpt2.yaml --set output_dir="refused/$name" "$@"
  echo "  $(awk -v p="$pattern" 'i = index($0, p) {print substr($0, i, 160); exit}' "refused/$name.log")"
}
LOAD="--set load_checkpoint=gpt2/one_dyn/checkpoint/tiny-1_10"
crefused deeper "holds tensor 'h.3" $LOAD --set model.model_config.num_layers=3
crefused vocab "shape" $LOAD --set model.model_config.vocab_size=103
echo "PASS: checkpoint resume"
