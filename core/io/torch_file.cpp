// The value tree's accessors, tensor views and their element reading (declared in torch_pickle.h),
// then the two file formats: the zip archive (central directory, ZIP64, stored entries) and the
// legacy stream of pickles and raw storages.
#include "core/io/torch_file.h"
#include "core/math/aligned_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>

#include "core/io/safetensors.h"  // half_to_float, bf16_to_float

namespace gf {
namespace {

using Kind = PickleValue::Kind;

[[noreturn]] void value_error(const std::string& what) { throw std::runtime_error("pickle value: " + what); }
[[noreturn]] void fail(const std::string& path, const std::string& what) { throw std::runtime_error(path + ": " + what); }

template <class T>
T load(const uint8_t* p) { T v; std::memcpy(&v, p, sizeof(T)); return v; }

// Calls `f(i, offset)` for each element i (row-major) at storage element `offset`.
template <class F>
void for_each_offset(const TorchTensor& t, int64_t n, F f) {
  if (n == 0) return;
  const size_t nd = t.shape.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = t.storage_offset;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < t.shape[d]) { off += t.strides[d]; break; }
      off -= t.strides[d] * (t.shape[d] - 1);
      idx[d] = 0;
    }
  }
}

template <class Out>
std::vector<Out> convert(const TorchTensor& t, bool floats_allowed) {
  const bool is_float = t.dtype == TorchDtype::kF32 || t.dtype == TorchDtype::kF16 ||
                        t.dtype == TorchDtype::kBF16 || t.dtype == TorchDtype::kF64;
  if (is_float && !floats_allowed)
    throw std::runtime_error("tensor on storage '" + t.storage->key + "' has dtype " + torch_dtype_name(t.dtype) +
                             ", not an integer type");
  if (t.storage->data == nullptr && t.storage->nbytes() > 0)
    throw std::runtime_error("storage '" + t.storage->key + "' has no data bound");
  const int64_t n = t.numel();
  std::vector<Out> out;
  try { out.resize(static_cast<size_t>(n)); } catch (const std::bad_alloc&) {
    throw std::runtime_error("tensor of " + std::to_string(n) + " elements does not fit in memory");
  }
  const uint8_t* base = t.storage->data;
  const int64_t size = torch_dtype_size(t.dtype);
  auto run = [&](auto read) {
    for_each_offset(t, n, [&](int64_t i, int64_t off) { out[static_cast<size_t>(i)] = static_cast<Out>(read(base + off * size)); });
  };
  switch (t.dtype) {
    case TorchDtype::kF32: run(load<float>); break;
    case TorchDtype::kF64: run(load<double>); break;
    case TorchDtype::kF16: run([](const uint8_t* p) { return half_to_float(load<uint16_t>(p)); }); break;
    case TorchDtype::kBF16: run([](const uint8_t* p) { return bf16_to_float(load<uint16_t>(p)); }); break;
    case TorchDtype::kI64: run(load<int64_t>); break;
    case TorchDtype::kI32: run(load<int32_t>); break;
    case TorchDtype::kI16: run(load<int16_t>); break;
    case TorchDtype::kI8: run(load<int8_t>); break;
    case TorchDtype::kU8: run(load<uint8_t>); break;
    case TorchDtype::kBool: run([](const uint8_t* p) { return p[0] != 0 ? 1 : 0; }); break;
    case TorchDtype::kU16: run(load<uint16_t>); break;
    case TorchDtype::kU32: run(load<uint32_t>); break;
    case TorchDtype::kU64: run(load<uint64_t>); break;
  }
  return out;
}


}  // namespace

// ---- dtypes, views and element reading ----

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) r += (i ? ", " : "") + std::to_string(shape[i]);
  return r + "]";
}

const char* torch_dtype_name(TorchDtype d) {
  switch (d) {
    case TorchDtype::kF32: return "float32";
    case TorchDtype::kF16: return "float16";
    case TorchDtype::kBF16: return "bfloat16";
    case TorchDtype::kF64: return "float64";
    case TorchDtype::kI64: return "int64";
    case TorchDtype::kI32: return "int32";
    case TorchDtype::kI16: return "int16";
    case TorchDtype::kI8: return "int8";
    case TorchDtype::kU8: return "uint8";
    case TorchDtype::kBool: return "bool";
    case TorchDtype::kU16: return "uint16";
    case TorchDtype::kU32: return "uint32";
    case TorchDtype::kU64: return "uint64";
  }
  return "?";
}

