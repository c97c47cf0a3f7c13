// `gridformer convert` (runner/cli/convert.h) on the golden tiny models PyTorch computed its logits from
// (tests/golden/*.safetensors, tests/models/golden_case.h): Hugging Face weights -> our checkpoint ->
// Hugging Face weights gives every tensor back bit for bit, the export loads into the model and
// gives PyTorch's logits; a checkpoint saved by two tensor-parallel ranks (with optimizer moments)
// exports the full tensors; sharding follows huggingface_hub's split and reads back identically;
// f16/bf16 round trips are exact and the float -> half roundings are to nearest even. The refusals,
// the size units, the progress and the files that go with the weights: tests/runner/convert_options_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/math/aligned_buffer.h"
#include "core/io/checkpoint.h"
#include "core/io/safetensors.h"
#include "models/arch/gpt2.h"
#include "models/weights/hf_checkpoint.h"
#include "models/arch/llama.h"
#include "models/registry.h"
#include "runner/cli/convert.h"
#include "runner/config/config.h"
#include "tests/models/golden_case.h"
#include "tests/runner/convert_test_util.h"

namespace gf {
namespace {

namespace fs = std::filesystem;
using namespace golden_case;
using namespace convert_test;  // the helpers both halves share (convert_test_util.h)

bool is_gpt2(const SafeTensorsFile& f) { return f.has("weights.wte.weight"); }

// The golden file's initial weights as Hugging Face's save of the model would hold them, plus what
// older saves added: GPT-2 `transformer.`-prefixed with its attn.bias / attn.masked_bias buffers
// and the tied lm_head.weight, Llama and Mixtral under their own names. Returns the tensors a
// conversion must keep (their Hugging Face names and data).
std::map<std::string, std::vector<float>> write_hf_input(const SafeTensorsFile& g, const fs::path& file) {
  std::map<std::string, std::vector<float>> kept, extra;
  const bool gpt2 = is_gpt2(g);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [key, t] : g.tensors()) {
    if (key.rfind("weights.", 0) != 0) continue;
    const std::string name = (gpt2 ? "transformer." : "") + key.substr(8);
    kept[name] = g.floats(key);
    shapes[name] = t.shape;
  }
  if (gpt2) {
    const int64_t T = g.get("weights.wpe.weight").shape[0];
    for (int layer = 0; layer < 2; ++layer) {
      const std::string h = "transformer.h." + std::to_string(layer) + ".attn.";
      std::vector<float> mask(static_cast<size_t>(T * T));
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) mask[static_cast<size_t>(i * T + j)] = j <= i ? 1.0f : 0.0f;
      extra[h + "bias"] = mask;
      shapes[h + "bias"] = {1, 1, T, T};
      extra[h + "masked_bias"] = {-1e4f};
      shapes[h + "masked_bias"] = {};
    }
    extra["lm_head.weight"] = kept.at("transformer.wte.weight");
    shapes["lm_head.weight"] = shapes.at("transformer.wte.weight");
  }
  std::vector<StWriteTensor> out;
  for (auto* m : {&kept, &extra})
    for (const auto& [name, v] : *m) out.push_back({name, StDtype::kF32, shapes.at(name), v.data()});
  write_safetensors(file.string(), out, {{"format", "pt"}});
  return kept;
}


// The model the golden file describes, its weights loaded from the Hugging Face weights `path`,
// gives PyTorch's logits (the golden tests' tolerance) from weights equal bit for bit to the golden
// file's own.
void expect_golden_logits(const std::string& golden_file, const fs::path& path) {
  GoldenCase g(golden_file);
  ParallelContext ctx = ParallelContext::single();
  const std::unique_ptr<CausalLM> exported = build_model(g.cfg.model, model_layout(g.cfg), g.B, ctx);
  const std::unique_ptr<CausalLM> direct = build_model(g.cfg.model, model_layout(g.cfg), g.B, ctx);
  exported->load_hf_checkpoint(path.string());
  g.load_weights(*direct);
  ASSERT_EQ(exported->params().total_floats(), direct->params().total_floats());
  EXPECT_EQ(std::memcmp(exported->weights(), direct->weights(), sizeof(float) * direct->params().total_floats()), 0)
      << path << ": the weights loaded differ from the golden file's";
  const std::vector<int32_t> tokens = g.f.ints("tokens");
  exported->forward(tokens.data(), StepInfo{1, 0, false});
  EXPECT_LE(rel_err(exported->logits(), g.f.floats("logits"), g.B * g.T, g.V, exported->logits_ld()), 1e-5)
      << golden_file << ": logits from " << path;
}

