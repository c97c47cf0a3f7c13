#!/usr/bin/env bash
# `gridformer config` on MindFormers' own files (tests/data/mindformers, see its README): each
# resolves with warnings only, or is refused (status 2) naming what is not built and then resolves
# with that key overridden. Their pipeline layouts (pipeline_stage, micro_batch_num, offset,
# gradient_accumulation_steps) resolve as written and pass the layout check on the ranks they ask for. Its Llama 2 and Mixtral files are read with LlamaConfig's keys, Mixtral's
# moe_config as written; configs/moe resolves on the ranks each file asks for. r1.3's Llama 2 70B 32-rank files keep
# their per-stage select_recompute list (and `gridformer plan` follows it stage by stage); r1.3's predict files,
# whose weights are hub names, are refused without load_checkpoint and load with one. A config that cannot load stops with status 2 and a message naming its
# cause: an empty file, a bad --set (named as the override, not the file), a load_checkpoint that
# does not exist (under mpirun too, before any work).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
DATA="$SRC/tests/data/mindformers"

# MindFormers' files read MindDataset (MindRecord files), which gridformer does not; `config --ranks N`, the
# launchers' pre-flight, refuses that as train would. Their layouts are checked with synthetic data in its place.
NO_DATA=(--set train_dataset.data_loader.type=RandomTokens)
# resolves FILE [--set ...]: status 0, a resolved config on stdout, warnings only on stderr.
resolves() {
  local f=$1; shift
  "$BIN" config --config "$DATA/$f" "$@" > out.yaml 2> err.txt || fail "$f $*: status $?: $(cat err.txt)"
  grep -q "^model:" out.yaml || fail "$f: no resolved config printed"
  ! grep -v "^warning: " err.txt | grep -q . || fail "$f $*: more than warnings: $(cat err.txt)"
  ! grep -qi "unknown key" err.txt || fail "$f: an unknown key: $(cat err.txt)"
  echo "ok: $f $* ($(grep -c '^warning: ' err.txt) warning(s))"
}
# config_refused FILE MESSAGE [--set ...]: `gridformer config` exits 2 with MESSAGE on stderr (err.txt, which the
# checks after it read).
config_refused() {
  local f=$1 msg=$2; shift 2
  local status=0
  "$BIN" config --config "$f" "$@" > out.yaml 2> err.txt || status=$?
  [ "$status" -eq 2 ] || fail "$f $*: status $status, expected 2: $(cat err.txt)"
  grep -qF -- "$msg" err.txt || fail "$f $*: no '$msg' in: $(cat err.txt)"
  echo "ok: refused $(basename "$f") $*: $msg"
}

for f in run_gpt2.yaml run_gpt2_13b.yaml r1.1/run_gpt2_xl.yaml r1.3/pretrain_gpt2_13b_fp16.yaml \
         r1.3/finetune_gpt2_small_fp16.yaml; do
  resolves "$f"
done
# r1.3 pretrain_gpt2_small_fp16.yaml: its `checkpoint_name_or_path: gpt2` (a hub name) is not loaded when training.
resolves r1.3/pretrain_gpt2_small_fp16.yaml
grep -qF "\`model.model_config.checkpoint_name_or_path: gpt2\` is not loaded for run_mode train" err.txt \
  || fail "pretrain_gpt2_small_fp16: no run_mode train warning for checkpoint_name_or_path: $(cat err.txt)"
# r1.3 predict files name their weights by hub name (gpt2, llama2_7b): refused in run_mode predict with no
# load_checkpoint (there is no hub at run time), and loaded with a load_checkpoint that exists, which wins as in
# MindFormers (config checks only that the path exists).
config_refused "$DATA/r1.3/predict_gpt2_small_fp16.yaml" \
  "\`model.model_config.checkpoint_name_or_path: gpt2\`: no hub at run time: convert/download weights (a Hugging Face GPT-2 .safetensors or its directory) and give a path in load_checkpoint"
config_refused "$DATA/r1.3/predict_llama2_7b.yaml" \
  "\`model.model_config.checkpoint_name_or_path: llama2_7b\`: no hub at run time: convert/download weights (a Hugging Face Llama .safetensors or its directory) and give a path in load_checkpoint"
