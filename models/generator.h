// Generation with a key/value cache: the forward of a TransformerLM's weights for rows of tokens
// that each belong to a sequence slot at a position, every layer's keys and values kept per slot
// for `capacity` positions. A prompt goes in as its rows (in one call or several: chunked
// prefill); a decode step is one row per sequence, whose attention reads the cache (no prefix
// recomputed), and whose products have as many rows as there are sequences (a batch of 1 is a
// matrix-vector product, not a padded GEMM).
//
// The blocks are the model's own (models/blocks/), bound to its parameters by name: the same
// arithmetic as its training forward without dropout, except for the attention core, which reads
// the cache (AttentionBlock::fwd_cached). Every buffer, the cache included, is planned once
// (core/params/buffer_plan.h) for the slots, the capacity and the rows per call.
//
// Tensor parallel: the heads, the FFN width and (vocab_emb_dp: False) the vocabulary are split as
// in training; each call ends with the full vocabulary's logits on every rank of the group, so every
// rank samples the same token. Sequence parallelism does not apply (rows are few); MoE layers route
// dropless (every choice computed), as Hugging Face's Mixtral generates, so a token's output does
// not depend on which other rows share its call. A pipeline stage (one chunk: layers [l0, l1))
// runs its layers only, with its layers' cache: the hidden rows come from the previous stage and go
// to the next (point-to-point over the pipeline group), and only the last stage has logits.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/math/aligned_buffer.h"
#include "core/params/buffer_plan.h"
#include "core/ops/rope.h"
#include "models/blocks/embedding.h"
#include "models/blocks/lm_head.h"
#include "models/blocks/transformer_layer.h"
#include "models/transformer_lm.h"
#include "parallel/parallel_context.h"

namespace gf {

class Generator {
 public:
  struct Options {
    int64_t slots = 1;           // sequences held at once
    int64_t capacity = 0;        // positions per sequence (prompt + generated)
    int64_t max_rows = 0;        // rows per forward call (0: max(slots, capacity))
    int64_t max_logit_rows = 0;  // rows whose logits one call returns (0: max(slots, 1))
    // Every row's products computed alone (core/math/gemm.h, RowInvariance::kEveryRow): a row's logits are
    // bitwise the same whatever rows share its call, on any thread count. fp32 compute only. Without it
    // the products are OpenBLAS's, whose last bits move with the call's rows and threads.
    bool batch_invariant = false;
  };
  // The model must be whole (not a pipeline stage) and outlive the generator; its weights are read
  // as they are at each call (a bf16/fp16 run's low-precision copy is made once, here).
  Generator(const TransformerLM& model, const ParallelContext& ctx, const Options& opt);

  int64_t vocab() const { return V_; }  // entries per logits row (the real vocabulary)
  int64_t capacity() const { return opt_.capacity; }
  int64_t slots() const { return opt_.slots; }
  int64_t max_rows() const { return opt_.max_rows; }
  int64_t max_logit_rows() const { return opt_.max_logit_rows; }
  int64_t bytes() const { return plan_.bytes(); }
  int64_t cache_bytes() const { return cache_floats_ * 4; }
  int64_t cache_positions() const { return cache_positions_; }  // per slot: capacity(), or a rolling window's
  bool last_stage() const { return last_; }

  // Row r is token tokens[r] at position pos[r] of sequence slot seq[r]; the rows of one slot come
  // in position order, after every earlier position of that slot (in this call or an earlier one).
  // Returns the logits [n_logits, vocab()] of rows logit_rows[0..n_logits), valid until the next call
  // (on a pipeline stage before the last: nullptr, the rows' hidden states sent on).
  // rows <= max_rows(), n_logits <= max_logit_rows(). Collective over the tensor- and expert-parallel
  // groups, and every stage of the pipeline group calls it with the same rows.
  const float* forward(const int32_t* tokens, const int64_t* seq, const int64_t* pos, int64_t rows,
                       const int64_t* logit_rows, int64_t n_logits);

 private:
  struct Buffers {
    float *x0 = nullptr, *x1 = nullptr;
    TransformerLayer::Acts acts;
    std::vector<KvCache> kv;
    float* scores = nullptr;
    float *sel = nullptr, *ln = nullptr, *logits = nullptr, *gathered = nullptr, *full = nullptr;
    NormBlock::Acts head_norm;
    float *gather = nullptr, *partial = nullptr;
    float* mla = nullptr;  // MLA's projections' scratch
  };
  void lay_out(BufferPlan& p, Buffers& b) const;

  Options opt_;
  const ParallelContext* ctx_;
  const TransformerLM* model_;
  AlignedBuffer<float> lora_scratch_;  // LoRA: the adapters' products, [max_rows, 2 r]
  TransformerSpec spec_;
  ComputeDtype cdt_ = ComputeDtype::kFloat32;
  int64_t V_ = 0, C_ = 0, Vl_ = 0, cache_floats_ = 0, cache_positions_ = 0;
  VocabSlice vocab_;
  MoeBlock::Dims md_;
  bool any_moe_ = false, any_dense_ = false, first_ = true, last_ = true;
  int64_t l0_ = 0, l1_ = 0;
  std::unique_ptr<ops::RopeTable<float>> rope_, rope_local_;
  ExpertParallel ep_;
  EmbeddingBlock embedding_;
  std::vector<TransformerLayer> layers_;
  LmHeadBlock head_;
  AlignedBuffer<std::byte> low_;
  BufferPlan plan_;
  Buffers b_;
};

}  // namespace gf
