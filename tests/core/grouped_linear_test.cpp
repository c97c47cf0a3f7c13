// The grouped expert products (core/ops/grouped_linear.h) against the ops they group: for every
// compute dtype, both weight layouts, with and without bias, on groups that are empty, of one row,
// uneven and longer than a tile, each pass equals ops::linear_fwd / linear_bwd_input (dx_beta 0) /
// linear_bwd_weight called once per group on that group's rows (the ops are verified elsewhere:
// ops_fd_test, ops_golden_test, gemm_test, split_backward_test).
//
// The bound. The grouped call runs each product on a block of the group's rows (or columns), one
// thread per block; the per-group call runs it on the whole group with the GEMM's threads. Both
// compute every output element as a sum of the same K + 1 terms (K products of the operands as the
// product sees them, plus the bias or the accumulated dW), in fp32, in an order the GEMM picks for
// the shape and thread count. Each is then within the classic bound of the exact sum of those
// terms (Higham, Accuracy and Stability of Numerical Algorithms, 3.1): |fl(s) - s| <= gamma_{K+1} S,
// gamma_n = n u / (1 - n u), u = 2^-24, S = the sum of the terms' magnitudes. So, elementwise,
//      |grouped - per_group| <= 2 gamma_{K+1} S.
// For bf16 the operands are the bf16-rounded values (their products are exact in fp32, the sums
// fp32): the same model as gemm_test's sharp bf16 check, elementwise worst case instead of its
// Frobenius typical case. For fp16 (emulated: fp16-valued operands, fp32 product) forward outputs
// and input gradients are then rounded to fp16, which can put two values within the bound on either
// side of a rounding boundary: + one fp16 ulp, 2^-10 |v| (+ 2^-24, the subnormal spacing).
// Most comparisons come out bitwise equal on this machine (OpenBLAS and oneDNN sum each element in
// K order whatever the row split); the test prints how many.
//
// The grouped call's results do not depend on the thread count: bitwise equal on 1 and 2 OpenMP
// threads (with the GEMM's own thread setting following, as runner/cli/main.cpp sets both), both fp32
// backends and every dtype.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/math/gemm.h"
#include "core/math/gemm_bf16.h"
#include "core/math/mixed_precision.h"
#include "core/ops/grouped_linear.h"
#include "core/ops/linear.h"

namespace gf {
namespace {

using ops::GroupedTiles;

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The value an operand has in the product at dtype d.
double as_operand(ComputeDtype d, float v) {
  if (d == ComputeDtype::kBFloat16) return bf16_to_float(float_to_bf16(v));
  if (d == ComputeDtype::kFloat16) return round_to_fp16(v);
  return v;
}

double gamma(int64_t n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1.0 - n * u);
}

// A stack of `groups` experts' weights, each [in, out] (or [out, in]) at a stride of in * out + 16
// elements (so the stride is exercised), rows of x split by `sizes`.
struct Problem {
  ComputeDtype d;
  bool out_in;
  int64_t in, out, groups, stride, rows;
  std::vector<int64_t> offsets;
  std::vector<float> x, w, b, dy, dw0, db0;
  std::vector<std::byte> low;

