#!/usr/bin/env bash
# End to end: `gridformer train` on a tiny model with synthetic tokens. The loss falls, the log
# line and metrics.jsonl carry their fields, train_steps bounds the run, a non-finite loss stops
# it with status 3, SIGINT stops it cleanly between steps, and a bad config fails before work.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
cli_gpt2 tiny.yaml steps=40 warmup=5 samples=8 print=5

# 1. Trains; uniform random tokens over 64 ids: the loss must fall from ~ln(64)+ towards ln(64) = 4.16.
OMP_NUM_THREADS=1 "$BIN" train --config tiny.yaml > console.txt 2>&1 || { cat console.txt; fail "train exited non-zero"; }
grep -q "step:\[   40/   40\]" console.txt || fail "no log line for step 40"
for k in "loss:" "lr:" "grad_norm:" "loss_scale:" "per_step_time:" "tokens/s:" "samples/s:" "TFLOP/s:" "MFU:" "ETA"; do
  grep -q "$k" console.txt || fail "log line lacks $k"
done
[ -s out/log/rank_0/gridformer.log ] || fail "no per-rank log file"
[ "$(grep -c '"loss"' out/metrics.jsonl)" -eq 9 ] || fail "metrics.jsonl should have 9 step lines (step 1, then every 5 steps of 40)"
[ "$(grep -c '"event": *"run_start"' out/metrics.jsonl)" -eq 1 ] || fail "metrics.jsonl should have one run_start line"
"$PY" - <<'PY' || fail "metrics.jsonl check"
import json
rows = [json.loads(l) for l in open("out/metrics.jsonl") if '"loss"' in l]
for k in ["step", "loss", "lr", "grad_norm", "loss_scale", "step_ms", "tokens_per_s", "tflops", "mfu", "interval_steps"]:
    assert all(k in r for r in rows), k
first, last = rows[0]["loss"], rows[-1]["loss"]
print(f"loss step {rows[0]['step']}: {first:.4f} -> step {rows[-1]['step']}: {last:.4f}")
assert last < first - 0.05, (first, last)
PY

# 2. --set bounds the run.
rm -rf out
"$BIN" train --config tiny.yaml --set runner_config.train_steps=5 --set callbacks.0.per_print_times=1 > c2.txt 2>&1 || fail "bounded run"
[ "$(grep -c '"loss"' out/metrics.jsonl)" -eq 5 ] || fail "train_steps=5 did not give 5 steps"

# 2b. Evaluation every eval_step_interval steps adds eval_loss and ppl.
rm -rf out
"$BIN" train --config tiny.yaml --set runner_config.train_steps=4 --set do_eval=True --set eval_step_interval=2 \
  --set eval_dataset.eval_iters=2 > c2b.txt 2>&1 || { cat c2b.txt; fail "eval run"; }
[ "$(grep -c eval_loss out/metrics.jsonl)" -eq 2 ] || fail "expected 2 eval lines in metrics.jsonl"
grep -q "perplexity" c2b.txt || fail "no eval log line"
# eval_step_interval -1 (MindFormers' "not by steps") with eval_epoch_interval 1: after every epoch
# (8 samples / batch 4 = 2 steps) and after the last step: steps 2, 4 and 5.
rm -rf out
"$BIN" train --config tiny.yaml --set runner_config.train_steps=5 --set do_eval=True --set eval_step_interval=-1 \
  --set eval_epoch_interval=1 --set eval_dataset.eval_iters=1 > c2e.txt 2>&1 || { cat c2e.txt; fail "eval by epoch"; }
[ "$(grep -c eval_loss out/metrics.jsonl)" -eq 3 ] || fail "expected evaluations at steps 2, 4, 5: $(grep eval_loss out/metrics.jsonl)"

# 2c. run_mode: eval evaluates without training: eval_iters batches, but each sample once (8 distinct samples, 2 batches).
"$BIN" train --config tiny.yaml --set run_mode=eval --set eval_dataset.eval_iters=3 > c2c.txt 2>&1 || { cat c2c.txt; fail "eval mode"; }
grep -q "eval: loss .* perplexity .* over 2 batches" c2c.txt || fail "eval mode printed no loss"
grep -qF "eval: 2 batches of the validation data's 8 samples (each once), not eval_iters 3" c2c.txt || fail "eval mode: not said"
grep -q "step:\[" c2c.txt && fail "eval mode trained"

# 3. A non-finite loss stops the run with status 3 and says what to do.
run c3 "$BIN" train --config tiny.yaml --set lr_schedule.type=constant --set lr_schedule.learning_rate=1e30 \
  --set runner_wrapper.use_clip_grad=False --set lr_schedule.warmup_steps=0
((STATUS == 3)) || { cat c3.log; fail "non-finite loss gave status $STATUS, expected 3"; }
grep -q "training stopped" c3.log || fail "no message for the non-finite loss"

