// Mixed precision (`model_config.compute_dtype`): the dtype a model computes its matrix products
// in, and the one product entry point every GEMM of a mixed-precision step goes through.
//
// What each dtype means here (the master weights, their gradients, the optimizer, LayerNorm,
// softmax, cross-entropy and the gradient reductions stay fp32 in every case):
//   float32  — gemm() (core/math/gemm.h), nothing rounded.
//   bfloat16 — oneDNN's bf16 matmul (core/math/gemm_bf16.h: AMX here): both operands rounded to bf16,
//              products accumulated and written in fp32. Weights come from a bf16 copy the model
//              refreshes once per step, so only activations are converted per call, and not the MLP's
//              activation, which the model keeps in bf16 alone as autocast does, with the up product
//              it comes from (MlpBlock::keeps_bf16; A_low below), nor the norms' outputs that feed
//              products (TransformerLayer::ln1_keeps_bf16).
//   float16  — emulated: the operands are rounded to fp16 values, the product runs on the fp32
//              GEMM, and outputs that fp16 training keeps as fp16 activations (forward outputs and
//              input gradients, not weight gradients) are rounded to fp16 values too. So a value
//              beyond fp16's 65504 becomes Inf and one below 2^-24 becomes 0, as on hardware with
//              fp16 storage: that is what the dynamic loss scale of runner_wrapper.scale_sense
//              guards against, and what its tests exercise. This CPU has no fast fp16 GEMM path in
//              oneDNN 2.6, so fp16 runs at fp32 speed.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/math/gemm.h"
#include "core/math/gemm_bf16.h"

namespace gf {

enum class ComputeDtype { kFloat32, kBFloat16, kFloat16 };

// "float32" | "bfloat16" | "float16" (MindFormers' names); throws std::invalid_argument otherwise.
ComputeDtype parse_compute_dtype(const std::string& s);
const char* compute_dtype_name(ComputeDtype d);

// The nearest IEEE binary16 value (round to nearest even; beyond 65504 rounds to Inf, subnormals
// kept), as a float.
inline float round_to_fp16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

// x[r * ld + c] rounded in place to the values of dtype d (bf16: round to nearest even; fp16:
// round_to_fp16; float32: untouched), for a rows x cols block.
void round_to_dtype(ComputeDtype d, float* x, int64_t rows, int64_t cols, int64_t ld);

// The low-precision copy of n weights for dtype d: bf16 bits (bf16*) for bfloat16, fp16-valued
// floats (float*) for float16. `low` must hold n elements of that type.
void make_low_copy(ComputeDtype d, void* low, const float* w, int64_t n);
// Bytes per element of that copy (0 for float32, which has none).
int64_t low_copy_element_bytes(ComputeDtype d);

// A weight matrix as a layer's products see it: the fp32 master and, under bf16/fp16 compute, its
// low-precision copy in the same layout (see make_low_copy). Converts implicitly from a plain
// pointer: fp32 compute.
struct Weight {
  Weight(const float* w) : f32(w) {}  // NOLINT(google-explicit-constructor)
  Weight(const float* w, ComputeDtype d, const void* low_copy) : f32(w), dtype(d), low(low_copy) {}
  const float* f32;
  ComputeDtype dtype = ComputeDtype::kFloat32;
  const void* low = nullptr;
  // How the matrix is stored: [in, out] (GPT-2's Conv1D, y = x W) or, when out_in, [out, in]
  // (nn.Linear's, y = x W^T: Llama's checkpoints).
  bool out_in = false;
  Weight transposed_layout(bool v) const {
    Weight r = *this;
    r.out_in = v;
    return r;
  }
};

// C = alpha * op(A) * op(B) + beta * C in dtype d (row-major, cblas conventions as gemm()).
// A_low / B_low: the operand's low-precision copy (see make_low_copy; the same layout and leading
// dimension), or null to round it in this call. round_c: C holds an activation (fp16: rounded to
// fp16 values after the product; ignored for bf16, whose fp32-accumulated output is kept, and for
// float32).
void gemm_mixed(ComputeDtype d, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                const void* A_low, int64_t lda, const float* B, const void* B_low, int64_t ldb, float beta, float* C,
                int64_t ldc, bool round_c);

// C = op(A) op(B) + bias (N floats added to each row; alpha 1), as C = bias then gemm_mixed with
// beta 1 computes it: in bf16 the bias enters oneDNN's fp32 accumulator instead, so C is written
// once and not read.
void gemm_mixed_bias(ComputeDtype d, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const float* A,
                     const void* A_low, int64_t lda, const float* B, const void* B_low, int64_t ldb,
                     const float* bias, float* C, int64_t ldc, bool round_c);

// The same product (bias may be null) written as its low-precision copy only: C_low, dense [M, N] of
// make_low_copy's element type, holds the rounding of what gemm_mixed_bias writes in fp32. bfloat16
// only (gemm_bf16_to_bf16: the fp32 product is never stored); std::invalid_argument otherwise.
void gemm_mixed_to_low(ComputeDtype d, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const float* A,
                       const void* A_low, int64_t lda, const float* B, const void* B_low, int64_t ldb,
                       const float* bias, void* C_low);

// The low-precision copy of a dense rows x cols activation, in the calling thread's scratch slot
// `slot` (0 or 1; kept until the next call with that slot, grown only when a larger one comes), so
// an operand two products share is converted once (a layer's output gradient feeds both its input-
// and weight-gradient products). Null for float32.
const void* low_copy_scratch(ComputeDtype d, const float* x, int64_t rows, int64_t cols, int slot);

// A rows x ld matrix stored as column chunks, one after another, each dense (rows x cols(c), row
// stride cols(c)): a product over one chunk's columns reads a dense operand. The LM head's backward
// splits its K = vocabulary product this way (oneDNN runs K = 50304 at about 60% of the speed of
// K-chunks of a few thousand).
struct ColumnChunks {
  int64_t rows = 0, ld = 0, width = 1;  // every chunk is `width` wide but the last
  int64_t count() const { return (ld + width - 1) / width; }
  int64_t begin(int64_t c) const { return c * width; }
  int64_t cols(int64_t c) const { return std::min(width, ld - c * width); }
  int64_t offset(int64_t c) const { return c * rows * width; }  // elements before chunk c
};
// Chunks of about `target` columns (a multiple of 64) covering ld.
ColumnChunks column_chunks(int64_t rows, int64_t ld, int64_t target = 4096);

// The cross-entropy gradient of ops::cross_entropy_bwd_inplace ((softmax - onehot) * grad_scale on
// the valid columns, 0 on the padding), written in d's low precision (bf16, or fp16 values in
// floats) into `out`, laid out as `chunks`, instead of over the fp32 logits: one pass reads the
// logits and writes the half-size copy the products read. `out` holds chunks.rows * chunks.ld
// elements of low_copy_element_bytes(d) bytes.
void cross_entropy_bwd_low(ComputeDtype d, void* out, const ColumnChunks& chunks, const float* logits,
                           const float* lse, const int32_t* targets, int64_t valid, float grad_scale,
                           int64_t vocab_begin);

}  // namespace gf
