#!/usr/bin/env bash
# The step timeline of `profile: True` (runner/report/profiler.h), checked by tools/check_trace.py: the Trace
# Event Format, nesting, every rank present, steps 2-3 and only those, each layer's forward and
# backward, the collectives with their bytes, the pipeline actions, memory counters, the children of
# each step within 5% of it, and the trace against metrics.jsonl's per_step_time. Runs:
#   1. one rank, with evaluation and a checkpoint inside the profiled steps (excluded time);
#   2. dp2 and 3. mp2 (2 ranks): data-parallel bucket all-reduces, tensor-parallel collectives;
#   4. pp2 (1F1B) and 5. pp2 zero-bubble (the backward's input and weight passes apart);
#   6. Mixtral ep2: the MoE all-to-alls;
#   7. init_start_profile: from step 1; 8. profile off: no profile directory, no trace line;
#   9. profile_ops: a span per op inside the layers' spans (bench/step_breakdown.py reads them);
# and check_trace.py must refuse doctored traces (a step missing, a partial overlap, a rank missing,
# a child removed, an interval opened 5 ms before its step with no preemption), so that it can fail.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
check() { "$PY" "$SRC/tools/check_trace.py" "$@"; }
cli_gpt2 tiny.yaml steps=4 samples=64 seq=64 hidden=128 layers=4 \
  top=$'profile: True\nprofile_start_step: 2\nprofile_stop_step: 3\nprofile_communication: True\nprofile_memory: True'

# 1. One rank; evaluation after step 2 and a checkpoint after step 2 fall inside step 3's interval.
train_on 1 one tiny.yaml --set do_eval=True --set eval_step_interval=2 --set eval_dataset.eval_iters=1 \
  --set 'callbacks=[{type: MFLossMonitor, per_print_times: 1}, {type: CheckpointMonitor, save_checkpoint_steps: 2, keep_checkpoint_max: 1}]'
grep -q "profile: steps 2-3: [0-9]* events of rank 0 written to one/profile/rank_0/trace.json" one.log \
  || fail "no log line for rank 0's trace: $(grep profile one.log)"
grep -q "profile: steps 2-3: [0-9]* events of 1 ranks merged into one/profile/trace.json" one.log \
  || fail "no log line for the merged trace"
check one --ranks 1 --steps 2 3 --layers 4 --clip --memory || fail "run 1's trace"
"$PY" - one/profile/trace.json <<'PY' || fail "run 1: no excluded eval and checkpoint spans"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
ex = {e["cat"] for e in ev if e.get("ph") == "X" and e["args"].get("excluded")}
assert ex == {"eval", "checkpoint"}, ex
PY

# 2, 3. Two ranks: dp2 (the gradient buckets' all-reduces), mp2 (tensor-parallel collectives).
train_on 2 dp2 tiny.yaml --set parallel_config.data_parallel=2 --set runner_config.batch_size=2
check dp2 --ranks 2 --steps 2 3 --layers 4 --clip --memory --comm-group dp --comm-group world || fail "dp2's trace"
train_on 2 mp2 tiny.yaml --set parallel_config.model_parallel=2
check mp2 --ranks 2 --steps 2 3 --layers 4 --clip --memory --comm-group tp || fail "mp2's trace"

# 4, 5. Two pipeline stages: 1F1B, then zero-bubble H1 (BackwardInput / BackwardWeight).
PP=(--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=4 --set runner_config.batch_size=1)
train_on 2 pp2 tiny.yaml "${PP[@]}"
check pp2 --ranks 2 --steps 2 3 --layers 4 --clip --memory --pipeline --comm-group pp || fail "pp2's trace"
train_on 2 zb tiny.yaml "${PP[@]}" --set parallel.pipeline_config.pipeline_scheduler=zbh1
check zb --ranks 2 --steps 2 3 --layers 4 --clip --pipeline --split-backward --comm-group pp || fail "zbh1's trace"

# 6. Mixtral, 4 experts over ep2 (dp2): the dispatch all-to-alls.
cat > mixtral.yaml <<'YAML'
seed: 11
output_dir: ./mix
runner_config: {batch_size: 4, train_steps: 3}
runner_wrapper: {use_clip_grad: True, max_grad_norm: 0.5}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 64}}
callbacks: [{type: MFLossMonitor, per_print_times: 1}]
parallel_config: {data_parallel: 2, expert_parallel: 2}
profile: True
profile_start_step: 2
profile_stop_step: 3
profile_communication: True
model:
  arch: {type: MixtralForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 101, seq_length: 64, hidden_size: 64, num_layers: 2, num_heads: 4,
                 n_kv_heads: 2, intermediate_size: 96, theta: 1000000.0, rms_norm_eps: 1.0e-5}
moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: True}
YAML
mpi_train 2 mix mixtral.yaml
check mix --ranks 2 --steps 2 3 --layers 2 --clip --all-to-all --comm-group dp || fail "Mixtral ep2's trace"

# 7. init_start_profile: from the first step, whatever profile_start_step says.
train_on 1 init tiny.yaml --set init_start_profile=True --set profile_start_step=3 --set profile_stop_step=2
check init --ranks 1 --steps 1 2 --layers 4 --clip --memory || fail "init_start_profile's trace"

# 8. Off: nothing written, no trace line; the profile_* keys left on are warned about.
train_on 1 off tiny.yaml --set profile=False
[ -e off/profile ] && fail "profile: False wrote off/profile"
grep -q "profile: steps" off.log && fail "profile: False logged a trace line: $(grep 'profile: steps' off.log)"
grep -q "\`profile_communication: True\` without \`profile: True\`: nothing is profiled" off.log \
  || fail "no warning about profile_communication without profile"

