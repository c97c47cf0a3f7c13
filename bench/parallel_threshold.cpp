// The measurement behind core/math/parallel_worth.h's threshold and core/math/gemm.cpp's small-product
// cap: one OpenMP thread against two for a streaming loop (x[i] += y[i]), a transcendental loop
// (x[i] = tanh(...)), OpenBLAS's matrix-vector product ([N, 64] times a vector) and GEMM ([M, 64] x
// [64, N]), over sizes. Medians of 7 batches of >= 2-3 ms each. Not part of the build (it needs
// nothing of gridformer's); run it on an idle machine:
//   g++ -O2 -march=native -fopenmp bench/parallel_threshold.cpp -o /tmp/parallel_threshold -lopenblas
//   OPENBLAS_CORETYPE=Haswell /tmp/parallel_threshold
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Median over 7 batches of the time per call in microseconds, each batch >= `batch` seconds.
template <class F>
double median_us(F f, double batch = 2e-3) {
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    int reps = 0;
    const double t0 = now();
    double t1;
    do {
      f();
      ++reps;
      t1 = now();
    } while (t1 - t0 < batch);
    t.push_back((t1 - t0) / reps * 1e6);
  }
  std::sort(t.begin(), t.end());
  return t[3];
}

}  // namespace

int main() {
  const int64_t maxn = int64_t{1} << 20;
  std::vector<float> x(maxn, 1.0f), y(maxn, 0.5f);
  std::printf("%10s %10s %10s %6s %10s %10s %6s\n", "elements", "add 1t us", "2t us", "1t/2t", "tanh 1t us", "2t us",
              "1t/2t");
  for (int64_t n = 1 << 8; n <= maxn; n *= 2) {
    double a[2], b[2];
    for (int th = 1; th <= 2; ++th) {
      a[th - 1] = median_us([&] {
#pragma omp parallel for schedule(static) num_threads(th)
        for (int64_t i = 0; i < n; ++i) x[i] += y[i] * 1e-9f;
      });
      b[th - 1] = median_us([&] {
#pragma omp parallel for schedule(static) num_threads(th)
        for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(y[i] + x[i] * 1e-9f);
      });
    }
    std::printf("%10ld %10.2f %10.2f %6.2f %10.2f %10.2f %6.2f\n", static_cast<long>(n), a[0], a[1], a[0] / a[1], b[0],
                b[1], b[0] / b[1]);
  }
  // OpenBLAS's OpenMP build takes its thread count from omp_get_max_threads() at each call.
  const int K = 64;
  std::vector<float> B(size_t{1} << 23), A(4096 * 256, 1e-3f), C(size_t{1} << 23);
  for (size_t i = 0; i < B.size(); ++i) B[i] = 1e-3f * static_cast<float>(i % 7);
  std::printf("matrix-vector [N, %d] x vector: weights, 1t us, 2t us, 1t/2t\n", K);
  for (int N = 256; N <= 131072; N *= 2) {
    double t[2];
    for (int th = 1; th <= 2; ++th) {
      omp_set_num_threads(th);
      t[th - 1] = median_us([&] { cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1, B.data(), K, A.data(), 1, 0, C.data(), 1); }, 3e-3);
    }
    std::printf("%10d %10.2f %10.2f %6.2f\n", N * K, t[0], t[1], t[0] / t[1]);
  }
  std::printf("GEMM [M, %d] x [%d, N]: M, N, multiply-adds, 1t us, 2t us, 1t/2t\n", K, K);
  const int shapes[][2] = {{16, 256}, {32, 256}, {32, 512}, {64, 256}, {64, 512}, {128, 512}, {256, 512}, {512, 512}};
  for (const auto& s : shapes) {
    const int M = s[0], N = s[1];
    double t[2];
    for (int th = 1; th <= 2; ++th) {
      omp_set_num_threads(th);
      t[th - 1] = median_us([&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, A.data(), K, B.data(), K, 0, C.data(), N);
      }, 3e-3);
    }
    std::printf("%5d %5d %10d %10.2f %10.2f %6.2f\n", M, N, M * N * K, t[0], t[1], t[0] / t[1]);
  }
}
