#include "core/math/parallel_memory.h"

#include "core/math/parallel_worth.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace gf {

namespace {

// body(begin, end) over [0, n): on the calling thread below 64Ki floats (where starting the threads
// costs about as much as the pass), inside a parallel region or with one thread; else one contiguous
// share per thread, cut at multiples of 16 floats (so, for a 64-byte aligned buffer such as an
// AlignedBuffer, no cache line is written by two threads).
template <typename F>
void in_shares(int64_t n, const F& body) {
  constexpr int64_t kParallelMin = int64_t{1} << 16;
  if (n <= 0) return;
  if (n < kParallelMin || omp_in_parallel() || omp_get_max_threads() == 1) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t per = ((n + nt - 1) / nt + 15) / 16 * 16;
    const int64_t b = std::min(n, t * per), e = std::min(n, b + per);
    if (b < e) body(b, e);
  }
}

}  // namespace

void parallel_zero(float* x, int64_t n) {
  in_shares(n, [x](int64_t b, int64_t e) { std::memset(x + b, 0, sizeof(float) * static_cast<size_t>(e - b)); });
}

void parallel_copy(float* dst, const float* src, int64_t n) {
  in_shares(n, [dst, src](int64_t b, int64_t e) {
    std::memcpy(dst + b, src + b, sizeof(float) * static_cast<size_t>(e - b));
  });
}

void parallel_broadcast_rows(float* x, int64_t rows, int64_t cols, int64_t ld, const float* row) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols))
  for (int64_t r = 0; r < rows; ++r) std::memcpy(x + r * ld, row, sizeof(float) * static_cast<size_t>(cols));
}

}  // namespace gf
