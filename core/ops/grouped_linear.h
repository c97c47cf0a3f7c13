// The experts' linear layers of a Mixture-of-Experts block as one call per pass. Tokens come
// permuted into expert-contiguous order: rows [offsets[g], offsets[g+1]) of x ([R, in], R =
// offsets[groups]) belong to expert g, whose weight is matrix g of a packed stack (Weight w's
// matrices, fp32 and low-precision copy alike, advanced by g * w_stride elements).
//
// Each function computes what ops::linear_fwd / linear_bwd_input (dx_beta 0) / linear_bwd_weight
// (the Weight overloads, core/ops/linear.h) compute when called once per group on that group's
// rows, in every compute dtype and both layouts (w.out_in), so a caller can switch between the
// grouped call and the per-expert loop (the *_loop functions below, which are that loop).
//
// How: the work is cut into tiles that all experts' products share in one OpenMP loop
// (schedule(dynamic), largest tiles first):
//   forward, backward-input: (group, block of about tiles.rows rows; a group's blocks are of equal
//     size); each tile runs ops::linear_fwd / linear_bwd_input on its rows, so every output row is
//     computed by exactly that op;
//   backward-weight: (group, block of tiles.weight_rows rows of dW_g as stored: output features when
//     out_in, input features otherwise), each one product over all the group's rows in order, so no
//     two threads write the same element and every tile writes whole rows of dW (dense for the
//     GEMM). db_g's entries are summed over the rows in row order by the tile holding them (out_in)
//     or by the group's first tile ([in, out]). Under bf16/fp16 the two operands are converted once
//     per call into dense copies, each group padded with zero rows to a multiple of 32 (see the .cpp).
// Inside the loop's parallel region the products run single-threaded: OpenBLAS (OpenMP build) and
// oneDNN check omp_in_parallel(), Eigen omp_get_num_threads() > 1 (bench/README.md, "Grouped expert
// products", has what was checked).
//
// Numbers: every tile is the same computation whatever the thread count (one single-threaded
// product of fixed shape and operands), so the results are bitwise the same on 1 and on N OpenMP
// threads. (With the Eigen backend this needs Eigen's thread count to follow OpenMP's, as
// runner/cli/main.cpp sets them together: on a one-thread team Eigen would otherwise thread the tile's
// product itself.) The per-expert loop is not: its multithreaded products change bits with the
// thread count here, on OpenBLAS's Haswell kernels (the row split changes them too) and on Eigen
// for K > ~300 (its blocking depends on the thread count). Against that loop each element is the
// same sum in an order the GEMM picks per shape and thread count: bitwise equal under bf16 here
// (oneDNN sums in K order), within the fp32 accumulation bound of tests/core/grouped_linear_test.cpp
// otherwise; db bitwise (the column sums of linear_bwd_weight, in the same order).
#pragma once
#include <cstdint>

#include "core/math/mixed_precision.h"

namespace gf::ops {

// Tile sizes of the grouped calls. They fix the products' shapes, so they are not chosen from the
// thread count (the bits would then depend on it). Measured on two threads (bench/bench_grouped.cpp,
// bench/README.md): 256-row tiles 2-9% faster than 128 in the forward and input-gradient passes;
// 512 2-4% faster still in fp32 but up to 9% slower in bf16; the weight-gradient tile sizes within
// a few percent of each other. 256 leaves ~20 forward tiles and 8-64 weight tiles for moe-tiny's
// 4096 rows, enough for a few more threads than two; many more threads would want smaller tiles.
struct GroupedTiles {
  int64_t rows = 256;         // rows per tile of the forward and backward-input passes
  int64_t weight_rows = 256;  // rows of dW_g (as stored) per tile of the backward-weight pass
};

// y[r, :] = x[r, :] W_g (+ b_g) for r in group g; W_g = w's matrices advanced by g * w_stride
// elements ([in, out], or [out, in] when w.out_in); b_g = b + g * out (b may be null). Groups may
// be empty; offsets must not decrease (std::invalid_argument otherwise).
void grouped_linear_fwd(float* y, const float* x, const Weight& w, int64_t w_stride, const float* b,
                        const int64_t* offsets, int64_t groups, int64_t in, int64_t out, GroupedTiles tiles = {});

// dx ([R, in], overwritten) = dy W_g^T per group. dy_low: dy's low-precision copy ([R, out], see
// make_low_copy) or null to convert it here, as linear_bwd_input takes it.
void grouped_linear_bwd_input(float* dx, const float* dy, const Weight& w, int64_t w_stride, const int64_t* offsets,
                              int64_t groups, int64_t in, int64_t out, const void* dy_low = nullptr,
                              GroupedTiles tiles = {});

// dW_g += x_g^T dy_g (in w's layout: [out, in] when w.out_in), db_g += sum of dy_g's rows (db may
// be null); dw advanced by g * w_stride per group, db by g * out. Accumulates in fp32. w supplies
// the dtype and layout only. dy_low as above (under bf16/fp16 both operands are copied once per
// call; dy_low, when given, is copied instead of converting dy).
void grouped_linear_bwd_weight(float* dw, float* db, const float* dy, const float* x, const Weight& w,
                               int64_t w_stride, const int64_t* offsets, int64_t groups, int64_t in, int64_t out,
                               const void* dy_low = nullptr, GroupedTiles tiles = {});

// The reference path: the same three passes as a loop over groups, each calling the ops of
// core/ops/linear.h on the whole group with their multithreaded products.
void grouped_linear_fwd_loop(float* y, const float* x, const Weight& w, int64_t w_stride, const float* b,
                             const int64_t* offsets, int64_t groups, int64_t in, int64_t out);
void grouped_linear_bwd_input_loop(float* dx, const float* dy, const Weight& w, int64_t w_stride,
                                   const int64_t* offsets, int64_t groups, int64_t in, int64_t out,
                                   const void* dy_low = nullptr);
void grouped_linear_bwd_weight_loop(float* dw, float* db, const float* dy, const float* x, const Weight& w,
                                    int64_t w_stride, const int64_t* offsets, int64_t groups, int64_t in, int64_t out,
                                    const void* dy_low = nullptr);

// Expert g's matrix of a packed stack: w's fp32 pointer and low-precision copy advanced by
// g * w_stride elements, dtype and layout kept.
Weight expert_weight(const Weight& w, int64_t w_stride, int64_t g);

}  // namespace gf::ops
