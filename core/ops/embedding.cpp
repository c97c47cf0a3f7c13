#include "core/ops/embedding.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

#include <limits>

namespace gf::ops {

template <typename T>
void embedding_lookup_fwd(T* y, const int32_t* tokens, const T* wte, int64_t rows, int64_t dim,
                          int64_t vocab_begin, int64_t vocab_end) {
  GF_OP_SPAN("elementwise", "embedding lookup fwd");
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = tokens[i];
    T* yr = y + i * dim;
    if (t >= vocab_begin && t < vocab_end) {
      const T* e = wte + (t - vocab_begin) * dim;
      for (int64_t c = 0; c < dim; ++c) yr[c] = e[c];
    } else {
      for (int64_t c = 0; c < dim; ++c) yr[c] = T(0);
    }
  }
}

template <typename T>
void embedding_lookup_rows(T* y, const int32_t* tokens, const T* wte, int64_t rows, int64_t dim,
                           int64_t vocab_begin, int64_t vocab_end) {
  GF_OP_SPAN("elementwise", "embedding lookup fwd");
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = tokens[i];
    if (t < vocab_begin || t >= vocab_end) continue;
    const T* e = wte + (t - vocab_begin) * dim;
    T* yr = y + i * dim;
    for (int64_t c = 0; c < dim; ++c) yr[c] = e[c];
  }
}

template <typename T>
void position_add_fwd(T* y, const T* wpe, int64_t rows, int64_t row0, int64_t seq, int64_t dim,
                      const int32_t* positions) {
  GF_OP_SPAN("elementwise", "position add fwd");
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t i = 0; i < rows; ++i) {
    const T* p = wpe + (positions ? positions[row0 + i] : (row0 + i) % seq) * dim;
    T* yr = y + i * dim;
    for (int64_t c = 0; c < dim; ++c) yr[c] += p[c];
  }
}

template <typename T>
void embedding_lookup_bwd(T* dwte, const T* dy, const int32_t* tokens, int64_t rows, int64_t dim,
                          int64_t vocab_begin, int64_t vocab_end) {
  GF_OP_SPAN("elementwise", "embedding lookup bwd");
  constexpr int64_t kChunk = 16;
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t c0 = 0; c0 < dim; c0 += kChunk) {
    const int64_t c1 = c0 + kChunk < dim ? c0 + kChunk : dim;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = tokens[i];
      if (t < vocab_begin || t >= vocab_end) continue;
      const T* d = dy + i * dim;
      T* e = dwte + (t - vocab_begin) * dim;
      for (int64_t c = c0; c < c1; ++c) e[c] += d[c];
    }
  }
}

template <typename T>
void position_bwd(T* dwpe, const T* dy, int64_t rows, int64_t row0, int64_t seq, int64_t dim,
                  const int32_t* positions) {
  GF_OP_SPAN("elementwise", "position bwd");
  constexpr int64_t kChunk = 16;
#pragma omp parallel for schedule(static) if (parallel_worth(rows * dim))
  for (int64_t c0 = 0; c0 < dim; c0 += kChunk) {
    const int64_t c1 = c0 + kChunk < dim ? c0 + kChunk : dim;
    for (int64_t i = 0; i < rows; ++i) {
      const T* d = dy + i * dim;
      T* p = dwpe + (positions ? positions[row0 + i] : (row0 + i) % seq) * dim;
      for (int64_t c = c0; c < c1; ++c) p[c] += d[c];
    }
  }
}

// The whole embedding: the two halves over the full vocabulary and every row.
template <typename T>
void embedding_fwd(T* y, const int32_t* tokens, const T* wte, const T* wpe, int64_t batch, int64_t seq, int64_t dim) {
  GF_OP_SPAN("elementwise", "embedding fwd");
  embedding_lookup_fwd(y, tokens, wte, batch * seq, dim, 0, std::numeric_limits<int64_t>::max());
  position_add_fwd(y, wpe, batch * seq, 0, seq, dim);
}

template <typename T>
void embedding_bwd(T* dwte, T* dwpe, const T* dy, const int32_t* tokens, int64_t batch, int64_t seq, int64_t dim) {
  GF_OP_SPAN("elementwise", "embedding bwd");
  embedding_lookup_bwd(dwte, dy, tokens, batch * seq, dim, 0, std::numeric_limits<int64_t>::max());
  position_bwd(dwpe, dy, batch * seq, 0, seq, dim);
}

template void embedding_lookup_fwd<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t, int64_t);
template void embedding_lookup_rows<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t, int64_t);
template void position_add_fwd<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, const int32_t*);
template void embedding_lookup_bwd<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t, int64_t);
template void position_bwd<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, const int32_t*);
template void embedding_fwd<float>(float*, const int32_t*, const float*, const float*, int64_t, int64_t, int64_t);
template void embedding_fwd<double>(double*, const int32_t*, const double*, const double*, int64_t, int64_t, int64_t);
template void embedding_bwd<float>(float*, float*, const float*, const int32_t*, int64_t, int64_t, int64_t);
template void embedding_bwd<double>(double*, double*, const double*, const int32_t*, int64_t, int64_t, int64_t);

}  // namespace gf::ops
