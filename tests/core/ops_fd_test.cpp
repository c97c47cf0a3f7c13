// Every op's backward against central finite differences of its own forward, in double precision.
// loss = sum(g * y) for a fixed random g, so dL/dy = g is the upstream gradient given to backward.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/ops/activation.h"
#include "core/ops/attention.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/embedding.h"
#include "core/ops/layernorm.h"
#include "core/ops/linear.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "tests/core/finite_difference.h"

namespace gf::ops {
namespace {

using Vec = std::vector<double>;

Vec randn(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (auto& x : v) x = d(g);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

using test::expect_grad;  // tests/core/finite_difference.h

TEST(OpsFiniteDifference, LayerNorm) {
  const int64_t R = 5, D = 7;
  Vec x = randn(R * D, 1), w = randn(D, 2), b = randn(D, 3), g = randn(R * D, 4);
  Vec y(R * D), mean(R), rstd(R);
  auto loss = [&] {
    layernorm_fwd<double>(y.data(), {mean.data(), rstd.data()}, x.data(), w.data(), b.data(), R, D, 1e-5f);
    return dot(y, g);
  };
  loss();
  Vec dx(R * D, 0.0), dw(D, 0.0), db(D, 0.0);
  layernorm_bwd<double>(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), {mean.data(), rstd.data()}, R, D);
  expect_grad("layernorm dx", x, dx, loss);
  expect_grad("layernorm dw", w, dw, loss);
  expect_grad("layernorm db", b, db, loss);
}

TEST(OpsFiniteDifference, Activations) {
  for (Activation a : {Activation::kGelu, Activation::kGeluNew, Activation::kFastGelu}) {
    const int64_t n = 41;
    Vec x = randn(n, 5, 2.0), g = randn(n, 6), y(n);
    auto loss = [&] {
      activation_fwd<double>(a, y.data(), x.data(), n);
      return dot(y, g);
    };
    Vec dx(n, 0.0);
    activation_bwd<double>(a, dx.data(), g.data(), x.data(), n);
    expect_grad(activation_name(a), x, dx, loss);
  }
}

TEST(OpsFiniteDifference, Linear) {
  const int64_t N = 6, I = 5, O = 4;
  Vec x = randn(N * I, 7), w = randn(I * O, 8), b = randn(O, 9), g = randn(N * O, 10), y(N * O);
  auto loss = [&] {
    linear_fwd<double>(y.data(), x.data(), w.data(), b.data(), N, I, O);
    return dot(y, g);
  };
  Vec dx(N * I, 0.0), dw(I * O, 0.0), db(O, 0.0);
  linear_bwd<double>(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, I, O);
  expect_grad("linear dx", x, dx, loss);
  expect_grad("linear dw", w, dw, loss);
  expect_grad("linear db", b, db, loss);
}

// kv_heads 0: multi-head; 2 of 4 (or 1): grouped-query, two query heads (or all) per kv head.
void check_attention(float dropout, int64_t kv_heads = 0) {
  const int64_t B = 2, T = 5, H = kv_heads > 0 ? 4 : 2, D = 3, C = H * D, G = kv_heads > 0 ? kv_heads : H;
  Vec qkv = randn(B * T * (H + 2 * G) * D, 11), g = randn(B * T * C, 12), y(B * T * C), probs(B * H * T * T);
  AttentionShape s{B, T, H, D, 0, 0, H, kv_heads};
  DropoutKey key{dropout, 42, 7};
  auto loss = [&] {
    attention_fwd<double>(y.data(), probs.data(), qkv.data(), s, key);
    return dot(y, g);
  };
  loss();
  Vec dqkv(qkv.size(), 0.0);
  attention_bwd<double>(dqkv.data(), g.data(), qkv.data(), probs.data(), s, key);
  expect_grad(dropout > 0 ? "attention (dropout 0.3) dqkv" : kv_heads > 0 ? "grouped-query attention dqkv" : "attention dqkv",
              qkv, dqkv, loss);
}

TEST(OpsFiniteDifference, CausalAttention) { check_attention(0.0f); }
TEST(OpsFiniteDifference, CausalAttentionWithDropout) { check_attention(0.3f); }
TEST(OpsFiniteDifference, GroupedQueryAttention) {
  check_attention(0.0f, 2);
  check_attention(0.3f, 2);
  check_attention(0.0f, 1);
}

TEST(OpsFiniteDifference, CausalAttentionIgnoresTheFuture) {
  const int64_t B = 1, T = 4, H = 1, D = 2, C = H * D;
  Vec qkv = randn(B * T * 3 * C, 13), y1(B * T * C), y2(B * T * C), probs(B * H * T * T);
  AttentionShape s{B, T, H, D};
  attention_fwd<double>(y1.data(), probs.data(), qkv.data(), s, DropoutKey{});
  for (int64_t c = 0; c < 3 * C; ++c) qkv[(T - 1) * 3 * C + c] += 5.0;  // change only the last token
  attention_fwd<double>(y2.data(), probs.data(), qkv.data(), s, DropoutKey{});
  for (int64_t i = 0; i < (T - 1) * C; ++i) EXPECT_DOUBLE_EQ(y1[i], y2[i]) << "output " << i << " saw a later token";
}

TEST(OpsFiniteDifference, Embedding) {
  const int64_t B = 2, T = 3, D = 4, V = 5;
  std::vector<int32_t> tok = {1, 4, 1, 0, 1, 3};
  Vec wte = randn(V * D, 14), wpe = randn(T * D, 15), g = randn(B * T * D, 16), y(B * T * D);
  auto loss = [&] {
    embedding_fwd<double>(y.data(), tok.data(), wte.data(), wpe.data(), B, T, D);
    return dot(y, g);
  };
  Vec dwte(V * D, 0.0), dwpe(T * D, 0.0);
  embedding_bwd<double>(dwte.data(), dwpe.data(), g.data(), tok.data(), B, T, D);
  expect_grad("embedding dwte", wte, dwte, loss);
  expect_grad("embedding dwpe", wpe, dwpe, loss);
}

TEST(OpsFiniteDifference, CrossEntropyMasksThePadding) {
  const int64_t R = 4, V = 9, LD = 16;  // 7 padded columns
  Vec logits = randn(R * LD, 17, 3.0);
  std::vector<int32_t> tgt = {0, 8, 3, 8};
  Vec losses(R), lse(R);
  auto loss = [&] {
    cross_entropy_fwd<double>(losses.data(), lse.data(), logits.data(), tgt.data(), R, LD, V);
    double s = 0;
    for (double l : losses) s += l;
    return s;
  };
  const double before = loss();
  Vec grad = logits;
  cross_entropy_bwd_inplace<double>(grad.data(), lse.data(), tgt.data(), R, LD, V, 1.0f);
  expect_grad("cross_entropy dlogits", logits, grad, loss);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = V; j < LD; ++j) {
      EXPECT_EQ(grad[r * LD + j], 0.0);
      logits[r * LD + j] = 1e3;  // a huge padded logit must not change the loss
    }
  EXPECT_DOUBLE_EQ(loss(), before);
}

TEST(OpsFiniteDifference, RMSNorm) {
  const int64_t R = 5, D = 7;
  Vec x = randn(R * D, 31), w = randn(D, 32), g = randn(R * D, 33);
  Vec y(R * D), rstd(R);
  auto loss = [&] {
    rmsnorm_fwd<double>(y.data(), rstd.data(), x.data(), w.data(), R, D, 1e-6f);
    return dot(y, g);
  };
  loss();
  Vec dx(R * D, 0.0), dw(D, 0.0);
  rmsnorm_bwd<double>(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), R, D);
  expect_grad("rmsnorm dx", x, dx, loss);
  expect_grad("rmsnorm dw", w, dw, loss);
}

