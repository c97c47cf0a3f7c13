#!/usr/bin/env bash
# LoRA's pet_config.loss_vocab_chunk: the frozen head's logits and cross entropy a vocabulary chunk at a time, its
# input gradient made in the forward (online softmax), so the [tokens, vocabulary] logits are never held.
#  * on one rank with chunks of 16 rows of GPT-2's 101 (six whole and a last one of 5), one chunk of the whole
#    vocabulary, and a chunk wider than the vocabulary, and at dp2, mp2 + sequence parallel (the head whole on each
#    rank: vocab_emb_dp True), pp2 (the last stage's copy of the tied embedding) and pp2 under ZB-H1 (the shared
#    logits buffer, the weight passes deferred): the losses within 1e-5 relative at every step, and the adapters after
#    the last step, of the same run (the same layout) with the whole logits, as compare_runs.py holds a layout's (the
#    chunked loss changes only the order of the float sums: the softmax's denominator and the gradient's sum over the
#    vocabulary, accumulated a chunk at a time and rescaled as the running maximum moves);
#  * the same with the base in bf16 (pet_config.base_dtype bfloat16), against its whole-logits run;
#  * the plan of a chunked run holds one chunk of logits in place of the whole (`gridformer plan --json`'s bytes);
#  * refused before any step, naming the key: a negative chunk, a chunk with a vocabulary-parallel head.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
# AdamW's eps 1e-6, as tests/integration/lora.sh's (why: its comment at lora.yaml); no dropout.
random_gpt2 lora.yaml batch=4 steps=10 optimizer="{type: AdamW, beta1: 0.9, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1}" \
  model="pet_config: {r: 4, lora_alpha: 8, target_modules: [c_attn, c_proj, c_fc]}"
CHUNK="--set model.model_config.pet_config.loss_vocab_chunk"
DP2="--set parallel_config.data_parallel=2 --set runner_config.batch_size=2"
PP2="--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 --set runner_config.batch_size=2"
MP2="--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True --set parallel_config.vocab_emb_dp=True"
layout_train 1 whole lora.yaml
layout_train 1 c16 lora.yaml $CHUNK=16
layout_train 1 c101 lora.yaml $CHUNK=101
layout_train 1 c4096 lora.yaml $CHUNK=4096
"$PY" "$SRC/tests/integration/compare_runs.py" whole c16 c101 c4096 || fail "a chunked loss is not the whole logits' loss"
# The runs are not the same computation: the chunked one differs from the whole logits' somewhere (rounding).
! (same_losses whole c16) >/dev/null 2>&1 || ! cmp -s whole/weights.safetensors c16/weights.safetensors \
  || fail "chunks of 16 gave the whole logits' bits: the chunked loss did not run"
# Each layout against its own whole-logits run: the layouts' own rounding is not the chunked loss's (mp2 + SP moves
# this model's h.1.mlp.c_proj.lora_B by 9.7e-6 of compare_runs.py's bound from one rank's with the whole logits).
for l in dp2 mp2_sp pp2 pp2_zb; do
  case $l in
    dp2) set -- $DP2 ;;
    mp2_sp) set -- $MP2 ;;
    pp2) set -- $PP2 ;;
    pp2_zb) set -- $PP2 --set parallel.pipeline_config.pipeline_scheduler=zero_bubble_h1 ;;
  esac
  layout_train 2 "w_$l" lora.yaml "$@"
  layout_train 2 "c16_$l" lora.yaml $CHUNK=16 "$@"
  "$PY" "$SRC/tests/integration/compare_runs.py" "w_$l" "c16_$l" || fail "$l: the chunked loss is not the whole logits' loss"
done
ok "loss_vocab_chunk 16, 101, 4096 on one rank, 16 at dp2, mp2 + SP, pp2 and pp2 ZB-H1: the whole logits' run"

BF16="--set model.model_config.pet_config.base_dtype=bfloat16"
layout_train 1 bf16_whole lora.yaml $BF16
layout_train 1 bf16_c16 lora.yaml $BF16 $CHUNK=16
"$PY" "$SRC/tests/integration/compare_runs.py" bf16_whole bf16_c16 || fail "bf16 base: the chunked loss is not the whole logits'"
ok "base_dtype bfloat16 with loss_vocab_chunk 16: its whole logits' run"

# The plan (`gridformer plan --json`'s activation bytes): the logits of N = 4 x 16 rows over the padded vocabulary
# (101 up to vocab_pad_multiple 128) give way to one chunk of N x 16 logits, the input gradient N x C (C = 32) and
# the running denominator N (every buffer a multiple of 16 floats, so no alignment padding changes):
# 4 x 64 x (128 - 16 - 32 - 1) = 20224 bytes fewer.
act() { "$BIN" plan --config lora.yaml --json "$@" | "$PY" -c 'import json, sys; print(int(json.load(sys.stdin)["ranks"][0]["activations"]))'; }
whole=$(act) chunked=$(act $CHUNK=16)
((whole - chunked == 20224)) || fail "plan: activations $whole (whole logits) and $chunked (chunks of 16), not 20224 bytes apart"
ok "plan: activations $whole -> $chunked bytes, one chunk of logits in place of the whole"

refused 2 "loss_vocab_chunk=-1: the vocabulary rows of one chunk" neg "$BIN" train --config lora.yaml --set output_dir=neg $CHUNK=-1
refused 2 "with a vocabulary-parallel head (model_parallel 2): not built" vp "$BIN" train --config lora.yaml --set output_dir=vp $CHUNK=16 \
  --set parallel_config.model_parallel=2 --set parallel_config.vocab_emb_dp=False
