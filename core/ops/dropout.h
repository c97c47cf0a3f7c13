// Dropout whose mask is a pure function of (seed, stream, element index): forward and a backward
// (or a recomputed forward) regenerate the same mask, so nothing is stored, and the element index
// is the global one so the mask does not depend on how the tensor is split across ranks.
#pragma once
#include <cstdint>

#include "core/math/rng.h"

namespace gf::ops {

struct DropoutKey {
  float rate = 0.0f;     // probability of dropping; 0 disables
  uint64_t seed = 0;
  uint64_t stream = 0;   // which site: hash of (layer, site, step)
  bool active() const { return rate > 0.0f; }
  // Scale applied to element `index`: 0 when dropped, 1/(1-rate) when kept.
  float scale(uint64_t index) const {
    return counter_uniform(seed, stream, index) < rate ? 0.0f : 1.0f / (1.0f - rate);
  }
};

// Combines integers into a stream id.
inline uint64_t dropout_stream(uint64_t step, uint64_t layer, uint64_t site) {
  return splitmix64(splitmix64(splitmix64(step) ^ layer) ^ site);
}

// x[r, c] *= key.scale(global index) for a [rows, cols] block whose row r is global row
// row_offset + r of a tensor `global_cols` wide, starting at global column col_offset.
template <typename T>
void dropout_apply(T* x, const DropoutKey& key, int64_t rows, int64_t cols, int64_t row_offset,
                   int64_t col_offset, int64_t global_cols);

}  // namespace gf::ops
