// Element-wise activations of the MLP, forward and backward.
#pragma once
#include <cstdint>
#include <string_view>

#include "core/math/gemm_bf16.h"

namespace gf::ops {

enum class Activation { kGelu, kGeluNew, kFastGelu };

// "gelu" (exact, erf), "gelu_new" (tanh approximation, GPT-2's), "fast_gelu" (x*sigmoid(1.702x),
// MindSpore's FastGeLU). Throws std::invalid_argument listing the known names.
Activation parse_activation(std::string_view name);
const char* activation_name(Activation a);

// T is float (the model) or double (the finite-difference checks).
template <typename T>
void activation_fwd(Activation a, T* y, const T* x, int64_t n);
// A bf16 step's MLP (PyTorch's autocast keeps the up projection's output, the activation and their
// gradients in bf16): from bf16 inputs, each widened to float, the float forward with y rounded to bf16
// (float_to_bf16) as it is written; and the backward from the bf16 output gradient dy, widened,
// dx = dy * act'(x) written rounded (the float backward's values, written, then rounded).
void activation_fwd_bf16(Activation a, bf16* y, const bf16* x, int64_t n);
void activation_bwd_bf16(Activation a, bf16* dx, const bf16* dy, const bf16* x, int64_t n);
// dx += dy * act'(x); with accumulate false dx = dy * act'(x), dx not read: the values dx += gives
// into zeros (but a zero's sign), without the pass that zeroes dx.
template <typename T>
void activation_bwd(Activation a, T* dx, const T* dy, const T* x, int64_t n, bool accumulate = true);
// The same on the calling thread alone for one block of n <= kActivationBlock elements (the gated MLPs'
// chunks: core/ops/swiglu.h); the values are activation_fwd's and activation_bwd's.
constexpr int64_t kActivationBlock = 2048;
template <typename T>
void activation_fwd_block(Activation a, T* y, const T* x, int64_t n);
template <typename T>
void activation_bwd_block(Activation a, T* dx, const T* dy, const T* x, int64_t n, bool accumulate);

}  // namespace gf::ops
