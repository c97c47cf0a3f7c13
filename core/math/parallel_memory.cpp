#include "core/math/parallel_memory.h"

#include "core/math/parallel_worth.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace gf {

void parallel_zero(float* x, int64_t n) {
  constexpr int64_t kParallelMin = int64_t{1} << 16;
  if (n < kParallelMin || omp_in_parallel() || omp_get_max_threads() == 1) {
    std::memset(x, 0, sizeof(float) * static_cast<size_t>(std::max<int64_t>(n, 0)));
    return;
  }
  // One contiguous share per thread, cut at multiples of 16 floats (so, for a 64-byte aligned x
  // such as an AlignedBuffer, no cache line is written by two threads).
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t per = ((n + nt - 1) / nt + 15) / 16 * 16;
    const int64_t b = std::min(n, t * per), e = std::min(n, b + per);
    if (b < e) std::memset(x + b, 0, sizeof(float) * static_cast<size_t>(e - b));
  }
}

void parallel_broadcast_rows(float* x, int64_t rows, int64_t cols, int64_t ld, const float* row) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols))
  for (int64_t r = 0; r < rows; ++r) std::memcpy(x + r * ld, row, sizeof(float) * static_cast<size_t>(cols));
}

}  // namespace gf
