#include "core/ops/router.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace gf::ops {

int64_t expert_capacity(const RouterShape& s, double cf) {
  if (cf <= 0.0) return s.T * s.k;
  return static_cast<int64_t>(std::ceil(cf * static_cast<double>(s.T * s.k) / static_cast<double>(s.E)));
}

void router_softmax(float* probs, float* lse, const float* logits, int64_t N, int64_t E) {
  GF_OP_SPAN("moe", "router softmax");
#pragma omp parallel for schedule(static) if (parallel_worth(N * E * kTranscendentalWork))
  for (int64_t t = 0; t < N; ++t) {
    const float* x = logits + t * E;
    float* p = probs + t * E;
    float m = x[0];
    for (int64_t e = 1; e < E; ++e) m = std::max(m, x[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = std::exp(x[e] - m);
      sum += p[e];
    }
    const float inv = 1.0f / sum;
    for (int64_t e = 0; e < E; ++e) p[e] *= inv;
    lse[t] = m + std::log(sum);
  }
}

void router_sigmoid(float* probs, float* lse, const float* logits, int64_t N, int64_t E) {
  GF_OP_SPAN("moe", "router sigmoid");
#pragma omp parallel for schedule(static) if (parallel_worth(N * E * kTranscendentalWork))
  for (int64_t t = 0; t < N; ++t) {
    for (int64_t e = 0; e < E; ++e) probs[t * E + e] = 1.0f / (1.0f + std::exp(-logits[t * E + e]));
    lse[t] = 0.0f;
  }
}

namespace {

// The k largest of p[0..E), descending, ties to the lower index.
void top_k(int32_t* out, const float* p, int64_t E, int64_t k) {
  int64_t n = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (n == k && !(p[e] > p[out[k - 1]])) continue;
    int64_t i = std::min(n, k - 1);  // the slot e takes: after every entry >= p[e]
    while (i > 0 && p[out[i - 1]] < p[e]) {
      out[i] = out[i - 1];
      --i;
    }
    out[i] = static_cast<int32_t>(e);
    n = std::min(n + 1, k);
  }
}

// How far the k chosen of p[0..E) (top_k's `out`) are from a tie: the k-th's value minus the best of the
// others (-inf ones, the experts of groups not chosen, are no candidates); +inf when there is no other.
float choice_margin(const int32_t* out, const float* p, int64_t E, int64_t k) {
  float other = -INFINITY;
  for (int64_t e = 0; e < E; ++e)
    if (std::find(out, out + k, static_cast<int32_t>(e)) == out + k) other = std::max(other, p[e]);
  return other == -INFINITY ? INFINITY : p[out[k - 1]] - other;
}

// Per sequence b: [0, B E) the assignments to each expert, [B E, 2 B E) the sum of its probabilities,
// over this rank's rows, then (seq_sum) over the whole sequence.
std::vector<double> sequence_sums(const int32_t* experts, const float* probs, const RouterShape& s, bool with_probs) {
  const int64_t E = s.E, k = s.k, T = s.T, BE = s.B * E;
  std::vector<double> v(static_cast<size_t>(2 * BE), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = b * T; t < (b + 1) * T; ++t) {
      for (int64_t j = 0; j < k; ++j) v[static_cast<size_t>(b * E + experts[t * k + j])] += 1.0;
      if (with_probs)
        for (int64_t e = 0; e < E; ++e) v[static_cast<size_t>(BE + b * E + e)] += probs[t * E + e];
    }
  s.seq_sum(v.data(), with_probs ? 2 * BE : BE);
  return v;
}

// router_route's statistics when each sequence is split over ranks (RouterShape::seq_sum): the
// balancing loss from the whole sequences' counts and probabilities, each rank adding its share
// (T / T_seq of it) so that a sum over the ranks counts each sequence once.
RouteStats route_stats_split(const int32_t* experts, int64_t* tokens_per_expert, const float* probs, const float* lse,
                             const RouterShape& s, const RouterOptions& o) {
  if (o.capacity_factor > 0.0)
    throw std::invalid_argument("router: capacity (moe_config.capacity_factor > 0) drops by position in the whole "
                                "sequence, which context parallel splits; not built: use capacity_factor <= 0 (dropless)");
  const int64_t N = s.N(), E = s.E, k = s.k, Tf = s.T_seq, BE = s.B * E;
  for (int64_t i = 0; i < N * k; ++i) ++tokens_per_expert[experts[i]];
  const std::vector<double> v = sequence_sums(experts, probs, s, true);
  RouteStats st;
  for (int64_t b = 0; b < s.B; ++b) {
    double aux = 0.0;
    for (int64_t e = 0; e < E; ++e)
      aux += v[static_cast<size_t>(b * E + e)] / static_cast<double>(Tf * k) *
             (v[static_cast<size_t>(BE + b * E + e)] / static_cast<double>(Tf));
    st.aux_sum += static_cast<double>(E) * aux * static_cast<double>(s.T) / static_cast<double>(Tf);
  }
  for (int64_t t = 0; t < N; ++t) st.z_sum += static_cast<double>(lse[t]) * static_cast<double>(lse[t]);
  return st;
}

}  // namespace

