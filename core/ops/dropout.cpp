#include "core/ops/dropout.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

namespace gf::ops {

template <typename T>
void dropout_apply(T* x, const DropoutKey& key, int64_t rows, int64_t cols, int64_t row_offset,
                   int64_t col_offset, int64_t global_cols) {
  GF_OP_SPAN("elementwise", "dropout");
  if (!key.active()) return;
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t base = static_cast<uint64_t>((row_offset + r) * global_cols + col_offset);
    T* xr = x + r * cols;
    for (int64_t c = 0; c < cols; ++c) xr[c] *= key.scale(base + c);
  }
}

template void dropout_apply<float>(float*, const DropoutKey&, int64_t, int64_t, int64_t, int64_t, int64_t);
template void dropout_apply<double>(double*, const DropoutKey&, int64_t, int64_t, int64_t, int64_t, int64_t);

}  // namespace gf::ops
