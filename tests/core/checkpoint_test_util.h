// What tests/core/checkpoint_test.cpp and tests/core/checkpoint_errors_test.cpp share: a fresh directory per
// test, the small models and their placements, the message of what a call throws, and a random model saved as
// tensor-parallel ranks and ZeRO shards would save it.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/params/placement.h"
#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "tests/core/small_model_config.h"
#include "tests/test_util.h"

namespace gf::ckpt::checkpoint_test {

namespace fs = std::filesystem;

using test::gpt2_small;
using test::llama_small;
using test::message_of;
using test::placement_of;
using test::SmallConfig;

// A fresh directory per test, removed at the end.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("ckpt") {}
};

// Full tensors of every parameter (random), and of two optimizer moments.
struct Model {
  SmallConfig cfg;
  std::map<std::string, std::vector<float>> full;  // by saved name
};

inline Model random_model(const SmallConfig& cfg, uint64_t seed) {
  Model m{cfg, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Placement one = placement_of(cfg, 0, 1);
  for (const ParamSpec& s : one.table().specs()) {
    for (const std::string prefix : {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."}) {
      std::vector<float>& v = m.full[prefix + s.name];
      v.resize(static_cast<size_t>(s.global_numel()));
      for (float& x : v) x = normal(rng);
    }
  }
  return m;
}

// The arena cut between ZeRO shard 0 and 1 on a rank: mid-row of the first attention weight.
inline int64_t zero_cut(const Placement& p) {
  for (const TensorPlacement& t : p.tensors())
    if (t.spec->shape.size() == 2 && t.spec->name.find("attn") != std::string::npos)
      return t.offset + t.numel() / 2 + 5;
  return p.total_floats() / 2 + 5;
}

// Saves `m` as tp tensor-parallel ranks x 2 ZeRO shards would: rank (d, r) = d * tp + r writes
// the weights when d == 0 (replicated ones from r == 0 only) and both moments over its shard
// [cut_d, cut_d+1) of its arena (replicated ones from r == 0 only). Then the index and the commit.
inline std::vector<std::string> save(const std::string& root, const std::string& name, int64_t step, const Model& m, int tp,
                                     int keep_max = 0, const std::function<bool(int rank)>& writes = nullptr) {
  const std::string tmp = begin_save(root, name);
  std::vector<std::string> fragments;
  for (int d = 0; d < 2; ++d) {
    for (int r = 0; r < tp; ++r) {
      const int rank = d * tp + r;
      if (writes && !writes(rank)) continue;
      const Placement p = placement_of(m.cfg, r, tp);
      const int64_t cut = zero_cut(p);
      const int64_t begin = d == 0 ? 0 : cut, end = d == 0 ? cut : p.total_floats();
      std::vector<Piece> pieces;
      for (const TensorPlacement& t : p.tensors()) {
        if (t.replicated && r != 0) continue;
        const std::string& n = t.spec->name;
        std::vector<float> local(static_cast<size_t>(t.numel()));
        if (d == 0) {
          Placement::scatter(t, m.full.at(n).data(), local.data());
          for (Piece& piece : pieces_of(t, n, local.data())) pieces.push_back(std::move(piece));
        }
        const int64_t lo = std::clamp(begin - t.offset, int64_t{0}, t.numel());
        const int64_t hi = std::clamp(end - t.offset, int64_t{0}, t.numel());
        if (lo >= hi) continue;
        for (const std::string prefix : {"optimizer.exp_avg.", "optimizer.exp_avg_sq."}) {
          Placement::scatter(t, m.full.at(prefix + n).data(), local.data());
          for (Piece& piece : pieces_of(t, prefix + n, local.data(), lo, hi)) pieces.push_back(std::move(piece));
        }
      }
      fragments.push_back(write_shard(tmp, rank, pieces));
    }
  }
  write_index(tmp, fragments, {{"step", step}, {"layout", {{"tp", tp}, {"dp", 2}}}});
  return commit_save(root, name, keep_max);
}

}  // namespace gf::ckpt::checkpoint_test