class ConvertGolden : public ::testing::TestWithParam<const char*> {};

// float16's range as PyTorch's .half() rounds (checked there: 65519.99 -> 65504, 65520 -> inf, -65520 -> -inf):
// only a finite value that becomes inf counts; inf and NaN in the source are not overflows.
TEST(Float16Overflow, IsTheFirstFiniteValueThatRoundsToInf) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> fits = {65504.0f, 65519.99f, -65519.99f, inf, -inf, nan, 0.0f, 1e-8f};
  EXPECT_EQ(first_float16_overflow(fits.data(), fits.size()), -1);
  const std::vector<float> over = {1.0f, inf, 65520.0f, -70000.0f};
  EXPECT_EQ(first_float16_overflow(over.data(), over.size()), 2);
  EXPECT_EQ(first_float16_overflow(over.data() + 3, 1), 0);
  EXPECT_EQ(float16_overflow_message("w", 2, 65520.0f),
            "w: element 2 is 65520, beyond float16's range (±65504): float16 would hold inf there; write bfloat16 or "
            "float32 instead");
}

TEST_P(ConvertGolden, HuggingFaceToCheckpointToHuggingFaceIsExactAndGivesPyTorchsLogits) {
  const fs::path d = work_dir();
  const SafeTensorsFile g = SafeTensorsFile::open(golden(GetParam()));
  fs::create_directories(d / "in");
  const auto kept = write_hf_input(g, d / "in" / "model.safetensors");

  const ConvertSummary to_ckpt = convert(d / "in", d / "ckpt");  // default: Hugging Face -> checkpoint
  EXPECT_EQ(to_ckpt.tensors, static_cast<int64_t>(kept.size()));
  ckpt::Reader r = ckpt::Reader::open((d / "ckpt").string());
  EXPECT_EQ(r.state().value("weights_only", false), true);
  EXPECT_NE(r.state().value("converted_from", std::string()).find("model.safetensors"), std::string::npos);
  EXPECT_EQ(r.state().value("step", -1), 0) << "a converted checkpoint has no training behind it";
  for (const std::string& name : r.names()) {
    EXPECT_EQ(name.rfind("transformer.", 0), std::string::npos) << name;
    const std::string hf = (is_gpt2(g) ? "transformer." : "") + name;
    ASSERT_TRUE(kept.count(hf)) << "the checkpoint holds " << name << ", which is no weight of the input";
    const std::vector<float> v = r.read_full(name);
    EXPECT_EQ(std::memcmp(v.data(), kept.at(hf).data(), v.size() * sizeof(float)), 0) << name;
  }
  EXPECT_EQ(r.names().size(), kept.size());
  if (is_gpt2(g)) {
    ASSERT_EQ(to_ckpt.skipped.size(), 2u) << "GPT-2: the attention buffers and the tied head";
    size_t n = 0;
    for (const auto& [reason, names] : to_ckpt.skipped) n += names.size();
    EXPECT_EQ(n, 5u) << "attn.bias and attn.masked_bias of 2 layers, lm_head.weight";
  } else {
    EXPECT_TRUE(to_ckpt.skipped.empty());
  }

  const ConvertSummary to_hf = convert(d / "ckpt", d / "out");  // default: checkpoint -> Hugging Face
  ASSERT_EQ(to_hf.files, std::vector<std::string>{(d / "out" / "model.safetensors").string()});
  const SafeTensorsFile out = SafeTensorsFile::open((d / "out" / "model.safetensors").string());
  EXPECT_EQ(out.metadata().at("format"), "pt") << "transformers refuses safetensors without format pt";
  for (const auto& [name, t] : out.tensors()) EXPECT_EQ(t.dtype, StDtype::kF32) << name;
  expect_bitwise_equal(read_hf(d / "out"), kept, GetParam());
  expect_golden_logits(GetParam(), d / "out");

  // And straight to one full file.
  convert(d / "ckpt", d / "full.safetensors");
  expect_bitwise_equal(read_hf(d / "full.safetensors"), kept, std::string(GetParam()) + " as one file");
}

