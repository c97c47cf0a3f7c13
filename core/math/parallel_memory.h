// Zeroing, copying and filling of large float buffers on every OpenMP thread: a step zeroes the whole
// gradient arena (124M floats for GPT-2 124M), and each layer's backward clears and copies buffers of
// rows x hidden (or x 3 hidden, x 4 hidden) floats, which a serial memset or memcpy does at one core's
// store bandwidth while the other cores wait.
#pragma once
#include <cstdint>

namespace gf {

// x[0, n) = 0. Buffers below 64Ki floats (where starting the threads costs about as much as the
// memset) and calls from inside a parallel region run on the calling thread.
void parallel_zero(float* x, int64_t n);

// dst[0, n) = src[0, n) (the ranges must not overlap), on the same terms as parallel_zero.
void parallel_copy(float* dst, const float* src, int64_t n);

// Every one of `rows` rows of x (row stride ld) set to row[0, cols): a bias broadcast. Parallel
// over rows when large and not already inside a parallel region.
void parallel_broadcast_rows(float* x, int64_t rows, int64_t cols, int64_t ld, const float* row);

}  // namespace gf
