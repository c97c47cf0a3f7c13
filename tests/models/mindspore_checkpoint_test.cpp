// MindSpore .ckpt files of MindFormers' GPT-2, written here with the classes protoc generates from
// models/weights/proto/mindspore_checkpoint.proto the way MindSpore's save_checkpoint writes them (one
// serialized Checkpoint per tensor, concatenated; big tensors in several chunks), with the names
// and layouts of MindFormers' convert_weight.py applied by this file's own code: the reader maps
// them back to Hugging Face's names and layouts element by element (q, k, v transposed and fused),
// skips optimizer state, converts Float16 / BFloat16, checks the crc_check trailer, refuses unknown
// names and damaged files naming the file and the tensor, and a GPT-2 loaded from the .ckpt holds
// bitwise the weights of the same model loaded from the Hugging Face file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/io/safetensors.h"
#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "models/weights/mindspore_checkpoint.h"
#include "models/pipeline_stage.h"
#include "models/weights/proto/mindspore_checkpoint.pb.h"
#include "tests/tiny_model.h"
#include "tests/test_util.h"

namespace gf {
namespace {

std::string golden(const std::string& n) { return std::string(GF_SOURCE_DIR) + "/tests/golden/" + n; }

// One file per test: ctest runs the tests of a suite as concurrent processes.
std::string scratch(const std::string& suffix = ".ckpt") {
  return std::string(GF_BINARY_DIR) + "/ms_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + suffix;
}

// One entry as save_checkpoint writes it: a whole Checkpoint message holding one Value.
std::string entry(const std::string& tag, const std::string& type, const std::vector<int64_t>& dims,
                  const std::string& bytes) {
  gf::mindspore::Checkpoint c;
  gf::mindspore::Checkpoint::Value* v = c.add_value();
  v->set_tag(tag);
  gf::mindspore::TensorProto* t = v->mutable_tensor();
  for (int64_t d : dims) t->add_dims(d);
  t->set_tensor_type(type);
  t->set_tensor_content(bytes);
  return c.SerializeAsString();
}

std::string f32(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size()); }
std::string u16(const std::vector<uint16_t>& v) { return std::string(reinterpret_cast<const char*>(v.data()), 2 * v.size()); }
std::string i32(int32_t x) { return std::string(reinterpret_cast<const char*>(&x), 4); }

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// save_checkpoint(crc_check=True)'s trailer: "crc_num" + zlib's CRC-32 of the bytes before, as 10
// big-endian bytes.
std::string with_crc(const std::string& body) {
  const uint32_t crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
  std::string t = "crc_num" + std::string(6, '\0');
  for (int s = 24; s >= 0; s -= 8) t.push_back(static_cast<char>((crc >> s) & 0xff));
  return body + t;
}

using test::message_of;

// A one-layer model's entries with values that say where they are: q, k, v's element (o, i) of
// projection p is 1000 p + 10 o + i.
constexpr int64_t kH = 4;  // hidden
std::string small_model_entries() {
  std::string b;
  const std::string L = "backbone.blocks.0.";
  for (int p = 0; p < 3; ++p) {
    std::vector<float> w(kH * kH), bias(kH);
    for (int64_t o = 0; o < kH; ++o) {
      for (int64_t i = 0; i < kH; ++i) w[o * kH + i] = static_cast<float>(1000 * p + 10 * o + i);
      bias[o] = static_cast<float>(-100 * p - o);
    }
    b += entry(L + "attention.dense" + std::to_string(p + 1) + ".weight", "Float32", {kH, kH}, f32(w));
    b += entry(L + "attention.dense" + std::to_string(p + 1) + ".bias", "Float32", {kH}, f32(bias));
  }
  std::vector<float> mapping(kH * 4 * kH);
  for (size_t i = 0; i < mapping.size(); ++i) mapping[i] = 0.5f * static_cast<float>(i);
  b += entry(L + "output.mapping.weight", "Float32", {kH, 4 * kH}, f32(mapping));  // [in, out], kept
  b += entry(L + "layernorm1.gamma", "Float32", {kH}, f32({1, 2, 3, 4}));
  // Float16 1, -2, 0.5, 3 and BFloat16 1.5, -0.25, 2, 8 (their bit patterns).
  b += entry("backbone.layernorm.beta", "Float16", {kH}, u16({0x3c00, 0xc000, 0x3800, 0x4200}));
  b += entry("backbone.layernorm.gamma", "BFloat16", {kH}, u16({0x3fc0, 0xbe80, 0x4000, 0x4100}));
  b += entry(L + "attention.beta", "Float32", {1, 1, 2, 2}, f32({1, 0, 1, 1}));  // Hugging Face's mask buffer
  b += entry("adam_m." + L + "layernorm1.gamma", "Float32", {kH}, f32({9, 9, 9, 9}));
  b += entry("global_step", "Int32", {1}, i32(7));
  b += entry("epoch_num", "Int64", {}, std::string(8, '\0'));
  return b;
}

TEST(MindSporeCheckpoint, MapsMindFormersNamesAndLayoutsToHuggingFaces) {
  const std::string path = scratch();
  write_file(path, small_model_entries());
  const MindFormersGpt2Weights w = read_mindformers_gpt2(path);
  EXPECT_EQ(w.non_weights, 3);  // adam_m., global_step, epoch_num
  EXPECT_EQ(w.mask_buffers, 1);
  ASSERT_EQ(w.tensors.size(), 6u) << "c_attn weight and bias, c_fc weight, ln_1.weight, ln_f bias and weight";
  const MappedTensor& qkv = w.tensors.at("h.0.attn.c_attn.weight");
  ASSERT_EQ(qkv.shape, (std::vector<int64_t>{kH, 3 * kH}));  // Conv1D [in, 3 out]
  for (int64_t i = 0; i < kH; ++i)
    for (int p = 0; p < 3; ++p)
      for (int64_t o = 0; o < kH; ++o)
        EXPECT_EQ(qkv.values[i * 3 * kH + p * kH + o], static_cast<float>(1000 * p + 10 * o + i)) << i << " " << p << " " << o;
  const MappedTensor& qkv_b = w.tensors.at("h.0.attn.c_attn.bias");
  ASSERT_EQ(qkv_b.shape, (std::vector<int64_t>{3 * kH}));
  for (int p = 0; p < 3; ++p)
    for (int64_t o = 0; o < kH; ++o) EXPECT_EQ(qkv_b.values[p * kH + o], static_cast<float>(-100 * p - o));
  const MappedTensor& fc = w.tensors.at("h.0.mlp.c_fc.weight");
  EXPECT_EQ(fc.shape, (std::vector<int64_t>{kH, 4 * kH}));
  for (size_t i = 0; i < fc.values.size(); ++i) EXPECT_EQ(fc.values[i], 0.5f * static_cast<float>(i));
  EXPECT_EQ(fc.source, "backbone.blocks.0.output.mapping.weight");
  EXPECT_EQ(w.tensors.at("h.0.ln_1.weight").values, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(w.tensors.at("ln_f.bias").values, (std::vector<float>{1, -2, 0.5f, 3}));
  EXPECT_EQ(w.tensors.at("ln_f.weight").values, (std::vector<float>{1.5f, -0.25f, 2, 8}));
}

TEST(MindSporeCheckpoint, JoinsTheChunksOfOneTensor) {
  // save_checkpoint cuts a tensor over 512 MiB into Values with the same tag and the full dims.
  const std::string path = scratch();
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8};
  write_file(path, entry("x", "Float32", {2, 4}, f32(a)) + entry("x", "Float32", {2, 4}, f32(b)) +
                       entry("y", "Float32", {0}, f32({42})));
  std::vector<MsCkptEntry> got;
  read_mindspore_checkpoint(path, [&](MsCkptEntry& e) { got.push_back(e); });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].tag, "x");
  EXPECT_EQ(got[0].chunks, 2);
  EXPECT_EQ(mindspore_entry_floats(got[0], path), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(got[1].numel(), 1);  // dims [0]: MindSpore's scalar
  EXPECT_EQ(mindspore_entry_floats(got[1], path), std::vector<float>{42});

  write_file(path, entry("x", "Float32", {2, 4}, f32(a)) + entry("x", "Float16", {2, 4}, u16({1, 2, 3, 4})));
  EXPECT_NE(message_of([&] { read_mindspore_checkpoint(path, [](MsCkptEntry&) {}); })
                .find(path + ": entry 1 at byte "), std::string::npos);
  write_file(path, entry("x", "Float32", {1}, f32({1})) + entry("y", "Float32", {1}, f32({1})) +
                       entry("x", "Float32", {1}, f32({1})));
  EXPECT_NE(message_of([&] { read_mindspore_checkpoint(path, [](MsCkptEntry&) {}); })
                .find("tensor 'x' appears a second time"), std::string::npos);
}

