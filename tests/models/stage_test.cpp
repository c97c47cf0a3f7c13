// Stages and the split backward, on one rank: the model run as consecutive layer ranges, the
// hidden state handed from one to the next, gives bitwise the whole model's loss and gradients;
// the backward run as an input pass and a later weight pass (zero-bubble style, over two
// micro-batch slots) gives bitwise the fused backward's gradients; and a model allocates exactly
// the activation bytes its plan computed without building it. GPT-2 (dropout on, tied head,
// LayerNorm, GELU) and Llama (GQA, RoPE, RMSNorm, SwiGLU, untied head).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

ModelConfig gpt2_cfg() {
  return test::tiny_model({.vocab = 97, .seq = 16, .hidden = 32, .layers = 3, .heads = 4, .act = "gelu_new",
                           .dropout = 0.1f});
}

ModelConfig llama_cfg() {
  ModelConfig c = gpt2_cfg();
  test::make_llama(c, 2, 48);
  c.rope_theta = 1e6;
  c.hidden_dropout_rate = c.attention_dropout_rate = 0.0f;  // MindFormers' Llama has none
  return c;
}

std::unique_ptr<TransformerLM> build(const ModelConfig& c, int64_t B, const StageOptions& st = {},
                                     const ModelLayout& layout = {}) {
  static ParallelContext ctx = ParallelContext::single();  // outlives the models, which keep its communicators
  if ((c.type == "LlamaConfig")) return std::make_unique<LlamaForCausalLM>(c, layout, B, ctx, st);
  return std::make_unique<GPT2LMHeadModel>(c, layout, B, ctx, st);
}

std::vector<int32_t> tokens(const ModelConfig& c, int64_t B, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(B * (c.seq_length + 1)));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 31 + 7 * salt) % c.vocab_size);
  return t;
}

void init(TransformerLM& m) {
  m.init_weights(11);
  std::fill(m.grads(), m.grads() + m.params().total_floats(), 0.0f);
}

std::vector<float> grad_of(TransformerLM& m, const std::string& name) {
  const TensorPlacement& p = m.params().at(name);
  return std::vector<float>(m.grads() + p.offset, m.grads() + p.offset + p.numel());
}

void expect_same_grads(TransformerLM& a, TransformerLM& b, const std::string& what) {
  for (const ParamSpec& p : a.params().table().specs())
    EXPECT_TRUE(grad_of(a, p.name) == grad_of(b, p.name)) << what << ": gradient of " << p.name;
}

class Models : public ::testing::TestWithParam<bool> {  // llama?
 protected:
  ModelConfig cfg() const { return GetParam() ? llama_cfg() : gpt2_cfg(); }
};

// The whole model against the same model cut into ranges; returns nothing, asserts bitwise.
void check_ranges(const ModelConfig& c, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  const int64_t B = 2;
  const std::vector<int32_t> tok = tokens(c, B, 1);
  const StepInfo info{3, 4, true};
  auto whole = build(c, B);
  init(*whole);
  const double loss = whole->forward(tok.data(), info);
  whole->backward(0.05f);

  std::vector<std::unique_ptr<TransformerLM>> stages;
  for (auto [l0, l1] : ranges) {
    StageOptions st;
    st.layer_begin = l0;
    st.layer_end = l1;
    stages.push_back(build(c, B, st));
    init(*stages.back());
  }
  double staged_loss = 0.0;
  const float* h = nullptr;
  for (auto& s : stages) {
    staged_loss = s->stage_forward(0, tok.data(), h, info);
    h = s->stage_output(0);
  }
  EXPECT_EQ(loss, staged_loss);
  // Backward from the last stage to the first. A tied embedding's gradient is handed from the
  // last stage (the head's part) to the first, which adds the embedding's part to it: the order
  // the whole model sums them in (the pipeline's embedding group does this hand-over).
  const float* dh = nullptr;
  for (size_t i = stages.size(); i-- > 0;) {
    TransformerLM& s = *stages[i];
    if (i == 0 && stages.size() > 1 && !(c.type == "LlamaConfig")) {
      const TensorPlacement& mine = s.params().at("wte.weight");
      const TensorPlacement& last = stages.back()->params().at("wte.weight");
      std::memcpy(s.grads() + mine.offset, stages.back()->grads() + last.offset, sizeof(float) * mine.numel());
    }
    s.stage_backward(0, BwdPass::kBoth, dh, 0.05f);
    dh = s.input_grad();
  }
  int checked = 0;
  for (const ParamSpec& p : whole->params().table().specs()) {
    // The first stage that holds the parameter (the tied embedding: the first, after the hand-over).
    for (auto& s : stages)
      if (s->params().find(p.name)) {
        EXPECT_TRUE(grad_of(*whole, p.name) == grad_of(*s, p.name)) << "gradient of " << p.name;
        ++checked;
        break;
      }
  }
  EXPECT_EQ(checked, static_cast<int>(whole->params().tensors().size()));
}