RouteStats router_route(int32_t* experts, float* weights, uint8_t* kept, int64_t* tokens_per_expert,
                        const float* probs, const float* lse, const RouterShape& s, const RouterOptions& o) {
  GF_OP_SPAN("moe", "router route");
  const int64_t N = s.N(), E = s.E, k = s.k, T = s.T;
  if (k < 1 || k > E) throw std::invalid_argument("router: top-k must be in [1, experts]");
  const int64_t G = o.groups, per = G > 0 ? E / G : E;
  if (G < 1 || E % G != 0 || o.group_topk < 1 || o.group_topk > G || o.group_score_k < 1 || o.group_score_k > per)
    throw std::invalid_argument("router: groups must divide the experts, group_topk be in [1, groups] and the group "
                                "score's top count in [1, experts per group]");
  const bool plain = o.bias == nullptr && G == 1;
  float margin = INFINITY;
#pragma omp parallel if (parallel_worth(N * E * k)) reduction(min : margin)
  {
    std::vector<float> sel(plain ? 0 : static_cast<size_t>(E)), gscore(static_cast<size_t>(G));
    std::vector<int32_t> gtop(static_cast<size_t>(std::max(o.group_topk, o.group_score_k)));
    std::vector<uint8_t> chosen(static_cast<size_t>(G));  // per thread, reused by every token
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N; ++t) {
      const float* p = probs + t * E;
      int32_t* ex = experts + t * k;
      if (plain) {
        top_k(ex, p, E, k);
        margin = std::min(margin, choice_margin(ex, p, E, k));
      } else {  // the biased scores, the best groups, and the top k of the experts in them
        for (int64_t e = 0; e < E; ++e) sel[static_cast<size_t>(e)] = p[e] + (o.bias ? o.bias[e] : 0.0f);
        if (G > 1) {
          for (int64_t g = 0; g < G; ++g) {
            top_k(gtop.data(), sel.data() + g * per, per, o.group_score_k);
            float sum = 0.0f;
            for (int64_t j = 0; j < o.group_score_k; ++j) sum += sel[static_cast<size_t>(g * per + gtop[static_cast<size_t>(j)])];
            gscore[static_cast<size_t>(g)] = sum;
          }
          top_k(gtop.data(), gscore.data(), G, o.group_topk);
          margin = std::min(margin, choice_margin(gtop.data(), gscore.data(), G, o.group_topk));
          std::fill(chosen.begin(), chosen.end(), uint8_t{0});
          for (int64_t j = 0; j < o.group_topk; ++j) chosen[static_cast<size_t>(gtop[static_cast<size_t>(j)])] = 1;
          for (int64_t e = 0; e < E; ++e)
            if (!chosen[static_cast<size_t>(e / per)]) sel[static_cast<size_t>(e)] = -INFINITY;
        }
        top_k(ex, sel.data(), E, k);
        margin = std::min(margin, choice_margin(ex, sel.data(), E, k));
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += p[ex[j]];
      for (int64_t j = 0; j < k; ++j) {
        weights[t * k + j] = (o.norm_topk ? p[ex[j]] / sum : p[ex[j]]) * o.scale;
        kept[t * k + j] = 1;
      }
    }
  }
  RouteStats st;
  std::fill(tokens_per_expert, tokens_per_expert + E, 0);
  if (s.seq_sum) {
    st = route_stats_split(experts, tokens_per_expert, probs, lse, s, o);
    st.margin = margin;
    return st;
  }
  st.margin = margin;
  const int64_t cap = expert_capacity(s, o.capacity_factor);
  std::vector<std::vector<int64_t>> lists(static_cast<size_t>(E));  // per expert: t * k + j
  std::vector<double> P(static_cast<size_t>(E));
  for (int64_t b = 0; b < s.B; ++b) {
    for (auto& l : lists) l.clear();
    std::fill(P.begin(), P.end(), 0.0);
    for (int64_t t = b * T; t < (b + 1) * T; ++t) {
      for (int64_t j = 0; j < k; ++j) lists[static_cast<size_t>(experts[t * k + j])].push_back(t * k + j);
      for (int64_t e = 0; e < E; ++e) P[static_cast<size_t>(e)] += probs[t * E + e];
    }
    double aux = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      auto& l = lists[static_cast<size_t>(e)];
      const int64_t count = static_cast<int64_t>(l.size());
      tokens_per_expert[e] += count;
      aux += static_cast<double>(count) / static_cast<double>(T * k) * (P[static_cast<size_t>(e)] / static_cast<double>(T));
      if (o.capacity_factor <= 0.0 || count <= cap) continue;
      if (o.drop_by_probs)
        std::stable_sort(l.begin(), l.end(), [&](int64_t a, int64_t c) {  // NaN last: a strict weak order
          const float pa = probs[a / k * E + e], pc = probs[c / k * E + e];
          return (std::isnan(pc) && !std::isnan(pa)) || pa > pc;
        });
      for (int64_t i = cap; i < count; ++i) {
        kept[l[static_cast<size_t>(i)]] = 0;
        weights[l[static_cast<size_t>(i)]] = 0.0f;
        ++st.dropped;
      }
    }
    st.aux_sum += static_cast<double>(E) * aux;
  }
  for (int64_t t = 0; t < N; ++t) st.z_sum += static_cast<double>(lse[t]) * static_cast<double>(lse[t]);
  return st;
}

