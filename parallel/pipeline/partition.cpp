#include "parallel/pipeline/partition.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace gf {
namespace {

const char* const kOffset = "model.model_config.offset";

std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// The split of L layers over p stages x v chunks, with the numbers the messages quote.
struct Split {
  int64_t layers, stages, chunks;
  int64_t virtual_stages() const { return stages * chunks; }
  int64_t per_stage() const { return layers / virtual_stages(); }   // L // V
  int64_t remainder() const { return layers % virtual_stages(); }   // L % V
  int64_t pp_dis() const { return std::max<int64_t>((layers + 1) / virtual_stages(), 1); }

  // "stage 2", or with chunks "virtual stage 5 (stage 1, chunk 1)".
  std::string name(int64_t k) const {
    if (chunks == 1) return "stage " + std::to_string(k);
    return "virtual stage " + std::to_string(k) + " (stage " + std::to_string(k % stages) + ", chunk " +
           std::to_string(k / stages) + ")";
  }
  std::string what() const {
    if (chunks == 1) return "`parallel_config.pipeline_stage` (" + std::to_string(stages) + ") stages";
    return std::to_string(virtual_stages()) + " virtual stages (`parallel_config.pipeline_stage` " +
           std::to_string(stages) + " x " + std::to_string(chunks) +
           " model chunks, `model.model_config.pp_interleave_num`)";
  }
};

// MindFormers' int rule: layer i on virtual stage min((i + offset) // pp_dis, V - 1). The stage of a
// layer whose i + offset is negative would be negative: returned as the first such layer's index in
// `negative_layer` (-1: none), its counts left incomplete.
std::vector<int64_t> int_rule(const Split& s, int64_t offset, int64_t& negative_layer) {
  std::vector<int64_t> counts(s.virtual_stages(), 0);
  negative_layer = -1;
  for (int64_t i = 0; i < s.layers; ++i) {
    if (i + offset < 0) {
      if (negative_layer < 0) negative_layer = i;
      continue;
    }
    ++counts[std::min((i + offset) / s.pp_dis(), s.virtual_stages() - 1)];
  }
  return counts;
}

bool fills(const std::vector<int64_t>& counts) {
  return std::all_of(counts.begin(), counts.end(), [](int64_t c) { return c >= 1; });
}

// An offset of the given form that works: the remainder spread one layer each over the first
// stages (a per-stage list needs the remainder to split evenly over the chunks; else the
// [chunk][stage] form), with the layers it gives.
std::string working_list(const Split& s, LayerOffset::Form form) {
  const int64_t p = s.stages, v = s.chunks, r = s.remainder();
  std::vector<int64_t> counts(s.virtual_stages(), s.per_stage());
  if (form == LayerOffset::Form::kPerStage && (v == 1 || r % v == 0)) {
    std::vector<int64_t> off(p, 0);
    for (int64_t i = 0; i < r / v; ++i) off[i] = 1;
    for (int64_t k = 0; k < s.virtual_stages(); ++k) counts[k] += off[k % p];
    return list(off) + " (layers " + list(counts) + ")";
  }
  std::string rows = "[";
  for (int64_t c = 0; c < v; ++c) {
    std::vector<int64_t> row(p, 0);
    for (int64_t st = 0; st < p; ++st) row[st] = c * p + st < r ? 1 : 0;
    rows += (c ? ", " : "") + list(row);
  }
  for (int64_t k = 0; k < r; ++k) ++counts[k];
  return rows + "] (layers " + list(counts) + ")";
}

// "offset: 0 (layers [...])" and a list that works: what the messages end with.
std::string what_works(const Split& s, LayerOffset::Form form) {
  int64_t neg;
  const std::string zero = "offset: 0 (layers " + list(int_rule(s, 0, neg)) + ")";
  if (form == LayerOffset::Form::kInt) return zero + ", or offset: " + working_list(s, LayerOffset::Form::kPerStage);
  return "offset: " + working_list(s, form) + ", or " + zero;
}

std::vector<int64_t> by_int(const Split& s, int64_t offset) {
  int64_t negative_layer;
  const std::vector<int64_t> counts = int_rule(s, offset, negative_layer);
  const std::string rule = "MindFormers places layer i on " + std::string(s.chunks == 1 ? "stage" : "virtual stage") +
                           " min((i + offset) // pp_dis, " + std::to_string(s.virtual_stages() - 1) +
                           ") with pp_dis = max((num_layers + 1) // " + std::to_string(s.virtual_stages()) +
                           ", 1) = " + std::to_string(s.pp_dis());
  if (negative_layer >= 0)
    throw std::invalid_argument("`" + std::string(kOffset) + ": " + std::to_string(offset) + "` puts layer " +
                                std::to_string(negative_layer) + " on stage (" + std::to_string(negative_layer) + " + " +
                                std::to_string(offset) + ") // " + std::to_string(s.pp_dis()) + " < 0: " + rule +
                                ", so an int offset must be >= 0; use " + what_works(s, LayerOffset::Form::kInt));
  if (!fills(counts)) {
    int64_t largest = 0;
    for (int64_t k = 1;; ++k) {
      int64_t neg;
      if (!fills(int_rule(s, k, neg))) break;
      largest = k;
    }
    const int64_t empty = std::find(counts.begin(), counts.end(), 0) - counts.begin();
    throw std::invalid_argument("`" + std::string(kOffset) + ": " + std::to_string(offset) + "` leaves " + s.name(empty) +
                                " without a layer (layers " + list(counts) + "): " + rule + "; an int offset from 0 to " +
                                std::to_string(largest) + " works here, e.g. " +
                                what_works(s, LayerOffset::Form::kInt));
  }
  return counts;
}

std::vector<int64_t> by_list(const Split& s, const LayerOffset& o) {
  const bool grid = o.form == LayerOffset::Form::kPerChunkStage;
  const std::string given = "`" + std::string(kOffset) + ": " + o.str() + "`";
  const std::string fix = "; e.g. " + what_works(s, o.form);
  const int64_t rows = static_cast<int64_t>(o.values.size());
  if (grid && rows != s.chunks)
    throw std::invalid_argument(given + " has " + std::to_string(rows) + (rows == 1 ? " row" : " rows") + ", but there " +
                                (s.chunks == 1 ? "is 1 model chunk" : "are " + std::to_string(s.chunks) + " model chunks") +
                                " per stage (`model.model_config.pp_interleave_num` with "
                                "`parallel.pipeline_config.pipeline_interleave: True`, else 1): one row per chunk, "
                                "of one offset per stage" + fix);
  for (int64_t c = 0; c < rows; ++c) {
    const int64_t n = static_cast<int64_t>(o.values[c].size());
    if (n != s.stages)
      throw std::invalid_argument(given + (grid ? " row " + std::to_string(c) + " has " : " has ") + std::to_string(n) +
                                  (n == 1 ? " entry" : " entries") + ", but `parallel_config.pipeline_stage` is " +
                                  std::to_string(s.stages) + ": one offset per stage" + fix);
  }
  std::vector<int64_t> counts(s.virtual_stages());
  for (int64_t k = 0; k < s.virtual_stages(); ++k)
    counts[k] = s.per_stage() + o.values[grid ? k / s.stages : 0][k % s.stages];
  const std::string gives = given + " gives num_layers // " + std::to_string(s.virtual_stages()) + " + offset = " +
                            std::to_string(s.per_stage()) + " + offset = " + list(counts) +
                            (!grid && s.chunks > 1 ? " (the list applies to each of the " + std::to_string(s.chunks) +
                                                         " chunks)" : "");
  for (int64_t k = 0; k < s.virtual_stages(); ++k)
    if (counts[k] < 1)
      throw std::invalid_argument(gives + ": " + s.name(k) + " gets " + std::to_string(counts[k]) +
                                  " layers; every stage needs at least one (an offset of at least " +
                                  std::to_string(1 - s.per_stage()) + ")" + fix);
  if (sum(counts) != s.layers) {
    std::string offsets_sum;
    for (const auto& row : o.values) offsets_sum += (offsets_sum.empty() ? "" : " + ") + std::to_string(sum(row));
    const int64_t given_sum = sum(counts) - s.per_stage() * s.virtual_stages();
    throw std::invalid_argument(gives + ", " + std::to_string(sum(counts)) + " layers, but `model.model_config.num_layers` is " +
                                std::to_string(s.layers) + ": the offsets of all " +
                                std::to_string(s.virtual_stages()) + (s.chunks == 1 ? " stages" : " virtual stages") +
                                " must sum to num_layers % " + std::to_string(s.virtual_stages()) + " = " +
                                std::to_string(s.remainder()) + " (they sum to " + std::to_string(given_sum) + ")" + fix);
  }
  return counts;
}

}  // namespace

