#!/usr/bin/env bash
# The same 10 steps (dropout on) on one rank with batch 4 and on two data-parallel ranks with
# batch 2 each under mpirun: the global batch holds the same samples, so the losses agree within
# 1e-5 relative at every step.
set -euo pipefail
BUILD="$1"; SRC="$2"
BIN="$BUILD/bin/gridformer"
command -v mpirun >/dev/null || { echo "FAIL: mpirun missing (openmpi-bin)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
cat > dp.yaml <<'YAML'
seed: 11
runner_config: {train_steps: 10}
runner_wrapper: {use_clip_grad: True, max_grad_norm: 0.5}
lr_schedule: {type: cosine, learning_rate: 0.003, lr_end: 0.0003, warmup_steps: 2}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 16}}
callbacks: [{type: MFLossMonitor, per_print_times: 1}]
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 101, seq_length: 16, hidden_size: 32, num_layers: 2, num_heads: 4,
                 hidden_dropout_rate: 0.1, attention_dropout_rate: 0.1}
YAML
OMP_NUM_THREADS=1 "$BIN" train --config dp.yaml --set output_dir=one --set runner_config.batch_size=4 > one.txt 2>&1 \
  || { cat one.txt; exit 1; }
OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe "$BIN" train --config dp.yaml --set output_dir=two \
  --set runner_config.batch_size=2 --set parallel_config.data_parallel=2 > two.txt 2>&1 || { cat two.txt; exit 1; }
for r in 0 1; do [ -s "two/log/rank_$r/gridformer.log" ] || { echo "FAIL: no log file for rank $r"; exit 1; }; done
python3 - <<'PY'
import json
one = [json.loads(l)["loss"] for l in open("one/metrics.jsonl") if '"loss"' in l]  # step lines, not run_start
two = [json.loads(l)["loss"] for l in open("two/metrics.jsonl") if '"loss"' in l]
assert len(one) == len(two) == 10, (len(one), len(two))
for s, (a, b) in enumerate(zip(one, two), 1):
    rel = abs(a - b) / abs(a)
    print(f"step {s:2d}: 1 rank {a:.7f}  2 ranks {b:.7f}  rel {rel:.1e}")
    assert rel <= 1e-5, f"step {s}: {a} vs {b}"
assert one[-1] < one[0]
PY
echo "dp_equivalence: ok"