# 3b. Dynamic loss scaling: after scale_window good steps the scale grows past float range, that
# step overflows, is skipped (no update) and the scale comes back down; training goes on.
rm -rf out
"$BIN" train --config tiny.yaml --set runner_config.train_steps=6 --set callbacks.0.per_print_times=1 \
  --set "runner_wrapper.scale_sense={type: DynamicLossScaleUpdateCell, loss_scale_value: 1.0e38, scale_factor: 1.0e6, scale_window: 2}" \
  > c3b.txt 2>&1 || { cat c3b.txt; fail "dynamic loss scale run"; }
"$PY" - <<'PY' || fail "dynamic loss scaling"
import json
rows = [json.loads(l) for l in open("out/metrics.jsonl") if '"loss"' in l]
assert [r["skipped"] for r in rows] == [False, False, True, False, False, True], [r["skipped"] for r in rows]
assert rows[3]["loss_scale"] == 1e38 and rows[2]["loss_scale"] > 1e43, [r["loss_scale"] for r in rows]
PY
grep -q "overflow, step skipped" c3b.txt || fail "the log does not show the skipped step"

# 4. SIGINT stops cleanly between steps with 128+2, SIGTERM with 128+15.
for sig in INT:2:c4 TERM:15:c4b; do
  IFS=: read -r name num log <<< "$sig"
  rm -rf out
  "$BIN" train --config tiny.yaml --set runner_config.train_steps=100000 --set callbacks.0.per_print_times=1 > "$log.txt" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do grep -qs '"loss"' out/metrics.jsonl && break; sleep 0.2; done
  kill -"$name" "$pid"
  status=0; wait "$pid" || status=$?
  [ "$status" -eq $((128 + num)) ] || { tail "$log.txt"; fail "SIG$name gave status $status, expected $((128 + num))"; }
  grep -q "stopped by signal $num" "$log.txt" || fail "no clean-stop message for SIG$name"
done

# 5. A bad config fails before any work, naming the key.
refused 2 "did you mean \`model_parallel\`" c5 "$BIN" train --config tiny.yaml --set parallel_config.model_paralel=2
refused 2 "a layout that fits 1 rank(s): parallel_config: {data_parallel: 1, model_parallel: 1, pipeline_stage: 1}" c6 \
  "$BIN" train --config tiny.yaml --set parallel_config.data_parallel=2

# 6a. OMP_NUM_THREADS is honoured.
OMP_NUM_THREADS=1 "$BIN" train --config tiny.yaml --set runner_config.train_steps=1 > c6a.txt 2>&1 || fail "1-thread run"
grep -q "1 thread(s)" c6a.txt || fail "OMP_NUM_THREADS=1 not honoured: $(grep thread c6a.txt)"

# 6b. load_checkpoint: training starts from a Hugging Face file (the tiny HF golden model; its
# loss is close to that of random weights, so the check is the load message) and a file of another
# shape is refused by tensor name.
bare_gpt2 hf.yaml out=./out_hf steps=1 batch=1 data_seed=3 samples= vocab=300 seq=16 hidden=32 layers=2 heads=2 \
  model="max_position_embeddings: 32, hidden_act: gelu_new, hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0"
"$BIN" train --config hf.yaml --set load_checkpoint="$SRC/tests/golden/hf_tiny_f32.safetensors" > c6b.txt 2>&1 \
  || { cat c6b.txt; fail "training from a HF checkpoint"; }
grep -q "loaded weights from .*hf_tiny_f32.safetensors" c6b.txt || fail "no weights-loaded line"
refused 2 "tensor 'h.2.ln_1.weight' is missing" c6c \
  "$BIN" train --config hf.yaml --set model.model_config.num_layers=3 --set load_checkpoint="$SRC/tests/golden/hf_tiny_f32.safetensors"

# 6d. fp16 with a loss scale of 2^32 overflows: the step is skipped and its line says so, with no NaN
# for the gradient norm; metrics.jsonl holds null there (JSON has no NaN) and skipped: true.
rm -rf out
sed 's/^runner_wrapper: {/runner_wrapper: {scale_sense: {type: DynamicLossScaleUpdateCell, loss_scale_value: 4294967296, scale_factor: 2, scale_window: 1000}, /' \
  tiny.yaml > fp16.yaml
grep -q 4294967296 fp16.yaml || fail "fp16.yaml has no loss scale"
"$BIN" train --config fp16.yaml --set model.model_config.compute_dtype=float16 --set runner_config.train_steps=1 \
  > c6d.txt 2>&1 || { cat c6d.txt; fail "fp16 overflow run"; }
grep -q "grad_norm: overflow, .*(overflow, step skipped)" c6d.txt || fail "no overflow line: $(grep 'step:\[' c6d.txt)"
! grep -qi "nan" <(grep 'step:\[' c6d.txt) || fail "the overflow line shows NaN: $(grep 'step:\[' c6d.txt)"
grep '"loss"' out/metrics.jsonl | grep -q '"grad_norm":null.*"skipped":true' || fail "metrics.jsonl: $(cat out/metrics.jsonl)"

# 6. `config` prints the resolved tree.
"$BIN" config --config tiny.yaml > resolved.yaml; grep -q "expert_parallel: 1" resolved.yaml || fail "config did not print defaults"
echo "train_cli: all checks passed"