bool LayerOffset::is_zero() const {
  for (const auto& row : values)
    for (int64_t v : row)
      if (v != 0) return false;
  return true;
}

std::string LayerOffset::str() const {
  if (form == Form::kInt) return std::to_string(values.empty() || values[0].empty() ? 0 : values[0][0]);
  if (form == Form::kPerStage) return list(values.empty() ? std::vector<int64_t>{} : values[0]);
  std::string s = "[";
  for (size_t c = 0; c < values.size(); ++c) s += (c ? ", " : "") + list(values[c]);
  return s + "]";
}

std::vector<int64_t> partition_layers(int64_t layers, int64_t stages, int64_t chunks, const LayerOffset& offset) {
  if (stages < 1 || chunks < 1)
    throw std::invalid_argument("partition_layers: `parallel_config.pipeline_stage` (" + std::to_string(stages) +
                                ") and the model chunks per stage (" + std::to_string(chunks) + ") must be >= 1");
  const Split s{layers, stages, chunks};
  if (layers < s.virtual_stages()) {
    std::string fix;
    if (layers >= chunks) fix = "use pipeline_stage: " + std::to_string(layers / chunks) + " or fewer";
    if (chunks > 1 && layers >= stages)
      fix += std::string(fix.empty() ? "use " : ", or ") + "pp_interleave_num: " + std::to_string(layers / stages) +
             " or fewer";
    if (fix.empty()) fix = "use pipeline_stage: 1 and pp_interleave_num: 1";
    throw std::invalid_argument("`model.model_config.num_layers` (" + std::to_string(layers) + ") is fewer than the " +
                                s.what() + ": every stage needs at least one layer; " + fix);
  }
  if (offset.form == LayerOffset::Form::kInt) {
    if (offset.values.size() != 1 || offset.values[0].size() != 1)
      throw std::invalid_argument("partition_layers: an int offset holds one value");
    return by_int(s, offset.values[0][0]);
  }
  if (offset.form == LayerOffset::Form::kPerStage && offset.values.size() != 1)
    throw std::invalid_argument("partition_layers: a per-stage offset holds one row");
  return by_list(s, offset);
}

std::vector<int64_t> layer_bounds(const std::vector<int64_t>& counts) {
  std::vector<int64_t> b(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), b.begin() + 1);
  return b;
}

}  // namespace gf
