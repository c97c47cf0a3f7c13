// GradientSync on the arena of a tiny GPT-2: buckets start as soon as backward passes them (the
// overlap), every layout ends with the summed gradient, ZeRO leaves each rank the sum of its
// shard, sequence parallel sums the replicated parameters' partial gradients over the tensor
// group, and the norm is the global one (replicated parameters counted once).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "models/arch/gpt2.h"
#include "parallel/grad_sync.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

ModelConfig tiny() {
  return test::tiny_model({.vocab = 101, .seq = 8, .hidden = 16, .layers = 2, .heads = 2});
}

// Every rank of the job on one axis of the grid.
ParallelContext world_as(GridAxis axis) {
  Communicator world = Communicator::world();
  const int W = world.size();
  return ParallelContext::build(std::move(world), ProcessGrid({{axis, W}}));
}

float grad_value(int rank, int64_t i) { return std::cos(0.01f * static_cast<float>(i)) * static_cast<float>(rank + 1); }

TEST(GradientSync, BucketsStartDuringBackwardAndSum) {
  ParallelContext ctx = world_as(GridAxis::kDp);
  const int W = ctx.group(GridAxis::kDp).size();
  const Placement t = GPT2LMHeadModel::make_placement(tiny(), ModelLayout{}, 0);
  GradientSync sync(t, ctx, 4, false, false);
  const int64_t n = t.total_floats();
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = grad_value(ctx.world_rank(), i);
  sync.begin_step(g.data());
  if (W > 1) {
    ASSERT_EQ(sync.buckets().size(), 4u);
    EXPECT_EQ(sync.buckets().front().end, n);
    EXPECT_EQ(sync.buckets().back().begin, 0);
    sync.grads_ready_from(n);  // nothing finished yet
    EXPECT_EQ(ctx.group(GridAxis::kDp).stats().collectives, 0);
    sync.grads_ready_from(sync.buckets()[0].begin);  // the last bucket of the arena is complete
    EXPECT_EQ(ctx.group(GridAxis::kDp).stats().collectives, 1);
    EXPECT_GT(ctx.group(GridAxis::kDp).stats().bytes_sent, 0);
    sync.grads_ready_from(sync.buckets()[2].begin);
    EXPECT_EQ(ctx.group(GridAxis::kDp).stats().collectives, 3);
  }
  sync.finish();
  const float ranks_sum = static_cast<float>(W * (W + 1) / 2);
  double expect_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(g[i], std::cos(0.01f * static_cast<float>(i)) * ranks_sum, 1e-5f * ranks_sum) << i;
    expect_sq += static_cast<double>(g[i]) * g[i];
  }
  EXPECT_NEAR(sync.global_sq_norm(g.data()), expect_sq, 1e-9 * expect_sq);
}

TEST(GradientSync, ShardedOptimizerReducesEachShard) {
  ParallelContext ctx = world_as(GridAxis::kDp);
  const int W = ctx.group(GridAxis::kDp).size();
  const Placement t = GPT2LMHeadModel::make_placement(tiny(), ModelLayout{}, 0);
  const int64_t n = t.total_floats();
  GradientSync sync(t, ctx, 4, true, false);
  EXPECT_EQ(sync.shard_begin(), shard_begin(n, W, ctx.group(GridAxis::kDp).rank()));
  EXPECT_EQ(sync.shard_end(), shard_begin(n, W, ctx.group(GridAxis::kDp).rank() + 1));
  std::vector<float> g(n), full(n);
  for (int64_t i = 0; i < n; ++i) full[i] = g[i] = grad_value(ctx.world_rank(), i);
  ctx.group(GridAxis::kDp).allreduce_sum(full.data(), n);
  sync.begin_step(g.data());
  sync.finish();
  double expect_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) expect_sq += static_cast<double>(full[i]) * full[i];
  for (int64_t i = sync.shard_begin(); i < sync.shard_end(); ++i) EXPECT_FLOAT_EQ(g[i], full[i]) << i;
  EXPECT_NEAR(sync.global_sq_norm(g.data()), expect_sq, 1e-9 * expect_sq);
  // The update of one shard reaches every rank.
  std::vector<float> w(n, 0.0f);
  for (int64_t i = sync.shard_begin(); i < sync.shard_end(); ++i) w[i] = static_cast<float>(i);
  sync.allgather_params(w.data());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(w[i], static_cast<float>(i)) << i;
}

// Tensor parallel across all ranks with sequence parallel: replicated parameters' gradients are
// partial and get summed; split ones are left alone; the norm counts replicated ones once.
TEST(GradientSync, SequenceParallelSumsReplicatedPartials) {
  ParallelContext ctx = world_as(GridAxis::kTp);
  const int W = ctx.group(GridAxis::kTp).size();
  ModelConfig cfg = tiny();
  cfg.num_heads = 4;
  cfg.hidden_size = 24;
  if (cfg.num_heads % W != 0 || cfg.hidden_size % W != 0) GTEST_SKIP() << "layout does not split the model";
  ModelLayout layout;
  layout.tp = W;
  const Placement t = GPT2LMHeadModel::make_placement(cfg, layout, ctx.index(GridAxis::kTp));
  GradientSync sync(t, ctx, 4, false, true);
  const int64_t n = t.total_floats();
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = grad_value(ctx.world_rank(), i);
  sync.begin_step(g.data());
  sync.finish();
  const float ranks_sum = static_cast<float>(W * (W + 1) / 2);
  double expect_sq = 0.0;  // split: this rank's own (summed over ranks below); replicated: once
  for (const TensorPlacement& p : t.tensors()) {
    for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
      const float base = std::cos(0.01f * static_cast<float>(i));
      if (p.replicated) {
        EXPECT_NEAR(g[i], base * ranks_sum, 1e-5f * ranks_sum) << p.spec->name;
        if (ctx.index(GridAxis::kTp) == 0) expect_sq += static_cast<double>(g[i]) * g[i];
      } else {
        EXPECT_EQ(g[i], grad_value(ctx.world_rank(), i)) << p.spec->name;
        expect_sq += static_cast<double>(g[i]) * g[i];
      }
    }
  }
  ctx.group(GridAxis::kTp).allreduce_sum(&expect_sq, 1);
  EXPECT_NEAR(sync.global_sq_norm(g.data()), expect_sq, 1e-9 * expect_sq);
}

}  // namespace
}  // namespace gf