// Qwen3's q_norm / k_norm: rows of 3 q heads and 2 k heads of 6 inside a row of 19 (a q|k|v row has more after
// them, left alone), the q heads on w0 and the k heads on w1.
TEST(OpsFiniteDifference, HeadRMSNorm) {
  const int64_t R = 4, H = 5, split = 3, D = 6, ld = H * D + 4;
  Vec x = randn(R * ld, 41), w0 = randn(D, 42), w1 = randn(D, 43), g = randn(R * ld, 44);
  Vec y(R * ld), saved(R * H * D), rstd(R * H);
  auto loss = [&] {
    y = x;
    head_rmsnorm_fwd<double>(y.data(), saved.data(), rstd.data(), w0.data(), w1.data(), split, R, H, D, ld, 1e-6f);
    return dot(y, g);
  };
  loss();
  for (int64_t r = 0; r < R; ++r)  // the rest of each row passes through
    for (int64_t i = H * D; i < ld; ++i) EXPECT_EQ(y[r * ld + i], x[r * ld + i]);
  Vec d = g, dw0(D, 0.0), dw1(D, 0.0);
  head_rmsnorm_bwd<double>(d.data(), dw0.data(), dw1.data(), saved.data(), w0.data(), w1.data(), rstd.data(), split, R, H,
                           D, ld);
  // d is the input's gradient over the heads; past them the row's gradient is g's own (identity).
  expect_grad("head rmsnorm dx", x, d, loss);
  expect_grad("head rmsnorm dw0", w0, dw0, loss);
  expect_grad("head rmsnorm dw1", w1, dw1, loss);
  // Equal to rmsnorm_fwd head by head (at x itself: the checks above left y at a perturbed x).
  loss();
  Vec one(D), r1(1);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < H; ++h) {
      rmsnorm_fwd<double>(one.data(), r1.data(), x.data() + r * ld + h * D, (h < split ? w0 : w1).data(), 1, D, 1e-6f);
      for (int64_t i = 0; i < D; ++i) EXPECT_EQ(y[r * ld + h * D + i], one[i]);
    }
}

