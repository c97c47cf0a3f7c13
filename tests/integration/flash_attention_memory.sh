#!/usr/bin/env bash
# Fused attention at `seq_length: 8192` (the length MindSpeed's MoE example trains at): one
# training step of a small GPT-2 (2 layers, hidden 64, 2 heads, vocab 1000, batch 1, dropout 0.1)
# with `use_flash_attention: True`, on 2 threads.
#
# The bound on peak RSS, from the run's own resources.json:
#   parameters + gradients + AdamW moments (= 2 x optimizer_state_bytes, all fp32)
#   + planned activations (planned_activation_bytes: every buffer the model allocates, including
#     the attention's lse [B, H, T] per layer and its per-thread tile workspace)
#   + 64 MiB for the process itself (a T = 64 run of this model peaks at ~33 MiB, of which ~21 MiB
#     is the binary, its libraries and MPI; the rest of the margin covers OpenBLAS's packing
#     buffers and the ops' per-thread scratch, which grow with the rows of a GEMM).
# For this model that is about 10.5 + 130.6 + 64 = 205 MiB (measured peak: ~176 MiB). The unfused
# path could not fit: it keeps probs [B, H, T, T] per layer, B*H*T*T*4 = 1*2*8192*8192*4 bytes =
# 512 MiB per layer (1 GiB for two), plus 2*T*T floats (512 MiB) of backward scratch per thread.
#
# And attention memory is O(T): doubling T (4096 -> 8192) doubles the planned activation bytes
# (ratio 2 within 2%) instead of roughly quadrupling them as the T x T probabilities would.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
export OMP_NUM_THREADS=2
bare_gpt2 long.yaml steps=1 batch=1 samples=4 print=1 vocab=1000 seq=8192 hidden=64 layers=2 heads=2 \
  model="max_position_embeddings: 8192, use_flash_attention: True, hidden_dropout_rate: 0.1, attention_dropout_rate: 0.1"
# ltrain NAME CONFIG [--set ...]: lib.sh's train, whose one step must be logged
ltrain() {
  train "$@"
  grep -q "step:\[    1/    1\], loss: [0-9]" "$1.log" || { tail -5 "$1.log"; fail "$1: no step"; }
}
ltrain t8192 long.yaml
ltrain t4096 long.yaml --set model.model_config.seq_length=4096
"$PY" - <<'PY' || fail "the memory bound"
import json
MiB = 2.0 ** 20
long = json.load(open("t8192/resources.json"))["ranks"][0]
half = json.load(open("t4096/resources.json"))["ranks"][0]
weights = 2 * long["optimizer_state_bytes"]          # params + grads + AdamW m and v
bound = weights + long["planned_activation_bytes"] + 64 * MiB
peak = long["peak_rss_bytes"]
probs = 2 * 1 * 2 * 8192 * 8192 * 4                   # layers * B * H * T * T * 4: the unfused path
print(f"T 8192: peak RSS {peak / MiB:.1f} MiB; bound {bound / MiB:.1f} MiB = params+grads+moments "
      f"{weights / MiB:.1f} + planned activations {long['planned_activation_bytes'] / MiB:.1f} + 64 MiB; "
      f"the unfused probabilities alone would be {probs / MiB:.0f} MiB")
assert bound < probs / 4, "the bound would not tell the fused path from the unfused one"
assert peak <= bound, (peak, bound)
ratio = long["planned_activation_bytes"] / half["planned_activation_bytes"]
print(f"planned activations: T 4096 {half['planned_activation_bytes'] / MiB:.1f} MiB, "
      f"T 8192 {long['planned_activation_bytes'] / MiB:.1f} MiB ({ratio:.3f}x)")
assert 1.96 <= ratio <= 2.0, ratio
PY
echo PASS
