// AdamW (decoupled weight decay, bias-corrected moments; the arithmetic of torch.optim.AdamW)
// over the flat arena. One implementation behind the YAML names AdamWeightDecay,
// FusedAdamWeightDecay and AdamW. Moments share the parameter layout, so a shard of the
// optimizer is a [begin, end) range of floats.
#pragma once
#include <cstdint>
#include <vector>

#include "core/math/aligned_buffer.h"
#include "core/math/mixed_precision.h"
#include "core/params/placement.h"

namespace gf {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool operator==(const AdamWConfig&) const = default;
};

// What a step may do besides the update, in the same pass over the shard (each saves a pass over
// every parameter: for GPT-2 124M, 0.5 GB read and written).
struct AdamWStepExtras {
  // Each gradient is multiplied by this (rounded to float) before use, as scale_inplace(grads,
  // grad_scale) before the step would: gradient clipping's coefficient.
  float grad_scale = 1.0f;
  // When not null: the arena-indexed low-precision copy of the weights (make_low_copy's layout for
  // low_dtype) gets the updated weights of the shard, as make_low_copy would write them.
  void* low = nullptr;
  ComputeDtype low_dtype = ComputeDtype::kFloat32;
};

class AdamW {
 public:
  // Updates [shard_begin, shard_end) of the arena (the whole arena by default) and keeps moments
  // for that range only: the sharded optimizer (ZeRO-1) gives each data-parallel rank a shard.
  AdamW(const Placement& params, AdamWConfig cfg, int64_t shard_begin = 0, int64_t shard_end = -1);

  // One step (step counts from 1) over this optimizer's shard of the arena.
  void step(float* params, const float* grads, double lr, int64_t step, const AdamWStepExtras& extras = {});
  int64_t shard_begin() const { return begin_; }
  int64_t shard_end() const { return end_; }
  int64_t state_bytes() const { return static_cast<int64_t>(2 * m_.size() * sizeof(float)); }

  const AdamWConfig& config() const { return cfg_; }
  float* m() { return m_.data(); }  // element i of the shard is arena element shard_begin + i
  float* v() { return v_.data(); }
  const float* m() const { return m_.data(); }
  const float* v() const { return v_.data(); }
  int64_t size() const { return static_cast<int64_t>(m_.size()); }

 private:
  struct Range { int64_t begin, end; bool decay; };
  std::vector<Range> ranges_;
  AdamWConfig cfg_;
  int64_t begin_, end_;
  AlignedBuffer<float> m_, v_;
};

// Sum of squares of a gradient buffer (double accumulation); the same for any number of threads.
double grad_sq_sum(const float* g, int64_t n);
// The same over [begin, end) ranges of g, each range's sum as above, added in range order.
struct ArenaRange {
  int64_t begin, end;
};
double grad_sq_sum(const float* g, const std::vector<ArenaRange>& ranges);
// torch.nn.utils.clip_grad_norm_: coef = min(1, max_norm / (norm + 1e-6)); returns coef.
double clip_coefficient(double norm, double max_norm);
void scale_inplace(float* x, int64_t n, float s);

}  // namespace gf
