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
#  * A checkpoint of another model (more layers, another vocabulary) and a global batch that differs
#    from the checkpoint's are refused before any step, naming the tensor or the key.
set -euo pipefail
BUILD="$1"; SRC="$2"
BIN="$BUILD/bin/gridformer"
command -v mpirun >/dev/null || { echo "FAIL: mpirun missing (openmpi-bin)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
common() {
  cat <<YAML
seed: 11
runner_config: {train_steps: 20, batch_size: 8}
runner_wrapper: {use_clip_grad: True, max_grad_norm: 0.5}
lr_schedule: {type: cosine, learning_rate: 0.003, lr_end: 0.0003, warmup_steps: 2}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 160}}
callbacks:
  - {type: MFLossMonitor, per_print_times: 1}
  - {type: CheckpointMonitor, prefix: tiny, save_checkpoint_steps: 10, keep_checkpoint_max: 3}
YAML
}
{ common; cat <<YAML
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 101, seq_length: 16, hidden_size: 32, num_layers: 4, num_heads: 4,
                 hidden_dropout_rate: 0.1, attention_dropout_rate: 0.1}
YAML
} > gpt2.yaml
{ common; cat <<YAML
model:
  arch: {type: LlamaForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 101, seq_length: 16, hidden_size: 32, num_layers: 2, num_heads: 4,
                 n_kv_heads: 2, intermediate_size: 48}
moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: True}
YAML
} > mixtral.yaml

