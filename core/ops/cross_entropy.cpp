#include "core/ops/cross_entropy.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

namespace gf::ops {
namespace {

template <typename T>
using RowMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstRowMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// log(sum(exp(x))) of one row, vectorised (Eigen's packet exp).
template <typename T>
T logsumexp(const T* x, int64_t n) {
  ConstRowMap<T> row(x, n);
  const T mx = row.maxCoeff();
  return mx + std::log((row - mx).exp().sum());
}

}  // namespace

template <typename T>
void cross_entropy_fwd(T* losses, T* lse, const T* logits, const int32_t* targets, int64_t rows, int64_t ld,
                       int64_t valid) {
  GF_OP_SPAN("elementwise", "cross entropy fwd");
#pragma omp parallel for schedule(static) if (parallel_worth(rows * valid * kTranscendentalWork))
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * ld;
    lse[r] = logsumexp(x, valid);
    losses[r] = targets[r] < 0 ? T(0) : lse[r] - x[targets[r]];
  }
}

template <typename T>
void cross_entropy_bwd_inplace(T* logits, const T* lse, const int32_t* targets, int64_t rows, int64_t ld,
                               int64_t valid, float grad_scale, int64_t vocab_begin) {
  GF_OP_SPAN("elementwise", "cross entropy bwd");
#pragma omp parallel for schedule(static) if (parallel_worth(rows * valid * kTranscendentalWork))
  for (int64_t r = 0; r < rows; ++r) {
    T* x = logits + r * ld;
    RowMap<T> row(x, valid);
    row = (row - lse[r]).exp() * static_cast<T>(targets[r] < 0 ? 0.0f : grad_scale);
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    if (t >= 0 && t < valid) x[t] -= static_cast<T>(grad_scale);
    std::fill(x + valid, x + ld, T(0));
  }
}

template void cross_entropy_fwd<float>(float*, float*, const float*, const int32_t*, int64_t, int64_t, int64_t);
template void cross_entropy_fwd<double>(double*, double*, const double*, const int32_t*, int64_t, int64_t, int64_t);
template void cross_entropy_bwd_inplace<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t, float, int64_t);
template void cross_entropy_bwd_inplace<double>(double*, const double*, const int32_t*, int64_t, int64_t, int64_t, float, int64_t);

}  // namespace gf::ops
