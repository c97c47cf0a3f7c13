// The backward split into an input-gradient pass and a weight-gradient pass (what a zero-bubble
// pipeline schedule runs apart) gives bitwise the gradients of the fused backward: linear in
// float and double and at each compute dtype, LayerNorm in float and double, in either order,
// accumulating onto gradients that already hold values.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/math/mixed_precision.h"
#include "core/ops/layernorm.h"
#include "core/ops/linear.h"

namespace gf {
namespace {

template <typename T>
std::vector<T> random_vec(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(d(g));
  return v;
}

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Shapes with ragged edges for the GEMM kernels and the 64-column sums.
constexpr int64_t kN = 37, kIn = 70, kOut = 131;

template <typename T>
class SplitLinear : public ::testing::Test {};
using Floats = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SplitLinear, Floats);

TYPED_TEST(SplitLinear, InputThenWeightAndWeightThenInputEqualFused) {
  using T = TypeParam;
  const auto x = random_vec<T>(kN * kIn, 1), w = random_vec<T>(kIn * kOut, 2), dy = random_vec<T>(kN * kOut, 3);
  const auto dx0 = random_vec<T>(kN * kIn, 4), dw0 = random_vec<T>(kIn * kOut, 5), db0 = random_vec<T>(kOut, 6);
  for (const T beta : {T(0), T(1)}) {
    auto dx = dx0, dw = dw0, db = db0;
    ops::linear_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), kN, kIn, kOut, beta);
    auto dx1 = dx0, dw1 = dw0, db1 = db0;
    ops::linear_bwd_input(dx1.data(), dy.data(), w.data(), kN, kIn, kOut, beta);
    ops::linear_bwd_weight(dw1.data(), db1.data(), dy.data(), x.data(), kN, kIn, kOut);
    auto dx2 = dx0, dw2 = dw0, db2 = db0;
    ops::linear_bwd_weight(dw2.data(), db2.data(), dy.data(), x.data(), kN, kIn, kOut);
    ops::linear_bwd_input(dx2.data(), dy.data(), w.data(), kN, kIn, kOut, beta);
    EXPECT_TRUE(bitwise_equal(dx, dx1) && bitwise_equal(dw, dw1) && bitwise_equal(db, db1)) << "beta " << beta;
    EXPECT_TRUE(bitwise_equal(dx, dx2) && bitwise_equal(dw, dw2) && bitwise_equal(db, db2)) << "beta " << beta;
    EXPECT_FALSE(bitwise_equal(dw, dw0));  // the weight pass did accumulate
  }
}

// At bf16/fp16 the fused call converts dy once for both products; apart, each pass converts it
// itself (or takes the copy): the same bits either way.
TEST(SplitLinearMixed, HalvesEqualFusedAtEveryComputeDtype) {
  const auto x = random_vec<float>(kN * kIn, 7), w = random_vec<float>(kIn * kOut, 8), dy = random_vec<float>(kN * kOut, 9);
  const auto dx0 = random_vec<float>(kN * kIn, 10), dw0 = random_vec<float>(kIn * kOut, 11), db0 = random_vec<float>(kOut, 12);
  for (const ComputeDtype d : {ComputeDtype::kFloat32, ComputeDtype::kBFloat16, ComputeDtype::kFloat16}) {
    std::vector<std::byte> low(static_cast<size_t>(kIn * kOut * low_copy_element_bytes(d)));
    if (d != ComputeDtype::kFloat32) make_low_copy(d, low.data(), w.data(), kIn * kOut);
    const Weight wt = d == ComputeDtype::kFloat32 ? Weight(w.data()) : Weight(w.data(), d, low.data());
    auto dx = dx0, dw = dw0, db = db0;
    ops::linear_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), wt, kN, kIn, kOut, 0.0f);
    auto dx1 = dx0, dw1 = dw0, db1 = db0;
    ops::linear_bwd_input(dx1.data(), dy.data(), wt, kN, kIn, kOut, 0.0f);
    ops::linear_bwd_weight(dw1.data(), db1.data(), dy.data(), x.data(), d, kN, kIn, kOut);
    EXPECT_TRUE(bitwise_equal(dx, dx1)) << compute_dtype_name(d);
    EXPECT_TRUE(bitwise_equal(dw, dw1)) << compute_dtype_name(d);
    EXPECT_TRUE(bitwise_equal(db, db1)) << compute_dtype_name(d);
  }
}

template <typename T>
class SplitLayerNorm : public ::testing::Test {};
TYPED_TEST_SUITE(SplitLayerNorm, Floats);

TYPED_TEST(SplitLayerNorm, InputThenWeightAndWeightThenInputEqualFused) {
  using T = TypeParam;
  constexpr int64_t rows = 29, dim = 150;
  const auto x = random_vec<T>(rows * dim, 13), w = random_vec<T>(dim, 14), b = random_vec<T>(dim, 15);
  const auto dy = random_vec<T>(rows * dim, 16);
  std::vector<T> y(rows * dim), mean(rows), rstd(rows);
  const ops::LayerNormCache<T> cache{mean.data(), rstd.data()};
  ops::layernorm_fwd(y.data(), cache, x.data(), w.data(), b.data(), rows, dim, 1e-5f);
  const auto dx0 = random_vec<T>(rows * dim, 17), dw0 = random_vec<T>(dim, 18), db0 = random_vec<T>(dim, 19);
  auto dx = dx0, dw = dw0, db = db0;
  ops::layernorm_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), cache, rows, dim);
  auto dx1 = dx0, dw1 = dw0, db1 = db0;
  ops::layernorm_bwd_input(dx1.data(), dy.data(), x.data(), w.data(), cache, rows, dim);
  ops::layernorm_bwd_weight(dw1.data(), db1.data(), dy.data(), x.data(), cache, rows, dim);
  auto dx2 = dx0, dw2 = dw0, db2 = db0;
  ops::layernorm_bwd_weight(dw2.data(), db2.data(), dy.data(), x.data(), cache, rows, dim);
  ops::layernorm_bwd_input(dx2.data(), dy.data(), x.data(), w.data(), cache, rows, dim);
  EXPECT_TRUE(bitwise_equal(dx, dx1) && bitwise_equal(dw, dw1) && bitwise_equal(db, db1));
  EXPECT_TRUE(bitwise_equal(dx, dx2) && bitwise_equal(dw, dw2) && bitwise_equal(db, db2));
  EXPECT_FALSE(bitwise_equal(dx, dx0));
  EXPECT_FALSE(bitwise_equal(dw, dw0));
}

}  // namespace
}  // namespace gf
