#!/usr/bin/env bash
# LoRA (model_config.pet_config) end to end, on a tiny Llama whose base is a checkpoint of 3 full steps:
#  * every layout trains the same 10 steps of the adapters as one rank: dp2, mp2 + sequence parallel, pp2 (1F1B),
#    pp2 under ZB-H1 (the adapters' weight pass deferred), pp2 interleaved over 2 chunks a stage (each chunk its
#    own frozen base), cp2, ZeRO-1/2/3 over the adapters at dp2; losses within
#    1e-5 relative at every step and the adapters after step 10 as compare_runs.py holds a layout's;
#  * the checkpoint holds the adapters and their moments alone and names the base; resumed at step 5 (on one
#    rank, and at mp2) it gives the uninterrupted run's steps 6-10 within 1e-5;
#  * MindFormers' keys (lora_rank, target_modules '.*wq|.*wv', lora_a_init normal) train the q/v adapters alone;
#  * pet_config.base_dtype bfloat16 gives the bits of an fp32 base whose layers were rounded to bf16;
#  * `predict` from the LoRA checkpoint (its base, then the adapters) gives the tokens of the merged weights, and so
#    does its PEFT export read back as load_checkpoint (training starts from it too);
#  * lora_dropout: the same masks at dp2, mp2 + SP, pp2 and cp2 as on one rank (within 1e-5);
#  * compute_dtype bfloat16 (MindFormers' LoRA configs) runs in float32, bit for bit, and says so;
#  * refused before any step, naming the key: a target that names nothing,
#    an embedding as a target, resume from a base model, a LoRA checkpoint without pet_config.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
random_llama base.yaml seed=5 steps=3 batch=4 clip= warmup=1 samples=64 vocab=1000 seq=32 layers=4 ffn=96 theta=10000.0 \
  callbacks="[{type: MFLossMonitor, per_print_times: 1}, {type: CheckpointMonitor, prefix: base, save_checkpoint_steps: 3}]"
train base base.yaml
BASE=$WORK/base/checkpoint/base-1_3
[[ -d "$BASE" ]] || fail "no base checkpoint at $BASE"

cat > lora.yaml <<YAML
seed: 9
load_checkpoint: $BASE
runner_config: {train_steps: 10, batch_size: 4}
runner_wrapper: {use_clip_grad: True, max_grad_norm: 0.5}
lr_schedule: {type: cosine, learning_rate: 0.01, lr_end: 0.001, warmup_steps: 2}
# eps 1e-6, not 1e-8: B starts at zero, so A's first gradient (step 2) is scaled by B's first step (~lr) and some of
# its elements lie near eps, where AdamW's update lr g / (|g| + eps) turns the rounding of g into a visible part
# of a step. With eps 1e-8 mp2 + SP and cp2 moved one element of layer 1's q_proj A by 2.6e-5 at step 2 and no
# further (2.2e-5 of the tensor by compare_runs.py's figure, the loss within 1e-8), the one-rank run under the
# fused core or Eigen's GEMMs moved another A element as far (1.8e-5); with 1e-6 every layout and those two
# probes stay within 4.4e-6 (2-vCPU AMD EPYC).
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}
train_dataset: {data_loader: {type: RandomTokens, seed: 7, num_samples: 64}}
callbacks: [{type: MFLossMonitor, per_print_times: 1}, {type: CheckpointMonitor, prefix: lora, save_checkpoint_steps: 5}]
model:
  arch: {type: LlamaForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 1000, seq_length: 32, hidden_size: 64, num_layers: 4, num_heads: 4,
                 n_kv_heads: 2, intermediate_size: 96, theta: 10000.0, rms_norm_eps: 1.0e-5,
                 pet_config: {peft_type: LORA, r: 4, lora_alpha: 8,
                              target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}}
