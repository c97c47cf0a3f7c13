// Linear layer in the Conv1D layout GPT-2 checkpoints use: y[N, out] = x[N, in] @ W[in, out] + b.
// T is float (the model) or double (the finite-difference checks).
#pragma once
#include <cstdint>

#include "core/math/mixed_precision.h"

namespace gf::ops {

// b may be null.
template <typename T>
void linear_fwd(T* y, const T* x, const T* w, const T* b, int64_t n, int64_t in, int64_t out);

// Accumulates: dx = dx_beta dx + dy W^T (skipped when dx is null; dx_beta 0 writes dx without
// reading it), dW += x^T dy, db += sum_rows dy (db may be null).
template <typename T>
void linear_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int64_t n, int64_t in,
                int64_t out, T dx_beta = T(1));

// The two halves of linear_bwd, which may run apart (a zero-bubble pipeline delays the weight
// pass): dx = dx_beta dx + dy W^T; dW += x^T dy, db += sum_rows dy. linear_bwd is input then
// weight, so each gives the bits the fused call gives.
template <typename T>
void linear_bwd_input(T* dx, const T* dy, const T* w, int64_t n, int64_t in, int64_t out, T dx_beta = T(1));
template <typename T>
void linear_bwd_weight(T* dw, T* db, const T* dy, const T* x, int64_t n, int64_t in, int64_t out);

// The float layer at the weight's compute dtype and in its layout (Weight::out_in: [out, in]) (core/math/mixed_precision.h): fp32 weights run the
// templates above; bf16/fp16 run their products through gemm_mixed, reading the weight's
// low-precision copy. Forward outputs and input gradients are activations (fp16 rounds them);
// the weight gradient accumulates in fp32.
// x_low: x's low-precision copy (make_low_copy's element type, dense [n, in]) where the caller keeps
// one (a bf16 step's MLP activation, kept in bf16 only: x may then be null); null converts x per call.
void linear_fwd(float* y, const float* x, const Weight& w, const float* b, int64_t n, int64_t in, int64_t out,
                const void* x_low = nullptr);
// dy_low: dy's low-precision copy where the caller keeps dy only so (a bf16 step's MLP up-product gradient;
// dy may then be null, and the bias gradient sums the widened bf16 values), else null to convert dy here.
void linear_bwd(float* dx, float* dw, float* db, const float* dy, const float* x, const Weight& w, int64_t n,
                int64_t in, int64_t out, float dx_beta = 1.0f, const void* x_low = nullptr,
                const void* dy_low = nullptr);
// The forward with y written as its low-precision copy only (dense [n, out]; gemm_mixed_to_low): a bf16
// weight's, for the activation a bf16 step keeps in bf16 (the MLP's up product).
void linear_fwd_low(void* y_low, const float* x, const Weight& w, const float* b, int64_t n, int64_t in, int64_t out,
                    const void* x_low = nullptr);
// The input gradient dx = dy W^T written as its bf16 copy only (dense [n, in]; gemm_mixed_to_low): the
// gradient PyTorch's autocast keeps in bf16 (the MLP activation's input gradient). bf16 weights only.
void linear_bwd_input_low(void* dx_low, const float* dy, const Weight& w, int64_t n, int64_t in, int64_t out,
                          const void* dy_low = nullptr);
// Its halves. Under bf16/fp16 the fused call converts dy once for both products; called apart,
// each converts it (the same bits) unless given dy_low, dy's low-precision copy.
void linear_bwd_input(float* dx, const float* dy, const Weight& w, int64_t n, int64_t in, int64_t out,
                      float dx_beta = 1.0f, const void* dy_low = nullptr);
void linear_bwd_weight(float* dw, float* db, const float* dy, const float* x, ComputeDtype dtype, int64_t n,
                       int64_t in, int64_t out, const void* dy_low = nullptr, const void* x_low = nullptr);
// The same for a Weight, in its layout (w.out_in: dW is [out, in]).
void linear_bwd_weight(float* dw, float* db, const float* dy, const float* x, const Weight& w, int64_t n, int64_t in,
                       int64_t out, const void* dy_low = nullptr, const void* x_low = nullptr);

// out[j] += sum_i x[i, j] over `rows` rows of width `cols` (deterministic, thread-count independent).
template <typename T>
void sum_rows_accumulate(T* out, const T* x, int64_t rows, int64_t cols);
// The same over bf16 values, each widened: the bits the float version gives on the widened values.
void sum_rows_accumulate(float* out, const bf16* x, int64_t rows, int64_t cols);

}  // namespace gf::ops
