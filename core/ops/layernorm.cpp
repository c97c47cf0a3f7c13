#include "core/ops/layernorm.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

#include <algorithm>
#include <cmath>

namespace gf::ops {
namespace {

// sum_i f(i) over [0, n) in double, in kLanes interleaved partial sums added in lane order. With one
// running sum every add waits on the previous one's latency; independent lanes vectorise (the
// forward measured 3.3-3.7x faster on one core, bench_ops). Per row, so still independent of the
// thread count.
template <typename F>
double lane_sum(int64_t n, F&& f) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += f(i + j);
  for (int j = 0; i < n; ++i, ++j) acc[j] += f(i);
  double s = 0.0;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

// The forward's rows, the output stored by `put(y + i, value)`: one source for the float output and the bf16
// one, so the bf16 output is the float output rounded (the same expression, contracted the same way).
template <typename T, typename Y, typename Put>
void layernorm_rows(Y* y, LayerNormCache<T> cache, const T* x, const T* w, const T* b, int64_t rows, int64_t dim,
                    float eps, Put put) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const double sum = lane_sum(dim, [xr](int64_t i) { return static_cast<double>(xr[i]); });
    const T m = static_cast<T>(sum / dim);
    const double var = lane_sum(dim, [xr, m](int64_t i) {
      const T d = xr[i] - m;
      return static_cast<double>(d) * d;
    });
    const T s = static_cast<T>(1.0 / std::sqrt(var / dim + eps));
    Y* yr = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) put(yr + i, (xr[i] - m) * s * w[i] + b[i]);
    cache.mean[r] = m;
    cache.rstd[r] = s;
  }
}

}  // namespace

template <typename T>
void layernorm_fwd(T* y, LayerNormCache<T> cache, const T* x, const T* w, const T* b,
                   int64_t rows, int64_t dim, float eps) {
  GF_OP_SPAN("norm", "layernorm fwd");
  layernorm_rows(y, cache, x, w, b, rows, dim, eps, [](T* p, T v) { *p = v; });
}

void layernorm_fwd_bf16(bf16* y, LayerNormCache<float> cache, const float* x, const float* w, const float* b,
                        int64_t rows, int64_t dim, float eps) {
  GF_OP_SPAN("norm", "layernorm fwd");
  layernorm_rows(y, cache, x, w, b, rows, dim, eps, [](bf16* p, float v) { *p = float_to_bf16(v); });
}

template <typename T>
void layernorm_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                   LayerNormCache<T> cache, int64_t rows, int64_t dim) {
  GF_OP_SPAN("norm", "layernorm bwd");
  layernorm_bwd_input(dx, dy, x, w, cache, rows, dim);
  layernorm_bwd_weight(dw, db, dy, x, cache, rows, dim);
}

template <typename T>
void layernorm_bwd_input(T* dx, const T* dy, const T* x, const T* w, LayerNormCache<T> cache, int64_t rows,
                         int64_t dim) {
  GF_OP_SPAN("norm", "layernorm bwd input");
  // Row by row.
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    const T m = cache.mean[r], s = cache.rstd[r];
    T mean_dn = 0, mean_dn_xhat = 0;
    for (int64_t i = 0; i < dim; ++i) {
      const T xhat = (xr[i] - m) * s;
      const T dn = w[i] * dyr[i];
      mean_dn += dn;
      mean_dn_xhat += dn * xhat;
    }
    mean_dn /= dim;
    mean_dn_xhat /= dim;
    T* dxr = dx + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      const T xhat = (xr[i] - m) * s;
      dxr[i] += (w[i] * dyr[i] - mean_dn - xhat * mean_dn_xhat) * s;
    }
  }
}

template <typename T>
void layernorm_bwd_weight(T* dw, T* db, const T* dy, const T* x, LayerNormCache<T> cache, int64_t rows,
                          int64_t dim) {
  GF_OP_SPAN("norm", "layernorm bwd weight");
  // dw/db are sums over rows: the columns are split across threads and each column is summed in
  // row order by one thread (as in sum_rows_accumulate), so the result does not depend on the
  // number of threads (it is what one thread computed before). Per-thread partial sums over row
  // ranges, added at the end, depended on the thread count, and their speed on two threads on where
  // the heap put them: one thread's loop ran up to twice as slow as the other's until its partial
  // sums were moved by 512 bytes (store/load address aliasing, we think), 1.1-1.5x over one thread
  // in bench_ops. This costs a second read of x and dy.
  constexpr int64_t kCols = 64;
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t c0 = 0; c0 < dim; c0 += kCols) {
    const int64_t nc = std::min(kCols, dim - c0);
    T aw[kCols] = {}, ab[kCols] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * dim + c0;
      const T* dyr = dy + r * dim + c0;
      const T m = cache.mean[r], s = cache.rstd[r];
      for (int64_t c = 0; c < nc; ++c) {
        const T xhat = (xr[c] - m) * s;
        aw[c] += dyr[c] * xhat;
        ab[c] += dyr[c];
      }
    }
    for (int64_t c = 0; c < nc; ++c) {
      dw[c0 + c] += aw[c];
      db[c0 + c] += ab[c];
    }
  }
}

template void layernorm_fwd<float>(float*, LayerNormCache<float>, const float*, const float*, const float*, int64_t, int64_t, float);
template void layernorm_fwd<double>(double*, LayerNormCache<double>, const double*, const double*, const double*, int64_t, int64_t, float);
template void layernorm_bwd<float>(float*, float*, float*, const float*, const float*, const float*, LayerNormCache<float>, int64_t, int64_t);
template void layernorm_bwd<double>(double*, double*, double*, const double*, const double*, const double*, LayerNormCache<double>, int64_t, int64_t);
template void layernorm_bwd_input<float>(float*, const float*, const float*, const float*, LayerNormCache<float>, int64_t, int64_t);
template void layernorm_bwd_input<double>(double*, const double*, const double*, const double*, LayerNormCache<double>, int64_t, int64_t);
template void layernorm_bwd_weight<float>(float*, float*, const float*, const float*, LayerNormCache<float>, int64_t, int64_t);
template void layernorm_bwd_weight<double>(double*, double*, const double*, const double*, LayerNormCache<double>, int64_t, int64_t);

}  // namespace gf::ops
