#!/usr/bin/env bash
# LoRA on a Mixture-of-Experts model (a tiny Mixtral): the attention's projections carry PEFT's adapters; the router,
# the experts and the rest of the base are frozen (tests/models/lora_golden_test.cpp's mixtral_lora checks ten steps
# against PyTorch's transcription of PEFT over the same model). Here the layouts: expert parallel 2 (over dp2), ep2 x
# mp2 + sequence parallel, pp2 and ZeRO-3 at dp2 train the same 10 steps as one rank (losses within 1e-5 at every
# step, the adapters as compare_runs.py holds a layout's), and so do a Qwen2-MoE (a gated shared expert, frozen) and
# a GPT-2 MoE (biased experts) at ep2; the checkpoint holds the adapters alone; over a trained base, generation with the adapters gives the merged
# model's tokens and the PEFT export has PEFT's keys; lora_dropout on a router's adapter is refused, naming it. Adapters on the experts themselves: tests/integration/lora_experts.sh;
# on the routers and shared experts: tests/integration/lora_router.sh.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_llama lora_moe.yaml arch=MixtralForCausalLM hidden=32 steps=10 batch=4 samples=64 layers=2 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" lr=0.01 lr_end=0.001 \
  ckpt="prefix: lora, save_checkpoint_steps: 10" \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: True}" \
  model="pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, k_proj, v_proj, o_proj]}"

DP2="--set parallel_config.data_parallel=2 --set runner_config.batch_size=2"
layout_train 1 one lora_moe.yaml
grep -q "LoRA: .* adapter parameters train" one.log || fail "one: no LoRA line in the log"
layout_train 2 ep2 lora_moe.yaml $DP2 --set parallel_config.expert_parallel=2
layout_train 4 ep2_mp2_sp lora_moe.yaml $DP2 --set parallel_config.expert_parallel=2 --set parallel_config.model_parallel=2 \
  --set parallel_config.use_seq_parallel=True
layout_train 2 pp2 lora_moe.yaml --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2
layout_train 2 z3 lora_moe.yaml $DP2 --set parallel.zero_stage=3
"$PY" "$SRC/tests/integration/compare_runs.py" one ep2 ep2_mp2_sp pp2 z3 || fail "a layout is not one rank's"

# Qwen2-MoE: a gated shared expert beside the routed ones, frozen too; one rank and ep2 alike.
random_llama lora_qmoe.yaml arch=Qwen2MoeForCausalLM hidden=32 steps=10 batch=4 samples=64 layers=2 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" lr=0.01 lr_end=0.001 \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: False, moe_shared_expert_intermediate_size: 48, use_shared_expert_gating: True}" \
  model="qkv_has_bias: True, pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, k_proj, v_proj, o_proj]}"
train qmoe_one lora_qmoe.yaml --set output_dir=qmoe_one --save-weights qmoe_one/weights.safetensors
mpi_train 2 qmoe_ep2 lora_qmoe.yaml --save-weights qmoe_ep2/weights.safetensors $DP2 --set parallel_config.expert_parallel=2
"$PY" "$SRC/tests/integration/compare_runs.py" qmoe_one qmoe_ep2 || fail "Qwen2-MoE's LoRA at ep2 is not one rank's"

# GPT-2 MoE: experts with biases, frozen too; its attention's c_attn / c_proj adapted (a regex: the experts have a
# c_proj of their own); one rank and ep2 alike.
random_gpt2 lora_g2moe.yaml steps=10 batch=4 samples=64 lr=0.01 lr_end=0.001 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.05, norm_topk_prob: False}" \
  model="hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0, pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: '.*attn\\.(c_attn|c_proj)'}"
train g2moe_one lora_g2moe.yaml --set output_dir=g2moe_one --save-weights g2moe_one/weights.safetensors
mpi_train 2 g2moe_ep2 lora_g2moe.yaml --save-weights g2moe_ep2/weights.safetensors $DP2 --set parallel_config.expert_parallel=2
"$PY" "$SRC/tests/integration/compare_runs.py" g2moe_one g2moe_ep2 || fail "GPT-2 MoE's LoRA at ep2 is not one rank's"

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

# Over a trained base: generation with the adapters (unmerged) gives the tokens of the merged model (convert
# --merge-lora, the experts and router copied as they are), not the base's; the PEFT export holds the attention's
# adapters under PEFT's keys.
lora_on_base lora_moe.yaml
"$PY" - peft <<'EOF2' || fail "the MoE LoRA's PEFT directory"
import json, struct, sys
d = sys.argv[1]
raw = open(d + "/adapter_model.safetensors", "rb").read()
keys = set(json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])) - {"__metadata__"}
want = {f"base_model.model.model.layers.{l}.self_attn.{m}.lora_{ab}.weight"
        for l in range(2) for m in ("q_proj", "k_proj", "v_proj", "o_proj") for ab in "AB"}
assert keys == want, sorted(keys ^ want)[:4]
c = json.load(open(d + "/adapter_config.json"))
assert set(c["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj"} and c["r"] == 4, c
print(f"ok: PEFT's directory: {len(keys)} adapters under PEFT's keys, none on the experts or router")
EOF2
ok "MoE LoRA: predict with the adapters = the merged model's tokens (not the base's); PEFT's keys"

# The router's adapter with lora_dropout: refused, naming the module (adapters on routers and shared experts train
# in tests/integration/lora_router.sh).
mpi_refused 1 router_dropout "with an adapter on the router model.layers.0.block_sparse_moe.gate" lora_moe.yaml \
  --set 'model.model_config.pet_config={peft_type: LORA, r: 4, lora_alpha: 8, lora_dropout: 0.1, target_modules: [gate]}'
