#!/usr/bin/env bash
# GPT-2 MoE (4 GELU experts with biases, top-2) and Mixtral (4 SwiGLU experts, top-2, renormalised,
# grouped-query attention) train the same 20 steps under every expert layout as on one rank, dropless
# and with a capacity that drops tokens: losses within 1e-5 relative at every step, the gathered
# weights (every expert's, whatever rank held it) as compare_runs.py checks them, and at every step
# and MoE layer the same dropped count and assignments and the router losses within 1e-5. Each
# comparison takes the one-rank run on the other fp32 GEMM backend (Eigen's kernels, other
# summation orders in every product) as its floor (compare_runs.py --floor: a weight element whose
# gradient cancels to rounding level is moved by rounding, on one rank too).
# Layouts: ep2 (dp2), ep2 x mp2 + SP (4 ranks), ep4 (dp4), ep2 + ZeRO-1 (dp2), ep2 within dp4 + ZeRO.
# MindSpeed's GPT MoE (GPT-2 blocks with rotary positions and no linear biases) under TP2 EP2 + SP,
# with the alltoall and the allgather dispatchers.
# And the expert-parallel rules stop every rank before any work, naming the keys.
set -euo pipefail
BUILD="$1"; SRC="$2"
BIN="$BUILD/bin/gridformer"
command -v mpirun >/dev/null || { echo "FAIL: mpirun missing (openmpi-bin)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
GLOBAL_BATCH=8
common() {
  cat <<YAML
seed: 11
runner_config: {train_steps: 20}
runner_wrapper: {use_clip_grad: True, max_grad_norm: 0.5}
lr_schedule: {type: cosine, learning_rate: 0.003, lr_end: 0.0003, warmup_steps: 2}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 160}}
callbacks: [{type: MFLossMonitor, per_print_times: 1}]
YAML
}
{ common; cat <<YAML
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 101, seq_length: 16, max_position_embeddings: 16, hidden_size: 32,
                 num_layers: 2, num_heads: 4, hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0}
moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.05, z_loss_factor: 0.001, norm_topk_prob: False}
YAML
} > gpt2_moe.yaml
{ common; cat <<YAML
model:
  arch: {type: MixtralForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 101, seq_length: 16, hidden_size: 32, num_layers: 2, num_heads: 4,
                 n_kv_heads: 2, intermediate_size: 48, theta: 1000000.0, rms_norm_eps: 1.0e-5}
moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: True}
YAML
} > mixtral.yaml

# train MODEL CAP NAME DP MP EP [extra --set ...]
train() {
  local model=$1 cap=$2 name=$3 dp=$4 mp=$5 ep=$6; shift 6
  local np=$((dp * mp))
  local cmd=("$BIN" train --config "$model.yaml" --set output_dir="$name" --save-weights "$name/weights.safetensors"
             --set parallel_config.data_parallel="$dp" --set parallel_config.model_parallel="$mp"
             --set parallel_config.expert_parallel="$ep" --set moe_config.capacity_factor="$cap"
             --set runner_config.batch_size=$((GLOBAL_BATCH / dp)) "$@")
  if [ "$np" -eq 1 ]; then "${cmd[@]}" > "$name.log" 2>&1 || { tail -30 "$name.log"; echo "FAIL: $name"; exit 1; }
  else mpirun -np "$np" --oversubscribe "${cmd[@]}" > "$name.log" 2>&1 || { tail -30 "$name.log"; echo "FAIL: $name"; exit 1; }
  fi
}
SP="--set parallel_config.use_seq_parallel=True"
ZERO="--set parallel.enable_parallel_optimizer=True"

