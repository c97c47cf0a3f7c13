// The GEMM backends against a naive double-precision product, for every transpose combination,
// padded strides, alpha/beta other than 0/1, odd sizes and the degenerate M, N or K = 1 (and 0).
//
// fp32 (OpenBLAS, Eigen): ||C - ref||_F <= 1e-5 * ||S||_F, where S_ij = |alpha| sum_k |a_ik b_kj|
// + |beta c_ij| is the scale every rounding error is relative to (float's unit roundoff is 2^-24
// = 6e-8; K <= 257 terms stay well inside 1e-5 even in the worst case K * 2^-24 = 1.5e-5, and the
// rounding errors are not all of one sign).
//
// bf16 (oneDNN): two checks.
//  1. Against the double product of the float inputs, bounded by the rounding of the inputs to
//     bf16 (8 significant bits, unit roundoff u = 2^-8): bf16(a) bf16(b) = ab (1 + d), |d| <=
//     2u + u^2, so elementwise, always,
//        |C - ref|_ij <= |alpha| (2^-7 + 2^-16) sum_k |a_ik b_kj| + (fp32 accumulation, 1e-5 S_ij).
//     The errors of the terms are independent and of either sign, so on a whole matrix the error is
//     a random walk, ~ sqrt(K) * 2^-8 * |a||b| rather than K * 2^-7 * |a||b|: in Frobenius norm,
//        ||C - ref||_F <= 2^-8 * |alpha| * ||R||_F,  R_ij = sqrt(sum_k (a_ik b_kj)^2),
//     (the expected value is sqrt(2/3) 2^-8 |alpha| ||R||_F: each operand's relative rounding error
//     is roughly uniform on [-u, u], variance u^2/3), checked on matrices of >= 256 elements.
//  2. The sharp one: against the double product of the bf16-rounded inputs, within float
//     accumulation error (the fp32 tolerance above). Products of two bf16 values are exact in
//     fp32, so this is what is left if oneDNN used our round-to-nearest-even values and
//     accumulated in fp32; truncation instead of rounding, or a bf16 accumulator, is off by ~2^-9
//     relative and fails it by a factor of ~100.
#include <gtest/gtest.h>

#include <cstring>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/math/gemm.h"
#include "core/math/gemm_bf16.h"

