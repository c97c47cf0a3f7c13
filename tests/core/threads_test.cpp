// The non-GEMM work of a training step on 1, 2 and 3 OpenMP threads (GPT-2's ops and Llama's: RMSNorm, RoPE,
// SwiGLU, grouped-query attention): every op, the gradient norm's
// sum of squares and the AdamW update give the same bits whatever the thread count; AdamW rounds
// exactly as its formula is written (one FMA per moment and in the denominator, the decayed weight
// rounded before the update is subtracted); parallel_zero and parallel_copy write exactly their range.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/optim/adamw.h"
#include "core/math/aligned_buffer.h"
#include "core/ops/activation.h"
#include "core/ops/attention.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/dropout.h"
#include "core/ops/embedding.h"
#include "core/ops/layernorm.h"
#include "core/ops/linear.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "core/math/parallel_memory.h"
#include "models/arch/gpt2.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

// Runs f() on `threads` OpenMP threads.
template <typename F>
auto on_threads(int threads, F&& f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto r = f();
  omp_set_num_threads(saved);
  return r;
}

std::vector<float> normal(int64_t n, float std, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(g);
  return x;
}

uint64_t bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// A 64-byte aligned copy, as the model's buffers are (the Eigen-vectorised ops treat an unaligned
// head of a row differently, so equal bits need equal alignment).
AlignedBuffer<float> aligned(const std::vector<float>& v) {
  AlignedBuffer<float> a(v.size());
  std::copy(v.begin(), v.end(), a.data());
  return a;
}

// Every non-GEMM op of the step on one thread count, with all its outputs (accumulated into
// non-zero buffers where the op accumulates).
std::vector<std::pair<std::string, std::vector<float>>> ops_on(int threads) {
  // Row and column counts that split unevenly over threads and column blocks.
  const int64_t B = 3, T = 37, N = B * T, C = 200, F = 4 * C, V = 1024, valid = 1000;
  auto randn = [](int64_t n, float std, uint32_t seed) { return aligned(normal(n, std, seed)); };
  const AlignedBuffer<float> x = randn(N * C, 1.0f, 1), dy = randn(N * C, 0.1f, 2), w = randn(C, 1.0f, 3),
                             b = randn(C, 0.1f, 4), h = randn(N * F, 1.0f, 5), dh = randn(N * F, 0.1f, 6),
                             wte = randn(valid * C, 0.02f, 8), wpe = randn(T * C, 0.02f, 9);
  std::vector<int32_t> tokens(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % valid);
  AlignedBuffer<float> y(N * C), mean(N), rstd(N), dx = randn(N * C, 0.1f, 10), dw = randn(C, 0.1f, 11),
      db = randn(C, 0.1f, 12), a(N * F), da = randn(N * F, 0.1f, 13), a2(N * F), da2 = randn(N * F, 0.1f, 14),
      losses(N), lse(N), logits = randn(N * V, 2.0f, 7), bias = randn(F, 0.1f, 15), emb(N * C),
      dwte = randn(valid * C, 0.1f, 16), dwpe = randn(T * C, 0.1f, 17), drop = randn(N * C, 1.0f, 1);
  using namespace ops;
  on_threads(threads, [&] {
    layernorm_fwd(y.data(), {mean.data(), rstd.data()}, x.data(), w.data(), b.data(), N, C, 1e-5f);
    layernorm_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), {mean.data(), rstd.data()}, N, C);
    activation_fwd(Activation::kGeluNew, a.data(), h.data(), N * F);
    activation_bwd(Activation::kGeluNew, da.data(), dh.data(), h.data(), N * F);
    activation_fwd(Activation::kGelu, a2.data(), h.data(), N * F);
    activation_bwd(Activation::kGelu, da2.data(), dh.data(), h.data(), N * F);
    cross_entropy_fwd(losses.data(), lse.data(), logits.data(), tokens.data(), N, V, valid);
    cross_entropy_bwd_inplace(logits.data(), lse.data(), tokens.data(), N, V, valid, 1.0f / N);
    sum_rows_accumulate(bias.data(), dh.data(), N, F);
    embedding_fwd(emb.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    embedding_bwd(dwte.data(), dwpe.data(), dy.data(), tokens.data(), B, T, C);
    dropout_apply(drop.data(), DropoutKey{0.3f, 5, 6}, N, C, 0, 0, C);
    return 0;
  });
  auto vec = [](const AlignedBuffer<float>& v) { return std::vector<float>(v.data(), v.data() + v.size()); };
  return {{"layernorm y", vec(y)}, {"layernorm mean", vec(mean)}, {"layernorm rstd", vec(rstd)},
          {"layernorm dx", vec(dx)}, {"layernorm dw", vec(dw)}, {"layernorm db", vec(db)}, {"gelu_new y", vec(a)},
          {"gelu_new dx", vec(da)}, {"gelu y", vec(a2)}, {"gelu dx", vec(da2)}, {"cross_entropy losses", vec(losses)},
          {"cross_entropy lse", vec(lse)}, {"cross_entropy dlogits", vec(logits)}, {"sum_rows_accumulate", vec(bias)},
          {"embedding y", vec(emb)}, {"embedding dwte", vec(dwte)}, {"embedding dwpe", vec(dwpe)},
          {"dropout", vec(drop)}};
}

