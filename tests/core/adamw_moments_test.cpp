// AdamW's moment storage (optimizer.moment_dtype, core/optim/adamw.h). This file is compiled without
// FMA contraction, as core/optim/adamw.cpp is (CMakeLists.txt), so the reference update below rounds
// where it is written.
//
// float32 moments: the update is bitwise the one before moment_dtype existed (the reference is that
// loop, copied from core/optim/adamw.cpp at a3c596b).
//
// bfloat16 moments against float32 moments, the same gradients (so only the moments' storage
// differs): every parameter stays within a bound derived here, per element, from the arithmetic.
//
// Notation for one element at step t (both runs use the same float constants B1 = float(beta1),
// B2, S_t = float(lr / bc1), s_t = float(1 / sqrt(bc2)), eps, the decay factor d, and the same
// a_t = fl((1 - B1) g_t), q_t = fl(fl((1 - B2) g_t) g_t)):
//   float32 run:  m_t = fl(B1 m_{t-1} + a_t)  v_t = fl(B2 v_{t-1} + q_t)  (one FMA each)
//   bf16 run:     mu_t = fl(B1 M_{t-1} + a_t), M_t = bf(mu_t); nu_t, N_t alike. The update uses
//                 mu_t, nu_t (float), the store keeps M_t, N_t.
// Roundings: fl (float, nearest): |fl(x) - x| <= u min(|x|, |fl(x)|) + e32 with u = 2^-24,
// e32 = 2^-150 (half the smallest subnormal). bf (bfloat16, nearest even): bf16 keeps 8
// significant bits (7 stored), so |bf(x) - x| <= ub |x| + eb with ub = 2^-8, eb = 2^-134. (2^-8,
// not 2^-9: the unit roundoff of p significant bits is 2^-p.)
//
// 1. Moments. With Em_t >= |mu_t - m_t|:
//      mu_t - m_t = B1 (M_{t-1} - m_{t-1}) + (rounding of mu_t) - (rounding of m_t),
//      |M_{t-1} - m_{t-1}| <= |bf(mu_{t-1}) - mu_{t-1}| + Em_{t-1} <= ub (|m_{t-1}| + Em_{t-1}) + eb + Em_{t-1},
//    so  Em_t (1 - u) = B1 ((1 + ub) Em_{t-1} + ub |m_{t-1}| + eb) + 2u |m_t| + 2 e32,  Em_0 = 0,
//    and Ev_t the same with B2 and v. Unrolled (dropping the float terms):
//      Em_t <= ub sum_{k<t} (B1 (1 + ub))^(t-k) |m_k|, Ev_t <= ub sum_{k<t} (B2 (1 + ub))^(t-k) v_k.
//    The first is <= 9.4 ub max|m| at beta1 0.9. The second is not small: at beta2 0.999 the
//    roundings of v accumulate over ~1/(1 - beta2) steps (B2 (1 + ub) > 1); with v_k <= v_t / B2^(t-k)
//    it is up to ((1 + ub)^(t-1) - 1) v_t, 1.2 v_t at t = 200. That is what bf16 can do to v: a
//    stored v that stays while float32's decays (SecondMomentNeverShrinks... below).
// 2. Denominator. D = sqrt(v_t) s + eps (real), D' = sqrt(nu_t) s + eps, |nu_t - v_t| <= Ev:
//      D' >= Dlo = sqrt(max(0, v - Ev)) s + eps,  |D' - D| <= s Es,
//      Es = max(sqrt(v) - sqrt(max(0, v - Ev)), sqrt(v + Ev) - sqrt(v)).
//    The float update U = fl(fl(S m) / fl(fl(sqrt v) s + eps)) is S m / D within a factor
//    (1 + u)^2 / (1 - u)^2 = 1 + gamma (every term positive in the denominator), plus e32 terms.
// 3. Update. |U' - U| <= EU_t = S (Em + |m| s Es / D) / Dlo + gamma (S |m| / D + S (|m| + Em) / Dlo)
//                              + e32 (1 + u) / (1 - u)^2 (1 / D + 1 / Dlo) + 2 e32.
// 4. Parameter. p_t = fl(fl(p_{t-1} d) - U_t) in both runs:
//      Ep_t (1 - u) = d Ep_{t-1} + u (2 |p_{t-1}| d + d Ep_{t-1}) + 2 e32 + EU_t + 2u |p_t| + 2 e32,
//    so, d <= 1 and the float terms aside, |p'_T - p_T| <= sum_t EU_t <= T max_t EU_t, and
//    EU_t ~ lr sqrt(bc2) / bc1 (Em_t / sqrt(v_t) + (|m_t| / sqrt(v_t)) Ev_t / (2 v_t)): lr x steps x
//    (the moments' relative error as it reaches m / sqrt(v)).
// The test carries these recurrences in double per element beside the two runs (from the float32
// run's m, v, p, which the bound may use: it does not look at the bf16 run) and checks every element
// at every step against Ep (x (1 + 1e-9) for the double arithmetic of the bound itself).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numbers>
#include <vector>