TEST(MindSporeCheckpoint, EntriesOver64MiBParse) {
  // protobuf's CodedInputStream once stopped at 64 MiB by default; GPT-2's wte alone is 154 MB.
  const std::string path = scratch();
  const int64_t n = (72 << 20) / 4;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000003);
  write_file(path, entry("big", "Float32", {n}, f32(v)) + entry("after", "Float32", {1}, f32({3})));
  std::vector<std::string> tags;
  read_mindspore_checkpoint(path, [&](MsCkptEntry& e) {
    tags.push_back(e.tag);
    if (e.tag == "big") {
      const std::vector<float> got = mindspore_entry_floats(e, path);
      ASSERT_EQ(got.size(), v.size());
      EXPECT_EQ(std::memcmp(got.data(), v.data(), 4 * v.size()), 0);
    }
  });
  EXPECT_EQ(tags, (std::vector<std::string>{"big", "after"}));
  std::filesystem::remove(path);
}

TEST(MindSporeCheckpoint, ChecksTheCrcTrailer) {
  const std::string path = scratch();
  const std::string body = entry("backbone.layernorm.gamma", "Float32", {2}, f32({1, 2}));
  write_file(path, with_crc(body));
  int64_t n = 0;
  read_mindspore_checkpoint(path, [&](MsCkptEntry& e) { n += e.numel(); });
  EXPECT_EQ(n, 2);
  std::string damaged = with_crc(body);
  damaged[body.size() - 3] ^= 0x10;  // a bit of the tensor's bytes
  write_file(path, damaged);
  const std::string m = message_of([&] { read_mindspore_checkpoint(path, [](MsCkptEntry&) {}); });
  EXPECT_NE(m.find(path + ": CRC-32 mismatch"), std::string::npos) << m;
}

