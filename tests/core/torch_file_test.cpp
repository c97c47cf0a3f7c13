// PyTorch checkpoint reading (core/io/torch_file, core/io/torch_pickle) against files written by
// PyTorch itself (tests/golden/torch_file, made by tools/make_torch_file_golden.py): every tensor,
// array and scalar element for element, in the zip, legacy, protocol-4 and ZIP64 forms; malicious
// pickles refused by name without running anything; truncated, corrupted and fuzzed files refused
// cleanly; hand-built pickles at the reader's limits.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/torch_file.h"

namespace gf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Kind = PickleValue::Kind;

const fs::path kDir = fs::path(GF_SOURCE_DIR) / "tests" / "golden" / "torch_file";

const json& expected() {
  static const json j = json::parse(std::ifstream(kDir / "expected.json"));
  return j;
}

std::vector<uint8_t> file_bytes(const std::string& name) {
  std::ifstream in(kDir / name, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What a Megatron-LM reader passes: args.model_type is a megatron.core.enums.ModelType member.
PickleOptions megatron_options() {
  PickleOptions opt;
  opt.enum_classes = {"megatron.core.enums.ModelType"};
  return opt;
}

TorchFile parse_bytes(const std::string& name, const std::vector<uint8_t>& bytes) {
  auto owned = std::make_shared<const std::vector<uint8_t>>(bytes);
  return TorchFile::parse(name, owned->data(), owned->size(), owned, megatron_options());
}

// The message of the std::runtime_error that `f` throws ("" when it does not throw).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

const PickleValue& walk(const PickleValue& root, const json& path) {
  const PickleValue* v = &root;
  for (const auto& k : path) {
    if (k.is_string()) {
      v = &v->at(k.get<std::string>());
    } else if (v->is_dict()) {
      v = v->find(k.get<int64_t>());
      if (!v) throw std::runtime_error("no int key " + k.dump());
    } else {
      v = &v->items().at(k.get<size_t>());
    }
  }
  return *v;
}

void check_tensor(const PickleValue& v, const json& rec) {
  const std::string what = rec["path"].dump();
  ASSERT_EQ(v.kind(), rec["kind"] == "tensor" ? Kind::kTensor : Kind::kNdArray) << what;
  const TorchTensor& t = v.tensor();
  EXPECT_EQ(torch_dtype_name(t.dtype), rec["dtype"].get<std::string>()) << what;
  EXPECT_EQ(t.shape, rec["shape"].get<std::vector<int64_t>>()) << what;
  if (rec.contains("stride")) {
    EXPECT_EQ(t.strides, rec["stride"].get<std::vector<int64_t>>()) << what;
    EXPECT_EQ(t.storage_offset, rec["storage_offset"].get<int64_t>()) << what;
  }
  const bool floating = t.dtype == TorchDtype::kF32 || t.dtype == TorchDtype::kF16 ||
                        t.dtype == TorchDtype::kBF16 || t.dtype == TorchDtype::kF64;
  const json& values = rec["values"];
  const std::vector<double> d = t.to_double();
  const std::vector<float> f = t.to_float();
  ASSERT_EQ(d.size(), values.size()) << what;
  ASSERT_EQ(f.size(), values.size()) << what;
  std::vector<int64_t> ints;
  if (floating) {
    EXPECT_THROW(t.to_int64(), std::runtime_error) << what;
  } else {
    ints = t.to_int64();
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const double want = values[i].get<double>();
    ASSERT_EQ(d[i], want) << what << " element " << i;
    ASSERT_EQ(f[i], static_cast<float>(want)) << what << " element " << i;
    if (!floating) {
      ASSERT_EQ(ints[i], values[i].get<int64_t>()) << what << " element " << i;
    }
  }
}

// ---- hand-built pickles at the reader's limits ----

struct Pickle {
  std::string s = "\x80\x02";
  Pickle& op(char c) { s += c; return *this; }
  Pickle& str(const std::string& v) {
    s += 'X';
    const auto n = static_cast<uint32_t>(v.size());
    s.append(reinterpret_cast<const char*>(&n), 4);
    s += v;
    return *this;
  }
  Pickle& num(int32_t v) { s += 'J'; s.append(reinterpret_cast<const char*>(&v), 4); return *this; }
  Pickle& global(const std::string& m, const std::string& n) { s += "c" + m + "\n" + n + "\n"; return *this; }
  Pickle& storage(const std::string& type, const std::string& key, int32_t numel) {
    op('(').str("storage").global("torch", type).str(key).str("cpu").num(numel).op('t').op('Q');
    return *this;
  }
  // _rebuild_tensor_v2(storage, offset, (size,), (stride,), False, OrderedDict())
  Pickle& tensor(int32_t numel, int32_t offset, int32_t size, int32_t stride, const std::string& key = "0") {
    global("torch._utils", "_rebuild_tensor_v2").op('(').storage("FloatStorage", key, numel).num(offset);
    num(size).op('\x85').num(stride).op('\x85').op('\x89').global("collections", "OrderedDict").op(')').op('R');
    return op('t').op('R');
  }
};

std::string pickle_error(const std::string& bytes, bool with_storages = true) {
  std::map<std::string, std::shared_ptr<TorchStorage>> storages;
  PickleOptions opt;
  opt.where = "test.pkl";
  opt.storages = with_storages ? &storages : nullptr;
  return error_of([&] { read_pickle(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), opt); });
}

class TorchFileGolden : public ::testing::TestWithParam<const char*> {
 protected:
  static const TorchFile& file(const std::string& name) {
    static std::map<std::string, TorchFile> files;
    auto it = files.find(name);
    if (it == files.end()) it = files.emplace(name, TorchFile::open((kDir / name).string(), megatron_options())).first;
    return it->second;
  }
  const PickleValue& root() { return file(GetParam()).root(); }
};

TEST_P(TorchFileGolden, DetectsTheFormat) {
  const bool legacy = std::string(GetParam()) == "megatron_legacy.pt";
  EXPECT_EQ(file(GetParam()).format(), legacy ? TorchFile::Format::kLegacy : TorchFile::Format::kZip);
  EXPECT_GT(file(GetParam()).storage_count(), 20u);
}

TEST_P(TorchFileGolden, EveryTensorAndArrayMatchesPyTorch) {
  const json& records = expected()["tensors"];
  ASSERT_GT(records.size(), 30u);
  for (const json& rec : records) check_tensor(walk(root(), rec["path"]), rec);
}

TEST_P(TorchFileGolden, MegatronArgsAndScalars) {
  const PickleValue& r = root();
  EXPECT_EQ(r.at("iteration").as_int(), expected()["iteration"].get<int64_t>());
  EXPECT_EQ(r.at("checkpoint_version").kind(), Kind::kFloat);
  EXPECT_EQ(r.at("checkpoint_version").as_float(), expected()["checkpoint_version"].get<double>());
  const PickleValue& args = r.at("args");
  ASSERT_EQ(args.kind(), Kind::kNamespace);
  EXPECT_EQ(args.entries().size(), expected()["args"].size());
  for (const auto& [name, want] : expected()["args"].items()) {
    const PickleValue& got = args.at(name);
    if (name == "params_dtype") {
      ASSERT_EQ(got.kind(), Kind::kDtype);
      EXPECT_EQ(std::string("torch.") + torch_dtype_name(got.as_dtype()), want.get<std::string>());
    } else if (want.is_object()) {
      ASSERT_EQ(got.kind(), Kind::kEnum) << name;
      EXPECT_EQ(got.as_string(), want["enum"].get<std::string>());
      const PickleValue& member = got.enum_value();  // Python 3.11 pickles the name, others the value
      if (member.kind() == Kind::kString) EXPECT_EQ(member.as_string(), want["name"].get<std::string>());
      else EXPECT_EQ(member.as_int(), want["value"].get<int64_t>());
    } else if (want.is_null()) {
      EXPECT_TRUE(got.is_none()) << name;
    } else if (want.is_boolean()) {
      EXPECT_EQ(got.as_bool(), want.get<bool>()) << name;
    } else if (want.is_number_integer()) {
      EXPECT_EQ(got.as_int(), want.get<int64_t>()) << name;
    } else if (want.is_number_float()) {
      EXPECT_EQ(got.as_float(), want.get<double>()) << name;
    } else if (want.is_string()) {
      EXPECT_EQ(got.as_string(), want.get<std::string>()) << name;
    } else {  // data_path (a list of str), adam_betas (a tuple of float)
      ASSERT_EQ(got.items().size(), want.size()) << name;
      for (size_t i = 0; i < want.size(); ++i) {
        if (want[i].is_string()) EXPECT_EQ(got.items()[i].as_string(), want[i].get<std::string>()) << name;
        else EXPECT_EQ(got.items()[i].as_float(), want[i].get<double>()) << name;
      }
    }
  }
  const PickleValue& sched = r.at("opt_param_scheduler");  // numpy scalars
  EXPECT_EQ(sched.at("max_lr").as_float(), expected()["opt_param_scheduler"]["max_lr"].get<double>());
  EXPECT_EQ(sched.at("num_steps").kind(), Kind::kInt);
  EXPECT_EQ(sched.at("num_steps").as_int(), 3200);
  EXPECT_EQ(sched.at("warmup").as_float(), 0.25);
  EXPECT_TRUE(sched.at("decay").as_bool());
  const PickleValue& rng = r.at("rng_state").items().at(0);
  const PickleValue& py = rng.at("random_rng_state");
  ASSERT_EQ(py.kind(), Kind::kTuple);
  EXPECT_EQ(py.items()[0].as_int(), expected()["random_rng_state"][0].get<int64_t>());
  const json& mt = expected()["random_rng_state"][1];
  ASSERT_EQ(py.items()[1].items().size(), mt.size());
  for (size_t i = 0; i < mt.size(); ++i) ASSERT_EQ(py.items()[1].items()[i].as_int(), mt[i].get<int64_t>());
  const PickleValue& np = rng.at("np_rng_state");
  EXPECT_EQ(np.items()[0].as_string(), "MT19937");
  EXPECT_EQ(np.items()[1].tensor().dtype, TorchDtype::kU32);
  EXPECT_EQ(np.items()[2].as_int(), expected()["np_rng_state"]["pos"].get<int64_t>());
  EXPECT_EQ(np.items()[4].as_float(), expected()["np_rng_state"]["cached_gaussian"].get<double>());
  const PickleValue& extra = r.at("extra");
  EXPECT_EQ(extra.at("device").kind(), Kind::kDevice);
  EXPECT_EQ(extra.at("device").as_string(), "cpu");
  ASSERT_EQ(extra.at("size").items().size(), 2u);
  EXPECT_EQ(extra.at("size").items()[1].as_int(), 3);
  ASSERT_EQ(extra.at("big_int").kind(), Kind::kBigInt);  // 2**70 + 1, little-endian two's complement
  EXPECT_EQ(extra.at("big_int").as_bytes(), std::string("\x01\0\0\0\0\0\0\0\x40", 9));
  EXPECT_EQ(args.at("adam_betas").kind(), Kind::kTuple);
  EXPECT_EQ(r.at("optimizer").at("optimizer").at("param_groups").items()[0].at("params").items()[0].as_int(), 0);
}

TEST_P(TorchFileGolden, SharedStoragesAndViews) {
  const PickleValue& enc = root().at("model").at("language_model").at("encoder");
  const TorchTensor& a = enc.at("layers.0.mlp.dense_h_to_4h.bias").tensor();
  const TorchTensor& b = enc.at("layers.0.mlp.dense_4h_to_h.bias").tensor();
  EXPECT_EQ(a.storage, b.storage);  // one storage object, read in place
  EXPECT_EQ(a.storage_key(), b.storage_key());
  EXPECT_EQ(a.storage_offset, 4);
  EXPECT_EQ(b.storage_offset, 38);
  EXPECT_EQ(a.storage->numel, 48);
  EXPECT_FALSE(enc.at("layers.0.self_attention.dense.weight").tensor().is_contiguous());
  EXPECT_TRUE(enc.at("layers.0.self_attention.query_key_value.weight").tensor().is_contiguous());
  EXPECT_EQ(root().at("extra").at("expanded").tensor().strides, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(root().at("extra").at("empty").tensor().numel(), 0);
  EXPECT_EQ(root().at("extra").at("scalar").tensor().shape.size(), 0u);
  EXPECT_EQ(root().at("model").at("language_model").find("no such key"), nullptr);
  EXPECT_THROW(root().at("model").at("no such key"), std::runtime_error);
  EXPECT_THROW(root().at("iteration").as_string(), std::runtime_error);
}

INSTANTIATE_TEST_SUITE_P(Formats, TorchFileGolden,
                         ::testing::Values("megatron_zip.pt", "megatron_legacy.pt", "megatron_zip_p4.pt",
                                           "megatron_zip64.pt"),
                         [](const auto& info) {
                           std::string s = info.param;
                           return s.substr(9, s.size() - 12);
                         });

TEST(TorchFile, RefusesMaliciousPicklesByNameWithoutRunningThem) {
  const fs::path marker = expected()["marker"].get<std::string>();
  fs::remove(marker);
  ASSERT_GE(expected()["malicious"].size(), 8u);
  for (const PickleOptions& opt : {PickleOptions(), megatron_options()}) {
    for (const auto& [name, needle] : expected()["malicious"].items()) {
      const std::string path = (kDir / name).string();
      const std::string msg = error_of([&] { TorchFile::open(path, opt); });
      EXPECT_NE(msg.find(needle.get<std::string>()), std::string::npos) << name << ": " << msg;
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find("data.pkl"), std::string::npos) << msg;
    }
  }
  EXPECT_FALSE(fs::exists(marker));
}

TEST(TorchFile, EnumMembersNeedTheirClassOptedIn) {
  for (const char* name : {"megatron_zip.pt", "megatron_legacy.pt"}) {
    const std::string msg = error_of([&] { TorchFile::open((kDir / name).string()); });
    // Python 3.11 pickles the member as getattr(ModelType, name), other versions as ModelType(value)
    EXPECT_TRUE(msg.find("refused global '__builtin__.getattr'") != std::string::npos ||
                msg.find("refused global 'megatron.core.enums.ModelType'") != std::string::npos) << msg;
  }
  Pickle by_value;  // Class(value)
  by_value.global("megatron.core.enums", "ModelType").num(2).op('\x85').op('R').op('.');
  const PickleValue m = read_pickle(reinterpret_cast<const uint8_t*>(by_value.s.data()), by_value.s.size(),
                                    megatron_options());
  ASSERT_EQ(m.kind(), Kind::kEnum);
  EXPECT_EQ(m.enum_value().as_int(), 2);
  Pickle p;  // an opted-in class with a value that is not an int or str
  p.global("megatron.core.enums", "ModelType").op(']').op('\x85').op('R').op('.');
  PickleOptions opt = megatron_options();
  EXPECT_THROW(read_pickle(reinterpret_cast<const uint8_t*>(p.s.data()), p.s.size(), opt), std::runtime_error);
  Pickle by_name;  // getattr(Class, name): only on an opted-in class, and only when one is opted in
  by_name.global("builtins", "getattr").global("megatron.core.enums", "ModelType").str("encoder_or_decoder");
  by_name.op('\x86').op('R').op('.');
  const PickleValue v = read_pickle(reinterpret_cast<const uint8_t*>(by_name.s.data()), by_name.s.size(), opt);
  ASSERT_EQ(v.kind(), Kind::kEnum);
  EXPECT_EQ(v.as_string(), "megatron.core.enums.ModelType");
  EXPECT_EQ(v.enum_value().as_string(), "encoder_or_decoder");
  EXPECT_NE(pickle_error(by_name.s).find("refused global 'builtins.getattr'"), std::string::npos);
  Pickle os_getattr;
  os_getattr.global("builtins", "getattr").global("posix", "system").op('.');
  EXPECT_NE(error_of([&] { read_pickle(reinterpret_cast<const uint8_t*>(os_getattr.s.data()), os_getattr.s.size(), opt); })
                .find("refused global 'posix.system'"), std::string::npos);
  Pickle getattr_on_dict;
  getattr_on_dict.global("builtins", "getattr").op('}').str("keys").op('\x86').op('R').op('.');
  EXPECT_NE(error_of([&] {
              read_pickle(reinterpret_cast<const uint8_t*>(getattr_on_dict.s.data()), getattr_on_dict.s.size(), opt);
            }).find("only allowed on an opted-in enum class"), std::string::npos);
}

// Transformer Engine's get_extra_state returns its fp8 metadata torch.save'd into an io.BytesIO; Megatron-core
// checkpoints of TE models pickle it as _io.BytesIO, NEWOBJ, BUILD((bytes, position, None)). It is read as
// opaque bytes (never parsed); BytesIO with arguments, and BUILD on plain bytes, are refused.
TEST(TorchPickle, TransformerEnginesBytesIOExtraStateIsReadAsBytes) {
  // pickle.dumps(OrderedDict([('decoder.layers.0.self_attention.linear_qkv._extra_state',
  //                            io.BytesIO(b'\x80\x02}q\x00.'))]), protocol=2), by Python 3's pickle module.
  static const char kPy[] =
      "\x80\x02\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x0a"
      "\x71\x00\x29\x52\x71\x01\x58\x37\x00\x00\x00\x64\x65\x63\x6f\x64\x65\x72\x2e\x6c\x61\x79\x65\x72\x73\x2e\x30"
      "\x2e\x73\x65\x6c\x66\x5f\x61\x74\x74\x65\x6e\x74\x69\x6f\x6e\x2e\x6c\x69\x6e\x65\x61\x72\x5f\x71\x6b\x76\x2e"
      "\x5f\x65\x78\x74\x72\x61\x5f\x73\x74\x61\x74\x65\x71\x02\x63\x5f\x69\x6f\x0a\x42\x79\x74\x65\x73\x49\x4f\x0a"
      "\x71\x03\x29\x81\x71\x04\x63\x5f\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x05\x58\x07\x00"
      "\x00\x00\xc2\x80\x02\x7d\x71\x00\x2e\x71\x06\x58\x06\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x07\x86\x71\x08"
      "\x52\x71\x09\x4b\x00\x4e\x87\x71\x0a\x62\x73\x2e";
  const std::string bytes(kPy, sizeof kPy - 1);
  const PickleValue v = read_pickle(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), PickleOptions{});
  const PickleValue& extra = v.at("decoder.layers.0.self_attention.linear_qkv._extra_state");
  ASSERT_EQ(extra.kind(), Kind::kBytes);
  EXPECT_EQ(extra.as_bytes(), std::string("\x80\x02}q\x00.", 6));
  Pickle with_args;  // io.BytesIO(b'...') made with an argument: not how pickle writes it
  with_args.global("_io", "BytesIO").str("x").op('\x85').op('\x81').op('.');
  EXPECT_NE(pickle_error(with_args.s).find("io.BytesIO made with arguments"), std::string::npos);
  Pickle build_on_bytes;  // BUILD on bytes that are not a new BytesIO
  build_on_bytes.global("_codecs", "encode").str("ab").str("latin1").op('\x86').op('R');
  build_on_bytes.str("ab").num(0).op('N').op('\x87').op('b').op('.');
  EXPECT_NE(pickle_error(build_on_bytes.s).find("BUILD on bytes is not allowed"), std::string::npos);
  Pickle bad_state;  // a BytesIO whose state is not (bytes, position, None or dict)
  bad_state.global("_io", "BytesIO").op(')').op('\x81').str("text").num(0).op('N').op('\x87').op('b').op('.');
  EXPECT_NE(pickle_error(bad_state.s).find("io.BytesIO state is not"), std::string::npos);
}