  Problem(ComputeDtype dt, bool oi, int64_t in_, int64_t out_, const std::vector<int64_t>& sizes, uint32_t seed)
      : d(dt), out_in(oi), in(in_), out(out_), groups(static_cast<int64_t>(sizes.size())), stride(in_ * out_ + 16) {
    offsets.push_back(0);
    for (const int64_t s : sizes) offsets.push_back(offsets.back() + s);
    rows = offsets.back();
    x = random_vec(static_cast<size_t>(rows * in), seed);
    w = random_vec(static_cast<size_t>(groups * stride), seed + 1);
    b = random_vec(static_cast<size_t>(groups * out), seed + 2);
    dy = random_vec(static_cast<size_t>(rows * out), seed + 3);
    dw0 = random_vec(static_cast<size_t>(groups * stride), seed + 4);
    db0 = random_vec(static_cast<size_t>(groups * out), seed + 5);
    if (d != ComputeDtype::kFloat32) {
      low.resize(static_cast<size_t>(groups * stride * low_copy_element_bytes(d)));
      make_low_copy(d, low.data(), w.data(), groups * stride);
    }
  }
  Weight weight() const {
    const Weight wt = d == ComputeDtype::kFloat32 ? Weight(w.data()) : Weight(w.data(), d, low.data());
    return wt.transposed_layout(out_in);
  }
  // Expert g's weight as the per-group calls get it, built here independently of expert_weight().
  Weight weight_of(int64_t g) const {
    Weight wt = weight();
    wt.f32 = w.data() + g * stride;
    if (wt.low) wt.low = low.data() + g * stride * low_copy_element_bytes(d);
    return wt;
  }
  // W_g[k, j] in the [in, out] sense, whatever the layout.
  float w_at(int64_t g, int64_t k, int64_t j) const {
    return w[static_cast<size_t>(g * stride + (out_in ? j * in + k : k * out + j))];
  }
  std::string name() const {
    std::string s = std::string(compute_dtype_name(d)) + (out_in ? " [out,in]" : " [in,out]") + " groups";
    for (int64_t g = 0; g < groups; ++g) {
      s += ' ';
      s += std::to_string(offsets[g + 1] - offsets[g]);
    }
    return s;
  }
};

// The three passes, grouped or per group.
struct Outputs {
  std::vector<float> y, dx, dw, db;
};

Outputs per_group(const Problem& p, bool bias) {
  Outputs o{std::vector<float>(p.rows * p.out), std::vector<float>(p.rows * p.in), p.dw0, p.db0};
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t r = p.offsets[g], n = p.offsets[g + 1] - r;
    const Weight wg = p.weight_of(g);
    ops::linear_fwd(o.y.data() + r * p.out, p.x.data() + r * p.in, wg, bias ? p.b.data() + g * p.out : nullptr, n,
                    p.in, p.out);
    ops::linear_bwd_input(o.dx.data() + r * p.in, p.dy.data() + r * p.out, wg, n, p.in, p.out, 0.0f);
    ops::linear_bwd_weight(o.dw.data() + g * p.stride, bias ? o.db.data() + g * p.out : nullptr,
                           p.dy.data() + r * p.out, p.x.data() + r * p.in, wg, n, p.in, p.out);
  }
  return o;
}

Outputs grouped(const Problem& p, bool bias, GroupedTiles tiles, const void* dy_low = nullptr) {
  Outputs o{std::vector<float>(p.rows * p.out), std::vector<float>(p.rows * p.in), p.dw0, p.db0};
  const Weight wt = p.weight();
  ops::grouped_linear_fwd(o.y.data(), p.x.data(), wt, p.stride, bias ? p.b.data() : nullptr, p.offsets.data(),
                          p.groups, p.in, p.out, tiles);
  ops::grouped_linear_bwd_input(o.dx.data(), p.dy.data(), wt, p.stride, p.offsets.data(), p.groups, p.in, p.out,
                                dy_low, tiles);
  ops::grouped_linear_bwd_weight(o.dw.data(), bias ? o.db.data() : nullptr, p.dy.data(), p.x.data(), wt, p.stride,
                                 p.offsets.data(), p.groups, p.in, p.out, dy_low, tiles);
  return o;
}

Outputs loop(const Problem& p, bool bias) {
  Outputs o{std::vector<float>(p.rows * p.out), std::vector<float>(p.rows * p.in), p.dw0, p.db0};
  const Weight wt = p.weight();
  ops::grouped_linear_fwd_loop(o.y.data(), p.x.data(), wt, p.stride, bias ? p.b.data() : nullptr, p.offsets.data(),
                               p.groups, p.in, p.out);
  ops::grouped_linear_bwd_input_loop(o.dx.data(), p.dy.data(), wt, p.stride, p.offsets.data(), p.groups, p.in, p.out);
  ops::grouped_linear_bwd_weight_loop(o.dw.data(), bias ? o.db.data() : nullptr, p.dy.data(), p.x.data(), wt,
                                      p.stride, p.offsets.data(), p.groups, p.in, p.out);
  return o;
}

