#!/usr/bin/env bash
# `gridformer config` on MindFormers' own files (tests/data/mindformers, see its README): each
# resolves with warnings only, or is refused (status 2) naming what is not built and then resolves
# with that key overridden. Their pipeline layouts (pipeline_stage, micro_batch_num, offset,
# gradient_accumulation_steps) resolve as written and pass the layout check on the ranks they ask for. Its Llama 2 and Mixtral files are read with LlamaConfig's keys, Mixtral's
# moe_config as written; configs/moe resolves on the ranks each file asks for. A config that cannot load stops with status 2 and a message naming its
# cause: an empty file, a bad --set (named as the override, not the file), a load_checkpoint that
# does not exist (under mpirun too, before any work).
set -uo pipefail
BUILD="$1"; SRC="$2"
BIN="$BUILD/bin/gridformer"
DATA="$SRC/tests/data/mindformers"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
fail() { echo "FAIL: $*"; exit 1; }

# resolves FILE [--set ...]: status 0, a resolved config on stdout, warnings only on stderr.
resolves() {
  local f=$1; shift
  "$BIN" config --config "$DATA/$f" "$@" > out.yaml 2> err.txt || fail "$f $*: status $?: $(cat err.txt)"
  grep -q "^model:" out.yaml || fail "$f: no resolved config printed"
  ! grep -v "^warning: " err.txt | grep -q . || fail "$f $*: more than warnings: $(cat err.txt)"
  ! grep -qi "unknown key" err.txt || fail "$f: an unknown key: $(cat err.txt)"
  echo "ok: $f $* ($(grep -c '^warning: ' err.txt) warning(s))"
}
# refused FILE MESSAGE [--set ...]: status 2 and MESSAGE on stderr.
refused() {
  local f=$1 msg=$2; shift 2
  "$BIN" config --config "$f" "$@" > out.yaml 2> err.txt; local status=$?
  [ "$status" -eq 2 ] || fail "$f $*: status $status, expected 2: $(cat err.txt)"
  grep -qF -- "$msg" err.txt || fail "$f $*: no '$msg' in: $(cat err.txt)"
  echo "ok: refused $(basename "$f") $*: $msg"
}

for f in run_gpt2.yaml run_gpt2_13b.yaml r1.1/run_gpt2_xl.yaml r1.3/pretrain_gpt2_13b_fp16.yaml \
         r1.3/finetune_gpt2_small_fp16.yaml; do
  resolves "$f"
done
# GPT-2 52B: 16 pipeline stages of 4 layers, 64 micro-batches, on 8 x 16 ranks.
resolves r1.2/run_gpt2_52b.yaml
grep -q "^    pipeline_scheduler: 1f1b$" out.yaml || fail "52b: the scheduler is not 1f1b: $(grep -n pipeline_scheduler out.yaml)"
"$BIN" config --config "$DATA/r1.2/run_gpt2_52b.yaml" --ranks 128 > /dev/null 2> err.txt || fail "52b on 128 ranks: $(cat err.txt)"
refused "$DATA/r1.2/run_gpt2_52b.yaml" \
  "\`parallel_config.micro_batch_num\` (8) is less than \`parallel_config.pipeline_stage\` (16): every stage needs a micro-batch of its own in flight; use micro_batch_num: 16" \
  --set parallel_config.micro_batch_num=8
refused "$DATA/r1.2/run_gpt2_52b.yaml" "\`model.model_config.num_layers\` (8) is fewer than the \`parallel_config.pipeline_stage\` (16) stages" \
  --set model.model_config.num_layers=8
