// `gridformer convert` (runner/cli/convert.h), continued from tests/runner/convert_test.cpp: huggingface_hub's
// size units; missing or damaged inputs, occupied outputs, options that do not apply and non-float tensors are
// refused naming the path or the option; only a head equal to the embedding is dropped; the progress lines; the
// config.json, generation_config.json and tokenizer files that go with the weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/math/aligned_buffer.h"
#include "core/io/checkpoint.h"
#include "core/io/safetensors.h"
#include "models/registry.h"
#include "models/transformer_lm.h"
#include "models/weights/hf_config.h"
#include "runner/cli/convert.h"
#include "runner/config/config.h"
#include "tests/models/golden_case.h"
#include "tests/runner/convert_test_util.h"

namespace gf {
namespace {

namespace fs = std::filesystem;
using namespace golden_case;
using namespace convert_test;  // the helpers both halves share (convert_test_util.h)

std::string convert_error(const fs::path& from, const fs::path& to, ConvertOptions o = {}) {
  try {
    convert(from, to, o);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
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
  std::string progress;
  convert(d / "run2", d / "hf2", {}, &progress);
  EXPECT_FALSE(fs::exists(d / "hf2" / "vocab.json"));
  EXPECT_NE(progress.find("no tokenizer files written: processor.tokenizer's /nonexistent/v.json is not there"),
            std::string::npos) << progress;
}

TEST(Convert, AModelHuggingFaceCannotExpressGetsNoConfigJsonAndTheReason) {
  const fs::path d = work_dir();
  const Config cfg = load_config(std::string(GF_SOURCE_DIR) + "/configs/gpt2/run_gpt2_tiny.yaml",
                                 {"model.model_config.position_embedding_type=rope", "model.model_config.vocab_size=1000"});
  write_seeded_checkpoint(cfg, d / "run");
  std::string progress;
  convert(d / "run", d / "hf", {}, &progress);
  EXPECT_FALSE(fs::exists(d / "hf" / "config.json"));
  EXPECT_FALSE(fs::exists(d / "hf" / "generation_config.json"));
  EXPECT_NE(progress.find("no config.json written: Hugging Face's GPT2LMHeadModel has no rotary positions"),
            std::string::npos) << progress;
}

}  // namespace
}  // namespace gf
