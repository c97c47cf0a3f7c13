// The next-token choice (runner/infer/sampling.h) on logits whose outcome is worked out by hand, and
// model_config's decoding keys as MindFormers' own run_gpt2.yaml writes them.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runner/config/config.h"
#include "runner/infer/sampling.h"

namespace gf {
namespace {

int32_t pick(std::vector<float> logits, const SamplingOptions& o, std::vector<int32_t> history = {},
             uint64_t stream = 0, uint64_t index = 0) {
  return next_token(logits, history, o, stream, index);
}

TEST(Sampling, GreedyTakesTheFirstLargestLogit) {
  SamplingOptions o;
  EXPECT_EQ(pick({0.5f, 2.0f, -1.0f, 2.0f}, o), 1);  // torch.argmax: the first of equal maxima
  EXPECT_EQ(pick({-3.0f, -2.0f, -2.5f}, o), 1);
}

TEST(Sampling, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOfSeenTokens) {
  SamplingOptions o;
  o.repetition_penalty = 2.0;
  // [3, -1, 2] with 0 and 1 seen (0 twice: once is enough): [1.5, -2, 2] -> token 2.
  EXPECT_EQ(pick({3.0f, -1.0f, 2.0f}, o, {0, 0, 1}), 2);
  // Unseen tokens keep their logits: 0 stays the largest.
  EXPECT_EQ(pick({3.0f, -1.0f, 2.0f}, o, {1}), 0);
  // A negative logit grows more negative: [-1, -0.6] with 1 seen -> [-1, -1.2] -> token 0.
  EXPECT_EQ(pick({-1.0f, -0.6f}, o, {1}), 0);
}

TEST(Sampling, TopKOneIsGreedyWhateverTheDraw) {
  SamplingOptions o;
  o.do_sample = true;
  o.top_k = 1;
  for (uint64_t i = 0; i < 200; ++i) EXPECT_EQ(pick({0.1f, 0.3f, 0.2f, 0.25f}, o, {}, 7, i), 1);
}

// Draw `n` tokens (index 0..n-1 of one stream) and count them.
std::map<int32_t, int> counts(const std::vector<float>& logits, const SamplingOptions& o, int n) {
  std::map<int32_t, int> c;
  for (int i = 0; i < n; ++i) ++c[pick(logits, o, {}, 3, static_cast<uint64_t>(i))];
  return c;
}

TEST(Sampling, TopKAndTopPKeepTheSetsTheWarpersKeep) {
  SamplingOptions o;
  o.do_sample = true;
  // Probabilities 0.5, 0.3, 0.2 (logits are their logs).
  const std::vector<float> l = {std::log(0.3f), std::log(0.5f), std::log(0.2f)};
  o.top_k = 2;  // tokens 1 and 0 remain, renormalised to 0.625 / 0.375
  auto c = counts(l, o, 20000);
  EXPECT_EQ(c.count(2), 0u);
  // 20000 draws of p = 0.625: sd = sqrt(20000 * 0.625 * 0.375) = 68.5; 5 sd = 342.
  EXPECT_NEAR(c[1], 12500, 342);
  o.top_k = 0;
  o.top_p = 0.6;  // HF: sorted ascending cumulative 0.2, 0.5, 1.0; removed where <= 0.4: only token 2
  c = counts(l, o, 20000);
  EXPECT_EQ(c.count(2), 0u);
  EXPECT_NEAR(c[1], 12500, 342);
  o.top_p = 0.5;  // removed where cumulative <= 0.5: tokens 2 and 0; token 1 alone
  c = counts(l, o, 2000);
  EXPECT_EQ(c[1], 2000);
  o.top_p = 1.0;  // all three, in proportion: token 2 at 0.2 (sd = sqrt(20000 * 0.2 * 0.8) = 56.6; 5 sd = 283)
  c = counts(l, o, 20000);
  EXPECT_NEAR(c[2], 4000, 283);
}

TEST(Sampling, TemperatureSharpensAndTheDrawIsAFunctionOfSeedStreamAndIndex) {
  SamplingOptions o;
  o.do_sample = true;
  const std::vector<float> l = {0.0f, std::log(3.0f)};  // p(1) = 0.75 at temperature 1
  o.temperature = 0.5;  // logits doubled: p(1) = 9 / 10 (sd over 20000: 42.4; 5 sd = 212)
  EXPECT_NEAR(counts(l, o, 20000)[1], 18000, 212);
  o.temperature = 1.0;
  std::vector<int32_t> a, b, other_seed, other_stream;
  for (uint64_t i = 0; i < 64; ++i) {
    a.push_back(pick(l, o, {}, 5, i));
    b.push_back(pick(l, o, {}, 5, i));
    other_stream.push_back(pick(l, o, {}, 6, i));
  }
  o.seed = 1;
  for (uint64_t i = 0; i < 64; ++i) other_seed.push_back(pick(l, o, {}, 5, i));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other_seed);   // 64 draws at p = 0.75 agreeing by chance: far below 1e-6
  EXPECT_NE(a, other_stream);
}

// The candidate selection as it was before kth_largest (std::nth_element over an index order, then a
// partition), kept here as the reference: the one-pass selection must draw the same token (both then
// draw with draw_candidates).
int32_t next_token_nth_element(std::vector<float> logits, const SamplingOptions& o, uint64_t stream, uint64_t index) {
  const int64_t V = static_cast<int64_t>(logits.size());
  const float inv_t = static_cast<float>(1.0 / o.temperature);
  for (float& x : logits) x *= inv_t;
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = V;
  if (o.top_k > 0 && o.top_k < V) {
    std::nth_element(order.begin(), order.begin() + (o.top_k - 1), order.end(), before);
    const float kth = logits[order[static_cast<size_t>(o.top_k - 1)]];
    keep = std::partition(order.begin(), order.end(), [&](int32_t a) { return logits[a] >= kth; }) - order.begin();
  }
  std::sort(order.begin(), order.begin() + keep, before);
  order.resize(static_cast<size_t>(keep));
  return draw_candidates(order, logits, o, stream, index);
}

TEST(Sampling, OnePassTopKDrawsWhatNthElementDrew) {
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  int64_t checked = 0, tied_cut = 0;
  for (const int64_t V : {2, 3, 7, 100, 1000, 50257}) {
    for (const bool coarse : {false, true}) {  // coarse: logits on a grid of 0.5, so the k-th has ties
      std::vector<float> l(static_cast<size_t>(V));
      for (float& x : l) x = coarse ? std::round(normal(gen) * 2.0f) / 2.0f : normal(gen);
      for (const int64_t k : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{50}, V - 1, V, V + 3}) {
        for (const double top_p : {1.0, 0.9, 0.3}) {
          SamplingOptions o;
          o.do_sample = true;
          o.top_k = k;
          o.top_p = top_p;
          o.temperature = coarse ? 0.7 : 1.0;
          for (uint64_t i = 0; i < 20; ++i) {
            const int32_t want = next_token_nth_element(l, o, 4, i);
            ASSERT_EQ(pick(l, o, {}, 4, i), want) << "V " << V << " k " << k << " top_p " << top_p << " draw " << i;
            ++checked;
          }
          if (coarse && k > 0 && k < V) {
            std::vector<float> sorted = l;
            std::sort(sorted.begin(), sorted.end(), std::greater<>());
            if (sorted[static_cast<size_t>(k)] == sorted[static_cast<size_t>(k - 1)]) ++tied_cut;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 6 * 2 * 7 * 3 * 20);
  EXPECT_GT(tied_cut, 0);  // some cuts fell inside a run of equal logits: the ties' rule was exercised
}

TEST(Sampling, ANaNLogitIsRefusedWhenSampling) {
  SamplingOptions o;
  o.do_sample = true;
  o.top_k = 2;
  EXPECT_THROW(pick({0.5f, std::nanf(""), 1.0f, 0.2f}, o), std::domain_error);
  EXPECT_THROW(pick({std::nanf(""), 0.5f, 1.0f, 0.2f}, o), std::domain_error);
}

TEST(GenerationConfig, MindFormersRunGpt2KeysAreRead) {
  const Config c = load_config(std::string(GF_SOURCE_DIR) + "/tests/data/mindformers/run_gpt2.yaml");
  EXPECT_EQ(c.generation.max_decode_length, 1024);
  EXPECT_EQ(c.generation.top_k, 5);
  EXPECT_DOUBLE_EQ(c.generation.top_p, 1.0);
  EXPECT_TRUE(c.generation.do_sample);  // the file says do_sample: True (with top_k 5)
  EXPECT_FALSE(c.generation.use_past);
  EXPECT_EQ(c.generation.eos_token_id, 50256);
  EXPECT_EQ(c.generation.tokenizer_type, "GPT2Tokenizer");
  const Config s = load_config(std::string(GF_SOURCE_DIR) + "/tests/data/mindformers/run_gpt2.yaml",
                               {"model.model_config.use_past=True", "model.model_config.top_p=0.9",
                                "model.model_config.repetition_penalty=1.2"});
  EXPECT_TRUE(s.generation.use_past);
  EXPECT_DOUBLE_EQ(s.generation.top_p, 0.9);
  EXPECT_DOUBLE_EQ(s.generation.repetition_penalty, 1.2);
}

}  // namespace
}  // namespace gf

// log_sum_exp: exact on a hand case, and stable where exp would overflow float and double alike.
TEST(Sampling, LogSumExp) {
  const std::vector<float> a = {0.0f, std::log(3.0f)};
  EXPECT_NEAR(gf::log_sum_exp(a), std::log(4.0), 1e-7);
  const std::vector<float> big = {1000.0f, 1000.0f, -1e30f};
  EXPECT_NEAR(gf::log_sum_exp(big), 1000.0 + std::log(2.0), 1e-9);
}
