#!/usr/bin/env bash
# TensorBoard event files, read by an independent decoder: TensorBoard's published event.proto and
# summary.proto (tests/data/tensorboard_proto/) compiled by protoc for Python, the TFRecord framing
# read and every record's two masked CRC-32Cs checked in Python (tensorboard_check.py). Each scalar
# of metrics.jsonl must be in the run's event file at its step as the float32 of its JSON value:
#   1. a SummaryMonitor without summary_dir: <output_dir>/summary/rank_0, file mode 0640, TensorBoard's
#      file name; step lines every step and evaluations;
#   2. the same config again: a second file beside the first, which is left as it was;
#   3. `--tensorboard-dir` on 2 ranks in 2 pipeline stages with MoE layers: the bubble, each MoE
#      layer's figures and both ranks' peak RSS;
#   4. a run killed with SIGKILL: every line but possibly the last is already in the file.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
umask 022

command -v protoc >/dev/null || fail "protoc missing (scripts/setup.sh installs protobuf-compiler)"
# The decoder needs google.protobuf (Debian's python3-protobuf, for the system Python).
"$PY" -c "import google.protobuf" 2>/dev/null || fail "$PY cannot import google.protobuf (scripts/setup.sh installs python3-protobuf)"
mkdir pb
(cd "$SRC/tests/data/tensorboard_proto" && protoc --python_out="$WORK/pb" tensorboard/compat/proto/*.proto) \
  || fail "protoc cannot compile TensorBoard's .proto files"
# Regular packages, so that an installed tensorboard cannot stand in for the modules just compiled.
touch pb/tensorboard/__init__.py pb/tensorboard/compat/__init__.py pb/tensorboard/compat/proto/__init__.py
check() { "$PY" "$SRC/tests/integration/tensorboard_check.py" "$WORK/pb" "$@"; }

cli_gpt2 tiny.yaml steps=6 samples=64 top=$'do_eval: True\neval_step_interval: 3\neval_dataset: {eval_iters: 1}' \
  callbacks="[{type: MFLossMonitor, per_print_times: 1}, {type: SummaryMonitor}, {type: CheckpointMonitor, save_checkpoint_steps: 4, keep_checkpoint_max: 1}]"

# 1. The SummaryMonitor's default directory, one file.
"$BIN" train --config tiny.yaml > run1.txt 2>&1 || { cat run1.txt; fail "run 1"; }
TB=out/summary/rank_0
files=("$TB"/events.out.tfevents.*)
[ "${#files[@]}" -eq 1 ] && [ -f "${files[0]}" ] || fail "expected one event file in $TB: $(ls -la "$TB" 2>&1)"
first="${files[0]}"
[[ "$(basename "$first")" =~ ^events\.out\.tfevents\.[0-9]{10}\.$(hostname)\.[0-9]+\.0$ ]] \
  || fail "file name $(basename "$first") is not events.out.tfevents.<10-digit time>.<host>.<pid>.0"
[ "$(stat -c %a "$first")" = 640 ] || fail "event file mode $(stat -c %a "$first"), not 640"
grep -q "TensorBoard (callbacks.1 (SummaryMonitor" run1.txt || fail "the log does not say where the events go"
[ "$(grep -c '"loss"' out/metrics.jsonl)" -eq 6 ] || fail "6 step lines expected"
[ "$(grep -c '"eval_loss"' out/metrics.jsonl)" -eq 2 ] || fail "2 evaluation lines expected"
check "$first" out/metrics.jsonl 1 || fail "run 1's event file"
sum1="$(sha256sum "$first")"

# 2. A second run in the same directory: its own file; the first is untouched.
"$BIN" train --config tiny.yaml > run2.txt 2>&1 || { cat run2.txt; fail "run 2"; }
files=("$TB"/events.out.tfevents.*)
[ "${#files[@]}" -eq 2 ] || fail "expected 2 event files after the second run: $(ls "$TB")"
[ "$(sha256sum "$first")" = "$sum1" ] || fail "the second run changed the first run's file"
second=""
for f in "${files[@]}"; do [ "$f" != "$first" ] && second="$f"; done
check "$second" out/metrics.jsonl 2 || fail "run 2's event file"

# 3. --tensorboard-dir on 2 ranks: 2 pipeline stages of a GPT-2 MoE (expert load, bubble, 2 ranks' RSS).
if command -v mpirun >/dev/null; then
  mpirun -np 2 --oversubscribe "$BIN" train --config tiny.yaml --tensorboard-dir "tb dir" --set output_dir=out3 \
    --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2 \
    --set moe_config.expert_num=4 --set moe_config.num_experts_chosen=2 > run3.txt 2>&1 || { tail -30 run3.txt; fail "run 3"; }
  grep -q "callbacks.1.*asks for TensorBoard events in out3/summary/rank_0.*tb dir" run3.txt \
    || fail "no warning that the SummaryMonitor's directory gives way to --tensorboard-dir"
  files=("tb dir"/events.out.tfevents.*)
  [ "${#files[@]}" -eq 1 ] || fail "expected one event file in 'tb dir' (rank 0 only): $(ls "tb dir")"
  [ -e out3/summary ] && fail "the SummaryMonitor's directory was written too"
  grep -q '"bubble"' out3/metrics.jsonl && grep -q '"moe"' out3/metrics.jsonl || fail "no bubble or MoE figures in run 3"
  check "${files[0]}" out3/metrics.jsonl 1 > check3.txt || { cat check3.txt; fail "run 3's event file"; }
  cat check3.txt
  for t in pipeline-bubble moe/expert_load_max_over_mean_layer_1 mem-peak-rss-bytes/rank_1 load_balancing_loss; do
    grep -q "$t" check3.txt || fail "run 3 has no $t"
  done
else
  fail "mpirun missing (openmpi-bin)"
fi

# 4. Killed mid-run: what metrics.jsonl has, the event file has (but possibly its last line).
"$BIN" train --config tiny.yaml --set output_dir=out4 --set runner_config.train_steps=100000 --set do_eval=False \
  > run4.txt 2>&1 &
pid=$!
for _ in $(seq 600); do
  n=0; [ -f out4/metrics.jsonl ] && n="$(grep -c '"loss"' out4/metrics.jsonl || true)"
  [ "$n" -ge 5 ] && break
  sleep 0.1
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
[ "$(grep -c '"loss"' out4/metrics.jsonl)" -ge 5 ] || fail "run 4 logged fewer than 5 steps in 60 s"
check out4/summary/rank_0/events.out.tfevents.* out4/metrics.jsonl 1 --partial || fail "run 4's event file after SIGKILL"

echo "tensorboard: OK"
