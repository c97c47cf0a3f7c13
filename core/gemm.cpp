#include "core/gemm.h"

#include <cblas.h>

namespace gf {

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
              tb == Trans::kYes ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_dgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
              tb == Trans::kYes ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

void gemm_set_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

}  // namespace gf
