// TransformerLM's frozen LoRA base (models/lora.h): its initial values, and pet_config.base_dtype bfloat16, which
// holds each layer's base weights as bf16 alone (2 bytes a weight instead of 4) and widens one layer at a time into
// its fp32 range while that layer runs, so every product and the adapters compute in fp32 on the rounded weights
// (what a bf16 base is: its weights rounded once). The embedding, final norm and head stay fp32.
#include <algorithm>
#include <cstring>
#include <span>
#include <stdexcept>

#include "core/math/gemm_bf16.h"
#include "core/math/mixed_precision.h"
#include "core/math/parallel_memory.h"
#include "models/lora.h"
#include "models/transformer_lm.h"

namespace gf {

Placement TransformerLM::make_placement_base(const TransformerSpec& s, const NameMap& names, const ModelConfig& cfg,
                                             const ModelLayout& layout, int tp_rank, const StageOptions& st,
                                             int ep_rank) {
  return Placement(make_base_table(s, names, st), param_layout(cfg, layout), tp_rank, ep_rank);
}

void TransformerLM::lora_layout() {
  const StageDims& d = dims_;
  if (spec_.lora.base_bf16) {  // each layer's base range, from its first weight to the next block's
    for (size_t i = 0; i < layers_.size(); ++i) {
      const int64_t b = layers_[i].first_offset();
      const int64_t e = i + 1 < layers_.size() ? layers_[i + 1].first_offset()
                        : d.last               ? head_.first_offset()
                                               : base_params_.total_floats();
      base_ranges_.emplace_back(b, e);
    }
    base_low_ = AlignedBuffer<bf16>(static_cast<size_t>(base_params_.total_floats()), kOnDemand);
  }
  // ZeRO-3's units are the adapters of each layer's attention and MLP (the base is whole on every rank).
  for (int64_t l = d.l0; l < d.l1; ++l) {
    const int64_t a = lora_unit_offset(l, false), m = lora_unit_offset(l, true);
    const int64_t x = layers_[static_cast<size_t>(l - d.l0)].lora_expert_offset();  // its experts' adapters
    layer_reads_.push_back({a, m, x});
    attn_reads_.push_back({a});
    mlp_reads_.push_back({m, x});
  }
  // A module trained whole (modules_to_save) is a unit of its own: the embedding's first, the head's last.
  emb_reads_ = {d.first && embedding_.saved() ? embedding_.token_offset() : -1};
  head_reads_ = {d.last && head_.saved() ? head_.weight_offset() : -1};
}

int64_t TransformerLM::lora_unit_offset(int64_t l, bool mlp) const { return lora_half_offset(names_, params_, l, mlp); }

int64_t TransformerLM::lora_half_offset(const NameMap& names, const Placement& adapters, int64_t l, bool mlp) {
  // The first adapter of layer l's attention (q, k, v, o; GPT-2's c_attn, c_proj) or MLP, -1 where it has none.
  const std::span<const Role> roles = mlp ? std::span<const Role>(kLoraMlpRoles) : std::span<const Role>(kLoraAttentionRoles);
  int64_t at = -1;
  for (Role r : roles) {
    std::string n;
    try {
      n = names(r, l);
    } catch (const std::logic_error&) {
      continue;
    }
    if (const TensorPlacement* t = adapters.find(lora_a_name(n)); t && (at < 0 || t->offset < at)) at = t->offset;
  }
  return at;
}

int64_t TransformerLM::ready_offset(const TransformerLayer& layer, bool mlp) const {
  if (!spec_.lora.on) return mlp ? layer.mlp_offset() : layer.first_offset();
  // The adapters lie in layer order, each layer's attention's before its MLP's: the first of this half or after.
  for (int64_t l = layer.layer(); l < dims_.l1; ++l)
    for (bool half : {false, true}) {
      if (l == layer.layer() && mlp && !half) continue;
      if (const int64_t at = lora_unit_offset(l, half); at >= 0) return at;
    }
  return params_.total_floats();
}


TransformerLM::BaseWeights::BaseWeights(TransformerLM& model, size_t layer) : m(model), i(layer) {
  if (m.base_ranges_.empty() || i >= m.base_ranges_.size()) return;
  const auto [b, e] = m.base_ranges_[i];
  float* w = m.bw_;
  const bf16* low = m.base_low_.data();
#pragma omp parallel for schedule(static)
  for (int64_t k = b; k < e; ++k) w[k] = bf16_to_float(low[k]);
}

TransformerLM::BaseWeights::~BaseWeights() {
  if (m.base_ranges_.empty() || i >= m.base_ranges_.size()) return;
  const auto [b, e] = m.base_ranges_[i];
  release_pages(m.bw_ + b, m.bw_ + e);
}

void TransformerLM::narrow_base() {
  for (const auto& [b, e] : base_ranges_) {
    make_low_copy(ComputeDtype::kBFloat16, base_low_.data() + b, bw_ + b, e - b);
    release_pages(bw_ + b, bw_ + e);
  }
}

void TransformerLM::init_frozen(uint64_t seed) {
  if (!base_view_) return;
  if (base_ranges_.empty()) return base_params_.initialize(bw_, seed);
  // Layer by layer, each rounded and its fp32 pages given back before the next: no moment holds the whole base.
  std::vector<std::pair<int64_t, int64_t>> rest;
  int64_t at = 0;
  for (const auto& [b, e] : base_ranges_) {
    if (at < b) rest.emplace_back(at, b);
    base_params_.initialize(bw_, seed, {{b, e}});
    make_low_copy(ComputeDtype::kBFloat16, base_low_.data() + b, bw_ + b, e - b);
    release_pages(bw_ + b, bw_ + e);
    at = e;
  }
  if (at < base_params_.total_floats()) rest.emplace_back(at, base_params_.total_floats());
  base_params_.initialize(bw_, seed, rest);
  base_narrowed_ = true;
}

void TransformerLM::lora_saved_from_base(const std::vector<std::pair<int64_t, int64_t>>& only) {
  if (!spec_.lora.on) return;
  for (const TensorPlacement& t : params_.tensors()) {
    const TensorPlacement* b = base_params_.find(t.spec->name);
    if (b == nullptr && spec_.tied_head && t.spec->name == lora_head_name(names_))
      b = base_params_.find(names_(Role::kEmbed, -1));  // a tied head's copy: of the embedding it reads
    if (b == nullptr) continue;  // an adapter
    if (b->numel() != t.numel()) throw std::logic_error("lora: " + t.spec->name + " is laid out apart from its base");
    const int64_t n = t.numel();
    auto copy = [&](int64_t lo, int64_t hi) {  // arena range [lo, hi) of t
      if (lo < hi) std::memcpy(w_ + lo, bw_ + b->offset + (lo - t.offset), sizeof(float) * static_cast<size_t>(hi - lo));
    };
    if (only.empty()) copy(t.offset, t.offset + n);
    for (const auto& [lo, hi] : only) copy(std::max(lo, t.offset), std::min(hi, t.offset + n));
  }
}

void TransformerLM::frozen_loaded() {
  if (!base_ranges_.empty() && !base_narrowed_) narrow_base();  // (init_frozen rounds as it goes)
  base_narrowed_ = true;
}

}  // namespace gf