// How many comparisons came out bitwise equal (printed at the end of the suite).
struct Tally {
  int bitwise = 0, total = 0;
  ~Tally() {
    if (total)
      std::cout << "[ info ] grouped vs per-group: " << bitwise << " of " << total << " outputs bitwise equal\n";
  }
} g_tally;

void tally(const std::vector<float>& a, const std::vector<float>& b) {
  ++g_tally.total;
  g_tally.bitwise += bitwise_equal(a, b);
}

// S of every element of y, dx and dW (the sum of its terms' magnitudes, see the top of the file),
// and each output's number of terms K + 1.
struct Scales {
  std::vector<double> y, dx, dw;
  int64_t y_terms, dx_terms, dw_terms;
};

Scales scales_of(const Problem& p, bool bias) {
  const ComputeDtype d = p.d;
  Scales s{std::vector<double>(p.rows * p.out), std::vector<double>(p.rows * p.in),
           std::vector<double>(p.groups * p.stride), p.in + 1, p.out + 1, 1};
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t r0 = p.offsets[g], r1 = p.offsets[g + 1];
    s.dw_terms = std::max(s.dw_terms, r1 - r0 + 1);
    for (int64_t k = 0; k < p.in; ++k)
      for (int64_t j = 0; j < p.out; ++j) {
        const double wkj = std::fabs(as_operand(d, p.w_at(g, k, j)));
        double dw = 0;
        for (int64_t r = r0; r < r1; ++r) {
          const double xrk = std::fabs(as_operand(d, p.x[r * p.in + k]));
          const double dyrj = std::fabs(as_operand(d, p.dy[r * p.out + j]));
          s.y[r * p.out + j] += xrk * wkj;   // y[r, j]: |b_j| + sum_k |x[r, k] W[k, j]|
          s.dx[r * p.in + k] += dyrj * wkj;  // dx[r, k]: sum_j |dy[r, j] W[k, j]|
          dw += xrk * dyrj;                  // dW[k, j]: |dW0| + sum_r |x[r, k] dy[r, j]|
        }
        const int64_t e = g * p.stride + (p.out_in ? j * p.in + k : k * p.out + j);
        s.dw[e] = std::fabs(p.dw0[e]) + dw;
      }
    if (bias)
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t j = 0; j < p.out; ++j) s.y[r * p.out + j] += std::fabs(p.b[g * p.out + j]);
  }
  return s;
}

// Whether |a - b| <= 2 gamma_terms S at every element; rounded: the output is an fp16 activation.
void expect_within(const std::vector<float>& a, const std::vector<float>& b, const std::vector<double>& scale,
                   int64_t terms, bool rounded, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), scale.size());
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double tol = 2 * gamma(terms) * scale[i];
    if (rounded) tol += std::ldexp(std::max(std::fabs(a[i]), std::fabs(b[i])), -10) + std::ldexp(1.0, -24);
    if (!(std::fabs(double(a[i]) - b[i]) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": " << a[i] << " vs " << b[i] << " (bound " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what;
}

void expect_close(const Problem& p, bool bias, const Scales& s, const Outputs& got, const Outputs& want,
                  const std::string& what) {
  const bool fp16 = p.d == ComputeDtype::kFloat16;
  const std::string tag = what + ", " + p.name() + (bias ? ", bias" : ", no bias");
  expect_within(got.y, want.y, s.y, s.y_terms, fp16, tag + ": y");
  expect_within(got.dx, want.dx, s.dx, s.dx_terms, fp16, tag + ": dx");
  expect_within(got.dw, want.dw, s.dw, s.dw_terms, false, tag + ": dW");
  // db: the same column sums in the same order, bitwise.
  EXPECT_TRUE(bitwise_equal(got.db, want.db)) << tag << ": db";
  tally(got.y, want.y);
  tally(got.dx, want.dx);
  tally(got.dw, want.dw);
}

const ComputeDtype kDtypes[] = {ComputeDtype::kFloat32, ComputeDtype::kBFloat16, ComputeDtype::kFloat16};

// Empty groups (first, middle, last), one row, uneven, and longer than a default tile (256 rows).
const std::vector<int64_t> kSizes = {0, 1, 37, 300, 0, 5, 64, 130, 0};
// Shapes with ragged edges for the GEMM kernels and the 64-column sums; 131 outputs is several
// column tiles of 48.
constexpr int64_t kIn = 70, kOut = 131;

TEST(GroupedLinear, EqualsPerGroupLinearOps) {
  uint32_t seed = 100;
  for (const ComputeDtype d : kDtypes)
    for (const bool out_in : {false, true}) {
      const Problem p(d, out_in, kIn, kOut, kSizes, seed += 10);
      for (const bool bias : {true, false}) {
        const Outputs want = per_group(p, bias);
        const Scales sc = scales_of(p, bias);
        for (const GroupedTiles tiles : {GroupedTiles{}, GroupedTiles{32, 48}}) {
          const std::string t = "tiles " + std::to_string(tiles.rows) + "x" + std::to_string(tiles.weight_rows);
          expect_close(p, bias, sc, grouped(p, bias, tiles), want, t);
        }
        // The reference path is those per-group calls.
        const Outputs l = loop(p, bias);
        EXPECT_TRUE(bitwise_equal(l.y, want.y) && bitwise_equal(l.dx, want.dx) && bitwise_equal(l.dw, want.dw) &&
                    bitwise_equal(l.db, want.db))
            << "loop, " << p.name();
      }
    }
}

TEST(GroupedLinear, SingleGroupAndSingleRows) {
  for (const ComputeDtype d : kDtypes)
    for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{257}, std::vector<int64_t>{1, 1, 1, 1}}) {
      const Problem p(d, true, 33, 96, sizes, 7);
      expect_close(p, true, scales_of(p, true), grouped(p, true, GroupedTiles{}), per_group(p, true), "single");
    }
}