TEST_P(Models, TwoAndThreeLayerRangesGiveTheWholeModelsLossAndGradientsBitwise) {
  check_ranges(cfg(), {{0, 1}, {1, 3}});
  check_ranges(cfg(), {{0, 2}, {2, 3}});
  check_ranges(cfg(), {{0, 1}, {1, 2}, {2, 3}});
}

TEST_P(Models, InputThenLaterWeightPassGivesTheFusedGradientsBitwise) {
  for (const char* dtype : {"float32", "bfloat16"}) {
    const ModelConfig c = cfg();
    ModelLayout layout;
    layout.compute = parse_compute_dtype(dtype);
    const int64_t B = 2;
    const std::vector<int32_t> t0 = tokens(c, B, 1), t1 = tokens(c, B, 2);
    const StepInfo i0{3, 0, true}, i1{3, 2, true};
    auto fused = build(c, B, {}, layout);
    init(*fused);
    const double l0 = fused->forward(t0.data(), i0);
    fused->backward(0.05f);
    const double l1 = fused->forward(t1.data(), i1);
    fused->backward(0.05f);

    auto split = build(c, B, test::split_backward_stage(), layout);
    init(*split);
    // Both forwards, both input passes, then the weight passes (what a zero-bubble schedule may do).
    EXPECT_EQ(split->stage_forward(0, t0.data(), nullptr, i0), l0) << dtype;
    EXPECT_EQ(split->stage_forward(1, t1.data(), nullptr, i1), l1) << dtype;
    split->stage_backward(0, BwdPass::kInput, nullptr, 0.05f);
    split->stage_backward(1, BwdPass::kInput, nullptr, 0.05f);
    split->stage_backward(0, BwdPass::kWeight, nullptr, 0.05f);
    split->stage_backward(1, BwdPass::kWeight, nullptr, 0.05f);
    expect_same_grads(*fused, *split, dtype);
  }
}

TEST_P(Models, SplitPassesNeedDeferWeightGrads) {
  auto m = build(cfg(), 2);
  init(*m);
  const std::vector<int32_t> t = tokens(cfg(), 2, 1);
  m->forward(t.data(), StepInfo{1, 0, true});
  EXPECT_THROW(m->stage_backward(0, BwdPass::kInput, nullptr, 1.0f), std::logic_error);
  EXPECT_THROW(m->stage_backward(0, BwdPass::kWeight, nullptr, 1.0f), std::logic_error);
}

// Planned activation bytes (sized from the config, nothing built) equal what the model allocates
// besides its parameters, gradients and low-precision copy, under every recompute mode.
TEST_P(Models, PlannedActivationBytesEqualAllocatedBytes) {
  struct Mode {
    bool recompute, select;
    int64_t layers;
    bool flash;
    const char* dtype;
  };
  const Mode modes[] = {{false, false, -1, false, "float32"}, {true, false, -1, false, "float32"},
                        {false, true, -1, false, "float32"},  {true, false, 2, false, "float32"},
                        {false, true, 1, false, "bfloat16"},  {false, false, -1, true, "float32"},
                        {true, false, -1, true, "bfloat16"}};
  for (const Mode& md : modes) {
    ModelConfig c = cfg();
    ModelLayout layout;
    layout.recompute = md.recompute ? RecomputePolicy::kFull
                       : md.select  ? RecomputePolicy::kSelective
                                    : RecomputePolicy::kNone;
    layout.recompute_num_layers = md.layers;
    layout.compute = parse_compute_dtype(md.dtype);
    if (md.flash && (c.type == "LlamaConfig")) c.num_kv_heads = c.num_heads;  // the fused core reads multi-head shapes
    c.use_flash_attention = md.flash;
    const TransformerSpec spec = (c.type == "LlamaConfig") ? llama_spec(c) : gpt2_spec(c);
    const int64_t planned = TransformerLM::activation_plan(spec, c, layout, 3, 0).bytes();
    const int64_t before = aligned_buffer_live_bytes();
    auto m = build(c, 3, {}, layout);
    const int64_t params = m->params().total_floats();
    auto padded = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
    const int64_t arenas = 2 * padded(4 * params) + padded(m->weight_copy_bytes());
    const std::string what = std::string("recompute ") + (md.recompute ? "full" : md.select ? "selective" : "none") +
                             " layers " + std::to_string(md.layers) + (md.flash ? " flash " : " ") + md.dtype;
    EXPECT_EQ(aligned_buffer_live_bytes() - before - arenas, planned) << what;
    EXPECT_EQ(m->activation_bytes(), planned) << what;
    EXPECT_GT(planned, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(GptAndLlama, Models, ::testing::Values(false, true),
                         [](const auto& i) { return std::string(i.param ? "Llama" : "GPT2"); });

}  // namespace
}  // namespace gf
