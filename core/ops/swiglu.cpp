#include "core/ops/swiglu.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

#include <Eigen/Core>
#include <algorithm>

namespace gf::ops {

namespace {

// The rows are cut into chunks of at most kChunk columns, and the (row, chunk) pairs split over the
// threads; each chunk runs as Eigen array expressions, whose exp is vectorised (std::exp one element
// at a time was 6-8x slower on 2 threads: bench/bench_ops's swiglu rows, the scalar loop beside them).
// The backward's sigmoid and the bf16 forms' widened inputs live in chunk-sized arrays on the stack.
constexpr int64_t kChunk = 1024;

template <typename T>
using Row = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using ChunkArray = Eigen::Array<T, Eigen::Dynamic, 1, Eigen::ColMajor, kChunk, 1>;

// body(row, first column, columns) over every chunk of every row, the chunks split over the threads.
template <typename Body>
void over_chunks(int64_t rows, int64_t cols, const Body& body) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t per_row = (cols + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols * kTranscendentalWork))
  for (int64_t t = 0; t < rows * per_row; ++t) {
    const int64_t r = t / per_row, c0 = (t % per_row) * kChunk;
    body(r, c0, std::min(kChunk, cols - c0));
  }
}

// Each chunk's values are evaluated into aligned stack arrays, then stored: Eigen computes the elements
// before an unaligned destination's first vector boundary on its scalar path, whose exp can differ from
// the vector one in the last bit, so evaluating into the rows themselves would make a value depend on
// where its row starts (the rows per rank, the row stride). This way it depends on its inputs and its
// place in the chunk (a chunk's last m mod the vector width elements take the scalar path) alone, and the
// fp32 and bf16 forms compute the same values.
template <typename T>
void fwd_values(ChunkArray<T>& h, const T* g, const T* u, int64_t m) {
  Eigen::Map<const Row<T>> gs(g, m), us(u, m);
  h = gs / (T(1) + (-gs).exp()) * us;
}

// With s = sigmoid(g): du = dh * g s, dg = dh * u * (s + g s (1 - s)).
template <typename T>
void bwd_values(ChunkArray<T>& dg, ChunkArray<T>& du, const T* dh, const T* g, const T* u, int64_t m) {
  Eigen::Map<const Row<T>> gs(g, m), us(u, m), dhs(dh, m);
  const ChunkArray<T> s = T(1) / (T(1) + (-gs).exp());
  du = dhs * (gs * s);
  dg = dhs * us * (s + gs * s * (T(1) - s));
}

// d[0, m) = v, or += v.
template <typename T>
void store(T* d, const ChunkArray<T>& v, int64_t m, bool accumulate) {
  Eigen::Map<Row<T>> ds(d, m);
  if (accumulate) ds += v;
  else ds = v;
}

}  // namespace

template <typename T>
void swiglu_fwd(T* h, const T* g, const T* u, int64_t rows, int64_t cols, int64_t ld_in) {
  GF_OP_SPAN("elementwise", "swiglu fwd");
  over_chunks(rows, cols, [&](int64_t r, int64_t c0, int64_t m) {
    ChunkArray<T> v;
    fwd_values(v, g + r * ld_in + c0, u + r * ld_in + c0, m);
    store(h + r * cols + c0, v, m, false);
  });
}

void swiglu_fwd_bf16(bf16* h, const bf16* g, const bf16* u, int64_t rows, int64_t cols, int64_t ld_in) {
  GF_OP_SPAN("elementwise", "swiglu fwd");
  over_chunks(rows, cols, [&](int64_t r, int64_t c0, int64_t m) {
    alignas(64) float g32[kChunk], u32[kChunk];
    widen_bf16(g32, g + r * ld_in + c0, m);
    widen_bf16(u32, u + r * ld_in + c0, m);
    ChunkArray<float> v;
    fwd_values(v, g32, u32, m);
    round_to_bf16(h + r * cols + c0, v.data(), m);
  });
}

template <typename T>
void swiglu_bwd(T* dg, T* du, const T* dh, const T* g, const T* u, int64_t rows, int64_t cols, int64_t ld_in,
                bool accumulate) {
  GF_OP_SPAN("elementwise", "swiglu bwd");
  over_chunks(rows, cols, [&](int64_t r, int64_t c0, int64_t m) {
    const int64_t i = r * ld_in + c0;
    ChunkArray<T> vg, vu;
    bwd_values(vg, vu, dh + r * cols + c0, g + i, u + i, m);
    store(dg + i, vg, m, accumulate);
    store(du + i, vu, m, accumulate);
  });
}

void swiglu_bwd_bf16(bf16* dg, bf16* du, const bf16* dh, const bf16* g, const bf16* u, int64_t rows, int64_t cols,
                     int64_t ld_in) {
  GF_OP_SPAN("elementwise", "swiglu bwd");
  over_chunks(rows, cols, [&](int64_t r, int64_t c0, int64_t m) {
    alignas(64) float g32[kChunk], u32[kChunk], dh32[kChunk];
    const int64_t i = r * ld_in + c0;
    widen_bf16(g32, g + i, m);
    widen_bf16(u32, u + i, m);
    widen_bf16(dh32, dh + r * cols + c0, m);
    ChunkArray<float> vg, vu;
    bwd_values(vg, vu, dh32, g32, u32, m);
    round_to_bf16(dg + i, vg.data(), m);
    round_to_bf16(du + i, vu.data(), m);
  });
}