# predict_loads FILE HUB_NAME WEIGHTS: FILE resolves with load_checkpoint=WEIGHTS, which wins over HUB_NAME.
predict_loads() {
  local f=$1 name=$2 weights=$3
  resolves "r1.3/$f" --set "load_checkpoint=$weights"
  grep -qF "\`model.model_config.checkpoint_name_or_path: $name\` is not loaded: \`load_checkpoint: $weights\` gives the weights (MindFormers lets load_checkpoint win)" \
    err.txt || fail "$f: no load_checkpoint-wins warning: $(cat err.txt)"
  grep -qxF "load_checkpoint: $weights" out.yaml || fail "$f: load_checkpoint is not $weights: $(grep -n load_checkpoint out.yaml)"
  grep -qx "run_mode: predict" out.yaml || fail "$f: run_mode is not predict: $(grep -n run_mode out.yaml)"
}
predict_loads predict_gpt2_small_fp16.yaml gpt2 "$SRC/tests/golden/gpt2_tiny.safetensors"
predict_loads predict_llama2_7b.yaml llama2_7b "$SRC/tests/golden/llama_tiny_sharded"
# In run_mode train the same hub name is a warning, not a refusal.
resolves r1.3/predict_gpt2_small_fp16.yaml --set run_mode=train
grep -qF "\`model.model_config.checkpoint_name_or_path: gpt2\` is not loaded for run_mode train" err.txt \
  || fail "predict_gpt2_small_fp16 in run_mode train: no warning: $(cat err.txt)"
# GPT-2 52B: 16 pipeline stages of 4 layers, 64 micro-batches, on 8 x 16 ranks.
resolves r1.2/run_gpt2_52b.yaml
grep -q "^    pipeline_scheduler: 1f1b$" out.yaml || fail "52b: the scheduler is not 1f1b: $(grep -n pipeline_scheduler out.yaml)"
"$BIN" config --config "$DATA/r1.2/run_gpt2_52b.yaml" "${NO_DATA[@]}" --ranks 128 > /dev/null 2> err.txt || fail "52b on 128 ranks: $(cat err.txt)"
config_refused "$DATA/r1.2/run_gpt2_52b.yaml" "\`train_dataset.data_loader.type: MindDataset\` is a MindSpore/MindFormers loader that gridformer does not read" --ranks 128
grep -qF "preprocess_data" err.txt || fail "52b's MindDataset refusal does not say how to convert the data: $(cat err.txt)"
config_refused "$DATA/r1.2/run_gpt2_52b.yaml" \
  "\`parallel_config.micro_batch_num\` (8) is less than \`parallel_config.pipeline_stage\` (16): every stage needs a micro-batch of its own in flight; use micro_batch_num: 16" \
  --set parallel_config.micro_batch_num=8
config_refused "$DATA/r1.2/run_gpt2_52b.yaml" "\`model.model_config.num_layers\` (8) is fewer than the \`parallel_config.pipeline_stage\` (16) stages" \
  --set model.model_config.num_layers=8
resolves r1.3/pretrain_llama2_7b_common.yaml  # gradient_accumulation_steps: 8
# Their moe_config on GPT-2 blocks: a GPT-2 MoE of 8 experts over expert_parallel 8, in 2 pipeline stages.
for f in r1.3/pretrain_mixtral-8x7b_common.yaml r1.1/finetune_mixtral-8x7b_common.yaml; do
  resolves "$f"
  grep -q "^  expert_num: 8$" out.yaml || fail "$f: expert_num is not 8: $(grep -n expert_num out.yaml)"
  "$BIN" config --config "$DATA/$f" "${NO_DATA[@]}" --ranks 16 > /dev/null 2> err.txt || fail "$f on 16 ranks: $(cat err.txt)"
done
# The resolved config of a MindFormers file loads back to itself.
"$BIN" config --config "$DATA/r1.3/pretrain_gpt2_13b_fp16.yaml" > a.yaml 2>/dev/null || fail "13b resolve"
"$BIN" config --config a.yaml > b.yaml 2>/dev/null || fail "the resolved 13b config does not load"
cmp -s a.yaml b.yaml || fail "the resolved config changes when loaded again: $(diff a.yaml b.yaml | head)"

