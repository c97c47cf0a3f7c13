// What the trainer's checkpoint code shares: the names AdamW's moments are saved under, and which local elements of
// a tensor an optimizer shard of the arena covers (runner/train/checkpointing.cpp, megatron_state.cpp).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/params/placement.h"

namespace gf {

inline constexpr const char* kMomentPrefix[2] = {"optimizer.exp_avg.", "optimizer.exp_avg_sq."};

// The local elements [lo, hi) of `t` that an optimizer shard [b, e) of the arena covers.
inline bool shard_part(const TensorPlacement& t, int64_t b, int64_t e, int64_t& lo, int64_t& hi) {
  lo = std::max(b, t.offset) - t.offset;
  hi = std::min(e, t.offset + t.numel()) - t.offset;
  return lo < hi;
}

}  // namespace gf
