// SwiGLU, the gated MLP activation of Llama and Mixtral (Hugging Face's LlamaMLP:
// down_proj(silu(gate_proj(x)) * up_proj(x))): h = silu(g) * u with silu(g) = g * sigmoid(g).
#pragma once
#include <cstdint>

#include "core/math/gemm_bf16.h"
#include "core/ops/activation.h"

namespace gf::ops {

// g and u are `rows` x `cols` with row stride ld_in (so one fused [rows, 2 cols] product can hold
// both: u = g + cols, ld_in = 2 cols); h and dh are rows x cols, contiguous.
template <typename T>
void swiglu_fwd(T* h, const T* g, const T* u, int64_t rows, int64_t cols, int64_t ld_in);
// A bf16 step's MLP (autocast's bf16 up projection, and its bf16 gradients): from bf16 g and u, widened to
// float, the float forward with h rounded to bf16 (float_to_bf16) as it is written; and the backward from
// the bf16 output gradient dh, widened, dg and du written rounded (the float backward's values, written,
// then rounded).
void swiglu_fwd_bf16(bf16* h, const bf16* g, const bf16* u, int64_t rows, int64_t cols, int64_t ld_in);
void swiglu_bwd_bf16(bf16* dg, bf16* du, const bf16* dh, const bf16* g, const bf16* u, int64_t rows, int64_t cols,
                     int64_t ld_in);
// dg += dh * u * silu'(g), du += dh * silu(g) (dg and du with row stride ld_in); with accumulate false
// they are written, not read (the values += gives into zeros, but a zero's sign).
template <typename T>
void swiglu_bwd(T* dg, T* du, const T* dh, const T* g, const T* u, int64_t rows, int64_t cols, int64_t ld_in,
                bool accumulate = true);

// Gated activations other than silu (Gemma's GeGLU: h = gelu_tanh(g) * u), the layout and passes as above:
// h = act(g) * u; du = dh * act(g), dg = act'(g) * (dh * u), in the order torch's autograd of
// `act(g) * u` computes them (the activation's own values: core/ops/activation.h).
template <typename T>
void glu_fwd(Activation a, T* h, const T* g, const T* u, int64_t rows, int64_t cols, int64_t ld_in);
template <typename T>
void glu_bwd(Activation a, T* dg, T* du, const T* dh, const T* g, const T* u, int64_t rows, int64_t cols, int64_t ld_in,
             bool accumulate = true);
void glu_fwd_bf16(Activation a, bf16* h, const bf16* g, const bf16* u, int64_t rows, int64_t cols, int64_t ld_in);
void glu_bwd_bf16(Activation a, bf16* dg, bf16* du, const bf16* dh, const bf16* g, const bf16* u, int64_t rows,
                  int64_t cols, int64_t ld_in);

}  // namespace gf::ops
