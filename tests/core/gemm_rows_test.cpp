// Row-invariant products (core/math/gemm.h, RowInvariance::kEveryRow), what `serve --batch-invariant` rests on:
//  * a one-row product is bitwise the same on 1 and on 2 threads, at the LM head's shape (50257 outputs,
//    where OpenBLAS's own split moves outputs between kernels) and at a layer's;
//  * each row of an M-row product is bitwise the row computed alone, for M from 2 to 33,
//    both operand layouts, A transposed or not, strided, alpha/beta other than 0/1;
//  * the values are the product's: within the fp32 bound of gemm_test.cpp against a double product;
//  * the scope puts back what was in force.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/math/gemm.h"

namespace gf {
namespace {

struct Product {
  Trans ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  std::vector<float> A, B, C0;  // C0: C before the product (read when beta != 0)
};

Product make(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, uint32_t seed) {
  Product p{ta, tb, M, N, K, 0, 0, N + 3, alpha, beta, {}, {}, {}};
  p.lda = (ta == Trans::kNo ? K : M) + 2;
  p.ldb = (tb == Trans::kNo ? N : K) + 1;
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  p.A.resize(static_cast<size_t>((ta == Trans::kNo ? M : K) * p.lda));
  p.B.resize(static_cast<size_t>((tb == Trans::kNo ? K : N) * p.ldb));
  p.C0.resize(static_cast<size_t>(M * p.ldc));
  for (auto* v : {&p.A, &p.B, &p.C0})
    for (float& x : *v) x = d(g);
  return p;
}

// Rows [m0, m0 + rows) of the product, as one call.
std::vector<float> run(const Product& p, int64_t m0, int64_t rows) {
  std::vector<float> C(p.C0.begin() + m0 * p.ldc, p.C0.begin() + (m0 + rows) * p.ldc);
  const float* A = p.ta == Trans::kNo ? p.A.data() + m0 * p.lda : p.A.data() + m0;
  gemm(GemmBackend::kBlas, p.ta, p.tb, rows, p.N, p.K, p.alpha, A, p.lda, p.B.data(), p.ldb, p.beta, C.data(), p.ldc);
  return C;
}

// ||C - ref||_F <= 1e-5 ||S||_F (gemm_test.cpp's fp32 bound and its derivation).
void expect_product(const Product& p, const std::vector<float>& C) {
  double err = 0, scale = 0;
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = 0; n < p.N; ++n) {
      double ref = 0, s = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double a = p.ta == Trans::kNo ? p.A[m * p.lda + k] : p.A[k * p.lda + m];
        const double b = p.tb == Trans::kNo ? p.B[k * p.ldb + n] : p.B[n * p.ldb + k];
        ref += a * b;
        s += std::fabs(a * b);
      }
      const double c0 = p.C0[m * p.ldc + n];
      ref = p.alpha * ref + (p.beta == 0.0f ? 0.0 : p.beta * c0);
      s = std::fabs(p.alpha) * s + std::fabs(p.beta * c0);
      err += (C[m * p.ldc + n] - ref) * (C[m * p.ldc + n] - ref);
      scale += s * s;
    }
  EXPECT_LE(std::sqrt(err), 1e-5 * std::sqrt(scale));
}

int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

TEST(RowInvariantProducts, OneRowIsTheSameOnAnyThreadCount) {
  const int before = omp_get_max_threads();
  const RowInvariantProducts scope(RowInvariance::kEveryRow);
  for (const Trans tb : {Trans::kNo, Trans::kYes})
    for (const auto& [N, K] : {std::pair<int64_t, int64_t>{50257, 64}, {3072, 768}, {200, 64}}) {
      const Product p = make(Trans::kNo, tb, 1, N, K, 1.0f, 0.0f, static_cast<uint32_t>(N + K));
      omp_set_num_threads(1);
      const std::vector<float> one = run(p, 0, 1);
      omp_set_num_threads(2);
      const std::vector<float> two = run(p, 0, 1);
      EXPECT_EQ(differing(one, two), 0) << "N " << N << " K " << K << " B " << (tb == Trans::kNo ? "[K, N]" : "[N, K]");
      if (N * K <= 3072 * 768) expect_product(p, two);
    }
  omp_set_num_threads(before);
}

TEST(RowInvariantProducts, EveryRowIsTheRowComputedAlone) {
  const RowInvariantProducts scope(RowInvariance::kEveryRow);
  uint32_t seed = 7;
  for (const Trans ta : {Trans::kNo, Trans::kYes})
    for (const Trans tb : {Trans::kNo, Trans::kYes})
      for (const int64_t M : {2, 3, 8, 33})
        for (const auto& [alpha, beta] : {std::pair<float, float>{1.0f, 0.0f}, {0.5f, 1.0f}, {-1.5f, 0.25f}}) {
          const Product p = make(ta, tb, M, 700, 96, alpha, beta, ++seed);
          const std::vector<float> all = run(p, 0, M);
          for (int64_t m = 0; m < M; ++m) {
            const std::vector<float> alone = run(p, m, 1);
            const std::vector<float> in_all(all.begin() + m * p.ldc, all.begin() + (m + 1) * p.ldc);
            ASSERT_EQ(differing(alone, in_all), 0) << "row " << m << " of " << M << ", ta " << static_cast<int>(ta)
                                                   << " tb " << static_cast<int>(tb) << " alpha " << alpha;
          }
          expect_product(p, all);
        }
}

TEST(RowInvariantProducts, TheScopePutsBackWhatWasInForce) {
  EXPECT_EQ(row_invariance(), RowInvariance::kOff);
  {
    const RowInvariantProducts a(RowInvariance::kEveryRow);
    EXPECT_EQ(row_invariance(), RowInvariance::kEveryRow);
    {
      const RowInvariantProducts b(RowInvariance::kOff);
      EXPECT_EQ(row_invariance(), RowInvariance::kOff);
    }
    EXPECT_EQ(row_invariance(), RowInvariance::kEveryRow);
  }
  EXPECT_EQ(row_invariance(), RowInvariance::kOff);
}

}  // namespace
}  // namespace gf