int64_t torch_dtype_size(TorchDtype d) {
  switch (d) {
    case TorchDtype::kF32: case TorchDtype::kI32: case TorchDtype::kU32: return 4;
    case TorchDtype::kF16: case TorchDtype::kBF16: case TorchDtype::kI16: case TorchDtype::kU16: return 2;
    case TorchDtype::kF64: case TorchDtype::kI64: case TorchDtype::kU64: return 8;
    case TorchDtype::kI8: case TorchDtype::kU8: case TorchDtype::kBool: return 1;
  }
  return 1;
}

std::string torch_view_error(const TorchTensor& t, int64_t bytes, size_t max_dims) {
  if (t.shape.size() != t.strides.size())
    return std::to_string(t.shape.size()) + " sizes but " + std::to_string(t.strides.size()) + " strides";
  if (t.shape.size() > max_dims) return std::to_string(t.shape.size()) + " dimensions (limit " + std::to_string(max_dims) + ")";
  if (t.storage_offset < 0) return "negative storage offset";
  const int64_t size = torch_dtype_size(t.dtype);
  int64_t numel = 1, last = t.storage_offset, zero_stride = 0;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] < 0 || t.strides[d] < 0) return "negative size or stride";
    if (__builtin_mul_overflow(numel, t.shape[d], &numel)) return "element count overflows";
    zero_stride |= t.strides[d] == 0 && t.shape[d] > 1;
  }
  int64_t total = 0;
  if (__builtin_mul_overflow(numel, int64_t{8}, &total)) return "element count overflows";
  if (numel == 0) return {};
  for (size_t d = 0; d < t.shape.size(); ++d) {
    int64_t span = 0;
    if (__builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &span) || __builtin_add_overflow(last, span, &last))
      return "strides overflow";
  }
  int64_t end = 0;
  if (__builtin_add_overflow(last, int64_t{1}, &end) || __builtin_mul_overflow(end, size, &end) || end > bytes)
    return "view (offset " + std::to_string(t.storage_offset) + ", last element " + std::to_string(last) +
           ") runs past the storage's " + std::to_string(bytes) + " bytes";
  if (!zero_stride && numel > bytes / size) return "more elements than the storage holds";
  return {};
}

int64_t TorchTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked not to overflow when the tensor was read
  return n;
}

bool TorchTensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::vector<float> TorchTensor::to_float() const { return convert<float>(*this, true); }
std::vector<double> TorchTensor::to_double() const { return convert<double>(*this, true); }
std::vector<int64_t> TorchTensor::to_int64() const { return convert<int64_t>(*this, false); }

// ---- the value tree ----

const char* PickleValue::kind_name() const {
  static const char* const kNames[] = {"None", "bool", "int", "int (beyond int64)", "float", "str", "bytes", "list",
                                       "tuple", "dict", "argparse.Namespace", "tensor", "numpy.ndarray",
                                       "torch.dtype", "numpy.dtype", "torch.device", "storage", "global", "enum"};
  return kNames[static_cast<int>(kind_)];
}

bool PickleValue::as_bool() const {
  if (kind_ != Kind::kBool) value_error(std::string("expected a bool, got ") + kind_name());
  return int_ != 0;
}
int64_t PickleValue::as_int() const {
  if (kind_ != Kind::kInt && kind_ != Kind::kBool) value_error(std::string("expected an int, got ") + kind_name());
  return int_;
}
double PickleValue::as_float() const {
  if (kind_ == Kind::kInt) return static_cast<double>(int_);
  if (kind_ != Kind::kFloat) value_error(std::string("expected a float, got ") + kind_name());
  return float_;
}
TorchDtype PickleValue::as_dtype() const {
  if (kind_ != Kind::kDtype && kind_ != Kind::kNumpyDtype) value_error(std::string("expected a dtype, got ") + kind_name());
  return static_cast<TorchDtype>(int_);
}
const std::string& PickleValue::as_string() const {
  if (kind_ != Kind::kString && kind_ != Kind::kDevice && kind_ != Kind::kGlobal && kind_ != Kind::kEnum)
    value_error(std::string("expected a str, got ") + kind_name());
  return node_->text;
}
const std::string& PickleValue::as_bytes() const {
  if (kind_ != Kind::kBytes && kind_ != Kind::kBigInt) value_error(std::string("expected bytes, got ") + kind_name());
  return node_->text;
}
const std::vector<PickleValue>& PickleValue::items() const {
  if (kind_ != Kind::kList && kind_ != Kind::kTuple) value_error(std::string("expected a list or tuple, got ") + kind_name());
  return node_->items;
}
const PickleEntries& PickleValue::entries() const {
  if (!is_dict()) value_error(std::string("expected a dict, got ") + kind_name());
  return node_->entries;
}
const TorchTensor& PickleValue::tensor() const {
  if ((kind_ != Kind::kTensor && kind_ != Kind::kNdArray) || !node_->tensor)
    value_error(std::string("expected a tensor, got ") + kind_name());
  return *node_->tensor;
}
PickleValue PickleValue::of_tensor(std::shared_ptr<TorchTensor> t) {
  PickleValue v;
  v.kind_ = Kind::kTensor;
  v.node_ = std::make_shared<detail::PickleNode>();
  v.node_->tensor = std::move(t);
  return v;
}
const TorchStorage& PickleValue::storage() const {
  if (kind_ != Kind::kStorage) value_error(std::string("expected a storage, got ") + kind_name());
  return *node_->storage;
}
const PickleValue& PickleValue::enum_value() const {
  if (kind_ != Kind::kEnum) value_error(std::string("expected an enum member, got ") + kind_name());
  return node_->items.at(0);
}
const PickleValue* PickleValue::find(std::string_view key) const {
  entries();  // throws unless a dict or Namespace
  const auto& idx = node_->str_index;
  auto it = idx.find(std::string(key));
  return it == idx.end() ? nullptr : &node_->entries[it->second].second;
}
const PickleValue* PickleValue::find(int64_t key) const {
  entries();  // throws unless a dict or Namespace
  const auto& idx = node_->int_index;
  auto it = idx.find(key);
  return it == idx.end() ? nullptr : &node_->entries[it->second].second;
}
const PickleValue& PickleValue::at(std::string_view key) const {
  const PickleValue* v = find(key);
  if (!v) value_error("no key '" + std::string(key) + "' in the " + kind_name());
  return *v;
}

