#!/usr/bin/env bash
# A run ends cleanly with a checkpoint (the Resilience issue's item 3), on 2 ranks (dp2, asynchronous
# saves every 4 steps, dropout on), each case held to one uninterrupted reference run:
#  (a) SIGTERM to the ranks mid-run: status 143, a checkpoint of the last finished step K committed
#      (the save under way finished first); resuming from it gives the reference's losses of steps
#      K+1..200 and its final weights, bit for bit.
#  (b) runner_config.exit_interval: 7: status 0 after step 7 with its checkpoint; the resume is bitwise too.
#  (c) runner_config.exit_duration_in_mins (a few milliseconds): status 0 after the step that outlasts it,
#      with its checkpoint.
#  (d) two SIGTERMs in quick succession: the run stops (143), a rank says the second stopped it at once,
#      and the newest committed checkpoint still reads back whole (its CRCs; `gridformer convert` reads
#      every tensor).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
KILL_AT_EXIT=1
random_gpt2 tiny.yaml seed=3 steps=200 batch=4 lr_end= optimizer= samples=400 top="parallel_config: {data_parallel: 2}" \
  ckpt="prefix: tiny, save_checkpoint_steps: 4, keep_checkpoint_max: 2, async_save: True"
# start OUT [--set ...]: 2 ranks into OUT in the background (mpirun's pid in $job), the output in OUT.log, the final
# weights in OUT/weights.safetensors (as lib.sh's layout_train 2 OUT tiny.yaml writes them in the foreground)
start() {
  local out=$1; shift
  mpirun -np 2 --oversubscribe "$BIN" train --config tiny.yaml --set "output_dir=$out" \
    --save-weights "$out/weights.safetensors" "$@" > "$out.log" 2>&1 &
  job=$!
}
last_step() { "$PY" -c 'import json,sys; print(max([j["step"] for j in map(json.loads, open(sys.argv[1])) if "loss" in j] or [0]))' "$1/metrics.jsonl" 2>/dev/null || echo 0; }
losses_after() {  # METRICS K: "step loss grad_norm" of the steps after K, as printed
  "$PY" -c 'import json,sys; [print(j["step"], repr(j["loss"]), repr(j["grad_norm"])) for j in map(json.loads, open(sys.argv[1])) if "loss" in j and j["step"] > int(sys.argv[2])]' "$1" "$2"
}
# signal_ranks OUT SIG: OUT's ranks frozen (SIGSTOP) at once, so the run cannot finish meanwhile,
# sent SIG, and let go on: they see it at the next step boundary.
signal_ranks() {
  local pids; pids=$(ranks_of "$1")
  [ -n "$pids" ] || fail "($1) no rank to signal: the run ended before step 20 was seen"
  kill -STOP $pids; kill -"$2" $pids; kill -CONT $pids
}
# resume_and_compare CASE K: trains from CASE's checkpoint of step K to 200; bitwise against the reference
resume_and_compare() {
  local c=$1 k=$2
  [[ "$(cat "$c/checkpoint/latest")" == tiny-*_"$k" ]] || fail "($c) latest is $(cat "$c/checkpoint/latest"), not step $k's"
  layout_train 2 "$c.resumed" tiny.yaml --set resume_training=True --set "load_checkpoint=$c/checkpoint"
  [ "$(losses_after "$c.resumed/metrics.jsonl" "$k")" = "$(losses_after ref/metrics.jsonl "$k")" ] \
    || { diff <(losses_after "$c.resumed/metrics.jsonl" "$k") <(losses_after ref/metrics.jsonl "$k") | head; fail "($c) resumed losses differ"; }
  [ "$(losses_after "$c.resumed/metrics.jsonl" "$k" | wc -l)" -eq $((200 - k)) ] || fail "($c) the resume did not train steps $((k + 1))-200"
  cmp -s "$c.resumed/weights.safetensors" ref/weights.safetensors || fail "($c) resumed final weights differ from the reference"
}