TEST(MindSporeCheckpoint, RefusesUnknownNamesAndDamagedFiles) {
  const std::string path = scratch();
  write_file(path, small_model_entries() + entry("backbone.blocks.0.attention.dense1.lora_a", "Float32", {1}, f32({0})));
  std::string m = message_of([&] { read_mindformers_gpt2(path); });
  EXPECT_NE(m.find(path + ": tensor 'backbone.blocks.0.attention.dense1.lora_a' is neither a weight of MindFormers' GPT-2"),
            std::string::npos) << m;

  write_file(path, entry("backbone.blocks.3.attention.dense1.weight", "Float32", {1, 1}, f32({0})) +
                       entry("backbone.blocks.3.attention.dense3.weight", "Float32", {1, 1}, f32({0})));
  m = message_of([&] { read_mindformers_gpt2(path); });
  EXPECT_NE(m.find("tensor 'backbone.blocks.3.attention.dense2.weight' is missing while "
                   "'backbone.blocks.3.attention.dense1.weight' is there"), std::string::npos) << m;

  write_file(path, entry("backbone.layernorm.gamma", "Int32", {1}, i32(1)));
  m = message_of([&] { read_mindformers_gpt2(path); });
  EXPECT_NE(m.find("tensor 'backbone.layernorm.gamma' is Int32, not a float type"), std::string::npos) << m;

  write_file(path, entry("backbone.layernorm.gamma", "Float32", {3}, f32({1, 2})));
  m = message_of([&] { read_mindformers_gpt2(path); });
  EXPECT_NE(m.find("tensor 'backbone.layernorm.gamma': 8 bytes of Float32 do not match dims [3]"), std::string::npos) << m;

  const std::string whole = small_model_entries();
  write_file(path, whole.substr(0, whole.size() - 5));
  m = message_of([&] { read_mindformers_gpt2(path); });
  EXPECT_EQ(m.rfind(path + ": entry ", 0), 0u) << m;
  EXPECT_NE(m.find("the file is truncated"), std::string::npos) << m;

  // A safetensors file under a .ckpt name is no Checkpoint protobuf.
  std::filesystem::copy_file(golden("hf_tiny_f32.safetensors"), path, std::filesystem::copy_options::overwrite_existing);
  m = message_of([&] { read_mindformers_gpt2(path); });
  EXPECT_NE(m.find(path + ": entry 0 at byte 0: "), std::string::npos) << m;
  EXPECT_NE(m.find("not a MindSpore .ckpt"), std::string::npos) << m;

  m = message_of([&] { read_mindformers_gpt2(scratch(".missing.ckpt")); });
  EXPECT_NE(m.find(scratch(".missing.ckpt") + ": cannot open"), std::string::npos) << m;
}

