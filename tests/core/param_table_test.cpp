// The parameter table: initialisation is a function of (seed, name, global element), so every
// tensor-parallel slice holds exactly its part of the single-rank tensor; the init scheme's
// statistics; the vocabulary padding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/aligned_buffer.h"
#include "models/gpt2.h"

namespace gf {
namespace {

ModelConfig small() {
  ModelConfig c;
  c.vocab_size = 1000;  // not a multiple of 128: the last rank holds padding rows
  c.seq_length = 16;
  c.max_position_embeddings = 16;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  return c;
}

// Reassembles the global tensor of `name` from the tp slices and compares with the tp=1 tensor.
// Both with the vocabulary split (vocab_emb_dp: False) and replicated (True).
TEST(ParamTable, TensorParallelSlicesReassembleTheSingleRankWeights) {
  for (bool vocab_emb_dp : {false, true}) {
  ModelConfig cfg = small();
  cfg.vocab_emb_dp = vocab_emb_dp;
  const ParamTable one = GPT2LMHeadModel::make_param_table(cfg, 0, 1);
  AlignedBuffer<float> full(static_cast<size_t>(one.total_floats()));
  one.initialize(full.data(), 42);
  for (int tp : {2, 4}) {
    for (const ParamSpec& p1 : one.specs()) {
      std::vector<float> rebuilt(static_cast<size_t>(p1.global_numel()), NAN);
      for (int r = 0; r < tp; ++r) {
        const ParamTable t = GPT2LMHeadModel::make_param_table(cfg, r, tp);
        AlignedBuffer<float> w(static_cast<size_t>(t.total_floats()));
        t.initialize(w.data(), 42);
        const ParamSpec& p = t.at(p1.name);
        for (int64_t i = 0; i < p.numel(); ++i) {
          const int64_t g = t.global_index(p, i);
          if (g < 0) { EXPECT_EQ(w[p.offset + i], 0.0f) << p.name << " padding"; continue; }
          const float v = w[static_cast<size_t>(p.offset + i)];
          if (t.replicated(p)) {  // every rank holds the same full tensor
            EXPECT_EQ(v, full[static_cast<size_t>(p1.offset + g)]) << p.name;
          } else {
            EXPECT_TRUE(std::isnan(rebuilt[g])) << p.name << ": element " << g << " held by two ranks";
          }
          rebuilt[static_cast<size_t>(g)] = v;
        }
      }
      for (int64_t g = 0; g < p1.global_numel(); ++g)
        ASSERT_EQ(rebuilt[g], full[static_cast<size_t>(p1.offset + g)]) << p1.name << " tp=" << tp << " element " << g;
    }
  }
  EXPECT_EQ(GPT2LMHeadModel::make_param_table(cfg, 1, 2).replicated(GPT2LMHeadModel::make_param_table(cfg, 1, 2).at("wte.weight")),
            vocab_emb_dp);
  }
}

TEST(ParamTable, InitialisationFollowsGpt2) {
  ModelConfig cfg = small();
  cfg.hidden_size = 256;
  cfg.num_layers = 8;
  cfg.num_heads = 4;
  const ParamTable t = GPT2LMHeadModel::make_param_table(cfg, 0, 1);
  AlignedBuffer<float> w(static_cast<size_t>(t.total_floats()));
  t.initialize(w.data(), 1);
  auto stats = [&](const std::string& name) {
    const ParamSpec& p = t.at(name);
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
  EXPECT_TRUE(t.at("wte.weight").weight_decay);
  EXPECT_FALSE(t.at("h.0.ln_1.weight").weight_decay);
  EXPECT_FALSE(t.at("h.0.mlp.c_fc.bias").weight_decay);
  // Different seeds, different weights; same seed, same weights.
  AlignedBuffer<float> w2(w.size()), w3(w.size());
  t.initialize(w2.data(), 2);
  t.initialize(w3.data(), 1);
  EXPECT_NE(w[t.at("wte.weight").offset], w2[t.at("wte.weight").offset]);
  EXPECT_EQ(std::memcmp(w.data(), w3.data(), w.size() * sizeof(float)), 0);
}

TEST(ParamTable, VocabularyIsPaddedToAMultipleOf128PerRank) {
  ModelConfig cfg = small();
  cfg.vocab_size = 50257;
  EXPECT_EQ(cfg.padded_vocab(1), 50304);
  EXPECT_EQ(cfg.padded_vocab(2), 50432);  // multiple of 256: each of 2 ranks holds a multiple of 128
  const ParamTable t = GPT2LMHeadModel::make_param_table(cfg, 0, 1);
  EXPECT_EQ(t.at("wte.weight").local_shape, (std::vector<int64_t>{50304, 32}));
  EXPECT_EQ(t.at("wte.weight").shape, (std::vector<int64_t>{50257, 32}));
}

}  // namespace
}  // namespace gf