// ---- the file formats ----

namespace {

struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() { if (addr) munmap(addr, size); }
};

// Bytes of an entry or a name, with anything unprintable as '?', for messages.
std::string shown(const std::string& s) {
  std::string out = s.substr(0, 200);
  for (char& c : out) if (c < 0x20 || c == 0x7f) c = '?';
  return out;
}

uint32_t crc32(const uint8_t* p, size_t n) {  // the zip checksum (IEEE, reflected)
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

struct ZipRecord { uint64_t offset = 0, size = 0; uint32_t crc = 0; };

// The central directory's entries (name -> where the stored data lies), every offset checked.
std::map<std::string, ZipRecord> read_zip(const std::string& path, const uint8_t* b, size_t n) {
  auto bad = [&](const std::string& what) { fail(path, "zip: " + what); };
  auto u16 = [&](uint64_t at) { return load<uint16_t>(b + at); };
  auto u32 = [&](uint64_t at) { return load<uint32_t>(b + at); };
  auto u64 = [&](uint64_t at) { return load<uint64_t>(b + at); };
  if (n < 22) bad("file too short for an end-of-central-directory record");
  size_t eocd = SIZE_MAX;
  const size_t lowest = n - 22 > 65535 ? n - 22 - 65535 : 0;
  for (size_t p = n - 22 + 1; p-- > lowest;)
    if (u32(p) == 0x06054b50u && p + 22 + u16(p + 20) == n) { eocd = p; break; }
  if (eocd == SIZE_MAX) bad("no end-of-central-directory record (truncated, or not a zip archive)");
  if (u16(eocd + 4) != 0 || u16(eocd + 6) != 0) bad("multi-disk archives are not supported");
  uint64_t count = u16(eocd + 10), cd_size = u32(eocd + 12), cd_off = u32(eocd + 16), cd_limit = eocd;
  if (eocd >= 20 && u32(eocd - 20) == 0x07064b50u) {  // ZIP64 locator -> ZIP64 end of central directory
    const uint64_t z = u64(eocd - 20 + 8);
    if (z > eocd - 20 || eocd - 20 - z < 56 || u32(z) != 0x06064b50u) bad("bad ZIP64 end-of-central-directory record");
    if ((count != 0xffff && count != u64(z + 32)) || (cd_size != 0xffffffffu && cd_size != u64(z + 40)) ||
        (cd_off != 0xffffffffu && cd_off != u64(z + 48)))
      bad("the end-of-central-directory record and its ZIP64 form disagree");
    count = u64(z + 32);
    cd_size = u64(z + 40);
    cd_off = u64(z + 48);
    cd_limit = z;
  } else if (count == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu) {
    bad("ZIP64 sizes without a ZIP64 locator");
  }
  if (cd_off > cd_limit || cd_size > cd_limit - cd_off) bad("central directory lies outside the file");
  if (count > cd_size / 46) bad("central directory holds fewer bytes than its " + std::to_string(count) + " entries need");
  std::map<std::string, ZipRecord> records;
  const uint64_t end = cd_off + cd_size;
  for (uint64_t i = 0, p = cd_off; i < count; ++i) {
    if (end - p < 46 || u32(p) != 0x02014b50u) bad("central directory entry " + std::to_string(i) + " is corrupt");
    const uint16_t flags = u16(p + 8), method = u16(p + 10);
    uint64_t csize = u32(p + 20), usize = u32(p + 24), local = u32(p + 42);
    const uint64_t nl = u16(p + 28), el = u16(p + 30), cl = u16(p + 32);
    if (end - p - 46 < nl + el + cl) bad("central directory entry " + std::to_string(i) + " runs past the directory");
    const std::string name(reinterpret_cast<const char*>(b + p + 46), nl);
    const std::string what = "entry '" + shown(name) + "'";
    for (uint64_t e = p + 46 + nl, e_end = e + el; e_end - e >= 4;) {  // extra fields: ZIP64 sizes and offset
      const uint64_t id = u16(e), sz = u16(e + 2);
      if (sz > e_end - e - 4) bad(what + ": extra field runs past its entry");
      uint64_t q = e + 4;
      for (uint64_t* v : {&usize, &csize, &local}) {
        if (id != 1 || *v != 0xffffffffu) continue;
        if (e + 4 + sz - q < 8) bad(what + ": ZIP64 extra field too short");
        *v = u64(q);
        q += 8;
      }
      e += 4 + sz;
    }
    if (flags & 1) bad(what + " is encrypted");
    if (method != 0)
      bad(what + " is compressed (method " + std::to_string(method) +
          "); PyTorch writes stored entries: load and re-save it with torch.save");
    if (csize != usize) bad(what + ": stored entry whose compressed and uncompressed sizes differ");
    if (local > n || n - local < 30 || u32(local) != 0x04034b50u) bad(what + ": no local header at its offset");
    const uint64_t lnl = u16(local + 26), data = local + 30 + lnl + u16(local + 28);
    if (data > n || usize > n - data) bad(what + ": data runs past the end of the file");
    if (lnl != nl || std::memcmp(b + local + 30, name.data(), nl) != 0) bad(what + ": local header names another entry");
    if (!records.emplace(name, ZipRecord{data, usize, load<uint32_t>(b + p + 16)}).second) bad(what + " appears twice");
    p += 46 + nl + el + cl;
  }
  return records;
}

// The legacy format's first pickle: LONG1 of these 10 bytes (0x1950a86a20f9469cfc6c, little-endian).
constexpr uint8_t kLegacyMagic[] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

}  // namespace