layout_train 2 ref tiny.yaml

# (a) SIGTERM to both ranks (as scripts/run_distribute.sh sends it) once step 20 is done.
start a
wait_step a 20
signal_ranks a TERM
status=0; wait "$job" || status=$?
[ "$status" -eq 143 ] || { tail -20 a.log; fail "(a) SIGTERM gave status $status, expected 143"; }
line=$(grep -m1 "stopped by signal 15" a.log) || { tail -20 a.log; fail "(a) no stop line"; }
k=$(echo "$line" | sed -n 's/.*checkpoint .* of step \([0-9]*\) committed.*/\1/p')
[ -n "$k" ] || fail "(a) the stop line names no committed checkpoint: $line"
[ "$k" -eq "$(last_step a)" ] || fail "(a) checkpoint of step $k, but the run's last step is $(last_step a)"
resume_and_compare a "$k"
echo "(a) SIGTERM after step $k: status 143, checkpoint $(cat a/checkpoint/latest) committed, resumed bitwise to step 200"

# (b) exit_interval: 7 (a step the every-4-steps saves do not cover).
layout_train 2 b tiny.yaml --set runner_config.exit_interval=7
grep -q "exiting after step 7 of 200 (runner_config.exit_interval: 7); checkpoint .* of step 7 committed" b.log \
  || { tail -5 b.log; fail "(b) no exit line"; }
[ "$(last_step b)" -eq 7 ] || fail "(b) trained to step $(last_step b)"
resume_and_compare b 7
echo "(b) exit_interval 7: status 0 after step 7, checkpoint committed, resumed bitwise to step 200"

# (c) exit_duration_in_mins: 0.0001 (6 ms): a few steps at most (how many depends on the machine).
layout_train 2 c tiny.yaml --set runner_config.exit_duration_in_mins=0.0001
line=$(grep -m1 "exiting after step [0-9]* of 200 (runner_config.exit_duration_in_mins: 0.0001; .* minutes of training); checkpoint .* of step [0-9]* committed" c.log) \
  || { tail -5 c.log; fail "(c) no exit line"; }
k=$(echo "$line" | sed -n 's/.*exiting after step \([0-9]*\) of 200.*/\1/p')
[ "$k" -lt 200 ] && [ "$(last_step c)" -eq "$k" ] || fail "(c) exited after step $k, the metrics end at step $(last_step c)"
[[ "$(cat c/checkpoint/latest)" == tiny-*_"$k" ]] || fail "(c) latest is $(cat c/checkpoint/latest), not step $k's"
echo "(c) exit_duration_in_mins: status 0 after step $k with its checkpoint"

# (d) two SIGTERMs 50 ms apart: the second stops at once (said on stderr); what is committed still reads whole.
# A model of 8 layers of 256 (6.3M parameters) makes the first signal's work (the step, the checkpoint under way,
# the final one) outlast 50 ms, so that the second meets a live run: (d) cannot quietly become (a).
start d --set model.model_config.hidden_size=256 --set model.model_config.num_layers=8
wait_step d 20
signal_ranks d TERM
sleep 0.05
for p in $(ranks_of d); do kill -TERM "$p" 2>/dev/null || true; done  # the second, unless the first was done
status=0; wait "$job" || status=$?
[ "$status" -eq 143 ] || { tail -20 d.log; fail "(d) status $status, expected 143"; }
grep -q "gridformer: a second stop signal: stopping at once" d.log \
  || { tail -20 d.log; fail "(d) no rank says it met the second signal: the run ended on the first, as (a)"; }
"$BIN" convert --from d/checkpoint --to d.safetensors > d.convert.log 2>&1 \
  || { cat d.convert.log; fail "(d) the latest committed checkpoint ($(cat d/checkpoint/latest)) does not read back"; }
echo "(d) two SIGTERMs: status 143; the latest committed checkpoint ($(cat d/checkpoint/latest)) reads back whole"
