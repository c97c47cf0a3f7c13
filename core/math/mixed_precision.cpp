#include "core/math/mixed_precision.h"

#include "core/math/parallel_memory.h"
#include "core/math/parallel_worth.h"
#include "core/math/scratch.h"
#include "core/trace/trace.h"

#include <omp.h>

#include <Eigen/Core>

#include <stdexcept>
#include <utility>
#include <vector>

namespace gf {

namespace {

// As lambdas, so the conversion loops inline them.
constexpr auto kToBf16 = [](float v) { return float_to_bf16(v); };
constexpr auto kToFp16 = [](float v) { return round_to_fp16(v); };

// A thread's conversion buffers: grown on the first call of a larger shape, then reused, so a
// step of fixed shapes allocates nothing after its first. 64-byte aligned (core/math/scratch.h says why).
template <typename E>
E* scratch(std::vector<E>& v, int64_t n) {
  return align64(v, static_cast<size_t>(n));
}

// Dense copy of a rows x cols block (row stride ld), each element rounded with f.
template <typename E, typename F>
void convert_block(E* dst, const float* src, int64_t rows, int64_t cols, int64_t ld, F f) {
  GF_OP_SPAN("convert", "to low precision");
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    E* d = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c) d[c] = f(s[c]);
  }
}

}  // namespace

ComputeDtype parse_compute_dtype(const std::string& s) {
  if (s == "float32") return ComputeDtype::kFloat32;
  if (s == "bfloat16") return ComputeDtype::kBFloat16;
  if (s == "float16") return ComputeDtype::kFloat16;
  throw std::invalid_argument("unknown compute dtype '" + s + "'; expects float32, bfloat16 or float16");
}

const char* compute_dtype_name(ComputeDtype d) {
  switch (d) {
    case ComputeDtype::kFloat32:
      return "float32";
    case ComputeDtype::kBFloat16:
      return "bfloat16";
    case ComputeDtype::kFloat16:
      return "float16";
  }
  return "?";
}

void round_to_dtype(ComputeDtype d, float* x, int64_t rows, int64_t cols, int64_t ld) {
  if (d == ComputeDtype::kFloat32) return;
  GF_OP_SPAN("convert", "round to dtype");
  const bool bf = d == ComputeDtype::kBFloat16;
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    float* p = x + r * ld;
    if (bf)
      for (int64_t c = 0; c < cols; ++c) p[c] = bf16_to_float(float_to_bf16(p[c]));
    else
      for (int64_t c = 0; c < cols; ++c) p[c] = round_to_fp16(p[c]);
  }
}

int64_t low_copy_element_bytes(ComputeDtype d) {
  switch (d) {
    case ComputeDtype::kFloat32:
      return 0;
    case ComputeDtype::kBFloat16:
      return static_cast<int64_t>(sizeof(bf16));
    case ComputeDtype::kFloat16:
      return static_cast<int64_t>(sizeof(float));
  }
  return 0;
}

void make_low_copy(ComputeDtype d, void* low, const float* w, int64_t n) {
  // As one row per 4096 elements, so the pass is split across threads.
  constexpr int64_t kCols = 4096;
  const int64_t rows = n / kCols, tail = n - rows * kCols;
  if (d == ComputeDtype::kBFloat16) {
    auto* out = static_cast<bf16*>(low);
    convert_block(out, w, rows, kCols, kCols, kToBf16);
    convert_block(out + rows * kCols, w + rows * kCols, 1, tail, tail, kToBf16);
  } else if (d == ComputeDtype::kFloat16) {
    auto* out = static_cast<float*>(low);
    convert_block(out, w, rows, kCols, kCols, kToFp16);
    convert_block(out + rows * kCols, w + rows * kCols, 1, tail, tail, kToFp16);
  }
}

