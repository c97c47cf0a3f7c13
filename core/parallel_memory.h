// Zeroing of large float buffers on every OpenMP thread: a step zeroes the whole gradient arena
// (124M floats for GPT-2 124M), which a serial memset does at one core's store bandwidth while the
// other cores wait.
#pragma once
#include <cstdint>

namespace gf {

// x[0, n) = 0. Buffers below 64Ki floats (where starting the threads costs about as much as the
// memset) and calls from inside a parallel region run on the calling thread.
void parallel_zero(float* x, int64_t n);

}  // namespace gf
