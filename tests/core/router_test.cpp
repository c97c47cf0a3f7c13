// The MoE router's arithmetic (core/ops/router.h) on a case computed by hand: top-k with a tie,
// the gate weights with and without renormalisation, capacity per sequence dropping by position
// and by probability, the per-expert counts and the balancing loss; and its backward against
// central differences of the objective it differentiates.
#include "core/ops/router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

namespace gf::ops {
namespace {

// T 4 tokens, E 3 experts, top-2. Rows are probabilities (the router's softmax output).
const std::vector<float> kProbs = {
    0.5f, 0.3f, 0.2f,  // t0: experts 0, 1
    0.6f, 0.1f, 0.3f,  // t1: experts 0, 2
    0.4f, 0.4f, 0.2f,  // t2: a tie between 0 and 1: the lower index first
    0.7f, 0.2f, 0.1f,  // t3: experts 0, 1
};

struct Routed {
  std::vector<int32_t> experts;
  std::vector<float> weights;
  std::vector<uint8_t> kept;
  std::vector<int64_t> tokens;
  RouteStats st;
};

Routed route(int64_t B, const RouterOptions& o) {
  const RouterShape s{B, 4, 3, 2};
  std::vector<float> probs, lse(static_cast<size_t>(B * 4), 0.0f);
  for (int64_t b = 0; b < B; ++b) probs.insert(probs.end(), kProbs.begin(), kProbs.end());
  Routed r;
  r.experts.resize(static_cast<size_t>(B * 8));
  r.weights.resize(r.experts.size());
  r.kept.resize(r.experts.size());
  r.tokens.resize(3);
  r.st = router_route(r.experts.data(), r.weights.data(), r.kept.data(), r.tokens.data(), probs.data(), lse.data(), s, o);
  return r;
}

TEST(Router, TopKWithTiesAndRenormalisedWeights) {
  RouterOptions o;
  o.norm_topk = true;
  const Routed r = route(1, o);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, 0, 2, 0, 1, 0, 1}));
  const std::vector<float> w = {0.625f, 0.375f, 2.0f / 3, 1.0f / 3, 0.5f, 0.5f, 0.7f / 0.9f, 0.2f / 0.9f};
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(r.weights[i], w[i], 1e-6) << i;
  EXPECT_EQ(r.kept, std::vector<uint8_t>(8, 1));
  EXPECT_EQ(r.st.dropped, 0);
  EXPECT_EQ(r.tokens, (std::vector<int64_t>{4, 3, 1}));
  // f = (4, 3, 1) / 8, P = (0.55, 0.25, 0.2): aux = 3 (0.5 0.55 + 0.375 0.25 + 0.125 0.2) = 1.18125.
  EXPECT_NEAR(r.st.aux_sum, 1.18125, 1e-6);
  o.norm_topk = false;
  const Routed raw = route(1, o);
  EXPECT_EQ(raw.weights, (std::vector<float>{0.5f, 0.3f, 0.6f, 0.3f, 0.4f, 0.4f, 0.7f, 0.2f}));
}