const void* low_copy_scratch(ComputeDtype d, const float* x, int64_t rows, int64_t cols, int slot) {
  if (d == ComputeDtype::kFloat32) return nullptr;
  if (slot < 0 || slot > 1) throw std::invalid_argument("low_copy_scratch: slot must be 0 or 1");
  if (d == ComputeDtype::kBFloat16) {
    thread_local std::vector<bf16> bufs[2];
    bf16* out = scratch(bufs[slot], rows * cols);
    convert_block(out, x, rows, cols, cols, kToBf16);
    return out;
  }
  thread_local std::vector<float> bufs[2];
  float* out = scratch(bufs[slot], rows * cols);
  convert_block(out, x, rows, cols, cols, kToFp16);
  return out;
}

ColumnChunks column_chunks(int64_t rows, int64_t ld, int64_t target) {
  const int64_t n = std::max<int64_t>(1, (ld + target - 1) / target);
  int64_t width = (ld + n - 1) / n;
  width = std::max<int64_t>(1, (width + 63) / 64 * 64);
  return ColumnChunks{rows, ld, width};
}

namespace {

template <typename E, typename To>
void cross_entropy_bwd_chunks(E* out, const ColumnChunks& ch, const float* logits, const float* lse,
                              const int32_t* targets, int64_t valid, float grad_scale, int64_t vocab_begin, To to) {
  // g is 64-byte aligned (scratch), and Eigen is told so: every element of the row takes the
  // vectorised exp. Unaligned, Eigen computed the elements before the first 64-byte boundary with
  // the scalar std::exp, which differs from the vectorised one in the last bit for some inputs, so
  // the gradient depended on where the heap put the buffer (a bf16 rounding flipped now and then).
  using Row = Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64>;
  using ConstRow = Eigen::Map<const Eigen::ArrayXf>;
  const int64_t nc = ch.count();
#pragma omp parallel if (parallel_worth(ch.rows * ch.ld * kTranscendentalWork))
  {
    thread_local std::vector<float> row_buf;
    float* g = scratch(row_buf, ch.ld);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < ch.rows; ++r) {
      // The gradient row in fp32, as cross_entropy_bwd_inplace computes it.
      Row(g, valid) = (ConstRow(logits + r * ch.ld, valid) - lse[r]).exp() * (targets[r] < 0 ? 0.0f : grad_scale);
      const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
      if (t >= 0 && t < valid) g[t] -= grad_scale;
      std::fill(g + valid, g + ch.ld, 0.0f);
      for (int64_t c = 0; c < nc; ++c) {
        const int64_t w = ch.cols(c);
        const float* src = g + ch.begin(c);
        E* dst = out + ch.offset(c) + r * w;
        for (int64_t j = 0; j < w; ++j) dst[j] = to(src[j]);
      }
    }
  }
}

}  // namespace

void cross_entropy_bwd_low(ComputeDtype d, void* out, const ColumnChunks& chunks, const float* logits,
                           const float* lse, const int32_t* targets, int64_t valid, float grad_scale,
                           int64_t vocab_begin) {
  switch (d) {
    case ComputeDtype::kFloat32:
      throw std::invalid_argument("cross_entropy_bwd_low: float32 has no low-precision copy");
    case ComputeDtype::kBFloat16:
      cross_entropy_bwd_chunks(static_cast<bf16*>(out), chunks, logits, lse, targets, valid, grad_scale, vocab_begin,
                               kToBf16);
      return;
    case ComputeDtype::kFloat16:
      cross_entropy_bwd_chunks(static_cast<float*>(out), chunks, logits, lse, targets, valid, grad_scale,
                               vocab_begin, kToFp16);
      return;
  }
}

