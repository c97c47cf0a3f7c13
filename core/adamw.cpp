#include "core/adamw.h"

#include <algorithm>
#include <cmath>

namespace gf {

AdamW::AdamW(const ParamTable& table, AdamWConfig cfg, int64_t shard_begin, int64_t shard_end)
    : cfg_(cfg), begin_(shard_begin), end_(shard_end < 0 ? table.total_floats() : shard_end),
      m_(static_cast<size_t>(end_ - begin_)), v_(static_cast<size_t>(end_ - begin_)) {
  for (const auto& p : table.specs()) ranges_.push_back({p.offset, p.offset + p.numel(), p.weight_decay});
}

void AdamW::step(float* params, const float* grads, double lr, int64_t step) {
  const int64_t begin = begin_, end = end_;
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(step));
  const float b1 = static_cast<float>(cfg_.beta1), b2 = static_cast<float>(cfg_.beta2);
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float eps = static_cast<float>(cfg_.eps);
  float* m = m_.data() - begin;  // indexed by arena position
  float* v = v_.data() - begin;
  for (const Range& r : ranges_) {
    const int64_t lo = std::max(begin, r.begin), hi = std::min(end, r.end);
    if (lo >= hi) continue;
    const float decay = r.decay ? static_cast<float>(1.0 - lr * cfg_.weight_decay) : 1.0f;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = lo; i < hi; ++i) {
      const float g = grads[i];
      float p = params[i] * decay;
      m[i] = b1 * m[i] + (1.0f - b1) * g;
      v[i] = b2 * v[i] + (1.0f - b2) * g * g;
      const float denom = std::sqrt(v[i]) * inv_sqrt_bc2 + eps;
      params[i] = p - step_size * m[i] / denom;
    }
  }
}

double grad_sq_sum(const float* g, int64_t n) {
  double s = 0.0;
#pragma omp parallel for reduction(+ : s) schedule(static)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(g[i]) * g[i];
  return s;
}

double clip_coefficient(double norm, double max_norm) {
  return std::min(1.0, max_norm / (norm + 1e-6));
}

void scale_inplace(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace gf
