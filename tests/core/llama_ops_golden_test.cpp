// Llama's ops in float against PyTorch, written from Hugging Face's modeling_llama.py
// (tests/golden/llama_ops.safetensors, tools/make_llama_ops_golden.py): RMSNorm, RoPE in the
// rotate-half convention with HF's float32 frequency tables (theta 1e6 and 1e4, positions from 5),
// SwiGLU. Forward within 1e-5 and gradients within 1e-5 of the largest magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/attention.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "core/io/safetensors.h"
#include "tests/core/golden_compare.h"

namespace gf::ops {
namespace {

const SafeTensorsFile& golden() {
  static const SafeTensorsFile f =
      SafeTensorsFile::open(std::string(GF_SOURCE_DIR) + "/tests/golden/llama_ops.safetensors");
  return f;
}
std::vector<float> golden_ref(const std::string& n) { return golden().floats(n); }

using golden::expect_close;

TEST(LlamaOpsVsPyTorch, RMSNorm) {
  for (const auto& [tag, eps] : {std::pair{"rmsnorm", 1e-6f}, std::pair{"rmsnorm_eps5", 1e-5f}}) {
    const std::string t = tag;
    auto x = golden_ref(t + ".x"), w = golden_ref(t + ".w"), dy = golden_ref(t + ".dy");
    const int64_t D = static_cast<int64_t>(w.size()), R = static_cast<int64_t>(x.size()) / D;
    std::vector<float> y(x.size()), rstd(R), dx(x.size(), 0.f), dw(D, 0.f);
    rmsnorm_fwd<float>(y.data(), rstd.data(), x.data(), w.data(), R, D, eps);
    rmsnorm_bwd<float>(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), R, D);
    expect_close(y, golden_ref(t + ".y"), 1e-5, t + " y");
    expect_close(dx, golden_ref(t + ".dx"), 1e-5, t + " dx");
    expect_close(dw, golden_ref(t + ".dw"), 1e-5, t + " dw");
  }
}

TEST(LlamaOpsVsPyTorch, RoPE) {
  constexpr int64_t B = 2, T = 12, H = 3, D = 16, pos0 = 5;
  for (const auto& [tag, theta] : {std::pair{"rope_theta1e6", 1e6}, std::pair{"rope_theta1e4", 1e4}}) {
    const std::string t = tag;
    const RopeTable<float> table = make_rope_table<float>(64, D, theta);
    auto x = golden_ref(t + ".x"), dy = golden_ref(t + ".dy");
    ASSERT_EQ(x.size(), static_cast<size_t>(B * T * H * D));
    std::vector<float> y(x.size()), dx(x.size());
    rope_fwd<float>(y.data(), x.data(), table, B * T, T, H, pos0);
    rope_bwd<float>(dx.data(), dy.data(), table, B * T, T, H, pos0);
    expect_close(y, golden_ref(t + ".y"), 1e-5, t + " y");
    expect_close(dx, golden_ref(t + ".dx"), 1e-5, t + " dx");
  }
}

TEST(LlamaOpsVsPyTorch, SwiGLU) {
  auto g = golden_ref("swiglu.g"), u = golden_ref("swiglu.u"), dh = golden_ref("swiglu.dh");
  const int64_t cols = 33, rows = static_cast<int64_t>(g.size()) / cols;
  std::vector<float> h(g.size()), dg(g.size(), 0.f), du(g.size(), 0.f);
  swiglu_fwd<float>(h.data(), g.data(), u.data(), rows, cols, cols);
  swiglu_bwd<float>(dg.data(), du.data(), dh.data(), g.data(), u.data(), rows, cols, cols);
  expect_close(h, golden_ref("swiglu.h"), 1e-5, "swiglu h");
  expect_close(dg, golden_ref("swiglu.dg"), 1e-5, "swiglu dg");
  expect_close(du, golden_ref("swiglu.du"), 1e-5, "swiglu du");
}

// Grouped-query attention (8 query heads, 2 kv heads) as Hugging Face's eager attention computes it
// with repeat_kv.
TEST(LlamaOpsVsPyTorch, GroupedQueryAttention) {
  constexpr int64_t B = 2, T = 7, H = 8, G = 2, D = 4;
  auto qkv = golden_ref("gqa.qkv"), dy = golden_ref("gqa.dy");
  ASSERT_EQ(qkv.size(), static_cast<size_t>(B * T * (H + 2 * G) * D));
  std::vector<float> y(B * T * H * D), probs(B * H * T * T), dqkv(qkv.size(), 0.f);
  AttentionShape s{B, T, H, D, 0, 0, H, G};
  attention_fwd<float>(y.data(), probs.data(), qkv.data(), s, DropoutKey{});
  attention_bwd<float>(dqkv.data(), dy.data(), qkv.data(), probs.data(), s, DropoutKey{});
  expect_close(y, golden_ref("gqa.y"), 1e-5, "gqa y");
  expect_close(dqkv, golden_ref("gqa.dqkv"), 1e-5, "gqa dqkv");
}

}  // namespace
}  // namespace gf::ops