TorchFile TorchFile::open(const std::string& path, const PickleOptions& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open file: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { ::close(fd); fail(path, "not a regular file"); }
  if (st.st_size == 0) { ::close(fd); fail(path, "empty file"); }
  auto map = std::make_shared<Mapping>();
  map->size = static_cast<size_t>(st.st_size);
  void* addr = mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (addr == MAP_FAILED) fail(path, std::string("cannot map file: ") + std::strerror(errno));
  map->addr = addr;
  const auto* bytes = static_cast<const uint8_t*>(addr);
  TorchFile f = parse(path, bytes, map->size, map, limits);
  for (auto& [key, s] : f.storages_) s->file_mapped = true;
  return f;
}

void TorchStorage::drop_pages() const {
  if (file_mapped && data != nullptr) release_pages(data, data + nbytes());
}

TorchFile TorchFile::parse(const std::string& path, const uint8_t* bytes, size_t size,
                           std::shared_ptr<const void> owner, const PickleOptions& limits) {
  TorchFile f;
  f.path_ = path;
  f.owner_ = std::move(owner);
  if (size >= 4 && bytes[0] == 'P' && bytes[1] == 'K' && bytes[2] < 10 && bytes[3] < 10) {
    f.format_ = Format::kZip;
    f.parse_zip(bytes, size, limits);
  } else if (size >= 2 && bytes[0] == 0x80) {
    f.format_ = Format::kLegacy;
    f.parse_legacy(bytes, size, limits);
  } else if (size > 262 && std::memcmp(bytes + 257, "ustar", 5) == 0) {
    fail(path, "a tar archive: the checkpoint format of PyTorch before 0.4 is not supported");
  } else {
    fail(path, "not a PyTorch checkpoint: neither a zip archive (torch >= 1.6) nor a legacy pickle");
  }
  return f;
}

