// Generation with the KV cache (models/generator.h) against the golden files PyTorch wrote from
// Hugging Face's semantics (tools/make_golden.py, make_llama_golden.py, make_moe_golden.py, and
// make_family_golden.py's Llama 3.2, Qwen2 and Qwen3 shapes with llama3 RoPE, q/k/v biases, q/k norms): the
// logits of every position of the golden batch, whether the prompt goes in whole, in chunks, or
// one token per call against the cache (teacher forcing), equal PyTorch's within 1e-5 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "models/generator.h"
#include "models/registry.h"
#include "tests/models/golden_case.h"

namespace gf {
namespace {

using namespace golden_case;

struct Fixture {
  GoldenCase g;
  ParallelContext ctx = ParallelContext::single();
  std::unique_ptr<CausalLM> model;
  std::vector<int32_t> tokens;
  std::vector<float> ref;
  explicit Fixture(const char* file) : g(file) {
    model = build_model(g.cfg.model, model_layout(g.cfg), 1, ctx);
    g.load_weights(*model);
    tokens = g.f.ints("tokens");
    ref = g.f.floats("logits");
  }
  const TransformerLM& lm() const { return dynamic_cast<const TransformerLM&>(*model); }
  int32_t token(int64_t b, int64_t t) const { return tokens[b * (g.T + 1) + t]; }
};

// Feeds every sequence of the golden batch through `gen` in calls of `chunk` rows per sequence
// (all sequences side by side in each call) and returns the logits of every position, [B T, V].
std::vector<float> run(Fixture& f, Generator& gen, int64_t chunk) {
  const int64_t B = f.g.B, T = f.g.T, V = gen.vocab();
  std::vector<float> out(static_cast<size_t>(B * T * V));
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    std::vector<int32_t> tok;
    std::vector<int64_t> seq, pos, rows;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = t0; t < t0 + n; ++t) {
        rows.push_back(static_cast<int64_t>(tok.size()));
        tok.push_back(f.token(b, t));
        seq.push_back(b);
        pos.push_back(t);
      }
    const float* logits = gen.forward(tok.data(), seq.data(), pos.data(), static_cast<int64_t>(tok.size()), rows.data(),
                                      static_cast<int64_t>(rows.size()));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < n; ++t)
        std::copy_n(logits + (b * n + t) * V, V, out.begin() + ((b * T + t0 + t) * V));
  }
  return out;
}

class GeneratorGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(GeneratorGolden, LogitsOfEveryPositionMatchPyTorchWholeChunkedAndOneTokenPerCall) {
  Fixture f(GetParam());
  const int64_t B = f.g.B, T = f.g.T;
  Generator gen(f.lm(), f.ctx, {B, T, B * T, B * T});
  ASSERT_EQ(gen.vocab(), f.g.V);
  for (const int64_t chunk : {T, int64_t{5}, int64_t{1}}) {
    const std::vector<float> got = run(f, gen, chunk);
    EXPECT_LE(rel_err(got.data(), f.ref, B * T, f.g.V, f.g.V), 1e-5) << "rows per sequence per call: " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, GeneratorGolden,
                         ::testing::Values("gpt2_tiny.safetensors", "llama_tiny.safetensors",
                                           "llama_tiny_tied.safetensors", "mixtral_tiny.safetensors",
                                           "gpt2_moe_tiny.safetensors", "families/llama.safetensors",
                                           "families/qwen2.safetensors", "families/qwen3.safetensors",
                                           "families/qwen3_moe.safetensors"));

TEST(Generator, RefusesRowsAndLogitsBeyondItsPlanAndTokensOutsideTheVocabulary) {
  Fixture f("llama_tiny.safetensors");
  Generator gen(f.lm(), f.ctx, {1, 8, 4, 1});
  const int32_t tok[5] = {1, 2, 3, 4, 5};
  const int64_t seq[5] = {0, 0, 0, 0, 0}, pos[5] = {0, 1, 2, 3, 4}, last = 3;
  EXPECT_THROW(gen.forward(tok, seq, pos, 5, &last, 1), std::invalid_argument);
  const int32_t bad[1] = {static_cast<int32_t>(f.g.V)};
  EXPECT_THROW(gen.forward(bad, seq, pos, 1, &last, 0), std::out_of_range);
  const int64_t far[1] = {8};
  EXPECT_THROW(gen.forward(tok, seq, far, 1, &last, 0), std::out_of_range);
  const int64_t other[1] = {1};
  EXPECT_THROW(gen.forward(tok, other, pos, 1, &last, 0), std::out_of_range);
}

}  // namespace
}  // namespace gf

