#!/usr/bin/env bash
# The refactor check: 20 steps of the tiny GPT-2 (dropout on), Llama and Mixtral configs (clipping on)
# in fp32 and bf16, on 1 rank and at dp2, dp2 with 2 accumulated micro-batches, mp2+sp, pp2 (1F1B and ZB-H1),
# the fused attention at T 160 on 2 threads (causal, and over packed documents) and at mp2+sp, and, for
# Mixtral, ep2; LoRA on the Llama and the Mixtral (one rank, mp2+sp, pp2); each
# run's metrics.jsonl and gathered final weights (--save-weights) under OUT/<model>_<dtype>_<layout>/.
#   bash scripts/bitwise_matrix.sh BIN OUT            # runs the matrix with BIN (build/bin/gridformer)
#   bash scripts/bitwise_matrix.sh --compare A B      # every run of A against B: losses, gradient
#                                                     # norms and weights bit for bit
# A refactor that should not change numbers is run with the binary before it and after it, and
# --compare must report every run identical. Not a ctest: it needs the earlier binary.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ "${1:-}" = "--compare" ]; then
  A="$2"; B="$3"; bad=0; n=0
  for d in "$A"/*/; do
    name=$(basename "$d"); n=$((n + 1))
    if [ ! -f "$B/$name/weights.safetensors" ]; then echo "MISSING $name in $B"; bad=$((bad + 1)); continue; fi
    # loss and grad_norm of every step line, as printed (nlohmann's shortest round-trip form)
    la=$(python3 -c 'import json,sys; [print(j["step"], repr(j["loss"]), repr(j["grad_norm"])) for j in map(json.loads, open(sys.argv[1])) if "loss" in j and "step" in j]' "$d/metrics.jsonl")
    lb=$(python3 -c 'import json,sys; [print(j["step"], repr(j["loss"]), repr(j["grad_norm"])) for j in map(json.loads, open(sys.argv[1])) if "loss" in j and "step" in j]' "$B/$name/metrics.jsonl")
    steps=$(printf '%s\n' "$la" | wc -l)
    if [ "$la" != "$lb" ]; then echo "DIFFER $name: losses/grad norms"; { diff <(echo "$la") <(echo "$lb") | head -4 || true; }; bad=$((bad + 1))
    elif ! cmp -s "$d/weights.safetensors" "$B/$name/weights.safetensors"; then echo "DIFFER $name: weights"; bad=$((bad + 1))
    else echo "same   $name ($steps steps: losses, grad norms, weights bitwise)"; fi
  done
  echo "$((n - bad)) identical, $bad different"
  [ "$bad" -eq 0 ]
  exit
fi

BIN="$(realpath "$1")"; OUT="$(realpath -m "$2")"
# A run appends to its metrics.jsonl: a matrix written over an earlier one would compare as different.
if [ -d "$OUT" ] && [ -n "$(ls -A "$OUT")" ]; then
  echo "bitwise_matrix: $OUT is not empty (an earlier matrix?): remove it or name another directory" >&2
  exit 2
fi
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
# Both binaries must choose the same fp32 GEMM backend: the machine probe each reads is pinned.
export GF_MACHINE_PROBE="${GF_MACHINE_PROBE:-$ROOT/build/machine_probe.json}"
cd "$ROOT"
COMMON=(--set runner_config.train_steps=20 --set model.model_config.seq_length=32
        --set model.model_config.num_layers=4 --set model.model_config.hidden_size=64
        --set model.model_config.num_heads=4 --set callbacks='[{type: MFLossMonitor, per_print_times: 1}]'
        --set runner_wrapper.use_clip_grad=True --set runner_wrapper.max_grad_norm=0.5)
run() {  # NAME CONFIG NP [--set ...]
  local name=$1 cfg=$2 np=$3; shift 3
  local cmd=("$BIN" train --config "$cfg" "${COMMON[@]}" --set output_dir="$OUT/$name"
             --save-weights "$OUT/$name/weights.safetensors" "$@")
  if [ "$np" -eq 1 ]; then "${cmd[@]}" > "$OUT/$name.log" 2>&1
  else mpirun -np "$np" --oversubscribe "${cmd[@]}" > "$OUT/$name.log" 2>&1; fi || {
    tail -20 "$OUT/$name.log"; echo "FAIL: $name"; exit 1; }
  echo "ran $name"
}
PP="--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=4"
for model in gpt2:configs/gpt2/run_gpt2_tiny.yaml llama:configs/llama/run_llama_tiny.yaml \
             mixtral:configs/moe/run_mixtral_tiny.yaml; do
  m=${model%%:*}; cfg=${model#*:}
  for dtype in float32 bfloat16; do
    D=(--set model.model_config.compute_dtype=$dtype)
    # dropout on where the architecture has it (LlamaConfig has no dropout keys)
    [ "$m" = gpt2 ] && D+=(--set model.model_config.hidden_dropout_rate=0.1 --set model.model_config.attention_dropout_rate=0.1)
    p="${m}_${dtype}"
    run "${p}_one" "$cfg" 1 "${D[@]}" --set runner_config.batch_size=8
    run "${p}_dp2" "$cfg" 2 "${D[@]}" --set runner_config.batch_size=4 --set parallel_config.data_parallel=2
    # gradient accumulation: the data-parallel reduction starts in the last micro-batch's backward
    run "${p}_dp2_acc2" "$cfg" 2 "${D[@]}" --set runner_config.batch_size=2 --set parallel_config.data_parallel=2 \
      --set runner_config.gradient_accumulation_steps=2
    run "${p}_mp2sp" "$cfg" 2 "${D[@]}" --set runner_config.batch_size=8 --set parallel_config.model_parallel=2 \
      --set parallel_config.use_seq_parallel=True
    run "${p}_pp2_1f1b" "$cfg" 2 "${D[@]}" --set runner_config.batch_size=2 $PP \
      --set parallel.pipeline_config.pipeline_scheduler=1f1b
    run "${p}_pp2_zbh1" "$cfg" 2 "${D[@]}" --set runner_config.batch_size=2 $PP \
      --set parallel.pipeline_config.pipeline_scheduler=zero_bubble_h1
    if [ "$m" = mixtral ]; then
      run "${p}_ep2" "$cfg" 2 "${D[@]}" --set runner_config.batch_size=4 --set parallel_config.data_parallel=2 \
        --set parallel_config.expert_parallel=2
    fi
    # the fused attention (at T 32 the layers take the unfused one): 160 rows are 3 query tiles of 64
    # (fp32) or 2 of 128 (bf16 products), the last ones partial; 2 threads
    OMP_NUM_THREADS=2 run "${p}_flash" "$cfg" 1 "${D[@]}" --set runner_config.batch_size=2 \
      --set model.model_config.seq_length=160 --set model.model_config.use_flash_attention=True
    # ... and over packed documents (reset_attention_mask: each row's first visible key, AttentionShape::key_lo)
    OMP_NUM_THREADS=2 run "${p}_flash_docs" "$cfg" 1 "${D[@]}" --set runner_config.batch_size=2 \
      --set model.model_config.seq_length=160 --set model.model_config.use_flash_attention=True \
      --set train_dataset.data_loader.reset_attention_mask=True --set train_dataset.data_loader.eod_token_id=50256
    # ... and split over two tensor-parallel ranks with sequence parallelism (the bf16 step gathers its kept
    # bf16 norm outputs; the fused core's q|k|v is kept in bf16)
    run "${p}_flash_mp2sp" "$cfg" 2 "${D[@]}" --set runner_config.batch_size=2 \
      --set model.model_config.seq_length=160 --set model.model_config.use_flash_attention=True \
      --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=True
  done
done
# LoRA (fp32, as LoRA computes): adapters on every projection of the Llama (with lora_dropout) and on the Mixtral's
# attention and experts, on one rank, at mp2 + SP and at pp2 (1F1B)
for model in llama:configs/llama/run_llama_tiny.yaml mixtral:configs/moe/run_mixtral_tiny.yaml; do
  m=${model%%:*}; cfg=${model#*:}
  T='[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]'; DR=0.05
  if [ "$m" = mixtral ]; then T='[q_proj, v_proj, w1, w2, w3]'; DR=0.0; fi
  L=(--set "model.model_config.pet_config={peft_type: LORA, r: 4, lora_alpha: 8, lora_dropout: $DR, target_modules: $T}")
  run "${m}_lora_one" "$cfg" 1 "${L[@]}" --set runner_config.batch_size=8
  run "${m}_lora_mp2sp" "$cfg" 2 "${L[@]}" --set runner_config.batch_size=8 --set parallel_config.model_parallel=2 \
    --set parallel_config.use_seq_parallel=True
  run "${m}_lora_pp2_1f1b" "$cfg" 2 "${L[@]}" --set runner_config.batch_size=2 $PP \
    --set parallel.pipeline_config.pipeline_scheduler=1f1b
done
echo "matrix written to $OUT"
