// MoE layers against the dense model they reduce to: when every expert holds the dense MLP's
// weights and the k gate weights are renormalised to sum to 1 (dropless, no router losses), an
// MoE layer computes sum_j w_j MLP(x) = MLP(x), so the loss equals the dense model's and the
// experts' gradients sum to the dense MLP's, for GPT-2 (GELU experts with biases) and Mixtral
// (SwiGLU experts). The arithmetic of the router itself is tests/core/router_test.cpp; the
// PyTorch golden files are tests/models/moe_golden_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "models/blocks/spec.h"
#include "models/registry.h"
#include "parallel/parallel_context.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

ModelConfig tiny(bool llama) {
  ModelConfig m = test::tiny_model({.vocab = 96, .seq = 16, .hidden = 64, .layers = 2, .heads = 4, .dropout = 0.0f});
  if (llama) test::make_llama(m, 2, 96);
  m.use_flash_attention = false;
  return m;
}

std::vector<int32_t> tokens(int64_t B, int64_t T, int64_t V) {
  std::vector<int32_t> t(static_cast<size_t>(B * (T + 1)));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % static_cast<size_t>(V));
  return t;
}

double max_abs(const float* x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::abs(x[i])));
  return m;
}

// The dense MLP parameter an expert parameter copies (its name with the expert part replaced).
std::string dense_name(const std::string& expert, bool llama) {
  if (!llama) {
    std::string n = expert;
    const size_t a = n.find("experts.");
    const size_t b = n.find('.', a + 8);
    n.erase(a, b + 1 - a);  // h.0.mlp.experts.3.c_fc.weight -> h.0.mlp.c_fc.weight
    return n;
  }
  const size_t a = expert.find("block_sparse_moe.");
  const std::string layer = expert.substr(0, a);
  const char w = expert[expert.size() - std::string(".weight").size() - 1];  // ...experts.3.w1.weight: '1'
  const std::string proj = w == '1' ? "gate_proj" : w == '3' ? "up_proj" : "down_proj";
  return layer + "mlp." + proj + ".weight";
}

class MoeReducesToDense : public ::testing::TestWithParam<bool> {};

TEST_P(MoeReducesToDense, IdenticalExpertsGiveTheDenseLossAndGradients) {
  const bool llama = GetParam();
  const int64_t B = 2, T = 16;
  ParallelContext ctx = ParallelContext::single();
  const ModelConfig dense_cfg = tiny(llama);
  ModelConfig moe_cfg = dense_cfg;
  moe_cfg.moe.expert_num = 4;
  moe_cfg.moe.num_experts_chosen = 2;
  moe_cfg.moe.capacity_factor = 0.0;
  moe_cfg.moe.norm_topk_prob = true;
  moe_cfg.moe.aux_loss_factor = 0.0;
  moe_cfg.moe.z_loss_factor = 0.0;
  auto dense = build_model(dense_cfg, ModelLayout{}, B, ctx);
  auto moe = build_model(moe_cfg, ModelLayout{}, B, ctx);
  dense->init_weights(7);
  moe->init_weights(99);  // the router keeps these values
  const Placement& dp = dense->params();
  const Placement& mp = moe->params();
  int64_t experts_copied = 0;
  for (const TensorPlacement& t : mp.tensors()) {
    const std::string& n = t.spec->name;
    if (n.find(llama ? "block_sparse_moe.gate" : "mlp.router") != std::string::npos) continue;
    const std::string src = t.spec->is_expert() ? dense_name(n, llama) : n;
    const TensorPlacement& s = dp.at(src);
    ASSERT_EQ(s.numel(), t.numel()) << n << " from " << src;
    std::copy(dense->weights() + s.offset, dense->weights() + s.offset + s.numel(), moe->weights() + t.offset);
    experts_copied += t.spec->is_expert();
  }
  EXPECT_EQ(experts_copied, 2 * 4 * (llama ? 3 : 4));
  const std::vector<int32_t> tok = tokens(B, T, dense_cfg.vocab_size);
  const double ld = dense->forward(tok.data(), StepInfo{1, 0, true});
  const double lm = moe->forward(tok.data(), StepInfo{1, 0, true});
  EXPECT_NEAR(lm / ld, 1.0, 1e-6) << "dense " << ld << " moe " << lm;
  const std::vector<MoeLayerStats> st = moe->moe_stats();
  ASSERT_EQ(st.size(), 2u);
  int64_t assigned = 0;
  for (int64_t c : st[0].tokens_per_expert) assigned += c;
  EXPECT_EQ(assigned, B * T * 2);
  EXPECT_EQ(st[0].dropped, 0);
  std::fill(dense->grads(), dense->grads() + dp.total_floats(), 0.0f);
  std::fill(moe->grads(), moe->grads() + mp.total_floats(), 0.0f);
  const float gs = 1.0f / static_cast<float>(B * T);
  dense->backward(gs);
  moe->backward(gs);
  // Each dense gradient against the MoE model's (the experts' summed).
  for (const TensorPlacement& s : dp.tensors()) {
    std::vector<double> sum(static_cast<size_t>(s.numel()), 0.0);
    int64_t sources = 0;
    for (const TensorPlacement& t : mp.tensors()) {
      const std::string& n = t.spec->name;
      if (n.find(llama ? "block_sparse_moe.gate" : "mlp.router") != std::string::npos) continue;
      if ((t.spec->is_expert() ? dense_name(n, llama) : n) != s.spec->name) continue;
      for (int64_t i = 0; i < s.numel(); ++i) sum[static_cast<size_t>(i)] += moe->grads()[t.offset + i];
      ++sources;
    }
    ASSERT_GE(sources, 1) << s.spec->name;
    const float* g = dense->grads() + s.offset;
    const double scale = std::max(max_abs(g, s.numel()), 1e-12);
    double err = 0;
    for (int64_t i = 0; i < s.numel(); ++i) err = std::max(err, std::abs(sum[static_cast<size_t>(i)] - g[i]));
    // Float rounding of the weighted sum (w1 y + w2 y against y) through two layers.
    EXPECT_LT(err / scale, 2e-4) << s.spec->name << " from " << sources << " tensor(s)";
  }
  // The router's weights change nothing here (the weights of the k choices always sum to 1):
  // its gradient is rounding noise.
  for (const TensorPlacement& t : mp.tensors()) {
    if (t.spec->name.find(llama ? "block_sparse_moe.gate" : "mlp.router") != std::string::npos) {
      EXPECT_LT(max_abs(moe->grads() + t.offset, t.numel()), 1e-6) << t.spec->name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MoeReducesToDense, ::testing::Values(false, true),
                         [](const auto& i) { return i.param ? std::string("Mixtral") : std::string("GPT2"); });

}  // namespace
}  // namespace gf