resolves r1.3/pretrain_llama2_7b_common.yaml  # gradient_accumulation_steps: 8
# Their moe_config on GPT-2 blocks: a GPT-2 MoE of 8 experts over expert_parallel 8, in 2 pipeline stages.
for f in r1.3/pretrain_mixtral-8x7b_common.yaml r1.1/finetune_mixtral-8x7b_common.yaml; do
  resolves "$f"
  grep -q "^  expert_num: 8$" out.yaml || fail "$f: expert_num is not 8: $(grep -n expert_num out.yaml)"
  "$BIN" config --config "$DATA/$f" --ranks 16 > /dev/null 2> err.txt || fail "$f on 16 ranks: $(cat err.txt)"
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
refused "$DATA/r1.3/finetune_llama2_7b.yaml" "\`load_checkpoint: {path}/llama2_7b.ckpt\`: no such file or directory"
resolves r1.3/finetune_llama2_7b.yaml --set 'load_checkpoint=""'
resolves r1.2/pretrain_llama2_70b.yaml  # 8 stages of 10 layers, 128 micro-batches
grep -q "use_flash_attention: True\` with \`n_kv_heads: 8\` < \`num_heads: 64\`" err.txt || fail "no GQA flash warning: $(cat err.txt)"
"$BIN" config --config "$DATA/r1.2/pretrain_llama2_70b.yaml" --ranks 64 > /dev/null 2> err.txt || fail "70b on 64 ranks: $(cat err.txt)"
# Yi 34B (research/yi): a LlamaConfig in 4 stages split by offset [-1, 1, 1, -1] (14, 16, 16, 14 of 60 layers);
# its optimizer is Yi's own.
refused "$DATA/r1.3/pretrain_yi_34b.yaml" "\`optimizer.type: AdamWeightDecayX\`: unknown type"
resolves r1.3/pretrain_yi_34b.yaml --set optimizer.type=AdamWeightDecay
"$BIN" config --config "$DATA/r1.3/pretrain_yi_34b.yaml" --set optimizer.type=AdamWeightDecay --ranks 16 > /dev/null \
  2> err.txt || fail "yi_34b on 16 ranks: $(cat err.txt)"
refused "$DATA/r1.3/pretrain_yi_34b.yaml" "\`model.model_config.offset: [-1, 1, 1]\` has 3 entries, but \`parallel_config.pipeline_stage\` is 4" \
  --set optimizer.type=AdamWeightDecay --set "model.model_config.offset=[-1, 1, 1]"
# Its 8 key/value heads do not split over 16 tensor-parallel ranks: the layout check names the key.
refused "$DATA/r1.2/pretrain_llama2_70b.yaml" \
  "\`model.model_config.n_kv_heads\` (8) is not divisible by \`parallel_config.model_parallel\` (16)" \
  --set parallel_config.pipeline_stage=1 --set parallel_config.model_parallel=16 --ranks 32
# Mixtral: a LlamaConfig with experts, its moe_config read as written; on 16 ranks (2 stages, expert_parallel 8),
# on 8 with pipeline_stage 1, and data_parallel 4 is refused naming the keys and an expert_parallel that works.
for f in r1.3/pretrain_mixtral-8x7b.yaml r1.1/finetune_mixtral-8x7b.yaml; do
  resolves "$f"
  "$BIN" config --config "$DATA/$f" --ranks 16 > /dev/null 2> err.txt || fail "$f on 16 ranks: $(cat err.txt)"
  grep -q "moe_config.enable_sdrop: True\`: MindFormers' TopkRouterV2 drop order" err.txt || fail "$f: no enable_sdrop warning: $(cat err.txt)"
  "$BIN" config --config "$DATA/$f" --set parallel_config.pipeline_stage=1 --ranks 8 > /dev/null 2>&1 || fail "$f on 8 ranks"
  refused "$DATA/$f" "\`parallel_config.data_parallel\` (4) is not divisible by \`parallel_config.expert_parallel\` (8)" \
    --set parallel_config.pipeline_stage=1 --set parallel_config.data_parallel=4
  grep -qF "use expert_parallel: 4" err.txt || fail "$f: no expert_parallel that works: $(cat err.txt)"
