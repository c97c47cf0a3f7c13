// LoRA's dropout on the adapters' input (PEFT's B(A(dropout(x))), MindFormers' lora_dropout): the adapters'
// gradients are those of the loss the forward computes, masks included (central differences), the masks act in
// training only (an evaluation forward is the model without dropout), and they change the training loss.
// Layout independence of the masks: tests/integration/lora.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "models/registry.h"
#include "parallel/parallel_context.h"
#include "runner/config/config.h"

namespace gf {
namespace {

constexpr const char* kLlama = R"(
model:
  arch: {type: LlamaForCausalLM}
  model_config: {type: LlamaConfig, vocab_size: 64, seq_length: 8, hidden_size: 16, num_layers: 2, num_heads: 2,
                 n_kv_heads: 1, intermediate_size: 24, theta: 10000.0, rms_norm_eps: 1.0e-5,
                 pet_config: {r: 2, lora_alpha: 4, lora_dropout: 0.3,
                              target_modules: [q_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}}
runner_config: {batch_size: 2}
train_dataset: {data_loader: {type: RandomTokens}}
)";

struct Model {
  Config cfg;
  ParallelContext ctx = ParallelContext::single();
  std::unique_ptr<CausalLM> m;
  std::vector<int32_t> tokens;
  explicit Model(float dropout) {
    cfg = load_config_string(kLlama, {"model.model_config.pet_config.lora_dropout=" + std::to_string(dropout)}, "test");
    m = build_model(cfg.model, model_layout(cfg), 2, ctx);
    m->init_frozen(3);
    m->frozen_loaded();
    m->init_weights(5);
    // B starts at zero: give it values, so that A has a gradient and the adapters change the output.
    for (const TensorPlacement& t : m->params().tensors())
      if (t.spec->name.find("lora_B") != std::string::npos)
        for (int64_t i = 0; i < t.numel(); ++i) m->weights()[t.offset + i] = 0.05f * std::sin(0.7f * static_cast<float>(i + t.offset));
    for (int i = 0; i < 2 * 9; ++i) tokens.push_back((i * 37 + 11) % 64);
  }
  double loss(bool training) { return m->forward(tokens.data(), StepInfo{1, 0, training}); }
};

TEST(LoraDropout, AdapterGradientsAreTheMaskedLosssByCentralDifferences) {
  Model a(0.3f);
  const int64_t n = a.m->params().total_floats();
  std::fill(a.m->grads(), a.m->grads() + n, 0.0f);
  a.loss(true);
  a.m->backward(1.0f);
  const std::vector<float> g(a.m->grads(), a.m->grads() + n);
  int checked = 0;
  for (const TensorPlacement& t : a.m->params().tensors()) {
    for (int64_t i : {int64_t{0}, t.numel() / 2, t.numel() - 1}) {
      float* w = a.m->weights() + t.offset + i;
      const float w0 = *w, h = 1e-2f;
      *w = w0 + h;
      const double up = a.loss(true);
      *w = w0 - h;
      const double down = a.loss(true);
      *w = w0;
      const double fd = (up - down) / (2.0 * h), an = g[static_cast<size_t>(t.offset + i)];
      EXPECT_NEAR(an, fd, 2e-2 * std::max(1e-2, std::abs(fd))) << t.spec->name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GE(checked, 24);
}

TEST(LoraDropout, MasksActInTrainingOnly) {
  Model with(0.3f), without(0.0f);
  EXPECT_EQ(with.loss(false), without.loss(false)) << "an evaluation forward must not drop";
  EXPECT_NE(with.loss(true), without.loss(true)) << "the masks change nothing";
  EXPECT_EQ(without.loss(true), without.loss(false));  // the base model has no dropout of its own
}

}  // namespace
}  // namespace gf