namespace gf {

void PrintTo(GemmBackend b, std::ostream* os) { *os << gemm_backend_name(b); }

namespace {

struct Case {
  int64_t M, N, K;
  float alpha, beta;
};

// Odd sizes, M/N/K = 1, and a few big enough for the backends' blocked and threaded paths.
const Case kCases[] = {
    {7, 5, 3, 1.0f, 0.0f},      {1, 9, 13, 0.75f, 1.0f},    {11, 1, 6, -1.3f, 0.5f},  {6, 8, 1, 1.0f, -2.0f},
    {1, 1, 1, 2.5f, 0.25f},     {1, 1, 17, 1.0f, 0.0f},     {33, 47, 65, 0.5f, 1.0f}, {65, 33, 127, 1.0f, 0.0f},
    {130, 70, 257, -0.8f, 1.5f}, {96, 160, 64, 0.125f, 1.0f}, {200, 3, 150, 1.0f, 1.0f},
};

struct Problem {
  Trans ta, tb;
  Case c;
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C0;  // C0: C before the call
};

constexpr float kSentinel = 12345.0f;  // the padding of C's rows must keep it

Problem make_problem(Trans ta, Trans tb, const Case& c, uint32_t seed) {
  Problem p{ta, tb, c, 0, 0, 0, {}, {}, {}};
  const int64_t ra = ta == Trans::kYes ? c.K : c.M, ca = ta == Trans::kYes ? c.M : c.K;
  const int64_t rb = tb == Trans::kYes ? c.N : c.K, cb = tb == Trans::kYes ? c.K : c.N;
  p.lda = ca + 3;
  p.ldb = cb + 5;
  p.ldc = c.N + 2;
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  p.A.assign(static_cast<size_t>(ra * p.lda), nan);  // padding is never read: NaN would show
  p.B.assign(static_cast<size_t>(rb * p.ldb), nan);
  p.C0.assign(static_cast<size_t>(c.M * p.ldc), kSentinel);
  for (int64_t r = 0; r < ra; ++r)
    for (int64_t k = 0; k < ca; ++k) p.A[r * p.lda + k] = d(g);
  for (int64_t r = 0; r < rb; ++r)
    for (int64_t k = 0; k < cb; ++k) p.B[r * p.ldb + k] = d(g);
  // beta == 0: C must not be read (cblas), so it starts as NaN.
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) p.C0[i * p.ldc + j] = c.beta == 0.0f ? nan : d(g);
  return p;
}

double at_a(const Problem& p, const std::vector<float>& A, int64_t i, int64_t k) {
  return p.ta == Trans::kYes ? A[k * p.lda + i] : A[i * p.lda + k];
}
double at_b(const Problem& p, const std::vector<float>& B, int64_t k, int64_t j) {
  return p.tb == Trans::kYes ? B[j * p.ldb + k] : B[k * p.ldb + j];
}

struct Reference {
  std::vector<double> C;      // alpha op(A) op(B) + beta C0 in double
  std::vector<double> scale;  // |alpha| sum |a b| + |beta c|
  std::vector<double> abs_ab; // |alpha| sum |a b|
  std::vector<double> rms_ab; // |alpha| sqrt(sum (a b)^2)
};

Reference reference(const Problem& p, const std::vector<float>& A, const std::vector<float>& B) {
  const Case& c = p.c;
  Reference r;
  const size_t n = static_cast<size_t>(c.M * c.N);
  r.C.assign(n, 0.0);
  r.scale.assign(n, 0.0);
  r.abs_ab.assign(n, 0.0);
  r.rms_ab.assign(n, 0.0);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double s = 0, sa = 0, s2 = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double t = at_a(p, A, i, k) * at_b(p, B, k, j);
        s += t;
        sa += std::abs(t);
        s2 += t * t;
      }
      const size_t o = static_cast<size_t>(i * c.N + j);
      const double c0 = c.beta == 0.0f ? 0.0 : static_cast<double>(p.C0[i * p.ldc + j]);
      r.C[o] = c.alpha * s + c.beta * c0;
      r.abs_ab[o] = std::abs(c.alpha) * sa;
      r.rms_ab[o] = std::abs(c.alpha) * std::sqrt(s2);
      r.scale[o] = r.abs_ab[o] + std::abs(c.beta * c0);
    }
  return r;
}

std::string describe(const Problem& p) {
  return std::string(p.ta == Trans::kYes ? "T" : "N") + (p.tb == Trans::kYes ? "T" : "N") + " M=" +
         std::to_string(p.c.M) + " N=" + std::to_string(p.c.N) + " K=" + std::to_string(p.c.K) +
         " alpha=" + std::to_string(p.c.alpha) + " beta=" + std::to_string(p.c.beta);
}

// ||C - ref||_F / ||w||_F, and the padding of C untouched.
double norm_error(const Problem& p, const std::vector<float>& C, const std::vector<double>& ref,
                  const std::vector<double>& w) {
  double e2 = 0, w2 = 0;
  for (int64_t i = 0; i < p.c.M; ++i) {
    for (int64_t j = 0; j < p.c.N; ++j) {
      const size_t o = static_cast<size_t>(i * p.c.N + j);
      const double d = C[i * p.ldc + j] - ref[o];
      e2 += d * d;
      w2 += w[o] * w[o];
    }
    for (int64_t j = p.c.N; j < p.ldc; ++j) EXPECT_EQ(C[i * p.ldc + j], kSentinel) << describe(p) << ": row padding written";
  }
  if (!std::isfinite(e2)) return std::numeric_limits<double>::infinity();
  return w2 > 0 ? std::sqrt(e2 / w2) : std::sqrt(e2);
}

