#include "core/ops/rmsnorm.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

#include <algorithm>
#include <cmath>

namespace gf::ops {

namespace {
// The forward's rows, the output stored by `put(y + i, value)` (layernorm.cpp's layernorm_rows: one source
// for the float and the bf16 output).
template <typename T, typename Y, typename Put>
void rmsnorm_rows(Y* y, T* rstd, const T* x, const T* w, int64_t rows, int64_t dim, float eps, Put put) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    T ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const T s = T(1) / std::sqrt(ss / static_cast<T>(dim) + static_cast<T>(eps));
    rstd[r] = s;
    Y* yr = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) put(yr + i, w[i] * (xr[i] * s));
  }
}
}  // namespace

template <typename T>
void rmsnorm_fwd(T* y, T* rstd, const T* x, const T* w, int64_t rows, int64_t dim, float eps) {
  GF_OP_SPAN("norm", "rmsnorm fwd");
  rmsnorm_rows(y, rstd, x, w, rows, dim, eps, [](T* p, T v) { *p = v; });
}

void rmsnorm_fwd_bf16(bf16* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t dim, float eps) {
  GF_OP_SPAN("norm", "rmsnorm fwd");
  rmsnorm_rows(y, rstd, x, w, rows, dim, eps, [](bf16* p, float v) { *p = float_to_bf16(v); });
}

template <typename T>
void rmsnorm_bwd_input(T* dx, const T* dy, const T* x, const T* w, const T* rstd, int64_t rows, int64_t dim) {
  GF_OP_SPAN("norm", "rmsnorm bwd input");
  // With xhat = x * s: dx = s * (w dy - xhat * mean(w dy * xhat)).
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    const T s = rstd[r];
    T mean_dn_xhat = 0;
    for (int64_t i = 0; i < dim; ++i) mean_dn_xhat += w[i] * dyr[i] * (xr[i] * s);
    mean_dn_xhat /= static_cast<T>(dim);
    T* dxr = dx + r * dim;
    for (int64_t i = 0; i < dim; ++i) dxr[i] += (w[i] * dyr[i] - (xr[i] * s) * mean_dn_xhat) * s;
  }
}

template <typename T>
void rmsnorm_bwd_weight(T* dw, const T* dy, const T* x, const T* rstd, int64_t rows, int64_t dim) {
  GF_OP_SPAN("norm", "rmsnorm bwd weight");
  // Columns split across threads, each summed in row order by one thread: independent of the
  // thread count (as layernorm_bwd_weight).
  constexpr int64_t kCols = 64;
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t c0 = 0; c0 < dim; c0 += kCols) {
    const int64_t nc = std::min(kCols, dim - c0);
    T acc[kCols] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * dim + c0;
      const T* dyr = dy + r * dim + c0;
      const T s = rstd[r];
      for (int64_t c = 0; c < nc; ++c) acc[c] += dyr[c] * (xr[c] * s);
    }
    for (int64_t c = 0; c < nc; ++c) dw[c0 + c] += acc[c];
  }
}

template <typename T>
void rmsnorm_bwd(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t rows, int64_t dim) {
  GF_OP_SPAN("norm", "rmsnorm bwd");
  rmsnorm_bwd_input(dx, dy, x, w, rstd, rows, dim);
  rmsnorm_bwd_weight(dw, dy, x, rstd, rows, dim);
}

template <typename T>
void head_rmsnorm_fwd(T* x, T* saved, T* rstd, const T* w0, const T* w1, int64_t split, int64_t rows, int64_t heads,
                      int64_t dim, int64_t ld, float eps) {
  GF_OP_SPAN("norm", "head rmsnorm fwd");
#pragma omp parallel for schedule(static) if (parallel_worth(rows * heads * dim))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      T* xh = x + r * ld + h * dim;
      const T* w = h < split ? w0 : w1;
      T ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += xh[i] * xh[i];
      const T s = T(1) / std::sqrt(ss / static_cast<T>(dim) + static_cast<T>(eps));
      if (rstd) rstd[r * heads + h] = s;
      if (saved) std::copy(xh, xh + dim, saved + (r * heads + h) * dim);
      for (int64_t i = 0; i < dim; ++i) xh[i] = w[i] * (xh[i] * s);
    }
}

template <typename T>
void head_rmsnorm_bwd(T* d, T* dw0, T* dw1, const T* saved, const T* w0, const T* w1, const T* rstd, int64_t split,
                      int64_t rows, int64_t heads, int64_t dim, int64_t ld) {
  GF_OP_SPAN("norm", "head rmsnorm bwd");
  // The weights' gradients first (they read the output's gradient): sum over rows and heads of d * xhat,
  // columns in chunks across threads, each column's sum in (row, head) order.
  constexpr int64_t kCols = 8;
#pragma omp parallel for schedule(static) if (dw0 != nullptr && parallel_worth(rows * heads * dim))
  for (int64_t c0 = 0; c0 < (dw0 != nullptr ? dim : 0); c0 += kCols) {
    const int64_t nc = std::min(kCols, dim - c0);
    T acc0[kCols] = {}, acc1[kCols] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const T* dh = d + r * ld + h * dim + c0;
        const T* xh = saved + (r * heads + h) * dim + c0;
        const T s = rstd[r * heads + h];
        T* acc = h < split ? acc0 : acc1;
        for (int64_t c = 0; c < nc; ++c) acc[c] += dh[c] * (xh[c] * s);
      }
    for (int64_t c = 0; c < nc; ++c) {
      dw0[c0 + c] += acc0[c];
      if (split < heads) dw1[c0 + c] += acc1[c];
    }
  }
  // With xhat = x * s: dx = s * (w d - xhat * mean(w d * xhat)), written over d.
#pragma omp parallel for schedule(static) if (parallel_worth(rows * heads * dim))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      T* dh = d + r * ld + h * dim;
      const T* xh = saved + (r * heads + h) * dim;
      const T* w = h < split ? w0 : w1;
      const T s = rstd[r * heads + h];
      T mean = 0;
      for (int64_t i = 0; i < dim; ++i) mean += w[i] * dh[i] * (xh[i] * s);
      mean /= static_cast<T>(dim);
      for (int64_t i = 0; i < dim; ++i) dh[i] = (w[i] * dh[i] - (xh[i] * s) * mean) * s;
    }
}

#define GF_INSTANTIATE(T)                                                                                   \
  template void rmsnorm_fwd<T>(T*, T*, const T*, const T*, int64_t, int64_t, float);                       \
  template void rmsnorm_bwd<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);          \
  template void rmsnorm_bwd_input<T>(T*, const T*, const T*, const T*, const T*, int64_t, int64_t);        \
  template void rmsnorm_bwd_weight<T>(T*, const T*, const T*, const T*, int64_t, int64_t);                \
  template void head_rmsnorm_fwd<T>(T*, T*, T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                    float);                                                                 \
  template void head_rmsnorm_bwd<T>(T*, T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                    int64_t, int64_t);
GF_INSTANTIATE(float)
GF_INSTANTIATE(double)
#undef GF_INSTANTIATE

}  // namespace gf::ops