#include "core/math/mixed_precision.h"
#include "core/optim/adamw.h"

namespace gf {
namespace {

// splitmix64: the same samples on every platform (std::normal_distribution's are not specified).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1p-53; }  // (0, 1)
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * std::numbers::pi * uniform()); }
};

// A 2-D weight (decayed) and a bias (not), with the arena's alignment gap between them.
Placement table() {
  ParamTable t;
  t.add(ParamSpec{.name = "w", .shape = {48, 40}, .weight_decay = true});
  t.add(ParamSpec{.name = "b", .shape = {40}});
  return Placement(std::move(t));
}

// The gradient sequence: element j of a tensor has magnitude 1e-6, 1e-3, 1 or 1e3 (j % 4) and a
// drift in [-1, 1] (consistent gradients give |m| / sqrt(v) near its largest) plus unit noise;
// after step 120 every gradient is 10x smaller (v then decays in float32).
struct Gradients {
  std::vector<float> drift, scale;
  Rng rng{2024};
  explicit Gradients(const Placement& t) : drift(static_cast<size_t>(t.total_floats())), scale(drift.size()) {
    Rng r{7};
    for (const TensorPlacement& p : t.tensors())
      for (int64_t j = 0; j < p.numel(); ++j) {
        const size_t i = static_cast<size_t>(p.offset + j);
        drift[i] = static_cast<float>(2.0 * r.uniform() - 1.0);
        scale[i] = std::array{1e-6f, 1e-3f, 1.0f, 1e3f}[static_cast<size_t>(j % 4)];
      }
  }
  std::vector<float> at(int64_t step) {
    std::vector<float> g(drift.size(), 0.0f);
    const float late = step > 120 ? 0.1f : 1.0f;
    for (size_t i = 0; i < g.size(); ++i)
      if (scale[i] != 0.0f) g[i] = late * scale[i] * (drift[i] + static_cast<float>(rng.normal()));
    return g;
  }
};

std::vector<float> initial_weights(const Placement& t) {
  Rng r{99};
  std::vector<float> w(static_cast<size_t>(t.total_floats()), 0.0f);
  for (const TensorPlacement& p : t.tensors())
    for (int64_t j = 0; j < p.numel(); ++j) w[static_cast<size_t>(p.offset + j)] = static_cast<float>(0.5 * r.normal());
  return w;
}

std::vector<float> moments(const AdamW& o, int k) {
  std::vector<float> out(static_cast<size_t>(o.size()));
  o.read_moments(k, 0, o.size(), out.data());
  return out;
}

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// The update before moment_dtype (core/optim/adamw.cpp at a3c596b), one thread, no weight copy.
void reference_step(const Placement& t, const AdamWConfig& cfg, float* params, const float* grads, float* m, float* v,
                    double lr, int64_t step, float gscale) {
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step));
  const float b1 = static_cast<float>(cfg.beta1), b2 = static_cast<float>(cfg.beta2);
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float eps = static_cast<float>(cfg.eps);
  for (const TensorPlacement& p : t.tensors()) {
    const float decay = p.spec->weight_decay ? static_cast<float>(std::fma(-lr, cfg.weight_decay, 1.0)) : 1.0f;
    for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
      const float g = grads[i] * gscale;
      const float pd = params[i] * decay;
      m[i] = std::fma(b1, m[i], (1.0f - b1) * g);
      v[i] = std::fma(b2, v[i], (1.0f - b2) * g * g);
      const float denom = std::fma(std::sqrt(v[i]), inv_sqrt_bc2, eps);
      const float np = pd - step_size * m[i] / denom;
      params[i] = np;
    }
  }
}

