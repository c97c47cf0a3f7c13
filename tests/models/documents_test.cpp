// Packed documents (ModelConfig::documents, Megatron's reset_position_ids / reset_attention_mask /
// eod_mask_loss) and loss-masked targets (kNotTrainedBit):
//  * document_layout and split_targets against Megatron's get_ltor_masks_and_position_ids, written out
//    by hand for one sequence;
//  * packing equivalence: three documents packed into one sample with both resets give the summed
//    loss and the gradients of the three documents run alone (each in a sample of its own, padded
//    with untrained tokens after its end), within 1e-5 relative, for GPT-2 (learned positions) and
//    Llama (RoPE), with the unfused and the fused attention core;
//  * a target marked not trained has no loss and no gradient: the loss is that of the others, and
//    the gradient equals the one of a batch where the marked targets are changed to anything else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

constexpr int32_t kEod = 0;

ModelConfig base_cfg(bool llama, bool flash) {
  ModelConfig c = test::tiny_model({.vocab = 61, .seq = 24, .hidden = 32, .layers = 2, .heads = 4, .act = "gelu_new",
                                    .dropout = 0.0f});
  c.eos_token_id = kEod;
  c.use_flash_attention = flash;
  if (llama) {
    test::make_llama(c, flash ? 0 : 2, 48);  // the fused core reads multi-head shapes only
    c.rope_theta = 1e4;
  }
  return c;
}

std::unique_ptr<TransformerLM> build(const ModelConfig& c, int64_t B) {
  static ParallelContext ctx = ParallelContext::single();
  if (c.type == "LlamaConfig") return std::make_unique<LlamaForCausalLM>(c, ModelLayout{}, B, ctx);
  return std::make_unique<GPT2LMHeadModel>(c, ModelLayout{}, B, ctx);
}

TEST(Documents, LayoutIsMegatrons) {
  // inputs of one sequence, eod = 0: documents [5 6 0] [7 0] [8 9]
  const std::vector<int32_t> in = {5, 6, 0, 7, 0, 8, 9};
  std::vector<int32_t> pos(in.size()), lo(in.size());
  DocumentConfig d;
  d.reset_position_ids = d.reset_attention_mask = true;
  document_layout(d, 0, in.data(), 1, 7, pos.data(), lo.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 1}));
  EXPECT_EQ(lo, (std::vector<int32_t>{0, 0, 0, 3, 3, 5, 5}));
  d.reset_position_ids = false;
  document_layout(d, 0, in.data(), 1, 7, pos.data(), lo.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(lo, (std::vector<int32_t>{0, 0, 0, 3, 3, 5, 5}));

  ModelConfig c;
  c.eos_token_id = 0;
  std::vector<int32_t> inputs = {5, 6 | kNotTrainedBit, 0, 7};
  std::vector<int32_t> targets = {6 | kNotTrainedBit, 0, 7, 0};
  split_targets(c, inputs.data(), targets.data(), 4);
  EXPECT_EQ(inputs, (std::vector<int32_t>{5, 6, 0, 7}));
  EXPECT_EQ(targets, (std::vector<int32_t>{-1, 0, 7, 0}));
  c.documents.eod_mask_loss = true;  // Megatron: loss_mask[data == eod] = 0 on the inputs
  inputs = {5, 6, 0, 7};
  targets = {6, 0, 7, 0};
  split_targets(c, inputs.data(), targets.data(), 4);
  EXPECT_EQ(targets, (std::vector<int32_t>{6, 0, -1, 0}));
  const std::vector<int32_t> tokens = {5, 6 | kNotTrainedBit, 0, 7, 0};
  EXPECT_EQ(trained_targets(c, tokens.data(), 1, 4), 2);  // 6 masked, 7 follows an eod input
}

std::vector<float> grads_of(TransformerLM& m) { return {m.grads(), m.grads() + m.params().total_floats()}; }

struct Case {
  bool llama, flash;
};

class Packing : public ::testing::TestWithParam<Case> {};

