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

}  // namespace gf::ops
