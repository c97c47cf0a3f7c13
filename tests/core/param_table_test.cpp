// The parameter table: initialisation is a function of (seed, name, global element), so every
// tensor-parallel slice holds exactly its part of the single-rank tensor; one layout-free table
// placed under every layout; the init scheme's statistics; the vocabulary padding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "core/math/aligned_buffer.h"
#include "models/arch/gpt2.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

ModelConfig small() {  // vocabulary 1000, not a multiple of 128: the last rank holds padding rows
  return test::tiny_model({.vocab = 1000, .seq = 16, .hidden = 32, .layers = 2, .heads = 4});
}

// The layout of tp tensor-parallel ranks (vocab_emb_dp False: the vocabulary split over them).
ModelLayout tp_layout(int tp, bool vocab_emb_dp = true) {
  ModelLayout l;
  l.tp = tp;
  l.vocab_split = !vocab_emb_dp;
  return l;
}

// Reassembles the global tensor of every parameter from the tp slices and compares with the tp=1
// tensor. Both with the vocabulary split (vocab_emb_dp: False) and replicated (True).
TEST(ParamTable, TensorParallelSlicesReassembleTheSingleRankWeights) {
  for (bool vocab_emb_dp : {false, true}) {
  const ModelConfig cfg = small();
  const Placement one = GPT2LMHeadModel::make_placement(cfg, tp_layout(1, vocab_emb_dp), 0);
  AlignedBuffer<float> full(static_cast<size_t>(one.total_floats()));
  one.initialize(full.data(), 42);
  for (int tp : {2, 4}) {
    std::vector<Placement> ranks;
    std::vector<AlignedBuffer<float>> weights;
    for (int r = 0; r < tp; ++r) {
      ranks.push_back(GPT2LMHeadModel::make_placement(cfg, tp_layout(tp, vocab_emb_dp), r));
      weights.emplace_back(static_cast<size_t>(ranks.back().total_floats()));
      ranks.back().initialize(weights.back().data(), 42);
    }
    for (const TensorPlacement& p1 : one.tensors()) {
      const float* whole = full.data() + p1.offset;  // tp=1: the global tensor, then padding rows
      const int64_t n = p1.spec->global_numel();
      std::vector<float> rebuilt(static_cast<size_t>(n), NAN);
      for (int r = 0; r < tp; ++r) {
        const TensorPlacement& p = ranks[static_cast<size_t>(r)].at(p1.spec->name);
        const float* w = weights[static_cast<size_t>(r)].data() + p.offset;
        // The rank holds its part of the single-rank tensor, and zero in the padding.
        std::vector<float> expect(static_cast<size_t>(p.numel()));
        Placement::scatter(p, whole, expect.data());
        EXPECT_EQ(std::memcmp(w, expect.data(), expect.size() * sizeof(float)), 0) << p.spec->name << " rank " << r;
        std::vector<float> mine(static_cast<size_t>(n), NAN);
        Placement::gather(p, w, mine.data());
        for (int64_t g = 0; g < n; ++g) {
          if (std::isnan(mine[static_cast<size_t>(g)])) continue;
          if (p.replicated) {  // every rank holds the same full tensor
            EXPECT_EQ(mine[static_cast<size_t>(g)], whole[g]) << p.spec->name;
          } else {
            EXPECT_TRUE(std::isnan(rebuilt[static_cast<size_t>(g)]))
                << p.spec->name << ": element " << g << " held by two ranks";
          }
          rebuilt[static_cast<size_t>(g)] = mine[static_cast<size_t>(g)];
        }
      }
      for (int64_t g = 0; g < n; ++g)
        ASSERT_EQ(rebuilt[static_cast<size_t>(g)], whole[g]) << p1.spec->name << " tp=" << tp << " element " << g;
    }
  }
  EXPECT_EQ(GPT2LMHeadModel::make_placement(cfg, tp_layout(2, vocab_emb_dp), 1).at("wte.weight").replicated,
            vocab_emb_dp);
  }
}

// The description knows no layout: every rank of every layout places the same table.
TEST(ParamTable, OneDescriptionServesEveryLayout) {
  const ModelConfig cfg = small();
  const auto table = std::make_shared<const ParamTable>(GPT2LMHeadModel::make_param_table(cfg));
  EXPECT_EQ(table->at("h.0.attn.c_attn.weight").split, split_dim(1, 3));  // q|k|v, each split by heads
  EXPECT_EQ(table->at("h.0.attn.c_attn.bias").split, split_dim(0, 3));
  EXPECT_EQ(table->at("h.0.attn.c_proj.weight").split, split_dim(0));
  EXPECT_EQ(table->at("h.0.mlp.c_fc.weight").split, split_dim(1));
  EXPECT_EQ(table->at("h.0.mlp.c_proj.bias").split, no_split());
  EXPECT_EQ(table->at("wte.weight").split, vocab_rows());
  EXPECT_TRUE(table->at("wte.weight").tied);  // GPT-2's head reads it
  EXPECT_FALSE(table->at("wpe.weight").tied);
  for (bool vocab_split : {false, true})
    for (int tp : {1, 2, 4})
      for (int r = 0; r < tp; ++r) {
        const ModelLayout layout = tp_layout(tp, !vocab_split);
        const Placement shared(table, TransformerLM::param_layout(cfg, layout), r);
        const Placement own = GPT2LMHeadModel::make_placement(cfg, layout, r);
        ASSERT_EQ(shared.tensors().size(), table->specs().size());
        EXPECT_EQ(shared.total_floats(), own.total_floats());
        for (size_t k = 0; k < table->specs().size(); ++k) {
          EXPECT_EQ(shared.tensors()[k].spec, &table->specs()[k]);  // the table itself, not a copy
          EXPECT_EQ(shared.tensors()[k].offset, own.tensors()[k].offset);
          EXPECT_EQ(shared.tensors()[k].local_shape, own.tensors()[k].local_shape);
        }
      }
}