INSTANTIATE_TEST_SUITE_P(Models, ConvertGolden,
                         ::testing::Values("gpt2_tiny.safetensors", "llama_tiny.safetensors",
                                           "llama_tiny_tied.safetensors", "mixtral_tiny.safetensors"));

TEST(Convert, ShardedHuggingFaceToCheckpointToOneFileIsExact) {
  const fs::path d = work_dir();
  const fs::path in = golden("llama_tiny_sharded");
  convert(in, d / "ckpt");
  const ConvertSummary s = convert(d / "ckpt", d / "llama.safetensors");
  EXPECT_EQ(s.files.size(), 1u);
  const auto want = read_hf(in);
  EXPECT_EQ(want.size(), 21u);
  expect_bitwise_equal(read_hf(d / "llama.safetensors"), want, "llama_tiny_sharded");
  expect_golden_logits("llama_tiny.safetensors", d / "llama.safetensors");
  // Hugging Face to Hugging Face: the shards merged into one file.
  convert(in, d / "merged.safetensors");
  expect_bitwise_equal(read_hf(d / "merged.safetensors"), want, "llama_tiny_sharded merged");
}

// A checkpoint saved as two tensor-parallel ranks save it (each rank's boxes of every split tensor,
// the vocabulary padding left out, GPT-2's fused q|k|v in one box per projection; the replicated
// ones from rank 0) with AdamW moments: the export holds the full tensors, and no optimizer state.
void check_tp2_checkpoint(const std::string& golden_file) {
  const fs::path d = work_dir();
  GoldenCase g(golden_file);
  const ModelConfig& c = g.cfg.model;
  ModelLayout layout = model_layout(g.cfg);
  layout.tp = 2;
  const std::string tmp = ckpt::begin_save((d / "run").string(), "step_3");
  std::vector<std::string> fragments;
  std::map<std::string, std::vector<float>> full;
  for (int rank = 0; rank < 2; ++rank) {
    const Placement placed = (c.type == "LlamaConfig") ? LlamaForCausalLM::make_placement(c, layout, rank)
                                          : GPT2LMHeadModel::make_placement(c, layout, rank);
    AlignedBuffer<float> arena(static_cast<size_t>(placed.total_floats()));
    std::vector<ckpt::Piece> pieces;
    for (const TensorPlacement& t : placed.tensors()) {
      const std::vector<float> w = g.f.floats("weights." + t.spec->name);
      full[t.spec->name] = w;
      Placement::scatter(t, w.data(), arena.data() + t.offset);
      if (t.replicated && rank != 0) continue;  // every rank holds it; tensor rank 0 saves it
      for (auto& p : ckpt::pieces_of(t, t.spec->name, arena.data() + t.offset)) pieces.push_back(std::move(p));
      for (const char* m : {"optimizer.exp_avg.", "optimizer.exp_avg_sq."})
        for (auto& p : ckpt::pieces_of(t, m + t.spec->name, arena.data() + t.offset)) pieces.push_back(std::move(p));
    }
    fragments.push_back(ckpt::write_shard(tmp, rank, pieces));
  }
  ckpt::write_index(tmp, fragments, {{"step", 3}});
  ckpt::commit_save((d / "run").string(), "step_3", 0);

  const ConvertSummary s = convert(d / "run", d / "hf.safetensors");
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_EQ(s.skipped.begin()->second.size(), 2 * full.size()) << "the two AdamW moments of every parameter";
  std::map<std::string, std::vector<float>> want;
  for (const auto& [name, v] : full) want[((c.type == "LlamaConfig") ? "" : "transformer.") + name] = v;
  expect_bitwise_equal(read_hf(d / "hf.safetensors"), want, golden_file + " saved by 2 tensor-parallel ranks");
  expect_golden_logits(golden_file, d / "hf.safetensors");
}

TEST(Convert, TwoTensorParallelRanksCheckpointExportsTheFullTensorsGpt2) { check_tp2_checkpoint("gpt2_tiny.safetensors"); }
TEST(Convert, TwoTensorParallelRanksCheckpointExportsTheFullTensorsLlama) { check_tp2_checkpoint("llama_tiny.safetensors"); }