namespace gf {
namespace {

// bf16 compute: the experts' products read the weights' bf16 copy, the router stays float32
// (router_dense_type's default). The loss and the gradients follow float32's within bf16's
// rounding: the loss within 1% (8 significant bits, errors averaging over 32 tokens), every
// gradient tensor pointing the same way (cosine > 0.99).
TEST(MoeBf16, FollowsFloat32) {
  for (const bool llama : {false, true}) {
    const int64_t B = 2, T = 16;
    ModelConfig c = tiny(llama);
    c.moe.expert_num = 4;
    c.moe.num_experts_chosen = 2;
    c.moe.capacity_factor = 0.0;
    c.moe.z_loss_factor = 0.01;
    ParallelContext ctx = ParallelContext::single();
    ModelLayout bf16;
    bf16.compute = ComputeDtype::kBFloat16;
    auto f32 = build_model(c, ModelLayout{}, B, ctx);
    auto b16 = build_model(c, bf16, B, ctx);
    f32->init_weights(3);
    b16->init_weights(3);
    const std::vector<int32_t> tok = tokens(B, T, c.vocab_size);
    const double lf = f32->forward(tok.data(), StepInfo{1, 0, true});
    const double lb = b16->forward(tok.data(), StepInfo{1, 0, true});
    EXPECT_NEAR(lb / lf, 1.0, 1e-2) << (llama ? "mixtral" : "gpt2-moe");
    std::fill(f32->grads(), f32->grads() + f32->params().total_floats(), 0.0f);
    std::fill(b16->grads(), b16->grads() + b16->params().total_floats(), 0.0f);
    f32->backward(1.0f / static_cast<float>(B * T));
    b16->backward(1.0f / static_cast<float>(B * T));
    for (const TensorPlacement& t : f32->params().tensors()) {
      double dot = 0, na = 0, nb = 0;
      for (int64_t i = 0; i < t.numel(); ++i) {
        const double a = f32->grads()[t.offset + i], b = b16->grads()[t.offset + i];
        dot += a * b;
        na += a * a;
        nb += b * b;
      }
      if (na == 0) continue;
      EXPECT_GT(dot / std::sqrt(na * nb), 0.99) << t.spec->name << (llama ? " mixtral" : " gpt2-moe");
    }
  }
}

}  // namespace
}  // namespace gf
