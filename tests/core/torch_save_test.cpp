// torch.save's format written (core/io/torch_save.h) and read back by our restricted reader: every kind of
// value, tensors of the three float dtypes with their bytes, the archive's records. (PyTorch's own torch.load
// reads the same files in tests/integration/megatron_out.sh.)
#include "core/io/torch_save.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/io/torch_file.h"
#include <zlib.h>

namespace gf {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("gf_torch_save_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

TEST(TorchSave, EveryKindOfValueReadsBack) {
  TorchOut args = TorchOut::dict(TorchOut::Kind::kNamespace);
  args.set("num_layers", TorchOut::integer(24))
      .set("big", TorchOut::integer(int64_t{1} << 40))
      .set("negative", TorchOut::integer(-7))
      .set("lr", TorchOut::real(1.5e-4))
      .set("tokenizer_type", TorchOut::string("GPT2BPETokenizer"))
      .set("rampup_batch_size", TorchOut::none())
      .set("fp16", TorchOut::boolean(true))
      .set("bf16", TorchOut::boolean(false))
      .set("data_path", TorchOut::list({TorchOut::string("1.0"), TorchOut::string("a_text_document")}))
      .set("empty", TorchOut::list({}))
      .set("pair", TorchOut::tuple({TorchOut::integer(1), TorchOut::real(0.5)}));
  TorchOut root = TorchOut::dict(TorchOut::Kind::kOrderedDict);
  root.set("args", std::move(args)).set("checkpoint_version", TorchOut::real(3.0)).set("iteration", TorchOut::integer(100));
  TorchOut weights = TorchOut::dict(TorchOut::Kind::kOrderedDict);
  const std::vector<float> v{1.0f, -2.5f, 3.140625f, 1e-3f, 65504.0f, -0.0f};
  weights.set("f32", TorchOut::tensor(TorchDtype::kF32, {2, 3}, v))
      .set("f16", TorchOut::tensor(TorchDtype::kF16, {3, 2}, v))
      .set("bf16", TorchOut::tensor(TorchDtype::kBF16, {6}, v))
      .set("empty", TorchOut::tensor(TorchDtype::kF32, {0, 4}, {}));
  root.set("model", std::move(weights)).set("plain", TorchOut::dict());
  const std::string path = temp_path("every_kind.pt");
  torch_save(path, root);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  const TorchFile f = TorchFile::open(path);
  EXPECT_EQ(f.format(), TorchFile::Format::kZip);
  EXPECT_EQ(f.storage_count(), 4u);
  const PickleValue& r = f.root();
  const PickleValue& a = r.at("args");
  EXPECT_EQ(a.kind(), PickleValue::Kind::kNamespace);
  EXPECT_EQ(a.at("num_layers").as_int(), 24);
  EXPECT_EQ(a.at("big").as_int(), int64_t{1} << 40);
  EXPECT_EQ(a.at("negative").as_int(), -7);
  EXPECT_EQ(a.at("lr").as_float(), 1.5e-4);
  EXPECT_EQ(a.at("tokenizer_type").as_string(), "GPT2BPETokenizer");
  EXPECT_TRUE(a.at("rampup_batch_size").is_none());
  EXPECT_TRUE(a.at("fp16").as_bool());
  EXPECT_FALSE(a.at("bf16").as_bool());
  ASSERT_EQ(a.at("data_path").items().size(), 2u);
  EXPECT_EQ(a.at("data_path").items()[1].as_string(), "a_text_document");
  EXPECT_TRUE(a.at("empty").items().empty());
  EXPECT_EQ(a.at("pair").kind(), PickleValue::Kind::kTuple);
  EXPECT_EQ(a.at("pair").items()[1].as_float(), 0.5);
  EXPECT_EQ(r.at("checkpoint_version").as_float(), 3.0);
  EXPECT_EQ(r.at("iteration").as_int(), 100);
  EXPECT_TRUE(r.at("plain").is_dict());
  // Key order is the pickle's.
  std::vector<std::string> keys;
  for (const auto& e : r.entries()) keys.push_back(e.first.as_string());
  EXPECT_EQ(keys, (std::vector<std::string>{"args", "checkpoint_version", "iteration", "model", "plain"}));

  const PickleValue& m = r.at("model");
  const TorchTensor& f32 = m.at("f32").tensor();
  EXPECT_EQ(f32.dtype, TorchDtype::kF32);
  EXPECT_EQ(f32.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(f32.is_contiguous());
  const std::vector<float> back = f32.to_float();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(v[i])) << i;
  // float16 and bfloat16: each value rounded to nearest even once (these are exact in float16; bfloat16 keeps 8 bits).
  const std::vector<float> h = m.at("f16").tensor().to_float();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(h[i], static_cast<float>(static_cast<_Float16>(v[i]))) << i;
  EXPECT_EQ(h[4], 65504.0f);
  const std::vector<float> b = m.at("bf16").tensor().to_float();
  EXPECT_EQ(m.at("bf16").tensor().dtype, TorchDtype::kBF16);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -2.5f);
  EXPECT_EQ(b[2], 3.140625f);
  EXPECT_EQ(b[4], 65536.0f);  // 65504 rounds up to 2^16 in 8 bits of mantissa
  EXPECT_TRUE(std::signbit(b[5]));
  EXPECT_EQ(m.at("empty").tensor().numel(), 0);
  fs::remove_all(fs::path(path).parent_path());
}

// Each record's data starts at a multiple of 64 bytes (PyTorch maps storages in place from there).
TEST(TorchSave, RecordsAreAlignedAndChecksummed) {
  TorchOut root = TorchOut::dict();
  for (const int k : {0, 1, 2, 3, 4}) {
    std::string name = "t";
    name += static_cast<char>('0' + k);
    root.set(name, TorchOut::tensor(TorchDtype::kF32, {k + 1}, std::vector<float>(static_cast<size_t>(k + 1), 1.0f * k)));
  }
  const std::string path = temp_path("aligned.pt");
  torch_save(path, root);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0, records = 0;
  auto u16 = [&](size_t p) { return static_cast<size_t>(static_cast<uint8_t>(bytes[p])) | static_cast<size_t>(static_cast<uint8_t>(bytes[p + 1])) << 8; };
  auto u32 = [&](size_t p) { return u16(p) | u16(p + 2) << 16; };
  while (u32(at) == 0x04034b50u) {
    const size_t name_len = u16(at + 26), extra_len = u16(at + 28), size = u32(at + 18);
    const std::string name = bytes.substr(at + 30, name_len);
    const size_t data = at + 30 + name_len + extra_len;
    if (name.rfind("archive/data/", 0) == 0) {
      EXPECT_EQ(data % 64, 0u) << name;
    }
    EXPECT_EQ(::crc32(0L, reinterpret_cast<const Bytef*>(bytes.data() + data), static_cast<uInt>(size)), u32(at + 14))
        << name;  // zlib's CRC-32 of the record, against the local header's field
    at = data + size;
    ++records;
  }
  EXPECT_EQ(records, 5u + 3u);  // the storages, data.pkl, byteorder, version
  EXPECT_EQ(u32(at), 0x02014b50u);  // the central directory follows
  const TorchFile f = TorchFile::open(path);
  EXPECT_EQ(f.root().at("t4").tensor().to_float(), std::vector<float>(5, 4.0f));
  fs::remove_all(fs::path(path).parent_path());
}

// A reader that has converted a storage gives its file pages back (drop_pages); the values read again are the
// same (they fault in from the file), and a storage over owned bytes (TorchFile::parse) keeps them.
TEST(TorchSave, DroppedPagesReadBackFromTheFile) {
  std::vector<float> v(3 * 4096);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 7.0f;
  TorchOut root = TorchOut::dict();
  root.set("w", TorchOut::tensor(TorchDtype::kF32, {3, 4096}, v));
  const std::string path = temp_path("drop.pt");
  torch_save(path, root);
  const TorchFile f = TorchFile::open(path);
  const TorchTensor& t = f.root().at("w").tensor();
  EXPECT_TRUE(t.storage->file_mapped);
  EXPECT_EQ(t.to_float(), v);
  t.storage->drop_pages();
  EXPECT_EQ(t.to_float(), v);
  std::ifstream in(path, std::ios::binary);
  auto bytes = std::make_shared<std::string>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const TorchFile g = TorchFile::parse(path, reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), bytes);
  const TorchTensor& u = g.root().at("w").tensor();
  EXPECT_FALSE(u.storage->file_mapped);
  u.storage->drop_pages();  // owned bytes: nothing given back, nothing lost
  EXPECT_EQ(u.to_float(), v);
  fs::remove_all(fs::path(path).parent_path());
}

}  // namespace
}  // namespace gf