# MindFormers' own Llama 2 and Mixtral files, unmodified: LlamaConfig's keys as they are.
resolves r1.0/run_llama2_7b.yaml
resolves r1.3/pretrain_llama2_7b.yaml  # gradient_accumulation_steps: 8 at one stage
grep -q "model.model_config.rotary_dtype: float16\`: RoPE's sin/cos tables" err.txt || fail "no rotary_dtype warning: $(cat err.txt)"
grep -q "^    max_position_embedding: 4096$" out.yaml || fail "max_position_embedding None is not seq_length: $(grep -n max_pos out.yaml)"
config_refused "$DATA/r1.3/finetune_llama2_7b.yaml" "\`load_checkpoint: {path}/llama2_7b.ckpt\`: no such file or directory"
resolves r1.3/finetune_llama2_7b.yaml --set 'load_checkpoint=""'
resolves r1.2/pretrain_llama2_70b.yaml  # 8 stages of 10 layers, 128 micro-batches
# use_flash_attention: True with 8 key/value heads for 64 query heads: the fused core takes it, unwarned.
grep -q "use_flash_attention" err.txt && fail "a use_flash_attention warning for grouped-query heads: $(cat err.txt)"
grep -q "^    use_flash_attention: True$" out.yaml || fail "use_flash_attention is not kept: $(grep -n use_flash out.yaml)"
"$BIN" config --config "$DATA/r1.2/pretrain_llama2_70b.yaml" "${NO_DATA[@]}" --ranks 64 > /dev/null 2> err.txt || fail "70b on 64 ranks: $(cat err.txt)"
# Yi 34B (research/yi): a LlamaConfig in 4 stages split by offset [-1, 1, 1, -1] (14, 16, 16, 14 of 60 layers);
# its optimizer is Yi's own.
config_refused "$DATA/r1.3/pretrain_yi_34b.yaml" "\`optimizer.type: AdamWeightDecayX\`: unknown type"
resolves r1.3/pretrain_yi_34b.yaml --set optimizer.type=AdamWeightDecay
"$BIN" config --config "$DATA/r1.3/pretrain_yi_34b.yaml" --set optimizer.type=AdamWeightDecay "${NO_DATA[@]}" --ranks 16 > /dev/null \
  2> err.txt || fail "yi_34b on 16 ranks: $(cat err.txt)"
config_refused "$DATA/r1.3/pretrain_yi_34b.yaml" "\`model.model_config.offset: [-1, 1, 1]\` has 3 entries, but \`parallel_config.pipeline_stage\` is 4" \
  --set optimizer.type=AdamWeightDecay --set "model.model_config.offset=[-1, 1, 1]"
# r1.3 Llama 2 70B on 32 ranks (data_parallel 1 x model_parallel 4 x pipeline_stage 8, 10 layers a stage) with a
# selective recompute per stage: select_recompute [8,4,4,1,1,1,1,1] (the first 8 layers of stage 0, the first 4 of
# stages 1 and 2, the first of the others); select_comm_recompute, the same list, is ignored on a CPU with a warning.
for f in r1.3/pretrain_llama2_70b_bf16_32p.yaml r1.3/finetune_llama2_70b_bf16_32p.yaml; do
  resolves "$f"
  grep -qx "  select_recompute: \[8, 4, 4, 1, 1, 1, 1, 1\]" out.yaml || fail "$f: select_recompute: $(grep -n select_recompute out.yaml)"
  grep -qF "\`recompute_config.select_comm_recompute: [8, 4, 4, 1, 1, 1, 1, 1]\` has no meaning on a CPU; ignored" err.txt \
    || fail "$f: no select_comm_recompute warning: $(cat err.txt)"
  "$BIN" config --config "$DATA/$f" "${NO_DATA[@]}" --ranks 32 > /dev/null 2> err.txt || fail "$f on 32 ranks: $(cat err.txt)"
  ! grep -v "^warning: " err.txt | grep -q . || fail "$f on 32 ranks: more than warnings: $(cat err.txt)"
done
# Its plan: each stage's activations follow that stage's entry of the list. Stage 0 (8 of 10 layers recomputed)
# holds what it holds under [8]*8 and less than under [1]*8, stage 7 (1 layer) what it holds under [1]*8 and
# more than under [8]*8; stage 0 keeps the attention probabilities of layers 8 and 9 only. The plans take the
# unfused attention core (the file's fused one keeps no probabilities), where what a layer keeps shows most.
F70="$DATA/r1.3/pretrain_llama2_70b_bf16_32p.yaml"
UNFUSED="model.model_config.use_flash_attention=False"
"$BIN" plan --config "$F70" --ranks 32 --set "$UNFUSED" > plan.txt 2> err.txt || fail "plan of $F70 on 32 ranks: $(cat err.txt)"
"$BIN" plan --config "$F70" --ranks 32 --set "$UNFUSED" --set "recompute_config.select_recompute=[8, 8, 8, 8, 8, 8, 8, 8]" \
  > plan8.txt 2>/dev/null || fail "plan with select_recompute [8]*8"