namespace {

// The gated forms' stack arrays: over_chunks' chunks (kChunk columns) fit the activation's block kernels.
constexpr int64_t kGluChunk = kChunk;
static_assert(kGluChunk <= kActivationBlock);

template <typename T>
void glu_values(Activation a, T* h, const T* g, const T* u, int64_t m) {
  alignas(64) T act[kGluChunk];
  activation_fwd_block(a, act, g, m);
  for (int64_t i = 0; i < m; ++i) h[i] = act[i] * u[i];
}

template <typename T>
void glu_grads(Activation a, T* dg, T* du, const T* dh, const T* g, const T* u, int64_t m) {
  alignas(64) T act[kGluChunk], dact[kGluChunk];
  activation_fwd_block(a, act, g, m);
  for (int64_t i = 0; i < m; ++i) {
    du[i] = dh[i] * act[i];
    dact[i] = dh[i] * u[i];
  }
  activation_bwd_block(a, dg, dact, g, m, false);
}

}  // namespace

template <typename T>
void glu_fwd(Activation a, T* h, const T* g, const T* u, int64_t rows, int64_t cols, int64_t ld_in) {
  GF_OP_SPAN("elementwise", "glu fwd");
  over_chunks(rows, cols, [&](int64_t r, int64_t c0, int64_t m) {
    glu_values(a, h + r * cols + c0, g + r * ld_in + c0, u + r * ld_in + c0, m);
  });
}

template <typename T>
void glu_bwd(Activation a, T* dg, T* du, const T* dh, const T* g, const T* u, int64_t rows, int64_t cols, int64_t ld_in,
             bool accumulate) {
  GF_OP_SPAN("elementwise", "glu bwd");
  over_chunks(rows, cols, [&](int64_t r, int64_t c0, int64_t m) {
    const int64_t i = r * ld_in + c0;
    alignas(64) T vg[kGluChunk], vu[kGluChunk];
    glu_grads(a, vg, vu, dh + r * cols + c0, g + i, u + i, m);
    for (int64_t j = 0; j < m; ++j) {
      dg[i + j] = accumulate ? dg[i + j] + vg[j] : vg[j];
      du[i + j] = accumulate ? du[i + j] + vu[j] : vu[j];
    }
  });
}

void glu_fwd_bf16(Activation a, bf16* h, const bf16* g, const bf16* u, int64_t rows, int64_t cols, int64_t ld_in) {
  GF_OP_SPAN("elementwise", "glu fwd");
  over_chunks(rows, cols, [&](int64_t r, int64_t c0, int64_t m) {
    alignas(64) float g32[kGluChunk], u32[kGluChunk], h32[kGluChunk];
    widen_bf16(g32, g + r * ld_in + c0, m);
    widen_bf16(u32, u + r * ld_in + c0, m);
    glu_values(a, h32, g32, u32, m);
    round_to_bf16(h + r * cols + c0, h32, m);
  });
}

void glu_bwd_bf16(Activation a, bf16* dg, bf16* du, const bf16* dh, const bf16* g, const bf16* u, int64_t rows,
                  int64_t cols, int64_t ld_in) {
  GF_OP_SPAN("elementwise", "glu bwd");
  over_chunks(rows, cols, [&](int64_t r, int64_t c0, int64_t m) {
    alignas(64) float g32[kGluChunk], u32[kGluChunk], dh32[kGluChunk], vg[kGluChunk], vu[kGluChunk];
    const int64_t i = r * ld_in + c0;
    widen_bf16(g32, g + i, m);
    widen_bf16(u32, u + i, m);
    widen_bf16(dh32, dh + r * cols + c0, m);
    glu_grads(a, vg, vu, dh32, g32, u32, m);
    round_to_bf16(dg + i, vg, m);
    round_to_bf16(du + i, vu, m);
  });
}

template void glu_fwd<float>(Activation, float*, const float*, const float*, int64_t, int64_t, int64_t);
template void glu_fwd<double>(Activation, double*, const double*, const double*, int64_t, int64_t, int64_t);
template void glu_bwd<float>(Activation, float*, float*, const float*, const float*, const float*, int64_t, int64_t,
                             int64_t, bool);
template void glu_bwd<double>(Activation, double*, double*, const double*, const double*, const double*, int64_t,
                              int64_t, int64_t, bool);
template void swiglu_fwd<float>(float*, const float*, const float*, int64_t, int64_t, int64_t);
template void swiglu_fwd<double>(double*, const double*, const double*, int64_t, int64_t, int64_t);
template void swiglu_bwd<float>(float*, float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                                bool);
template void swiglu_bwd<double>(double*, double*, const double*, const double*, const double*, int64_t, int64_t,
                                 int64_t, bool);

}  // namespace gf::ops