TEST(AdamWMoments, Float32MomentsAreBitwiseTheUpdateBeforeMomentDtype) {
  const Placement t = table();
  const int64_t n = t.total_floats();
  for (const AdamWConfig cfg : {AdamWConfig{0.9, 0.999, 1e-8, 0.1}, AdamWConfig{0.8, 0.95, 1e-6, 0.0}}) {
    ASSERT_EQ(cfg.moment_dtype, MomentDtype::kFloat32) << "the default";
    AdamW a(t, cfg);
    ASSERT_NE(a.m(), nullptr);
    std::vector<float> w = initial_weights(t), ref = w, m(static_cast<size_t>(n), 0.0f), v = m;
    Gradients grads(t);
    for (int64_t step = 1; step <= 200; ++step) {
      const std::vector<float> g = grads.at(step);
      const float gscale = step % 3 == 0 ? 0.75f : 1.0f;  // clipping's coefficient on some steps
      AdamWStepExtras x;
      x.grad_scale = gscale;
      a.step(w.data(), g.data(), 1e-3, step, x);
      reference_step(t, cfg, ref.data(), g.data(), m.data(), v.data(), 1e-3, step, gscale);
      for (const TensorPlacement& p : t.tensors())
        for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
          ASSERT_EQ(bits(w[i]), bits(ref[i])) << "weight " << i << " step " << step;
          ASSERT_EQ(bits(a.m()[i]), bits(m[i])) << "m " << i << " step " << step;
          ASSERT_EQ(bits(a.v()[i]), bits(v[i])) << "v " << i << " step " << step;
        }
    }
  }
}

TEST(AdamWMoments, Bf16MomentsStayWithinTheDerivedBoundOfFloat32Moments) {
  const Placement t = table();
  const double lr = 1e-3;
  const int64_t steps = 200;
  constexpr double u = 0x1p-24, ub = 0x1p-8, e32 = 0x1p-150, eb = 0x1p-134;
  const double gamma = (1 + u) * (1 + u) / ((1 - u) * (1 - u)) - 1;
  for (const double beta2 : {0.999, 0.95}) {
    AdamWConfig c32{0.9, beta2, 1e-8, 0.1};
    AdamWConfig c16 = c32;
    c16.moment_dtype = MomentDtype::kBFloat16;
    AdamW a(t, c32), b(t, c16);
    std::vector<float> pa = initial_weights(t), pb = pa;
    const size_t n = pa.size();
    std::vector<double> em(n, 0.0), ev(n, 0.0), ep(n, 0.0);
    Gradients grads(t);
    double worst_ratio = 0.0, worst_diff = 0.0, bound_at_worst = 0.0, largest_bound = 0.0;
    for (int64_t step = 1; step <= steps; ++step) {
      const std::vector<float> g = grads.at(step);
      const std::vector<float> m_prev(a.m(), a.m() + n), v_prev(a.v(), a.v() + n), p_prev = pa;
      a.step(pa.data(), g.data(), lr, step);
      b.step(pb.data(), g.data(), lr, step);
      const double bc1 = 1.0 - std::pow(c32.beta1, static_cast<double>(step));
      const double bc2 = 1.0 - std::pow(c32.beta2, static_cast<double>(step));
      const double S = static_cast<float>(lr / bc1), s = static_cast<float>(1.0 / std::sqrt(bc2));
      const double eps = static_cast<float>(c32.eps);
      const double B1 = static_cast<float>(c32.beta1), B2 = static_cast<float>(c32.beta2);
      for (const TensorPlacement& p : t.tensors()) {
        const double d = p.spec->weight_decay ? static_cast<float>(std::fma(-lr, c32.weight_decay, 1.0)) : 1.0;
        for (int64_t j = p.offset; j < p.offset + p.numel(); ++j) {
          const size_t i = static_cast<size_t>(j);
          const double m = std::fabs(a.m()[i]), v = a.v()[i];
          em[i] = (B1 * ((1 + ub) * em[i] + ub * std::fabs(m_prev[i]) + eb) + 2 * u * m + 2 * e32) / (1 - u);
          ev[i] = (B2 * ((1 + ub) * ev[i] + ub * v_prev[i] + eb) + 2 * u * v + 2 * e32) / (1 - u);
          const double sv = std::sqrt(v), lo = std::sqrt(std::max(0.0, v - ev[i]));
          const double down = sv > 0 ? std::min(ev[i], v) / (sv + lo) : 0.0;
          const double up = ev[i] > 0 ? ev[i] / (std::sqrt(v + ev[i]) + sv) : 0.0;
          const double es = std::max(down, up);
          const double D = sv * s + eps, Dlo = lo * s + eps;
          const double eu = S * (em[i] + m * s * es / D) / Dlo + gamma * (S * m / D + S * (m + em[i]) / Dlo) +
                            e32 * (1 + u) / ((1 - u) * (1 - u)) * (1 / D + 1 / Dlo) + 2 * e32;
          const double pd = std::fabs(p_prev[i]) * d;
          ep[i] = (d * ep[i] + u * (2 * pd + d * ep[i]) + 2 * e32 + eu + 2 * u * std::fabs(pa[i]) + 2 * e32) / (1 - u);
          const double diff = std::fabs(static_cast<double>(pb[i]) - pa[i]);
          ASSERT_LE(diff, ep[i] * (1 + 1e-9)) << "beta2 " << beta2 << " element " << i << " step " << step
                                               << " magnitude class " << (j - p.offset) % 4;
          if (step == steps) {
            largest_bound = std::max(largest_bound, ep[i]);
            if (diff / ep[i] > worst_ratio) worst_ratio = diff / ep[i];
            if (diff > worst_diff) {
              worst_diff = diff;
              bound_at_worst = ep[i];
            }
          }
        }
      }
    }
    // Not asserted beyond the bound: what the bound leaves (printed for the record).
    std::printf("beta2 %g, %lld steps, lr %g: largest |p_bf16 - p_fp32| %.3e (%.3f lr), its bound %.3e (%.1f lr); "
                "largest bound %.3e (%.1f lr); largest measured/bound %.3f\n",
                beta2, static_cast<long long>(steps), lr, worst_diff, worst_diff / lr, bound_at_worst,
                bound_at_worst / lr, largest_bound, largest_bound / lr, worst_ratio);
    EXPECT_GT(worst_diff, 0.0) << "the bf16 moments changed nothing: are they bf16?";
  }
}