// RouteStats::margin: the least gap between the last chosen and the best not chosen. kProbs top-2: t0 0.3 - 0.2,
// t1 0.3 - 0.1, t2 0.4 - 0.2 (its tie is inside the chosen pair, which no rounding can change), t3 0.2 - 0.1.
TEST(Router, MarginIsTheChoiceNearestATie) {
  const Routed r = route(1, RouterOptions{});
  EXPECT_NEAR(r.st.margin, 0.1, 1e-7);
  // Top-1 meets t2's tie at the boundary: margin 0. Top-3 of 3 experts chooses nothing: +inf.
  for (const auto& [k, want] : {std::pair<int64_t, double>{1, 0.0}, {3, INFINITY}}) {
    const RouterShape s{1, 4, 3, k};
    std::vector<int32_t> ex(static_cast<size_t>(4 * k));
    std::vector<float> w(ex.size()), lse(4, 0.0f);
    std::vector<uint8_t> kept(ex.size());
    std::vector<int64_t> tokens(3);
    const RouteStats st = router_route(ex.data(), w.data(), kept.data(), tokens.data(), kProbs.data(), lse.data(), s,
                                       RouterOptions{});
    EXPECT_EQ(st.margin, want) << "top-" << k;
  }
  // Two groups of two, the best group chosen by its best score (0.30 against 0.28): the group choice's margin 0.02;
  // top-2 then takes the whole group (no expert choice), top-1 its better expert (0.30 - 0.25).
  const std::vector<float> p = {0.30f, 0.25f, 0.28f, 0.17f};
  for (const auto& [k, want] : {std::pair<int64_t, double>{2, 0.02}, {1, 0.02}}) {
    RouterOptions o;
    o.groups = 2;
    o.group_topk = 1;
    o.group_score_k = 1;
    const RouterShape s{1, 1, 4, k};
    std::vector<int32_t> ex(static_cast<size_t>(k));
    std::vector<float> w(ex.size()), lse(1, 0.0f);
    std::vector<uint8_t> kept(ex.size());
    std::vector<int64_t> tokens(4);
    const RouteStats st = router_route(ex.data(), w.data(), kept.data(), tokens.data(), p.data(), lse.data(), s, o);
    EXPECT_NEAR(st.margin, want, 1e-7) << "top-" << k;
    EXPECT_EQ(ex[0], 0);
  }
  // A group tie (0.30 and 0.30): margin 0, whatever the experts' gaps.
  RouterOptions o;
  o.groups = 2;
  o.bias = nullptr;
  const std::vector<float> q = {0.30f, 0.10f, 0.30f, 0.05f};
  const RouterShape s{1, 1, 4, 1};
  int32_t ex = -1;
  float w = 0;
  uint8_t kept = 0;
  float lse = 0;
  std::vector<int64_t> tokens(4);
  EXPECT_EQ(router_route(&ex, &w, &kept, tokens.data(), q.data(), &lse, s, o).margin, 0.0);
  EXPECT_EQ(ex, 0);
}

