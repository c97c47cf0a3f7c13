// LoRA's frozen base model as a CausalLM (CausalLM::frozen_bases): its parameters and weights are the base's
// (a model chunk's own), so the checkpoint loaders (Hugging Face, Megatron, MindSpore, ours) fill it as they
// would a model; it runs nothing itself (the owner's forward reads these weights).
#pragma once
#include <stdexcept>

#include "models/causal_lm.h"

namespace gf {

class FrozenBaseView : public CausalLM {
 public:
  // whole: the base holds every layer (no pipeline stage's share).
  FrozenBaseView(const CausalLM& owner, const Placement& params, float* weights, bool whole)
      : owner_(owner), params_(params), w_(weights), whole_(whole) {}
  const ModelConfig& config() const override { return owner_.config(); }
  const ModelLayout& layout() const override { return owner_.layout(); }
  const Placement& params() const override { return params_; }
  float* weights() override { return w_; }
  const float* weight_values() const override { return w_; }
  float* grads() override { throw std::logic_error("a frozen base model has no gradients"); }
  int64_t micro_batch() const override { return owner_.micro_batch(); }
  double forward(const int32_t*, const StepInfo&) override { throw std::logic_error("a frozen base runs in its owner"); }
  void backward(float) override { throw std::logic_error("a frozen base runs in its owner"); }
  const float* logits() const override { throw std::logic_error("a frozen base runs in its owner"); }
  int64_t logits_ld() const override { return owner_.logits_ld(); }
  int64_t activation_bytes() const override { return 0; }
  bool whole_model() const override { return whole_; }
  double flops_per_step(int64_t batch) const override { return owner_.flops_per_step(batch); }

 private:
  const CausalLM& owner_;
  const Placement& params_;
  float* w_;
  bool whole_;
};

}  // namespace gf
