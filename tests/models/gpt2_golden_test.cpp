// The whole model against golden files written by PyTorch (tools/make_golden.py): logits, loss,
// every gradient, and ten AdamW steps with clipping and a warmup schedule, through the trainer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/io/safetensors.h"
#include "models/arch/gpt2.h"
#include "tests/models/golden_case.h"
#include "runner/train/trainer.h"

namespace gf {
namespace {

using namespace golden_case;

class Gpt2Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(Gpt2Golden, LogitsLossAndEveryGradientMatchPyTorch) {
  GoldenCase g(GetParam());
  ParallelContext ctx = ParallelContext::single();
  GPT2LMHeadModel model(g.cfg.model, model_layout(g.cfg), g.B, ctx);
  g.load_weights(model);
  const std::vector<int32_t> tokens = g.f.ints("tokens");
  std::fill(model.grads(), model.grads() + model.params().total_floats(), 0.0f);
  const double loss = model.forward(tokens.data(), StepInfo{1, 0, true}) / static_cast<double>(g.B * g.T);
  const double ref_loss = g.f.floats("loss")[0];
  EXPECT_LE(std::abs(loss - ref_loss) / std::abs(ref_loss), 1e-5) << "loss " << loss << " vs PyTorch " << ref_loss;
  const double logit_err = rel_err(model.logits(), g.f.floats("logits"), g.B * g.T, g.V, model.logits_ld());
  EXPECT_LE(logit_err, 1e-5) << "logits";
  model.backward(1.0f / static_cast<float>(g.B * g.T));
  int checked = 0;
  for (const TensorPlacement& p : model.params().tensors()) {
    const double e = param_rel_err(p, model.grads(), g.f.floats("grads." + p.spec->name));
    EXPECT_LE(e, 1e-4) << "gradient of " << p.spec->name;
    ++checked;
  }
  EXPECT_EQ(checked, 4 + 12 * g.cfg.model.num_layers);
  // The vocabulary padding rows get no gradient.
  const TensorPlacement& wte = model.params().at("wte.weight");
  for (int64_t i = g.V * g.cfg.model.hidden_size; i < wte.numel(); ++i) ASSERT_EQ(model.grads()[wte.offset + i], 0.0f);
}

TEST_P(Gpt2Golden, TenAdamWStepsWithClippingMatchPyTorch) {
  GoldenCase g(GetParam());
  ParallelContext ctx = ParallelContext::single();
  Trainer trainer(g.cfg, ctx, g.batch());
  g.load_and_expect_steps_match(trainer);
  for (const char* name : {"h.1.mlp.c_fc.weight", "wpe.weight", "ln_f.weight"}) {
    const TensorPlacement& p = trainer.model().params().at(name);
    EXPECT_LE(param_rel_err(p, trainer.model().weights(), g.f.floats(std::string("train.final.") + name)), 1e-4)
        << "weights after 10 steps: " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, Gpt2Golden, ::testing::Values("gpt2_tiny.safetensors", "gpt2_tiny_gelu.safetensors"));

}  // namespace
}  // namespace gf
