#include "core/ops/cross_entropy.h"

#include <algorithm>
#include <cmath>

namespace gf::ops {
namespace {

template <typename T>
struct RowStats {
  T max;
  double sum;  // sum of exp(x - max), in double so a 50k-wide row loses nothing
};

template <typename T>
RowStats<T> row_stats(const T* x, int64_t n) {
  T mx = x[0];
  for (int64_t j = 1; j < n; ++j) mx = std::max(mx, x[j]);
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - mx);
  return {mx, s};
}

}  // namespace

template <typename T>
void cross_entropy_fwd(T* losses, const T* logits, const int32_t* targets, int64_t rows,
                       int64_t ld, int64_t valid) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * ld;
    const RowStats<T> st = row_stats(x, valid);
    losses[r] = static_cast<T>(std::log(st.sum) + st.max - x[targets[r]]);
  }
}

template <typename T>
void cross_entropy_bwd_inplace(T* logits, const int32_t* targets, int64_t rows, int64_t ld,
                               int64_t valid, float grad_scale) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    T* x = logits + r * ld;
    const RowStats<T> st = row_stats(x, valid);
    const T inv = static_cast<T>(1.0 / st.sum);
    for (int64_t j = 0; j < valid; ++j) x[j] = std::exp(x[j] - st.max) * inv * grad_scale;
    x[targets[r]] -= grad_scale;
    std::fill(x + valid, x + ld, T(0));
  }
}

template void cross_entropy_fwd<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t);
template void cross_entropy_fwd<double>(double*, const double*, const int32_t*, int64_t, int64_t, int64_t);
template void cross_entropy_bwd_inplace<float>(float*, const int32_t*, int64_t, int64_t, int64_t, float);
template void cross_entropy_bwd_inplace<double>(double*, const int32_t*, int64_t, int64_t, int64_t, float);

}  // namespace gf::ops