// dy's low-precision copy given by the caller or converted in the call: the same bits.
TEST(GroupedLinear, DyLowCopyGivesTheSameBits) {
  for (const ComputeDtype d : {ComputeDtype::kBFloat16, ComputeDtype::kFloat16})
    for (const bool out_in : {false, true}) {
      const Problem p(d, out_in, kIn, kOut, kSizes, 31);
      std::vector<std::byte> dy_low(static_cast<size_t>(p.rows * p.out * low_copy_element_bytes(d)));
      make_low_copy(d, dy_low.data(), p.dy.data(), p.rows * p.out);
      const Outputs a = grouped(p, true, GroupedTiles{}), b = grouped(p, true, GroupedTiles{}, dy_low.data());
      EXPECT_TRUE(bitwise_equal(a.dx, b.dx) && bitwise_equal(a.dw, b.dw) && bitwise_equal(a.db, b.db)) << p.name();
    }
}

TEST(GroupedLinear, NoRowsAndNoGroups) {
  for (const ComputeDtype d : kDtypes) {
    const Problem p(d, false, kIn, kOut, {0, 0, 0}, 41);  // R = 0
    const Outputs got = grouped(p, true, GroupedTiles{});
    EXPECT_TRUE(bitwise_equal(got.dw, p.dw0));
    const Outputs want = per_group(p, true);
    EXPECT_TRUE(bitwise_equal(got.db, want.db));  // db += 0, as the per-group calls do
    const Problem none(d, true, kIn, kOut, {}, 43);  // no groups at all
    const Outputs n = grouped(none, true, GroupedTiles{});
    EXPECT_TRUE(n.y.empty() && n.dw.empty());
  }
}

TEST(GroupedLinear, DecreasingOffsetsThrow) {
  const std::vector<float> x(64), w(64), y(64);
  const int64_t offsets[] = {0, 4, 2};
  std::vector<float> out(64);
  EXPECT_THROW(ops::grouped_linear_fwd(out.data(), x.data(), Weight(w.data()), 16, nullptr, offsets, 2, 4, 4),
               std::invalid_argument);
  EXPECT_THROW(ops::grouped_linear_fwd(out.data(), x.data(), Weight(w.data()), 16, nullptr, offsets, 1, 4, 4,
                                       GroupedTiles{0, 8}),
               std::invalid_argument);
}

