// SwiGLU runs in chunks of columns through Eigen's vectorised exp (core/ops/swiglu.cpp). These check what
// the PyTorch golden test (33 columns, one chunk) cannot: rows longer than a chunk, a row stride that is
// not twice the width, and that a value does not depend on where its row lies in memory or on the
// thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/math/aligned_buffer.h"
#include "core/ops/swiglu.h"
#include "tests/random_values.h"

namespace gf::ops {
namespace {

using test_values::normal_values;

// Rows of gate | up values: normal with scale 3, plus inputs where exp(-g) overflows or underflows.
std::vector<float> gate_up(int64_t rows, int64_t ld, uint64_t seed) {
  std::vector<float> v = normal_values(rows * ld, 3.0f, seed);
  v[5] = 95.0f;
  v[7] = -95.0f;
  v[static_cast<size_t>(ld + 3)] = -30.0f;
  return v;
}

// Error bound of a float evaluation against the exact value. Each of the few roundings (the exp,
// within a few ulp in Eigen's and the C library's, 1 + e, the division, the products) adds at most a few
// units of eps = 2^-24 relative to the magnitudes it combines; 16 eps covers them with room. For dg the
// magnitudes are those of s and g s (1 - s), which may cancel when summed, so the bound is relative to
// the sum of their magnitudes. The absolute 1e-30 covers |g| > 88, where Eigen's exp saturates at the
// largest finite float and the exact values are below 1e-36.
constexpr double kEps = 16.0 * 0x1p-24, kAbs = 1e-30;

TEST(SwiGLU, RowsLongerThanAChunkMatchADoubleReference) {
  const int64_t rows = 3, cols = 2500, ld = 2 * cols + 7;  // chunks of 1024, 1024 and 452 columns
  const std::vector<float> gu = gate_up(rows, ld, 21), dh = normal_values(rows * cols, 1.0f, 22);
  const std::vector<float> dg0 = normal_values(rows * ld, 0.5f, 23);
  std::vector<float> h(static_cast<size_t>(rows * cols), std::nanf(""));
  std::vector<float> dgu(gu.size(), std::nanf("")), acc = dg0;
  swiglu_fwd<float>(h.data(), gu.data(), gu.data() + cols, rows, cols, ld);
  swiglu_bwd<float>(dgu.data(), dgu.data() + cols, dh.data(), gu.data(), gu.data() + cols, rows, cols, ld, false);
  swiglu_bwd<float>(acc.data(), acc.data() + cols, dh.data(), gu.data(), gu.data() + cols, rows, cols, ld, true);
  int64_t checked = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * ld + c), iu = i + static_cast<size_t>(cols);
      const double g = gu[i], u = gu[iu], d = dh[static_cast<size_t>(r * cols + c)];
      const double s = 1.0 / (1.0 + std::exp(-g));
      const double hr = g * s * u, dur = d * g * s, dgr = d * u * (s + g * s * (1.0 - s));
      const double dg_scale = std::abs(d * u) * (s + std::abs(g) * s * (1.0 - s));
      ASSERT_NEAR(h[static_cast<size_t>(r * cols + c)], hr, kEps * std::abs(hr) + kAbs) << "h row " << r << " col " << c;
      ASSERT_NEAR(dgu[iu], dur, kEps * std::abs(dur) + kAbs) << "du row " << r << " col " << c;
      ASSERT_NEAR(dgu[i], dgr, kEps * dg_scale + kAbs) << "dg row " << r << " col " << c;
      // Accumulating adds the written values (one more rounding of the sum).
      ASSERT_NEAR(acc[iu], dg0[iu] + dur, kEps * (std::abs(dg0[iu]) + std::abs(dur)) + kAbs) << "du += row " << r;
      ASSERT_NEAR(acc[i], dg0[i] + dgr, kEps * (std::abs(dg0[i]) + dg_scale) + kAbs) << "dg += row " << r;
      ++checked;
    }
  EXPECT_EQ(checked, rows * cols);
  // The padding between a row's up half and the next row's gate half is not written.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 2 * cols; c < ld; ++c) EXPECT_TRUE(std::isnan(dgu[static_cast<size_t>(r * ld + c)]));
}

// The same rows computed at every offset 0..15 floats from a 64-byte boundary, all at once and one row
// at a time, on one thread and on two: the same bits. (Evaluated straight into the rows, Eigen's scalar
// prologue before the first aligned element would use std::exp there instead of its vector exp.)
TEST(SwiGLU, AValueDoesNotDependOnWhereItsRowLiesNorOnTheThreads) {
  const int64_t rows = 6, cols = 1100, ld = 2 * cols;
  const std::vector<float> gu = gate_up(rows, ld, 31), dh = normal_values(rows * cols, 1.0f, 32);
  std::vector<float> h_ref(static_cast<size_t>(rows * cols)), dgu_ref(gu.size());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  swiglu_fwd<float>(h_ref.data(), gu.data(), gu.data() + cols, rows, cols, ld);
  swiglu_bwd<float>(dgu_ref.data(), dgu_ref.data() + cols, dh.data(), gu.data(), gu.data() + cols, rows, cols, ld,
                    false);
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (int64_t off = 0; off < 16; ++off) {
      AlignedBuffer<float> in(static_cast<size_t>(rows * ld + 16)), d(static_cast<size_t>(rows * cols + 16));
      AlignedBuffer<float> h(static_cast<size_t>(rows * cols + 16)), dgu(static_cast<size_t>(rows * ld + 16));
      std::memcpy(in.data() + off, gu.data(), sizeof(float) * gu.size());
      std::memcpy(d.data() + off, dh.data(), sizeof(float) * dh.size());
      const float* g = in.data() + off;
      float* dg = dgu.data() + off;
      if (off % 2 == 0) {  // all rows in one call
        swiglu_fwd<float>(h.data() + off, g, g + cols, rows, cols, ld);
        swiglu_bwd<float>(dg, dg + cols, d.data() + off, g, g + cols, rows, cols, ld, false);
      } else {  // one row per call
        for (int64_t r = 0; r < rows; ++r) {
          swiglu_fwd<float>(h.data() + off + r * cols, g + r * ld, g + r * ld + cols, 1, cols, ld);
          swiglu_bwd<float>(dg + r * ld, dg + r * ld + cols, d.data() + off + r * cols, g + r * ld, g + r * ld + cols,
                            1, cols, ld, false);
        }
      }
      EXPECT_EQ(std::memcmp(h.data() + off, h_ref.data(), sizeof(float) * h_ref.size()), 0)
          << "forward, offset " << off << ", " << threads << " thread(s)";
      EXPECT_EQ(std::memcmp(dg, dgu_ref.data(), sizeof(float) * dgu_ref.size()), 0)
          << "backward, offset " << off << ", " << threads << " thread(s)";
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace gf::ops
