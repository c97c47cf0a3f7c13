#!/usr/bin/env bash
# Ours -> Megatron-core's layout -> torch.load -> Megatron-core's model (the Megatron issue: "ours -> Megatron format ->
# torch.load -> the same PyTorch model: equal logits"). Golden Hugging Face weights with the logits a PyTorch
# transcription of Hugging Face's modeling file computed from them (Llama: GQA, SwiGLU, RMSNorm, RoPE, untied;
# Mixtral: 4 experts, top 2; Qwen2: biases on q, k and v, tied) go through `convert --format megatron` at TP 2 (Mixtral
# also at EP 2, as GroupedMLP's weights and as local_experts; Transformer Engine's names and local's), and
# megatron_core_forward.py, a PyTorch transcription of Megatron-core's GPTModel (core_r0.6.0) that reads the shard
# files as Megatron cuts them, computes the golden's logits from them within 1e-5 of the largest.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
need_python torch

# hf NAME GOLDEN CONFIG_JSON: a Hugging Face directory NAME of the golden's `weights.` tensors and the config.
hf() {
  mkdir -p "$1"
  printf '%s\n' "$3" > "$1/config.json"
  "$PY" - "$SRC/tests/integration" "$2" "$1/model.safetensors" <<'PY' || fail "$1: the golden's weights"
import sys
sys.path.insert(0, sys.argv[1])
import st_io
t, _ = st_io.read(sys.argv[2])
st_io.write(sys.argv[3], {k[len("weights."):]: v for k, v in t.items() if k.startswith("weights.")})
PY
}
# The configs the goldens were made with (their metadata: tools/make_llama_golden.py, tools/make_moe_golden.py).
LLAMA='"hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
  "num_hidden_layers": 2, "head_dim": 16, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "max_position_embeddings": 32,
  "vocab_size": 96, "tie_word_embeddings": false, "hidden_act": "silu"'
hf llama "$SRC/tests/golden/llama_tiny.safetensors" "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", $LLAMA}"
hf mixtral "$SRC/tests/golden/mixtral_tiny.safetensors" \
  "{\"architectures\": [\"MixtralForCausalLM\"], \"model_type\": \"mixtral\", \"num_local_experts\": 4, \"num_experts_per_tok\": 2, $LLAMA}"
hf qwen2 "$SRC/tests/golden/families/qwen2.safetensors" "$(cat "$SRC/tests/golden/families/qwen2/config.json")"

# forward NAME HF GOLDEN CONVERT_ARGS...: the Megatron-core checkpoint NAME, and its forward against the golden.
forward() {
  local name=$1 from=$2 golden=$3; shift 3
  run "$name" "$BIN" convert --from "$from" --to "$name" --format megatron "$@"
  ((STATUS == 0)) || { cat "$name.log"; fail "$name: convert --format megatron $*"; }
  "$PY" "$SRC/tests/integration/megatron_core_forward.py" "$name" "$golden" > "$name.fwd" 2>&1 ||
    { cat "$name.fwd"; fail "$name: Megatron-core's forward of the files is not the golden's"; }
  ok "$(cat "$name.fwd")"
}
forward llama_te_tp2 llama "$SRC/tests/golden/llama_tiny.safetensors" --tensor-model-parallel-size 2
forward llama_local llama "$SRC/tests/golden/llama_tiny.safetensors" --transformer-impl local
forward mixtral_grouped mixtral "$SRC/tests/golden/mixtral_tiny.safetensors" --tensor-model-parallel-size 2 \
  --expert-model-parallel-size 2 --moe-grouped-gemm
forward mixtral_local mixtral "$SRC/tests/golden/mixtral_tiny.safetensors" --expert-model-parallel-size 2 --transformer-impl local
forward qwen2_tp2 qwen2 "$SRC/tests/golden/families/qwen2.safetensors" --tensor-model-parallel-size 2

# It can fail: the same forward with linear_qkv's groups read in the wrong order (q, k, v of all heads at once, the
# Hugging Face order) is far from the golden.
"$PY" - "$SRC/tests/integration" llama_te_tp2 "$SRC/tests/golden/llama_tiny.safetensors" <<'PY' || fail "a wrong q/k/v order was not seen"
import sys, torch
sys.path.insert(0, sys.argv[1])
import megatron_core_forward as f
files = f.shards(sys.argv[2])
w, experts, args = f.join(files, 2, 1)
for k in [k for k in w if k.endswith("linear_qkv.weight")]:
    q, kk, v = torch.split(w[k], [64, 32, 32])  # rows regrouped as if they were Hugging Face's q | k | v
    groups = [torch.cat([q[g * 32:(g + 1) * 32], kk[g * 16:(g + 1) * 16], v[g * 16:(g + 1) * 16]]) for g in range(2)]
    w[k] = torch.cat(groups)
g, _ = f.st_io.read(sys.argv[3])
got = f.forward(g["tokens"].long()[:, :16], w, experts, args)[..., :96].reshape(-1, 96)
rel = ((got - g["logits"]).abs().max() / g["logits"].abs().max()).item()
print(f"q/k/v misordered: {rel:.2e} relative")
assert rel > 1e-3
PY
ok "a misordered linear_qkv is seen by the forward"