using test::hf_tiny_config;  // the golden hf_tiny_*.safetensors model

// The golden Hugging Face file written as MindFormers' convert_weight.py would write it: names
// mapped, c_attn split along its last dim into q, k, v and each transposed, lm_head dropped (tied),
// attn.bias kept as attention.beta; then optimizer state as a training checkpoint holds it.
std::string hf_tiny_as_mindformers(const std::string& hf_file) {
  const SafeTensorsFile src = SafeTensorsFile::open(hf_file);
  const std::map<std::string, std::string> plain = {
      {"ln_1.weight", "layernorm1.gamma"}, {"ln_1.bias", "layernorm1.beta"},
      {"ln_2.weight", "layernorm2.gamma"}, {"ln_2.bias", "layernorm2.beta"},
      {"attn.bias", "attention.beta"},     {"attn.c_proj.weight", "attention.projection.weight"},
      {"attn.c_proj.bias", "attention.projection.bias"}, {"mlp.c_fc.weight", "output.mapping.weight"},
      {"mlp.c_fc.bias", "output.mapping.bias"}, {"mlp.c_proj.weight", "output.projection.weight"},
      {"mlp.c_proj.bias", "output.projection.bias"}};
  const std::map<std::string, std::string> top = {
      {"ln_f.weight", "backbone.layernorm.gamma"}, {"ln_f.bias", "backbone.layernorm.beta"},
      {"wte.weight", "backbone.embedding.word_embedding.embedding_table"},
      {"wpe.weight", "backbone.embedding.position_embedding.embedding_table"}};
  std::string out;
  for (const auto& [full, t] : src.tensors()) {
    const std::string name = full.rfind("transformer.", 0) == 0 ? full.substr(12) : full;
    const std::vector<float> v = src.floats(full);
    if (name == "lm_head.weight") continue;
    if (top.count(name)) {
      out += entry(top.at(name), "Float32", t.shape, f32(v));
      out += entry("adam_m." + top.at(name), "Float32", t.shape, f32(std::vector<float>(v.size(), 0.0f)));
      continue;
    }
    if (name.rfind("h.", 0) != 0) throw std::runtime_error(hf_file + ": unexpected tensor " + full);
    const size_t dot = name.find('.', 2);
    const std::string block = "backbone.blocks." + name.substr(2, dot - 2) + ".", rest = name.substr(dot + 1);
    if (rest == "attn.c_attn.weight" || rest == "attn.c_attn.bias") {
      const bool weight = rest == "attn.c_attn.weight";
      const int64_t in = weight ? t.shape[0] : 1, out3 = t.shape.back(), o = out3 / 3;
      for (int p = 0; p < 3; ++p) {
        std::vector<float> part(static_cast<size_t>(in * o));
        for (int64_t r = 0; r < in; ++r)
          for (int64_t c = 0; c < o; ++c)  // weight: [in, o] slice, transposed to [o, in]
            part[static_cast<size_t>(weight ? c * in + r : c)] = v[static_cast<size_t>(r * out3 + p * o + c)];
        const std::string tag = block + "attention.dense" + std::to_string(p + 1) + (weight ? ".weight" : ".bias");
        out += entry(tag, "Float32", weight ? std::vector<int64_t>{o, in} : std::vector<int64_t>{o}, f32(part));
      }
      continue;
    }
    out += entry(block + plain.at(rest), "Float32", t.shape, f32(v));
  }
  out += entry("global_step", "Int32", {1}, i32(10));
  out += entry("scale_sense", "Float32", {}, f32({1024}));
  return out;
}