// bf16 rounding computed independently of float_to_bf16 (the bit trick under test): keep 8
// significant bits with nearbyint, which rounds to nearest even in the default rounding mode.
// Below 2^-126 the bf16 grid is that of its subnormals, 2^-133.
// Values that round past the largest float become infinite, as in IEEE rounding.
float round_to_bf16_reference(float x) {
  if (x == 0 || !std::isfinite(x)) return x;
  const int e = std::max(std::ilogb(x), -126);
  const double r = std::ldexp(std::nearbyint(std::ldexp(double(x), 7 - e)), e - 7);
  return std::abs(r) > std::numeric_limits<float>::max() ? std::copysign(std::numeric_limits<float>::infinity(), x)
                                                           : static_cast<float>(r);
}

std::vector<float> rounded_to_bf16(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = round_to_bf16_reference(x[i]);
  return y;
}

template <typename F>
void for_all_problems(F&& f) {
  uint32_t seed = 1;
  for (const Trans ta : {Trans::kNo, Trans::kYes})
    for (const Trans tb : {Trans::kNo, Trans::kYes})
      for (const Case& c : kCases) f(make_problem(ta, tb, c, seed++));
}

class GemmFp32 : public ::testing::TestWithParam<GemmBackend> {};

TEST_P(GemmFp32, MatchesDoubleReference) {
  for_all_problems([&](const Problem& p) {
    std::vector<float> C = p.C0;
    gemm(GetParam(), p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.c.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.c.beta,
         C.data(), p.ldc);
    const Reference r = reference(p, p.A, p.B);
    EXPECT_LE(norm_error(p, C, r.C, r.scale), 1e-5) << gemm_backend_name(GetParam()) << " " << describe(p);
  });
}

TEST_P(GemmFp32, DoubleOverloadMatchesReference) {
  for_all_problems([&](const Problem& p) {
    const std::vector<double> A(p.A.begin(), p.A.end()), B(p.B.begin(), p.B.end());
    std::vector<double> C(p.C0.begin(), p.C0.end());
    gemm(GetParam(), p.ta, p.tb, p.c.M, p.c.N, p.c.K, double(p.c.alpha), A.data(), p.lda, B.data(), p.ldb,
         double(p.c.beta), C.data(), p.ldc);
    const Reference r = reference(p, p.A, p.B);
    const std::vector<float> Cf(C.begin(), C.end());  // the check below needs only 1e-5 either way
    EXPECT_LE(norm_error(p, Cf, r.C, r.scale), 1e-5) << gemm_backend_name(GetParam()) << " " << describe(p);
  });
}

