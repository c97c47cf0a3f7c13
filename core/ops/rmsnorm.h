// RMSNorm over the last dimension (Llama; Hugging Face's LlamaRMSNorm):
//   y = w * x / sqrt(mean(x^2) + eps), the statistics in the precision of T.
#pragma once
#include <cstdint>

#include "core/math/gemm_bf16.h"

namespace gf::ops {

// T is float (the model) or double (the finite-difference checks). rstd: per-row 1/rms, kept for
// backward (`rows` values).
template <typename T>
void rmsnorm_fwd(T* y, T* rstd, const T* x, const T* w, int64_t rows, int64_t dim, float eps);
// The float forward with y written as its bf16 rounding alone (layernorm_fwd_bf16's counterpart).
void rmsnorm_fwd_bf16(bf16* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t dim, float eps);

// Accumulates (+=): dx; dw. rmsnorm_bwd is rmsnorm_bwd_input then rmsnorm_bwd_weight, which may
// also run apart (the weight pass of a zero-bubble schedule).
template <typename T>
void rmsnorm_bwd(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t rows, int64_t dim);
template <typename T>
void rmsnorm_bwd_input(T* dx, const T* dy, const T* x, const T* w, const T* rstd, int64_t rows, int64_t dim);
template <typename T>
void rmsnorm_bwd_weight(T* dw, const T* dy, const T* x, const T* rstd, int64_t rows, int64_t dim);

// Per-head RMSNorm in place (Qwen3's q_norm and k_norm, Hugging Face's Qwen3RMSNorm on q and k viewed as
// [..., heads, head_dim]): each of `rows` rows holds `heads` heads of `dim` at x + r * ld + h * dim; heads
// h < split take weight w0, the others w1 (q's heads, then k's). saved (may be null): the input, kept for the
// backward as [rows, heads, dim]; rstd (may be null): [rows, heads].
template <typename T>
void head_rmsnorm_fwd(T* x, T* saved, T* rstd, const T* w0, const T* w1, int64_t split, int64_t rows, int64_t heads,
                      int64_t dim, int64_t ld, float eps);
// The backward in place: d (the output's gradient, laid out as x) becomes the input's; dw0 and dw1
// accumulate (+=) the weights' gradients, each column summed in row order (independent of the thread count).
template <typename T>
// dw0, dw1 null: the input gradient alone (a frozen model's).
void head_rmsnorm_bwd(T* d, T* dw0, T* dw1, const T* saved, const T* w0, const T* w1, const T* rstd, int64_t split,
                      int64_t rows, int64_t heads, int64_t dim, int64_t ld);

}  // namespace gf::ops
