#include "core/ops/swiglu.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

#include <cmath>

namespace gf::ops {

namespace {

// An element as the arithmetic reads it: float or double as stored, bf16 widened to float.
inline float value(bf16 x) { return bf16_to_float(x); }
inline float value(float x) { return x; }
inline double value(double x) { return x; }

// h = silu(g) * u over rows, each value stored through `store` (the element type's own, or a rounding).
template <typename T, typename In, typename H, typename Store>
void swiglu_rows(H* h, const In* g, const In* u, int64_t rows, int64_t cols, int64_t ld_in, Store store) {
  GF_OP_SPAN("elementwise", "swiglu fwd");
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols * kTranscendentalWork))
  for (int64_t r = 0; r < rows; ++r) {
    const In* gr = g + r * ld_in;
    const In* ur = u + r * ld_in;
    H* hr = h + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const T gv = value(gr[c]), uv = value(ur[c]);
      hr[c] = store(gv / (T(1) + std::exp(-gv)) * uv);
    }
  }
}

// A value stored as it is (the float and double outputs).
struct AsIs {
  template <typename T>
  T operator()(T v) const {
    return v;
  }
};
// Rounded to bf16.
struct ToBf16 {
  bf16 operator()(float v) const { return float_to_bf16(v); }
};

// dg, du of element type D (T, or bf16 written through ToBf16), from dh, g and u widened to T.
template <bool kAccumulate, typename T, typename D, typename H, typename In, typename Store = AsIs>
void swiglu_bwd_rows(D* dg, D* du, const H* dh, const In* g, const In* u, int64_t rows, int64_t cols, int64_t ld_in,
                     Store store = {}) {
  GF_OP_SPAN("elementwise", "swiglu bwd");
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols * kTranscendentalWork))
  for (int64_t r = 0; r < rows; ++r) {
    const In* gr = g + r * ld_in;
    const In* ur = u + r * ld_in;
    const H* dhr = dh + r * cols;
    D* dgr = dg + r * ld_in;
    D* dur = du + r * ld_in;
    for (int64_t c = 0; c < cols; ++c) {
      const T gv = value(gr[c]), uv = value(ur[c]), hv = value(dhr[c]);
      const T s = T(1) / (T(1) + std::exp(-gv));
      const T silu = gv * s;
      if constexpr (kAccumulate) {
        dur[c] += hv * silu;
        dgr[c] += hv * uv * (s + gv * s * (T(1) - s));
      } else {
        dur[c] = store(hv * silu);
        dgr[c] = store(hv * uv * (s + gv * s * (T(1) - s)));
      }
    }
  }
}

}  // namespace

template <typename T>
void swiglu_fwd(T* h, const T* g, const T* u, int64_t rows, int64_t cols, int64_t ld_in) {
  swiglu_rows<T>(h, g, u, rows, cols, ld_in, [](T v) { return v; });
}

void swiglu_fwd_bf16(bf16* h, const bf16* g, const bf16* u, int64_t rows, int64_t cols, int64_t ld_in) {
  swiglu_rows<float>(h, g, u, rows, cols, ld_in, [](float v) { return float_to_bf16(v); });
}

template <typename T>
void swiglu_bwd(T* dg, T* du, const T* dh, const T* g, const T* u, int64_t rows, int64_t cols, int64_t ld_in,
                bool accumulate) {
  if (accumulate) swiglu_bwd_rows<true, T>(dg, du, dh, g, u, rows, cols, ld_in);
  else swiglu_bwd_rows<false, T>(dg, du, dh, g, u, rows, cols, ld_in);
}

void swiglu_bwd_bf16(bf16* dg, bf16* du, const bf16* dh, const bf16* g, const bf16* u, int64_t rows, int64_t cols,
                     int64_t ld_in) {
  swiglu_bwd_rows<false, float>(dg, du, dh, g, u, rows, cols, ld_in, ToBf16{});
}

template void swiglu_fwd<float>(float*, const float*, const float*, int64_t, int64_t, int64_t);
template void swiglu_fwd<double>(double*, const double*, const double*, int64_t, int64_t, int64_t);
template void swiglu_bwd<float>(float*, float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                                bool);
template void swiglu_bwd<double>(double*, double*, const double*, const double*, const double*, int64_t, int64_t,
                                 int64_t, bool);

}  // namespace gf::ops
