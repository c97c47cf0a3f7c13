// LM head block: the final norm, the logits against the token embedding (tied) or lm_head.weight
// (untied), both [V, C], and the softmax cross-entropy. Vocabulary-parallel: every rank computes
// its vocabulary slice of the logits of all N rows (gathered under SP) and the softmax is reduced
// across the group. Replicated: every rank computes all logits of its own rows.
#pragma once
#include <string>

#include "core/params/placement.h"
#include "models/blocks/embedding.h"
#include "models/blocks/env.h"
#include "models/blocks/norm.h"
#include "models/blocks/spec.h"

namespace gf {

class LmHeadBlock {
 public:
  struct Acts {
    float* ln = nullptr;  // [Nl, C] the final norm's output
    NormBlock::Acts norm;
    float* logits = nullptr;  // [rows, Vl]; the fp32 backward overwrites it with its gradient
    float *losses = nullptr, *lse = nullptr;  // [rows]
    std::byte* dlogits_low = nullptr;  // bf16/fp16: the logits' gradient, column-chunked
    float* dln = nullptr;              // [Nl, C]: the final norm's output gradient (weight pass)
    // A frozen fp32 head's chunked loss (set_loss_chunk; LoRA's pet_config.loss_vocab_chunk): logits is one
    // chunk [rows, chunk], sum [rows] the softmax's running denominator, and dh [rows, C] the gradient of the
    // summed loss with respect to the final norm's output, made by the forward (the backward scales it).
    float *dh = nullptr, *sum = nullptr;
  };
  LmHeadBlock() = default;
  LmHeadBlock(const TransformerSpec& s, const VocabSlice& v, int64_t rows)
      : spec_(s), v_(v), rows_(rows), norm_(s.norm, s.hidden, s.norm_eps, s.norm_offset) {}
  void declare_norm(ParamTable& t, const NameMap& names) const;
  void declare_head(ParamTable& t, const NameMap& names) const;  // untied: lm_head.weight
  // wte: the token embedding's offset when tied and this table holds it, else -1.
  void bind(const Placement& t, const NameMap& names);
  // LoRA with PEFT's modules_to_save lm_head: the head's weight is the trained copy in the adapters' arena
  // (BlockEnv::lora_w, lora_g) when `adapters` holds it; the final norm stays the base's.
  void bind_saved(const Placement& adapters, const NameMap& names);
  bool saved() const { return saved_; }
  int64_t rows() const { return rows_; }
  int64_t first_offset() const { return norm_.first_offset(); }
  // The head's weight: lm_head.weight, or the token embedding it is tied to.
  int64_t weight_offset() const { return w_; }

  // Returns the summed loss of this rank's rows (SP, replicated head: of all rows). chunks (ZeRO-2
  // and 3, tensor_parallel.h): the logits made one vocabulary chunk of the weight at a time.
  double fwd(const BlockEnv& e, const float* x, const int32_t* targets, const Acts& a,
             const VocabChunks* chunks = nullptr) const;
  // Generation: the final norm and this rank's vocabulary slice of the logits of `rows` rows of x
  // (no loss, no sequence parallel): logits [rows, Vl]; ln [rows, C] and norm are scratch.
  void logits_fwd(const BlockEnv& e, float* logits, float* ln, const NormBlock::Acts& norm, const float* x,
                  int64_t rows) const;
  const VocabSlice& vocab() const { return v_; }
  // A frozen head (LoRA) whose fwd runs the vocabulary `chunk` rows at a time (0: the whole logits): online
  // softmax (a running maximum and denominator per row, as flash attention's) and, in the same pass, the input
  // gradient sum_v softmax_v W_v - W_target (the logits' gradient times W), rescaled as the maximum moves, so
  // that no [rows, vocabulary] buffer is held; fp32 and a replicated (not vocabulary-parallel) head only.
  void set_loss_chunk(int64_t chunk) { chunk_ = chunk; }
  int64_t loss_chunk() const { return chunk_; }
  // dx [Nl, C] (written) from d(grad_scale * summed loss). Input pass: dx and the logits'
  // gradient; weight pass: the head's and the norm's weight gradients.
  // chunks (fused pass only): both products run one vocabulary chunk at a time, from the last chunk
  // to the first, and leave(c) follows the chunk's weight gradient (final for this backward).
  void bwd(const BlockEnv& e, BwdPass pass, float* dx, float grad_scale, const float* x, const int32_t* targets,
           const Acts& a, const VocabChunks* chunks = nullptr) const;

 private:
  const int32_t* local_targets(const BlockEnv& e, const int32_t* targets) const {
    return targets + (v_.parallel ? 0 : e.tp->row_begin());
  }
  // The head's weight as the products read it, and its gradient (null where nothing trains it).
  Weight head_weight(const BlockEnv& e) const { return saved_ ? Weight(e.lora_w + w_) : e.wt(w_, false); }
  float* weight_grad(const BlockEnv& e) const { return saved_ ? (e.lora_g ? e.lora_g + w_ : nullptr) : e.g(w_); }
  void chunked_loss_fwd(const BlockEnv& e, const int32_t* targets, const Acts& a) const;
  void chunked_bwd(const BlockEnv& e, float* dh, const float* h, float grad_scale, const int32_t* targets,
                   const Acts& a, const VocabChunks& chunks) const;
  TransformerSpec spec_;
  VocabSlice v_;
  int64_t rows_ = 0;
  NormBlock norm_;
  int64_t w_ = 0;  // the head's weight
  bool saved_ = false;  // w_ is in the adapters' arena (bind_saved)
  int64_t chunk_ = 0;
};

}  // namespace gf