YAML
# ltrain NAME RANKS [--set ...]: the adapters after the last step in NAME/weights.safetensors.
ltrain() {
  local name=$1 np=$2; shift 2
  if [ "$np" -eq 1 ]; then train "$name" lora.yaml --save-weights "$name/weights.safetensors" "$@"
  else mpi_train "$np" "$name" lora.yaml --save-weights "$name/weights.safetensors" "$@"
  fi
}
DP2="--set parallel_config.data_parallel=2 --set runner_config.batch_size=2"
PP2="--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2"
ltrain one 1
grep -q "LoRA: base model loaded from $BASE" one.log || fail "one: the base load is not logged"
[[ ! -e one/config.json ]] || fail "--save-weights of a LoRA run wrote a config.json beside its adapters"
ltrain dp2 2 $DP2
ltrain mp2_sp 2 --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
ltrain pp2 2 $PP2
ltrain pp2_zb 2 $PP2 --set parallel.pipeline_config.pipeline_scheduler=zero_bubble_h1
ltrain pp2_int 2 $PP2 --set parallel.pipeline_config.pipeline_interleave=True --set model.model_config.pp_interleave_num=2
ltrain cp2 2 --set parallel_config.context_parallel=2
ltrain z1 2 $DP2 --set parallel.zero_stage=1
ltrain z2 2 $DP2 --set parallel.zero_stage=2
ltrain z3 2 $DP2 --set parallel.zero_stage=3
"$PY" "$SRC/tests/integration/compare_runs.py" one dp2 mp2_sp pp2 pp2_zb pp2_int cp2 z1 z2 z3 || fail "a layout is not one rank's"

# The adapters moved, the base did not come along: the checkpoint holds lora_A/lora_B tensors (and their moments)
# alone, and names the base.
CK=one/checkpoint/lora-1_5
"$PY" - "$CK" "$BASE" <<'EOF' || fail "the LoRA checkpoint is not adapters + the base's name"
import glob, json, os, sys
ck, base = sys.argv[1], sys.argv[2]
state = json.load(open(os.path.join(ck, "index.json")))["state"] if os.path.exists(os.path.join(ck, "index.json")) else None
if state is None:
    state = json.load(open(glob.glob(os.path.join(ck, "*.json"))[0])).get("state")
assert state["lora"]["base"] == os.path.realpath(base) or state["lora"]["base"] == os.path.abspath(base), state["lora"]
names = set()
for f in glob.glob(os.path.join(ck, "*.json")):
    j = json.load(open(f))
    for t in j.get("tensors", {}):
        names.add(t)
assert names, "no tensors listed"
bad = [n for n in names if ".lora_A." not in n and ".lora_B." not in n]
assert not bad, f"not adapters: {bad[:5]}"
print(f"ok: {len(names)} tensors, all adapters and their moments; base {state['lora']['base']}")
EOF
du -sb "$CK" "$BASE" | awk '{print "size", $2, $1}'
# Resumed at step 5: steps 6-10 as the run that went on.
train resumed lora.yaml --set resume_training=True --set load_checkpoint=$CK --save-weights resumed/weights.safetensors
mpi_train 2 resumed_mp2 lora.yaml --set resume_training=True --set load_checkpoint=$CK \
  --set parallel_config.model_parallel=2 --save-weights resumed_mp2/weights.safetensors
grep -q "LoRA: base model loaded from $BASE" resumed.log || fail "resumed: the base its checkpoint names is not loaded"
"$PY" "$SRC/tests/integration/compare_runs.py" one resumed resumed_mp2 || fail "a resumed run is not the uninterrupted one"
ok "resumed at step 5 on one rank and at mp2: steps 6-10 as the uninterrupted run's"

