#!/usr/bin/env bash
# Spikes against a running statistic and healthy checkpoints (the Resilience issue's items 1 and 4).
# Two Megatron datasets written here byte for byte (.bin/.idx): `clean`, 60 documents of 16 tokens
# that count (learnable), and `planted`, the same with 2 documents of random rare tokens inserted
# where global batch 10 begins (batch size 2, no shuffle: sample i is document i and the next one's
# first token, so planted's batch 10 is the garbage and its batch 11 + j is clean's batch 10 + j).
# monitor_config: loss_spike_factor 1.5 over a window of 5 steps, constant learning rate, no dropout.
#  (1) spike_action skip on `planted`: step 11 (the garbage) is the only spike, skipped; from step 12
#      on the losses and gradient norms are bitwise those of `clean` one step earlier (same weights,
#      same data, same AdamW count); `clean` has no spike. Checkpoints 14 and 16 are recorded healthy.
#  (2) the same run to step 12 with keep_checkpoint_max 1: step 12's checkpoint (steps 11-12) is
#      recorded not healthy and step 10's is kept beside it; resumed to step 16 without load_checkpoint,
#      step 12's is passed over (named in the log) for step 10's; steps 11-16 are bitwise (1)'s.
#  (3) spike_action warn: step 11 is marked a spike, warned with its samples, and updated.
#  (4) spike_action stop: status 5 before step 11's update, with step 10's checkpoint committed.
#  (5) a damaged newest checkpoint (one byte of its shard flipped): the resume names the tensor whose
#      piece fails its CRC, falls back to the checkpoint before, and ends bitwise as (1).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"

PYTHONPATH="$SRC/tests/integration" "$PY" - <<'PY'
import random
import lib
clean = [[0] + [(3 * j + t) % 20 + 1 for t in range(1, 16)] for j in range(60)]
rng = random.Random(7)
garbage = [[0] + [rng.randrange(60, 101) for _ in range(15)] for _ in range(2)]
lib.write("clean", clean)  # Megatron's MMIDIDX layout, uint16 tokens (vocabulary < 65500)
lib.write("planted", clean[:20] + garbage + clean[20:])
PY

cat > tiny.yaml <<YAML
seed: 3
runner_config: {train_steps: 16, batch_size: 2}
lr_schedule: {type: constant, learning_rate: 0.01}
train_dataset: {data_loader: {type: MegatronDataset, data_path: clean, split: "1,0,0", shuffle: False}}
monitor_config: {loss_spike_factor: 1.5, spike_window: 5, spike_action: skip}
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 101, seq_length: 16, hidden_size: 32, num_layers: 2, num_heads: 4,
                 hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0}
callbacks:
  - {type: MFLossMonitor, per_print_times: 1}
  - {type: CheckpointMonitor, prefix: tiny, save_checkpoint_steps: 2, keep_checkpoint_max: 2}
YAML
# t NAME [--set ...]: lib's layout_train on one rank (console in NAME.log, weights in NAME/weights.safetensors)
t() { local name=$1; shift; layout_train 1 "$name" tiny.yaml "$@"; }
# "step loss grad_norm spike skipped" of the last line of each step in metrics.jsonl, from step FROM, shifted by SHIFT.
rows() {  # NAME FROM SHIFT
  "$PY" - "$1/metrics.jsonl" "$2" "$3" <<'PY'
import json, sys
last = {j["step"]: j for j in map(json.loads, open(sys.argv[1])) if "loss" in j}
for s in sorted(last):
    if s >= int(sys.argv[2]):
        j = last[s]
        print(s - int(sys.argv[3]), repr(j["loss"]), repr(j["grad_norm"]), j.get("spike"), j["skipped"])
PY
}
healthy() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["state"]["healthy"])' "$1/index.json"; }

# (1)
t clean
t planted --set train_dataset.data_loader.data_path=planted
[ -z "$(rows clean 1 0 | awk '$4 == "True"')" ] || fail "(1) the clean run has a spike: $(rows clean 1 0 | awk '$4 == "True"')"
spikes=$(rows planted 1 0 | awk '$4 == "True" {print $1, $5}' | tr '\n' ' ')
[ "$spikes" = "11 True " ] || fail "(1) spikes (step skipped) of the planted run: '$spikes', expected '11 True'"
grep -q "step 11: spike: loss .* > monitor_config.loss_spike_factor 1.5 x .*; no update, its data skipped (samples \[20, 22)" planted.log ||
  fail "(1) no warning naming step 11's samples: $(grep -m1 spike planted.log)"
