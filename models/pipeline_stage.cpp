#include "models/pipeline_stage.h"

#include <stdexcept>

namespace gf {

PipelineStage::PipelineStage(const TransformerSpec& spec, NameMap names, const ModelConfig& cfg,
                             const ModelLayout& layout, int64_t micro_batch, const ParallelContext& ctx,
                             const std::vector<StageOptions>& chunks)
    : cfg_(cfg), layout_(layout), micro_batch_(micro_batch),
      params_(TransformerLM::make_param_table(spec, names, chunks), TransformerLM::param_layout(cfg, layout),
              ctx.index(GridAxis::kTp), ctx.index(GridAxis::kEp)),
      cdt_(layout.compute) {
  if (chunks.empty()) throw std::invalid_argument("PipelineStage: no model chunk");
  const size_t n = static_cast<size_t>(params_.total_floats());
  weights_ = AlignedBuffer<float>(n, kOnDemand);
  grads_ = AlignedBuffer<float>(n, kOnDemand);
  low_ = AlignedBuffer<std::byte>(n * static_cast<size_t>(low_copy_element_bytes(cdt_)), kOnDemand);
  const SharedArena arena{&params_, weights_.data(), grads_.data(), low_.data(), &low_current_};
  for (const StageOptions& st : chunks)
    chunks_.push_back(std::make_unique<TransformerLM>(spec, names, cfg, layout, micro_batch, ctx, st, &arena));
}

double PipelineStage::forward(const int32_t*, const StepInfo&) {
  throw std::logic_error("a pipeline stage's forward runs under the pipeline executor");
}

void PipelineStage::backward(float) {
  throw std::logic_error("a pipeline stage's backward runs under the pipeline executor");
}

const float* PipelineStage::logits() const {
  throw std::logic_error("a pipeline stage's logits are the last chunk's, per slot");
}

std::vector<int64_t> PipelineStage::weight_unit_starts() const {
  std::vector<int64_t> at;
  for (const auto& c : chunks_)
    for (int64_t o : c->weight_unit_starts()) at.push_back(o);
  return at;
}

void PipelineStage::set_fine_units(bool on) {
  for (const auto& c : chunks_) c->set_fine_units(on);
}

std::vector<int64_t> PipelineStage::vocab_chunk_offsets() const {
  std::vector<int64_t> at;
  for (const auto& c : chunks_)
    for (int64_t o : c->vocab_chunk_offsets()) at.push_back(o);
  return at;
}

void PipelineStage::set_weight_gate(WeightGate* gate) {
  for (const auto& c : chunks_) c->set_weight_gate(gate);
}

int64_t PipelineStage::activation_bytes() const {
  int64_t b = 0;
  for (const auto& c : chunks_) b += c->activation_bytes();
  return b;
}

}  // namespace gf
