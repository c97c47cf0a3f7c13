// GPT-2 (Radford et al. 2019; the Hugging Face GPT2LMHeadModel): token + learned position
// embeddings, pre-LayerNorm blocks of causal multi-head attention and an MLP, a final LayerNorm and
// an LM head tied to the token embedding. Explicit forward and backward per layer (llm.c style);
// every activation buffer is planned at construction, nothing is allocated inside a step.
#pragma once
#include <memory>
#include <vector>

#include "core/mixed_precision.h"
#include "core/ops/activation.h"
#include "core/ops/dropout.h"
#include "core/ops/flash_attention.h"
#include "core/ops/layernorm.h"
#include "models/causal_lm.h"
#include "parallel/parallel_context.h"
#include "parallel/tensor_parallel.h"

namespace gf {

class GPT2LMHeadModel : public CausalLM {
 public:
  GPT2LMHeadModel(const ModelConfig& cfg, int64_t micro_batch, const ParallelContext& ctx);

  const ModelConfig& config() const override { return cfg_; }
  const ParamTable& params() const override { return table_; }
  float* weights() override {
    low_current_ = false;
    return weights_.data();
  }
  float* grads() override { return grads_.data(); }
  int64_t micro_batch() const override { return B_; }

  double forward(const int32_t* tokens, const StepInfo& info) override;
  void backward(float grad_scale) override;
  const float* logits() const override { return logits_.data(); }
  int64_t logits_ld() const override { return Vl_; }
  int64_t activation_bytes() const override;
  int64_t weight_copy_bytes() const override { return static_cast<int64_t>(low_.size()); }
  void* weight_copy() override { return cdt_ == ComputeDtype::kFloat32 ? nullptr : low_.data(); }
  ComputeDtype weight_copy_dtype() const override { return cdt_; }
  void weight_copy_is_current() override { low_current_ = cdt_ != ComputeDtype::kFloat32; }
  double flops_per_step(int64_t batch) const override;

  // The parameter table of a GPT-2 with this config (Hugging Face names and layouts), for
  // tensor-parallel rank tp_rank of tp_size (cfg.vocab_emb_dp: False splits the vocabulary).
  static ParamTable make_param_table(const ModelConfig& cfg, int tp_rank, int tp_size);

 private:
  struct LayerWeights;
  // Arena offsets of one layer's parameters, looked up once at construction.
  struct LayerOffsets {
    int64_t ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  };
  // One layer's activations: views into planned storage. A layer under full recompute shares
  // one set of buffers with every other such layer (only its output is its own); under selective
  // recompute the attention probabilities and the activation function's output are shared.
  // Attention keeps probs [B, Hl, T, T] (unfused) or lse [B, Hl, T] (use_flash_attention).
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *probs, *lse, *atty, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_act,
        *out;
  };
  enum class Recompute { kNone, kSelective, kFull };
  Recompute recompute_mode(int64_t l) const;
  float* plan(int64_t rows, int64_t cols);  // a zeroed activation buffer, kept for the model's life
  LayerWeights layer_weights(float* base, int64_t l) const;
  void layer_fwd(int64_t l, const float* x, const StepInfo& info);
  void layer_bwd(int64_t l, const float* x);
  void recompute_fwd(int64_t l, const float* x);
  double head_fwd(const float* x);
  void head_bwd(float grad_scale, const float* x);
  // A weight inside the arena as the products see it: with its low-precision copy under
  // bf16/fp16 compute.
  Weight wt(const float* w) const {
    return cdt_ == ComputeDtype::kFloat32
               ? Weight(w)
               : Weight(w, cdt_, low_.data() + (w - weights_.data()) * low_copy_element_bytes(cdt_));
  }
  ops::DropoutKey hidden_dropout(int64_t layer, int64_t site) const;
  int64_t global_row0() const { return info_.sample_offset * T_ + tp_.row_begin(); }

  ModelConfig cfg_;
  int64_t B_, T_, C_, H_, F_, V_, Vp_, L_;
  // Tensor/sequence parallel: this rank's residual rows Nl (N = B*T, or N/tp under SP), heads
  // Hl, attention width Cl, MLP width Fl, and vocabulary slice [v_begin_, v_begin_ + Vl_) of
  // which valid_ are real tokens; head_rows_ is how many rows the LM head computes here.
  TensorParallel tp_;
  int64_t N_, Nl_, Hl_, Cl_, Fl_, Vl_, v_begin_, valid_, head_rows_;
  bool vocab_parallel_;
  ops::Activation act_;
  ParamTable table_;
  std::vector<LayerOffsets> layer_offsets_;
  int64_t wte_, wpe_, lnf_w_, lnf_b_;  // offsets of the non-layer parameters
  AlignedBuffer<float> weights_, grads_;
  // Mixed precision: the dtype of the products, and the weights' low-precision copy (bf16, or
  // fp16-valued floats; empty for float32), refreshed from the fp32 masters at each forward.
  ComputeDtype cdt_ = ComputeDtype::kFloat32;
  AlignedBuffer<std::byte> low_;
  bool low_current_ = false;
  AlignedBuffer<std::byte> dlogits_low_;  // the logits' gradient in low precision, column-chunked (head_bwd)  // low_ holds the weights as they are (see CausalLM::weight_copy)
  // Activations.
  AlignedBuffer<int32_t> inputs_, targets_;
  AlignedBuffer<float> emb_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, lse_;
  std::vector<LayerActs> acts_;
  std::vector<AlignedBuffer<float>> storage_;  // what acts_ points into
  int64_t recompute_layers_ = 0;               // the first this many layers are recomputed
  // Backward scratch, shared by all layers.
  AlignedBuffer<float> dres_, dtmp_, dln_, datty_, dqkv_, dfch_act_, dfch_;
  // Tensor-parallel scratch ([N, C] each; empty on one rank): gathered rows, partial sums, and
  // the full-row input gradient of a column-parallel layer under SP.
  AlignedBuffer<float> gather_, partial_, dfull_, ce_scratch_;
  // Fused attention's per-thread tile scratch, shared by all layers (empty when unfused).
  AlignedBuffer<float> flash_buf_;
  ops::FlashWorkspace<float> flash_ws_;
  StepInfo info_;
};

}  // namespace gf