// Llama's ops: RMSNorm, RoPE, SwiGLU over a fused gate|up buffer, and grouped-query attention
// (its backward adds several query heads into one kv head's gradient).
std::vector<std::pair<std::string, std::vector<float>>> llama_ops_on(int threads) {
  const int64_t B = 3, T = 37, N = B * T, C = 192, F = 520, H = 12, G = 4, D = C / H;
  auto randn = [](int64_t n, float std, uint32_t seed) { return aligned(normal(n, std, seed)); };
  const AlignedBuffer<float> x = randn(N * C, 1.0f, 21), dy = randn(N * C, 0.1f, 22), w = randn(C, 1.0f, 23),
                             gu = randn(N * 2 * F, 1.0f, 24), dh = randn(N * F, 0.1f, 25),
                             qkv = randn(N * (H + 2 * G) * D, 1.0f, 26), datt = randn(N * C, 0.1f, 27);
  AlignedBuffer<float> y(N * C), rstd(N), dx = randn(N * C, 0.1f, 28), dw = randn(C, 0.1f, 29), rot(N * C),
      drot(N * C), h(N * F), dgu = randn(N * 2 * F, 0.1f, 30), att(N * C), probs(B * H * T * T),
      dqkv = randn(N * (H + 2 * G) * D, 0.1f, 31);
  const ops::RopeTable<float> table = ops::make_rope_table<float>(T, D, 1e6);
  const ops::AttentionShape shape{B, T, H, D, 0, 0, H, G};
  using namespace ops;
  on_threads(threads, [&] {
    rmsnorm_fwd(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    rmsnorm_bwd(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    rope_fwd(rot.data(), x.data(), table, N, T, H);
    rope_bwd(drot.data(), dy.data(), table, N, T, H);
    swiglu_fwd(h.data(), gu.data(), gu.data() + F, N, F, 2 * F);
    swiglu_bwd(dgu.data(), dgu.data() + F, dh.data(), gu.data(), gu.data() + F, N, F, 2 * F);
    attention_fwd(att.data(), probs.data(), qkv.data(), shape, DropoutKey{0.1f, 3, 4});
    attention_bwd(dqkv.data(), datt.data(), qkv.data(), probs.data(), shape, DropoutKey{0.1f, 3, 4});
    return 0;
  });
  auto vec = [](const AlignedBuffer<float>& v) { return std::vector<float>(v.data(), v.data() + v.size()); };
  return {{"rmsnorm y", vec(y)}, {"rmsnorm rstd", vec(rstd)}, {"rmsnorm dx", vec(dx)}, {"rmsnorm dw", vec(dw)},
          {"rope y", vec(rot)}, {"rope dx", vec(drot)}, {"swiglu h", vec(h)}, {"swiglu d(gate, up)", vec(dgu)},
          {"gqa attention y", vec(att)}, {"gqa attention dqkv", vec(dqkv)}};
}

TEST(Threads, EveryNonGemmOpGivesTheSameBitsOnAnyThreadCount) {
  auto one = ops_on(1);
  for (auto& op : llama_ops_on(1)) one.push_back(std::move(op));
  for (int t : {2, 3}) {
    auto other = ops_on(t);
    for (auto& op : llama_ops_on(t)) other.push_back(std::move(op));
    for (size_t k = 0; k < one.size(); ++k) {
      ASSERT_EQ(other[k].second.size(), one[k].second.size());
      EXPECT_EQ(std::memcmp(other[k].second.data(), one[k].second.data(), sizeof(float) * one[k].second.size()), 0)
          << one[k].first << ", " << t << " threads";
    }
  }
}

TEST(GradSqSum, SameBitsOnAnyThreadCountAndCloseToAnExactSum) {
  // Several blocks of 16Ki floats and a ragged tail; values spread over orders of magnitude.
  const int64_t n = 5 * (int64_t{1} << 14) + 12345;
  std::vector<float> g = normal(n, 1.0f, 7);
  for (int64_t i = 0; i < n; i += 3) g[static_cast<size_t>(i)] *= 1e-3f;
  long double exact = 0;
  for (float v : g) exact += static_cast<long double>(v) * v;
  const double one = on_threads(1, [&] { return grad_sq_sum(g.data(), n); });
  for (int t : {2, 3}) EXPECT_EQ(bits(on_threads(t, [&] { return grad_sq_sum(g.data(), n); })), bits(one)) << t << " threads";
  EXPECT_NEAR(one, static_cast<double>(exact), 1e-13 * static_cast<double>(exact));
  // Over ranges: each range's sum added in order, the same on any thread count; empty ranges add nothing.
  const std::vector<ArenaRange> ranges{{0, 100}, {100, 100}, {128, 40000}, {40000, n}};
  const double by_range = on_threads(1, [&] { return grad_sq_sum(g.data(), ranges); });
  double expect = 0.0;
  for (const ArenaRange& r : ranges) expect += grad_sq_sum(g.data() + r.begin, r.end - r.begin);
  EXPECT_EQ(bits(by_range), bits(expect));
  EXPECT_EQ(bits(on_threads(2, [&] { return grad_sq_sum(g.data(), ranges); })), bits(by_range));
  EXPECT_EQ(grad_sq_sum(g.data(), 0), 0.0);
}

TEST(AdamW, UpdateRoundsAsWrittenOnAnyThreadCount) {
  const ModelConfig c = test::tiny_model({.vocab = 1000, .seq = 16, .hidden = 64, .layers = 2, .heads = 4});
  const Placement table = GPT2LMHeadModel::make_placement(c, ModelLayout{}, 0);
  const int64_t n = table.total_floats();
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  const double lr = 3e-4;
  const std::vector<float> w0 = normal(n, 0.02f, 1);
  std::vector<std::vector<float>> grads;
  for (uint32_t s = 0; s < 3; ++s) grads.push_back(normal(n, 1e-3f, 10 + s));

  // Scalar reference: the same formula with every rounding explicit.
  std::vector<float> w = w0, m(static_cast<size_t>(n), 0.0f), v(static_cast<size_t>(n), 0.0f);
  std::vector<char> decays(static_cast<size_t>(n), 0), covered(static_cast<size_t>(n), 0);
  for (const TensorPlacement& p : table.tensors())
    for (int64_t i = p.offset; i < p.offset + p.numel(); ++i) {
      decays[static_cast<size_t>(i)] = p.spec->weight_decay;
      covered[static_cast<size_t>(i)] = 1;
    }
  for (int64_t step = 1; step <= 3; ++step) {
    const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step));
    const float b1 = static_cast<float>(cfg.beta1), b2 = static_cast<float>(cfg.beta2);
    const float step_size = static_cast<float>(lr / bc1), inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
    const float eps = static_cast<float>(cfg.eps), decay = static_cast<float>(std::fma(-lr, cfg.weight_decay, 1.0));
    const std::vector<float>& g = grads[static_cast<size_t>(step - 1)];
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (!covered[i]) continue;
      // volatile: this file is compiled with FMA contraction, which could fuse the decay's product
      // into the subtraction below.
      const volatile float p = w[i] * (decays[i] ? decay : 1.0f);
      m[i] = std::fma(b1, m[i], (1.0f - b1) * g[i]);
      v[i] = std::fma(b2, v[i], (1.0f - b2) * g[i] * g[i]);
      const float denom = std::fma(std::sqrt(v[i]), inv_sqrt_bc2, eps);
      w[i] = p - step_size * m[i] / denom;
    }
  }
  for (int threads : {1, 2, 3}) {
    std::vector<float> got = w0;
    AdamW opt(table, cfg);
    on_threads(threads, [&] {
      for (int64_t step = 1; step <= 3; ++step) opt.step(got.data(), grads[static_cast<size_t>(step - 1)].data(), lr, step);
      return 0;
    });
    EXPECT_EQ(std::memcmp(got.data(), w.data(), sizeof(float) * w.size()), 0) << "weights, " << threads << " threads";
    EXPECT_EQ(std::memcmp(opt.m(), m.data(), sizeof(float) * m.size()), 0) << "first moment, " << threads << " threads";
    EXPECT_EQ(std::memcmp(opt.v(), v.data(), sizeof(float) * v.size()), 0) << "second moment, " << threads << " threads";
  }
}

