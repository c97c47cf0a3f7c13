// The MoE router's arithmetic, apart from any layer or layout: softmax over the experts, top-k,
// the gate weights, capacity per sequence, and the two router losses, forward and backward.
//
// Rows are the micro-batch's N = B T tokens, sequence-major. For each token t:
//   p[t]       = softmax(logits[t])                      (float32; lse[t] its log-sum-exp)
//   e_1..e_k   = the k largest p[t, e], descending, ties to the lower expert index
//   w[t, j]    = p[t, e_j] / sum_j' p[t, e_j']  (norm_topk) or p[t, e_j]
// Capacity (capacity_factor cf > 0): each expert takes at most cap = ceil(cf T k / E) assignments
// of each sequence; the assignments (t, j) of a sequence to expert e are ordered by position (t
// ascending) or by probability (p[t, e] descending, then t) and those past cap are dropped: they
// contribute nothing and their weight is 0 (the kept weights are not renormalised). Which
// assignments drop depends on the sequence alone, never on how the batch is laid out.
// Balancing loss of sequence s (Megatron's seq_aux_loss): f_e = (assignments of s to e, before
// capacity) / (T k), P_e = mean over s's tokens of p[t, e], aux_s = E sum_e f_e P_e; f is a
// constant of the backward. z-loss of token t: lse[t]^2.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>

namespace gf::ops {

struct RouterShape {
  int64_t B = 0, T = 0, E = 0, k = 1;
  int64_t N() const { return B * T; }
  // Context parallel: these T rows are part of each sequence of T_seq positions, the rest on other
  // ranks; seq_sum sums per-sequence arrays over those ranks, so the balancing loss is the whole
  // sequence's (dropless only: capacity is refused). Unset: the rows are whole sequences.
  int64_t T_seq = 0;
  std::function<void(double*, int64_t)> seq_sum;
};

struct RouterOptions {
  bool norm_topk = true;
  double capacity_factor = 0.0;  // <= 0: dropless
  bool drop_by_probs = false;    // capacity drops the lowest probabilities first (else the latest positions)
  // DeepSeek's routing (Megatron's moe_router_*): the experts are chosen by score + bias (bias: [E], the
  // aux-loss-free balancing bias, e_score_correction_bias; null: none) within the group_topk best of `groups`
  // equal groups of experts (a group's score: the sum of its group_score_k best biased scores; HF's V2
  // group_limited_greedy takes 1, V3's noaux_tc 2, Megatron's k / group_topk), the other groups' experts never
  // chosen; the weights are the unbiased scores (normalised under norm_topk) times `scale` (routed_scaling_factor).
  const float* bias = nullptr;
  int64_t groups = 1, group_topk = 1, group_score_k = 1;
  float scale = 1.0f;
};

// ceil(cf T k / E), or T k when dropless (no expert can get more from one sequence).
int64_t expert_capacity(const RouterShape& s, double capacity_factor);

// probs, lse from logits [N, E] (probs may alias logits).
void router_softmax(float* probs, float* lse, const float* logits, int64_t N, int64_t E);
// DeepSeek-V3's (Megatron's moe_router_score_function sigmoid): probs = sigmoid(logits) in float32, each expert
// scored alone (probs may alias logits); lse is written 0 (no z-loss).
void router_sigmoid(float* probs, float* lse, const float* logits, int64_t N, int64_t E);

// What routing decided for the micro-batch.
struct RouteStats {
  double aux_sum = 0;  // sum over the B sequences of aux_s
  double z_sum = 0;    // sum over the N tokens of lse^2
  int64_t dropped = 0;
  // The choice nearest a tie over the micro-batch's tokens: the smallest gap between the last chosen and the best
  // not chosen, of the experts' scores (biased, within the chosen groups) and of the group scores (+inf: there
  // was no choice, k = E). Below the scores' rounding, other summation orders may choose otherwise.
  double margin = INFINITY;
};
// experts [N, k]: e_j; weights [N, k]: w (0 where dropped); kept [N, k]: 1/0.
// tokens_per_expert [E] gets the assignments per expert before capacity (overwritten).
RouteStats router_route(int32_t* experts, float* weights, uint8_t* kept, int64_t* tokens_per_expert,
                        const float* probs, const float* lse, const RouterShape& s, const RouterOptions& o);

// dlogits [N, E] (overwritten) = the gradient of
//   sum_{t, j kept} dweights[t, j] w[t, j] + aux_coef sum_s aux_s + z_coef sum_t lse[t]^2
// with respect to the logits (dweights: the gradient of the output with respect to each kept
// weight; dropped entries are ignored).
// sigmoid: the scores are router_sigmoid's (each dlogit = dscore p (1 - p); aux and z coefficients must be 0);
// scale: RouterOptions::scale, which every weight carries.
void router_bwd(float* dlogits, const float* dweights, const float* probs, const float* lse, const int32_t* experts,
                const uint8_t* kept, const RouterShape& s, bool norm_topk, float aux_coef, float z_coef,
                bool sigmoid = false, float scale = 1.0f);

}  // namespace gf::ops
