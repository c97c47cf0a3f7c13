// Which targets a batch trains and where its packed documents begin (models/causal_lm.h).
#include <algorithm>
#include <cstdint>

#include "models/causal_lm.h"

namespace gf {

void split_targets(const ModelConfig& cfg, int32_t* inputs, int32_t* targets, int64_t n) {
  const bool eod_mask = cfg.documents.eod_mask_loss;
  const int64_t eod = cfg.eod_id();
  for (int64_t i = 0; i < n; ++i) {
    inputs[i] &= ~kNotTrainedBit;
    if ((targets[i] & kNotTrainedBit) != 0 || (eod_mask && inputs[i] == eod)) targets[i] = -1;
  }
}

int64_t trained_targets(const ModelConfig& cfg, const int32_t* tokens, int64_t rows, int64_t T) {
  const bool eod_mask = cfg.documents.eod_mask_loss;
  const int64_t eod = cfg.eod_id();
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* t = tokens + r * (T + 1);
    for (int64_t i = 0; i < T; ++i) {
      const bool masked = (t[i + 1] & kNotTrainedBit) != 0 || (eod_mask && (t[i] & ~kNotTrainedBit) == eod);
      n += masked ? 0 : 1;
    }
  }
  return n;
}

void document_layout(const DocumentConfig& docs, int64_t eod, const int32_t* inputs, int64_t B, int64_t T,
                     int32_t* positions, int32_t* key_lo, int64_t window) {
  for (int64_t b = 0; b < B; ++b) {
    int64_t start = 0;  // the first row of the current document in this sequence
    for (int64_t i = 0; i < T; ++i) {
      const int64_t r = b * T + i;
      positions[r] = static_cast<int32_t>(docs.reset_position_ids ? i - start : i);
      int64_t lo = docs.reset_attention_mask ? start : 0;
      if (window > 0) lo = std::max(lo, i - window + 1);
      key_lo[r] = static_cast<int32_t>(lo);
      if (inputs[r] == eod) start = i + 1;  // the eod belongs to its document; the next row starts another
    }
  }
}

}  // namespace gf