# run MODEL NAME NP [--set ...]: trains into MODEL/NAME, the final weights in MODEL/NAME/weights.safetensors
run() {
  local model=$1 name=$2 np=$3; shift 3
  local cmd=("$BIN" train --config "$model.yaml" --set output_dir="$model/$name"
             --save-weights "$model/$name/weights.safetensors" "$@")
  mkdir -p "$model"
  if [ "$np" -eq 1 ]; then "${cmd[@]}" > "$model/$name.log" 2>&1 || { tail -30 "$model/$name.log"; echo "FAIL: $model $name"; exit 1; }
  else mpirun -np "$np" --oversubscribe "${cmd[@]}" > "$model/$name.log" 2>&1 || { tail -30 "$model/$name.log"; echo "FAIL: $model $name"; exit 1; }
  fi
}
# resume MODEL REF NAME NP [--set ...]: steps 11-20 from REF's step-10 checkpoint
resume() {
  local model=$1 ref=$2 name=$3 np=$4; shift 4
  run "$model" "$name" "$np" --set resume_training=True --set load_checkpoint="$model/$ref/checkpoint/tiny-1_10" "$@"
  grep -q "resumed from .*tiny-1_10: step 10" "$model/$name.log" || { echo "FAIL: $model $name did not resume"; exit 1; }
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

bitwise() {  # MODEL REF RUN: steps 11-20 and the final weights bitwise equal
  local m=$1 ref=$2 r=$3
  python3 - "$m/$ref/metrics.jsonl" "$m/$r/metrics.jsonl" <<'PY' || { echo "FAIL: $m/$r losses are not bitwise those of $m/$ref after step 10"; exit 1; }
import json, sys
def steps(p): return [(r["step"], r["loss"], r["loss_scale"]) for r in map(json.loads, open(p)) if "loss" in r]
ref, got = steps(sys.argv[1]), steps(sys.argv[2])
assert [s for s, _, _ in got] == list(range(11, 21)), [s for s, _, _ in got]
assert got == ref[10:], (got, ref[10:])  # JSON floats round-trip: equal values are equal bits
PY
  cmp "$m/$ref/weights.safetensors" "$m/$r/weights.safetensors" || { echo "FAIL: $m/$r weights differ from $m/$ref"; exit 1; }
  echo "$m/$r: steps 11-20 and final weights bitwise equal to $m/$ref"
}
close() {  # MODEL REF RUN...: compare_runs.py's criteria over the resumed steps
  local m=$1 ref=$2; shift 2
  (cd "$m" && python3 "$SRC/tests/integration/compare_runs.py" "$ref" "$@") || { echo "FAIL: $m resumed runs differ from $ref"; exit 1; }
}

# Same layout, bitwise.
run gpt2 one_dyn 1 $DYN
grep -q "overflow, step skipped" gpt2/one_dyn.log || { echo "FAIL: the dynamic loss scale never overflowed"; exit 1; }
python3 - gpt2/one_dyn/metrics.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
scales = [r["loss_scale"] for r in rows]
assert len(set(scales[10:])) > 1 and any(r["skipped"] for r in rows[:10]), scales
print("loss scale over the 20 steps:", scales)
PY
resume gpt2 one_dyn one_dyn_resumed 1 $DYN
bitwise gpt2 one_dyn one_dyn_resumed
run gpt2 one_bf16 1 $BF16 $DYN
resume gpt2 one_bf16 one_bf16_resumed 1 $BF16 $DYN
bitwise gpt2 one_bf16 one_bf16_resumed
ASYNC="--set callbacks.1.async_save=True"  # the files written by a background thread
run gpt2 dp2_zero 2 $DP2 $ZERO $ASYNC
resume gpt2 dp2_zero dp2_zero_resumed 2 $DP2 $ZERO $ASYNC
bitwise gpt2 dp2_zero dp2_zero_resumed
# keep_checkpoint_max 3 with saves at 10 and 20: both kept, latest names step 20.
[ "$(cat gpt2/dp2_zero/checkpoint/latest)" = "tiny-2_20" ] || [ "$(cat gpt2/dp2_zero/checkpoint/latest)" = "tiny-1_20" ] \
  || { echo "FAIL: latest is $(cat gpt2/dp2_zero/checkpoint/latest)"; exit 1; }

# Another layout: the boxes resharded on load.
run gpt2 dp2 2 $DP2
resume gpt2 dp2 dp2_to_mp2 2 $MP2
resume gpt2 dp2 dp2_to_one 1
run gpt2 mp2_sp 2 $MP2 $SP
resume gpt2 mp2_sp mp2_sp_to_dp2_zero 2 $DP2 $ZERO
resume gpt2 dp2_zero dp2_zero_to_dp2 2 $DP2
close gpt2 dp2 dp2_to_mp2 dp2_to_one
close gpt2 mp2_sp mp2_sp_to_dp2_zero
close gpt2 dp2_zero dp2_zero_to_dp2
# Pipeline stages: pp2 (4 micro-batches of 2) against one rank accumulating the same micro-batches.
run gpt2 pp2 2 $PP2
resume gpt2 pp2 pp2_to_gas4 1 $GAS4
run gpt2 gas4 1 $GAS4
resume gpt2 gas4 gas4_to_pp2 2 $PP2
close gpt2 pp2 pp2_to_gas4
close gpt2 gas4 gas4_to_pp2
# Experts: ep2 within dp2 -> one rank.
run mixtral ep2 2 $DP2 --set parallel_config.expert_parallel=2
resume mixtral ep2 ep2_to_one 1
close mixtral ep2 ep2_to_one

# Refused before any step: another model's checkpoint. (Another global batch is taken since the
# Resilience issue: tests/integration/resume_batch.sh.)
refused() {  # NAME PATTERN ARGS...: the run fails with status 2 and says PATTERN
  local name=$1 pattern=$2; shift 2
  if "$BIN" train --config gpt2.yaml --set output_dir="refused/$name" "$@" > "refused_$name.log" 2>&1; then
    echo "FAIL: $name was not refused"; exit 1; fi
  grep -q -- "$pattern" "refused_$name.log" || { cat "refused_$name.log"; echo "FAIL: $name: no '$pattern'"; exit 1; }
  grep -q '"loss"' "refused/$name/metrics.jsonl" 2>/dev/null && { echo "FAIL: $name trained"; exit 1; }
  echo "refused as it should be ($name): $(grep -o -- "$pattern.*" "refused_$name.log" | head -1 | cut -c1-160)"
}
CK="--set load_checkpoint=gpt2/one_dyn/checkpoint/tiny-1_10"
refused deeper "holds tensor 'h.3" $CK --set model.model_config.num_layers=3
refused vocab "shape" $CK --set model.model_config.vocab_size=103
echo "PASS: checkpoint resume"