void router_bwd(float* dlogits, const float* dweights, const float* probs, const float* lse, const int32_t* experts,
                const uint8_t* kept, const RouterShape& s, bool norm_topk, float aux_coef, float z_coef, bool sigmoid,
                float scale) {
  GF_OP_SPAN("moe", "router bwd");
  const int64_t E = s.E, k = s.k, T = s.T;
  if (sigmoid && (aux_coef != 0.0f || z_coef != 0.0f))
    throw std::invalid_argument("router: sigmoid scores with a balancing or z-loss are not built");
  // The aux loss's gradient with respect to p[t, e] is aux_coef E f_{s,e} / T for every token of s.
  std::vector<float> daux(static_cast<size_t>(s.B * E), 0.0f);
  if (s.seq_sum) {  // f from the whole sequence's counts (context parallel)
    const std::vector<double> v = sequence_sums(experts, probs, s, false);
    const int64_t Tf = s.T_seq;
    const float aux_scale = aux_coef * static_cast<float>(E) / static_cast<float>(Tf * k * Tf);
    for (int64_t i = 0; i < s.B * E; ++i) daux[static_cast<size_t>(i)] = static_cast<float>(v[static_cast<size_t>(i)]) * aux_scale;
  } else {
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = b * T; t < (b + 1) * T; ++t)
        for (int64_t j = 0; j < k; ++j) daux[static_cast<size_t>(b * E + experts[t * k + j])] += 1.0f;
    const float aux_scale = aux_coef * static_cast<float>(E) / static_cast<float>(T * k * T);
    for (float& v : daux) v *= aux_scale;
  }
#pragma omp parallel if (parallel_worth(s.N() * E * k))
  {
    std::vector<float> dp(static_cast<size_t>(E));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < s.N(); ++t) {
      const float* p = probs + t * E;
      const int32_t* ex = experts + t * k;
      const float* dw = dweights + t * k;
      const uint8_t* kp = kept + t * k;
      std::copy(daux.begin() + (t / T) * E, daux.begin() + (t / T + 1) * E, dp.begin());
      // w_j = scale p_j / S (norm_topk; S the chosen scores' sum) or scale p_j.
      if (norm_topk) {
        float sum = 0.0f;
        for (int64_t j = 0; j < k; ++j) sum += p[ex[j]];
        float g = 0.0f;  // sum over kept j of dw_j w_j / scale
        for (int64_t j = 0; j < k; ++j)
          if (kp[j]) g += dw[j] * (p[ex[j]] / sum);
        for (int64_t j = 0; j < k; ++j)
          dp[static_cast<size_t>(ex[j])] += scale * (((kp[j] ? dw[j] : 0.0f) - g) / sum);
      } else {
        for (int64_t j = 0; j < k; ++j)
          if (kp[j]) dp[static_cast<size_t>(ex[j])] += dw[j] * scale;
      }
      if (sigmoid) {  // each expert's score its own: d logit = d score p (1 - p)
        for (int64_t e = 0; e < E; ++e) dlogits[t * E + e] = dp[static_cast<size_t>(e)] * (p[e] * (1.0f - p[e]));
        continue;
      }
      float dot = 0.0f;
      for (int64_t e = 0; e < E; ++e) dot += p[e] * dp[static_cast<size_t>(e)];
      const float zg = 2.0f * z_coef * lse[t];
      for (int64_t e = 0; e < E; ++e) dlogits[t * E + e] = p[e] * (dp[static_cast<size_t>(e)] - dot + zg);
    }
  }
}

}  // namespace gf::ops
