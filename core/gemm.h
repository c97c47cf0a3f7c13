// The one matrix-product interface of the step. Row-major, C = alpha * op(A) * op(B) + beta * C.
// Backed by OpenBLAS (measured faster than Eigen's own kernels on the model's shapes, see
// bench/README.md). The double overload serves the finite-difference checks of the ops.
#pragma once
#include <cstdint>

namespace gf {

enum class Trans : bool { kNo = false, kYes = true };

// op(A) is M x K, op(B) is K x N, C is M x N; lda/ldb/ldc are row strides of the stored matrices.
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

// Number of threads the BLAS may use for one call (0 = leave as configured).
void gemm_set_threads(int n);

}  // namespace gf
