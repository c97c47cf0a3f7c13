// The split backward under tensor and sequence parallelism: every tensor-parallel rank's
// gradients after two input passes and two later weight passes (the column- and row-parallel
// layers' halves, the weight passes gathering again under SP what they read) are bitwise those
// of the fused backward, for GPT-2 and for a grouped-query Llama, with the vocabulary split and
// replicated, in fp32 and bf16. All ranks form one tensor-parallel group (1-4 ranks).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

ModelConfig config(bool llama, int tp) {
  // rows of 12: divisible by 1-4 ranks (sequence parallel)
  ModelConfig c = test::tiny_model({.vocab = 97, .seq = 12, .hidden = 96, .layers = 2, .heads = 12});
  if (llama) {
    test::make_llama(c, tp == 3 ? 12 : 4, 96);  // grouped-query where the kv heads divide over the ranks
    c.hidden_dropout_rate = c.attention_dropout_rate = 0.0f;
  }
  return c;
}

std::unique_ptr<TransformerLM> build(const ModelConfig& c, const ModelLayout& layout, const ParallelContext& ctx,
                                     const StageOptions& st) {
  if ((c.type == "LlamaConfig")) return std::make_unique<LlamaForCausalLM>(c, layout, 2, ctx, st);
  return std::make_unique<GPT2LMHeadModel>(c, layout, 2, ctx, st);
}

std::vector<int32_t> tokens(const ModelConfig& c, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(2 * (c.seq_length + 1)));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 37 + 11 * salt) % c.vocab_size);
  return t;
}

TEST(SplitBackwardMpi, InputThenWeightPassesGiveTheFusedGradientsOnEveryRank) {
  Communicator world = Communicator::world();
  const int W = world.size();
  ParallelContext ctx = ParallelContext::build(std::move(world), ProcessGrid({{GridAxis::kDp, W}}));
  for (bool llama : {false, true})
    for (bool vocab_split : {false, true})
      for (const char* dtype : {"float32", "bfloat16"}) {
        const ModelConfig c = config(llama, W);
        ModelLayout layout;
        layout.tp = ctx.size(GridAxis::kTp);
        layout.sequence_parallel = true;
        layout.vocab_split = vocab_split;
        layout.compute = parse_compute_dtype(dtype);
        const std::string what = std::string(llama ? "llama" : "gpt2") + (vocab_split ? " vocab split " : " ") + dtype;
        const std::vector<int32_t> t0 = tokens(c, 1), t1 = tokens(c, 2);
        const StepInfo i0{2, 0, true}, i1{2, 2, true};
        auto fused = build(c, layout, ctx, {});
        fused->init_weights(5);
        const double l0 = fused->forward(t0.data(), i0);
        fused->backward(0.1f);
        const double l1 = fused->forward(t1.data(), i1);
        fused->backward(0.1f);
        auto split = build(c, layout, ctx, test::split_backward_stage());
        split->init_weights(5);
        EXPECT_EQ(split->stage_forward(0, t0.data(), nullptr, i0), l0) << what;
        EXPECT_EQ(split->stage_forward(1, t1.data(), nullptr, i1), l1) << what;
        split->stage_backward(0, BwdPass::kInput, nullptr, 0.1f);
        split->stage_backward(1, BwdPass::kInput, nullptr, 0.1f);
        split->stage_backward(0, BwdPass::kWeight, nullptr, 0.1f);
        split->stage_backward(1, BwdPass::kWeight, nullptr, 0.1f);
        const int64_t n = fused->params().total_floats();
        EXPECT_EQ(std::memcmp(fused->grads(), split->grads(), sizeof(float) * static_cast<size_t>(n)), 0)
            << what << ": gradients differ on rank " << ctx.world_rank();
      }
}

}  // namespace
}  // namespace gf