namespace gf {
namespace {

// A sliding window (model_config.sliding_window): generation with the KV cache attends to the window's
// last positions only, keeps only those (a rolling cache of window + rows per call - 1 positions), and
// gives, whole, chunked or one token per call, the logits of the training
// forward, whose attention masks the band through the per-row first key (the path the sliding-window
// runs check against PyTorch in tests/integration/sft.sh); without the window in generation they differ.
TEST(GeneratorWindow, SlidingWindowGenerationMatchesTheTrainingForward) {
  for (const char* file : {"llama_tiny.safetensors", "gpt2_tiny.safetensors"}) {
    golden_case::GoldenCase g(file);
    ParallelContext ctx = ParallelContext::single();
    const std::vector<int32_t> tokens = g.f.ints("tokens");
    auto logits_of_training = [&](int64_t window) {
      ModelConfig m = g.cfg.model;
      m.sliding_window = window;
      m.hidden_dropout_rate = m.attention_dropout_rate = 0.0f;
      auto model = build_model(m, model_layout(g.cfg), g.B, ctx);
      g.load_weights(*model);
      model->forward(tokens.data(), StepInfo{0, 0, false});
      std::vector<float> out(static_cast<size_t>(g.B * g.T * g.V));
      for (int64_t r = 0; r < g.B * g.T; ++r)
        std::copy_n(model->logits() + r * model->logits_ld(), g.V, out.begin() + r * g.V);
      return out;
    };
    const std::vector<float> windowed = logits_of_training(5), whole = logits_of_training(0);
    ModelConfig m = g.cfg.model;
    m.sliding_window = 5;
    m.hidden_dropout_rate = m.attention_dropout_rate = 0.0f;
    auto model = build_model(m, model_layout(g.cfg), 1, ctx);
    g.load_weights(*model);
    for (const int64_t chunk : {g.T, int64_t{3}, int64_t{1}}) {
      // Rows per call: the chunk of every sequence. The cache rolls: it holds window + rows - 1 positions.
      Generator gen(dynamic_cast<const TransformerLM&>(*model), ctx, {g.B, g.T, g.B * chunk, g.B * chunk});
      EXPECT_EQ(gen.cache_positions(), std::min(g.T, 5 + g.B * chunk - 1)) << file;
      if (chunk == 1) {
        EXPECT_LT(gen.cache_positions(), g.T) << file << ": the test does not roll the cache";
      }
      // run() reads the fixture's tokens: the same batch.
      std::vector<float> got(static_cast<size_t>(g.B * g.T * g.V));
      for (int64_t t0 = 0; t0 < g.T; t0 += chunk) {
        const int64_t n = std::min(chunk, g.T - t0);
        std::vector<int32_t> tok;
        std::vector<int64_t> seq, pos, rows;
        for (int64_t b = 0; b < g.B; ++b)
          for (int64_t t = t0; t < t0 + n; ++t) {
            rows.push_back(static_cast<int64_t>(tok.size()));
            tok.push_back(tokens[b * (g.T + 1) + t]);
            seq.push_back(b);
            pos.push_back(t);
          }
        const float* l = gen.forward(tok.data(), seq.data(), pos.data(), static_cast<int64_t>(tok.size()), rows.data(),
                                     static_cast<int64_t>(rows.size()));
        for (int64_t b = 0; b < g.B; ++b)
          for (int64_t t = 0; t < n; ++t)
            std::copy_n(l + (b * n + t) * g.V, g.V, got.begin() + ((b * g.T + t0 + t) * g.V));
      }
      EXPECT_LE(golden_case::rel_err(got.data(), windowed, g.B * g.T, g.V, g.V), 1e-5) << file << ", chunk " << chunk;
      EXPECT_GT(golden_case::rel_err(got.data(), whole, g.B * g.T, g.V, g.V), 1e-4) << file << ": the window changed nothing";
    }
  }
}

}  // namespace
}  // namespace gf

