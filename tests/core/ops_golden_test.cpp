// Each op's float forward and backward against PyTorch (float64 reference, tests/golden/ops.safetensors,
// written by tools/make_golden.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/ops/activation.h"
#include "core/ops/attention.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/layernorm.h"
#include "core/ops/linear.h"
#include "core/io/safetensors.h"
#include "tests/core/golden_compare.h"

namespace gf::ops {
namespace {

const SafeTensorsFile& ops_file() {
  static const SafeTensorsFile f = SafeTensorsFile::open(std::string(GF_SOURCE_DIR) + "/tests/golden/ops.safetensors");
  return f;
}
std::vector<float> T(const std::string& n) { return ops_file().floats(n); }

using golden::expect_close;

TEST(OpsVsPyTorch, LayerNorm) {
  auto x = T("layernorm.x"), w = T("layernorm.w"), b = T("layernorm.b"), dy = T("layernorm.dy");
  const int64_t D = static_cast<int64_t>(w.size()), R = static_cast<int64_t>(x.size()) / D;
  std::vector<float> y(x.size()), mean(R), rstd(R), dx(x.size(), 0.f), dw(D, 0.f), db(D, 0.f);
  layernorm_fwd<float>(y.data(), {mean.data(), rstd.data()}, x.data(), w.data(), b.data(), R, D, 1e-5f);
  layernorm_bwd<float>(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), {mean.data(), rstd.data()}, R, D);
  expect_close(y, T("layernorm.y"), 1e-5, "layernorm y");
  expect_close(dx, T("layernorm.dx"), 1e-5, "layernorm dx");
  expect_close(dw, T("layernorm.dw"), 1e-5, "layernorm dw");
  expect_close(db, T("layernorm.db"), 1e-5, "layernorm db");
}

TEST(OpsVsPyTorch, Activations) {
  for (const char* name : {"gelu", "gelu_new", "fast_gelu"}) {
    const Activation a = parse_activation(name);
    auto x = T(std::string(name) + ".x"), dy = T(std::string(name) + ".dy");
    std::vector<float> y(x.size()), dx(x.size(), 0.f);
    activation_fwd<float>(a, y.data(), x.data(), static_cast<int64_t>(x.size()));
    activation_bwd<float>(a, dx.data(), dy.data(), x.data(), static_cast<int64_t>(x.size()));
    expect_close(y, T(std::string(name) + ".y"), 1e-6, std::string(name) + " y");
    expect_close(dx, T(std::string(name) + ".dx"), 1e-5, std::string(name) + " dx");
  }
}

TEST(OpsVsPyTorch, Linear) {
  auto x = T("linear.x"), w = T("linear.W"), b = T("linear.b"), dy = T("linear.dy");
  const int64_t O = static_cast<int64_t>(b.size()), I = static_cast<int64_t>(w.size()) / O, N = static_cast<int64_t>(x.size()) / I;
  std::vector<float> y(N * O), dx(x.size(), 0.f), dw(w.size(), 0.f), db(O, 0.f);
  linear_fwd<float>(y.data(), x.data(), w.data(), b.data(), N, I, O);
  linear_bwd<float>(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, I, O);
  expect_close(y, T("linear.y"), 1e-6, "linear y");
  expect_close(dx, T("linear.dx"), 1e-6, "linear dx");
  expect_close(dw, T("linear.dW"), 1e-6, "linear dW");
  expect_close(db, T("linear.db"), 1e-6, "linear db");
}

TEST(OpsVsPyTorch, CausalAttention) {
  // PyTorch's tensors are [B, H, T, D]; ours are packed [B, T, 3*H*D] (q | k | v).
  auto q = T("attention.q"), k = T("attention.k"), v = T("attention.v"), dy = T("attention.dy");
  const auto& shape = ops_file().get("attention.q").shape;
  const int64_t B = shape[0], H = shape[1], S = shape[2], D = shape[3], C = H * D;
  std::vector<float> qkv(B * S * 3 * C), dyp(B * S * C);
  auto idx = [&](int64_t b, int64_t h, int64_t t, int64_t d) { return ((b * H + h) * S + t) * D + d; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t d = 0; d < D; ++d) {
          float* row = qkv.data() + (b * S + t) * 3 * C + h * D + d;
          row[0] = q[idx(b, h, t, d)];
          row[C] = k[idx(b, h, t, d)];
          row[2 * C] = v[idx(b, h, t, d)];
          dyp[(b * S + t) * C + h * D + d] = dy[idx(b, h, t, d)];
        }
  std::vector<float> y(B * S * C), probs(B * H * S * S), dqkv(qkv.size(), 0.f);
  AttentionShape s{B, S, H, D};
  attention_fwd<float>(y.data(), probs.data(), qkv.data(), s, DropoutKey{});
  attention_bwd<float>(dqkv.data(), dyp.data(), qkv.data(), probs.data(), s, DropoutKey{});
  std::vector<float> out(q.size()), dq(q.size()), dk(q.size()), dv(q.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t d = 0; d < D; ++d) {
          const float* g = dqkv.data() + (b * S + t) * 3 * C + h * D + d;
          out[idx(b, h, t, d)] = y[(b * S + t) * C + h * D + d];
          dq[idx(b, h, t, d)] = g[0];
          dk[idx(b, h, t, d)] = g[C];
          dv[idx(b, h, t, d)] = g[2 * C];
        }
  expect_close(out, T("attention.out"), 1e-5, "attention out");
  expect_close(dq, T("attention.dq"), 1e-5, "attention dq");
  expect_close(dk, T("attention.dk"), 1e-5, "attention dk");
  expect_close(dv, T("attention.dv"), 1e-5, "attention dv");
}

TEST(OpsVsPyTorch, CrossEntropy) {
  auto logits = T("cross_entropy.logits");
  const auto tgt = ops_file().ints("cross_entropy.targets");
  const int64_t R = static_cast<int64_t>(tgt.size()), V = static_cast<int64_t>(logits.size()) / R;
  std::vector<float> losses(R), lse(R);
  cross_entropy_fwd<float>(losses.data(), lse.data(), logits.data(), tgt.data(), R, V, V);
  double mean = 0;
  for (float l : losses) mean += l / R;
  const double ref = T("cross_entropy.loss")[0];
  EXPECT_LE(std::abs(mean - ref) / ref, 1e-6);
  cross_entropy_bwd_inplace<float>(logits.data(), lse.data(), tgt.data(), R, V, V, 1.0f / static_cast<float>(R));
  expect_close(logits, T("cross_entropy.dlogits"), 1e-5, "cross_entropy dlogits");
}

}  // namespace
}  // namespace gf::ops