// bf16 keeps 8 significant bits: half the spacing below a value x is at least 2^-9 |x| (and at most
// 2^-8 |x|). At beta2 0.999 a step moves v by 0.001 of its distance to g^2, so when g shrinks the
// stored v rounds back to itself every step (the config warns, runner/config/read.cpp). At beta2 0.95
// it follows g^2 = x down until 0.05 (N - x) is below half the spacing below N, <= 2^-8 N: it stops
// at most at N = x / (1 - 2^-8 / 0.05), and not below x (1 - 2^-8) (a rounding of a value >= x).
TEST(AdamWMoments, SecondMomentNeverShrinksInBf16WhenOneMinusBeta2IsBelowTwoToTheMinus9) {
  ParamTable pt;
  pt.add(ParamSpec{.name = "b", .shape = {64}});
  const Placement t(std::move(pt));
  for (const double beta2 : {0.999, 0.95}) {
    AdamWConfig c32{0.9, beta2, 1e-8, 0.0}, c16 = c32;
    c16.moment_dtype = MomentDtype::kBFloat16;
    AdamW a(t, c32), b(t, c16);
    std::vector<float> pa(static_cast<size_t>(t.total_floats()), 0.0f), pb = pa, g = pa;
    std::vector<float> v16_at_20;
    for (int64_t step = 1; step <= 300; ++step) {
      for (size_t i = 0; i < g.size(); ++i) g[i] = (step <= 20 ? 1.0f : 0.01f) * (1.0f + 0.01f * static_cast<float>(i));
      a.step(pa.data(), g.data(), 1e-3, step);
      b.step(pb.data(), g.data(), 1e-3, step);
      if (step == 20) v16_at_20 = moments(b, 1);
    }
    const std::vector<float> v32 = moments(a, 1), v16 = moments(b, 1);
    for (size_t i = 0; i < 64; ++i) {
      EXPECT_LT(v32[i], 0.8f * v16_at_20[i]) << "float32 v decays (0.999^280 = 0.76, 0.95^280 ~ 0)";
      if (beta2 == 0.999) {
        EXPECT_EQ(v16[i], v16_at_20[i]) << "bf16 v at beta2 0.999 stays where step 20 left it, element " << i;
      } else {
        // v32 is x within 0.95^280 x 200 (the start over the end) = 1e-4 of it.
        EXPECT_LE(v16[i], v32[i] * (1 + 1e-3) / (1 - 0x1p-8 / 0.05)) << "bf16 v at beta2 0.95 follows, element " << i;
        EXPECT_GE(v16[i], v32[i] * (1 - 1e-3) * (1 - 0x1p-8)) << "element " << i;
      }
    }
  }
}

