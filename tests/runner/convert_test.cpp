// `gridformer convert` (runner/cli/convert.h) on the golden tiny models PyTorch computed its logits from
// (tests/golden/*.safetensors, tests/models/golden_case.h): Hugging Face weights -> our checkpoint ->
// Hugging Face weights gives every tensor back bit for bit, the export loads into the model and
// gives PyTorch's logits; a checkpoint saved by two tensor-parallel ranks (with optimizer moments)
// exports the full tensors; sharding follows huggingface_hub's split and reads back identically;
// f16/bf16 round trips are exact and the float -> half roundings are to nearest even; damaged or
// missing inputs and occupied outputs are refused naming the path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
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
#include "models/weights/hf_config.h"
#include "runner/cli/convert.h"
#include "runner/config/config.h"
#include "tests/models/golden_case.h"

namespace gf {
namespace {

namespace fs = std::filesystem;
using namespace golden_case;

// A fresh directory per test (ctest runs the tests of this binary as concurrent processes).
fs::path work_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : name)
    if (c == '/') c = '_';
  const fs::path d = fs::path(GF_BINARY_DIR) / "test_output" / "convert" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

ConvertSummary convert(const fs::path& from, const fs::path& to, ConvertOptions o = {}) {
  o.from = from.string();
  o.to = to.string();
  std::ostringstream progress;
  return convert_weights(o, progress);
}

std::string convert_error(const fs::path& from, const fs::path& to, ConvertOptions o = {}) {
  try {
    convert(from, to, o);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

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

// Every tensor of `f` (a .safetensors file or a Hugging Face directory / index) by name, as floats.
std::map<std::string, std::vector<float>> read_hf(const fs::path& path) {
  std::map<std::string, std::vector<float>> r;
  std::set<std::string> files;
  for (const auto& [name, file] : hf_checkpoint_tensors(resolve_checkpoint_path(path.string()))) files.insert(file);
  for (const std::string& file : files) {
    const SafeTensorsFile f = SafeTensorsFile::open(file);
    for (const auto& [name, t] : f.tensors()) r[name] = f.floats(name);
  }
  return r;
}

void expect_bitwise_equal(const std::map<std::string, std::vector<float>>& got,
                          const std::map<std::string, std::vector<float>>& want, const std::string& what) {
  std::set<std::string> got_names, want_names;
  for (const auto& [n, v] : got) got_names.insert(n);
  for (const auto& [n, v] : want) want_names.insert(n);
  ASSERT_EQ(got_names, want_names) << what << ": the tensors written are not the ones read";
  for (const auto& [n, v] : want) {
    const std::vector<float>& g = got.at(n);
    ASSERT_EQ(g.size(), v.size()) << what << ": " << n;
    EXPECT_EQ(std::memcmp(g.data(), v.data(), v.size() * sizeof(float)), 0) << what << ": " << n << " differs";
  }
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
  for (const char* dt : {"float16", "bfloat16"}) {
    ConvertOptions o;
    o.dtype = dt;
    const bool half = std::string(dt) == "float16";
    for (const std::string& in : {golden("llama_tiny_sharded"), (d / "in.safetensors").string()}) {
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

TEST(ConvertSizes, HuggingFaceHubsUnits) {
  EXPECT_EQ(parse_byte_size("5GB"), 5000000000);
  EXPECT_EQ(parse_byte_size("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(parse_byte_size("100KB"), 100000);
  EXPECT_EQ(parse_byte_size("1.5mb"), 1500000);
  EXPECT_EQ(parse_byte_size("4096"), 4096);
  EXPECT_THROW(parse_byte_size("5 parsecs"), std::runtime_error);
  EXPECT_THROW(parse_byte_size("0"), std::runtime_error);
}

TEST(ConvertRefuses, MissingOrUnknownSource) {
  const fs::path d = work_dir();
  EXPECT_NE(convert_error(d / "nope", d / "out").find("no such file or directory"), std::string::npos);
  fs::create_directories(d / "empty");
  EXPECT_NE(convert_error(d / "empty", d / "out").find("neither one of our checkpoints"), std::string::npos);
  EXPECT_NE(convert_error("/nonexistent/x.ckpt", d / "out").find("no such file"), std::string::npos);
  std::ofstream(d / "m.ckpt") << "x";
  EXPECT_NE(convert_error(d / "m.ckpt", d / "out").find("MindSpore .ckpt"), std::string::npos);
}

TEST(ConvertRefuses, DamagedCheckpoint) {
  const fs::path d = work_dir();
  convert(golden("llama_tiny_sharded"), d / "ckpt");
  const fs::path shard = d / "ckpt" / "converted" / ckpt::shard_file(0);
  ASSERT_TRUE(fs::exists(shard));
  const auto size = fs::file_size(shard);
  {  // one byte of the data changed: the CRC-32C no longer matches
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 5));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(static_cast<std::streamoff>(size - 5));
    f.write(&c, 1);
  }
  std::string e = convert_error(d / "ckpt", d / "out");
  EXPECT_NE(e.find(ckpt::shard_file(0)), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(d / "out" / "model.safetensors")) << "nothing written from a damaged checkpoint";
  fs::resize_file(shard, size / 2);  // truncated
  e = convert_error(d / "ckpt", d / "out2");
  EXPECT_NE(e.find(ckpt::shard_file(0)), std::string::npos) << e;
  fs::remove(shard);
  e = convert_error(d / "ckpt", d / "out3");
  EXPECT_NE(e.find(ckpt::shard_file(0)), std::string::npos) << e;
  fs::remove(d / "ckpt" / "converted" / "index.json");
  std::ofstream(d / "ckpt" / "converted" / "index.json") << "{not json";
  e = convert_error(d / "ckpt", d / "out4");
  EXPECT_NE(e.find("index.json"), std::string::npos) << e;
}

TEST(ConvertRefuses, OccupiedOrSameTargetUnlessOverwrite) {
  const fs::path d = work_dir();
  const fs::path in = golden("llama_tiny_sharded");
  convert(in, d / "ckpt");
  // A directory with something in it.
  fs::create_directories(d / "hf");
  std::ofstream(d / "hf" / "config.json") << "{}";
  std::string e = convert_error(d / "ckpt", d / "hf");
  EXPECT_NE(e.find("is a directory that is not empty"), std::string::npos) << e;
  EXPECT_NE(e.find("--overwrite"), std::string::npos) << e;
  ConvertOptions o;
  o.overwrite = true;
  convert(d / "ckpt", d / "hf", o);
  EXPECT_TRUE(fs::exists(d / "hf" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(d / "hf" / "config.json")) << "--overwrite keeps the files that are not weights";
  // Sharded over it: the old model.safetensors goes (the loader would read it instead of the index).
  o.max_shard_size = "100KB";
  convert(d / "ckpt", d / "hf", o);
  EXPECT_FALSE(fs::exists(d / "hf" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(d / "hf" / "model.safetensors.index.json"));
  expect_bitwise_equal(read_hf(d / "hf"), read_hf(in), "resharded over an earlier export");
  // And back to one file: the shards and the index go.
  o.max_shard_size.clear();
  convert(d / "ckpt", d / "hf", o);
  for (const auto& f : fs::directory_iterator(d / "hf"))
    EXPECT_TRUE(f.path().filename() == "model.safetensors" || f.path().filename() == "config.json" ||
                f.path().filename() == "generation_config.json") << f.path();
  // A file, a checkpoint directory.
  e = convert_error(d / "ckpt", d / "hf" / "model.safetensors");
  EXPECT_NE(e.find("exists"), std::string::npos) << e;
  e = convert_error(in, d / "ckpt");
  EXPECT_NE(e.find("is a directory that is not empty"), std::string::npos) << e;
  o.max_shard_size.clear();
  convert(in, d / "ckpt", o);  // replaces `converted`
  // Where the input is (a copy: nothing may be written next to the golden files if this fails).
  fs::copy(in, d / "hf_in");
  e = convert_error(d / "hf_in", d / "hf_in", o);
  EXPECT_NE(e.find("is where --from's weights are"), std::string::npos) << e;
  e = convert_error(d / "ckpt", d / "ckpt", o);
  EXPECT_NE(e.find("is where --from's weights are"), std::string::npos) << e;
}

TEST(ConvertRefuses, OptionsThatDoNotApply) {
  const fs::path d = work_dir();
  const fs::path in = golden("llama_tiny_sharded");
  ConvertOptions o;
  o.dtype = "bfloat16";
  EXPECT_NE(convert_error(in, d / "ckpt", o).find("our checkpoints hold float32"), std::string::npos);
  o.dtype = "float64";
  EXPECT_NE(convert_error(in, d / "x.safetensors", o).find("--dtype float64"), std::string::npos);
  o = {};
  o.max_shard_size = "1MB";
  EXPECT_NE(convert_error(in, d / "x.safetensors", o).find("--max-shard-size applies"), std::string::npos);
  o.max_shard_size = "lots";
  o.format = "hf";
  EXPECT_NE(convert_error(in, d / "hf", o).find("--max-shard-size lots"), std::string::npos);
  o = {};
  o.format = "checkpoint";
  EXPECT_NE(convert_error(in, d / "x.safetensors", o).find("writes a directory"), std::string::npos);
  o.format = "onnx";
  EXPECT_NE(convert_error(in, d / "y", o).find("--format onnx"), std::string::npos);
  EXPECT_FALSE(fs::exists(d / "ckpt"));
  EXPECT_FALSE(fs::exists(d / "x.safetensors"));
}

TEST(ConvertRefuses, NonFloatTensorNamingIt) {
  const fs::path d = work_dir();
  const std::vector<float> w(4, 1.0f);
  const std::vector<int64_t> ids = {0, 1, 2, 3};
  write_safetensors((d / "odd.safetensors").string(),
                    {{"model.norm.weight", StDtype::kF32, {4}, w.data()},
                     {"model.position_ids", StDtype::kI64, {4}, ids.data()}},
                    {{"format", "pt"}});
  const std::string e = convert_error(d / "odd.safetensors", d / "ckpt");
  EXPECT_NE(e.find("odd.safetensors: tensor 'model.position_ids' has dtype I64"), std::string::npos) << e;
}

// A head equal to the embedding is a tied one saved twice and is dropped; one that differs is kept
// (a Llama's untied head is a parameter), and for GPT-2, which has none, a warning says so.
TEST(Convert, OnlyAHeadEqualToTheEmbeddingIsDropped) {
  const fs::path d = work_dir();
  const SafeTensorsFile src = SafeTensorsFile::open(golden("hf_tiny_f32.safetensors"));
  std::vector<std::vector<float>> data;
  data.reserve(src.tensors().size());
  std::vector<StWriteTensor> ts;
  for (const auto& [name, t] : src.tensors()) {
    data.push_back(src.floats(name));
    if (name == "lm_head.weight") data.back()[7] += 1.0f;
    ts.push_back({name, StDtype::kF32, t.shape, data.back().data()});
  }
  write_safetensors((d / "untied.safetensors").string(), ts, {{"format", "pt"}});
  ConvertOptions o;
  o.from = (d / "untied.safetensors").string();
  o.to = (d / "ckpt").string();
  std::ostringstream log;
  const ConvertSummary s = convert_weights(o, log);
  EXPECT_NE(log.str().find("lm_head.weight differs from wte.weight"), std::string::npos) << log.str();
  EXPECT_TRUE(ckpt::Reader::open((d / "ckpt").string()).has("lm_head.weight"));
  EXPECT_EQ(s.skipped.size(), 1u) << "the attention buffers only";
  // The golden file's own head is wte's bit for bit: dropped, without a warning.
  std::ostringstream quiet;
  o.from = golden("hf_tiny_f32.safetensors");
  o.to = (d / "ckpt2").string();
  convert_weights(o, quiet);
  EXPECT_FALSE(ckpt::Reader::open((d / "ckpt2").string()).has("lm_head.weight"));
  EXPECT_EQ(quiet.str().find("warning"), std::string::npos) << quiet.str();
}

TEST(Convert, ProgressAtEachTenthAndASummary) {
  const fs::path d = work_dir();
  ConvertOptions o;
  o.from = golden("llama_tiny_sharded");
  o.to = (d / "ckpt").string();
  std::ostringstream progress;
  const ConvertSummary s = convert_weights(o, progress);
  const std::string p = progress.str();
  EXPECT_NE(p.find("convert: 100% (21 of 21 tensors"), std::string::npos) << p;
  int lines = 0;
  for (char c : p) lines += c == '\n';
  EXPECT_EQ(lines, 10) << "no tensor is a tenth of the bytes, so each tenth gets its line: " << p;
  EXPECT_EQ(s.tensors, 21);
  EXPECT_EQ(s.bytes, 296192);  // the sharded golden's total_size: float32 throughout
  EXPECT_EQ(s.files.size(), 2u);
}

}  // namespace
}  // namespace gf

namespace gf {
namespace {

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// A one-rank checkpoint of `cfg`'s model (the seed's weights) that records its config as the trainer does.
void write_seeded_checkpoint(const Config& cfg, const fs::path& root) {
  const ModelEntry& e = find_model(cfg.model.arch, cfg.model.type);
  const Placement placed = TransformerLM::make_placement(e.spec(cfg.model), e.names, cfg.model, model_layout(cfg), 0);
  AlignedBuffer<float> w(static_cast<size_t>(placed.total_floats()));
  placed.initialize(w.data(), 7);
  const std::string tmp = ckpt::begin_save(root.string(), "step_1");
  std::vector<ckpt::Piece> pieces;
  for (const TensorPlacement& t : placed.tensors())
    for (auto& p : ckpt::pieces_of(t, t.spec->name, w.data() + t.offset)) pieces.push_back(std::move(p));
  ckpt::write_index(tmp, {ckpt::write_shard(tmp, 0, pieces)}, {{"step", 1}, {"config", dump_resolved(cfg)}});
  ckpt::commit_save(root.string(), "step_1", 0);
}

// Our checkpoint -> Hugging Face writes the model's config.json (what the checkpoint's config says,
// in transformers' keys); Hugging Face -> our checkpoint keeps it, and back to Hugging Face writes it again.
TEST(Convert, ConfigJsonGoesWithTheWeightsBothWays) {
  for (const char* yaml : {"configs/gpt2/run_gpt2_tiny.yaml", "configs/llama/run_llama_tiny.yaml",
                           "configs/moe/run_mixtral_tiny.yaml"}) {
    const fs::path d = work_dir() / fs::path(yaml).stem();
    const Config cfg = load_config(std::string(GF_SOURCE_DIR) + "/" + yaml, {"model.model_config.vocab_size=1000"});
    write_seeded_checkpoint(cfg, d / "run");
    const ConvertSummary s = convert(d / "run", d / "hf");
    EXPECT_NE(std::find(s.files.begin(), s.files.end(), (d / "hf" / "config.json").string()), s.files.end()) << yaml;
    const nlohmann::json written = read_json(d / "hf" / "config.json");
    EXPECT_EQ(written, hf_config_json(cfg.model)) << yaml;
    const HfConfigCheck check = check_hf_config(written, cfg.model, "config.json");
    EXPECT_TRUE(check.errors.empty() && check.warnings.empty()) << yaml;
    // generation_config.json as save_pretrained writes it from the config: its special token ids.
    const nlohmann::json gen = read_json(d / "hf" / "generation_config.json");
    EXPECT_EQ(gen.value("_from_model_config", false), true) << yaml;
    ASSERT_TRUE(written.contains("eos_token_id")) << yaml;
    for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
      EXPECT_EQ(gen.value(k, nlohmann::json()), written.value(k, nlohmann::json())) << yaml << " " << k;
    convert(d / "hf", d / "ckpt");
    convert(d / "ckpt", d / "hf2");
    EXPECT_EQ(read_json(d / "hf2" / "config.json"), written) << yaml;
    // --dtype: config.json's torch_dtype names the dtype the weights were written in (save_pretrained's record).
    for (const char* dtype : {"bfloat16", "float16"}) {
      ConvertOptions o;
      o.dtype = dtype;
      const fs::path out = d / (std::string("hf_") + dtype);
      convert(d / "run", out, o);
      nlohmann::json want = written;
      want["torch_dtype"] = dtype;
      EXPECT_EQ(read_json(out / "config.json"), want) << yaml << " " << dtype;
      EXPECT_EQ(SafeTensorsFile::open((out / "model.safetensors").string()).tensors().begin()->second.dtype,
                std::string(dtype) == "bfloat16" ? StDtype::kBF16 : StDtype::kF16) << yaml;
    }
  }
}

// The tokenizer goes with the weights: the GPT-2 BPE files the checkpoint's config names, as GPT2Tokenizer's
// vocab.json and merges.txt with its tokenizer_config.json; a config whose files are not there gets the reason.
TEST(Convert, TheTokenizerGoesWithTheWeights) {
  const std::string vocab = std::string(GF_SOURCE_DIR) + "/data/gpt2/gpt2-vocab.json";
  const std::string merges = std::string(GF_SOURCE_DIR) + "/data/gpt2/gpt2-merges.txt";
  if (!fs::exists(vocab) || !fs::exists(merges)) GTEST_SKIP() << "no GPT-2 vocabulary (scripts/setup.sh fetches it)";
  const fs::path d = work_dir();
  const Config cfg = load_config(std::string(GF_SOURCE_DIR) + "/configs/gpt2/run_gpt2_tiny.yaml",
                                 {"model.model_config.vocab_size=1000", "processor.tokenizer.vocab_file=" + vocab,
                                  "processor.tokenizer.merge_file=" + merges});
  write_seeded_checkpoint(cfg, d / "run");
  convert(d / "run", d / "hf");
  const auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(d / "hf" / "vocab.json"), bytes(vocab));
  EXPECT_EQ(bytes(d / "hf" / "merges.txt"), bytes(merges));
  const nlohmann::json tc = read_json(d / "hf" / "tokenizer_config.json");
  EXPECT_EQ(tc.value("tokenizer_class", ""), "GPT2Tokenizer");
  EXPECT_EQ(tc.value("eos_token", ""), "<|endoftext|>");
  EXPECT_EQ(read_json(d / "hf" / "special_tokens_map.json").value("bos_token", ""), "<|endoftext|>");
  // Hugging Face weights -> Hugging Face: the tokenizer files beside them, copied.
  convert(d / "hf" / "model.safetensors", d / "again", [] { ConvertOptions o; o.format = "hf"; return o; }());
  EXPECT_EQ(bytes(d / "again" / "vocab.json"), bytes(vocab));
  // Files the config names that are not there: none written, and the note says which.
  const Config missing = load_config(std::string(GF_SOURCE_DIR) + "/configs/gpt2/run_gpt2_tiny.yaml",
                                     {"model.model_config.vocab_size=1000", "processor.tokenizer.vocab_file=/nonexistent/v.json"});
  write_seeded_checkpoint(missing, d / "run2");
  ConvertOptions o;
  o.from = (d / "run2").string();
  o.to = (d / "hf2").string();
  std::ostringstream progress;
  convert_weights(o, progress);
  EXPECT_FALSE(fs::exists(d / "hf2" / "vocab.json"));
  EXPECT_NE(progress.str().find("no tokenizer files written: processor.tokenizer's /nonexistent/v.json is not there"),
            std::string::npos) << progress.str();
}

TEST(Convert, AModelHuggingFaceCannotExpressGetsNoConfigJsonAndTheReason) {
  const fs::path d = work_dir();
  const Config cfg = load_config(std::string(GF_SOURCE_DIR) + "/configs/gpt2/run_gpt2_tiny.yaml",
                                 {"model.model_config.position_embedding_type=rope", "model.model_config.vocab_size=1000"});
  write_seeded_checkpoint(cfg, d / "run");
  ConvertOptions o;
  o.from = (d / "run").string();
  o.to = (d / "hf").string();
  std::ostringstream progress;
  convert_weights(o, progress);
  EXPECT_FALSE(fs::exists(d / "hf" / "config.json"));
  EXPECT_FALSE(fs::exists(d / "hf" / "generation_config.json"));
  EXPECT_NE(progress.str().find("no config.json written: Hugging Face's GPT2LMHeadModel has no rotary positions"),
            std::string::npos) << progress.str();
}

}  // namespace
}  // namespace gf