TEST_P(Packing, PackedWithResetsEqualsAlone) {
  const Case k = GetParam();
  ModelConfig c = base_cfg(k.llama, k.flash);
  c.documents.reset_position_ids = c.documents.reset_attention_mask = true;
  const int64_t T = c.seq_length;
  // Three documents, each ending with the eod, filling T + 1 tokens: lengths 9, 7 and 9.
  std::vector<std::vector<int32_t>> docs;
  for (int64_t len : {9, 7, 9}) {
    std::vector<int32_t> d;
    for (int64_t i = 0; i + 1 < len; ++i) d.push_back(static_cast<int32_t>(1 + (docs.size() * 17 + i * 13) % 60));
    d.push_back(kEod);
    docs.push_back(d);
  }
  std::vector<int32_t> packed;
  for (const auto& d : docs) packed.insert(packed.end(), d.begin(), d.end());
  ASSERT_EQ(static_cast<int64_t>(packed.size()), T + 1);

  // Alone: each document from position 0 of its own sample, the rest padding (eod ids, not trained).
  // In the packed sample the first document's targets are its tokens 1..; the other documents'
  // first tokens are targets of the previous document's eod: that prediction crosses documents, so
  // it is not trained in either form.
  std::vector<int32_t> alone;
  for (size_t d = 0; d < docs.size(); ++d) {
    std::vector<int32_t> s(static_cast<size_t>(T + 1), kEod | kNotTrainedBit);
    std::copy(docs[d].begin(), docs[d].end(), s.begin());
    alone.insert(alone.end(), s.begin(), s.end());
  }
  size_t at = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    if (d > 0) packed[at] |= kNotTrainedBit;
    at += docs[d].size();
  }
  auto one = build(c, 1);
  auto three = build(c, 3);
  one->init_weights(5);
  three->init_weights(5);
  std::fill(one->grads(), one->grads() + one->params().total_floats(), 0.0f);
  std::fill(three->grads(), three->grads() + three->params().total_floats(), 0.0f);
  const StepInfo info{1, 0, true};
  const double lp = one->forward(packed.data(), info);
  one->backward(1.0f);
  const double la = three->forward(alone.data(), info);
  three->backward(1.0f);
  ASSERT_TRUE(std::isfinite(lp));
  EXPECT_NEAR(lp, la, 1e-5 * std::abs(la)) << "summed loss, packed vs alone";
  const std::vector<float> gp = grads_of(*one), ga = grads_of(*three);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < gp.size(); ++i) scale = std::max(scale, static_cast<double>(std::abs(ga[i])));
  for (size_t i = 0; i < gp.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(gp[i] - ga[i])));
  // Gradients compared against the largest one: a tiny element's relative error is float noise.
  EXPECT_LE(worst, 1e-5 * scale) << "gradients, packed vs alone (largest " << scale << ")";

  // Without the resets the packed documents see each other: the loss moves by more than the tolerance
  // above, so the equivalence cannot hold by the resets doing nothing (the check can fail).
  ModelConfig plain = c;
  plain.documents = DocumentConfig{};
  auto p = build(plain, 1);
  p->init_weights(5);
  const double lplain = p->forward(packed.data(), info);
  EXPECT_GT(std::abs(lplain - la), 1e-5 * std::abs(la)) << "resets had no effect";
}

INSTANTIATE_TEST_SUITE_P(Models, Packing,
                         ::testing::Values(Case{false, false}, Case{false, true}, Case{true, false}, Case{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.llama ? "Llama" : "GPT2") + (info.param.flash ? "Fused" : "Unfused");
                         });

