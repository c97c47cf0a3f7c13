#!/usr/bin/env bash
# LoRA on DeepSeek's multi-head latent attention: PEFT's target_modules wraps q_a_proj, q_b_proj (or q_proj without a
# query latent), kv_a_proj_with_mqa, kv_b_proj and o_proj (tests/models/lora_golden_test.cpp's deepseek_v2_lite_lora
# and deepseek_v3_lora check ten steps against PyTorch's transcription of PEFT over the same models). Here the layouts
# train the same 10 steps as one rank (compare_runs.py's criteria), on the families' configs (config --from-hf):
# DeepSeek-V3's at dp2, mp2 + sequence parallel (q_b_proj's and kv_b_proj's adapters split by heads on the latents'
# rows, q_a_proj's and kv_a_proj_with_mqa's whole with their gradients summed over the tensor group), pp2, ZeRO-3 and
# ep2; DeepSeek-V2-Lite's (q_proj) at mp2 + SP. Over a trained base, generation with the adapters (the latent cache's
# absorbed form reads kv_b_proj with its adapter merged) gives the merged model's tokens, and the PEFT export has
# PEFT's keys.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"

mla_cfg() {  # FAMILY FILE TARGETS: the family's model over ten steps of random tokens, LoRA on TARGETS
  "$BIN" config --from-hf "$SRC/tests/golden/families/$1" > "$1.model.yaml" 2> "$1.from_hf.err" \
    || { cat "$1.from_hf.err"; fail "$1: config --from-hf failed"; }
  "$PY" - "$1.model.yaml" "$2" "$3" <<'PY'
import sys, yaml
run = yaml.safe_load("""
seed: 7
output_dir: out
runner_config: {train_steps: 10, batch_size: 4}
runner_wrapper: {use_clip_grad: True, max_grad_norm: 1.0}
lr_schedule: {type: cosine, learning_rate: 0.003, lr_end: 0.0003, warmup_steps: 2}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}
train_dataset: {data_loader: {type: RandomTokens, seed: 6, num_samples: 8}}
callbacks: [{type: MFLossMonitor, per_print_times: 1}, {type: CheckpointMonitor, prefix: lora, save_checkpoint_steps: 10}]
""")
run.update(yaml.safe_load(open(sys.argv[1])))
mc = run["model"]["model_config"]
mc["seq_length"] = 32
mc["pet_config"] = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": sys.argv[3].split(",")}
yaml.safe_dump(run, open(sys.argv[2], "w"), sort_keys=False)
PY
}
DP2="--set parallel_config.data_parallel=2 --set runner_config.batch_size=2"
MP2SP="--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True --set parallel_config.vocab_emb_dp=False"
mla_cfg deepseek_v3 v3.yaml q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj
layout_train 1 one v3.yaml
layout_train 2 dp2 v3.yaml $DP2
layout_train 2 mp2_sp v3.yaml $MP2SP
layout_train 2 pp2 v3.yaml --set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2
layout_train 2 z3 v3.yaml $DP2 --set parallel.zero_stage=3
layout_train 2 ep2 v3.yaml $DP2 --set parallel_config.expert_parallel=2
"$PY" "$SRC/tests/integration/compare_runs.py" one dp2 mp2_sp pp2 z3 ep2 || fail "a layout is not one rank's (V3)"

mla_cfg deepseek_v2_lite v2.yaml q_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj
layout_train 1 v2_one v2.yaml
layout_train 2 v2_mp2_sp v2.yaml $MP2SP
"$PY" "$SRC/tests/integration/compare_runs.py" v2_one v2_mp2_sp || fail "a layout is not one rank's (V2-Lite)"

lora_on_base v3.yaml
PYTHONPATH="$SRC/tests/integration" "$PY" - peft <<'PY' || fail "PEFT's directory"
import st_io, sys
keys = set(st_io.read(sys.argv[1] + "/adapter_model.safetensors")[0])
want = {f"base_model.model.model.layers.{l}.self_attn.{m}.lora_{ab}.weight" for l in range(3)
        for m in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj") for ab in "AB"}
assert keys == want, sorted(keys ^ want)[:4]
print(f"ok: PEFT's directory: {len(keys)} adapters under PEFT's keys")
PY
ok "LoRA on latent attention: predict with the adapters = the merged model's tokens; PEFT's keys"
