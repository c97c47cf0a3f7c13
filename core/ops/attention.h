// Causal multi-head self-attention core: softmax(Q K^T / sqrt(D) + causal mask) V (AttentionShape::scale
// in place of 1 / sqrt(D) when given).
// qkv is [B, T, (H + 2 Hkv) * D]: q (H heads) | k (Hkv heads) | v (Hkv heads), each head's D values
// consecutive (with Hkv = H, what GPT-2's c_attn writes); y is [B, T, H*D]. Grouped-query attention
// (Hkv < H, Llama's num_key_value_heads): query head h reads kv head h / (H / Hkv), as Hugging
// Face's repeat_kv arranges them.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/ops/dropout.h"

namespace gf::ops {

struct AttentionShape {
  int64_t batch, seq, heads, head_dim;
  // Global position of this block, for the dropout mask: global sample index of batch row 0,
  // global index of head 0, and the global head count.
  int64_t batch_offset = 0, head_offset = 0, heads_global = 0;
  int64_t kv_heads = 0;  // 0: heads (multi-head attention)
  // Documents packed into one sequence (reset_attention_mask): query row i of batch row b sees keys
  // [key_lo[b * seq + i], i] instead of [0, i]. Null: causal over the whole sequence.
  const int32_t* key_lo = nullptr;
  float scale = 0.0f;  // the scores' scale (Gemma's query_pre_attn_scalar^-1/2); 0: 1 / sqrt(head_dim)
  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  template <typename S>
  S score_scale() const { return scale > 0.0f ? static_cast<S>(scale) : S(1) / std::sqrt(static_cast<S>(head_dim)); }
};

// probs: [B, H, T, T] softmax probabilities (before dropout), kept for backward.
template <typename T>
void attention_fwd(T* y, T* probs, const T* qkv, const AttentionShape& s,
                   const DropoutKey& drop);

// Accumulates into dqkv.
template <typename T>
void attention_bwd(T* dqkv, const T* dy, const T* qkv, const T* probs,
                   const AttentionShape& s, const DropoutKey& drop);

}  // namespace gf::ops