done
# configs/moe: each resolves on the ranks it asks for (the tiny ones without a warning).
for f in "$SRC"/configs/moe/*.yaml; do
  n=$("$BIN" config --config "$f" 2>/dev/null | awk '/^  data_parallel:/ {d=$2} /^  model_parallel:/ {m=$2} END {print d*m}')
  "$BIN" config --config "$f" --ranks "$n" > /dev/null 2> err.txt || fail "$f on $n ranks: $(cat err.txt)"
  case "$(basename "$f")" in run_*) [ ! -s err.txt ] || fail "$f warns: $(cat err.txt)";; esac
  echo "ok: configs/moe/$(basename "$f") resolves on $n rank(s)"
done
# A GPT-2 key under a LlamaConfig is refused with what a Llama uses instead.
refused "$DATA/r1.0/run_llama2_7b.yaml" \
  "--set model.model_config.hidden_dropout_rate=0.1: not a LlamaConfig key: MindFormers' LlamaConfig has no dropout rate" \
  --set model.model_config.hidden_dropout_rate=0.1
# The tiny Llama loads without a warning (tensor-parallel on 2 ranks too), and its resolved config loads back to itself.
TINY_LLAMA="$SRC/configs/llama/run_llama_tiny.yaml"
"$BIN" config --config "$TINY_LLAMA" --set parallel_config.model_parallel=2 --ranks 2 > a.yaml 2> err.txt \
  || fail "run_llama_tiny.yaml on 2 ranks: $(cat err.txt)"
[ ! -s err.txt ] || fail "run_llama_tiny.yaml warns: $(cat err.txt)"
"$BIN" config --config "$TINY_LLAMA" > a.yaml 2>/dev/null || fail "run_llama_tiny.yaml"
"$BIN" config --config a.yaml > b.yaml 2>/dev/null || fail "the resolved tiny Llama does not load"
cmp -s a.yaml b.yaml || fail "the resolved tiny Llama changes when loaded again: $(diff a.yaml b.yaml | head)"
echo "ok: configs/llama/run_llama_tiny.yaml resolves without a warning, on 1 and 2 ranks, and loads back to itself"

# An empty config (or one with only comments) is refused.
: > empty.yaml
refused empty.yaml "config empty.yaml is empty"
printf '# nothing but a comment\n' > comments.yaml
refused comments.yaml "config comments.yaml is empty"

cat > tiny.yaml <<'YAML'
runner_config: {batch_size: 2, train_steps: 2}
train_dataset: {data_loader: {type: RandomTokens, seed: 5, num_samples: 16}}
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 101, seq_length: 16, hidden_size: 32, num_layers: 1, num_heads: 4}
YAML
# A bad --set is named as the override, not the file.
refused tiny.yaml "--set runner_config.train_step=5: unknown key; did you mean \`train_steps\`?" --set runner_config.train_step=5
! grep -q "tiny.yaml" err.txt || fail "the override's problem names the file: $(cat err.txt)"
refused tiny.yaml "--set load_checkpoint=/x/y: no such file or directory" --set load_checkpoint=/x/y
# A moe_config value that cannot be built names the key and a value that works (every rank, before any work).
refused tiny.yaml "--set moe_config.num_experts_chosen=3: \`moe_config.num_experts_chosen: 3\` is larger than \`moe_config.expert_num: 2\`" \
  --set moe_config.expert_num=2 --set moe_config.num_experts_chosen=3
timeout 60 mpirun -np 2 --oversubscribe "$BIN" train --config tiny.yaml --set moe_config.expert_num=2 \
  --set moe_config.num_experts_chosen=3 > train.txt 2>&1; status=$?
[ "$status" -eq 2 ] || fail "train with num_experts_chosen > expert_num: status $status: $(cat train.txt)"
[ "$(grep -c 'is larger than' train.txt)" -eq 1 ] || fail "the message is not printed once: $(cat train.txt)"
echo "ok: train on 2 ranks with num_experts_chosen > expert_num stops before work (status 2)"
# A load_checkpoint that does not exist names the key, and stops every rank before any work.
cp tiny.yaml missing.yaml; echo "load_checkpoint: /x/y.safetensors" >> missing.yaml
refused missing.yaml "\`load_checkpoint: /x/y.safetensors\`: no such file or directory"
timeout 60 mpirun -np 2 --oversubscribe "$BIN" train --config missing.yaml > train.txt 2>&1; status=$?
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "train with a missing load_checkpoint: status $status: $(cat train.txt)"
[ "$(grep -c 'no such file or directory' train.txt)" -eq 1 ] || fail "the message is not printed once: $(cat train.txt)"
! grep -q "step:\[" train.txt || fail "training started: $(cat train.txt)"
echo "ok: train on 2 ranks with a missing load_checkpoint stops before work (status $status)"