TEST(OpsFiniteDifference, SwiGLU) {
  // gate and up side by side in one [R, 2F] buffer, as one fused product would write them.
  const int64_t R = 4, F = 9;
  Vec gu = randn(R * 2 * F, 34, 2.0), g = randn(R * F, 35), h(R * F);
  auto loss = [&] {
    swiglu_fwd<double>(h.data(), gu.data(), gu.data() + F, R, F, 2 * F);
    return dot(h, g);
  };
  loss();
  Vec dgu(R * 2 * F, 0.0);
  swiglu_bwd<double>(dgu.data(), dgu.data() + F, g.data(), gu.data(), gu.data() + F, R, F, 2 * F);
  expect_grad("swiglu d(gate, up)", gu, dgu, loss);
}

TEST(OpsFiniteDifference, RoPE) {
  const int64_t B = 2, T = 5, H = 3, D = 8;
  const RopeTable<double> table = make_rope_table<double>(16, D, 10000.0);
  Vec x = randn(B * T * H * D, 36), g = randn(B * T * H * D, 37), y(x.size());
  auto loss = [&] {
    rope_fwd<double>(y.data(), x.data(), table, B * T, T, H, 3);
    return dot(y, g);
  };
  loss();
  Vec dx(x.size());
  rope_bwd<double>(dx.data(), g.data(), table, B * T, T, H, 3);
  expect_grad("rope dx", x, dx, loss);
}

// What RoPE is for, checked without its formula: a rotation per position (norms kept), and the
// score of a query at p and a key at p' depends on p - p' only. theta 1e6 as Mixtral uses.
TEST(RoPE, RotatesAndScoresDependOnRelativePosition) {
  const int64_t D = 16;
  const RopeTable<double> table = make_rope_table<double>(64, D, 1e6);
  const Vec q = randn(D, 38), k = randn(D, 39);
  auto at = [&](const Vec& v, int64_t p) {
    Vec out(D);
    rope_fwd<double>(out.data(), v.data(), table, 1, 1, 1, p);
    return out;
  };
  for (int64_t p : {0, 5, 40}) EXPECT_NEAR(std::sqrt(dot(at(q, p), at(q, p))), std::sqrt(dot(q, q)), 1e-12);
  const double s1 = dot(at(q, 9), at(k, 4)), s2 = dot(at(q, 30), at(k, 25)), s3 = dot(at(q, 9), at(k, 5));
  EXPECT_NEAR(s1, s2, 1e-12);
  EXPECT_GT(std::abs(s1 - s3), 1e-6);  // a different offset gives a different score
  // In place equals out of place; forward then backward is the identity.
  Vec v = randn(D, 40), w = at(v, 7);
  rope_fwd<double>(v.data(), v.data(), table, 1, 1, 1, 7);
  for (int64_t i = 0; i < D; ++i) EXPECT_EQ(v[static_cast<size_t>(i)], w[static_cast<size_t>(i)]);
  rope_bwd<double>(v.data(), v.data(), table, 1, 1, 1, 7);
  const Vec orig = randn(D, 40);
  for (int64_t i = 0; i < D; ++i) EXPECT_NEAR(v[static_cast<size_t>(i)], orig[static_cast<size_t>(i)], 1e-12);
}

}  // namespace
}  // namespace gf::ops