for model in gpt2_moe mixtral; do
  # capacity 0: dropless; 1.0: each expert takes ceil(16 * 2 / 4) = 8 of a sequence's 32 assignments.
  for cap in 0 1.0; do
    p="${model}_cap${cap}"
    train "$model" "$cap" "${p}_one" 1 1 1
    GF_GEMM=eigen train "$model" "$cap" "${p}_one_eigen" 1 1 1  # the floor: one rank against itself
    train "$model" "$cap" "${p}_ep2" 2 1 2
    train "$model" "$cap" "${p}_ep2_mp2_sp" 2 2 2 $SP
    train "$model" "$cap" "${p}_ep4" 4 1 4
    train "$model" "$cap" "${p}_ep2_zero" 2 1 2 $ZERO
    train "$model" "$cap" "${p}_dp4_ep2_zero" 4 1 2 $ZERO
    python3 "$SRC/tests/integration/compare_runs.py" "${p}_one" --floor="${p}_one_eigen" "${p}_ep2" "${p}_ep2_mp2_sp" "${p}_ep4" \
      "${p}_ep2_zero" "${p}_dp4_ep2_zero"
    if [ "$cap" != 0 ]; then
      grep -q '"dropped":[1-9]' "${p}_one/metrics.jsonl" || { echo "FAIL: $p dropped no tokens"; exit 1; }
    fi
  done
done

# MindSpeed's GPT MoE on GPT-2 blocks: rotary positions, no linear biases, dropless, under its
# layout (TP2 EP2 + SP) and with the allgather dispatcher.
{ common; cat <<YAML
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 101, seq_length: 16, max_position_embeddings: 16, hidden_size: 32,
                 num_layers: 2, num_heads: 4, hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0,
                 position_embedding_type: rope, add_bias_linear: False}
moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.01, norm_topk_prob: True}
YAML
} > mindspeed.yaml
train mindspeed 0 mindspeed_one 1 1 1
GF_GEMM=eigen train mindspeed 0 mindspeed_one_eigen 1 1 1
train mindspeed 0 mindspeed_ep2_mp2_sp 2 2 2 $SP
train mindspeed 0 mindspeed_ep2_mp2_sp_allgather 2 2 2 $SP --set moe_config.token_dispatcher=allgather
train mindspeed 0 mindspeed_ep4_allgather 4 1 4 --set moe_config.token_dispatcher=allgather
python3 "$SRC/tests/integration/compare_runs.py" mindspeed_one --floor=mindspeed_one_eigen mindspeed_ep2_mp2_sp mindspeed_ep2_mp2_sp_allgather \
  mindspeed_ep4_allgather
grep -q "wpe.weight" <(python3 -c "import json,struct,sys; b=open(sys.argv[1],'rb').read(); print(list(json.loads(b[8:8+struct.unpack('<Q',b[:8])[0]])))" mindspeed_one/weights.safetensors) \
  && { echo "FAIL: the rope model has a learned position table"; exit 1; }

# The expert-parallel rules, on every rank before any work.
refused() {  # NAME NP PATTERN [--set ...]
  local name=$1 np=$2 pattern=$3; shift 3
  set +e
  mpirun -np "$np" --oversubscribe "$BIN" train --config gpt2_moe.yaml --set output_dir="$name" "$@" > "$name.log" 2>&1
  local status=$?
  set -e
  [ "$status" -ne 0 ] || { echo "FAIL: $name ran"; exit 1; }
  grep -q -- "$pattern" "$name.log" || { tail -20 "$name.log"; echo "FAIL: $name's message does not name $pattern"; exit 1; }
  [ -e "$name/metrics.jsonl" ] && { echo "FAIL: $name started training"; exit 1; }
  echo "$name refused: $(grep -m1 -- "$pattern" "$name.log" | cut -c1-220)"
}
refused ep3_of_4_experts 3 "expert_parallel" --set parallel_config.data_parallel=3 --set parallel_config.expert_parallel=3
refused ep2_of_dp1 2 "expert_parallel" --set parallel_config.model_parallel=2 --set parallel_config.expert_parallel=2
refused top5_of_4 1 "num_experts_chosen" --set moe_config.num_experts_chosen=5
echo "PASS"
