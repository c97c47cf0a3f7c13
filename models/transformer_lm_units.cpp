// TransformerLM's side of ZeRO-2 and 3 (parallel/zero.h): where its blocks' units start (the
// embedding, each layer's two halves, an MoE layer's experts, the head and its vocabulary chunks), the
// finer units switched on, and the weights' low-precision copy made and given back unit by unit.
#include <algorithm>

#include "core/math/aligned_buffer.h"
#include "models/lora.h"
#include "models/transformer_lm.h"

namespace gf {

std::vector<int64_t> TransformerLM::weight_unit_starts() const {
  std::vector<int64_t> at;
  if (spec_.lora.on) {  // the adapters of each layer's two halves, and of its experts (in the expert region)
    if (dims_.first && embedding_.saved()) at.push_back(embedding_.token_offset());  // modules_to_save's
    for (const TransformerLayer& l : layers_) {
      for (bool mlp : {false, true}) at.push_back(lora_unit_offset(l.layer(), mlp));
      at.push_back(l.lora_expert_offset());
    }
    if (dims_.last && head_.saved()) at.push_back(head_.weight_offset());
    return at;
  }
  if (dims_.first) at.push_back(embedding_.first_offset());
  for (const TransformerLayer& l : layers_) {
    at.push_back(l.first_offset());
    at.push_back(l.mlp_offset());
    if (l.expert_offset() >= 0) at.push_back(l.expert_offset());
  }
  if (dims_.last) at.push_back(head_.first_offset());
  for (size_t c = 0; c < chunk_rows_.size(); ++c) at.push_back(chunk_offset(c));  // the last: the weight's end
  return at;
}

void TransformerLM::set_fine_units(bool on) {
  halves_ = on;
  chunks_on_ = on && !chunk_rows_.empty();
  chunks_.at = chunks_on_ ? chunk_rows_ : std::vector<int64_t>{};
  head_all_reads_ = head_reads_;
  if (chunks_on_)
    for (size_t c = 1; c + 1 < chunk_rows_.size(); ++c) head_all_reads_.push_back(chunk_offset(c));
}

std::vector<int64_t> TransformerLM::vocab_chunk_offsets() const {
  std::vector<int64_t> at;
  for (size_t c = 0; c < chunks_.count(); ++c) at.push_back(chunk_offset(c));
  return at;
}

std::vector<int64_t> TransformerLM::vocab_chunk_rows(const TransformerSpec& spec, const NameMap& names,
                                                     const Placement& t, bool holds_embedding,
                                                     std::vector<int64_t> dense, std::vector<int64_t> experts) {
  if ((spec.tied_head && !holds_embedding) || dense.size() < 2) return {};
  // The experts' units fill the arena's expert region, after every dense parameter.
  experts.push_back(t.total_floats());
  int64_t largest = 0;
  for (std::vector<int64_t>* cuts : {&dense, &experts}) {
    std::sort(cuts->begin(), cuts->end());
    for (size_t i = 0; i + 1 < cuts->size(); ++i) largest = std::max(largest, (*cuts)[i + 1] - (*cuts)[i]);
  }
  const TensorPlacement& w = t.at(names(spec.tied_head ? Role::kEmbed : Role::kLmHead, -1));
  const int64_t rows = w.local_shape.at(0), per = std::max<int64_t>(1, largest / spec.hidden);
  if (per >= rows) return {};
  std::vector<int64_t> at;
  for (int64_t r = 0; r < rows; r += per) at.push_back(r);
  at.push_back(rows);
  return at;
}

std::vector<int64_t> TransformerLM::unit_starts(const TransformerSpec& spec, const NameMap& names, const Placement& t,
                                                int tp, int ep, const std::vector<StageOptions>& chunks) {
  std::vector<int64_t> at;
  for (const StageOptions& st : chunks) {
    const int64_t l1 = st.layer_end < 0 ? spec.layers : st.layer_end;
    if (spec.lora.on) {  // weight_unit_starts' adapters
      // modules_to_save's embedding and head: units of their own, where this chunk's table holds them.
      const TensorPlacement* emb = st.layer_begin == 0 ? t.find(names(Role::kEmbed, -1)) : nullptr;
      const TensorPlacement* head = l1 == spec.layers ? t.find(lora_head_name(names)) : nullptr;
      if (emb) at.push_back(emb->offset);
      for (int64_t l = st.layer_begin; l < l1; ++l) {
        for (bool mlp : {false, true}) at.push_back(lora_half_offset(names, t, l, mlp));
        TransformerLayer layer(spec, tp, l, nullptr, nullptr, ep, 1);
        layer.bind_lora(t, names, spec.lora);
        at.push_back(layer.lora_expert_offset());
      }
      if (head) at.push_back(head->offset);
      continue;
    }
    if (st.layer_begin == 0) {
      EmbeddingBlock e(spec, VocabSlice{});
      e.bind(t, names);
      at.push_back(e.first_offset());
    }
    std::vector<int64_t> dense, experts;  // this chunk's layer units, for the head's vocabulary chunks below
    for (int64_t l = st.layer_begin; l < l1; ++l) {
      TransformerLayer layer(spec, tp, l, nullptr, nullptr, ep, 1);
      layer.bind(t, names);
      at.push_back(layer.first_offset());
      at.push_back(layer.mlp_offset());
      dense.push_back(layer.first_offset());
      dense.push_back(layer.mlp_offset());
      if (layer.expert_offset() >= 0) {
        at.push_back(layer.expert_offset());
        experts.push_back(layer.expert_offset());
      }
    }
    if (l1 == spec.layers) {
      LmHeadBlock h(spec, VocabSlice{}, 0);
      h.bind(t, names);
      at.push_back(h.first_offset());
      // The head's vocabulary chunks, as weight_unit_starts() cuts them.
      dense.push_back(h.first_offset());
      for (int64_t r : vocab_chunk_rows(spec, names, t, st.layer_begin == 0, dense, experts))
        at.push_back(h.weight_offset() + r * spec.hidden);
    }
  }
  return at;
}

std::vector<TransformerLM::GatherRange> TransformerLM::gather_ranges(const TransformerSpec& spec, const NameMap& names,
                                                                   const Placement& t, int tp, int ep,
                                                                   const std::vector<StageOptions>& chunks) {
  if (spec.lora.on) return {};
  std::vector<std::pair<int64_t, int>> starts;  // each block's first offset, and its gathers a micro-batch
  int head_times = 0;
  for (const StageOptions& st : chunks) {
    const int64_t l1 = st.layer_end < 0 ? spec.layers : st.layer_end;
    const int layer_times = st.defer_weight_grads ? 3 : 2;
    if (st.layer_begin == 0) {
      EmbeddingBlock e(spec, VocabSlice{});
      e.bind(t, names);
      starts.emplace_back(e.first_offset(), 1);
    }
    for (int64_t l = st.layer_begin; l < l1; ++l) {
      TransformerLayer layer(spec, tp, l, nullptr, nullptr, ep, 1);
      layer.bind(t, names);
      starts.emplace_back(layer.first_offset(), layer_times);
      starts.emplace_back(layer.mlp_offset(), layer_times);
      if (layer.expert_offset() >= 0) starts.emplace_back(layer.expert_offset(), layer_times);
    }
    if (l1 == spec.layers) {
      LmHeadBlock h(spec, VocabSlice{}, 0);
      h.bind(t, names);
      head_times = st.defer_weight_grads && !st.share_logits ? 3 : 2;
      starts.emplace_back(h.first_offset(), head_times);
    }
  }
  std::sort(starts.begin(), starts.end());
  std::vector<GatherRange> out;
  for (size_t i = 0; i < starts.size(); ++i)
    out.push_back({starts[i].first, i + 1 < starts.size() ? starts[i + 1].first : t.total_floats(), starts[i].second});
  if (spec.tied_head && head_times > 0)
    if (const TensorPlacement* x = t.find(names(Role::kEmbed, -1))) out.push_back({x->offset, x->offset + x->numel(), head_times});
  return out;
}

void TransformerLM::convert_low(int64_t begin, int64_t end) {
  if (cdt_ == ComputeDtype::kFloat32 || begin >= end) return;
  make_low_copy(cdt_, lowp_ + begin * low_copy_element_bytes(cdt_), w_ + begin, end - begin);
}

void TransformerLM::release_low(int64_t begin, int64_t end) {
  if (cdt_ == ComputeDtype::kFloat32 || begin >= end) return;
  const int64_t eb = low_copy_element_bytes(cdt_);
  release_pages(lowp_ + begin * eb, lowp_ + end * eb);
}

}  // namespace gf
