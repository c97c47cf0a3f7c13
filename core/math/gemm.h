// The one matrix-product interface of the step. Row-major, C = alpha * op(A) * op(B) + beta * C,
// with cblas semantics (beta == 0 overwrites C without reading it; K == 0 scales C by beta).
// The double overload serves the finite-difference checks of the ops.
//
// Three fp32 backends behind it (two for fp64), chosen once per process:
//   kBlas   — OpenBLAS 0.3.21 (the OpenMP build, so it shares our OpenMP threads);
//   kEigen  — Eigen 3.4's own GEMM kernels through Eigen::Map (OpenMP-parallel as well);
//   kOnednn — oneDNN 2.6's dnnl_sgemm (its JIT AVX-512/AVX2 sgemm kernels, OpenMP runtime; built
//             only with oneDNN: GF_WITH_DNNL). fp64 products on it run on OpenBLAS. On the 2-vCPU
//             AVX-512 EPYC the machine probe measured it at 1.3-2.3x OpenBLAS (Haswell kernels)
//             per product, 1.6x FLOP-weighted (bench/results/2026-11-27-epyc-machine_probe.json;
//             bench/README.md, "Speed against the machine's limits"); the probe times all three.
// The default is kBlas, by measurement: bench/bench_gemm.cpp times both on every product of one
// training step, FLOP-weighted over the step (medians of 5 interleaved rounds, 2026-11-22, on a
// 2-vCPU AVX-512/AMX Xeon shared with other sessions' builds):
//   2 threads, wall clock, two runs with ~0.9 of the cores ours: OpenBLAS 152 vs Eigen 122
//     GFLOP/s on gpt2-tiny, 165-169 vs 127-128 on gpt2-124M (1.25-1.32x); per product Eigen is at
//     66-121% of OpenBLAS, level or ahead only on attention's small per-head products;
//   1 thread, CPU clock, three runs: 71-82 vs 59-67 (gpt2-tiny), 79-95 vs 65-79 (gpt2-124M), 1.2x;
//   2 threads with half the cores taken by other processes: 1.35-1.55x.
// bench/README.md has the tables. `GF_GEMM=blas|eigen|onednn` in the environment (read at the first
// call) or gemm_set_backend() override the default. Which is faster depends on the CPU and on
// OpenBLAS's kernels (on an AMD EPYC Eigen beat OpenBLAS held to its Haswell kernels by
// OPENBLAS_CORETYPE, and lost to its SkylakeX ones: bench/README.md), so `gridformer train` sets
// the default per machine from the machine probe's measurement (runner/report/machine_probe.h) unless
// GF_GEMM is set; kBlas stays the default of this library without one (tests, benchmarks).
//
// Neither OpenBLAS nor Eigen is allocation-free per call (a malloc counter on a 1024x768x768 product at 2
// threads): OpenBLAS mallocs 512 KiB per call, Eigen its packing buffers, 3 blocks of ~1.9 MB in
// all (gemm_blocking_space with dynamic sizes). The bf16 path is core/math/gemm_bf16.h.
#pragma once
#include <cstdint>
#include <string>

namespace gf {

enum class Trans : bool { kNo = false, kYes = true };

enum class GemmBackend { kBlas, kEigen, kOnednn };

// op(A) is M x K, op(B) is K x N, C is M x N; lda/ldb/ldc are row strides of the stored matrices.
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

// The same product on one named backend, whatever the process-wide choice (tests, benchmarks).
void gemm(GemmBackend backend, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(GemmBackend backend, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha,
          const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
          int64_t ldc);

// The process-wide backend: GF_GEMM (blas|eigen|onednn) read at the first call, else kBlas. An
// unknown GF_GEMM value, or onednn in a build without oneDNN, throws std::invalid_argument naming
// the accepted ones.
GemmBackend gemm_backend();
void gemm_set_backend(GemmBackend backend);
const char* gemm_backend_name(GemmBackend backend);
// True when this build has the backend (kOnednn needs GF_WITH_DNNL).
bool gemm_backend_available(GemmBackend backend);
// The backend named "blas", "openblas", "eigen", "onednn" or "dnnl"; std::invalid_argument otherwise
// (or for onednn in a build without it).
GemmBackend gemm_backend_from_name(const std::string& name);

// Threads one call may use, for both backends (OpenBLAS's and Eigen's own settings; 0 = leave as
// configured). Inside an OpenMP parallel region both run single-threaded (attention's per-head
// products). The bf16 path (oneDNN, OpenMP runtime) follows omp_set_num_threads instead.
void gemm_set_threads(int n);
// What Eigen will use for one product (Eigen::nbThreads(); 1 if Eigen was built without OpenMP).
int gemm_eigen_threads();

// Products whose rows do not depend on how they are called (`serve --batch-invariant`, models/generator.h).
//
// OpenBLAS rounds an output element by where it falls in the call: its kernels take rows and columns
// in blocks, the remainders by other code, and its threads split the output at boundaries that move
// with the thread count. Measured with OpenBLAS 0.3.21 (Zen kernels, 2-vCPU EPYC), K = 64: of a
// 50257-column one-row product (the LM head), 1 (weights [N, K]) and 13 (weights [K, N]) outputs
// differ between 1 and 2 threads; and of the first row of an 8-row product, 258 differ from the same
// row computed alone. So a served request's logits move in their last bits with the requests beside it
// in a call, and a decode step's with the team a timing tuner chose (core/math/team_tuner.h).
//
//   kEveryRow: every row of every product is core/math/gemv_fixed.h's matrix-vector product, each
//              output one fixed sequence of fused multiply-adds whichever thread computes it: a row's
//              result is bitwise the same whatever other rows share its call and on any thread count.
//              It reads the weights once per row, not once per call, and its one-row products are
//              slower than OpenBLAS's (a trial build with them in predict's decode: gpt2-124M batch 1 at
//              42 against 48 tokens/s, medians of 3 rounds on the 2-vCPU EPYC, bench/decode.py): an opt-in.
// Process-wide for the scope's lifetime (the products of OpenMP workers included); the scope puts
// back what was in force before it. Products of the fp32 backends only (gemm_bf16.h is not covered).
enum class RowInvariance { kOff, kEveryRow };
class RowInvariantProducts {
 public:
  explicit RowInvariantProducts(RowInvariance mode);
  ~RowInvariantProducts();
  RowInvariantProducts(const RowInvariantProducts&) = delete;
  RowInvariantProducts& operator=(const RowInvariantProducts&) = delete;

 private:
  RowInvariance before_;
};
RowInvariance row_invariance();

}  // namespace gf