void TorchFile::parse_zip(const uint8_t* b, size_t n, PickleOptions opt) {
  const std::map<std::string, ZipRecord> records = read_zip(path_, b, n);
  std::string prefix;  // "<archive name>/": the one folder holding data.pkl
  int found = 0;
  for (const auto& [name, r] : records) {
    const size_t slash = name.find('/');
    if (name == "data.pkl" || (slash + 9 == name.size() && name.compare(slash, 9, "/data.pkl") == 0)) {
      prefix = name.substr(0, name.size() - 8);
      ++found;
    }
  }
  if (found == 0) fail(path_, "zip archive has no <name>/data.pkl record: not a torch.save checkpoint");
  if (found > 1) fail(path_, "zip archive has " + std::to_string(found) + " data.pkl records");
  auto it = records.find(prefix + "byteorder");
  if (it != records.end() &&
      std::string(reinterpret_cast<const char*>(b + it->second.offset), it->second.size) != "little")
    fail(path_, prefix + "byteorder: the checkpoint is not little-endian");
  const ZipRecord& pkl = records.at(prefix + "data.pkl");
  if (crc32(b + pkl.offset, pkl.size) != pkl.crc) fail(path_, prefix + "data.pkl: CRC-32 mismatch (corrupt file)");
  opt.where = path_ + ": " + prefix + "data.pkl";
  opt.storages = &storages_;
  root_ = read_pickle(b + pkl.offset, pkl.size, opt);
  for (auto& [key, s] : storages_) {
    const std::string name = prefix + "data/" + key;
    auto r = records.find(name);
    if (r == records.end()) fail(path_, "storage '" + shown(key) + "' used by data.pkl has no record '" + shown(name) + "'");
    if (r->second.size != static_cast<uint64_t>(s->nbytes()))
      fail(path_, shown(name) + ": " + std::to_string(r->second.size) + " bytes, but data.pkl declares " +
                      std::to_string(s->numel) + " " + torch_dtype_name(s->dtype) + " elements (" +
                      std::to_string(s->nbytes()) + " bytes)");
    s->data = b + r->second.offset;
    s->owner = owner_;
  }
}

void TorchFile::parse_legacy(const uint8_t* b, size_t n, PickleOptions opt) {
  size_t pos = 0;
  auto next = [&](const std::string& what, bool with_storages) {
    opt.where = path_ + ": legacy " + what;
    opt.storages = with_storages ? &storages_ : nullptr;
    size_t used = 0;
    PickleValue v = read_pickle(b + pos, n - pos, opt, &used);
    pos += used;
    return v;
  };
  const PickleValue magic = next("magic number", false);
  if (magic.kind() != Kind::kBigInt || magic.as_bytes() != std::string(std::begin(kLegacyMagic), std::end(kLegacyMagic)))
    fail(path_, "legacy magic number: not PyTorch's (not a checkpoint, or a corrupt one)");
  const PickleValue version = next("protocol version", false);
  if (version.kind() != Kind::kInt || version.as_int() != 1001)
    fail(path_, "legacy protocol version: expected 1001");
  const PickleValue sys_info = next("sys_info", false);
  if (!sys_info.is_dict()) fail(path_, "legacy sys_info: not a dict");
  const PickleValue* little = sys_info.find("little_endian");
  if (little && !(little->kind() == Kind::kBool && little->as_bool()))
    fail(path_, "legacy sys_info: written on a big-endian machine (not supported)");
  root_ = next("object pickle", true);
  const PickleValue keys = next("storage key list", false);
  if (keys.kind() != Kind::kList) fail(path_, "legacy storage key list: not a list");
  for (const PickleValue& k : keys.items()) {
    if (k.kind() != Kind::kString) fail(path_, "legacy storage key list: holds a " + std::string(k.kind_name()));
    auto it = storages_.find(k.as_string());
    const std::string what = "legacy storage '" + shown(k.as_string()) + "'";
    if (it == storages_.end()) fail(path_, what + ": listed, but no tensor uses it");
    TorchStorage& s = *it->second;
    if (s.data) fail(path_, what + ": listed twice");
    if (n - pos < 8) fail(path_, what + ": file ends before its element count");
    const int64_t count = load<int64_t>(b + pos);
    pos += 8;
    if (count != s.numel)
      fail(path_, what + ": holds " + std::to_string(count) + " elements, the pickle declares " + std::to_string(s.numel));
    if (static_cast<uint64_t>(s.nbytes()) > n - pos)
      fail(path_, what + ": " + std::to_string(s.nbytes()) + " bytes run past the end of the file");
    s.data = b + pos;
    s.owner = owner_;
    pos += static_cast<size_t>(s.nbytes());
  }
  for (const auto& [key, s] : storages_)
    if (!s->data && s->nbytes() > 0) fail(path_, "legacy storage '" + shown(key) + "': missing from the storage key list");
}

}  // namespace gf
