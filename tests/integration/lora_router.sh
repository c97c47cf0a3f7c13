#!/usr/bin/env bash
# LoRA on the routers and shared experts of a Mixture-of-Experts model: PEFT's target_modules [q_proj, v_proj, gate,
# gate_proj, up_proj, down_proj] wraps a Qwen2-MoE's every router (mlp.gate), its shared expert's projections
# (mlp.shared_expert.*) and its routed experts' (tests/models/lora_golden_test.cpp's qwen2_moe_lora checks ten steps
# against PyTorch's transcription of PEFT over the same model). Here the layouts train the same 10 steps as one rank
# (compare_runs.py's criteria): dp2, ep2, ep2 x mp2 + sequence parallel (the router's adapter whole on every rank, its
# gradient summed over the tensor group's rows; the shared expert's split as its MLP is), pp2 and ZeRO-3; a Mixtral's
# router (block_sparse_moe.gate) alone at ep2; PEFT's 'all-linear' at ep2 x mp2 + SP. Over a trained base, generation with the adapters gives the merged
# model's tokens (convert --merge-lora into the routers and shared experts), and the PEFT export holds their
# adapters under PEFT's keys.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_llama qx.yaml arch=Qwen2MoeForCausalLM hidden=32 steps=10 batch=4 samples=8 layers=2 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" lr=0.01 lr_end=0.001 \
  ckpt="prefix: lora, save_checkpoint_steps: 10" \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: False, moe_shared_expert_intermediate_size: 48, use_shared_expert_gating: True}" \
  model="qkv_has_bias: True, pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj, gate, gate_proj, up_proj, down_proj]}"

DP2="--set parallel_config.data_parallel=2 --set runner_config.batch_size=2"
EP2="--set parallel_config.expert_parallel=2"
layout_train 1 one qx.yaml
layout_train 2 dp2 qx.yaml $DP2
layout_train 2 ep2 qx.yaml $DP2 $EP2
layout_train 4 ep2_mp2_sp qx.yaml $DP2 $EP2 --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
layout_train 2 pp2 qx.yaml --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2
layout_train 2 z3 qx.yaml $DP2 --set parallel.zero_stage=3
"$PY" "$SRC/tests/integration/compare_runs.py" one dp2 ep2 ep2_mp2_sp pp2 z3 || fail "a layout is not one rank's"
PYTHONPATH="$SRC/tests/integration" "$PY" - one/weights.safetensors <<'PY' || fail "the routers' and shared experts' adapters"
import st_io, sys
t, _ = st_io.read(sys.argv[1])
want = [f"model.layers.{l}.mlp.{m}.lora_B.weight" for l in range(2)
        for m in ("gate", "shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj")]
missing = [k for k in want if k not in t]
assert not missing, missing
assert list(t["model.layers.0.mlp.gate.lora_B.weight"].shape) == [4, 4], t["model.layers.0.mlp.gate.lora_B.weight"].shape
still = [k for k in want if not t[k].any()]
assert not still, f"B's that did not move from zero: {still}"
assert not any("shared_expert_gate" in k for k in t), "an adapter on the shared expert's sigmoid gate"
print(f"ok: {len(want)} router and shared-expert adapters, every B moved from zero")
PY

# PEFT's 'all-linear' (every projection but the head, the shared experts' sigmoid gates among them): ep2 x mp2 + SP as
# one rank (the gates' adapters whole on every rank, their gradients summed over the group's rows); the PEFT export's
# adapter_config.json names the modules it became, as PEFT saves it.
ALL=(--set "model.model_config.pet_config={peft_type: LORA, r: 4, lora_alpha: 8, target_modules: all-linear}")
layout_train 1 al_one qx.yaml "${ALL[@]}"
layout_train 4 al_ep2_mp2_sp qx.yaml "${ALL[@]}" $DP2 $EP2 --set parallel_config.model_parallel=2 \
  --set parallel_config.use_seq_parallel=True
"$PY" "$SRC/tests/integration/compare_runs.py" al_one al_ep2_mp2_sp || fail "all-linear at ep2 x mp2 + SP is not one rank's"
run al_peft "$BIN" convert --from al_one/checkpoint --to al_peft
((STATUS == 0)) || { cat al_peft.log; fail "all-linear's PEFT export"; }
"$PY" - al_peft <<'PY' || fail "all-linear's adapter_config.json"
import json, sys
t = json.load(open(sys.argv[1] + "/adapter_config.json"))["target_modules"]
want = {f"model.layers.{l}.{m}" for l in range(2)
        for m in ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate",
                  "mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert.down_proj",
                  "mlp.shared_expert_gate"] + [f"mlp.experts.{e}.{p}" for e in range(4) for p in ("gate_proj", "up_proj", "down_proj")]}
assert isinstance(t, list) and set(t) == want, sorted(set(t) ^ want)[:4]
print(f"ok: all-linear saved as the {len(t)} modules it became")
PY

# Mixtral: the router's adapter alone (block_sparse_moe.gate) at ep2.
random_llama mx.yaml arch=MixtralForCausalLM hidden=32 steps=10 batch=4 samples=8 layers=2 lr=0.003 lr_end=0.0003 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: True}" \
  model="pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj, o_proj, gate]}"
layout_train 1 m_one mx.yaml
layout_train 2 m_ep2 mx.yaml $DP2 $EP2
"$PY" "$SRC/tests/integration/compare_runs.py" m_one m_ep2 || fail "Mixtral's router adapter at ep2 is not one rank's"

# Over a trained base: the adapters' tokens are the merged model's; PEFT's export holds the routers' and shared experts'.
lora_on_base qx.yaml
PYTHONPATH="$SRC/tests/integration" "$PY" - peft <<'PY' || fail "PEFT's directory"
import st_io, sys
keys = set(st_io.read(sys.argv[1] + "/adapter_model.safetensors")[0])
want = {f"base_model.model.model.layers.{l}.mlp.{m}.lora_{ab}.weight" for l in range(2)
        for m in ["gate", "shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj"] +
                 [f"experts.{e}.{p}" for e in range(4) for p in ("gate_proj", "up_proj", "down_proj")]
        for ab in "AB"}
want |= {f"base_model.model.model.layers.{l}.self_attn.{m}.lora_{ab}.weight" for l in range(2) for m in ("q_proj", "v_proj")
         for ab in "AB"}
assert keys == want, sorted(keys ^ want)[:4]
print(f"ok: PEFT's directory: {len(keys)} adapters under PEFT's keys")
PY
ok "LoRA on routers and shared experts: predict with the adapters = the merged model's tokens; PEFT's keys"