TEST(MindSporeCheckpoint, Gpt2LoadsTheWeightsOfTheHuggingFaceFile) {
  const std::string path = scratch();
  write_file(path, hf_tiny_as_mindformers(golden("hf_tiny_f32.safetensors")));
  ParallelContext ctx = ParallelContext::single();
  GPT2LMHeadModel a(hf_tiny_config(), ModelLayout{}, 1, ctx), b(hf_tiny_config(), ModelLayout{}, 1, ctx);
  const std::string note = a.load_hf_checkpoint(path);
  EXPECT_EQ(b.load_hf_checkpoint(golden("hf_tiny_f32.safetensors")), "");
  EXPECT_EQ(std::memcmp(a.weights(), b.weights(), sizeof(float) * a.params().total_floats()), 0);
  // 4 adam_m entries, global_step, scale_sense; the two layers' attention.beta.
  EXPECT_NE(note.find("skipped 6 optimizer-state and training-counter entries and 2 attention-mask buffers"),
            std::string::npos) << note;

  // A pipeline stage (the last layer, the final norm and the tied head) takes its share by name.
  const ModelConfig cfg = hf_tiny_config();
  PipelineStage stage(gpt2_spec(cfg), gpt2_name, cfg, ModelLayout{}, 1, ctx, {StageOptions{1, 2}});
  stage.load_hf_checkpoint(path);
  for (const TensorPlacement& t : stage.params().tensors()) {
    const TensorPlacement& w = a.params().at(t.spec->name);
    ASSERT_EQ(t.numel(), w.numel()) << t.spec->name;
    EXPECT_EQ(std::memcmp(stage.weights() + t.offset, a.weights() + w.offset, sizeof(float) * t.numel()), 0) << t.spec->name;
  }
}

TEST(MindSporeCheckpoint, ModelsThatDoNotFitAreRefusedByName) {
  const std::string path = scratch();
  write_file(path, hf_tiny_as_mindformers(golden("hf_tiny_f32.safetensors")));
  ParallelContext ctx = ParallelContext::single();
  auto refusal = [&](const ModelConfig& c) {
    return message_of([&] {
      if ((c.type == "LlamaConfig")) LlamaForCausalLM(c, ModelLayout{}, 1, ctx).load_hf_checkpoint(path);
      else GPT2LMHeadModel(c, ModelLayout{}, 1, ctx).load_hf_checkpoint(path);
    });
  };
  ModelConfig c = hf_tiny_config();
  c.num_layers = 3;
  std::string m = refusal(c);
  EXPECT_NE(m.find(path + ": tensor 'backbone.blocks.2.layernorm1.gamma' (GPT-2's h.2.ln_1.weight) is missing"),
            std::string::npos) << m;
  c.num_layers = 1;
  m = refusal(c);
  EXPECT_NE(m.find("(GPT-2's h.1."), std::string::npos) << m;
  EXPECT_NE(m.find("is not a parameter of the configured model"), std::string::npos) << m;
  c = hf_tiny_config();
  c.max_position_embeddings = 64;
  m = refusal(c);
  EXPECT_NE(m.find("tensor 'backbone.embedding.position_embedding.embedding_table' (GPT-2's wpe.weight) has shape "
                   "[32, 32], the configured model needs [64, 32] (MindFormers' position table has seq_length rows: "
                   "set max_position_embeddings: 32)"), std::string::npos) << m;
  c = hf_tiny_config();
  test::make_llama(c, 2, 48);
  m = refusal(c);
  EXPECT_NE(m.find(path + ": a MindSpore .ckpt is read for a dense GPT-2 only"), std::string::npos) << m;
}

}  // namespace
}  // namespace gf