// A sliding window (ModelConfig::sliding_window, alone and with packed documents): the fused kernel,
// which skips the key tiles left of the band, gives the unfused core's loss and gradients (which masks
// them; it is checked against PyTorch by tests/integration/sft.sh and against generation by
// generator_test.cpp), within 1e-5, for windows shorter than a key tile (128), equal to it, between it
// and T, equal to T and longer; and a window of T or more is bitwise the full causal path.
TEST(Documents, SlidingWindowFusedEqualsUnfused) {
  // 256 tokens: with a window of 40 the fused kernel's query tiles of 64 rows from row 192 on need no
  // key before 153, so it skips whole key tiles of 128 (core/ops/flash_attention.h FlashTiles).
  ModelConfig base = base_cfg(false, false);
  base.seq_length = base.max_position_embeddings = 256;
  const int64_t B = 1, T = base.seq_length;
  std::vector<int32_t> tok(static_cast<size_t>(B * (T + 1)));
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>(i % 61 == 60 ? kEod : 1 + (i * 29) % 60);
  const StepInfo info{1, 0, true};
  struct Run {
    double loss;
    std::vector<float> grads;
  };
  auto run = [&](ModelConfig c) {
    auto m = build(c, B);
    m->init_weights(9);
    std::fill(m->grads(), m->grads() + m->params().total_floats(), 0.0f);
    Run r{m->forward(tok.data(), info), {}};
    m->backward(1.0f);
    r.grads = grads_of(*m);
    return r;
  };
  for (const bool resets : {false, true}) {
    for (const bool flash : {false, true}) {
      ModelConfig c = base;
      c.use_flash_attention = flash;
      c.documents.reset_attention_mask = c.documents.reset_position_ids = resets;
      const Run whole = run(c);
      for (const int64_t w : {T, T + 44}) {  // the band holds every earlier token: the causal path, bit for bit
        c.sliding_window = w;
        const Run r = run(c);
        EXPECT_EQ(r.loss, whole.loss) << "window " << w << " flash " << flash << " resets " << resets;
        EXPECT_TRUE(r.grads == whole.grads) << "window " << w << " flash " << flash << " resets " << resets;
      }
    }
    for (const int64_t w : {int64_t{40}, int64_t{128}, int64_t{200}}) {
      ModelConfig c = base;
      c.sliding_window = w;
      c.documents.reset_attention_mask = c.documents.reset_position_ids = resets;
      ModelConfig fused = c;
      fused.use_flash_attention = true;
      const Run a = run(c), b = run(fused);
      EXPECT_NEAR(a.loss, b.loss, 1e-5 * std::abs(a.loss)) << "window " << w << " resets " << resets;
      double worst = 0, scale = 0;
      for (size_t i = 0; i < a.grads.size(); ++i) {
        scale = std::max(scale, static_cast<double>(std::abs(a.grads[i])));
        worst = std::max(worst, static_cast<double>(std::abs(a.grads[i] - b.grads[i])));
      }
      EXPECT_LE(worst, 1e-5 * scale) << "window " << w << " resets " << resets;
      ModelConfig none = c;
      none.sliding_window = 0;
      // The window must act where the kernel skips tiles (w 40). Longer windows drop keys more than 128
      // back, which moves this tiny random model's loss by less than the tolerance (1.7e-6 relative at
      // 128); there the comparison covers the masked columns inside the tiles.
      if (w == 40) {
        EXPECT_GT(std::abs(run(none).loss - a.loss), 1e-5 * std::abs(a.loss)) << "window " << w << ": no effect";
      }
    }
  }
}

TEST(Documents, UntrainedTargetsHaveNoLossNorGradient) {
  // A batch split by the mark into two complementary sets of targets: the losses and the gradients
  // of the two add up to the full batch's (the loss and the gradient are sums over targets), so a
  // marked target adds nothing to either.
  const ModelConfig c = base_cfg(false, false);
  const int64_t T = c.seq_length, B = 2;
  std::vector<int32_t> full(static_cast<size_t>(B * (T + 1)));
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<int32_t>((i * 7 + 3) % c.vocab_size);
  const std::vector<size_t> marked = {1, 5, 6, 30, 40};
  std::vector<int32_t> some = full, rest(full.size());
  for (size_t i = 0; i < full.size(); ++i) rest[i] = full[i] | kNotTrainedBit;
  for (size_t i : marked) {
    some[i] |= kNotTrainedBit;
    rest[i] = full[i];
  }
  auto mf = build(c, B), ms = build(c, B), mr = build(c, B);
  for (auto* m : {mf.get(), ms.get(), mr.get()}) {
    m->init_weights(3);
    std::fill(m->grads(), m->grads() + m->params().total_floats(), 0.0f);
  }
  const StepInfo info{1, 0, true};
  const double lf = mf->forward(full.data(), info), ls = ms->forward(some.data(), info), lr = mr->forward(rest.data(), info);
  mf->backward(1.0f);
  ms->backward(1.0f);
  mr->backward(1.0f);
  EXPECT_GT(lr, 0.0);
  EXPECT_LT(ls, lf);
  EXPECT_NEAR(ls + lr, lf, 1e-6 * lf);
  const std::vector<float> gf = grads_of(*mf), gs = grads_of(*ms), gr = grads_of(*mr);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < gf.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(gf[i])));
    worst = std::max(worst, static_cast<double>(std::abs(gs[i] + gr[i] - gf[i])));
  }
  EXPECT_LE(worst, 1e-5 * scale);
  EXPECT_GT(scale, 0.0);
}

}  // namespace
}  // namespace gf