namespace gf {
namespace {

// Greedy generation with the KV cache equals recomputation, for each of today's families: 8 prompt tokens
// (the golden batch's first), then 56 tokens, each the argmax of the last position's logits, one token per call
// against the cache; the recomputation feeds the whole sequence so far from position 0 at every step (the
// cache rewritten, nothing reused). The same 64 tokens, and every step's logits within 1e-5.
TEST(GeneratorFamilies, GreedySixtyFourTokensWithTheCacheEqualRecomputation) {
  for (const char* file : {"families/llama.safetensors", "families/qwen2.safetensors", "families/qwen3.safetensors",
                           "families/qwen3_moe.safetensors", "families/qwen2_moe.safetensors",
                           "families/gemma3.safetensors", "families/deepseek_v2_lite.safetensors",
                           "families/deepseek_v3.safetensors"}) {
    golden_case::GoldenCase g(file);
    ParallelContext ctx = ParallelContext::single();
    auto model = build_model(g.cfg.model, model_layout(g.cfg), 1, ctx);
    g.load_weights(*model);
    const auto& lm = dynamic_cast<const TransformerLM&>(*model);
    constexpr int64_t kTotal = 64, kPrompt = 8;
    Generator cached(lm, ctx, {1, kTotal, kTotal, 1}), again(lm, ctx, {1, kTotal, kTotal, 1});
    const std::vector<int32_t> batch = g.f.ints("tokens");
    std::vector<int32_t> seq_cached(batch.begin(), batch.begin() + kPrompt), seq_again = seq_cached;
    auto argmax = [&](const float* logits) {
      return static_cast<int32_t>(std::max_element(logits, logits + cached.vocab()) - logits);
    };
    double worst = 0;
    for (int64_t t = kPrompt; t < kTotal; ++t) {
      // Cached: the prompt in one call, then the newest token alone.
      const int64_t first = t == kPrompt ? 0 : t - 1, n = t - first;
      std::vector<int64_t> seq(static_cast<size_t>(n), 0), pos(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = first + i;
      const int64_t last = n - 1;
      const float* a = cached.forward(seq_cached.data() + first, seq.data(), pos.data(), n, &last, 1);
      std::vector<float> la(a, a + cached.vocab());
      // Recomputed: every position again.
      std::vector<int64_t> seq_all(static_cast<size_t>(t), 0), pos_all(static_cast<size_t>(t));
      for (int64_t i = 0; i < t; ++i) pos_all[static_cast<size_t>(i)] = i;
      const int64_t last_all = t - 1;
      const float* b = again.forward(seq_again.data(), seq_all.data(), pos_all.data(), t, &last_all, 1);
      double diff = 0, ref = 0;
      for (int64_t v = 0; v < cached.vocab(); ++v) {
        diff = std::max(diff, std::abs(static_cast<double>(la[static_cast<size_t>(v)]) - b[v]));
        ref = std::max(ref, std::abs(static_cast<double>(b[v])));
      }
      worst = std::max(worst, diff / ref);
      seq_cached.push_back(argmax(la.data()));
      seq_again.push_back(argmax(b));
    }
    EXPECT_EQ(seq_cached, seq_again) << file;
    EXPECT_LE(worst, 1e-5) << file << ": logits of a cached step against the recomputed one";
  }
}

}  // namespace
}  // namespace gf

namespace gf {
namespace {

// The logits of every position of one sequence (slot 0) fed to `gen` `chunk` tokens a call, [tokens, V].
std::vector<float> logits_in_chunks(Generator& gen, const std::vector<int32_t>& tokens, int64_t chunk, int64_t V) {
  const auto T = static_cast<int64_t>(tokens.size());
  std::vector<float> got(static_cast<size_t>(T * V));
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    std::vector<int64_t> seq(static_cast<size_t>(chunk), 0), pos(static_cast<size_t>(chunk)), rows(static_cast<size_t>(chunk));
    for (int64_t i = 0; i < chunk; ++i) {
      pos[static_cast<size_t>(i)] = t0 + i;
      rows[static_cast<size_t>(i)] = i;
    }
    const float* l = gen.forward(tokens.data() + t0, seq.data(), pos.data(), chunk, rows.data(), chunk);
    std::copy_n(l, chunk * V, got.begin() + t0 * V);
  }
  return got;
}

// Gemma 3's local layers (a window of 8, their own RoPE base) beside a global one, generated against the KV
// cache: the 64 positions of the golden's logits64 sequence fed one token per call (the cache holds every
// position: the global layer reads them all) and in one call give PyTorch's logits (tools/torch_hf_gemma3.py)
// within 1e-5, row by row.
TEST(GeneratorFamilies, GemmaLocalAndGlobalLayersWithTheCacheMatchPyTorch) {
  golden_case::GoldenCase g("families/gemma3.safetensors", {"model.model_config.seq_length=64"});
  ParallelContext ctx = ParallelContext::single();
  auto model = build_model(g.cfg.model, model_layout(g.cfg), 1, ctx);
  g.load_weights(*model);
  const auto& lm = dynamic_cast<const TransformerLM&>(*model);
  ASSERT_TRUE(lm.spec().mixed_windows()) << "the golden should mix windowed and full layers";
  const std::vector<int32_t> tokens = g.f.ints("logits64.tokens");
  const std::vector<float> ref = g.f.floats("logits64.logits");
  constexpr int64_t kT = 64;
  ASSERT_EQ(static_cast<int64_t>(tokens.size()), kT);
  for (const int64_t chunk : {int64_t{1}, kT}) {
    Generator gen(lm, ctx, {1, kT, chunk, chunk});
    EXPECT_EQ(gen.cache_positions(), kT) << "windowed layers beside full ones keep every position";
    const std::vector<float> got = logits_in_chunks(gen, tokens, chunk, g.V);
    EXPECT_LE(golden_case::rel_err(got.data(), ref, kT, g.V, g.V), 1e-5) << "rows per call " << chunk;
  }
}

}  // namespace
}  // namespace gf

