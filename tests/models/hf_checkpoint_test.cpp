// Loading Hugging Face GPT-2 safetensors (F32, F16, BF16, with the `transformer.` prefix, the tied
// lm_head and the attn.bias buffers): the forward matches PyTorch's on the same weights, and files
// that do not fit the model are refused naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <functional>

#include "core/io/safetensors.h"
#include "models/arch/gpt2.h"
#include "tests/tiny_model.h"

namespace gf {
namespace {

std::string golden(const std::string& n) { return std::string(GF_SOURCE_DIR) + "/tests/golden/" + n; }

using test::hf_tiny_config;

class HfCheckpoint : public ::testing::TestWithParam<const char*> {};

TEST_P(HfCheckpoint, ForwardMatchesPyTorchOnTheSameWeights) {
  const std::string dt = GetParam();
  ParallelContext ctx = ParallelContext::single();
  GPT2LMHeadModel model(hf_tiny_config(), ModelLayout{}, 1, ctx);
  model.load_hf_checkpoint(golden("hf_tiny_" + dt + ".safetensors"));
  const SafeTensorsFile ref = SafeTensorsFile::open(golden("hf_tiny_expected.safetensors"));
  const auto tokens = ref.ints("tokens");
  const double loss = model.forward(tokens.data(), StepInfo{1, 0, false}) / 16.0;
  const double ref_loss = ref.floats("loss_" + dt)[0];
  EXPECT_LE(std::abs(loss - ref_loss) / ref_loss, 1e-5) << dt;
  const auto logits = ref.floats("logits_" + dt);
  double diff = 0, mx = 0;
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t v = 0; v < 300; ++v) {
      diff = std::max(diff, std::abs(static_cast<double>(model.logits()[r * model.logits_ld() + v]) - logits[r * 300 + v]));
      mx = std::max(mx, std::abs(static_cast<double>(logits[r * 300 + v])));
    }
  EXPECT_LE(diff / mx, 1e-5) << dt;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HfCheckpoint, ::testing::Values("f32", "f16", "bf16"));

// Rewrites the f32 file with one change and expects the loader to refuse it naming `needle`.
void expect_refused(const std::function<void(std::vector<StWriteTensor>&, std::vector<std::vector<float>>&)>& edit,
                    const std::string& needle) {
  const SafeTensorsFile src = SafeTensorsFile::open(golden("hf_tiny_f32.safetensors"));
  std::vector<StWriteTensor> ts;
  std::vector<std::vector<float>> data;
  data.reserve(src.tensors().size() + 1);
  for (const auto& [name, t] : src.tensors()) {
    data.push_back(src.floats(name));
    ts.push_back({name, StDtype::kF32, t.shape, data.back().data()});
  }
  edit(ts, data);
  // One file per test: ctest -j runs the tests of this suite as concurrent processes.
  const std::string path = std::string(GF_BINARY_DIR) + "/hf_tiny_edited_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".safetensors";
  write_safetensors(path, ts);
  ParallelContext ctx = ParallelContext::single();
  GPT2LMHeadModel model(hf_tiny_config(), ModelLayout{}, 1, ctx);
  try {
    model.load_hf_checkpoint(path);
    FAIL() << "accepted a file that does not fit; expected a message naming " << needle;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HfCheckpointRefuses, WrongShape) {
  expect_refused([](auto& ts, auto&) {
    for (auto& t : ts) if (t.name == "transformer.h.1.mlp.c_fc.weight") t.shape = {128, 32};
  }, "tensor 'transformer.h.1.mlp.c_fc.weight' has shape [128, 32], the configured model needs [32, 128]");
}

TEST(HfCheckpointRefuses, MissingTensor) {
  expect_refused([](auto& ts, auto&) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [](auto& t) { return t.name == "transformer.ln_f.bias"; }), ts.end());
  }, "tensor 'ln_f.bias' is missing");
}

TEST(HfCheckpointRefuses, UnknownTensor) {
  expect_refused([](auto& ts, auto& data) {
    data.push_back(std::vector<float>(32, 0.0f));
    ts.push_back({"transformer.h.7.ln_1.weight", StDtype::kF32, {32}, data.back().data()});
  }, "tensor 'transformer.h.7.ln_1.weight' is not a parameter of the configured model");
}

TEST(HfCheckpointPaths, DirectoryMeansItsModelSafetensorsAndCkptIsMindSpores) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(GF_BINARY_DIR) / "hf_tiny_dir";
  fs::create_directories(dir);
  fs::copy_file(golden("hf_tiny_f32.safetensors"), dir / "model.safetensors", fs::copy_options::overwrite_existing);
  ParallelContext ctx = ParallelContext::single();
  GPT2LMHeadModel a(hf_tiny_config(), ModelLayout{}, 1, ctx), b(hf_tiny_config(), ModelLayout{}, 1, ctx);
  a.load_hf_checkpoint(dir.string());
  b.load_hf_checkpoint(golden("hf_tiny_f32.safetensors"));
  EXPECT_EQ(std::memcmp(a.weights(), b.weights(), sizeof(float) * a.params().total_floats()), 0);
  try {  // read by the MindSpore reader (tests/models/mindspore_checkpoint_test.cpp), not as safetensors
    a.load_hf_checkpoint("/nonexistent/gpt2.ckpt");
    FAIL() << "a missing .ckpt was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/gpt2.ckpt: cannot open"), std::string::npos) << e.what();
  }
}

TEST(SafeTensors, RefusesBrokenFiles) {
  const std::string path = std::string(GF_BINARY_DIR) + "/broken.safetensors";
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  auto message = [&]() -> std::string {
    try { SafeTensorsFile::open(path); } catch (const std::runtime_error& e) { return e.what(); }
    return "";
  };
  write("abc");
  EXPECT_NE(message().find("shorter than the 8-byte header length"), std::string::npos);
  std::string h = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  std::string len(8, '\0');
  len[0] = static_cast<char>(h.size());
  write(len + h + std::string(8, '\0'));  // 8 data bytes, 16 promised
  EXPECT_NE(message().find("tensor 'a': data_offsets [0,16] outside the 8-byte data section"), std::string::npos) << message();
  h = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})";
  len[0] = static_cast<char>(h.size());
  write(len + h + std::string(16, '\0'));
  EXPECT_NE(message().find("tensor 'a': 16 bytes do not match shape"), std::string::npos) << message();
  h = R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})";
  len[0] = static_cast<char>(h.size());
  write(len + h + std::string(16, '\0'));
  EXPECT_NE(message().find("unsupported dtype"), std::string::npos) << message();
}

TEST(SafeTensors, HalfAndBfloatConversions) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc0a0), -5.0f);
}

}  // namespace
}  // namespace gf
