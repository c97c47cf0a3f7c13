// This rank's share of a pipelined model: the model chunks it runs (one per virtual stage it holds:
// one for plain pipelining, pp_interleave_num for the interleaved schedule), each a TransformerLM
// over its range of layers with its own micro-batch slots, all over one parameter arena. The
// trainer updates that arena as it would a whole model's; the pipeline executor
// (engine/step_engine.h) runs the chunks' forward and backward passes in a schedule's order.
#pragma once
#include <memory>
#include <vector>

#include "models/transformer_lm.h"

namespace gf {

class PipelineStage : public CausalLM {
 public:
  // chunks[c]: chunk c's layer range, slots and whether its weight pass is deferred.
  PipelineStage(const TransformerSpec& spec, NameMap names, const ModelConfig& cfg, const ModelLayout& layout,
                int64_t micro_batch, const ParallelContext& ctx, const std::vector<StageOptions>& chunks);

  int chunks() const { return static_cast<int>(chunks_.size()); }
  TransformerLM& chunk(int c) { return *chunks_.at(static_cast<size_t>(c)); }
  const TransformerLM& chunk(int c) const { return *chunks_.at(static_cast<size_t>(c)); }

  const ModelConfig& config() const override { return cfg_; }
  const ModelLayout& layout() const override { return layout_; }
  const Placement& params() const override { return params_; }
  float* weights() override {
    low_current_ = false;
    return weights_.data();
  }
  const float* weight_values() const override { return weights_.data(); }
  float* grads() override { return grads_.data(); }
  int64_t micro_batch() const override { return micro_batch_; }
  // A pipeline stage runs under the executor, which sends and receives between the stages.
  double forward(const int32_t*, const StepInfo&) override;
  void backward(float) override;
  const float* logits() const override;
  int64_t logits_ld() const override { return chunks_.back()->logits_ld(); }
  int64_t activation_bytes() const override;
  int64_t weight_copy_bytes() const override { return static_cast<int64_t>(low_.size()); }
  void* weight_copy() override { return cdt_ == ComputeDtype::kFloat32 ? nullptr : low_.data(); }
  ComputeDtype weight_copy_dtype() const override { return cdt_; }
  void weight_copy_is_current() override { low_current_ = cdt_ != ComputeDtype::kFloat32; }
  double flops_per_step(int64_t batch) const override { return chunks_.front()->flops_per_step(batch); }
  bool whole_model() const override { return false; }
  std::vector<std::pair<int64_t, int64_t>> expert_bias_offsets() const override {
    std::vector<std::pair<int64_t, int64_t>> v;
    for (const auto& c : chunks_)
      for (const auto& o : c->expert_bias_offsets()) v.push_back(o);
    return v;
  }
  std::vector<int64_t> weight_unit_starts() const override;
  std::vector<CausalLM*> frozen_bases() override {
    std::vector<CausalLM*> v;
    for (const auto& c : chunks_)
      for (CausalLM* b : c->frozen_bases()) v.push_back(b);
    return v;
  }
  void init_frozen(uint64_t seed) override {
    for (const auto& c : chunks_) c->init_frozen(seed);
  }
  void frozen_loaded() override {
    for (const auto& c : chunks_) c->frozen_loaded();
  }
  void lora_saved_from_base(const std::vector<std::pair<int64_t, int64_t>>& only) override {
    for (const auto& c : chunks_) c->lora_saved_from_base(only);
  }
  void set_weight_gate(WeightGate* gate) override;
  void set_fine_units(bool on) override;
  std::vector<int64_t> vocab_chunk_offsets() const override;
  // The chunks share this stage's arena and its low-precision copy.
  void convert_low(int64_t begin, int64_t end) override { chunks_.front()->convert_low(begin, end); }
  void release_low(int64_t begin, int64_t end) override { chunks_.front()->release_low(begin, end); }

 private:
  ModelConfig cfg_;
  ModelLayout layout_;
  int64_t micro_batch_;
  Placement params_;
  ComputeDtype cdt_;
  AlignedBuffer<float> weights_, grads_;
  AlignedBuffer<std::byte> low_;
  bool low_current_ = false;
  std::vector<std::unique_ptr<TransformerLM>> chunks_;
};

}  // namespace gf
