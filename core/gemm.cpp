#include "core/gemm.h"

#include <cblas.h>

#include <type_traits>

namespace gf {

namespace {

CBLAS_TRANSPOSE op(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }

template <typename T>
void gemm_blas(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, op(ta), op(tb), i(M), i(N), i(K), alpha, A, i(lda), B, i(ldb), beta, C, i(ldc));
  else
    cblas_dgemm(CblasRowMajor, op(ta), op(tb), i(M), i(N), i(K), alpha, A, i(lda), B, i(ldb), beta, C, i(ldc));
}

}  // namespace

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_blas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm_blas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_set_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

}  // namespace gf
