// GPT-2 with `use_flash_attention: True` against the unfused attention: the same loss, logits and
// every parameter gradient within 1e-5 relative (max abs diff / max abs, per parameter) in float,
// with dropout on (attention and hidden) and a sequence longer than one 64-row tile and not a
// multiple of it; and the planned activations no longer hold the T x T probabilities.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/ops/flash_attention.h"
#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

constexpr int64_t kB = 2, kT = 80, kV = 97;

ModelConfig cfg(bool flash) {
  ModelConfig c = test::tiny_model({.vocab = kV, .seq = kT, .hidden = 32, .layers = 2, .heads = 4, .dropout = 0.1f});
  c.use_flash_attention = flash;
  return c;
}

std::vector<int32_t> tokens() {
  std::vector<int32_t> t(static_cast<size_t>(kB * (kT + 1)));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % kV);
  return t;
}

double rel_err(const float* a, const float* ref, int64_t n) {
  double diff = 0, mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - ref[i]));
    mx = std::max(mx, std::abs(static_cast<double>(ref[i])));
  }
  return mx > 0 ? diff / mx : diff;
}

TEST(Gpt2FlashAttention, LossLogitsAndGradientsEqualTheUnfusedPath) {
  ParallelContext ctx = ParallelContext::single();
  GPT2LMHeadModel unfused(cfg(false), ModelLayout{}, kB, ctx), flash(cfg(true), ModelLayout{}, kB, ctx);
  unfused.init_weights(5);
  flash.init_weights(5);
  const auto t = tokens();
  const StepInfo step{3, 0, true};
  const double lu = unfused.forward(t.data(), step), lf = flash.forward(t.data(), step);
  EXPECT_NEAR(lf, lu, 1e-5 * std::abs(lu));
  EXPECT_NE(lu, unfused.forward(t.data(), StepInfo{3, 0, false})) << "dropout is not on; the test would be weaker";
  unfused.forward(t.data(), step);
  EXPECT_LE(rel_err(flash.logits(), unfused.logits(), kB * kT * flash.logits_ld()), 1e-5) << "logits";
  const float scale = 1.0f / static_cast<float>(kB * kT);
  unfused.backward(scale);
  flash.backward(scale);
  double worst = 0;
  for (const TensorPlacement& p : unfused.params().tensors()) {
    const double e = rel_err(flash.grads() + p.offset, unfused.grads() + p.offset, p.numel());
    EXPECT_LE(e, 1e-5) << p.spec->name;
    worst = std::max(worst, e);
  }
  std::printf("  loss %.9g vs %.9g; worst gradient relative difference %.2e\n", lf, lu, worst);
}

TEST(Gpt2FlashAttention, ActivationsDropTheProbabilities) {
  ParallelContext ctx = ParallelContext::single();
  GPT2LMHeadModel unfused(cfg(false), ModelLayout{}, kB, ctx), flash(cfg(true), ModelLayout{}, kB, ctx);
  const ModelConfig c = cfg(false);
  const int64_t probs = 4 * c.num_layers * kB * c.num_heads * kT * kT, lse = 4 * c.num_layers * kB * c.num_heads * kT;
  const int64_t saved = unfused.activation_bytes() - flash.activation_bytes();
  // The probabilities go; one lse per row and head comes, and a tile workspace per thread.
  const int64_t ws = 4 * omp_get_max_threads() * ops::flash_workspace_per_thread({kB, kT, c.num_heads, c.head_dim()}, {});
  EXPECT_EQ(saved, probs - lse - ws);
  EXPECT_LT(ws, 80 * 1024 * omp_get_max_threads());  // two 64 x 128 float tiles and a little per thread
}

// A Llama (RoPE, grouped-query heads) keeps its fused core's q|k|v and output in bf16 too, rotating q and k in
// fp32 in the backward's q|k|v gradient scratch before rounding them: no buffer is added for it.
TEST(Gpt2FlashAttention, Bf16LlamaKeepsItsQkvInBf16RotatingInTheGradientScratch) {
  ParallelContext ctx = ParallelContext::single();
  ModelConfig c = cfg(false);
  c.type = "LlamaConfig";
  c.arch = "LlamaForCausalLM";
  c.num_kv_heads = 2;
  c.intermediate_size = 64;
  c.hidden_dropout_rate = c.attention_dropout_rate = 0.0f;
  ModelConfig cf = c;
  cf.use_flash_attention = true;
  ModelLayout bf;
  bf.compute = ComputeDtype::kBFloat16;
  LlamaForCausalLM unfused(c, bf, kB, ctx), flash(cf, bf, kB, ctx);
  const int64_t D = c.head_dim(), W = (c.num_heads + 2 * c.num_kv_heads) * D, N = kB * kT;
  const int64_t probs = 4 * c.num_layers * kB * c.num_heads * kT * kT, lse = 4 * c.num_layers * kB * c.num_heads * kT;
  const ops::FlashTiles tiles = ops::flash_tiles(true);
  ops::AttentionShape core{kB, kT, c.num_heads, D};
  core.kv_heads = c.num_kv_heads;
  const int64_t ws = 4 * omp_get_max_threads() * ops::flash_workspace_per_thread(core, tiles);
  const int64_t bf16 = 4 * ops::flash_bf16_scratch_floats(core, tiles, omp_get_max_threads());
  const int64_t qkv_half = 2 * c.num_layers * N * (W + c.hidden_size);  // q|k|v and y: multiples of 16 floats here
  EXPECT_EQ(unfused.activation_bytes() - flash.activation_bytes(), probs - lse - ws - bf16 + qkv_half);
}

// Under bf16 compute the fused core's bf16 scratch (head-major operand copies, per-thread P / dS tiles and
// dense gradients) is a buffer of the plan as well, sized for the core's shape and the threads.
TEST(Gpt2FlashAttention, Bf16PlansTheFusedCoresScratch) {
  ParallelContext ctx = ParallelContext::single();
  ModelLayout bf;
  bf.compute = ComputeDtype::kBFloat16;
  GPT2LMHeadModel unfused(cfg(false), bf, kB, ctx), flash(cfg(true), bf, kB, ctx);
  const ModelConfig c = cfg(false);
  const int64_t probs = 4 * c.num_layers * kB * c.num_heads * kT * kT, lse = 4 * c.num_layers * kB * c.num_heads * kT;
  const ops::FlashTiles tiles = ops::flash_tiles(true);
  const ops::AttentionShape core{kB, kT, c.num_heads, c.head_dim()};
  const int64_t ws = 4 * omp_get_max_threads() * ops::flash_workspace_per_thread(core, tiles);
  const int64_t bf16 = 4 * ops::flash_bf16_scratch_floats(core, tiles, omp_get_max_threads());
  // q|k|v and dy in bf16, and per thread two bf16 tiles and 3 T D floats
  EXPECT_GE(bf16, 2 * kB * kT * 4 * c.hidden_size + omp_get_max_threads() * (2 * 2 * tiles.rows * tiles.cols + 12 * kT * c.head_dim()));
  // and the fused core's q|k|v and output are kept in bf16 (AttentionBlock::keeps_core_bf16; N x 4C a layer, a
  // multiple of 16 floats)
  const int64_t qkv_half = 2 * c.num_layers * kB * kT * 4 * c.hidden_size;
  EXPECT_EQ(unfused.activation_bytes() - flash.activation_bytes(), probs - lse - ws - bf16 + qkv_half);
}

}  // namespace
}  // namespace gf
