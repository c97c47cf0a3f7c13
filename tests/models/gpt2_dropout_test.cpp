// Dropout masks are a function of (step, layer, site, global element): the same step gives the
// same loss, another step another mask, evaluation none; and the batch row's global sample index
// (not its position in this rank's micro-batch) keys the mask, so splitting a batch across ranks
// leaves each sample's loss unchanged.
#include <gtest/gtest.h>

#include "models/arch/gpt2.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

ModelConfig cfg(float drop) {
  return test::tiny_model({.vocab = 97, .seq = 8, .hidden = 16, .layers = 2, .heads = 2, .dropout = drop});
}

std::vector<int32_t> tokens(int64_t samples) {
  std::vector<int32_t> t(static_cast<size_t>(samples * 9));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % 97);
  return t;
}

TEST(Gpt2Dropout, MasksAreKeyedByStepAndGlobalSample) {
  ParallelContext ctx = ParallelContext::single();
  GPT2LMHeadModel m(cfg(0.2f), ModelLayout{}, 2, ctx);
  m.init_weights(5);
  const auto t = tokens(2);
  const double a = m.forward(t.data(), StepInfo{3, 0, true});
  const double b = m.forward(t.data(), StepInfo{3, 0, true});
  const double c = m.forward(t.data(), StepInfo{4, 0, true});
  const double e1 = m.forward(t.data(), StepInfo{3, 0, false});
  const double e2 = m.forward(t.data(), StepInfo{4, 0, false});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(e1, e2);
  EXPECT_NE(a, e1);
  // The same two samples as two micro-batches of one (sample offsets 0 and 1) give the same sum.
  GPT2LMHeadModel one(cfg(0.2f), ModelLayout{}, 1, ctx);
  one.init_weights(5);
  const double s0 = one.forward(t.data(), StepInfo{3, 0, true});
  const double s1 = one.forward(t.data() + 9, StepInfo{3, 1, true});
  EXPECT_NEAR(s0 + s1, a, 1e-6 * std::abs(a));  // GEMM blocking may differ with the batch; a mask change moves it ~1e-2
}

}  // namespace
}  // namespace gf