// K == 0: C = beta C; M == 0 or N == 0: nothing happens.
TEST_P(GemmFp32, EmptyProducts) {
  std::vector<float> C = {1.0f, 2.0f, 3.0f, 4.0f};
  const float a = 7.0f, b = 9.0f;
  gemm(GetParam(), Trans::kNo, Trans::kNo, 2, 2, 0, 1.0f, &a, 1, &b, 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
  gemm(GetParam(), Trans::kNo, Trans::kNo, 0, 2, 3, 1.0f, &a, 3, &b, 2, 0.0f, C.data(), 2);
  gemm(GetParam(), Trans::kNo, Trans::kNo, 2, 0, 3, 1.0f, &a, 3, &b, 1, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
}

std::vector<GemmBackend> built_backends() {
  std::vector<GemmBackend> v = {GemmBackend::kBlas, GemmBackend::kEigen};
  if (gemm_backend_available(GemmBackend::kOnednn)) v.push_back(GemmBackend::kOnednn);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Backends, GemmFp32, ::testing::ValuesIn(built_backends()),
                         [](const auto& info) { return std::string(gemm_backend_name(info.param)); });

// The same product twice gives the same bits (equivalence and bitwise-refactor checks rely on it),
// and inside an OpenMP loop each call runs on its own thread with the reference's accuracy.
TEST_P(GemmFp32, RepeatableAndUsableInsideAParallelLoop) {
  std::vector<Problem> ps;
  uint32_t seed = 700;
  for (int rep = 0; rep < 2; ++rep)
    for (const Trans ta : {Trans::kNo, Trans::kYes})
      for (const Trans tb : {Trans::kNo, Trans::kYes})
        ps.push_back(make_problem(ta, tb, {129, 67, 300, 0.5f, rep == 0 ? 0.0f : 1.0f}, seed++));
  std::vector<std::vector<float>> first(ps.size()), in_loop(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    const Problem& p = ps[i];
    for (auto* out : {&first[i], &in_loop[i]}) *out = p.C0;
    gemm(GetParam(), p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.c.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.c.beta,
         first[i].data(), p.ldc);
    std::vector<float> again = p.C0;
    gemm(GetParam(), p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.c.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.c.beta,
         again.data(), p.ldc);
    EXPECT_EQ(std::memcmp(first[i].data(), again.data(), again.size() * sizeof(float)), 0)
        << gemm_backend_name(GetParam()) << " " << describe(p);
  }
#pragma omp parallel for schedule(dynamic) num_threads(2)
  for (size_t i = 0; i < ps.size(); ++i) {
    const Problem& p = ps[i];
    gemm(GetParam(), p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.c.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.c.beta,
         in_loop[i].data(), p.ldc);
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    const Problem& p = ps[i];
    const Reference r = reference(p, p.A, p.B);
    EXPECT_LE(norm_error(p, in_loop[i], r.C, r.scale), 1e-5) << gemm_backend_name(GetParam()) << " " << describe(p);
  }
}

TEST(Gemm, BackendNames) {
  EXPECT_EQ(gemm_backend_from_name("openblas"), GemmBackend::kBlas);
  EXPECT_EQ(gemm_backend_from_name("eigen"), GemmBackend::kEigen);
  EXPECT_THROW(gemm_backend_from_name("mkl"), std::invalid_argument);
  for (const GemmBackend b : built_backends()) EXPECT_EQ(gemm_backend_from_name(gemm_backend_name(b)), b);
  if (!gemm_backend_available(GemmBackend::kOnednn)) {
    EXPECT_THROW(gemm_backend_from_name("onednn"), std::invalid_argument);
  }
}

// gemm_set_backend switches what the plain gemm() runs (bitwise the named backend's result).
TEST(Gemm, SetBackendSelectsTheBackend) {
  const GemmBackend before = gemm_backend();
  const Problem p = make_problem(Trans::kNo, Trans::kYes, {65, 33, 127, 1.0f, 0.0f}, 99);
  for (const GemmBackend b : built_backends()) {
    gemm_set_backend(b);
    EXPECT_EQ(gemm_backend(), b);
    std::vector<float> C1 = p.C0, C2 = p.C0;
    gemm(p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.c.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.c.beta, C1.data(), p.ldc);
    gemm(b, p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.c.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.c.beta, C2.data(),
         p.ldc);
    EXPECT_EQ(C1, C2) << gemm_backend_name(b);
  }
  gemm_set_backend(before);
}

TEST(Gemm, EigenUsesOpenMPThreads) {
  // Eigen's GEMM is threaded only when Eigen was compiled with OpenMP; gemm_set_threads sets it.
  gemm_set_threads(2);
  EXPECT_EQ(gemm_eigen_threads(), 2);
  gemm_set_threads(omp_get_max_threads());
  EXPECT_EQ(gemm_eigen_threads(), omp_get_max_threads());
}

TEST(Bf16, RoundToNearestEven) {
  const auto r = [](float x) { return bf16_to_float(float_to_bf16(x)); };
  const float u = std::ldexp(1.0f, -8);  // half an ulp of bf16 at 1 (ulp = 2^-7)
  EXPECT_EQ(r(1.0f), 1.0f);
  EXPECT_EQ(r(1.0f + u), 1.0f);                                  // tie, down to even
  EXPECT_EQ(r(1.0f + 3 * u), 1.0f + 4 * u);                      // tie, up to even
  EXPECT_EQ(r(1.0f + u + std::ldexp(1.0f, -20)), 1.0f + 2 * u);  // above the tie
  EXPECT_EQ(r(1.0f + u - std::ldexp(1.0f, -20)), 1.0f);          // below the tie
  EXPECT_EQ(r(-1.0f - 3 * u), -1.0f - 4 * u);
  EXPECT_EQ(r(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());  // overflows
  EXPECT_EQ(r(-std::numeric_limits<float>::infinity()), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(r(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(r(std::bit_cast<float>(0x7f800001u))));  // a NaN whose rounding would carry into Inf
  const float sub = std::ldexp(1.0f, -130) * 1.25f;                // subnormal: rounded, not flushed
  EXPECT_EQ(r(sub), std::ldexp(1.0f, -130) * 1.25f);
  EXPECT_EQ(r(-0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(r(-0.0f)));
}

TEST(Bf16, RoundingMatchesIndependentReference) {
  std::mt19937 g(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(bits(g));
    if (std::isnan(x)) continue;
    const float got = bf16_to_float(float_to_bf16(x)), want = round_to_bf16_reference(x);
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << std::hexfloat << x;
  }
}

// The largest errors seen, relative to their tolerances (printed: how much margin the checks have).
struct Worst {
  double sharp = 0, typical = 0;
  void print() const {
    std::cout << "[ info ] largest error / tolerance: against the bf16-rounded reference " << sharp
              << ", rounding statistic " << typical << "\n";
  }
} g_worst;

// The bf16 checks of one problem on C as computed by gemm_bf16.
void check_bf16(const Problem& p, const std::vector<float>& C, const char* what) {
  const Reference exact = reference(p, p.A, p.B);
  const Reference rounded = reference(p, rounded_to_bf16(p.A), rounded_to_bf16(p.B));
  // 2. the sharp check: bf16-rounded inputs, fp32 accumulation.
  const double sharp = norm_error(p, C, rounded.C, rounded.scale);
  g_worst.sharp = std::max(g_worst.sharp, sharp / 1e-5);
  EXPECT_LE(sharp, 1e-5) << what << " " << describe(p);
  // 1. the rounding bound, elementwise worst case and Frobenius typical case.
  const double worst = std::ldexp(1.0, -7) + std::ldexp(1.0, -16);
  for (int64_t i = 0; i < p.c.M; ++i)
    for (int64_t j = 0; j < p.c.N; ++j) {
      const size_t o = static_cast<size_t>(i * p.c.N + j);
      EXPECT_LE(std::abs(C[i * p.ldc + j] - exact.C[o]), worst * exact.abs_ab[o] + 1e-5 * exact.scale[o])
          << what << " " << describe(p) << " at (" << i << ", " << j << ")";
    }
  if (p.c.M * p.c.N >= 256) {
    const double typical = norm_error(p, C, exact.C, exact.rms_ab);
    g_worst.typical = std::max(g_worst.typical, typical / std::ldexp(1.0, -8));
    EXPECT_LE(typical, std::ldexp(1.0, -8)) << what << " " << describe(p);
  }
}

TEST(Bf16, MatchesReferenceOnRoundedInputs) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "built without oneDNN";
  std::cout << "[ info ] " << gemm_bf16_backend_info() << "\n";
  for_all_problems([&](const Problem& p) {
    std::vector<float> C = p.C0;
    gemm_bf16(p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.c.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.c.beta,
              C.data(), p.ldc);
    check_bf16(p, C, "gemm_bf16(float)");
    // The cached primitive, called again on the same shape, gives the same answer.
    std::vector<float> C2 = p.C0;
    gemm_bf16(p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.c.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.c.beta,
              C2.data(), p.ldc);
    for (int64_t i = 0; i < p.c.M; ++i)
      for (int64_t j = 0; j < p.c.N; ++j) ASSERT_EQ(C[i * p.ldc + j], C2[i * p.ldc + j]) << describe(p);
  });
  g_worst.print();
}

// Also without oneDNN: bf16 -> float is exact, so the fp32 fallback computes the same thing.
TEST(Bf16, Bf16InputsWithStrides) {
  for_all_problems([&](const Problem& p) {
    std::vector<bf16> A(p.A.size()), B(p.B.size());
    for (size_t i = 0; i < A.size(); ++i) A[i] = float_to_bf16(p.A[i]);
    for (size_t i = 0; i < B.size(); ++i) B[i] = float_to_bf16(p.B[i]);
    std::vector<float> C = p.C0;
    gemm_bf16(p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.c.alpha, A.data(), p.lda, B.data(), p.ldb, p.c.beta, C.data(),
              p.ldc);
    check_bf16(p, C, "gemm_bf16(bf16)");
  });
  g_worst.print();
}

// As attention calls it: from inside an OpenMP loop, each thread with its own products.
// The bias in oneDNN's accumulator gives the bits of C = bias followed by the product with beta 1,
// for dense C (the fused bias) and strided C (bias broadcast, then the product added).
TEST(Bf16, BiasInTheAccumulatorEqualsBroadcastThenAccumulate) {
  const int64_t M = 33, N = 70, K = 45;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<bf16> A(M * K), B(K * N);
  for (auto& v : A) v = float_to_bf16(nd(rng));
  for (auto& v : B) v = float_to_bf16(nd(rng));
  std::vector<float> bias(N);
  for (auto& v : bias) v = 10.0f * nd(rng);
  for (const int64_t ldc : {N, N + 5}) {
    std::vector<float> C(M * ldc, 123.0f), ref(M * ldc, 123.0f);
    for (int64_t r = 0; r < M; ++r) std::copy(bias.begin(), bias.end(), ref.begin() + r * ldc);
    gemm_bf16(Trans::kNo, Trans::kNo, M, N, K, 1.0f, A.data(), K, B.data(), N, 1.0f, ref.data(), ldc);
    gemm_bf16_bias(Trans::kNo, Trans::kNo, M, N, K, 1.0f, A.data(), K, B.data(), N, bias.data(), C.data(), ldc);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) ASSERT_EQ(C[r * ldc + c], ref[r * ldc + c]) << "ldc " << ldc << " at " << r << "," << c;
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = N; c < ldc; ++c) ASSERT_EQ(C[r * ldc + c], 123.0f);  // past the row: untouched
  }
  // K == 0: C = bias.
  std::vector<float> C(2 * N, 5.0f);
  gemm_bf16_bias(Trans::kNo, Trans::kNo, 2, N, 0, 1.0f, A.data(), 1, B.data(), N, bias.data(), C.data(), N);
  for (int64_t c = 0; c < N; ++c) EXPECT_EQ(C[N + c], bias[c]);
}

TEST(Bf16, InsideAnOpenMPParallelLoop) {
  if (!gemm_bf16_available()) GTEST_SKIP() << "built without oneDNN";
  std::vector<Problem> ps;
  uint32_t seed = 500;
  for (int rep = 0; rep < 3; ++rep)
    for (const Trans ta : {Trans::kNo, Trans::kYes})
      for (const Trans tb : {Trans::kNo, Trans::kYes}) ps.push_back(make_problem(ta, tb, {64, 48, 96, 0.125f, 1.0f}, seed++));
  std::vector<std::vector<float>> out(ps.size());
  std::vector<std::string> impl(ps.size());
#pragma omp parallel for schedule(dynamic) num_threads(2)
  for (size_t i = 0; i < ps.size(); ++i) {
    const Problem& p = ps[i];
    out[i] = p.C0;
    gemm_bf16(p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.c.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.c.beta,
              out[i].data(), p.ldc);
    impl[i] = gemm_bf16_impl(p.ta, p.tb, p.c.M, p.c.N, p.c.K, p.lda, p.ldb, p.ldc, p.c.alpha, p.c.beta);
  }
  std::cout << "[ info ] in the loop: " << impl[0] << "\n";
  for (size_t i = 0; i < ps.size(); ++i) check_bf16(ps[i], out[i], "gemm_bf16 in a parallel loop");
  g_worst.print();
}

TEST(Bf16, EmptyProducts) {
  std::vector<float> C = {1.0f, 2.0f, 3.0f, 4.0f};
  const float a = 7.0f, b = 9.0f;
  gemm_bf16(Trans::kNo, Trans::kNo, 2, 2, 0, 1.0f, &a, 1, &b, 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}));
  gemm_bf16(Trans::kNo, Trans::kNo, 2, 2, 0, 1.0f, &a, 1, &b, 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}));
}

TEST(Bf16, ReportsTheImplementation) {
  const std::string impl = gemm_bf16_impl(Trans::kNo, Trans::kNo, 64, 64, 64, 64, 64, 64, 1.0f, 0.0f);
  std::cout << "[ info ] " << gemm_bf16_backend_info() << "; 64x64x64 NN: " << impl << "\n";
  EXPECT_FALSE(impl.empty());
}

}  // namespace
}  // namespace gf
