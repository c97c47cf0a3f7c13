#include "core/math/gemv_fixed.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace gf {

namespace {

constexpr int kChains = 32;        // the [N, K] form's chains per output
constexpr int64_t kBlock = 256;    // the [K, N] form's outputs held while B's rows stream past
constexpr int64_t kAlign = 16;     // a thread's run of outputs starts at a multiple of this

template <typename T>
T finish(T alpha, T sum, T beta, T c) {
  return beta == T(0) ? alpha * sum : std::fma(alpha, sum, beta * c);
}

// Outputs [n0, n1) of the [N, K] form (x contiguous).
template <typename T>
void dots(int64_t n0, int64_t n1, int64_t K, T alpha, const T* x, const T* B, int64_t ldb, T beta, T* c) {
  for (int64_t n = n0; n < n1; ++n) {
    const T* w = B + n * ldb;
    T acc[kChains] = {};
    int64_t k = 0;
    for (; k + kChains <= K; k += kChains)
      for (int j = 0; j < kChains; ++j) acc[j] = std::fma(x[k + j], w[k + j], acc[j]);
    for (int j = 0; k + j < K; ++j) acc[j] = std::fma(x[k + j], w[k + j], acc[j]);
    for (int h = kChains / 2; h > 0; h /= 2)
      for (int j = 0; j < h; ++j) acc[j] += acc[j + h];
    c[n] = finish(alpha, acc[0], beta, c[n]);
  }
}

// Outputs [n0, n1) of the [K, N] form (x contiguous): a block of sums held while every row of B adds to it.
template <typename T>
void axpys(int64_t n0, int64_t n1, int64_t K, T alpha, const T* x, const T* B, int64_t ldb, T beta, T* c) {
  T acc[kBlock];
  for (int64_t b0 = n0; b0 < n1; b0 += kBlock) {
    const int64_t w = std::min(kBlock, n1 - b0);
    std::fill(acc, acc + w, T(0));
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {  // four rows at a time: each sum's chain in the same k order, held in a register
      const T x0 = x[k], x1 = x[k + 1], x2 = x[k + 2], x3 = x[k + 3];
      const T *r0 = B + k * ldb + b0, *r1 = r0 + ldb, *r2 = r1 + ldb, *r3 = r2 + ldb;
      for (int64_t j = 0; j < w; ++j)
        acc[j] = std::fma(x3, r3[j], std::fma(x2, r2[j], std::fma(x1, r1[j], std::fma(x0, r0[j], acc[j]))));
    }
    for (; k < K; ++k) {
      const T xk = x[k];
      const T* row = B + k * ldb + b0;
      for (int64_t j = 0; j < w; ++j) acc[j] = std::fma(xk, row[j], acc[j]);
    }
    for (int64_t j = 0; j < w; ++j) c[b0 + j] = finish(alpha, acc[j], beta, c[b0 + j]);
  }
}

template <typename T>
void run(Trans tb, int64_t N, int64_t K, T alpha, const T* x, int64_t incx, const T* B, int64_t ldb, T beta, T* c) {
  if (N <= 0) return;
  std::vector<T> packed;
  if (incx != 1) {
    packed.resize(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) packed[static_cast<size_t>(k)] = x[k * incx];
    x = packed.data();
  }
  auto part = [&](int64_t n0, int64_t n1) {
    if (tb == Trans::kNo)
      axpys(n0, n1, K, alpha, x, B, ldb, beta, c);
    else
      dots(n0, n1, K, alpha, x, B, ldb, beta, c);
  };
  const int team = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), N / kAlign));
  if (team <= 1) {
    part(0, N);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    // Contiguous runs, each starting at a multiple of kAlign: which thread computes an output changes nothing in it.
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t units = (N + kAlign - 1) / kAlign;
    const int64_t u0 = units * t / nt, u1 = units * (t + 1) / nt;
    part(std::min(N, u0 * kAlign), std::min(N, u1 * kAlign));
  }
}

}  // namespace

void gemv_fixed(Trans tb, int64_t N, int64_t K, float alpha, const float* x, int64_t incx, const float* B,
                int64_t ldb, float beta, float* c) {
  run(tb, N, K, alpha, x, incx, B, ldb, beta, c);
}

void gemv_fixed(Trans tb, int64_t N, int64_t K, double alpha, const double* x, int64_t incx, const double* B,
                int64_t ldb, double beta, double* c) {
  run(tb, N, K, alpha, x, incx, B, ldb, beta, c);
}

}  // namespace gf
