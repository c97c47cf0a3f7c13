#!/usr/bin/env bash
# PEFT's modules_to_save: the head (lm_head) and the token embedding (embed_tokens) trained whole beside the LoRA
# adapters, each from a copy of the base's (tests/models/lora_golden_test.cpp's mixtral_saved_lora checks ten steps
# against PyTorch's transcription of PEFT's ModulesToSaveWrapper). Here the layouts train the same 10 steps as one
# rank (compare_runs.py's criteria): dp2, mp2 + sequence parallel with the head vocabulary-parallel and with it
# replicated (vocab_emb_dp), pp2 (the embedding's copy on the first stage, the head's on the last), ZeRO-2 and 3 (each
# copy a unit of its own), cp2, and a Mixtral at ep2. Over a trained base the copies start from the base's weights;
# generation with the adapters gives the merged model's tokens (convert --merge-lora writes the trained copies in
# place of the base's), and the PEFT export holds them under PEFT's keys (base_model.model.lm_head.weight) with
# modules_to_save in adapter_config.json, which load_checkpoint reads back. A tied head (GPT-2) trains a copy apart
# from the embedding's at pp2, mp2 + SP and ZeRO-3 as one rank; its merge (which would untie them), an unknown module
# and the chunked loss over a trained head are refused by name.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
PET="pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj, down_proj], modules_to_save: [lm_head, embed_tokens]}"
random_llama lx.yaml steps=10 batch=4 samples=64 layers=2 lr=0.003 lr_end=0.0003 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" \
  ckpt="prefix: lora, save_checkpoint_steps: 10" model="$PET"

DP2="--set parallel_config.data_parallel=2 --set runner_config.batch_size=2"
MP2="--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True"
layout_train 1 one lx.yaml
layout_train 2 dp2 lx.yaml $DP2
layout_train 2 mp2_sp lx.yaml $MP2 --set parallel_config.vocab_emb_dp=False
layout_train 2 mp2_sp_replicated lx.yaml $MP2 --set parallel_config.vocab_emb_dp=True
layout_train 2 pp2 lx.yaml --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2
layout_train 2 z2 lx.yaml $DP2 --set parallel.zero_stage=2
layout_train 2 z3 lx.yaml $DP2 --set parallel.zero_stage=3
layout_train 2 cp2 lx.yaml --set parallel_config.context_parallel=2
"$PY" "$SRC/tests/integration/compare_runs.py" one dp2 mp2_sp mp2_sp_replicated pp2 z2 z3 cp2 || fail "a layout is not one rank's"
PYTHONPATH="$SRC/tests/integration" "$PY" - one/weights.safetensors <<'PY' || fail "the saved modules are not in the run's weights"
import st_io, sys
t, _ = st_io.read(sys.argv[1])
for k in ("lm_head.weight", "model.embed_tokens.weight"):
    assert k in t and list(t[k].shape) == [101, 64], (k, t.get(k))
print("ok: the trained copies lm_head.weight and model.embed_tokens.weight are in the run's weights")
PY

# Mixtral at ep2: the copies are dense (every rank's), the experts' region untouched by them.
random_llama mx.yaml arch=MixtralForCausalLM hidden=32 steps=10 batch=4 samples=8 layers=2 lr=0.003 lr_end=0.0003 \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" \
  top="moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.02, norm_topk_prob: True}" model="$PET"
layout_train 1 m_one mx.yaml
layout_train 2 m_ep2 mx.yaml $DP2 --set parallel_config.expert_parallel=2
"$PY" "$SRC/tests/integration/compare_runs.py" m_one m_ep2 || fail "Mixtral with modules_to_save at ep2 is not one rank's"

# Over a trained base: the merged model (the copies written in place of the base's) generates the adapters' tokens.
lora_on_base lx.yaml
PYTHONPATH="$SRC/tests/integration" "$PY" - peft <<'PY' || fail "PEFT's directory with modules_to_save"
import json, st_io, sys
d = sys.argv[1]
keys = set(st_io.read(d + "/adapter_model.safetensors")[0])
want = {f"base_model.model.model.layers.{l}.{m}.lora_{ab}.weight" for l in range(2)
        for m in ("self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj") for ab in "AB"}
want |= {"base_model.model.lm_head.weight", "base_model.model.model.embed_tokens.weight"}
assert keys == want, sorted(keys ^ want)[:4]
c = json.load(open(d + "/adapter_config.json"))
assert c["modules_to_save"] == ["lm_head", "embed_tokens"], c["modules_to_save"]
print(f"ok: PEFT's directory: {len(keys)} tensors under PEFT's keys, modules_to_save {c['modules_to_save']}")
PY
# PEFT's directory as load_checkpoint: the same adapters and copies, so the same generated tokens.
run gen_peft "$BIN" predict --config lx.yaml --load_checkpoint peft --predict_ids "5 17 30 42" --max_new_tokens 12 \
  --ids_out gen_peft.jsonl
