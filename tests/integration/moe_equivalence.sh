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
# And the expert-parallel rules stop every rank before any work (status 2), naming the keys.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
# Every run on OpenBLAS (whatever a machine probe would pick), the floor runs on Eigen: the floor
# must differ from the reference in its products' summation orders.
export GF_GEMM=blas
GLOBAL_BATCH=8
NODROP="max_position_embeddings: 16, hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0"
random_gpt2 gpt2_moe.yaml model="$NODROP" \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.05, z_loss_factor: 0.001, norm_topk_prob: False}"
random_llama mixtral.yaml arch=MixtralForCausalLM hidden=32 \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: True}"

# mtrain MODEL CAP NAME DP MP EP [extra --set ...]: lib.sh's layout_train on DP x MP ranks, global batch GLOBAL_BATCH
mtrain() {
  local model=$1 cap=$2 name=$3 dp=$4 mp=$5 ep=$6; shift 6
  layout_train $((dp * mp)) "$name" "$model.yaml" --set parallel_config.data_parallel="$dp" \
    --set parallel_config.model_parallel="$mp" --set parallel_config.expert_parallel="$ep" \
    --set moe_config.capacity_factor="$cap" --set runner_config.batch_size=$((GLOBAL_BATCH / dp)) "$@"
}
SP="--set parallel_config.use_seq_parallel=True"
ZERO="--set parallel.enable_parallel_optimizer=True"

for model in gpt2_moe mixtral; do
  # capacity 0: dropless; 1.0: each expert takes ceil(16 * 2 / 4) = 8 of a sequence's 32 assignments.
  for cap in 0 1.0; do
    p="${model}_cap${cap}"
    mtrain "$model" "$cap" "${p}_one" 1 1 1
    GF_GEMM=eigen mtrain "$model" "$cap" "${p}_one_eigen" 1 1 1  # the floor: one rank against itself
    mtrain "$model" "$cap" "${p}_ep2" 2 1 2
    mtrain "$model" "$cap" "${p}_ep2_mp2_sp" 2 2 2 $SP
    mtrain "$model" "$cap" "${p}_ep4" 4 1 4
    mtrain "$model" "$cap" "${p}_ep2_zero" 2 1 2 $ZERO
    mtrain "$model" "$cap" "${p}_dp4_ep2_zero" 4 1 2 $ZERO
    "$PY" "$SRC/tests/integration/compare_runs.py" "${p}_one" --floor="${p}_one_eigen" "${p}_ep2" "${p}_ep2_mp2_sp" "${p}_ep4" \
      "${p}_ep2_zero" "${p}_dp4_ep2_zero" || fail "$p: an expert layout differs from one rank"
    if [ "$cap" != 0 ]; then
      grep -q '"dropped":[1-9]' "${p}_one/metrics.jsonl" || fail "$p dropped no tokens"
    fi
  done
done

# MindSpeed's GPT MoE on GPT-2 blocks: rotary positions, no linear biases, dropless, under its
# layout (TP2 EP2 + SP) and with the allgather dispatcher.
random_gpt2 mindspeed.yaml model="$NODROP, position_embedding_type: rope, add_bias_linear: False" \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.01, norm_topk_prob: True}"
mtrain mindspeed 0 mindspeed_one 1 1 1
GF_GEMM=eigen mtrain mindspeed 0 mindspeed_one_eigen 1 1 1
mtrain mindspeed 0 mindspeed_ep2_mp2_sp 2 2 2 $SP
mtrain mindspeed 0 mindspeed_ep2_mp2_sp_allgather 2 2 2 $SP --set moe_config.token_dispatcher=allgather
mtrain mindspeed 0 mindspeed_ep4_allgather 4 1 4 --set moe_config.token_dispatcher=allgather
"$PY" "$SRC/tests/integration/compare_runs.py" mindspeed_one --floor=mindspeed_one_eigen mindspeed_ep2_mp2_sp mindspeed_ep2_mp2_sp_allgather \
  mindspeed_ep4_allgather || fail "a MindSpeed layout differs from one rank"
grep -q "wpe.weight" <("$PY" -c "import json,struct,sys; b=open(sys.argv[1],'rb').read(); print(list(json.loads(b[8:8+struct.unpack('<Q',b[:8])[0]])))" mindspeed_one/weights.safetensors) \
  && fail "the rope model has a learned position table"

# The expert-parallel rules, on every rank before any work.
mpi_refused 3 ep3_of_4_experts "expert_parallel" gpt2_moe.yaml --set parallel_config.data_parallel=3 --set parallel_config.expert_parallel=3
mpi_refused 2 ep2_of_dp1 "expert_parallel" gpt2_moe.yaml --set parallel_config.model_parallel=2 --set parallel_config.expert_parallel=2
mpi_refused 1 top5_of_4 "num_experts_chosen" gpt2_moe.yaml --set moe_config.num_experts_chosen=5
echo "PASS"
