// ZeRO-3's contract between the model and the sharded weights (parallel/zero.h WeightStream): a
// block's weights are present only between need() and done(). Blocks name what they read by arena
// offsets (any offset inside a unit names that unit).
#pragma once
#include <cstdint>
#include <vector>

namespace gf {

class WeightGate {
 public:
  virtual ~WeightGate() = default;
  // Before a block reads the weights at `now`; `next`: what the block after it will read (fetched in
  // the background meanwhile).
  virtual void need(const std::vector<int64_t>& now, const std::vector<int64_t>& next) = 0;
  virtual void done(const std::vector<int64_t>& now) = 0;
  // Between layers: advances the fetches in flight.
  virtual void progress() = 0;
};

}  // namespace gf
