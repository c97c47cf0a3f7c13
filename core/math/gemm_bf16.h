// bf16 matrix products: the interface of core/math/gemm.h with A and B rounded to bfloat16 (round to
// nearest even) and the products accumulated and written in fp32, through oneDNN's matmul
// primitive. What oneDNN 2.6 picks (checked here with ONEDNN_MAX_CPU_ISA capping the ISA, the
// tests passing on each): AMX "brg:avx512_core_amx_bf16"; AVX-512 BF16 "brg:avx512_core_bf16";
// plain AVX-512 "gemm:jit"; below AVX-512 it has no bf16 matmul, and the product runs on the
// fp32 GEMM over the bf16-rounded inputs (the same arithmetic) after a one-time warning.
// The model's bf16 compute (model_config.compute_dtype: bfloat16) reaches it through gemm_mixed
// (core/math/mixed_precision.h); fp32 stays the default.
//
// A primitive (with its scratchpad, and the dense buffers of the call) is created on the first
// call of a shape and cached per calling thread, keyed by (float or bf16 inputs, transposes, M, N,
// K, lda, ldb, ldc, alpha, beta != 0); later calls of that shape allocate no buffers (inside
// oneDNN's execute there are still 6-7 small heap allocations per call, < 4 KiB each, measured).
// oneDNN 2.6 runs its AMX brgemm kernels only on dense operands with a compile-time output scale:
// strided operands or a runtime scale send it to "gemm:jit", measured 3-14x slower here on the
// model's shapes (bench/README.md). So A and B are converted
// (or, already bf16 but strided, copied) into dense buffers; alpha's value is in the key and set
// as the output scale (the model's alphas are constant per shape: 1, attention's 1/sqrt(D));
// beta != 0 is oneDNN's sum post-op (C scaled by beta on our side first when beta != 1) when C is
// dense, and a strided C gets the product in a dense buffer and C = beta C + product on our side.
// Built without oneDNN (GF_WITH_DNNL=OFF) gemm_bf16 warns once on stderr and runs the fp32 gemm().
#pragma once
#include <bit>
#include <cstdint>
#include <string>

#include "core/math/gemm.h"

namespace gf {

// bfloat16 bits: the upper 16 bits of an IEEE float.
struct bf16 {
  uint16_t bits;
};

// Round to nearest, ties to even (NaN stays a quiet NaN; overflow rounds to Inf as it should;
// subnormals are rounded, not flushed).
inline bf16 float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  return bf16{static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
inline float bf16_to_float(bf16 h) { return std::bit_cast<float>(static_cast<uint32_t>(h.bits) << 16); }

// dst[i] = bf16_to_float(src[i]), and dst[i] = float_to_bf16(src[i]), for i < n on the calling thread: a kernel's
// block widened into float scratch and its float results stored rounded.
inline void widen_bf16(float* dst, const bf16* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}
inline void round_to_bf16(bf16* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

// dst[r * cols + c] = bf16(src[r * ld + c]) for a rows x cols block (OpenMP-parallel when large
// and not already inside a parallel region).
void convert_to_bf16(bf16* dst, const float* src, int64_t rows, int64_t cols, int64_t ld);

// True when built with oneDNN (otherwise gemm_bf16 on floats is the fp32 gemm).
bool gemm_bf16_available();

// C = alpha * op(bf16(A)) * op(bf16(B)) + beta * C, fp32 accumulation and output.
void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// The same with inputs already in bf16 (no conversion: the form a mixed-precision step would use,
// converting weights once per step).
void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
               int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc);

// C = alpha * op(A) * op(B) + bias (bias: N floats added to every row in the fp32 accumulator, as
// C = bias then the product with beta 1 would, without writing C twice), bf16 inputs.
void gemm_bf16_bias(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t lda,
                    const bf16* B, int64_t ldb, const float* bias, float* C, int64_t ldc);

// C (dense [M, N], bf16) = the bf16 rounding of op(A) op(B) + bias (bias: N floats, or null), accumulated
// in fp32, bf16 inputs: oneDNN rounds its fp32 accumulator as it writes C, so the fp32 product is never
// stored (a bf16 step's kept MLP up product, PyTorch autocast's bf16 linear output). Without oneDNN's
// bf16 matmul: the fp32 product of the same operands, then rounded.
void gemm_bf16_to_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                       const bf16* B, int64_t ldb, const float* bias, bf16* C);

// The implementation oneDNN picked for this shape (primitive_desc::impl_info_str(), e.g.
// "brg:avx512_core_amx"), creating the primitive if need be: the float entry point's (dense bf16
// copies), or with bf16_inputs the bf16 entry point's (the caller's strides).
std::string gemm_bf16_impl(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                           int64_t ldc, float alpha, float beta, bool bf16_inputs = false);
// oneDNN's version and the instruction set it dispatches to here ("built without oneDNN" otherwise).
std::string gemm_bf16_backend_info();

// Drops the calling thread's cached primitives and buffers (tests).
void gemm_bf16_clear_cache();

}  // namespace gf
