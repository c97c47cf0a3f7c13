#include "core/ops/embedding.h"

namespace gf::ops {

template <typename T>
void embedding_fwd(T* y, const int32_t* tokens, const T* wte, const T* wpe,
                   int64_t batch, int64_t seq, int64_t dim) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < batch * seq; ++i) {
    const T* e = wte + static_cast<int64_t>(tokens[i]) * dim;
    const T* p = wpe + (i % seq) * dim;
    T* yr = y + i * dim;
    for (int64_t c = 0; c < dim; ++c) yr[c] = e[c] + p[c];
  }
}

template <typename T>
void embedding_bwd(T* dwte, T* dwpe, const T* dy, const int32_t* tokens,
                   int64_t batch, int64_t seq, int64_t dim) {
  constexpr int64_t kChunk = 16;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < dim; c0 += kChunk) {
    const int64_t c1 = c0 + kChunk < dim ? c0 + kChunk : dim;
    for (int64_t i = 0; i < batch * seq; ++i) {
      const T* d = dy + i * dim;
      T* e = dwte + static_cast<int64_t>(tokens[i]) * dim;
      T* p = dwpe + (i % seq) * dim;
      for (int64_t c = c0; c < c1; ++c) {
        e[c] += d[c];
        p[c] += d[c];
      }
    }
  }
}

template void embedding_fwd<float>(float*, const int32_t*, const float*, const float*, int64_t, int64_t, int64_t);
template void embedding_fwd<double>(double*, const int32_t*, const double*, const double*, int64_t, int64_t, int64_t);
template void embedding_bwd<float>(float*, float*, const float*, const int32_t*, int64_t, int64_t, int64_t);
template void embedding_bwd<double>(double*, double*, const double*, const int32_t*, int64_t, int64_t, int64_t);

}  // namespace gf::ops
