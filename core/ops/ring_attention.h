// The block products of ring attention (context parallel's colossalai_cp, parallel/context_parallel.h):
// causal attention of this rank's query rows against one key/value block of the sequence at a time,
// with FlashAttention's online softmax carried across the blocks, so the whole sequence's keys are
// never held at once. Rows carry global positions: a rank's rows per sample are `chunks` runs of
// `chunk` consecutive positions (two under Megatron's causal load balance), and a key is visible
// to a query when its position is not after the query's and not before key_lo[query position].
// Dropout masks use the one-rank element index (((batch_offset + b) H + head_offset + h) T + i) T + j
// of core/ops/attention.h, so the results equal one rank's up to the order of the sums.
#pragma once
#include <cstdint>

#include "core/ops/dropout.h"

namespace gf::ops {

// Where a rank's rows sit in the sequence: row t of a sample is at start[t / chunk] + t % chunk.
struct RowChunks {
  int64_t chunk = 0;
  int chunks = 1;
  int64_t start[2] = {0, 0};
  int64_t position(int64_t t) const { return start[t / chunk] + t % chunk; }
};

struct RingShape {
  int64_t batch = 0, rows = 0;  // samples, and rows per sample held by each rank (chunk x chunks)
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t seq = 0;  // the whole sequence's length
  // The dropout index's global offsets (as AttentionShape's), and key_lo over the whole sequence
  // ([batch, seq]: the first key each position sees; null: 0).
  int64_t batch_offset = 0, head_offset = 0, heads_global = 0;
  const int32_t* key_lo = nullptr;
  float scale = 0.0f;  // the scores' scale (AttentionShape::scale); 0: 1 / sqrt(head_dim)
  // Called (when set) from the master thread after each of its tiles: lets the ring's transfers
  // advance during the products (parallel/context_parallel.cpp).
  void (*progress)(void*) = nullptr;
  void* progress_arg = nullptr;
};

// Query rows: q [batch * rows, ldq], head h at column h * head_dim. A key/value block: k and v
// [batch * rows, ldkv], kv head g at column g * head_dim of each. Query head h reads kv head
// h / (heads / kv_heads).
//
// Forward of one block: the running output o [batch * rows, heads * head_dim] (unnormalised),
// maxima m and sums l ([batch, heads, rows]) take the block's keys. Start with o = 0, m = -inf, l = 0.
void ring_attention_fwd_block(float* o, float* m, float* l, const float* q, int64_t ldq, const float* k, const float* v,
                              int64_t ldkv, const RowChunks& qrows, const RowChunks& krows, const RingShape& s,
                              const DropoutKey& drop);
// After the last block: y = o / l (in place, o becomes y) and lse = m + log l (written over l).
void ring_attention_fwd_finish(float* o, float* l, const float* m, const RingShape& s);

// di [batch, heads, rows] = rowsum(dy * y) per head (dy and y [batch * rows, heads * head_dim]).
void ring_attention_bwd_prepare(float* di, const float* dy, const float* y, const RingShape& s);
// Backward of one block: dq [batch * rows, lddq] (head h at column h * head_dim) accumulates the
// block's share, dk and dv [batch * rows, lddkv] the block's key and value gradients from these
// queries. lse and di from the forward and ring_attention_bwd_prepare.
void ring_attention_bwd_block(float* dq, int64_t lddq, float* dk, float* dv, int64_t lddkv, const float* q, int64_t ldq,
                              const float* k, const float* v, int64_t ldkv, const float* dy, const float* lse,
                              const float* di, const RowChunks& qrows, const RowChunks& krows, const RingShape& s,
                              const DropoutKey& drop);

}  // namespace gf::ops