# Generation with the adapters (unmerged, PEFT's forward) gives the tokens of the merged model (convert --merge-lora,
# base named by the checkpoint), and not the base's.
gen() {  # gen NAME CHECKPOINT [--set ...]
  local name=$1 ck=$2; shift 2
  run "$name" "$BIN" predict --config lora.yaml --load_checkpoint "$ck" --predict_ids "5 17 300 42" \
    --max_new_tokens 12 --ids_out "$name.jsonl" "$@"
  ((STATUS == 0)) || { tail -20 "$name.log"; fail "$name: predict failed"; }
}
run merge "$BIN" convert --from one/checkpoint/lora-1_10 --merge-lora --to merged10
((STATUS == 0)) || { cat merge.log; fail "convert --merge-lora of our checkpoint failed"; }
gen gen_lora one/checkpoint/lora-1_10
gen gen_merged merged10 --set model.model_config.pet_config=null
gen gen_base "$BASE" --set model.model_config.pet_config=null
cmp gen_lora.jsonl gen_merged.jsonl || fail "generation with the adapters differs from the merged model's"
! cmp -s gen_lora.jsonl gen_base.jsonl || fail "generation with the adapters is the base's"
ok "predict with the adapters = predict with them merged: $(cat gen_lora.jsonl)"
# The same adapters as PEFT's directory (convert), read back as load_checkpoint: its base_model_name_or_path is the
# base, the adapters by PEFT's keys; predict gives the same tokens, training starts from them, a different r is refused.
run topeft "$BIN" convert --from one/checkpoint/lora-1_10 --to peft10
((STATUS == 0)) || { cat topeft.log; fail "convert to PEFT's directory failed"; }
gen gen_peft peft10
cmp gen_lora.jsonl gen_peft.jsonl || fail "predict from PEFT's directory differs from our checkpoint's"
train from_peft lora.yaml --set load_checkpoint=peft10 --set runner_config.train_steps=2
grep -q "LoRA: adapters loaded from PEFT's peft10 (56 tensors; base $BASE)" from_peft.log || fail "from_peft: not loaded"
refused 2 "make them the same" peft_r "$BIN" predict --config lora.yaml --load_checkpoint peft10 \
  --set model.model_config.pet_config.r=8 --predict_ids "1 2" --max_new_tokens 2
refused 2 "holds LoRA adapters (PEFT's): set model.model_config.pet_config" peft_nopet "$BIN" train --config lora.yaml \
  --set output_dir=peft_nopet --set model.model_config.pet_config=null --set load_checkpoint=peft10
ok "PEFT's directory as load_checkpoint: the same tokens; training starts from it; refusals"

# MindFormers' keys: q and v of every layer, A from Normal(0.01).
train mf lora.yaml --set "model.model_config.pet_config={pet_type: lora, lora_rank: 4, lora_alpha: 16, lora_dropout: 0.0, target_modules: '.*wq|.*wv'}"
"$PY" - mf/checkpoint/lora-1_5 <<'EOF' || fail "MindFormers' target_modules: not the q/v adapters"
import glob, json, os, sys
names = set()
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    names |= set(json.load(open(f)).get("tensors", {}))
w = sorted(n for n in names if not n.startswith("optimizer."))
assert len(w) == 16 and all(".q_proj.lora_" in n or ".v_proj.lora_" in n for n in w), w
print("ok: MindFormers' '.*wq|.*wv' targets q_proj and v_proj of the 4 layers")
EOF

