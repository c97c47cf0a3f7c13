#include "core/ops/linear.h"

#include "core/math/parallel_worth.h"

#include "core/math/gemm.h"

namespace gf::ops {

namespace {

// y[r, :] = b for every row: the product then accumulates onto it (beta 1).
template <typename T>
void broadcast_bias(T* y, const T* b, int64_t n, int64_t out) {
#pragma omp parallel for schedule(static) if (parallel_worth(n * out))
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < out; ++j) y[r * out + j] = b[j];
}

}  // namespace

template <typename T>
void linear_fwd(T* y, const T* x, const T* w, const T* b, int64_t n, int64_t in, int64_t out) {
  if (b) broadcast_bias(y, b, n, out);
  gemm(Trans::kNo, Trans::kNo, n, out, in, T(1), x, in, w, out, b ? T(1) : T(0), y, out);
}

namespace {
inline float widened(bf16 v) { return bf16_to_float(v); }
template <typename T>
T widened(T v) {
  return v;
}

// out[c] += the sum over rows of x[r, c], each x widened to T.
template <typename T, typename X>
void sum_rows_into(T* out, const X* x, int64_t rows, int64_t cols) {
  // Columns are split across threads; each column is summed in row order by one thread.
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols))
  for (int64_t c0 = 0; c0 < cols; c0 += 64) {
    const int64_t c1 = c0 + 64 < cols ? c0 + 64 : cols;
    T acc[64] = {0};
    for (int64_t r = 0; r < rows; ++r) {
      const X* xr = x + r * cols;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += widened(xr[c]);
    }
    for (int64_t c = c0; c < c1; ++c) out[c] += acc[c - c0];
  }
}
}  // namespace

template <typename T>
void sum_rows_accumulate(T* out, const T* x, int64_t rows, int64_t cols) {
  sum_rows_into(out, x, rows, cols);
}

void sum_rows_accumulate(float* out, const bf16* x, int64_t rows, int64_t cols) { sum_rows_into(out, x, rows, cols); }

template <typename T>
void linear_bwd_input(T* dx, const T* dy, const T* w, int64_t n, int64_t in, int64_t out, T dx_beta) {
  gemm(Trans::kNo, Trans::kYes, n, in, out, T(1), dy, out, w, out, dx_beta, dx, in);
}

template <typename T>
void linear_bwd_weight(T* dw, T* db, const T* dy, const T* x, int64_t n, int64_t in, int64_t out) {
  gemm(Trans::kYes, Trans::kNo, in, out, n, T(1), x, in, dy, out, T(1), dw, out);
  if (db) sum_rows_accumulate(db, dy, n, out);
}

template <typename T>
void linear_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int64_t n, int64_t in,
                int64_t out, T dx_beta) {
  if (dx) linear_bwd_input(dx, dy, w, n, in, out, dx_beta);
  linear_bwd_weight(dw, db, dy, x, n, in, out);
}

// [out, in] weights (nn.Linear's layout): y = x W^T, dx = dy W, dW += dy^T x.
void linear_fwd(float* y, const float* x, const Weight& w, const float* b, int64_t n, int64_t in, int64_t out,
                const void* x_low) {
  if (w.dtype == ComputeDtype::kFloat32 && !w.out_in) return linear_fwd<float>(y, x, w.f32, b, n, in, out);
  const Trans tw = w.out_in ? Trans::kYes : Trans::kNo;
  const int64_t ldw = w.out_in ? in : out;
  if (w.dtype == ComputeDtype::kFloat32) {
    if (b) broadcast_bias(y, b, n, out);
    gemm(Trans::kNo, tw, n, out, in, 1.0f, x, in, w.f32, ldw, b ? 1.0f : 0.0f, y, out);
  } else if (b) {
    gemm_mixed_bias(w.dtype, Trans::kNo, tw, n, out, in, x, x_low, in, w.f32, w.low, ldw, b, y, out, true);
  } else {
    gemm_mixed(w.dtype, Trans::kNo, tw, n, out, in, 1.0f, x, x_low, in, w.f32, w.low, ldw, 0.0f, y, out, true);
  }
}

void linear_fwd_low(void* y_low, const float* x, const Weight& w, const float* b, int64_t n, int64_t in, int64_t out,
                    const void* x_low) {
  const Trans tw = w.out_in ? Trans::kYes : Trans::kNo;
  const int64_t ldw = w.out_in ? in : out;
  gemm_mixed_to_low(w.dtype, Trans::kNo, tw, n, out, in, x, x_low, in, w.f32, w.low, ldw, b, y_low);
}