// What the grouped call relies on in oneDNN 2.6 (OpenMP runtime): gemm_bf16 caches a primitive
// per shape and thread, and a primitive made outside a parallel region (planned for all threads)
// may run later on that thread inside one, where oneDNN's parallel() runs only thread 0's part;
// the brgemm matmul then gives thread 0 all the work (its thread count is the lesser of the one it
// was made with and dnnl_get_current_num_threads(), 1 inside a region). The whole product, and the
// same bits.
TEST(GroupedLinear, Bf16PrimitiveMadeOutsideARegionComputesAllOfItInside) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "built without oneDNN";
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  constexpr int64_t M = 300, N = 256, K = 96;
  const auto a = random_vec(M * K, 61), b = random_vec(K * N, 62);
  std::vector<float> outside(M * N), inside(M * N, -1.0f);
  gemm_bf16(Trans::kNo, Trans::kNo, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, outside.data(), N);
  int team = 0;
#pragma omp parallel
  {
#pragma omp single
    team = omp_get_num_threads();
    if (omp_get_thread_num() == 0)
      gemm_bf16(Trans::kNo, Trans::kNo, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, inside.data(), N);
  }
  omp_set_num_threads(saved);
  if (team < 2) GTEST_SKIP() << "one OpenMP thread: no parallel region to test";
  // oneDNN's matmul sums in K order either way: the same bits. Below AVX-512 gemm_bf16 runs the
  // fp32 GEMM instead (OpenBLAS's bits may change with its thread count): within the bound.
  const std::string impl = gemm_bf16_impl(Trans::kNo, Trans::kNo, M, N, K, K, N, N, 1.0f, 0.0f);
  if (impl.find("none on this CPU") == std::string::npos) {
    EXPECT_TRUE(bitwise_equal(outside, inside)) << impl;
  }
  const auto bf = [](float v) { return as_operand(ComputeDtype::kBFloat16, v); };
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += std::fabs(bf(a[i * K + k]) * bf(b[k * N + j]));
      ASSERT_LE(std::fabs(double(inside[i * N + j]) - outside[i * N + j]), 2 * gamma(K) * s) << i << "," << j;
    }
}

// The grouped call on 1 and on 2 OpenMP threads: bitwise the same, on both fp32 backends and at
// every dtype. The GEMM's thread setting follows OpenMP's, as runner/cli/main.cpp sets them.
TEST(GroupedLinear, ResultsDoNotDependOnTheThreadCount) {
  const int saved = omp_get_max_threads();
  const GemmBackend saved_backend = gemm_backend();
  auto on_threads = [](int n, const Problem& p, bool bias, GroupedTiles tiles) {
    omp_set_num_threads(n);
    gemm_set_threads(n);
    return grouped(p, bias, tiles);
  };
  for (const GemmBackend be : {GemmBackend::kBlas, GemmBackend::kEigen}) {
    gemm_set_backend(be);
    for (const ComputeDtype d : kDtypes) {
      if (be == GemmBackend::kEigen && d == ComputeDtype::kBFloat16) continue;  // bf16 does not use it
      for (const bool out_in : {false, true}) {
        // A hot group several tiles long, so both threads work on it.
        const Problem p(d, out_in, 200, 300, {700, 3, 0, 90, 211}, 51);
        for (const GroupedTiles tiles : {GroupedTiles{}, GroupedTiles{64, 64}}) {
          const Outputs one = on_threads(1, p, true, tiles), two = on_threads(2, p, true, tiles);
          EXPECT_TRUE(bitwise_equal(one.y, two.y)) << gemm_backend_name(be) << " " << p.name() << ": y";
          EXPECT_TRUE(bitwise_equal(one.dx, two.dx)) << gemm_backend_name(be) << " " << p.name() << ": dx";
          EXPECT_TRUE(bitwise_equal(one.dw, two.dw)) << gemm_backend_name(be) << " " << p.name() << ": dW";
          EXPECT_TRUE(bitwise_equal(one.db, two.db)) << gemm_backend_name(be) << " " << p.name() << ": db";
        }
      }
    }
  }
  gemm_set_backend(saved_backend);
  omp_set_num_threads(saved);
  gemm_set_threads(saved);
}

}  // namespace
}  // namespace gf
