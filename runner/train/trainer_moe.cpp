// The trainer's Mixture-of-Experts bookkeeping after each step (runner/train/trainer.h): the routers' statistics
// summed over the ranks, and DeepSeek-V3's aux-loss-free expert bias moved by them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "runner/train/trainer.h"

namespace gf {

// Megatron's moe_router_enable_expert_bias (moe_utils.py get_updated_expert_bias): each MoE layer's bias moves by
// rate x sign(mean - load) per expert, the load its assignments in the step over every rank and micro-batch
// (StepResult::moe, summed by gather_moe_stats); written where this rank's optimizer shards hold the bias, which the
// parameter all-gather then spreads as it spreads the update. The bias has no gradient, so AdamW left it as it was.
void Trainer::update_expert_bias(float* weights, const StepResult& r) const {
  const float rate = static_cast<float>(cfg_.model.moe.expert_bias_rate);
  const int64_t E = cfg_.model.moe.expert_num;
  for (const auto& [layer, offset] : model_->expert_bias_offsets()) {
    const auto m = std::find_if(r.moe.begin(), r.moe.end(), [&](const StepResult::MoeLayer& x) { return x.layer == layer; });
    if (m == r.moe.end()) continue;
    const double mean = static_cast<double>(m->assignments) / static_cast<double>(E);
    for (int64_t e = 0; e < E; ++e) {
      const double gap = mean - static_cast<double>(m->tokens[static_cast<size_t>(e)]);
      const float step = gap > 0 ? rate : gap < 0 ? -rate : 0.0f;
      for (const ArenaRange& s : sync_->shards())
        if (offset + e >= s.begin && offset + e < s.end) weights[offset + e] += step;
    }
  }
}

void Trainer::gather_moe_stats(StepResult& r) const {
  const std::vector<MoeLayerStats>& st = moe_acc_;
  r.objective = r.loss;
  if (!cfg_.model.moe.enabled()) return;
  // One buffer over every layer of the model (a pipeline stage fills its own): per layer whether it
  // is an MoE layer here, aux_sum, z_sum, dropped, then the tokens per expert. Summed over the
  // data-parallel group and the pipeline stages.
  const size_t E = static_cast<size_t>(cfg_.model.moe.expert_num), per = 4 + E;
  const size_t L = static_cast<size_t>(cfg_.model.num_layers);
  std::vector<double> v(L * per, 0.0), neg_margin(L, -INFINITY);  // the least margin, as a max
  for (const MoeLayerStats& m : st) {
    neg_margin[static_cast<size_t>(m.layer)] = -m.margin;
    double* x = v.data() + static_cast<size_t>(m.layer) * per;
    x[0] = 1;
    x[1] = m.aux_sum;
    x[2] = m.z_sum;
    x[3] = static_cast<double>(m.dropped);
    for (size_t e = 0; e < E; ++e) x[4 + e] = static_cast<double>(m.tokens_per_expert[e]);
  }
  ctx_.data_like().allreduce_sum(v.data(), static_cast<int64_t>(v.size()));
  ctx_.data_like().allreduce_max(neg_margin.data(), static_cast<int64_t>(L));
  if (pipelined()) {
    ctx_.group(GridAxis::kPp).allreduce_sum(v.data(), static_cast<int64_t>(v.size()));
    ctx_.group(GridAxis::kPp).allreduce_max(neg_margin.data(), static_cast<int64_t>(L));
  }
  const double seqs = static_cast<double>(global_batch_), tokens = seqs * static_cast<double>(cfg_.model.seq_length);
  for (size_t l = 0; l < L; ++l) {
    const double* x = v.data() + l * per;
    if (x[0] == 0) continue;
    StepResult::MoeLayer m;
    m.layer = static_cast<int64_t>(l);
    m.aux = x[1] / seqs;
    m.z = x[2] / tokens;
    m.dropped = static_cast<int64_t>(x[3]);
    m.margin = -neg_margin[l];
    for (size_t e = 0; e < E; ++e) {
      const auto c = static_cast<int64_t>(x[4 + e]);
      m.tokens_max = std::max(m.tokens_max, c);
      m.assignments += c;
      m.tokens.push_back(c);
    }
    m.tokens_mean = static_cast<double>(m.assignments) / static_cast<double>(E);
    r.aux_loss += m.aux;
    r.z_loss += m.z;
    r.moe.push_back(m);
  }
  r.objective = r.loss + cfg_.model.moe.aux_loss_factor * r.aux_loss + cfg_.model.moe.z_loss_factor * r.z_loss;
}

}  // namespace gf
