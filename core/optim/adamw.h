// AdamW (decoupled weight decay, bias-corrected moments; the arithmetic of torch.optim.AdamW)
// over the flat arena. One implementation behind the YAML names AdamWeightDecay,
// FusedAdamWeightDecay and AdamW. Moments share the parameter layout, so a shard of the
// optimizer is a [begin, end) range of elements.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/math/aligned_buffer.h"
#include "core/math/mixed_precision.h"
#include "core/params/placement.h"

namespace gf {

// How the two moments (m, v) are stored (optimizer.moment_dtype). kBFloat16, as Megatron's
// precision-aware optimizer (--exp-avg-dtype/--exp-avg-sq-dtype bf16) and torchtitan offer: each
// step loads a moment as fp32, computes the update exactly as under kFloat32 (the update uses the
// fp32 moments just computed) and stores the moments rounded to bf16 (nearest even): 2 bytes per
// moment element instead of 4.
enum class MomentDtype { kFloat32, kBFloat16 };
const char* moment_dtype_name(MomentDtype d);                     // "float32" | "bfloat16"
bool parse_moment_dtype(const std::string& s, MomentDtype& out);  // false for another text
inline int64_t moment_element_bytes(MomentDtype d) { return d == MomentDtype::kBFloat16 ? 2 : 4; }

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  MomentDtype moment_dtype = MomentDtype::kFloat32;
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
  // The two moments' bytes: 2 x size() x moment_element_bytes(config().moment_dtype).
  int64_t state_bytes() const { return 2 * size() * moment_element_bytes(cfg_.moment_dtype); }

  const AdamWConfig& config() const { return cfg_; }
  int64_t size() const { return end_ - begin_; }  // moment elements per moment

  // Moment k (0: m, 1: v) elements [i0, i0 + n) of the shard (element i is arena element
  // shard_begin + i) copied out as floats / in from floats, whatever the storage: bf16 -> f32 is
  // exact, f32 -> bf16 rounds to nearest even (so a bf16 moment written back from what was read
  // out is unchanged). Checkpoints go through these, so they hold F32 moments under either dtype.
  void read_moments(int k, int64_t i0, int64_t n, float* out) const;
  void write_moments(int k, int64_t i0, int64_t n, const float* in);

  // The float32 moments in place (null under bfloat16 moments): element i of the shard is arena
  // element shard_begin + i.
  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  const float* m() const { return m_.data(); }
  const float* v() const { return v_.data(); }

 private:
  struct Range { int64_t begin, end; bool decay; };
  std::vector<Range> ranges_;
  AdamWConfig cfg_;
  int64_t begin_, end_;
  AlignedBuffer<float> m_, v_;     // float32 moments (empty under bfloat16)
  AlignedBuffer<bf16> m16_, v16_;  // bfloat16 moments (empty under float32)
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
