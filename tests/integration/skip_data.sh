#!/usr/bin/env bash
# MindFormers' data skip (use_skip_data_by_global_norm with monitor_config.global_norm_spike_threshold
# and global_norm_spike_count_threshold; the Resilience issue's skip action):
#  (1) a threshold no step reaches: losses and weights bitwise those of a run without the skip;
#  (2) a threshold every step exceeds: no step updates, so the final weights are bitwise those of a
#      run with learning rate 0, and every step line says skipped;
#  (3) global_norm_spike_count_threshold: 3 such steps in a row stop the run, status 5, with a
#      checkpoint of step 3 committed;
#  (4) resumed at step 6 with a threshold between the norms of steps 7-9 and step 10's: steps 7-9
#      update bitwise as without the skip, step 10 is skipped, and every step is skipped exactly when
#      its norm exceeds the threshold.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
random_gpt2 t.yaml seed=3 steps=12 batch=4 clip= warmup= optimizer= top="lr_schedule: {type: constant, learning_rate: 0.003}" \
  samples=400 model= ckpt="prefix: tiny, save_checkpoint_steps: 100, keep_checkpoint_max: 2"
SKIP=(--set use_skip_data_by_global_norm=True)
sk() {  # NAME [--set ...]: lib's layout_train on one rank into NAME, weights in NAME/weights.safetensors
  local n=$1; shift
  layout_train 1 "$n" t.yaml "$@"
}
field() {  # NAME KEY: "step value" per step line
  "$PY" -c 'import json,sys; [print(j["step"], repr(j.get(sys.argv[2]))) for j in map(json.loads, open(sys.argv[1])) if "loss" in j]' "$1/metrics.jsonl" "$2"
}

# (1)
sk plain
sk high "${SKIP[@]}" --set monitor_config.global_norm_spike_threshold=1e9
[ "$(field high loss)" = "$(field plain loss)" ] || fail "(1) losses differ with a threshold no step reaches"
cmp -s high/weights.safetensors plain/weights.safetensors || fail "(1) weights differ with a threshold no step reaches"
[ -z "$(field high spike | grep True)" ] || fail "(1) a step was marked as a spike"
echo "(1) threshold 1e9: bitwise the run without the skip"

# (2)
sk lr0 --set lr_schedule.learning_rate=0
sk all "${SKIP[@]}" --set monitor_config.global_norm_spike_threshold=1e-9 \
  --set monitor_config.global_norm_spike_count_threshold=1000
cmp -s all/weights.safetensors lr0/weights.safetensors || fail "(2) the weights moved although every step was skipped"
[ "$(field all skipped | grep -c True)" -eq 12 ] || fail "(2) not every step is marked skipped"
[ "$(grep -c "above monitor_config.global_norm_spike_threshold 1e-09; no update" all.log)" -eq 12 ] || fail "(2) warnings"
echo "(2) threshold 1e-9: no step updates (weights bitwise those of learning rate 0), 12 warnings"

# (3)
run stop "$BIN" train --config t.yaml --set output_dir=stop --save-weights stop/weights.safetensors "${SKIP[@]}" \
  --set monitor_config.global_norm_spike_threshold=1e-9 \
  --set monitor_config.global_norm_spike_count_threshold=3
[ "$STATUS" -eq 5 ] || { tail -5 stop.log; fail "(3) status $STATUS, expected 5"; }
grep -q "step 3: 3 steps in a row skipped for spikes (monitor_config.global_norm_spike_count_threshold 3); training stopped; checkpoint .* of step 3 committed" stop.log \
  || { tail -5 stop.log; fail "(3) no stop line"; }
[ "$(cat stop/checkpoint/latest)" = "tiny-1_3" ] || fail "(3) latest is not step 3's"
echo "(3) 3 spikes in a row: status 5, checkpoint of step 3 committed"

# (4) from the plain run's step-6 checkpoint, a threshold between the norms of steps 7-9 and step 10's:
# steps 7-9 update exactly as in the plain run (same weights, same data: bitwise losses), step 10 is
# skipped, and every later step is skipped exactly when its own norm exceeds the threshold.
sk base "${SKIP[@]}" --set monitor_config.global_norm_spike_threshold=1e9 \
  --set "callbacks=[{type: MFLossMonitor, per_print_times: 1}, {type: CheckpointMonitor, prefix: tiny, save_checkpoint_steps: 6}]"
t=$("$PY" - plain/metrics.jsonl <<'PY'
import json, sys
n = {j["step"]: j["grad_norm"] for j in map(json.loads, open(sys.argv[1])) if "loss" in j}
low = max(n[7], n[8], n[9])
if not n[10] > low: sys.exit(f"step 10's norm {n[10]} is not above steps 7-9's ({low}): pick other steps")
print((low + n[10]) / 2)
PY
) || fail "(4) $t"
sk mid "${SKIP[@]}" --set "monitor_config.global_norm_spike_threshold=$t" --set resume_training=True \
  --set load_checkpoint=base/checkpoint/tiny-1_6 --set monitor_config.global_norm_spike_count_threshold=1000
"$PY" - "$t" mid/metrics.jsonl plain/metrics.jsonl <<'PY' || fail "(4) see above"
import json, sys
t = float(sys.argv[1])
mid = {j["step"]: j for j in map(json.loads, open(sys.argv[2])) if "loss" in j}
plain = {j["step"]: j for j in map(json.loads, open(sys.argv[3])) if "loss" in j}
assert sorted(mid) == list(range(7, 13)), sorted(mid)
for s in (7, 8, 9):
    assert not mid[s]["skipped"] and repr(mid[s]["loss"]) == repr(plain[s]["loss"]), (s, mid[s], plain[s])
assert mid[10]["spike"] and mid[10]["skipped"], mid[10]
bad = [s for s, j in mid.items() if j["spike"] != (j["grad_norm"] > t) or j["skipped"] != j["spike"]]
assert not bad, bad
print(f"(4) threshold {t:.4f}: steps 7-9 updated bitwise as the plain run, skipped: {[s for s, j in mid.items() if j['spike']]}")
PY