((STATUS == 0)) || { tail -20 gen_peft.log; fail "predict from PEFT's directory"; }
cmp gen_peft.jsonl gen_lora.jsonl || fail "PEFT's directory (modules_to_save) does not give the run's tokens"
ok "modules_to_save over a trained base: merged = adapters' tokens, PEFT's directory read back alike"

# A resumed run (resume_training from the step-3 checkpoint, over a bf16 base) continues the copies with their moments:
# steps 4-6 bit for bit the uninterrupted run's.
random_llama lr.yaml steps=6 batch=4 samples=64 layers=2 ckpt="prefix: lora, save_checkpoint_steps: 3, keep_checkpoint_max: 5" \
  model="pet_config: {peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj], modules_to_save: [lm_head, embed_tokens], base_dtype: bfloat16}"
train full6 lr.yaml --set output_dir=full6
train res6 lr.yaml --set output_dir=res6 --set load_checkpoint="$(ls -d full6/checkpoint/lora-*_3)" --set resume_training=True
"$PY" - <<'PY' || fail "the resumed run is not the uninterrupted one"
import json
full = {j["step"]: j["loss"] for j in map(json.loads, open("full6/metrics.jsonl")) if "loss" in j}
res = {j["step"]: j["loss"] for j in map(json.loads, open("res6/metrics.jsonl")) if "loss" in j}
assert sorted(res) == [4, 5, 6] and all(res[s] == full[s] for s in res), (full, res)
print("ok: resumed at step 4, steps 4-6 bit for bit the uninterrupted run's")
PY

mpi_refused 1 unknown_module "modules_to_save: score\`: names no module" lx.yaml \
  --set 'model.model_config.pet_config={peft_type: LORA, r: 4, target_modules: [q_proj], modules_to_save: [score]}'
mpi_refused 1 chunked_head "loss_vocab_chunk: 32\`: the chunked loss is built for a frozen head" lx.yaml \
  --set 'model.model_config.pet_config={peft_type: LORA, r: 4, target_modules: [q_proj], modules_to_save: [lm_head], loss_vocab_chunk: 32}'

# A tied head (GPT-2): the head's copy starts as the embedding it shares and trains apart from the embedding's copy
# (PEFT's deep copies), on the last stage under pp2, vocabulary-parallel under mp2 + SP, sharded under ZeRO-3.
random_gpt2 g.yaml steps=10 batch=4 samples=16 lr=0.003 lr_end=0.0003 ckpt="prefix: lora, save_checkpoint_steps: 10" \
  optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" \
  model="hidden_dropout_rate: 0.0, attention_dropout_rate: 0.0, pet_config: {peft_type: LORA, r: 4, target_modules: [c_attn], modules_to_save: [lm_head, wte]}"
layout_train 1 g_one g.yaml
layout_train 2 g_pp2 g.yaml --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2
layout_train 2 g_mp2_sp g.yaml $MP2 --set parallel_config.vocab_emb_dp=False
layout_train 2 g_z3 g.yaml $DP2 --set parallel.zero_stage=3
"$PY" "$SRC/tests/integration/compare_runs.py" g_one g_pp2 g_mp2_sp g_z3 || fail "GPT-2's tied head copy: a layout is not one rank's"
PYTHONPATH="$SRC/tests/integration" "$PY" - g_one/weights.safetensors <<'PY' || fail "the tied head's copy"
import st_io, sys, torch
t, _ = st_io.read(sys.argv[1])
assert "lm_head.weight" in t and "wte.weight" in t, sorted(t)[:6]
assert not torch.equal(t["lm_head.weight"], t["wte.weight"]), "the head's and the embedding's copies trained as one"
print("ok: lm_head.weight and wte.weight trained apart")
PY
run g_peft "$BIN" convert --from g_one/checkpoint --to g_peft
((STATUS == 0)) || { cat g_peft.log; fail "GPT-2's PEFT export"; }
PYTHONPATH="$SRC/tests/integration" "$PY" - g_peft <<'PY' || fail "GPT-2's PEFT keys"
import st_io, sys
keys = set(st_io.read(sys.argv[1] + "/adapter_model.safetensors")[0])
assert "base_model.model.lm_head.weight" in keys and "base_model.model.transformer.wte.weight" in keys, sorted(keys)[:6]
print("ok: PEFT's keys lm_head.weight and transformer.wte.weight")
PY
train g_base g.yaml --set output_dir=g_base --set model.model_config.pet_config=null --set runner_config.train_steps=2 \
  --set 'callbacks=[{type: CheckpointMonitor, prefix: base, save_checkpoint_steps: 2}]'
run g_merge "$BIN" convert --from g_one/checkpoint --merge-lora --base g_base/checkpoint --to g_merged
((STATUS == 2)) && grep -qF "a merge that unties them is not built" g_merge.log || { cat g_merge.log; fail "a tied head's merge is not refused"; }
ok "modules_to_save"