TEST(TorchFile, RefusesCompressedEntries) {
  const std::string msg = error_of([] { TorchFile::open((kDir / "megatron_deflated.pt").string()); });
  EXPECT_NE(msg.find("is compressed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("megatron_deflated.pt"), std::string::npos) << msg;
}

TEST(TorchFile, RefusesWhatIsNotACheckpoint) {
  EXPECT_NE(error_of([] { TorchFile::open((kDir / "no_such_file.pt").string()); }).find("cannot open"), std::string::npos);
  EXPECT_NE(error_of([] { TorchFile::open((kDir / "README.md").string()); }).find("not a PyTorch checkpoint"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_bytes("empty.pt", {}); }).find("empty.pt"), std::string::npos);
}

TEST(TorchFile, TruncatedFilesAreRefusedCleanly) {
  for (const char* name : {"megatron_zip.pt", "megatron_legacy.pt", "megatron_zip64.pt"}) {
    const std::vector<uint8_t> bytes = file_bytes(name);
    ASSERT_GT(bytes.size(), 1000u);
    for (size_t len = 0; len < bytes.size(); len += (len < 200 || bytes.size() - len < 200) ? 1 : 37) {
      const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len));
      const std::string msg = error_of([&] { parse_bytes(name, cut); });
      ASSERT_FALSE(msg.empty()) << name << " cut to " << len << " bytes was accepted";
      ASSERT_EQ(msg.rfind(name, 0), 0u) << msg;
    }
  }
}

