// The whole model against golden files written by PyTorch (tools/make_golden.py): logits, loss,
// every gradient, and ten AdamW steps with clipping and a warmup schedule, through the trainer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/safetensors.h"
#include "models/gpt2.h"
#include "runner/trainer.h"

namespace gf {
namespace {

std::string golden(const std::string& name) { return std::string(GF_SOURCE_DIR) + "/tests/golden/" + name; }

// max |a - b| / max |b| over the first n elements; a is read with row stride lda (padding skipped).
double rel_err(const float* a, const std::vector<float>& b, int64_t rows, int64_t cols, int64_t lda) {
  double diff = 0, ref = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      diff = std::max(diff, std::abs(static_cast<double>(a[r * lda + c]) - b[r * cols + c]));
      ref = std::max(ref, std::abs(static_cast<double>(b[r * cols + c])));
    }
  return diff / ref;
}

// Global tensor of parameter `p` (TP = 1: local == global, plus vocabulary padding rows).
double param_rel_err(const ParamSpec& p, const float* arena, const std::vector<float>& ref) {
  const int64_t cols = p.shape.back();
  return rel_err(arena + p.offset, ref, p.global_numel() / cols, cols, cols);
}

// Replays its batch for every step.
class FixedBatch : public BatchSource {
 public:
  explicit FixedBatch(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  int64_t samples_per_epoch() const override { return -1; }
  void read(int64_t, int64_t, int32_t* out) const override { std::copy(tokens_.begin(), tokens_.end(), out); }
  std::string describe() const override { return "golden batch"; }

 private:
  std::vector<int32_t> tokens_;
};

struct GoldenCase {
  SafeTensorsFile f;
  Config cfg;
  int64_t B, T, V;

  explicit GoldenCase(const std::string& file) : f(SafeTensorsFile::open(golden(file))) {
    const auto& m = f.metadata();
    B = std::stoll(m.at("B"));
    T = std::stoll(m.at("T"));
    V = std::stoll(m.at("vocab_size"));
    const std::string sched = m.at("lr_schedule");
    const std::string yaml =
        "runner_config: {batch_size: " + m.at("B") + ", train_steps: " + m.at("total_steps") + "}\n"
        "runner_wrapper: {use_clip_grad: True, max_grad_norm: " + m.at("max_norm") + "}\n"
        "optimizer: {type: AdamWeightDecay, beta1: " + m.at("beta1") + ", beta2: " + m.at("beta2") + ", eps: " + m.at("adam_eps") +
        ", weight_decay: " + m.at("weight_decay") + "}\n"
        "lr_schedule: {type: " + sched + ", learning_rate: " + m.at("learning_rate") + ", lr_end: " + m.at("lr_end") +
        ", warmup_steps: " + m.at("warmup_steps") + ", total_steps: " + m.at("total_steps") +
        (sched == "polynomial" ? ", power: " + m.at("lr_power") : std::string()) + "}\n"
        "train_dataset: {data_loader: {type: RandomTokens}}\n"
        "callbacks: [{type: MFLossMonitor, per_print_times: 1000}]\n"
        "output_dir: " + std::string(GF_BINARY_DIR) + "/test_output/golden\n"
        "model:\n  arch: {type: GPT2LMHeadModel}\n  model_config:\n    type: GPT2Config\n"
        "    vocab_size: " + m.at("vocab_size") + "\n    seq_length: " + m.at("T") + "\n    max_position_embeddings: " +
        m.at("n_positions") + "\n    hidden_size: " + m.at("n_embd") + "\n    num_layers: " + m.at("n_layer") +
        "\n    num_heads: " + m.at("n_head") + "\n    hidden_act: " + m.at("activation") +
        "\n    layernorm_epsilon: " + m.at("layer_norm_epsilon") +
        "\n    hidden_dropout_rate: 0.0\n    attention_dropout_rate: 0.0\n";
    cfg = load_config_string(yaml, {}, file);
  }

  void load_weights(CausalLM& model) const {
    for (const ParamSpec& p : model.params().specs()) {
      const std::vector<float> w = f.floats("weights." + p.name);
      float* dst = model.weights() + p.offset;
      for (int64_t i = 0; i < p.numel(); ++i) {
        const int64_t g = model.params().global_index(p, i);
        dst[i] = g < 0 ? 0.0f : w[static_cast<size_t>(g)];
      }
    }
  }
};

class Gpt2Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(Gpt2Golden, LogitsLossAndEveryGradientMatchPyTorch) {
  GoldenCase g(GetParam());
  ParallelContext ctx = ParallelContext::single();
  GPT2LMHeadModel model(g.cfg.model, g.B, ctx);
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
  for (const ParamSpec& p : model.params().specs()) {
    const double e = param_rel_err(p, model.grads(), g.f.floats("grads." + p.name));
    EXPECT_LE(e, 1e-4) << "gradient of " << p.name;
    ++checked;
  }
  EXPECT_EQ(checked, 4 + 12 * g.cfg.model.num_layers);
  // The vocabulary padding rows get no gradient.
  const ParamSpec& wte = model.params().at("wte.weight");
  for (int64_t i = g.V * g.cfg.model.hidden_size; i < wte.numel(); ++i) ASSERT_EQ(model.grads()[wte.offset + i], 0.0f);
}

TEST_P(Gpt2Golden, TenAdamWStepsWithClippingMatchPyTorch) {
  GoldenCase g(GetParam());
  ParallelContext ctx = ParallelContext::single();
  Trainer trainer(g.cfg, ctx, std::make_unique<FixedBatch>(g.f.ints("tokens")));
  g.load_weights(trainer.model());
  const auto losses = g.f.floats("train.losses"), lrs = g.f.floats("train.lr"), norms = g.f.floats("train.grad_norms");
  ASSERT_EQ(trainer.total_steps(), static_cast<int64_t>(losses.size()));
  for (int64_t s = 1; s <= trainer.total_steps(); ++s) {
    const StepResult r = trainer.train_step(s);
    const size_t i = static_cast<size_t>(s - 1);
    EXPECT_LE(std::abs(r.loss - losses[i]) / std::abs(losses[i]), 1e-5) << "step " << s << ": " << r.loss << " vs " << losses[i];
    EXPECT_LE(std::abs(r.lr - lrs[i]) / lrs[i], 1e-6) << "lr at step " << s;
    EXPECT_LE(std::abs(r.grad_norm - norms[i]) / norms[i], 1e-4) << "grad norm at step " << s;
  }
  for (const char* name : {"h.1.mlp.c_fc.weight", "wpe.weight", "ln_f.weight"}) {
    const ParamSpec& p = trainer.model().params().at(name);
    EXPECT_LE(param_rel_err(p, trainer.model().weights(), g.f.floats(std::string("train.final.") + name)), 1e-4)
        << "weights after 10 steps: " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, Gpt2Golden, ::testing::Values("gpt2_tiny.safetensors", "gpt2_tiny_gelu.safetensors"));

}  // namespace
}  // namespace gf