TEST(AdamWMoments, MomentsCopyOutAndInAsFloat) {
  const Placement t = table();
  const int64_t n = t.total_floats();
  AdamWConfig c32, c16;
  c16.moment_dtype = MomentDtype::kBFloat16;
  AdamW a(t, c32), b(t, c16, 8, n - 3);  // b: a shard of the arena
  EXPECT_EQ(a.state_bytes(), 2 * n * 4);
  EXPECT_EQ(b.state_bytes(), 2 * (n - 11) * 2) << "2 bytes per moment element";
  EXPECT_EQ(b.m(), nullptr) << "no float32 moments to point at";
  EXPECT_EQ(b.size(), n - 11);
  Rng r{5};
  std::vector<float> x(static_cast<size_t>(n));
  for (float& f : x) f = static_cast<float>(r.normal() * 1e3);
  for (int k = 0; k < 2; ++k) {
    a.write_moments(k, 0, n, x.data());
    std::vector<float> back(static_cast<size_t>(n));
    a.read_moments(k, 0, n, back.data());
    EXPECT_EQ(back, x) << "float32: exact";
    b.write_moments(k, 5, 100, x.data());  // shard elements [5, 105)
    std::vector<float> got(100), again(100);
    b.read_moments(k, 5, 100, got.data());
    for (size_t i = 0; i < 100; ++i) EXPECT_EQ(bits(got[i]), bits(bf16_to_float(float_to_bf16(x[i])))) << i;
    b.write_moments(k, 5, 100, got.data());  // what was read out, written back: unchanged
    b.read_moments(k, 5, 100, again.data());
    EXPECT_EQ(got, again);
    std::vector<float> first(5);
    b.read_moments(k, 0, 5, first.data());
    EXPECT_EQ(first, std::vector<float>(5, 0.0f)) << "elements outside the span untouched";
  }
}

// The clip coefficient and the weight copy in the pass (AdamWStepExtras) give, under bf16 moments,
// the bits of the separate passes, as they do under float32 (tests/models/mixed_precision_test.cpp).
TEST(AdamWMoments, Bf16MomentsTakeTheClipAndWeightCopyInTheirPass) {
  const Placement t = table();
  const int64_t n = t.total_floats();
  AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  cfg.moment_dtype = MomentDtype::kBFloat16;
  AdamW a(t, cfg), b(t, cfg);
  std::vector<float> wa = initial_weights(t), wb = wa;
  std::vector<bf16> low(static_cast<size_t>(n));
  Gradients grads(t);
  for (int64_t step = 1; step <= 5; ++step) {
    const std::vector<float> g = grads.at(step);
    std::vector<float> clipped = g;
    scale_inplace(clipped.data(), n, 0.5f);
    a.step(wa.data(), clipped.data(), 1e-3, step);
    AdamWStepExtras x;
    x.grad_scale = 0.5f;
    x.low = low.data();
    x.low_dtype = ComputeDtype::kBFloat16;
    b.step(wb.data(), g.data(), 1e-3, step, x);
    ASSERT_EQ(wa, wb) << "step " << step;
    ASSERT_EQ(moments(a, 0), moments(b, 0));
    ASSERT_EQ(moments(a, 1), moments(b, 1));
    for (const TensorPlacement& p : t.tensors())
      for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) ASSERT_EQ(low[i].bits, float_to_bf16(wb[i]).bits);
  }
}

}  // namespace
}  // namespace gf
