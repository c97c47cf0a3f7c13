// The Llama (LlamaForCausalLM) against golden files written by PyTorch from Hugging Face's semantics
// (tools/make_llama_golden.py, model in tools/torch_llama.py): Hugging Face's parameter names and
// shapes, logits, loss, every gradient, ten AdamW steps with clipping and warmup through the
// trainer, for an untied and a tied head; and a sharded Hugging Face checkpoint loads the same bits.
//
// llama_tiny: vocab 96 (padded to 128 here), hidden 64, 2 layers, 4 heads of 16, 2 key/value heads,
// SwiGLU 96, RoPE theta 1e6, RMSNorm eps 1e-5, B 2, T 16. llama_tiny_tied: the same sizes, tied head.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/safetensors.h"
#include "models/registry.h"
#include "parallel/parallel_context.h"
#include "runner/train/trainer.h"
#include "tests/models/golden_case.h"

namespace gf {
namespace {

using namespace golden_case;

// The parameters whose first dimension is the vocabulary (padded with zero rows at the end).
const char* const kVocabParams[] = {"model.embed_tokens.weight", "lm_head.weight"};

// Every element of `p` past its first vocab_size rows (the padding) is zero in `arena`.
void expect_padding_rows_zero(const TensorPlacement& p, const float* arena, int64_t V, const char* what) {
  const int64_t C = p.spec->shape.back();
  int64_t nonzero = 0;
  for (int64_t i = V * C; i < p.numel(); ++i) nonzero += arena[p.offset + i] != 0.0f;
  EXPECT_EQ(nonzero, 0) << what << " of " << p.spec->name << ": vocabulary padding rows [" << V << ", "
                        << p.numel() / C << ") must stay zero";
}

class LlamaGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaGolden, ParametersHaveHuggingFacesNamesAndShapes) {
  GoldenCase g(GetParam());
  ParallelContext ctx = ParallelContext::single();
  const std::unique_ptr<CausalLM> model = g.build(ctx);
  const ParamTable& table = model->params().table();
  const std::set<std::string> in_file = g.names_under({"weights."});
  std::set<std::string> in_model;
  for (const ParamSpec& p : table.specs()) {
    in_model.insert(p.name);
    if (g.f.has("weights." + p.name)) {
      EXPECT_EQ(p.shape, g.f.get("weights." + p.name).shape) << "global shape of " << p.name;
    }
  }
  EXPECT_EQ(in_model, in_file) << "the model's parameter names are not Hugging Face's";
  const bool tied = g.cfg.model.tie_word_embeddings;
  EXPECT_EQ(table.specs().size(), static_cast<size_t>(2 + 9 * g.cfg.model.num_layers + (tied ? 0 : 1)));
  EXPECT_EQ(table.find("lm_head.weight") != nullptr, !tied);
  g.expect_vocab_stored_padded(*model, kVocabParams);  // TP = 1: [padded vocab, C], the real rows first
}

TEST_P(LlamaGolden, LogitsLossAndEveryGradientMatchPyTorch) {
  GoldenCase g(GetParam());
  ParallelContext ctx = ParallelContext::single();
  const std::unique_ptr<CausalLM> model = g.build(ctx);
  g.load_weights(*model);
  const int checked = g.expect_forward_backward_match(*model);
  EXPECT_EQ(checked, 2 + 9 * g.cfg.model.num_layers + (g.cfg.model.tie_word_embeddings ? 0 : 1));
  // The vocabulary padding rows get no gradient.
  for (const char* name : kVocabParams)
    if (const TensorPlacement* p = model->params().find(name))
      expect_padding_rows_zero(*p, model->grads(), g.V, "gradient");
}

TEST_P(LlamaGolden, TenAdamWStepsWithClippingMatchPyTorch) {
  GoldenCase g(GetParam());
  ParallelContext ctx = ParallelContext::single();
  Trainer trainer(g.cfg, ctx, g.batch());
  g.load_and_expect_steps_match(trainer);
  int checked = 0;
  for (const auto& [name, key] : g.final_weights()) {
    const TensorPlacement& p = trainer.model().params().at(name);
    EXPECT_LE(param_rel_err(p, trainer.model().weights(), g.f.floats(key)), 1e-4) << "weights after 10 steps: " << name;
    ++checked;
  }
  EXPECT_GE(checked, 4);
  for (const char* name : kVocabParams)
    if (const TensorPlacement* p = trainer.model().params().find(name))
      expect_padding_rows_zero(*p, trainer.model().weights(), g.V, "weights after 10 steps");
}

INSTANTIATE_TEST_SUITE_P(PyTorch, LlamaGolden,
                         ::testing::Values("llama_tiny.safetensors", "llama_tiny_tied.safetensors"));

// A sharded Hugging Face checkpoint (model.safetensors.index.json naming two shards) gives exactly the
// weights of the golden file, padding rows zero.
TEST(LlamaGoldenSharded, ShardedCheckpointLoadsTheSameBitsAsTheGoldenWeights) {
  GoldenCase g("llama_tiny.safetensors");
  ParallelContext ctx = ParallelContext::single();
  const std::unique_ptr<CausalLM> sharded = g.build(ctx);
  const std::unique_ptr<CausalLM> direct = g.build(ctx);
  sharded->load_hf_checkpoint(golden("llama_tiny_sharded"));
  g.load_weights(*direct);
  for (const TensorPlacement& p : direct->params().tensors()) {
    const TensorPlacement& q = sharded->params().at(p.spec->name);
    ASSERT_EQ(q.numel(), p.numel()) << p.spec->name;
    EXPECT_EQ(std::memcmp(sharded->weights() + q.offset, direct->weights() + p.offset, sizeof(float) * p.numel()), 0)
        << "weights of " << p.spec->name << " loaded from llama_tiny_sharded/";
  }
  // One shard alone lacks half of the tensors.
  EXPECT_THROW(sharded->load_hf_checkpoint(golden("llama_tiny_sharded/model-00001-of-00002.safetensors")),
               std::runtime_error);
}

}  // namespace
}  // namespace gf
