// Matrix-vector products each of whose outputs is one fixed sequence of operations, whatever the thread
// count and whatever part of the output a call or a thread computes (core/math/gemm.h, RowInvariance).
//
// c[n] = alpha * sum_k x[k] op(B)[k, n] + beta * c[n] for n in [0, N) (beta == 0: c is not read):
//   B stored [K, N] (tb kNo):  c[n]'s sum is one chain of fused multiply-adds over k = 0, 1, ..., K - 1
//                              (vectorised across n; threads take runs of n);
//   B stored [N, K] (tb kYes): c[n]'s sum is 32 chains of fused multiply-adds, chain j over k = j, j + 32,
//                              ..., then the chains added pairwise ((j, j + 16), (j, j + 8), ... (0, 1));
// then alpha * sum + beta * c[n] as one fused multiply-add. OpenBLAS's gemv is no such thing: its threads
// split the output at boundaries that move with the thread count, and its kernels round a block's
// remainder by other code (1 and 2 threads differ on a few of a 50257-column product's outputs).
// x is read with stride incx. Threads: omp_get_max_threads() outside a parallel region, one inside one.
#pragma once
#include <cstdint>

#include "core/math/gemm.h"

namespace gf {

void gemv_fixed(Trans tb, int64_t N, int64_t K, float alpha, const float* x, int64_t incx, const float* B,
                int64_t ldb, float beta, float* c);
void gemv_fixed(Trans tb, int64_t N, int64_t K, double alpha, const double* x, int64_t incx, const double* B,
                int64_t ldb, double beta, double* c);

}  // namespace gf
