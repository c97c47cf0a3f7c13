// The fused attention (core/ops/flash_attention.h) against the unfused one (core/ops/attention.h):
// y and the gradient of qkv equal within 1e-5 relative (max abs diff / max abs) in float, for
// sequences shorter than a tile, not a multiple of it, tiles of unequal sides, one and several
// heads, dropout on and off, and a tensor-parallel slice of the heads (head_offset/heads_global
// key the dropout mask). The double version's backward against finite differences of its own
// forward, and the results bit-identical on 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/ops/attention.h"
#include "core/ops/flash_attention.h"
#include "tests/core/finite_difference.h"

namespace gf::ops {
namespace {

template <typename S>
std::vector<S> randn(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<S> v(n);
  for (auto& x : v) x = static_cast<S>(d(g));
  return v;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0, mx = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - ref[i]));
    mx = std::max(mx, std::abs(static_cast<double>(ref[i])));
  }
  return mx > 0 ? diff / mx : diff;
}

struct Case {
  int64_t B, T, H, D;
  FlashTiles tiles;
  int64_t batch_offset = 0, head_offset = 0, heads_global = 0;
  int64_t kv = 0;  // key/value heads (0: H; fewer: grouped-query attention)
  int64_t kvh() const { return kv > 0 ? kv : H; }
  std::string name() const {
    std::ostringstream o;
    o << "B" << B << " T" << T << " H" << H << " D" << D << " tiles " << tiles.rows << "x" << tiles.cols;
    if (kv) o << " kv " << kv;
    if (heads_global) o << " heads " << head_offset << ".." << head_offset + H - 1 << " of " << heads_global
                        << ", batch offset " << batch_offset;
    return o.str();
  }
};

const Case kCases[] = {
    {2, 5, 4, 8, {64, 64}},      // T < tile
    {2, 100, 1, 64, {64, 64}},   // T not a multiple of the tile, one head
    {2, 128, 4, 8, {64, 64}},    // T a multiple of the tile
    {2, 130, 4, 8, {32, 16}},    // more rows than columns per tile
    {2, 77, 4, 64, {16, 48}},    // more columns than rows, neither divides T
    {2, 200, 2, 64, FlashTiles{}},  // the default tiles, several in both directions
    {2, 70, 2, 8, {64, 64}, 3, 2, 4},  // heads 2..3 of 4 (a tensor-parallel rank), samples 3..4
    {2, 130, 4, 16, {32, 48}, 0, 0, 0, 2},      // grouped-query: 2 query heads per key/value head
    {1, 200, 6, 64, FlashTiles{}, 0, 0, 0, 2},  // 3 per key/value head, the default tiles
    {2, 70, 4, 8, {16, 16}, 1, 4, 8, 1},        // one key/value head (multi-query), a tensor-parallel slice
};

void check_equal_to_unfused(const Case& k, float rate) {
  SCOPED_TRACE(k.name() + (rate > 0 ? ", dropout " + std::to_string(rate) : ", no dropout"));
  const int64_t C = k.H * k.D, W = (k.H + 2 * k.kvh()) * k.D, n_qkv = k.B * k.T * W, n_y = k.B * k.T * C;
  AttentionShape s{k.B, k.T, k.H, k.D, k.batch_offset, k.head_offset, k.heads_global};
  s.kv_heads = k.kv;
  const DropoutKey drop{rate, 42, 7};
  const auto qkv = randn<float>(static_cast<size_t>(n_qkv), 1, 1.5), dy = randn<float>(static_cast<size_t>(n_y), 2);
  std::vector<float> y_ref(n_y), probs(k.B * k.H * k.T * k.T), dqkv_ref(n_qkv, 0.f);
  attention_fwd(y_ref.data(), probs.data(), qkv.data(), s, drop);
  attention_bwd(dqkv_ref.data(), dy.data(), qkv.data(), probs.data(), s, drop);
  std::vector<float> y(n_y), lse(k.B * k.H * k.T), dqkv(n_qkv, 0.f);
  FlashWorkspace<float> ws;
  ws.tiles = k.tiles;
  flash_attention_fwd(y.data(), lse.data(), qkv.data(), s, drop, ws);
  flash_attention_bwd(dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s, drop, ws);
  const double ey = rel_diff(y, y_ref), eg = rel_diff(dqkv, dqkv_ref);
  EXPECT_LE(ey, 1e-5) << "y";
  EXPECT_LE(eg, 1e-5) << "dqkv";
  std::printf("  %-58s dropout %.1f: y %.2e, dqkv %.2e relative\n", k.name().c_str(), rate, ey, eg);
  // lse[b, h, i] is the log of the softmax denominator: exp(score - lse) is the probability.
  const int64_t bh = k.B * k.H - 1, i = k.T - 1;
  const float* q = qkv.data() + (k.B - 1) * k.T * W + (k.H - 1) * k.D + i * W;
  const float* key0 = qkv.data() + (k.B - 1) * k.T * W + C + (k.kvh() - 1) * k.D;  // the last head's group
  double score = 0;
  for (int64_t d = 0; d < k.D; ++d) score += static_cast<double>(q[d]) * key0[d];
  score /= std::sqrt(static_cast<double>(k.D));
  EXPECT_NEAR(std::exp(score - lse[bh * k.T + i]), probs[(bh * k.T + i) * k.T], 1e-6);
  // Backward accumulates.
  std::vector<float> acc(n_qkv, 1.f);
  flash_attention_bwd(acc.data(), dy.data(), qkv.data(), y.data(), lse.data(), s, drop, ws);
  double acc_diff = 0, grad_max = 0;
  for (int64_t j = 0; j < n_qkv; ++j) {
    acc_diff = std::max(acc_diff, std::abs(static_cast<double>(acc[j]) - 1.0 - dqkv[j]));
    grad_max = std::max(grad_max, std::abs(static_cast<double>(dqkv[j])));
  }
  EXPECT_LE(acc_diff, 1e-5 * std::max(1.0, grad_max)) << "backward does not add to dqkv";
}

