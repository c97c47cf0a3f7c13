#!/usr/bin/env bash
# A layout that cannot run stops every rank before any work with one message from rank 0 naming
# the keys and a layout that fits; the exit status is 2 (README "Exit status"). One case per rule.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
bare_gpt2 m.yaml seq=18 hidden=48 heads=6
# expect NP "message" --set ...
expect() {
  local np=$1 msg=$2 fit=$3; shift 3
  run out timeout 60 mpirun -np "$np" --oversubscribe "$BIN" train --config m.yaml "$@"
  [ "$STATUS" -ne 124 ] || fail "$* on $np ranks hung"
  [ "$STATUS" -eq 2 ] || fail "$* on $np ranks: exit status $STATUS, expected 2: $(cat out.log)"
  grep -qF -- "$msg" out.log || fail "$* on $np ranks: no '$msg' in: $(cat out.log)"
  grep -qF -- "$fit" out.log || fail "$* on $np ranks: no '$fit' in: $(cat out.log)"
  [ "$(grep -c 'does not fit' out.log)" -eq 1 ] || fail "$*: the message is not printed exactly once: $(cat out.log)"
  ! grep -q "step:\[" out.log || fail "$*: training started"
  echo "ok: $np ranks, $*"
}
expect 4 "\`parallel_config.data_parallel\` (2) x \`model_parallel\` (1) x \`pipeline_stage\` (1) = 2, but 4 rank(s)" \
  "a layout that fits 4 rank(s): parallel_config: {data_parallel: 4, model_parallel: 1, pipeline_stage: 1}" \
  --set parallel_config.data_parallel=2
expect 4 "\`model.model_config.num_heads\` (6) is not divisible by \`parallel_config.model_parallel\` (4)" \
  "{data_parallel: 2, model_parallel: 2, pipeline_stage: 1}" --set parallel_config.model_parallel=4
expect 5 "\`model.model_config.hidden_size\` (48) is not divisible by \`parallel_config.model_parallel\` (5)" \
  "{data_parallel: 5, model_parallel: 1, pipeline_stage: 1}" --set parallel_config.model_parallel=5
expect 4 "\`model.model_config.seq_length\` (18) is not divisible by \`parallel_config.model_parallel\` (4)" \
  "{data_parallel: 2, model_parallel: 2, pipeline_stage: 1}" --set parallel_config.model_parallel=4 \
  --set model.model_config.num_heads=4 --set parallel_config.use_seq_parallel=True
# Pipeline parallelism: every stage needs a layer and a micro-batch; the suggestion keeps the stages where they fit.
expect 2 "\`model.model_config.num_layers\` (1) is fewer than the \`parallel_config.pipeline_stage\` (2) stages" \
  "{data_parallel: 2, model_parallel: 1, pipeline_stage: 1}" \
  --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2
expect 2 "\`parallel_config.micro_batch_num\` (1) is less than \`parallel_config.pipeline_stage\` (2): every stage needs a micro-batch of its own in flight; use micro_batch_num: 2" \
  "{data_parallel: 1, model_parallel: 1, pipeline_stage: 2}" \
  --set parallel_config.pipeline_stage=2 --set model.model_config.num_layers=2
expect 4 "\`parallel.pipeline_config.pipeline_scheduler: zero_bubble_h1\` with \`recompute_config.recompute: True\`" \
  "{data_parallel: 2, model_parallel: 1, pipeline_stage: 2}" --set parallel_config.pipeline_stage=2 \
  --set parallel_config.data_parallel=2 --set parallel_config.micro_batch_num=2 --set model.model_config.num_layers=2 \
  --set parallel.pipeline_config.pipeline_scheduler=zbh1 --set recompute_config.recompute=True
# Expert parallelism: a MoE model whose experts split over expert_parallel ranks carved from data parallel.
expect 2 "\`parallel_config.expert_parallel: 2\` with \`moe_config.expert_num: 1\`: expert parallelism splits the experts" \
  "{data_parallel: 2, model_parallel: 1, pipeline_stage: 1, expert_parallel: 1}" \
  --set parallel_config.data_parallel=2 --set parallel_config.expert_parallel=2
expect 2 "\`moe_config.expert_num\` (3) is not divisible by \`parallel_config.expert_parallel\` (2)" \
  "{data_parallel: 2, model_parallel: 1, pipeline_stage: 1, expert_parallel: 1}" \
  --set moe_config.expert_num=3 --set parallel_config.data_parallel=2 --set parallel_config.expert_parallel=2
expect 3 "\`parallel_config.data_parallel\` (3) is not divisible by \`parallel_config.expert_parallel\` (2): expert parallelism is carved from data parallelism" \
  "{data_parallel: 3, model_parallel: 1, pipeline_stage: 1, expert_parallel: 1}" \
  --set moe_config.expert_num=4 --set parallel_config.data_parallel=3 --set parallel_config.expert_parallel=2
echo PASS