void linear_bwd_input(float* dx, const float* dy, const Weight& w, int64_t n, int64_t in, int64_t out, float dx_beta,
                      const void* dy_low) {
  if (w.dtype == ComputeDtype::kFloat32 && !w.out_in) return linear_bwd_input<float>(dx, dy, w.f32, n, in, out, dx_beta);
  const Trans tw = w.out_in ? Trans::kNo : Trans::kYes;
  const int64_t ldw = w.out_in ? in : out;
  if (w.dtype == ComputeDtype::kFloat32)
    gemm(Trans::kNo, tw, n, in, out, 1.0f, dy, out, w.f32, ldw, dx_beta, dx, in);
  else
    gemm_mixed(w.dtype, Trans::kNo, tw, n, in, out, 1.0f, dy, dy_low, out, w.f32, w.low, ldw, dx_beta, dx, in, true);
}

void linear_bwd_input_low(void* dx_low, const float* dy, const Weight& w, int64_t n, int64_t in, int64_t out,
                          const void* dy_low) {
  const Trans tw = w.out_in ? Trans::kNo : Trans::kYes;
  const int64_t ldw = w.out_in ? in : out;
  gemm_mixed_to_low(w.dtype, Trans::kNo, tw, n, in, out, dy, dy_low, out, w.f32, w.low, ldw, nullptr, dx_low);
}

namespace {
// db += the rows' sum of dy: of dy, or where the caller keeps dy in bf16 only (dy null), of its widened copy.
void bias_grad(float* db, const float* dy, const void* dy_low, int64_t n, int64_t out) {
  if (!db) return;
  if (dy) sum_rows_accumulate(db, dy, n, out);
  else sum_rows_accumulate(db, static_cast<const bf16*>(dy_low), n, out);
}
}  // namespace

void linear_bwd_weight(float* dw, float* db, const float* dy, const float* x, const Weight& w, int64_t n, int64_t in,
                       int64_t out, const void* dy_low, const void* x_low) {
  if (!w.out_in) return linear_bwd_weight(dw, db, dy, x, w.dtype, n, in, out, dy_low, x_low);
  if (w.dtype == ComputeDtype::kFloat32)
    gemm(Trans::kYes, Trans::kNo, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in);
  else
    gemm_mixed(w.dtype, Trans::kYes, Trans::kNo, out, in, n, 1.0f, dy, dy_low, out, x, x_low, in, 1.0f, dw, in, false);
  bias_grad(db, dy, dy_low, n, out);
}

void linear_bwd_weight(float* dw, float* db, const float* dy, const float* x, ComputeDtype dtype, int64_t n,
                       int64_t in, int64_t out, const void* dy_low, const void* x_low) {
  if (dtype == ComputeDtype::kFloat32) return linear_bwd_weight<float>(dw, db, dy, x, n, in, out);
  gemm_mixed(dtype, Trans::kYes, Trans::kNo, in, out, n, 1.0f, x, x_low, in, dy, dy_low, out, 1.0f, dw, out, false);
  bias_grad(db, dy, dy_low, n, out);
}

void linear_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const Weight& w, int64_t n,
                int64_t in, int64_t out, float dx_beta, const void* x_low, const void* dy_low) {
  if (w.dtype == ComputeDtype::kFloat32 && !w.out_in) return linear_bwd<float>(dx, dw, db, dy, x, w.f32, n, in, out, dx_beta);
  // dy feeds both products: converted once (unless the caller keeps its copy).
  if (!dy_low && w.dtype != ComputeDtype::kFloat32) dy_low = low_copy_scratch(w.dtype, dy, n, out, 0);
  if (dx) linear_bwd_input(dx, dy, w, n, in, out, dx_beta, dy_low);
  linear_bwd_weight(dw, db, dy, x, w, n, in, out, dy_low, x_low);
}

#define GF_INSTANTIATE(T)                                                                    \
  template void linear_fwd<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);  \
  template void linear_bwd<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t,    \
                              int64_t, T);                                                   \
  template void linear_bwd_input<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, T);   \
  template void linear_bwd_weight<T>(T*, T*, const T*, const T*, int64_t, int64_t, int64_t); \
  template void sum_rows_accumulate<T>(T*, const T*, int64_t, int64_t);
GF_INSTANTIATE(float)
GF_INSTANTIATE(double)
#undef GF_INSTANTIATE

}  // namespace gf::ops