TEST(FlashAttention, EqualsUnfusedWithoutDropout) {
  for (const Case& k : kCases) check_equal_to_unfused(k, 0.0f);
}

TEST(FlashAttention, EqualsUnfusedWithDropout) {
  for (const Case& k : kCases) check_equal_to_unfused(k, 0.2f);
}

// Backward against central differences of the double forward, loss = sum(g * y), with tiles
// small enough that T = 7 spans several of them in both directions.
void check_finite_differences(float rate) {
  const int64_t B = 2, T = 7, H = 2, D = 3, C = H * D;
  auto qkv = randn<double>(B * T * 3 * C, 11), g = randn<double>(B * T * C, 12);
  std::vector<double> y(B * T * C), lse(B * H * T);
  const AttentionShape s{B, T, H, D, 1, 1, 3};
  const DropoutKey drop{rate, 42, 7};
  FlashWorkspace<double> ws;
  ws.tiles = {3, 2};
  auto loss = [&] {
    flash_attention_fwd(y.data(), lse.data(), qkv.data(), s, drop, ws);
    double sum = 0;
    for (size_t i = 0; i < y.size(); ++i) sum += y[i] * g[i];
    return sum;
  };
  loss();
  std::vector<double> dqkv(qkv.size(), 0.0);
  flash_attention_bwd(dqkv.data(), g.data(), qkv.data(), y.data(), lse.data(), s, drop, ws);
  test::expect_grad("flash attention's dqkv", qkv, dqkv, loss, 1e-6, 1e-7);
}

TEST(FlashAttention, DoubleBackwardMatchesFiniteDifferences) { check_finite_differences(0.0f); }
TEST(FlashAttention, DoubleBackwardMatchesFiniteDifferencesWithDropout) { check_finite_differences(0.3f); }

struct Outputs {
  std::vector<float> y, lse, dqkv;
  bool operator==(const Outputs& o) const {
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    return same(y, o.y) && same(lse, o.lse) && same(dqkv, o.dqkv);
  }
};

// Runs forward and backward on `threads` OpenMP threads, with a planned workspace of that many
// slices or (scratch) with the threads' own scratch buffers; kv > 0: 4 query heads on kv key/value heads.
Outputs run_on(int threads, bool scratch, int64_t kv = 0) {
  const int64_t B = 2, T = 200, H = kv > 0 ? 4 : 3, D = 64, C = H * D, W = (H + 2 * (kv > 0 ? kv : H)) * D;
  AttentionShape s{B, T, H, D, 0, 0, H};
  s.kv_heads = kv;
  const DropoutKey drop{0.1f, 5, 9};
  const auto qkv = randn<float>(B * T * W, 21), dy = randn<float>(B * T * C, 22);
  Outputs o{std::vector<float>(B * T * C), std::vector<float>(B * H * T), std::vector<float>(qkv.size(), 0.f)};
  FlashWorkspace<float> ws;
  std::vector<float> buf;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  if (!scratch) {
    buf.resize(static_cast<size_t>(threads * flash_workspace_per_thread(s, ws.tiles)) + 3);
    ws.data = buf.data() + 3;  // deliberately not 64-byte aligned
    ws.threads = threads;
  }
  flash_attention_fwd(o.y.data(), o.lse.data(), qkv.data(), s, drop, ws);
  flash_attention_bwd(o.dqkv.data(), dy.data(), qkv.data(), o.y.data(), o.lse.data(), s, drop, ws);
  omp_set_num_threads(saved);
  return o;
}

TEST(FlashAttention, ResultsDoNotDependOnTheThreadCount) {
  const Outputs one = run_on(1, false), two = run_on(2, false);
  EXPECT_TRUE(one == two) << "planned workspace: 1 and 2 threads differ";
  EXPECT_TRUE(run_on(1, true) == one) << "scratch workspace, 1 thread, differs from the planned one";
  EXPECT_TRUE(run_on(2, true) == one) << "scratch workspace, 2 threads, differs";
  EXPECT_TRUE(run_on(1, false, 2) == run_on(2, false, 2)) << "grouped-query: 1 and 2 threads differ";
}

TEST(FlashAttention, WorkspaceDoesNotGrowWithTheSequence) {
  const FlashTiles t;
  const int64_t a = flash_workspace_per_thread({1, 256, 4, 64}, t), b = flash_workspace_per_thread({1, 8192, 4, 64}, t);
  EXPECT_EQ(a, b);
  EXPECT_LE(a, 3 * t.rows * t.cols + t.rows * 64 + 256);
}

}  // namespace
}  // namespace gf::ops
