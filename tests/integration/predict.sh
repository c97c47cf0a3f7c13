#!/usr/bin/env bash
# gridformer predict on tiny models trained here on the default corpus (real GPT-2 BPE):
#  * greedy with the KV cache generates, token for token, what recomputing the whole prefix for
#    every token generates (use_past: False), for a batch of prompts of different lengths, and the
#    same as decoding them one at a time: GPT-2, Llama (grouped-query heads, RoPE) and Mixtral (MoE);
#  * stdout is exactly each prompt and its continuation (decoded by the Python GPT-2 reference), in
#    prompt order; the log and the throughput line go to stderr; metrics.jsonl counts the tokens;
#  * --max_new_tokens is kept; sampling (top_k, top_p, temperature) with a seed is reproducible,
#    identical under model_parallel 2 (heads and vocabulary split) and pipeline_stage 2, and differs
#    with another seed; greedy under model_parallel 2, Mixtral under expert_parallel 2 and GPT-2 and
#    Mixtral under pipeline_stage 2 generate what one rank does;
#  * an empty prompt, a prompt that leaves no room under max_decode_length, text without the
#    tokenizer's files, interleaved pipeline chunks and `train` with run_mode: predict are refused
#    with status 2.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
CHECK="$SRC/tests/integration/predict_check.py"
command -v mpirun >/dev/null || fail "mpirun missing (openmpi-bin)"
[ -f "$VOCAB" ] && [ -f "$CORPUS.idx" ] || fail "run scripts/setup.sh (vocabulary, corpus)"
common() {
  cat <<YAML
seed: 3
runner_config: {train_steps: 40, batch_size: 8}
lr_schedule: {type: cosine, learning_rate: 0.004, lr_end: 0.0004, warmup_steps: 4}
optimizer: {type: AdamW, beta1: 0.9, beta2: 0.95, weight_decay: 0.1}
train_dataset: {data_loader: {type: MegatronDataset, data_path: $CORPUS, split: "949,50,1"}}
callbacks:
  - {type: MFLossMonitor, per_print_times: 20}
  - {type: CheckpointMonitor, prefix: tiny, save_checkpoint_steps: 1000, keep_checkpoint_max: 1}
processor: {tokenizer: {type: GPT2Tokenizer, vocab_file: $VOCAB, merge_file: $MERGES}}
YAML
}
{ common; cat <<YAML
model:
  arch: {type: GPT2LMHeadModel}
  model_config: {type: GPT2Config, vocab_size: 50257, seq_length: 32, hidden_size: 64, num_layers: 2, num_heads: 4,
                 max_position_embeddings: 64, use_past: True, max_decode_length: 40}
YAML
} > gpt2.yaml
{ common; cat <<YAML
model:
  arch: {type: LlamaForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 50257, seq_length: 32, hidden_size: 64, num_layers: 2, num_heads: 4,
                 n_kv_heads: 2, intermediate_size: 96, use_past: True, max_decode_length: 40, eos_token_id: 50256}
YAML
} > llama.yaml
{ cat llama.yaml; echo "moe_config: {expert_num: 4, num_experts_chosen: 2, aux_loss_factor: 0.01}"; } > mixtral.yaml

for m in gpt2 llama mixtral; do train $m $m.yaml; done

PROMPTS=(--predict_data "The" --predict_data "A fool and his money are soon" --predict_data "Q: What is the difference between")
predict() {  # predict MODEL NAME [args...]: ids in NAME.jsonl, stdout in NAME.out, stderr in NAME.err
  local m=$1 name=$2; shift 2
  "$BIN" predict --config $m.yaml --set output_dir=$m --load_checkpoint $m "${PROMPTS[@]}" --ids_out $name.jsonl "$@" \
    > $name.out 2> $name.err || { cat $name.err; fail "predict $name"; }
}
mpredict() {  # mpredict NP MODEL NAME [args...]
  local np=$1 m=$2 name=$3; shift 3
  mpirun -np $np --oversubscribe "$BIN" predict --config $m.yaml --set output_dir=$m --load_checkpoint $m "${PROMPTS[@]}" \
    --ids_out $name.jsonl "$@" > $name.out 2> $name.err || { cat $name.err; fail "predict $name"; }
}

for m in gpt2 llama mixtral; do
  predict $m $m.cache
  predict $m $m.nocache --use_past false
  $PY "$CHECK" same $m.cache.jsonl $m.nocache.jsonl || fail "$m: the KV cache changes greedy tokens"
  predict $m $m.one --predict_batch_size 1
  $PY "$CHECK" same $m.cache.jsonl $m.one.jsonl || fail "$m: the batch changes greedy tokens"
  $PY "$CHECK" stdout $m.cache.out $m.cache.jsonl "$VOCAB" "$MERGES" 50256
  $PY "$CHECK" stdout $m.one.out $m.one.jsonl "$VOCAB" "$MERGES" 50256
  grep -q "predict: 3 prompts, .* prompt tokens in .* decode tokens in" $m.cache.err || { cat $m.cache.err; fail "no throughput line"; }
  $PY "$CHECK" metrics $m/metrics.jsonl $m.cache.jsonl
  echo "ok: $m: cache = no cache = one at a time; stdout and metrics"
