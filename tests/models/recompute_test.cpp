// Activation recompute changes memory, never numbers: the loss and every gradient of two training
// steps are bitwise the same with full, selective and partial (first N layers) recompute as with
// none, with dropout on; and the planned activation bytes fall in the expected order.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "models/arch/gpt2.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

ModelConfig tiny() {
  return test::tiny_model({.vocab = 97, .seq = 24, .positions = 32, .hidden = 32, .layers = 3, .heads = 4,
                           .act = "gelu_new", .dropout = 0.1f});
}

struct StepsRun {
  std::vector<double> losses;
  std::vector<float> grads;
  int64_t activation_bytes;
};

StepsRun run_steps(ModelConfig cfg, ModelLayout layout = {}) {
  const int64_t B = 3;
  ParallelContext ctx = ParallelContext::single();
  GPT2LMHeadModel model(cfg, layout, B, ctx);
  model.init_weights(7);
  std::vector<int32_t> tokens(static_cast<size_t>(B * (cfg.seq_length + 1)));
  StepsRun r;
  for (int64_t step = 1; step <= 2; ++step) {
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 31 + 7 * step) % cfg.vocab_size);
    std::fill(model.grads(), model.grads() + model.params().total_floats(), 0.0f);
    r.losses.push_back(model.forward(tokens.data(), StepInfo{step, 5 * step, true}));
    model.backward(0.01f);
    r.grads.insert(r.grads.end(), model.grads(), model.grads() + model.params().total_floats());
    // A tiny update so the second step runs on different weights.
    for (int64_t i = 0; i < model.params().total_floats(); ++i) model.weights()[i] -= 0.1f * model.grads()[i];
  }
  r.activation_bytes = model.activation_bytes();
  return r;
}

// The layout that recomputes with `policy` (every layer).
ModelLayout recompute(RecomputePolicy policy) {
  ModelLayout l;
  l.recompute = policy;
  return l;
}

void expect_bitwise(const StepsRun& a, const StepsRun& b, const char* what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << what << " step " << i + 1;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  EXPECT_EQ(std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)), 0) << what << ": gradients differ";
}

TEST(Recompute, BitwiseIdenticalInEveryMode) {
  const ModelConfig base = tiny();
  const StepsRun none = run_steps(base);
  const ModelLayout full = recompute(RecomputePolicy::kFull), select = recompute(RecomputePolicy::kSelective);
  ModelLayout first_one = full;
  first_one.recompute_num_layers = 2;  // (one layer alone saves nothing: the shared set is one layer)
  ModelLayout select_two = select;
  select_two.recompute_num_layers = 2;
  const StepsRun r_full = run_steps(base, full), r_select = run_steps(base, select),
                 r_first = run_steps(base, first_one), r_sel2 = run_steps(base, select_two);
  expect_bitwise(none, r_full, "full recompute");
  expect_bitwise(none, r_select, "selective recompute");
  expect_bitwise(none, r_first, "full recompute of the first two layers");
  expect_bitwise(none, r_sel2, "selective recompute of the first two layers");
  // Memory: full < full on one layer < none; selective < none; selective on 2 layers > on all 3.
  EXPECT_LT(r_full.activation_bytes, r_first.activation_bytes);
  EXPECT_LT(r_first.activation_bytes, none.activation_bytes);
  EXPECT_LT(r_select.activation_bytes, r_sel2.activation_bytes);
  EXPECT_LT(r_sel2.activation_bytes, none.activation_bytes);
  EXPECT_LT(r_full.activation_bytes, r_select.activation_bytes);
  // Full recompute keeps per layer only the output (and one shared set): the saving is at least
  // two layers' worth of everything else.
  const int64_t N = 3 * 24, C = 32, F = 128, H = 4, T = 24;
  // ln1, res2, ln2 (C), qkv (3C), atty (C), four LayerNorm statistics, fch and its activation (F),
  // and the probabilities: everything but the output. Every buffer starts on a 64-byte boundary
  // (core/params/buffer_plan.h), so each N-float statistic takes N rounded up to 16 floats.
  const int64_t stat_floats = (N + 15) / 16 * 16;
  const int64_t per_layer_floats = N * (7 * C + 2 * F) + 4 * stat_floats + 3 * H * T * T;
  EXPECT_EQ(none.activation_bytes - r_full.activation_bytes, 4 * 2 * per_layer_floats);
  EXPECT_EQ(none.activation_bytes - r_select.activation_bytes, 4 * 2 * (3 * H * T * T + N * F));
}

