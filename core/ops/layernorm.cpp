#include "core/ops/layernorm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/scratch.h"

namespace gf::ops {

template <typename T>
void layernorm_fwd(T* y, LayerNormCache<T> cache, const T* x, const T* w, const T* b,
                   int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const T m = static_cast<T>(sum / dim);
    double var = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const T d = xr[i] - m;
      var += static_cast<double>(d) * d;
    }
    const T s = static_cast<T>(1.0 / std::sqrt(var / dim + eps));
    T* yr = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - m) * s * w[i] + b[i];
    cache.mean[r] = m;
    cache.rstd[r] = s;
  }
}

template <typename T>
void layernorm_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                   LayerNormCache<T> cache, int64_t rows, int64_t dim) {
  // dw/db are reductions over rows: each thread keeps its own partial sums, added at the end
  // in thread order so the result does not depend on scheduling.
  const int nt = omp_get_max_threads();
  T* part = scratch<T>(static_cast<size_t>(nt) * 2 * dim);
  std::fill(part, part + static_cast<size_t>(nt) * 2 * dim, T(0));
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    T* pdw = part + static_cast<size_t>(t) * 2 * dim;
    T* pdb = pdw + dim;
#pragma omp for schedule(static)
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
        pdw[i] += dyr[i] * xhat;
        pdb[i] += dyr[i];
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
  for (int t = 0; t < nt; ++t) {
    const T* pdw = part + static_cast<size_t>(t) * 2 * dim;
    for (int64_t i = 0; i < dim; ++i) {
      dw[i] += pdw[i];
      db[i] += pdw[dim + i];
    }
  }
}

template void layernorm_fwd<float>(float*, LayerNormCache<float>, const float*, const float*, const float*, int64_t, int64_t, float);
template void layernorm_fwd<double>(double*, LayerNormCache<double>, const double*, const double*, const double*, int64_t, int64_t, float);
template void layernorm_bwd<float>(float*, float*, float*, const float*, const float*, const float*, LayerNormCache<float>, int64_t, int64_t);
template void layernorm_bwd<double>(double*, double*, double*, const double*, const double*, const double*, LayerNormCache<double>, int64_t, int64_t);

}  // namespace gf::ops