"$BIN" plan --config "$F70" --ranks 32 --set "$UNFUSED" --set "recompute_config.select_recompute=[1, 1, 1, 1, 1, 1, 1, 1]" \
  > plan1.txt 2>/dev/null || fail "plan with select_recompute [1]*8"
grep -q "^plan: LlamaForCausalLM (LlamaConfig) on 32 rank(s): .*, selective recompute$" plan.txt || fail "plan header: $(head -1 plan.txt)"
grep -qF "pipeline: 8 stages, layers per stage [10, 10, 10, 10, 10, 10, 10, 10]" plan.txt || fail "plan stages: $(sed -n 2p plan.txt)"
# stage_acts PLAN STAGE: the activations of tensor-parallel rank 0 of that pipeline stage.
stage_acts() {
  awk -v s="$2" '$1 == "pipeline" && $2 == "stage" { st = $3; sub(":", "", st) }
    st == s && /tensor-parallel ranks? 0[ -]/ { match($0, /activations [0-9.]+ [KMG]iB/); print substr($0, RSTART + 12, RLENGTH - 12); exit }' "$1"
}
a0=$(stage_acts plan.txt 0); a7=$(stage_acts plan.txt 7)
[ -n "$a0" ] && [ -n "$a7" ] || fail "no per-stage activations in the plan: $(cat plan.txt)"
[ "$a0" = "$(stage_acts plan8.txt 0)" ] || fail "stage 0 activations $a0, not those of 8 recomputed layers ($(stage_acts plan8.txt 0))"
[ "$a0" != "$(stage_acts plan1.txt 0)" ] || fail "stage 0 activations $a0 are those of 1 recomputed layer"
[ "$a7" = "$(stage_acts plan1.txt 7)" ] || fail "stage 7 activations $a7, not those of 1 recomputed layer ($(stage_acts plan1.txt 7))"
[ "$a7" != "$(stage_acts plan8.txt 7)" ] || fail "stage 7 activations $a7 are those of 8 recomputed layers"
grep -q "^  largest activation buffers: .*layer[89]\.probs" plan.txt || fail "stage 0 keeps no layer 8/9 probs: $(grep largest plan.txt)"
! grep "^  largest activation buffers:" plan.txt | grep -q "layer[0-7]\.probs" \
  || fail "stage 0 keeps probabilities of a recomputed layer: $(grep largest plan.txt)"
echo "ok: pretrain_llama2_70b_bf16_32p plan on 32 ranks: stage 0 activations $a0 (8 layers recomputed), stage 7 $a7 (1 layer)"
# Its 8 key/value heads do not split over 16 tensor-parallel ranks: the layout check names the key.
config_refused "$DATA/r1.2/pretrain_llama2_70b.yaml" \
  "\`model.model_config.n_kv_heads\` (8) is not divisible by \`parallel_config.model_parallel\` (16)" \
  --set parallel_config.pipeline_stage=1 --set parallel_config.model_parallel=16 --ranks 32
# Mixtral: a LlamaConfig with experts, its moe_config read as written; on 16 ranks (2 stages, expert_parallel 8),
# on 8 with pipeline_stage 1, and data_parallel 4 is refused naming the keys and an expert_parallel that works.
for f in r1.3/pretrain_mixtral-8x7b.yaml r1.1/finetune_mixtral-8x7b.yaml; do
  resolves "$f"
  "$BIN" config --config "$DATA/$f" "${NO_DATA[@]}" --ranks 16 > /dev/null 2> err.txt || fail "$f on 16 ranks: $(cat err.txt)"
  grep -q "moe_config.enable_sdrop: True\`: MindFormers' TopkRouterV2 drop order" err.txt || fail "$f: no enable_sdrop warning: $(cat err.txt)"
  "$BIN" config --config "$DATA/$f" --set parallel_config.pipeline_stage=1 "${NO_DATA[@]}" --ranks 8 > /dev/null 2>&1 || fail "$f on 8 ranks"
  config_refused "$DATA/$f" "\`parallel_config.data_parallel\` (4) is not divisible by \`parallel_config.expert_parallel\` (8)" \
    --set parallel_config.pipeline_stage=1 --set parallel_config.data_parallel=4
  grep -qF "use expert_parallel: 4" err.txt || fail "$f: no expert_parallel that works: $(cat err.txt)"
