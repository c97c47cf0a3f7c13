// LayerNorm over the last dimension: y = (x - mean) * rstd * w + b.
#pragma once
#include <cstdint>

#include "core/math/gemm_bf16.h"

namespace gf::ops {

// What backward needs besides x, w: per-row mean and 1/std (each `rows` floats).
template <typename T>
struct LayerNormCache {
  T* mean;
  T* rstd;
};

// T is float (the model) or double (the finite-difference checks).
template <typename T>
void layernorm_fwd(T* y, LayerNormCache<T> cache, const T* x, const T* w, const T* b,
                   int64_t rows, int64_t dim, float eps);
// The float forward with y written as its bf16 rounding (float_to_bf16) alone: the norm output a bf16 step
// keeps for its products (PyTorch's autocast keeps the bf16 cast of a norm's output that a linear layer saves).
void layernorm_fwd_bf16(bf16* y, LayerNormCache<float> cache, const float* x, const float* w, const float* b,
                        int64_t rows, int64_t dim, float eps);

// Accumulates into dx, dw, db (+=): layernorm_bwd_input then layernorm_bwd_weight.
template <typename T>
void layernorm_bwd(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                   LayerNormCache<T> cache, int64_t rows, int64_t dim);

// The two halves of the backward, which may run apart (a zero-bubble pipeline delays the weight
// pass): dx += the input gradient; dw, db += the weight gradients. Each gives the bits the fused
// call gives.
template <typename T>
void layernorm_bwd_input(T* dx, const T* dy, const T* x, const T* w, LayerNormCache<T> cache, int64_t rows,
                         int64_t dim);
template <typename T>
void layernorm_bwd_weight(T* dw, T* db, const T* dy, const T* x, LayerNormCache<T> cache, int64_t rows,
                          int64_t dim);

}  // namespace gf::ops
