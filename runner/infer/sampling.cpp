#include "runner/infer/sampling.h"

#include <algorithm>
#include <functional>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "core/math/rng.h"

namespace gf {
namespace {

// The k-th largest of the logits counted with repeats (1 <= k < size): a min-heap of the k largest so
// far, one pass (a 50257-word row with top_k 5: a few dozen pushes, the rest one comparison each;
// std::nth_element over an index order, as before, took most of a tiny model's decode step).
float kth_largest(std::span<const float> logits, int64_t k) {
  std::vector<float> heap(logits.begin(), logits.begin() + k);
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  bool nan = std::any_of(heap.begin(), heap.end(), [](float x) { return std::isnan(x); });
  for (size_t i = static_cast<size_t>(k); i < logits.size(); ++i) {
    const float x = logits[i];
    nan = nan || std::isnan(x);
    if (x > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      heap.back() = x;
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  }
  if (nan) throw std::domain_error("sampling: a logit is NaN (the model's output is not finite)");
  return heap.front();
}

}  // namespace

double log_sum_exp(std::span<const float> row) {
  const float mx = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (const float x : row) sum += std::exp(static_cast<double>(x) - mx);
  return static_cast<double>(mx) + std::log(sum);
}

int32_t draw_candidates(std::span<const int32_t> order, std::span<const float> logits, const SamplingOptions& o,
                        uint64_t stream, uint64_t index) {
  int64_t keep = static_cast<int64_t>(order.size());
  const double mx = logits[order[0]];
  std::vector<double> prob(static_cast<size_t>(keep));
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(static_cast<double>(logits[order[i]]) - mx);
  if (o.top_p < 1.0) {
    // Keep the most probable while the probability before them is below top_p (HF removes a token
    // when the cumulative probability of the less probable side, itself included, is <= 1 - top_p).
    double cum = 0.0;
    int64_t n = 0;
    while (n < keep && (n == 0 || cum < o.top_p * sum)) cum += prob[n++];
    keep = n;
    sum = cum;
  }
  double u = counter_uniform(o.seed, 0x9e5ull ^ stream, index) * sum;
  for (int64_t i = 0; i < keep; ++i) {
    u -= prob[i];
    if (u <= 0.0) return order[i];
  }
  return order[keep - 1];
}

int32_t next_token(std::span<float> logits, std::span<const int32_t> history, const SamplingOptions& o,
                   uint64_t stream, uint64_t index) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (o.repetition_penalty != 1.0) {
    const float p = static_cast<float>(o.repetition_penalty);
    std::vector<int32_t> seen(history.begin(), history.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (const int32_t t : seen)
      if (t >= 0 && t < V) logits[t] = logits[t] < 0 ? logits[t] * p : logits[t] / p;
  }
  if (!o.do_sample) return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const float inv_t = static_cast<float>(1.0 / o.temperature);
  for (float& x : logits) x *= inv_t;
  // Candidates by descending logit (index order among equals), cut by top_k with its ties, then by top_p.
  const auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::vector<int32_t> order;
  if (o.top_k > 0 && o.top_k < V) {
    // The candidates are the tokens whose logit is at least the k-th largest (counted with repeats).
    const float kth = kth_largest(logits, o.top_k);
    for (int64_t i = 0; i < V; ++i)
      if (logits[i] >= kth) order.push_back(static_cast<int32_t>(i));
  } else {
    order.resize(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
  }
  std::sort(order.begin(), order.end(), before);
  return draw_candidates(order, logits, o, stream, index);
}

}  // namespace gf