TEST(ParamTable, InitialisationFollowsGpt2) {
  ModelConfig cfg = small();
  cfg.hidden_size = 256;
  cfg.num_layers = 8;
  cfg.num_heads = 4;
  const Placement t = GPT2LMHeadModel::make_placement(cfg, ModelLayout{}, 0);
  AlignedBuffer<float> w(static_cast<size_t>(t.total_floats()));
  t.initialize(w.data(), 1);
  auto stats = [&](const std::string& name) {
    const TensorPlacement& p = t.at(name);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < p.numel(); ++i) { s += w[p.offset + i]; s2 += double(w[p.offset + i]) * w[p.offset + i]; }
    const double mean = s / p.numel();
    return std::pair{mean, std::sqrt(s2 / p.numel() - mean * mean)};
  };
  EXPECT_NEAR(stats("wte.weight").second, 0.02, 0.0005);
  EXPECT_NEAR(stats("h.3.attn.c_attn.weight").second, 0.02, 0.0005);
  EXPECT_NEAR(stats("h.3.mlp.c_proj.weight").second, 0.02 / std::sqrt(16.0), 0.0002);
  EXPECT_NEAR(stats("h.3.attn.c_proj.weight").second, 0.02 / std::sqrt(16.0), 0.0003);
  EXPECT_NEAR(stats("h.0.mlp.c_fc.weight").first, 0.0, 0.0005);
  EXPECT_EQ(stats("h.1.attn.c_attn.bias"), (std::pair{0.0, 0.0}));
  EXPECT_EQ(stats("ln_f.weight"), (std::pair{1.0, 0.0}));
  EXPECT_EQ(stats("h.2.ln_2.bias"), (std::pair{0.0, 0.0}));
  EXPECT_TRUE(t.table().at("wte.weight").weight_decay);
  EXPECT_FALSE(t.table().at("h.0.ln_1.weight").weight_decay);
  EXPECT_FALSE(t.table().at("h.0.mlp.c_fc.bias").weight_decay);
  // Different seeds, different weights; same seed, same weights.
  AlignedBuffer<float> w2(w.size()), w3(w.size());
  t.initialize(w2.data(), 2);
  t.initialize(w3.data(), 1);
  EXPECT_NE(w[t.at("wte.weight").offset], w2[t.at("wte.weight").offset]);
  EXPECT_EQ(std::memcmp(w.data(), w3.data(), w.size() * sizeof(float)), 0);
}

// Every initial value is the formula the checkpoints and golden runs were made with, bit for bit:
// splitmix64(splitmix64(seed ^ splitmix64(FNV-1a(name))) + index) for each of Box-Muller's two
// uniforms, written out here rather than through rng.h (its keyed form computes the key once per tensor).
TEST(ParamTable, InitialValuesAreTheCounterFormulaBitForBit) {
  auto mix = [](uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  const Placement t = GPT2LMHeadModel::make_placement(small(), ModelLayout{}, 0);
  AlignedBuffer<float> w(static_cast<size_t>(t.total_floats()));
  t.initialize(w.data(), 42);
  for (const char* name : {"wte.weight", "h.1.attn.c_proj.weight"}) {
    const ParamSpec& spec = t.table().at(name);
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : std::string(name)) { h ^= c; h *= 1099511628211ull; }
    const TensorPlacement& p = t.at(name);
    // One rank: the local index is the global one (wte's padding rows come after the vocabulary's).
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{777}, spec.global_numel() - 1}) {
      auto uniform = [&](uint64_t k) {
        return (static_cast<double>(mix(mix(42 ^ mix(h)) + k) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
      };
      const uint64_t u = static_cast<uint64_t>(i);
      const float want = static_cast<float>(spec.std * (std::sqrt(-2.0 * std::log(uniform(2 * u))) *
                                                        std::cos(6.283185307179586 * uniform(2 * u + 1))));
      EXPECT_EQ(std::memcmp(&w[p.offset + i], &want, sizeof(float)), 0) << name << " element " << i;
      EXPECT_EQ(InitialValues(spec, 42)(i), want);
    }
  }
}

TEST(ParamTable, VocabularyIsPaddedToAMultipleOf128PerRank) {
  ModelConfig cfg = small();
  cfg.vocab_size = 50257;
  EXPECT_EQ(cfg.padded_vocab(1), 50304);
  EXPECT_EQ(cfg.padded_vocab(2), 50432);  // multiple of 256: each of 2 ranks holds a multiple of 128
  const Placement t = GPT2LMHeadModel::make_placement(cfg, ModelLayout{}, 0);
  EXPECT_EQ(t.at("wte.weight").local_shape, (std::vector<int64_t>{50304, 32}));
  EXPECT_EQ(t.at("wte.weight").spec->shape, (std::vector<int64_t>{50257, 32}));
}

}  // namespace
}  // namespace gf
