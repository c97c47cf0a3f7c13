#!/usr/bin/env bash
# A Llama (grouped-query attention: 4 heads on 2 key/value heads, RoPE at theta 1e6, RMSNorm,
# SwiGLU, untied head) trains the same 20 steps under every parallel layout as on one rank:
# losses within 1e-5 relative at every step, gathered weights as compare_runs.py checks them.
# Layouts: dp2, mp2, mp2+sp, dp2xmp2+sp+zero, each tensor-parallel one with the vocabulary split
# (vocab_emb_dp False) and replicated; at mp2 each rank holds one of the two key/value heads.
# Full recompute under dp2xmp2+sp gives bitwise the losses and weights of no recompute. And a
# layout that would split a key/value head (mp4 on 2 kv heads) stops before any work, naming it.
set -euo pipefail
BUILD="$1"; SRC="$2"
BIN="$BUILD/bin/gridformer"
command -v mpirun >/dev/null || { echo "FAIL: mpirun missing (openmpi-bin)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
GLOBAL_BATCH=8
cat > llama.yaml <<YAML
seed: 11
runner_config: {train_steps: 20}
runner_wrapper: {use_clip_grad: True, max_grad_norm: 0.5}
lr_schedule: {type: cosine, learning_rate: 0.003, lr_end: 0.0003, warmup_steps: 2}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 160}}
callbacks: [{type: MFLossMonitor, per_print_times: 1}]
model:
  arch: {type: LlamaForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 101, seq_length: 16, hidden_size: 64, num_layers: 2, num_heads: 4,
                 n_kv_heads: 2, intermediate_size: 48, theta: 1000000.0, rms_norm_eps: 1.0e-5}
YAML

# train NAME DP MP [extra --set ...]
train() {
  local name=$1 dp=$2 mp=$3; shift 3
  local np=$((dp * mp))
  local cmd=("$BIN" train --config llama.yaml --set output_dir="$name" --save-weights "$name/weights.safetensors"
             --set parallel_config.data_parallel="$dp" --set parallel_config.model_parallel="$mp"
             --set runner_config.batch_size=$((GLOBAL_BATCH / dp)) "$@")
  if [ "$np" -eq 1 ]; then "${cmd[@]}" > "$name.log" 2>&1 || { tail -30 "$name.log"; echo "FAIL: $name"; exit 1; }
  else mpirun -np "$np" --oversubscribe "${cmd[@]}" > "$name.log" 2>&1 || { tail -30 "$name.log"; echo "FAIL: $name"; exit 1; }
  fi
}
SP="--set parallel_config.use_seq_parallel=True"
ZERO="--set parallel.enable_parallel_optimizer=True"
VP="--set parallel_config.vocab_emb_dp=False"

train one 1 1
train dp2 2 1
for v in rep vp; do
  extra=(); [ "$v" = vp ] && extra=($VP)
  train "mp2_$v" 1 2 "${extra[@]}"
  train "mp2_sp_$v" 1 2 $SP "${extra[@]}"
  train "dp2_mp2_sp_zero_$v" 2 2 $SP $ZERO "${extra[@]}"
done
train dp2_mp2_sp_zero_vp_recompute 2 2 $SP $ZERO $VP --set recompute_config.recompute=True
cmp <(grep -o '"loss":[^,]*' dp2_mp2_sp_zero_vp/metrics.jsonl) <(grep -o '"loss":[^,]*' dp2_mp2_sp_zero_vp_recompute/metrics.jsonl) \
  || { echo "FAIL: recompute changed the losses"; exit 1; }
cmp dp2_mp2_sp_zero_vp/weights.safetensors dp2_mp2_sp_zero_vp_recompute/weights.safetensors \
  || { echo "FAIL: recompute changed the weights"; exit 1; }
echo "dp2_mp2_sp_zero_vp_recompute: losses and weights bitwise equal to dp2_mp2_sp_zero_vp"
python3 "$SRC/tests/integration/compare_runs.py" one dp2 mp2_rep mp2_vp mp2_sp_rep mp2_sp_vp dp2_mp2_sp_zero_rep \
  dp2_mp2_sp_zero_vp

# mp4 would split each of the 2 key/value heads: refused on every rank before any work.
set +e
mpirun -np 4 --oversubscribe "$BIN" train --config llama.yaml --set parallel_config.model_parallel=4 \
  --set output_dir=mp4 > mp4.log 2>&1
status=$?
set -e
[ "$status" -ne 0 ] || { echo "FAIL: mp4 on 2 key/value heads ran"; exit 1; }
grep -q "n_kv_heads" mp4.log || { tail -20 mp4.log; echo "FAIL: mp4's message does not name n_kv_heads"; exit 1; }
[ -e mp4/metrics.jsonl ] && { echo "FAIL: mp4 started training"; exit 1; }
echo "mp4 refused: $(grep -m1 n_kv_heads mp4.log | cut -c1-200)"
echo "PASS"