# 9. profile_ops: a span per op (GEMMs, attention, norms, elementwise), each inside a layer's, the
# embedding's or the head's span; the trace still passes every check; bench/step_breakdown.py's
# exclusive times cover the steps; without profile_ops (run 1) no op span is written.
train_on 1 ops tiny.yaml --set profile_ops=True
grep -q "profile: steps 2-3 will be recorded, with communication, with memory counters, with a span per op" ops.log \
  || fail "profile_ops: no log line naming it: $(grep 'profile: steps' ops.log)"
check ops --ranks 1 --steps 2 3 --layers 4 --clip --memory || fail "profile_ops' trace"
"$PY" - ops/profile/trace.json one/profile/trace.json "$SRC/bench" <<'PY' || fail "profile_ops' spans"
import json, sys
sys.path.insert(0, sys.argv[3])
import step_breakdown as sb
OPS = {"gemm", "attention", "norm", "elementwise"}
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
assert OPS <= {e["cat"] for e in ev}, {e["cat"] for e in ev}
holders = [e for e in ev if e["cat"] == "compute"]
for e in ev:
    if e["cat"] in OPS:
        assert any(h["ts"] <= e["ts"] and e["ts"] + e["dur"] <= h["ts"] + h["dur"] + 1e-3 for h in holders), e
excl, total, n = sb.breakdown(sys.argv[1])
assert n == 2 and total > 0, (n, total)
assert abs(sum(excl.values()) - total) <= 1e-6 * total + 1.0, (excl, total)
assert excl.get("GEMM", 0) > 0 and excl.get("attention", 0) > 0 and excl.get("norms", 0) > 0, excl
off = {e["cat"] for e in json.load(open(sys.argv[2]))["traceEvents"] if e.get("ph") == "X"}
assert not off & OPS, off
print("profile_ops: " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(excl.items(), key=lambda kv: -kv[1])))
PY

# The checker refuses what it must: doctored copies of run 2's trace.
doctor() {  # doctor NAME PYTHON-EXPRESSION-ON-EVENTS: a copy of dp2 with the merged file's events changed
  rm -rf "bad_$1"; cp -r dp2 "bad_$1"
  "$PY" - "bad_$1/profile/trace.json" "$2" <<'PY'
import json, sys
path, expr = sys.argv[1], sys.argv[2]
doc = json.load(open(path))
ev = doc["traceEvents"]
doc["traceEvents"] = eval(expr, {"ev": ev})
json.dump(doc, open(path, "w"))
PY
  if check "bad_$1" --ranks 2 --steps 2 3 --layers 4 --clip --memory --comm-group dp > "bad_$1.txt"; then
    fail "check_trace.py accepted a trace with $1"
  fi
  grep -q "$3" "bad_$1.txt" || fail "check_trace.py refused $1 for another reason: $(cat "bad_$1.txt")"
}
doctor no_step3 "[e for e in ev if not (e.get('pid') == 1 and e.get('name') == 'step 3')]" "step spans \[2\], expected \[2, 3\]"
doctor overlap "[dict(e, dur=e['dur'] * 50) if e.get('name') == 'layer 1 fwd' else e for e in ev]" "without nesting"
doctor no_rank1 "[e for e in ev if e.get('pid') != 1]" "expected \[0, 1\]"
doctor no_optimizer "[e for e in ev if e.get('name') not in ('optimizer', 'data')]" "children sum\|no 'optimizer' span"
doctor no_dur "[{k: v for k, v in e.items() if not (k == 'dur' and e.get('name') == 'data')} for e in ev]" "needs numeric ts and dur"
# Step 3's interval opened earlier by a fifth of step 2's, with no thread times anywhere to show a preemption: step 2's
# spans then cover 80% of its step_ms, unaccounted time, refused. (A fixed shift was not enough: on a loaded machine
# the run's own preemptions, which the thread times excuse, could be larger than it.)
doctor early_interval "(lambda m: [dict(e, ts=e['ts'] - 0.2 * (m[3] - m[2])) if e.get('pid') == 0 and e.get('name') == 'interval start' and e['args']['step'] == 3 else e for e in [dict(e, args={k: v for k, v in e['args'].items() if k not in ('thread_cpu_us', 'preemptions')}) if isinstance(e.get('args'), dict) else e for e in ev]])({e['args']['step']: e['ts'] for e in ev if e.get('pid') == 0 and e.get('name') == 'interval start'})" "more than 5% unaccounted"
# The time a preemption kept the thread off its CPU before the step's span (wall less thread CPU time, when the
# involuntary switches rose) is the allowance, and only then.
"$PY" - "$SRC/tools" <<'PY' || fail "check_trace.preempted_us"
import sys
sys.path.insert(0, sys.argv[1])
from check_trace import preempted_us
m = {"ts": 1000.0, "args": {"thread_cpu_us": 500.0, "preemptions": 7}}
s = {"ts": 5300.0, "args": {"thread_cpu_us": 800.0, "preemptions": 8}}
assert preempted_us(m, s) == 4000.0, preempted_us(m, s)
assert preempted_us(m, dict(s, args=dict(s["args"], preemptions=7))) == 0.0  # no involuntary switch: no allowance
assert preempted_us({"ts": 1000.0, "args": {}}, s) == 0.0                     # a trace without thread times
assert preempted_us(m, dict(s, args=dict(s["args"], thread_cpu_us=5000.0))) == 0.0  # on the CPU throughout
PY

echo "profile: OK"