done

predict gpt2 new --max_new_tokens 7
$PY "$CHECK" lengths new.jsonl 7 50256
SAMPLE=(--do_sample --top_k 40 --top_p 0.9 --temperature 0.8 --max_new_tokens 24)
predict gpt2 s7a "${SAMPLE[@]}" --seed 7
predict gpt2 s7b "${SAMPLE[@]}" --seed 7
predict gpt2 s8 "${SAMPLE[@]}" --seed 8
$PY "$CHECK" same s7a.jsonl s7b.jsonl || fail "sampling with one seed is not reproducible"
$PY "$CHECK" differ s7a.jsonl s8.jsonl || fail "another seed samples the same tokens"
MP2=(--set parallel_config.model_parallel=2 --set parallel_config.vocab_emb_dp=False)
mpredict 2 gpt2 s7mp2 "${MP2[@]}" "${SAMPLE[@]}" --seed 7
$PY "$CHECK" same s7a.jsonl s7mp2.jsonl || fail "sampling under model_parallel 2 differs from one rank"
mpredict 2 gpt2 mp2 "${MP2[@]}"
$PY "$CHECK" same gpt2.cache.jsonl mp2.jsonl || fail "greedy under model_parallel 2 differs"
[ "$(grep -c . s7mp2.out)" -ge 3 ] || fail "under mpirun the text is printed once (rank 0)"
$PY "$CHECK" stdout s7mp2.out s7mp2.jsonl "$VOCAB" "$MERGES" 50256
mpredict 2 llama llmp2 "${MP2[@]}"
$PY "$CHECK" same llama.cache.jsonl llmp2.jsonl || fail "Llama greedy under model_parallel 2 differs"
mpredict 2 mixtral ep2 --set parallel_config.data_parallel=2 --set parallel_config.expert_parallel=2
$PY "$CHECK" same mixtral.cache.jsonl ep2.jsonl || fail "Mixtral greedy under expert_parallel 2 differs"
PP2=(--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2)
mpredict 2 gpt2 pp2 "${PP2[@]}"
$PY "$CHECK" same gpt2.cache.jsonl pp2.jsonl || fail "greedy under pipeline_stage 2 differs"
$PY "$CHECK" stdout pp2.out pp2.jsonl "$VOCAB" "$MERGES" 50256
mpredict 2 gpt2 s7pp2 "${PP2[@]}" "${SAMPLE[@]}" --seed 7
$PY "$CHECK" same s7a.jsonl s7pp2.jsonl || fail "sampling under pipeline_stage 2 differs from one rank"
mpredict 2 mixtral mxpp2 "${PP2[@]}"
$PY "$CHECK" same mixtral.cache.jsonl mxpp2.jsonl || fail "Mixtral greedy under pipeline_stage 2 differs"
echo "ok: max_new_tokens, seeded sampling (mp1 = mp2 = pp2, another seed differs), greedy mp2, ep2 and pp2"

# quiet_refused "MESSAGE" ARGS...: status 2, MESSAGE in stderr, nothing on stdout (lib's refused reads both together)
quiet_refused() {
  local msg=$1; shift
  set +e; "$@" > refused.out 2> refused.err; local st=$?; set -e
  [ $st -eq 2 ] || { cat refused.err; fail "status $st, wanted 2: $*"; }
  grep -qF -- "$msg" refused.err || { cat refused.err; fail "wanted '$msg'"; }
  [ ! -s refused.out ] || fail "a refused run printed to stdout"
}
quiet_refused "prompt 2 is empty" "$BIN" predict --config gpt2.yaml --set output_dir=gpt2 --predict_data "Hi" --predict_data ""
quiet_refused "nothing would be generated; raise model_config.max_decode_length" \
  "$BIN" predict --config gpt2.yaml --set output_dir=gpt2 --predict_ids "$(seq -s ' ' 1 40)"
quiet_refused "predict encodes text with the GPT-2 BPE: set processor.tokenizer.vocab_file and merge_file" \
  "$BIN" predict --config gpt2.yaml --set output_dir=gpt2 --set processor.tokenizer.vocab_file='' --predict_data "Hi"
quiet_refused "predict runs one model chunk per pipeline stage" mpirun -np 2 --oversubscribe "$BIN" predict --config gpt2.yaml \
  --set output_dir=gpt2 "${PP2[@]}" --set model.model_config.pp_interleave_num=2 --set model.model_config.num_layers=4 \
  --set parallel.pipeline_config.pipeline_interleave=True --predict_data "Hi"
quiet_refused "run_mode: predict generates text from prompts: run \`gridformer predict" \
  "$BIN" train --config gpt2.yaml --set output_dir=gpt2 --set run_mode=predict
echo "ok: refusals"
echo PASS