// With fused attention the layer keeps a log-sum-exp per row instead of the probabilities; every
// recompute mode still gives bitwise the same numbers.
TEST(Recompute, BitwiseIdenticalWithFusedAttention) {
  ModelConfig base = tiny();
  base.use_flash_attention = true;
  const StepsRun none = run_steps(base);
  const StepsRun r_full = run_steps(base, recompute(RecomputePolicy::kFull));
  const StepsRun r_select = run_steps(base, recompute(RecomputePolicy::kSelective));
  expect_bitwise(none, r_full, "full recompute, fused attention");
  expect_bitwise(none, r_select, "selective recompute, fused attention");
  EXPECT_LT(r_full.activation_bytes, r_select.activation_bytes);
  EXPECT_LT(r_select.activation_bytes, none.activation_bytes);
}

}  // namespace
}  // namespace gf

namespace gf {
namespace {

// MoE layers (every other layer, with capacity and both router losses) keep their experts'
// activations and recompute the rest: the numbers are bitwise those without recompute.
TEST(Recompute, BitwiseIdenticalWithMoeLayers) {
  ModelConfig base = tiny();
  base.moe.expert_num = 4;
  base.moe.num_experts_chosen = 2;
  base.moe.capacity_factor = 1.0;
  base.moe.moe_layer_freq = 2;  // layers 0 and 2 MoE, layer 1 dense
  base.moe.aux_loss_factor = 0.05;
  base.moe.z_loss_factor = 0.01;
  const StepsRun none = run_steps(base);
  const StepsRun r_full = run_steps(base, recompute(RecomputePolicy::kFull));
  const StepsRun r_select = run_steps(base, recompute(RecomputePolicy::kSelective));
  expect_bitwise(none, r_full, "full recompute, MoE");
  expect_bitwise(none, r_select, "selective recompute, MoE");
  EXPECT_LT(r_full.activation_bytes, none.activation_bytes);
  EXPECT_LT(r_select.activation_bytes, none.activation_bytes);
}

}  // namespace
}  // namespace gf

namespace gf {
namespace {

// MindFormers' per-stage select_recompute list reaches the model as a flag per layer
// (ModelLayout::recompute_mask): any two of the three layers recompute bitwise as none, and save
// less than all three (recomputed layers share one scratch set, so each saves all but that set:
// one layer alone saves nothing, as the first test says).
TEST(Recompute, PerLayerMaskIsBitwiseAndSavesPerLayer) {
  const ModelConfig base = tiny();
  const StepsRun none = run_steps(base);
  const ModelLayout all = recompute(RecomputePolicy::kSelective);
  const StepsRun r_all = run_steps(base, all);
  for (const std::vector<bool>& mask : {std::vector<bool>{true, false, true}, std::vector<bool>{false, true, true}}) {
    ModelLayout l = all;
    l.recompute_mask = mask;
    const StepsRun r = run_steps(base, l);
    expect_bitwise(none, r, "selective recompute by a per-layer mask");
    EXPECT_LT(r.activation_bytes, none.activation_bytes);
    EXPECT_GT(r.activation_bytes, r_all.activation_bytes);
    EXPECT_EQ(l.recomputed_layers(3), mask[0] + mask[1] + mask[2]);
  }
}

}  // namespace
}  // namespace gf
