#!/usr/bin/env bash
# A MindFormers GPT-2 in MindSpore's .ckpt format trains like the same weights in Hugging Face's
# format: tools/write_mindspore_ckpt.py writes the golden tiny GPT-2 (tests/golden/hf_tiny_*) as
# MindFormers' convert_weight.py would, through the classes protoc generates from our copy of
# MindSpore's checkpoint.proto, and `gridformer train` from the .ckpt logs the same loss at every
# step, to the last bit, as from the .safetensors (and another loss from random weights, so the
# comparison is not empty). float32 (as a training checkpoint: AdamW moments, step counters and
# loss-scale state to skip; tensors cut into many chunks; save_checkpoint's CRC trailer), float16
# and bfloat16 files of the float16 / bfloat16 goldens, and float16 rounded by the tool from the
# float32 golden against the float16 golden (PyTorch's rounding of the same weights). A truncated
# .ckpt and a Llama given a .ckpt are refused (status 2), naming the file and what to do.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
# lib's $PY, /usr/bin/python3: numpy and python3-protobuf (the pyenv python3 on PATH has neither)
"$PY" -c 'import numpy, google.protobuf' 2>/dev/null ||
  fail "$PY lacks numpy or protobuf: apt-get install python3-numpy python3-protobuf (scripts/setup.sh does)"
command -v protoc >/dev/null || fail "no protoc: apt-get install protobuf-compiler (scripts/setup.sh does)"
G="$SRC/tests/golden"

golden_gpt2 hf.yaml seed=5 steps=3 optimizer="{type: AdamWeightDecay, beta1: 0.9, beta2: 0.95, weight_decay: 0.01}" \
  top="lr_schedule: {type: constant, learning_rate: 0.001, warmup_steps: 0}"

# from NAME [load_checkpoint]: lib's train into out_NAME (console in out_NAME.log) logging steps 1, 2, 3; its
# per-step losses in NAME.loss.
from() {
  local name=$1; shift
  local set=(); [ $# -gt 0 ] && set=(--set "load_checkpoint=$1")
  train "out_$name" hf.yaml "${set[@]}"
  losses "out_$name" > "$name.loss"
  [ "$(cut -d' ' -f1 "$name.loss" | tr '\n' ' ')" = "1 2 3 " ] || fail "$name logs steps $(cut -d' ' -f1 "$name.loss" | tr '\n' ' ')"
  grep -o 'loss: [^ ,]*' "out_$name.log" >> "$name.loss"  # the console's figures too
}

same() {  # same A B: identical losses at every step
  cmp -s "$1.loss" "$2.loss" || { paste "$1.loss" "$2.loss"; fail "$1 and $2 give different losses"; }
  echo "$1 = $2: $(head -1 "$1.loss")"
}

# 1. float32 as a training checkpoint, in 1000-byte chunks, with the CRC trailer.
"$PY" "$SRC/tools/write_mindspore_ckpt.py" "$G/hf_tiny_f32.safetensors" f32.ckpt \
  --with-optimizer-state --chunk-bytes 1000 --crc > w1.txt || { cat w1.txt; fail "writing f32.ckpt"; }
from hf_f32 "$G/hf_tiny_f32.safetensors"
from ms_f32 "$PWD/f32.ckpt"
same ms_f32 hf_f32
from random
! cmp -s random.loss hf_f32.loss || fail "random weights give the loss of the loaded ones: nothing was loaded"
# 38 weight entries (2 layers x 17, the final norm, wte, wpe): 38 adam_m + 38 adam_v + learning_rate,
# global_step, scale_sense, current_iterator_step, last_overflow_iterator_step, epoch_num, step_num,
# loss_scale; the two layers' attention.beta (Hugging Face's attn.bias buffers).
grep -q "loaded weights from .*f32.ckpt (MindSpore .ckpt, MindFormers' GPT-2 names; skipped 84 optimizer-state and training-counter entries and 2 attention-mask buffers)" out_ms_f32.log ||
  fail "no load line with the skipped entries: $(grep 'loaded weights' out_ms_f32.log)"

# 2. float16 and bfloat16 files of the float16 / bfloat16 goldens: the same values, exactly.
for dt in f16:float16 bf16:bfloat16; do
  "$PY" "$SRC/tools/write_mindspore_ckpt.py" "$G/hf_tiny_${dt%%:*}.safetensors" "${dt%%:*}.ckpt" --dtype "${dt##*:}" > /dev/null
  from "hf_${dt%%:*}" "$G/hf_tiny_${dt%%:*}.safetensors"
  from "ms_${dt%%:*}" "$PWD/${dt%%:*}.ckpt"
  same "ms_${dt%%:*}" "hf_${dt%%:*}"
done
! cmp -s hf_f16.loss hf_f32.loss || fail "the float16 weights give the float32 loss: the comparison cannot tell them apart"

# 3. float16 rounded by the tool from the float32 golden: the float16 golden is PyTorch's .half()
# of the same weights (round to nearest even, as numpy's cast), so the runs agree exactly.
"$PY" "$SRC/tools/write_mindspore_ckpt.py" "$G/hf_tiny_f32.safetensors" f32_as_f16.ckpt --dtype float16 > /dev/null
from ms_f32_as_f16 "$PWD/f32_as_f16.ckpt"
same ms_f32_as_f16 hf_f16

# 4. Refusals, naming the file.
head -c 20000 f32.ckpt > cut.ckpt
refused 2 "the file is truncated" cut "$BIN" train --config hf.yaml --set load_checkpoint="$PWD/cut.ckpt" --set output_dir=cut
grep -q "cut.ckpt: .*the file is truncated" cut.log || fail "truncation not reported: $(tail -2 cut.log)"
cat > llama.yaml <<'YAML'
runner_config: {batch_size: 1, train_steps: 1}
train_dataset: {data_loader: {type: RandomTokens, seed: 3}}
model:
  arch: {type: LlamaForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 300, seq_length: 16, hidden_size: 32, num_layers: 2, num_heads: 2}
YAML
refused 2 "f32.ckpt: a MindSpore .ckpt is read for a dense GPT-2 only" llama "$BIN" train --config llama.yaml \
  --set load_checkpoint="$PWD/f32.ckpt" --set output_dir=llama
echo "mindspore_ckpt: all checks passed"