done
# configs/moe: each resolves on the ranks it asks for (the tiny ones without a warning).
for f in "$SRC"/configs/moe/*.yaml; do
  n=$("$BIN" config --config "$f" 2>/dev/null | awk '/^  data_parallel:/ {d=$2} /^  model_parallel:/ {m=$2} END {print d*m}')
  "$BIN" config --config "$f" "${NO_DATA[@]}" --ranks "$n" > /dev/null 2> err.txt || fail "$f on $n ranks: $(cat err.txt)"
  case "$(basename "$f")" in run_*) [ ! -s err.txt ] || fail "$f warns: $(cat err.txt)";; esac
  echo "ok: configs/moe/$(basename "$f") resolves on $n rank(s)"
done
# A GPT-2 key under a LlamaConfig is refused with what a Llama uses instead.
config_refused "$DATA/r1.0/run_llama2_7b.yaml" \
  "--set model.model_config.hidden_dropout_rate=0.1: not a LlamaConfig key: MindFormers' LlamaConfig has no dropout rate" \
  --set model.model_config.hidden_dropout_rate=0.1
# The tiny Llama loads without a warning (tensor-parallel on 2 ranks too), and its resolved config loads back to itself.
TINY_LLAMA="$SRC/configs/llama/run_llama_tiny.yaml"
"$BIN" config --config "$TINY_LLAMA" --set parallel_config.model_parallel=2 "${NO_DATA[@]}" --ranks 2 > a.yaml 2> err.txt \
  || fail "run_llama_tiny.yaml on 2 ranks: $(cat err.txt)"
[ ! -s err.txt ] || fail "run_llama_tiny.yaml warns: $(cat err.txt)"
"$BIN" config --config "$TINY_LLAMA" > a.yaml 2>/dev/null || fail "run_llama_tiny.yaml"
"$BIN" config --config a.yaml > b.yaml 2>/dev/null || fail "the resolved tiny Llama does not load"
cmp -s a.yaml b.yaml || fail "the resolved tiny Llama changes when loaded again: $(diff a.yaml b.yaml | head)"
echo "ok: configs/llama/run_llama_tiny.yaml resolves without a warning, on 1 and 2 ranks, and loads back to itself"

# An empty config (or one with only comments) is refused.
: > empty.yaml
config_refused empty.yaml "config empty.yaml is empty"
printf '# nothing but a comment\n' > comments.yaml
config_refused comments.yaml "config comments.yaml is empty"

bare_gpt2 tiny.yaml
# A bad --set is named as the override, not the file.
config_refused tiny.yaml "--set runner_config.train_step=5: unknown key; did you mean \`train_steps\`?" --set runner_config.train_step=5
! grep -q "tiny.yaml" err.txt || fail "the override's problem names the file: $(cat err.txt)"
config_refused tiny.yaml "--set load_checkpoint=/x/y: no such file or directory" --set load_checkpoint=/x/y
# A moe_config value that cannot be built names the key and a value that works (every rank, before any work).
config_refused tiny.yaml "--set moe_config.num_experts_chosen=3: \`moe_config.num_experts_chosen: 3\` is larger than \`moe_config.expert_num: 2\`" \
  --set moe_config.expert_num=2 --set moe_config.num_experts_chosen=3
run train timeout 60 mpirun -np 2 --oversubscribe "$BIN" train --config tiny.yaml --set moe_config.expert_num=2 \
  --set moe_config.num_experts_chosen=3
[ "$STATUS" -eq 2 ] || fail "train with num_experts_chosen > expert_num: status $STATUS: $(cat train.log)"
[ "$(grep -c 'is larger than' train.log)" -eq 1 ] || fail "the message is not printed once: $(cat train.log)"
echo "ok: train on 2 ranks with num_experts_chosen > expert_num stops before work (status 2)"
# A load_checkpoint that does not exist names the key, and stops every rank before any work.
cp tiny.yaml missing.yaml; echo "load_checkpoint: /x/y.safetensors" >> missing.yaml
config_refused missing.yaml "\`load_checkpoint: /x/y.safetensors\`: no such file or directory"
run train timeout 60 mpirun -np 2 --oversubscribe "$BIN" train --config missing.yaml
[ "$STATUS" -eq 2 ] || fail "train with a missing load_checkpoint: status $STATUS, expected 2: $(cat train.log)"
[ "$(grep -c 'no such file or directory' train.log)" -eq 1 ] || fail "the message is not printed once: $(cat train.log)"
! grep -q "step:\[" train.log || fail "training started: $(cat train.log)"
echo "ok: train on 2 ranks with a missing load_checkpoint stops before work (status $STATUS)"