TEST(Convert, ShardsFollowHuggingFaceHubsSplitAndReadBackIdentically) {
  const fs::path d = work_dir();
  const SafeTensorsFile g = SafeTensorsFile::open(golden("llama_tiny.safetensors"));
  fs::create_directories(d / "in");
  const auto kept = write_hf_input(g, d / "in" / "model.safetensors");
  convert(d / "in", d / "ckpt");
  ConvertOptions o;
  o.max_shard_size = "60KB";  // the MLP matrices are 24 KiB, the norms 256 B: several per shard
  const ConvertSummary s = convert(d / "ckpt", d / "sharded", o);
  ASSERT_GE(s.files.size(), 4u);
  const size_t n = s.files.size() - 1;  // the index last
  EXPECT_EQ(s.files.back(), (d / "sharded" / "model.safetensors.index.json").string());
  EXPECT_FALSE(fs::exists(d / "sharded" / "model.safetensors"));
  std::ifstream in(d / "sharded" / "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  int64_t total = 0;
  std::vector<int64_t> shard_bytes(n, 0), first_bytes(n, 0);  // each shard's size and its first tensor's
  for (size_t i = 0; i < n; ++i) {
    char want[64];
    std::snprintf(want, sizeof want, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    ASSERT_EQ(fs::path(s.files[i]).filename().string(), want);
    EXPECT_EQ(SafeTensorsFile::open(s.files[i]).metadata().at("format"), "pt");
    const std::vector<StHeaderEntry> header = read_safetensors_header(s.files[i]);  // in file order
    ASSERT_FALSE(header.empty());
    for (const StHeaderEntry& t : header) {
      EXPECT_EQ(index["weight_map"].value(t.name, ""), want) << t.name;
      EXPECT_EQ(t.dtype, "F32") << t.name;
      int64_t bytes = 4;
      for (int64_t x : t.shape) bytes *= x;
      if (shard_bytes[i] == 0) first_bytes[i] = bytes;
      shard_bytes[i] += bytes;
      total += bytes;
    }
    EXPECT_TRUE(shard_bytes[i] <= 60000 || header.size() == 1) << want << ": " << shard_bytes[i] << " bytes";
  }
  // huggingface_hub's greedy split: a new shard only when its first tensor did not fit the last one.
  for (size_t i = 0; i + 1 < n; ++i)
    EXPECT_GT(shard_bytes[i] + first_bytes[i + 1], 60000) << "shard " << i + 2 << " could have been part of " << i + 1;
  EXPECT_EQ(index["weight_map"].size(), kept.size());
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  expect_bitwise_equal(read_hf(d / "sharded"), kept, "sharded export");
  expect_golden_logits("llama_tiny.safetensors", d / "sharded");
}

TEST(Convert, HalfAndBfloatRoundTripsAreExact) {
  for (const char* dt : {"f16", "bf16"}) {
    const fs::path d = work_dir() / dt;
    const std::string src = golden(std::string("hf_tiny_") + dt + ".safetensors");
    convert(src, d / "ckpt");
    ConvertOptions o;
    o.dtype = std::string(dt) == "f16" ? "float16" : "bfloat16";
    convert(d / "ckpt", d / "out.safetensors", o);
    const SafeTensorsFile in = SafeTensorsFile::open(src), out = SafeTensorsFile::open((d / "out.safetensors").string());
    size_t compared = 0;
    for (const auto& [name, t] : in.tensors()) {
      if (hf_ignored_tensor(name)) continue;  // the attention-mask buffers
      if (name == "lm_head.weight") continue;  // tied
      ASSERT_TRUE(out.has(name)) << dt << ": " << name;
      const StTensor& o2 = out.get(name);
      ASSERT_EQ(o2.dtype, t.dtype) << name;
      ASSERT_EQ(o2.nbytes, t.nbytes) << name;
      EXPECT_EQ(std::memcmp(o2.data, t.data, static_cast<size_t>(t.nbytes)), 0) << dt << ": " << name;
      ++compared;
    }
    EXPECT_EQ(compared, out.tensors().size()) << dt;
    EXPECT_EQ(compared, 4u + 12u * 2u) << dt;
  }
}

// The nearest representable value, ties to the even one: checked against both neighbours of the
// value written, so the rounding is tested without a second implementation of it.
void expect_nearest_even(float x, uint16_t h, float (*from)(uint16_t), const std::string& what) {
  const double got = from(h), xd = x;
  ASSERT_FALSE(std::isnan(got)) << what << ": " << x;
  for (int step : {-1, 1}) {
    if ((h & 0x7fff) == 0 && step == -1) continue;  // zero's neighbour below is the other zero's
    const double other = from(static_cast<uint16_t>(h + step));
    if (std::isnan(other)) continue;
    const double dg = std::abs(got - xd), dn = std::abs(other - xd);
    ASSERT_LE(dg, dn) << what << ": " << x << " written as " << got << ", but " << other << " is nearer";
    if (dg == dn) {
      ASSERT_EQ(h & 1, 0) << what << ": the tie " << x << " not rounded to even";
    }
  }
}

TEST(Convert, Float32ToHalfAndBfloatRoundsEveryValueToNearestEven) {
  const fs::path d = work_dir();
  // Values at the edges (ties, overflow, the subnormals) and random ones over the ranges that
  // matter, beside the golden Llama's weights.
  std::vector<float> edges = {1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11),  // f16 ties
                              1.0f + std::ldexp(1.0f, -8),  1.0f + 3 * std::ldexp(1.0f, -8),   // bf16 ties
                              65519.0f, 65520.0f, -1e6f, 3.4e38f, std::ldexp(1.0f, -25),
                              std::nextafter(std::ldexp(1.0f, -25), 1.0f), 3 * std::ldexp(1.0f, -25),
                              std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25), -0.0f, 1e-40f};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-26.0f, 17.0f), unit(-1.0f, 1.0f);
  for (int i = 0; i < 100000; ++i) edges.push_back(unit(rng) * std::exp2(exponent(rng)));
  write_safetensors((d / "in.safetensors").string(),
                    {{"edges", StDtype::kF32, {static_cast<int64_t>(edges.size())}, edges.data()}}, {{"format", "pt"}});
  // float16 output refuses a finite value it would hold as inf (65520, -1e6, 3.4e38 here; the Float16Overflow
  // test), so its rounding is checked on the other values; bfloat16 writes 3.4e38 as inf, as PyTorch does.
  std::vector<float> fits16;
  for (float v : edges)
    if (!(std::abs(v) >= 65520.0f)) fits16.push_back(v);
  write_safetensors((d / "in16.safetensors").string(),
                    {{"edges", StDtype::kF32, {static_cast<int64_t>(fits16.size())}, fits16.data()}}, {{"format", "pt"}});
  for (const char* dt : {"float16", "bfloat16"}) {
    ConvertOptions o;
    o.dtype = dt;
    const bool half = std::string(dt) == "float16";
    if (half) {
      try {
        convert(d / "in.safetensors", d / "refused.safetensors", o);
        ADD_FAILURE() << "65520 was written as float16";
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("edges: element 5 is 65520, beyond float16's range"), std::string::npos)
            << e.what();
      }
      EXPECT_FALSE(fs::exists(d / "refused.safetensors"));
    }
    for (const std::string& in : {golden("llama_tiny_sharded"), (d / (half ? "in16.safetensors" : "in.safetensors")).string()}) {
      const fs::path out = d / (std::string(dt) + "_" + fs::path(in).stem().string() + ".safetensors");
      convert(in, out, o);
      const SafeTensorsFile f = SafeTensorsFile::open(out.string());
      for (const auto& [name, v] : read_hf(in)) {
        const StTensor& t = f.get(name);
        ASSERT_EQ(t.dtype, half ? StDtype::kF16 : StDtype::kBF16) << name;
        for (size_t i = 0; i < v.size(); ++i) {
          uint16_t h;
          std::memcpy(&h, t.data + 2 * i, 2);
          // Past the largest finite value by half its step or more: infinity.
          if (std::abs(v[i]) >= (half ? 65520.0f : 3.3961e38f)) {
            ASSERT_EQ(h & 0x7fff, half ? 0x7c00 : 0x7f80) << dt << " " << name << "[" << i << "] = " << v[i];
            continue;
          }
          expect_nearest_even(v[i], h, half ? &half_to_float : static_cast<float (*)(uint16_t)>(&bf16_to_float),
                              std::string(dt) + " " + name + "[" + std::to_string(i) + "]");
        }
      }
    }
  }
}

}  // namespace
}  // namespace gf