size_t find_eocd(const std::vector<uint8_t>& b) {
  for (size_t p = b.size() - 22;; --p)
    if (b[p] == 'P' && b[p + 1] == 'K' && b[p + 2] == 5 && b[p + 3] == 6) return p;
}

void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }
void put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); }
uint32_t get32(const std::vector<uint8_t>& b, size_t at) { uint32_t v; std::memcpy(&v, &b[at], 4); return v; }
uint16_t get16(const std::vector<uint8_t>& b, size_t at) { uint16_t v; std::memcpy(&v, &b[at], 2); return v; }

TEST(TorchFile, CorruptZipDirectoryIsRefused) {
  const std::vector<uint8_t> good = file_bytes("megatron_zip.pt");
  const size_t eocd = find_eocd(good), cd = get32(good, eocd + 16), local = get32(good, cd + 42);
  const size_t data_pkl = local + 30 + get16(good, local + 26) + get16(good, local + 28);  // first entry's data
  ASSERT_EQ(get32(good, eocd - 20), 0x07064b50u);  // torch writes a ZIP64 end record too
  size_t z64 = 0;
  std::memcpy(&z64, &good[eocd - 12], 8);
  // Sets the directory's entry count, size and offset in both end records, consistently.
  auto set_cd = [&](std::vector<uint8_t>& b, uint64_t count, uint64_t size, uint64_t offset) {
    put16(b, eocd + 10, static_cast<uint16_t>(count));
    put16(b, eocd + 8, static_cast<uint16_t>(count));
    put32(b, eocd + 12, static_cast<uint32_t>(size));
    put32(b, eocd + 16, static_cast<uint32_t>(offset));
    for (auto [at, v] : {std::pair{z64 + 24, count}, {z64 + 32, count}, {z64 + 40, size}, {z64 + 48, offset}})
      std::memcpy(&b[at], &v, 8);
  };
  const uint32_t count = get16(good, eocd + 10), size = get32(good, eocd + 12);
  struct Case { const char* what; std::function<void(std::vector<uint8_t>&)> corrupt; const char* message; };
  const std::vector<Case> cases = {
      {"cd offset", [&](auto& b) { set_cd(b, count, size - 1, cd + 1); }, "central directory entry 0 is corrupt"},
      {"cd size", [&](auto& b) { set_cd(b, count, 0x7fffffff, cd); }, "outside the file"},
      {"entry count", [&](auto& b) { set_cd(b, 0xfffe, size, cd); }, "entries need"},
      {"records disagree", [&](auto& b) { put32(b, eocd + 12, size + 1); }, "disagree"},
      {"zip64 locator", [&](auto& b) { put32(b, eocd - 12, 0x7fffffff); }, "bad ZIP64"},
      {"zip64 marker", [&](auto& b) { b[eocd - 20] = 'X'; put32(b, eocd + 16, 0xffffffff); }, "without a ZIP64 locator"},
      {"name length", [&](auto& b) { put16(b, cd + 28, 0xffff); }, "runs past the directory"},
      {"local offset", [&](auto& b) { put32(b, cd + 42, 0x7ffffff0); }, "no local header"},
      {"entry size", [&](auto& b) { put32(b, cd + 20, 0x7ffffff0); put32(b, cd + 24, 0x7ffffff0); }, "runs past the end"},
      {"method", [&](auto& b) { put16(b, cd + 10, 8); }, "is compressed"},
      {"encrypted", [&](auto& b) { put16(b, cd + 8, 1); }, "encrypted"},
      {"local signature", [&](auto& b) { b[local + 3] = 7; }, "no local header"},
      {"data.pkl byte", [&](auto& b) { b[data_pkl + 5] ^= 0x01; }, "CRC-32"},
      {"eocd signature", [&](auto& b) { b[eocd] = 'X'; }, "no end-of-central-directory"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = good;
    c.corrupt(b);
    const std::string msg = error_of([&] { parse_bytes("corrupt.pt", b); });
    EXPECT_NE(msg.find(c.message), std::string::npos) << c.what << ": " << msg;
  }
  std::mt19937 rng(7);  // random damage to the directory: refused or read, never a crash
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> b = good;
    for (int k = 0; k < 1 + i % 3; ++k) b[cd + rng() % (b.size() - cd)] = static_cast<uint8_t>(rng());
    try { parse_bytes("fuzz.pt", b); } catch (const std::runtime_error&) {}
  }
}

