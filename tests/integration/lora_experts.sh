#!/usr/bin/env bash
# LoRA on the routed experts: PEFT's target_modules [q_proj, v_proj, w1, w2, w3] wraps every expert's three
# projections of a tiny Mixtral (tests/models/lora_golden_test.cpp's mixtral_experts_lora checks ten steps against
# PyTorch's transcription of PEFT over the same model). Here the layouts train the same 10 steps as one rank: expert
# parallel 2 (each rank holds its experts' adapters), ep2 x mp2 + sequence parallel (the adapters split as the
# experts' widths are), the allgather dispatcher, pp2 and ZeRO-3 (compare_runs.py's criteria); a GPT-2 MoE's biased
# experts (c_fc, c_proj) at ep2 alike. The checkpoint and the PEFT export hold every expert's adapters under PEFT's
# keys; over a trained base, generation with the adapters gives the merged model's tokens (convert --merge-lora into
# each expert's weights). lora_dropout on an expert is refused.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
PET="pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj, w1, w2, w3]}"
random_llama lx.yaml arch=MixtralForCausalLM hidden=32 steps=10 batch=4 samples=64 layers=2 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" lr=0.01 lr_end=0.001 \
  ckpt="prefix: lora, save_checkpoint_steps: 10" \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: True}" \
  model="$PET"

DP2="--set parallel_config.data_parallel=2 --set runner_config.batch_size=2"
EP2="--set parallel_config.expert_parallel=2"
layout_train 1 one lx.yaml
layout_train 2 ep2 lx.yaml $DP2 $EP2
layout_train 4 ep2_mp2_sp lx.yaml $DP2 $EP2 --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
layout_train 2 ep2_allgather lx.yaml $DP2 $EP2 --set moe_config.token_dispatcher=allgather
layout_train 2 pp2 lx.yaml --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2
layout_train 2 z3 lx.yaml $DP2 --set parallel.zero_stage=3
"$PY" "$SRC/tests/integration/compare_runs.py" one ep2 ep2_mp2_sp ep2_allgather pp2 z3 || fail "a layout is not one rank's"
"$PY" - one/weights.safetensors <<'PY' || fail "the experts' adapters did not train"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
head = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
names = [k for k in head if k != "__metadata__"]
experts = [k for k in names if ".block_sparse_moe.experts." in k]
want = {f"model.layers.{l}.block_sparse_moe.experts.{e}.{m}.lora_{ab}.weight"
        for l in range(2) for e in range(4) for m in ("w1", "w2", "w3") for ab in "AB"}
assert set(experts) == want, sorted(set(experts) ^ want)[:4]
# B starts at zero: a B that moved trained.
import array
def tensor(k):
    t = head[k]; a, b = t["data_offsets"]; base = 8 + struct.unpack("<Q", raw[:8])[0]
    return array.array("f", raw[base + a:base + b])
moved = [k for k in experts if ".lora_B." in k and any(v != 0.0 for v in tensor(k))]
assert len(moved) == 24, f"{len(moved)} of 24 expert B's moved"
print(f"ok: {len(experts)} expert adapters, every B moved from zero")
PY

# GPT-2 MoE: the experts' c_fc (column) and c_proj (row) with biases frozen, and the attention's c_attn / c_proj.
random_gpt2 lg.yaml steps=10 batch=4 samples=64 lr=0.01 lr_end=0.001 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.05, norm_topk_prob: False}" \
  model="hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0, pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [c_attn, c_proj, c_fc]}"
train g_one lg.yaml --set output_dir=g_one --save-weights g_one/weights.safetensors
mpi_train 2 g_ep2 lg.yaml --save-weights g_ep2/weights.safetensors $DP2 $EP2
"$PY" "$SRC/tests/integration/compare_runs.py" g_one g_ep2 || fail "GPT-2 MoE's expert LoRA at ep2 is not one rank's"
grep -c "experts\.[0-9]*\.c_fc\.lora_A" <(strings g_one/weights.safetensors | tr ',' '\n') >/dev/null \
  || fail "GPT-2 MoE: no adapter on the experts' c_fc"

# Over a trained base: the adapters' tokens are the merged model's; PEFT's export holds every expert's adapters.
lora_on_base lx.yaml
"$PY" - peft <<'PY' || fail "the experts' PEFT directory"
import json, struct, sys
d = sys.argv[1]
raw = open(d + "/adapter_model.safetensors", "rb").read()
keys = set(json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])) - {"__metadata__"}
want = {f"base_model.model.model.layers.{l}.self_attn.{m}.lora_{ab}.weight" for l in range(2) for m in ("q_proj", "v_proj")
        for ab in "AB"}
want |= {f"base_model.model.model.layers.{l}.block_sparse_moe.experts.{e}.{m}.lora_{ab}.weight"
         for l in range(2) for e in range(4) for m in ("w1", "w2", "w3") for ab in "AB"}
assert keys == want, sorted(keys ^ want)[:4]
c = json.load(open(d + "/adapter_config.json"))
assert set(c["target_modules"]) == {"q_proj", "v_proj", "w1", "w2", "w3"} and c["r"] == 4, c
print(f"ok: PEFT's directory: {len(keys)} adapters under PEFT's keys, 48 of them the experts'")
PY
ok "expert LoRA: predict with the adapters = the merged model's tokens (not the base's); PEFT's keys"

mpi_refused 1 expert_dropout "lora_dropout: 0.100000\` with an adapter on the expert projection" lx.yaml \
  --set 'model.model_config.pet_config={peft_type: LORA, r: 4, lora_alpha: 8, lora_dropout: 0.1, target_modules: [w1]}'
ok "LoRA on the experts"
