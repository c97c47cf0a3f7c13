// Embedding block: the token embedding (vocabulary-parallel or replicated, padded rows zero) plus,
// for GPT-2, learned positions, then the embedding dropout. Backward is a weight pass only.
#pragma once
#include <functional>
#include <string>

#include "core/params/placement.h"
#include "models/blocks/env.h"
#include "models/blocks/spec.h"

namespace gf {

struct VocabSlice {
  bool parallel = false;               // split over the tensor-parallel ranks
  int64_t begin = 0, local = 0, valid = 0;  // this rank's rows [begin, begin + local), of which `valid` are real
};

class EmbeddingBlock {
 public:
  EmbeddingBlock() = default;
  EmbeddingBlock(const TransformerSpec& s, const VocabSlice& v) : spec_(s), v_(v) {}
  void declare(ParamTable& t, const NameMap& names) const;
  void bind(const Placement& t, const NameMap& names);
  // LoRA with PEFT's modules_to_save embed_tokens: the token embedding is the trained copy in the adapters' arena
  // (BlockEnv::lora_w, lora_g) when `adapters` holds it; learned positions stay the base's, frozen.
  void bind_saved(const Placement& adapters, const NameMap& names);
  bool saved() const { return saved_; }
  // Its first parameter in the arena (ZeRO's units start at the blocks' first parameters).
  int64_t first_offset() const { return wpe_ >= 0 && wpe_ < wte_ ? wpe_ : wte_; }
  int64_t token_offset() const { return wte_; }
  int64_t position_offset() const { return wpe_; }  // -1: no learned positions

  // y [Nl, C] from the micro-batch's N tokens; chunks (ZeRO-3, a token embedding cut into vocabulary
  // chunks): looked up one chunk at a time.
  void fwd(const BlockEnv& e, float* y, const int32_t* tokens, const VocabChunks* chunks = nullptr) const;
  // Generation: y [N, C] for N tokens at positions pos (no sequence parallel, no dropout).
  void fwd_at(const BlockEnv& e, float* y, const int32_t* tokens, const int64_t* pos) const;
  // dy [Nl, C] (the embedding dropout is applied to it in place).
  void bwd(const BlockEnv& e, float* dy, const int32_t* tokens) const;
  // The same, with the token rows' gradients handed to `rows` (embedding_parallel_bwd_rows) instead of
  // added into the token embedding's gradient.
  void bwd_rows(const BlockEnv& e, float* dy, const int32_t* tokens,
                const std::function<void(const int32_t*, const float*, int64_t)>& rows) const;

 private:
  EmbeddingShape shape(const BlockEnv& e) const {
    return {e.N, e.T, spec_.hidden, v_.begin, v_.begin + v_.local, v_.parallel, e.positions};
  }
  // The token rows times TransformerSpec::embed_scale (Gemma's sqrt(hidden), torch's `embed(ids) * scale`), in
  // place; the backward scales the output gradient alike. Nothing without a scale.
  void scale_rows(float* y, int64_t rows) const;
  const float* token_weight(const BlockEnv& e) const { return saved_ ? e.lora_w + wte_ : e.w(wte_); }
  float* token_grad(const BlockEnv& e) const { return saved_ ? (e.lora_g ? e.lora_g + wte_ : nullptr) : e.g(wte_); }
  TransformerSpec spec_;
  VocabSlice v_;
  int64_t wte_ = 0, wpe_ = -1;
  bool saved_ = false;  // wte_ is in the adapters' arena (bind_saved)
};

}  // namespace gf