cmp <(rows planted 12 1 | cut -d' ' -f1-3) <(rows clean 11 0 | sed '$d' | cut -d' ' -f1-3) ||
  fail "(1) the planted run's steps 12-16 differ from the clean run's 11-15"
echo "(1) planted garbage at step 11: $(grep -o 'loss [0-9.]* > monitor_config.loss_spike_factor 1.5 x [0-9.]*' planted.log | head -1); skipped; steps 12-16 bitwise the clean run's 11-15"
for c in 14:True 16:True; do
  [ "$(healthy planted/checkpoint/tiny-1_${c%%:*})" = "${c##*:}" ] || fail "(1) checkpoint ${c%%:*} not recorded healthy"
done

# (2)
t short --set train_dataset.data_loader.data_path=planted --set runner_config.train_steps=12 \
  --set callbacks.1.keep_checkpoint_max=1
[ "$(healthy short/checkpoint/tiny-1_12)" = False ] || fail "(2) step 12's checkpoint (steps 11-12, a spike) recorded healthy"
[ "$(healthy short/checkpoint/tiny-1_10)" = True ] ||
  fail "(2) the newest healthy checkpoint (step 10) was not kept beyond keep_checkpoint_max 1: $(ls short/checkpoint)"
t short --set train_dataset.data_loader.data_path=planted --set resume_training=True
grep -q "tiny-1_12 (step 12) is not recorded healthy" short.log || fail "(2) the unhealthy checkpoint was not named"
grep -q "resumed from .*tiny-1_10" short.log || fail "(2) did not resume from step 10: $(grep -m1 resumed short.log)"
cmp <(rows planted 11 0) <(rows short 11 0) || fail "(2) the resumed steps 11-16 differ from the run's"
cmp planted/weights.safetensors short/weights.safetensors || fail "(2) final weights differ"
echo "(2) step 12's checkpoint recorded not healthy, step 10's kept beyond keep_checkpoint_max 1; the resume passed over 12 for 10; steps 11-16 and the weights bitwise (1)'s"

# (3)
t warn --set train_dataset.data_loader.data_path=planted --set monitor_config.spike_action=warn
[ "$(rows warn 11 0 | sed -n 1p | cut -d' ' -f4,5)" = "True False" ] || fail "(3) step 11: $(rows warn 11 0 | sed -n 1p)"
grep -q "step 11: spike: .*updated (spike_action: warn) (samples \[20, 22)" warn.log || fail "(3) no warning"
echo "(3) warn: step 11 marked and updated"

# (4)
run stop "$BIN" train --config tiny.yaml --set output_dir=stop --save-weights stop/weights.safetensors \
  --set train_dataset.data_loader.data_path=planted --set monitor_config.spike_action=stop
[ "$STATUS" = 5 ] || fail "(4) status $STATUS, expected 5: $(tail -3 stop.log)"
grep -q "step 11: a spike (monitor_config.spike_action: stop); training stopped before its update; checkpoint .*tiny-1_10" stop.log ||
  fail "(4) $(grep -m1 'training stopped' stop.log)"
[ "$(cat stop/checkpoint/latest)" = tiny-1_10 ] || fail "(4) latest is $(cat stop/checkpoint/latest)"
echo "(4) stop: status 5 before step 11's update, checkpoint of step 10 committed"

# (5)
t damaged --set monitor_config.loss_spike_factor=0 --set runner_config.train_steps=12
"$PY" - damaged/checkpoint/tiny-1_12/rank_00000.safetensors <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[-5] ^= 0x10  # a bit of the last piece's data
open(sys.argv[1], "wb").write(b)
PY
t damaged --set monitor_config.loss_spike_factor=0 --set resume_training=True
grep -q "tiny-1_12 (step 12) is damaged: .*CRC-32C .*damaged: tensor optimizer" damaged.log ||
  fail "(5) the damage is not named: $(grep -m1 damaged damaged.log)"
grep -q "resumed from .*tiny-1_10" damaged.log || fail "(5) did not fall back to step 10"
t whole --set monitor_config.loss_spike_factor=0
cmp <(rows whole 1 0) <(rows damaged 1 0) || fail "(5) losses differ from the uninterrupted run"
cmp whole/weights.safetensors damaged/weights.safetensors || fail "(5) weights differ from the uninterrupted run"
echo "(5) $(grep -o 'damaged: tensor [^ ]*' damaged.log | head -1); fell back to step 10, ended bitwise the uninterrupted run"
echo "PASS: spikes and healthy checkpoints"