# pet_config.base_dtype bfloat16: the layers' base weights held as bf16 (widened a layer at a time), the same bits as
# an fp32 base whose layers were rounded to bf16 beforehand (the embedding, final norm and head stay fp32), on one
# rank and at pp2.
run tohf "$BIN" convert --from "$BASE" --to base_hf
((STATUS == 0)) || { cat tohf.log; fail "convert of the base to Hugging Face failed"; }
PYTHONPATH="$SRC/tests/integration" "$PY" - <<'EOF' || fail "rounding the base's layers"
import os, st_io, torch
t, meta = st_io.read("base_hf/model.safetensors")
r = {k: (v.to(torch.bfloat16).float() if ".layers." in k else v) for k, v in t.items()}
assert any(not torch.equal(r[k], t[k]) for k in t), "nothing to round"
os.makedirs("base_hf_r")
st_io.write("base_hf_r/model.safetensors", r)
open("base_hf_r/config.json", "w").write(open("base_hf/config.json").read())
EOF
ltrain bf16_base 1 --set load_checkpoint=base_hf --set model.model_config.pet_config.base_dtype=bfloat16
ltrain rounded_base 1 --set load_checkpoint=base_hf_r
same_losses rounded_base bf16_base
cmp bf16_base/weights.safetensors rounded_base/weights.safetensors || fail "bf16 base: adapters differ from the rounded fp32 base's"
ltrain bf16_base_pp2 2 --set load_checkpoint=base_hf --set model.model_config.pet_config.base_dtype=bfloat16 $PP2
ltrain rounded_base_pp2 2 --set load_checkpoint=base_hf_r $PP2
same_losses rounded_base_pp2 bf16_base_pp2
cmp bf16_base_pp2/weights.safetensors rounded_base_pp2/weights.safetensors || fail "bf16 base at pp2: adapters differ"
ok "base_dtype bfloat16: bitwise the fp32 base with its layers rounded to bf16, on one rank and at pp2 (each stage's layers)"

# Dropout on the adapters' input (lora_dropout 0.1): the masks are keyed by the step, the layer, the adapter and each
# element's global row and column, so every layout draws the same ones.
DROP="--set model.model_config.pet_config.lora_dropout=0.1"
ltrain d_one 1 $DROP
ltrain d_mp2_sp 2 $DROP --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
ltrain d_pp2 2 $DROP $PP2
ltrain d_cp2 2 $DROP --set parallel_config.context_parallel=2
ltrain d_dp2 2 $DROP $DP2
"$PY" "$SRC/tests/integration/compare_runs.py" d_one d_mp2_sp d_pp2 d_cp2 d_dp2 || fail "LoRA dropout: a layout is not one rank's"
! cmp -s <(losses one) <(losses d_one) || fail "lora_dropout 0.1 changed no loss"
ok "lora_dropout: mp2 + SP, pp2, cp2, dp2 within 1e-5 of one rank"

# MindFormers' own LoRA configs say compute_dtype: bfloat16; taken as they are, the run computes in float32 (as the
# log says): the same bits as the float32 run.
ltrain bf16_compute 1 --set model.model_config.compute_dtype=bfloat16 --set output_dir=bf16_compute
grep -q "LoRA's products run in float32 here" bf16_compute.log || fail "bf16_compute: the log does not say it computes in float32"
cmp -s <(losses bf16_compute) <(losses one) || fail "compute_dtype bfloat16 under LoRA: not the float32 run's losses"
cmp bf16_compute/weights.safetensors one/weights.safetensors || fail "compute_dtype bfloat16 under LoRA: not the float32 run's adapters"
ok "compute_dtype bfloat16 with LoRA: the float32 run's losses, bit for bit, and the log says why"

# Refused before any step.
refused 2 "matches no module of the model" nothing "$BIN" train --config lora.yaml --set output_dir=nothing \
  --set "model.model_config.pet_config.target_modules=[qproj]"
refused 2 "names 'model.embed_tokens', which has no LoRA adapter here" embed "$BIN" train --config lora.yaml \
  --set output_dir=embed --set "model.model_config.pet_config.target_modules=[embed_tokens, q_proj]"
refused 2 "is a base model" resume_base "$BIN" train --config lora.yaml --set output_dir=resume_base --set resume_training=True
refused 2 "holds LoRA adapters" no_pet "$BIN" train --config lora.yaml --set output_dir=no_pet \
  --set model.model_config.pet_config=null --set load_checkpoint=$CK
ok "LoRA: every layout equals one rank; resume; MindFormers' keys; refusals"
