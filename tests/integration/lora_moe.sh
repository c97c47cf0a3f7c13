#!/usr/bin/env bash
# LoRA on a Mixture-of-Experts model (a tiny Mixtral): the attention's projections carry PEFT's adapters; the router,
# the experts and the rest of the base are frozen (tests/models/lora_golden_test.cpp's mixtral_lora checks ten steps
# against PyTorch's transcription of PEFT over the same model). Here the layouts: expert parallel 2 (over dp2), ep2 x
# mp2 + sequence parallel, pp2 and ZeRO-3 at dp2 train the same 10 steps as one rank (losses within 1e-5 at every
# step, the adapters as compare_runs.py holds a layout's), and so does a Qwen2-MoE (a gated shared expert, frozen) at
# ep2; the checkpoint holds the adapters alone, and a target on the experts, the router or the shared expert is
# refused, naming it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_llama lora_moe.yaml arch=MixtralForCausalLM hidden=32 steps=10 batch=4 samples=64 layers=2 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" lr=0.01 lr_end=0.001 \
  ckpt="prefix: lora, save_checkpoint_steps: 10" \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: True}" \
  model="pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, k_proj, v_proj, o_proj]}"

# ltrain NAME RANKS [--set ...]: the adapters after the last step in NAME/weights.safetensors.
ltrain() {
  local name=$1 np=$2; shift 2
  if [ "$np" -eq 1 ]; then train "$name" lora_moe.yaml --set output_dir="$name" --save-weights "$name/weights.safetensors" "$@"
  else mpi_train "$np" "$name" lora_moe.yaml --save-weights "$name/weights.safetensors" "$@"
  fi
}
DP2="--set parallel_config.data_parallel=2 --set runner_config.batch_size=2"
ltrain one 1
grep -q "LoRA: .* adapter parameters train" one.log || fail "one: no LoRA line in the log"
ltrain ep2 2 $DP2 --set parallel_config.expert_parallel=2
ltrain ep2_mp2_sp 4 $DP2 --set parallel_config.expert_parallel=2 --set parallel_config.model_parallel=2 \
  --set parallel_config.use_seq_parallel=True
ltrain pp2 2 --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2
ltrain z3 2 $DP2 --set parallel.zero_stage=3
"$PY" "$SRC/tests/integration/compare_runs.py" one ep2 ep2_mp2_sp pp2 z3 || fail "a layout is not one rank's"

# Qwen2-MoE: a gated shared expert beside the routed ones, frozen too; one rank and ep2 alike.
random_llama lora_qmoe.yaml arch=Qwen2MoeForCausalLM hidden=32 steps=10 batch=4 samples=64 layers=2 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" lr=0.01 lr_end=0.001 \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: False, moe_shared_expert_intermediate_size: 48, use_shared_expert_gating: True}" \
  model="qkv_has_bias: True, pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, k_proj, v_proj, o_proj]}"
train qmoe_one lora_qmoe.yaml --set output_dir=qmoe_one --save-weights qmoe_one/weights.safetensors
mpi_train 2 qmoe_ep2 lora_qmoe.yaml --save-weights qmoe_ep2/weights.safetensors $DP2 --set parallel_config.expert_parallel=2
"$PY" "$SRC/tests/integration/compare_runs.py" qmoe_one qmoe_ep2 || fail "Qwen2-MoE's LoRA at ep2 is not one rank's"
mpi_refused 1 shared_target "mlp.shared_expert.gate_proj" lora_qmoe.yaml \
  --set 'model.model_config.pet_config={peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, gate_proj]}'

# The checkpoint: adapters (and their moments) alone.
"$PY" - one/checkpoint/lora-1_10 <<'EOF2' || fail "the LoRA checkpoint of the MoE model holds more than its adapters"
import glob, json, os, sys
names = set()
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    names.update(json.load(open(f)).get("tensors", {}))
assert names, "no tensors listed"
bad = [n for n in names if ".lora_A." not in n and ".lora_B." not in n]
assert not bad, f"not adapters: {bad[:5]}"
assert not any("block_sparse_moe" in n for n in names), "an adapter on the experts or router"
print(f"ok: {len(names)} tensors in the checkpoint, all the attention's adapters and their moments")
EOF2

# Targets on the experts (PEFT's w1) or the router (gate) carry no adapter here: refused, naming the module.
mpi_refused 1 experts_target "block_sparse_moe.experts.0.w1" lora_moe.yaml \
  --set 'model.model_config.pet_config={peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, w1]}'
mpi_refused 1 router_target "block_sparse_moe.gate" lora_moe.yaml \
  --set 'model.model_config.pet_config={peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [gate]}'