TEST(Router, CapacityDropsPerSequenceByPositionOrProbability) {
  // capacity_factor 1: cap = ceil(1 * 4 * 2 / 3) = 3 per expert per sequence; expert 0 has 4.
  RouterOptions o;
  o.capacity_factor = 1.0;
  EXPECT_EQ(expert_capacity({2, 4, 3, 2}, 1.0), 3);
  const Routed pos = route(2, o);  // two copies of the sequence: each drops on its own
  std::vector<uint8_t> kept = {1, 1, 1, 1, 1, 1, 0, 1};  // t3's expert 0 (the latest position)
  kept.insert(kept.end(), kept.begin(), kept.end());
  EXPECT_EQ(pos.kept, kept);
  EXPECT_EQ(pos.st.dropped, 2);
  EXPECT_EQ(pos.weights[6], 0.0f);
  EXPECT_NEAR(pos.weights[7], 0.2f / 0.9f, 1e-6);  // the kept weight is not renormalised
  EXPECT_EQ(pos.tokens, (std::vector<int64_t>{8, 6, 2}));  // counted before capacity
  EXPECT_NEAR(pos.st.aux_sum, 2 * 1.18125, 1e-6);
  o.drop_by_probs = true;  // expert 0's probabilities 0.5, 0.6, 0.4, 0.7: t2 goes
  const Routed prob = route(1, o);
  EXPECT_EQ(prob.kept, (std::vector<uint8_t>{1, 1, 1, 1, 0, 1, 1, 1}));
  // A large factor drops nothing; a factor that leaves one slot keeps each expert's first.
  o.capacity_factor = 100.0;
  EXPECT_EQ(route(1, o).st.dropped, 0);
  o.drop_by_probs = false;
  o.capacity_factor = 0.3;  // cap = ceil(0.8) = 1
  const Routed one = route(1, o);
  EXPECT_EQ(one.kept, (std::vector<uint8_t>{1, 1, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(one.st.dropped, 5);
}

// The objective router_bwd differentiates, in double from logits.
double objective(const std::vector<double>& logits, const std::vector<float>& dw, const RouterShape& s,
                 const RouterOptions& o, double aux_coef, double z_coef) {
  const int64_t N = s.N(), E = s.E, k = s.k;
  std::vector<float> lf(logits.begin(), logits.end()), probs(static_cast<size_t>(N * E)), lse(static_cast<size_t>(N));
  router_softmax(probs.data(), lse.data(), lf.data(), N, E);
  std::vector<int32_t> ex(static_cast<size_t>(N * k));
  std::vector<float> w(ex.size());
  std::vector<uint8_t> kept(ex.size());
  std::vector<int64_t> tokens(static_cast<size_t>(E));
  router_route(ex.data(), w.data(), kept.data(), tokens.data(), probs.data(), lse.data(), s, o);
  // Recompute in double with the routing fixed.
  double J = 0;
  std::vector<double> pd(static_cast<size_t>(N * E));
  for (int64_t t = 0; t < N; ++t) {
    double m = logits[t * E], sum = 0;
    for (int64_t e = 1; e < E; ++e) m = std::max(m, logits[t * E + e]);
    for (int64_t e = 0; e < E; ++e) sum += std::exp(logits[t * E + e] - m);
    for (int64_t e = 0; e < E; ++e) pd[t * E + e] = std::exp(logits[t * E + e] - m) / sum;
    const double l = m + std::log(sum);
    J += z_coef * l * l;
    double sel = 0;
    for (int64_t j = 0; j < k; ++j) sel += pd[t * E + ex[t * k + j]];
    for (int64_t j = 0; j < k; ++j)
      if (kept[t * k + j]) J += dw[t * k + j] * (o.norm_topk ? pd[t * E + ex[t * k + j]] / sel : pd[t * E + ex[t * k + j]]);
  }
  for (int64_t b = 0; b < s.B; ++b) {
    std::vector<double> f(static_cast<size_t>(E), 0), P(static_cast<size_t>(E), 0);
    for (int64_t t = b * s.T; t < (b + 1) * s.T; ++t) {
      for (int64_t j = 0; j < k; ++j) f[ex[t * k + j]] += 1.0 / (s.T * k);
      for (int64_t e = 0; e < E; ++e) P[e] += pd[t * E + e] / s.T;
    }
    double aux = 0;
    for (int64_t e = 0; e < E; ++e) aux += f[e] * P[e];
    J += aux_coef * E * aux;
  }
  return J;
}

TEST(Router, BackwardMatchesCentralDifferences) {
  const RouterShape s{2, 5, 4, 2};
  const int64_t N = s.N(), E = s.E, k = s.k;
  std::vector<double> logits(static_cast<size_t>(N * E));
  std::vector<float> dw(static_cast<size_t>(N * k));
  uint64_t st = 12345;
  auto rnd = [&]() {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(st >> 11) / 9007199254740992.0 - 0.5;
  };
  for (double& v : logits) v = 2.0 * rnd();
  for (float& v : dw) v = static_cast<float>(rnd());
  for (const bool norm : {true, false})
    for (const double cf : {0.0, 1.0}) {
      RouterOptions o;
      o.norm_topk = norm;
      o.capacity_factor = cf;
      const float aux_coef = 0.3f, z_coef = 0.05f;
      std::vector<float> lf(logits.begin(), logits.end()), probs(static_cast<size_t>(N * E)), lse(static_cast<size_t>(N)),
          dl(static_cast<size_t>(N * E));
      router_softmax(probs.data(), lse.data(), lf.data(), N, E);
      std::vector<int32_t> ex(static_cast<size_t>(N * k));
      std::vector<float> w(ex.size());
      std::vector<uint8_t> kept(ex.size());
      std::vector<int64_t> tokens(static_cast<size_t>(E));
      const RouteStats rs = router_route(ex.data(), w.data(), kept.data(), tokens.data(), probs.data(), lse.data(), s, o);
      if (cf > 0) {
        EXPECT_GT(rs.dropped, 0) << "the case should drop";
      }
      router_bwd(dl.data(), dw.data(), probs.data(), lse.data(), ex.data(), kept.data(), s, norm, aux_coef, z_coef);
      const double h = 1e-4;
      for (int64_t i = 0; i < N * E; ++i) {
        std::vector<double> a = logits, b = logits;
        a[i] += h;
        b[i] -= h;
        const double fd = (objective(a, dw, s, o, aux_coef, z_coef) - objective(b, dw, s, o, aux_coef, z_coef)) / (2 * h);
        // The routing is fixed at the probe points (no choice changes by 1e-4 here); the float
        // softmax feeding the double objective limits agreement to ~1e-3 of the largest entry.
        EXPECT_NEAR(dl[i], fd, 2e-3) << "logit " << i << " norm " << norm << " cf " << cf;
      }
    }
}

}  // namespace
}  // namespace gf::ops