namespace gf {
namespace {

// DeepSeek's latent cache: generation keeps kv_lora_rank + qk_rope_head_dim floats per position and layer (the
// latent and the rotated RoPE key) and attends in the latent space (MlaProjection::fwd_cached); the 64 positions of
// the golden's logits64 sequence, one token per call and in one call, give PyTorch's logits (tools/
// torch_hf_deepseek.py, which attends over full keys and values) within 1e-5, for V2-Lite's shape and V3's.
TEST(GeneratorFamilies, LatentAttentionCacheMatchesPyTorch) {
  for (const char* file : {"families/deepseek_v2_lite.safetensors", "families/deepseek_v3.safetensors"}) {
    golden_case::GoldenCase g(file, {"model.model_config.seq_length=64"});
    ParallelContext ctx = ParallelContext::single();
    auto model = build_model(g.cfg.model, model_layout(g.cfg), 1, ctx);
    g.load_weights(*model);
    const auto& lm = dynamic_cast<const TransformerLM&>(*model);
    const MlaSpec& m = lm.spec().mla;
    ASSERT_TRUE(m.on()) << file;
    const std::vector<int32_t> tokens = g.f.ints("logits64.tokens");
    const std::vector<float> ref = g.f.floats("logits64.logits");
    constexpr int64_t kT = 64;
    for (const int64_t chunk : {int64_t{1}, kT}) {
      Generator gen(lm, ctx, {1, kT, chunk, chunk});
      // Per position: (kv_rank + rope) floats a layer, where full attention's cache would hold 2 heads x head_dim.
      const int64_t L = lm.spec().layers;
      EXPECT_EQ(gen.cache_bytes(), 4 * L * kT * (m.kv_rank + m.rope)) << file;
      EXPECT_LT(gen.cache_bytes(), 4 * L * kT * 2 * lm.spec().heads * m.qk()) << file;
      const std::vector<float> got = logits_in_chunks(gen, tokens, chunk, g.V);
      EXPECT_LE(golden_case::rel_err(got.data(), ref, kT, g.V, g.V), 1e-5) << file << ", rows per call " << chunk;
    }
  }
}

}  // namespace
}  // namespace gf