TEST(ParallelZero, ZeroesExactlyItsRange) {
  for (int64_t n : {int64_t{0}, int64_t{1000}, (int64_t{1} << 16) + 17, int64_t{3} * (1 << 16) + 5}) {
    for (int threads : {1, 2, 3}) {
      std::vector<float> x(static_cast<size_t>(n + 8), 1.0f);
      on_threads(threads, [&] {
        parallel_zero(x.data() + 3, n);
        return 0;
      });
      for (int64_t i = 0; i < n + 8; ++i)
        ASSERT_EQ(x[static_cast<size_t>(i)], i >= 3 && i < n + 3 ? 0.0f : 1.0f) << "n " << n << ", element " << i;
    }
  }
}

TEST(ParallelCopy, CopiesExactlyItsRange) {
  // Sizes below, at and past the 64Ki-float threshold, with an offset so the shares' cuts do not fall
  // on the buffer's alignment; every element distinct so a misplaced share shows.
  for (int64_t n : {int64_t{0}, int64_t{1000}, (int64_t{1} << 16) + 17, int64_t{3} * (1 << 16) + 5}) {
    std::vector<float> src(static_cast<size_t>(n + 8));
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
    for (int threads : {1, 2, 3}) {
      std::vector<float> x(static_cast<size_t>(n + 8), -1.0f);
      on_threads(threads, [&] {
        parallel_copy(x.data() + 3, src.data() + 5, n);
        return 0;
      });
      for (int64_t i = 0; i < n + 8; ++i)
        ASSERT_EQ(x[static_cast<size_t>(i)], i >= 3 && i < n + 3 ? src[static_cast<size_t>(i + 2)] : -1.0f)
            << "n " << n << ", " << threads << " threads, element " << i;
    }
  }
}

}  // namespace
}  // namespace gf