// Every tensor and array in the tree, converted (the bounds checks are what is under test).
void read_all(const PickleValue& v, int depth = 0) {
  ASSERT_LT(depth, 1000);
  switch (v.kind()) {
    case Kind::kTensor: case Kind::kNdArray: (void)v.tensor().to_double(); break;
    case Kind::kList: case Kind::kTuple: for (const auto& x : v.items()) read_all(x, depth + 1); break;
    case Kind::kDict: case Kind::kNamespace: for (const auto& [k, x] : v.entries()) read_all(x, depth + 1); break;
    default: break;
  }
}

TEST(TorchFile, FuzzedLegacyFilesAreReadOrRefusedNeverCrash) {
  const std::vector<uint8_t> good = file_bytes("megatron_legacy.pt");
  std::mt19937 rng(11);
  int refused = 0;
  for (int i = 0; i < 4000; ++i) {
    std::vector<uint8_t> b = good;
    const size_t span = i % 2 ? b.size() : std::min<size_t>(b.size(), 12000);  // mostly the pickles
    for (int k = 0; k < 1 + i % 4; ++k) b[rng() % span] = static_cast<uint8_t>(rng() % 4 ? rng() : 0xff);
    try {
      const TorchFile f = parse_bytes("fuzz.pt", b);
      read_all(f.root());
    } catch (const std::runtime_error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 100);
}

TEST(TorchPickle, TensorViewsMustFitTheirStorage) {
  EXPECT_EQ(pickle_error(Pickle().tensor(4, 0, 4, 1).op('.').s), "");
  EXPECT_EQ(pickle_error(Pickle().tensor(4, 0, 3, 0).op('.').s), "");  // expanded: stride 0
  EXPECT_NE(pickle_error(Pickle().tensor(4, 0, 10, 1).op('.').s).find("runs past the storage"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().tensor(4, 3, 2, 1).op('.').s).find("runs past the storage"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().tensor(4, 0, 2, 0x7fffffff).op('.').s).find("runs past"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().tensor(4, -1, 1, 1).op('.').s).find("negative"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().tensor(-1, 0, 1, 1).op('.').s).find("bad size"), std::string::npos);
  // the same key declared with two sizes
  Pickle two;
  two.op('(').tensor(4, 0, 4, 1).tensor(8, 0, 4, 1).op('l').op('.');
  EXPECT_NE(pickle_error(two.s).find("declared twice"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().tensor(4, 0, 4, 1).op('.').s, false).find("persistent id"), std::string::npos);
  // element count overflow: shape (2^31-1, 2^31-1, 2^31-1) with zero strides
  Pickle big;
  big.global("torch._utils", "_rebuild_tensor_v2").op('(').storage("FloatStorage", "0", 4).num(0);
  big.num(0x7fffffff).num(0x7fffffff).num(0x7fffffff).op('\x87').num(0).num(0).num(0).op('\x87');
  big.op('\x89').op('}').op('t').op('R').op('.');
  EXPECT_NE(pickle_error(big.s).find("overflows"), std::string::npos);
  // backward hooks that are not empty
  Pickle hooks;
  hooks.global("torch._utils", "_rebuild_tensor_v2").op('(').storage("FloatStorage", "0", 4).num(0);
  hooks.num(4).op('\x85').num(1).op('\x85').op('\x89').op('}').str("h").num(1).op('s').op('t').op('R').op('.');
  EXPECT_NE(pickle_error(hooks.s).find("hooks"), std::string::npos);
}

TEST(TorchPickle, MalformedStreamsAreRefused) {
  EXPECT_NE(pickle_error(Pickle().op(']').s).find("before the STOP"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().op('a').op('.').s).find("stack underflow"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().op('h').op('\x05').op('.').s).find("memo index 5"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().op('X').op('\xff').op('\xff').op('\xff').op('\xff').s).find("needs 4294967295"),
            std::string::npos);
  EXPECT_NE(pickle_error(Pickle().op('\xff').s).find("unknown pickle opcode 0xff"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().op('\x8f').op('.').s).find("EMPTY_SET"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().op(']').op('(').op('u').op('.').s).find("SETITEMS target"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().global("builtins", "set").op('.').s).find("'builtins.set'"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().global("os\x01", "system").op('.').s).find("os\\x01.system"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().global("_codecs", "encode").str("a").str("utf-8").op('\x86').op('R').op('.').s)
                .find("latin1"), std::string::npos);
  EXPECT_NE(pickle_error(Pickle().global("collections", "OrderedDict").op(')').op('\x81').op('.').s).find("NEWOBJ"),
            std::string::npos);
  EXPECT_NE(pickle_error(Pickle().op(']').op('}').op('b').op('.').s).find("BUILD on a list"), std::string::npos);
}

TEST(TorchPickle, NestingCyclesAndDeepChainsAreRefused) {
  auto nested = [](int n) {
    Pickle p;
    for (int i = 0; i < n; ++i) p.op(']');
    for (int i = 1; i < n; ++i) p.op('a');
    return p.op('.').s;
  };
  EXPECT_EQ(pickle_error(nested(500)), "");
  EXPECT_NE(pickle_error(nested(1100)).find("nested deeper than 1000"), std::string::npos);
  EXPECT_NE(pickle_error(nested(300000)).find("nested deeper"), std::string::npos);  // torn down without recursion
  // a list holding itself, and a chain kept only in the memo
  EXPECT_NE(pickle_error(Pickle().op(']').op('q').op('\0').op('h').op('\0').op('a').op('.').s).find("cycle"),
            std::string::npos);
  Pickle memo_only;
  for (int i = 0; i < 2000; ++i) memo_only.op(']').op('\x94');
  for (int i = 1; i < 2000; ++i) memo_only.op('a');
  memo_only.op('0').op('N').op('.');
  EXPECT_NE(pickle_error(memo_only.s).find("nested deeper"), std::string::npos);
}

TEST(TorchPickle, NamespaceThroughCopyregReconstructor) {  // the protocol 0/1 form
  Pickle p;
  p.global("copyreg", "_reconstructor").op('(').global("argparse", "Namespace").global("builtins", "object").op('N');
  p.op('t').op('R').op('}').str("a").num(1).op('s').op('b').op('.');
  PickleOptions opt;
  const PickleValue v = read_pickle(reinterpret_cast<const uint8_t*>(p.s.data()), p.s.size(), opt);
  ASSERT_EQ(v.kind(), Kind::kNamespace);
  EXPECT_EQ(v.at("a").as_int(), 1);
  Pickle bad;
  bad.global("copyreg", "_reconstructor").op('(').global("collections", "OrderedDict").global("builtins", "object");
  bad.op('N').op('t').op('R').op('.');
  EXPECT_NE(pickle_error(bad.s).find("only allowed as (argparse.Namespace"), std::string::npos);
}

}  // namespace
}  // namespace gf