namespace {

// op(A) op(B) on operands in low-precision element type E: each given copy (A_low, B_low) is used
// as it is; a missing one is converted here with `to` into a dense thread-local buffer. Then
// product(a, lda, b, ldb) runs on them.
template <typename E, typename To, typename Product>
void with_low_operands(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const float* A, const void* A_low,
                       int64_t lda, const float* B, const void* B_low, int64_t ldb, To to, Product product) {
  thread_local std::vector<E> a_buf, b_buf;
  auto operand = [to](const float* x, const void* low, int64_t rows, int64_t cols, int64_t ld,
                      std::vector<E>& buf) -> std::pair<const E*, int64_t> {
    if (low) return {static_cast<const E*>(low), ld};
    E* t = scratch(buf, rows * cols);
    convert_block(t, x, rows, cols, ld, to);
    return {t, cols};
  };
  // The stored shapes of A and B (op() transposes them).
  const auto [a, a_ld] = ta == Trans::kNo ? operand(A, A_low, M, K, lda, a_buf) : operand(A, A_low, K, M, lda, a_buf);
  const auto [b, b_ld] = tb == Trans::kNo ? operand(B, B_low, K, N, ldb, b_buf) : operand(B, B_low, N, K, ldb, b_buf);
  product(a, a_ld, b, b_ld);
}

}  // namespace

void gemm_mixed(ComputeDtype d, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                const void* A_low, int64_t lda, const float* B, const void* B_low, int64_t ldb, float beta, float* C,
                int64_t ldc, bool round_c) {
  switch (d) {
    case ComputeDtype::kFloat32:
      gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    case ComputeDtype::kBFloat16:
      if (!A_low && !B_low) {  // gemm_bf16 converts both itself
        gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
      }
      with_low_operands<bf16>(ta, tb, M, N, K, A, A_low, lda, B, B_low, ldb, kToBf16,
                              [&](const bf16* a, int64_t a_ld, const bf16* b, int64_t b_ld) {
                                gemm_bf16(ta, tb, M, N, K, alpha, a, a_ld, b, b_ld, beta, C, ldc);
                              });
      return;
    case ComputeDtype::kFloat16:  // emulated: fp16-valued operands, fp32 product
      with_low_operands<float>(ta, tb, M, N, K, A, A_low, lda, B, B_low, ldb, kToFp16,
                               [&](const float* a, int64_t a_ld, const float* b, int64_t b_ld) {
                                 gemm(ta, tb, M, N, K, alpha, a, a_ld, b, b_ld, beta, C, ldc);
                               });
      if (round_c) round_to_dtype(d, C, M, N, ldc);
      return;
  }
}

void gemm_mixed_bias(ComputeDtype d, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const float* A,
                     const void* A_low, int64_t lda, const float* B, const void* B_low, int64_t ldb,
                     const float* bias, float* C, int64_t ldc, bool round_c) {
  if (d != ComputeDtype::kBFloat16) {
    parallel_broadcast_rows(C, M, N, ldc, bias);
    gemm_mixed(d, ta, tb, M, N, K, 1.0f, A, A_low, lda, B, B_low, ldb, 1.0f, C, ldc, round_c);
    return;
  }
  with_low_operands<bf16>(ta, tb, M, N, K, A, A_low, lda, B, B_low, ldb, kToBf16,
                          [&](const bf16* a, int64_t a_ld, const bf16* b, int64_t b_ld) {
                            gemm_bf16_bias(ta, tb, M, N, K, 1.0f, a, a_ld, b, b_ld, bias, C, ldc);
                          });
}

void gemm_mixed_to_low(ComputeDtype d, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const float* A,
                       const void* A_low, int64_t lda, const float* B, const void* B_low, int64_t ldb,
                       const float* bias, void* C_low) {
  if (d != ComputeDtype::kBFloat16)
    throw std::invalid_argument(std::string("gemm_mixed_to_low: only bfloat16 writes a low-precision output, not ") +
                                compute_dtype_name(d));
  with_low_operands<bf16>(ta, tb, M, N, K, A, A_low, lda, B, B_low, ldb, kToBf16,
                          [&](const bf16* a, int64_t a_ld, const bf16* b, int64_t b_ld) {
                            gemm_bf16_to_bf16(ta, tb, M, N, K, a, a_ld, b, b_ld, bias, static_cast<bf16*>(C_low));
                          });
}

}  // namespace gf
