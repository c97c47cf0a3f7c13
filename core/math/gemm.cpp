#include <algorithm>
#include "core/math/gemm.h"
#include "core/math/gemv_fixed.h"
#include "core/math/progress.h"
#include "core/trace/trace.h"

#include <cblas.h>
#include <omp.h>
#ifdef GF_WITH_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#include "core/math/parallel_worth.h"

// GCC 12 flags _mm256_undefined_pd() inside Eigen's AVX-512 packing (a known false positive of
// -Wmaybe-uninitialized on the "undefined" intrinsics); the whole file sees Eigen's GEMM inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

// Eigen parallelises its GEMM with OpenMP only when compiled with it (gf_core gets -fopenmp from
// OpenMP::OpenMP_CXX); without it the kEigen backend would quietly run on one thread.
#ifndef EIGEN_HAS_OPENMP
#error "Eigen without OpenMP: its GEMM would be single-threaded"
#endif

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

template <typename T>
using RowMajorMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, Eigen::Unaligned,
                               Eigen::OuterStride<>>;
template <typename T>
using ConstRowMajorMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                                    Eigen::Unaligned, Eigen::OuterStride<>>;

// C += alpha * op(A) op(B) with Eigen's GEMM: the transposes are views of the row-major maps, so
// Eigen's blas_traits pass them to its kernels as column-major operands (no copy); noalias()
// keeps it from evaluating into a temporary.
template <typename T, typename OpA, typename OpB>
void eigen_accumulate(RowMajorMap<T>& c, T alpha, const OpA& a, const OpB& b) {
  c.noalias() += alpha * a * b;
}

template <typename T>
void gemm_eigen(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  RowMajorMap<T> c(C, M, N, Eigen::OuterStride<>(ldc));
  // cblas: beta == 0 means C is not read (NaN/Inf in it do not propagate).
  if (beta == T(0))
    c.setZero();
  else if (beta != T(1))
    c *= beta;
  if (K == 0 || alpha == T(0)) return;
  // The stored matrices: A is M x K (or K x M when transposed), B is K x N (or N x K).
  const ConstRowMajorMap<T> a(A, ta == Trans::kNo ? M : K, ta == Trans::kNo ? K : M, Eigen::OuterStride<>(lda));
  const ConstRowMajorMap<T> b(B, tb == Trans::kNo ? K : N, tb == Trans::kNo ? N : K, Eigen::OuterStride<>(ldb));
  if (ta == Trans::kNo && tb == Trans::kNo) eigen_accumulate(c, alpha, a, b);
  if (ta == Trans::kNo && tb == Trans::kYes) eigen_accumulate(c, alpha, a, b.transpose());
  if (ta == Trans::kYes && tb == Trans::kNo) eigen_accumulate(c, alpha, a.transpose(), b);
  if (ta == Trans::kYes && tb == Trans::kYes) eigen_accumulate(c, alpha, a.transpose(), b.transpose());
}

// oneDNN's row-major sgemm (the BLAS argument order with 'N'/'T' characters): its JIT kernels for
// the CPU's ISA, threaded over omp_get_max_threads() outside a parallel region and on one thread
// inside one (dnnl_get_current_num_threads). fp64 has no oneDNN GEMM and runs on OpenBLAS.
void gemm_onednn(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
#ifdef GF_WITH_DNNL
  if (M == 0 || N == 0) return;
  if (K == 0) {  // dnnl_sgemm leaves C as it is; cblas scales it by beta (0: overwrites)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const dnnl_status_t s = dnnl_sgemm(ta == Trans::kYes ? 'T' : 'N', tb == Trans::kYes ? 'T' : 'N', M, N, K, alpha, A,
                                     lda, B, ldb, beta, C, ldc);
  if (s != dnnl_success)
    throw std::runtime_error("dnnl_sgemm failed (status " + std::to_string(static_cast<int>(s)) + ") on a " +
                             std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " product");
#else
  gemm_blas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

constexpr int kUnset = -1;
std::atomic<int> g_backend{kUnset};

GemmBackend backend_from_env() {
  const char* env = std::getenv("GF_GEMM");
  if (env == nullptr || *env == '\0') return GemmBackend::kBlas;  // measured faster: see gemm.h
  try {
    return gemm_backend_from_name(env);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("GF_GEMM=") + env + ": " + e.what());
  }
}

// One row times a matrix (generation's decode step for one sequence): a matrix-vector product,
// which reads B once, where both GEMMs would first copy B into their packed panels (for the LM
// head that is the whole embedding, per token). beta == 0 overwrites C without reading it.
template <typename T>
void gemv_row(Trans tb, int64_t N, int64_t K, T alpha, const T* a, const T* B, int64_t ldb, T beta, T* c) {
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  if (beta == T(0)) std::fill(c, c + N, T(0));
  // c = alpha op(B)^T a: B stored [K, N] (no transpose) is read transposed, [N, K] as it is.
  const CBLAS_TRANSPOSE t = tb == Trans::kNo ? CblasTrans : CblasNoTrans;
  const int rows = tb == Trans::kNo ? i(K) : i(N), cols = tb == Trans::kNo ? i(N) : i(K);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemv(CblasRowMajor, t, rows, cols, alpha, B, i(ldb), a, 1, beta, c, 1);
  else
    cblas_dgemv(CblasRowMajor, t, rows, cols, alpha, B, i(ldb), a, 1, beta, c, 1);
}

// Threads of Eigen's GEMM as gemm_set_threads pinned them (0: Eigen follows omp_get_max_threads()).
int g_eigen_threads = 0;

// A small product runs on the calling thread (core/math/parallel_worth.h): OpenBLAS threads a
// matrix-vector product from 9216 elements and a GEMM from 2^18 multiply-adds, Eigen a GEMM from
// 10^5, and a team's barrier waits out a scheduler time slice when another process holds a core
// (a decode step of a tiny model is a dozen such products). OpenBLAS's OpenMP build takes its
// thread count from omp_get_max_threads() at each call, Eigen from its own setting: both are set to
// 1 for the call and put back. Units, by where two threads start to pay on the 2-vCPU EPYC
// (bench/parallel_threshold.cpp: OpenBLAS 0.3.21 Haswell kernels, K = 64, quiet): a matrix-vector product of
// 2^16 weights 3.8 us on one thread, 5.1 on two; 2^17 7.8 vs 7.1; 2^19 32 vs 17.5: 4 weights a
// unit. A GEMM of 2^18 multiply-adds 8.2 us vs 8.3; 2^19 14.0 vs 12.8; 2^20 24.6 vs 18.8: 16 a unit.
class SmallProductOnOneThread {
 public:
  explicit SmallProductOnOneThread(int64_t work)
      : omp_(omp_get_max_threads()), on_(omp_ > 1 && !parallel_worth(work) && !omp_in_parallel()) {
    if (!on_) return;
    omp_set_num_threads(1);
    Eigen::setNbThreads(1);
  }
  ~SmallProductOnOneThread() {
    if (!on_) return;
    omp_set_num_threads(omp_);
    Eigen::setNbThreads(g_eigen_threads);
  }
  SmallProductOnOneThread(const SmallProductOnOneThread&) = delete;
  SmallProductOnOneThread& operator=(const SmallProductOnOneThread&) = delete;

 private:
  int omp_;
  bool on_;
};

// gemm.h's RowInvariance, in force for every thread's products.
std::atomic<int> g_row_invariance{static_cast<int>(RowInvariance::kOff)};

template <typename T>
void gemm_on(GemmBackend backend, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
             int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  GF_OP_SPAN("gemm", "gemm");
  progress::point();  // a pipeline stage's messages move between its products (core/math/progress.h)
  const auto rows = static_cast<RowInvariance>(g_row_invariance.load(std::memory_order_relaxed));
  if (rows == RowInvariance::kEveryRow && N > 0 && K > 0) {
    const SmallProductOnOneThread one_thread(N * K / 4);  // each row as a matrix-vector product
    for (int64_t m = 0; m < M; ++m)
      gemv_fixed(tb, N, K, alpha, ta == Trans::kNo ? A + m * lda : A + m, ta == Trans::kNo ? 1 : lda, B, ldb, beta,
                 C + m * ldc);
    return;
  }
  const SmallProductOnOneThread one_thread(M == 1 ? N * K / 4 : M * N * K / 16);
  if (M == 1 && ta == Trans::kNo && N > 0 && K > 0) {
    gemv_row(tb, N, K, alpha, A, B, ldb, beta, C);
    return;
  }
  if (backend == GemmBackend::kEigen)
    gemm_eigen(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else if constexpr (std::is_same_v<T, float>) {
    if (backend == GemmBackend::kOnednn)
      gemm_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
      gemm_blas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else
    gemm_blas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

GemmBackend gemm_backend() {
  int b = g_backend.load(std::memory_order_relaxed);
  if (b == kUnset) {
    int expected = kUnset;
    g_backend.compare_exchange_strong(expected, static_cast<int>(backend_from_env()));
    b = g_backend.load(std::memory_order_relaxed);
  }
  return static_cast<GemmBackend>(b);
}

void gemm_set_backend(GemmBackend backend) { g_backend.store(static_cast<int>(backend)); }

const char* gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::kEigen:
      return "eigen";
    case GemmBackend::kOnednn:
      return "onednn";
    case GemmBackend::kBlas:
      break;
  }
  return "blas";
}

bool gemm_backend_available(GemmBackend backend) {
#ifdef GF_WITH_DNNL
  (void)backend;
  return true;
#else
  return backend != GemmBackend::kOnednn;
#endif
}

GemmBackend gemm_backend_from_name(const std::string& v) {
  if (v == "blas" || v == "openblas") return GemmBackend::kBlas;
  if (v == "eigen") return GemmBackend::kEigen;
  if (v == "onednn" || v == "dnnl") {
    if (!gemm_backend_available(GemmBackend::kOnednn))
      throw std::invalid_argument("this build has no oneDNN (GF_WITH_DNNL=OFF); use blas or eigen");
    return GemmBackend::kOnednn;
  }
  throw std::invalid_argument("unknown GEMM backend \"" + v + "\"; use blas, eigen or onednn");
}

void gemm(GemmBackend backend, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_on(backend, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(GemmBackend backend, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm_on(backend, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_on(gemm_backend(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  gemm_on(gemm_backend(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_set_threads(int n) {
  if (n <= 0) return;
  openblas_set_num_threads(n);
  Eigen::setNbThreads(n);
  g_eigen_threads = n;
}

int gemm_eigen_threads() { return Eigen::nbThreads(); }

RowInvariantProducts::RowInvariantProducts(RowInvariance mode)
    : before_(static_cast<RowInvariance>(g_row_invariance.exchange(static_cast<int>(mode)))) {}
RowInvariantProducts::~RowInvariantProducts() { g_row_invariance.store(static_cast<int>(before_)); }
RowInvariance row_invariance() { return static_cast<RowInvariance>(g_row_invariance.load()); }

}  // namespace gf
