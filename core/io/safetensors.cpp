#include "core/io/safetensors.h"
#include "core/math/aligned_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace gf {
namespace {

int64_t dtype_size(StDtype d) {
  switch (d) {
    case StDtype::kF32: case StDtype::kI32: return 4;
    case StDtype::kF16: case StDtype::kBF16: return 2;
    case StDtype::kI64: case StDtype::kF64: return 8;
    case StDtype::kU8: return 1;
  }
  return 0;
}

bool parse_dtype(const std::string& s, StDtype* d) {
  static const std::pair<const char*, StDtype> kNames[] = {
      {"F32", StDtype::kF32}, {"F16", StDtype::kF16}, {"BF16", StDtype::kBF16},
      {"I32", StDtype::kI32}, {"I64", StDtype::kI64}, {"F64", StDtype::kF64},
      {"U8", StDtype::kU8},   {"BOOL", StDtype::kU8}};
  for (auto& [n, v] : kNames)
    if (s == n) { *d = v; return true; }
  return false;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

}  // namespace

const char* dtype_name(StDtype d) {
  switch (d) {
    case StDtype::kF32: return "F32";
    case StDtype::kF16: return "F16";
    case StDtype::kBF16: return "BF16";
    case StDtype::kI32: return "I32";
    case StDtype::kI64: return "I64";
    case StDtype::kF64: return "F64";
    case StDtype::kU8: return "U8";
  }
  return "?";
}


int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t first_float16_overflow(const float* v, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(v[i]) && std::isinf(static_cast<float>(static_cast<_Float16>(v[i])))) return static_cast<int64_t>(i);
  return -1;
}

std::string float16_overflow_message(const std::string& name, int64_t index, float value) {
  std::ostringstream o;
  o << name << ": element " << index << " is " << value
    << ", beyond float16's range (±65504): float16 would hold inf there; write bfloat16 or float32 instead";
  return o.str();
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) bits = sign;
    else {  // subnormal
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {
struct FileMapping {
  void* addr = nullptr;
  size_t size = 0;
  ~FileMapping() {
    if (addr) munmap(addr, size);
  }
};
}  // namespace

SafeTensorsFile SafeTensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open file");
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  const int64_t size = st.st_size;
  if (size < 8) {
    ::close(fd);
    fail(path, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  auto map = std::make_shared<FileMapping>();
  map->size = static_cast<size_t>(size);
  void* addr = mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (addr == MAP_FAILED) fail(path, std::string("cannot map file: ") + std::strerror(errno));
  map->addr = addr;
  SafeTensorsFile f = parse(path, static_cast<const uint8_t*>(addr), map->size, map);
  f.mapped_ = true;
  return f;
}

void SafeTensorsFile::drop_pages(const std::string& name) const {
  if (!mapped_) return;
  const StTensor& t = get(name);
  release_pages(t.data, t.data + t.nbytes);
}

SafeTensorsFile SafeTensorsFile::parse(const std::string& path, std::vector<uint8_t> bytes) {
  auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  const uint8_t* base = owned->data();
  const size_t n = owned->size();
  return parse(path, base, n, std::move(owned));
}

SafeTensorsFile SafeTensorsFile::parse(const std::string& path, const uint8_t* bytes, size_t n,
                                       std::shared_ptr<const void> owner) {
  SafeTensorsFile f;
  f.path_ = path;
  f.owner_ = std::move(owner);
  f.bytes_ = bytes;
  f.size_ = n;
  const int64_t size = static_cast<int64_t>(n);
  if (size < 8) fail(path, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= static_cast<uint64_t>(f.bytes_[i]) << (8 * i);
  if (hlen > static_cast<uint64_t>(size - 8))
    fail(path, "header length " + std::to_string(hlen) + " runs past the end of the file");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(f.bytes_ + 8, f.bytes_ + 8 + hlen);
  } catch (const std::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");
  const uint8_t* data = f.bytes_ + 8 + hlen;
  const int64_t data_size = size - 8 - static_cast<int64_t>(hlen);
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      for (auto& [k, mv] : v.items()) f.metadata_[k] = mv.is_string() ? mv.get<std::string>() : mv.dump();
      continue;
    }
    StTensor t;
    try {
      if (!parse_dtype(v.at("dtype").get<std::string>(), &t.dtype))
        fail(path, "tensor '" + name + "': unsupported dtype " + v.at("dtype").dump());
      t.shape = v.at("shape").get<std::vector<int64_t>>();
      auto off = v.at("data_offsets").get<std::vector<int64_t>>();
      if (off.size() != 2 || off[0] < 0 || off[1] < off[0] || off[1] > data_size)
        fail(path, "tensor '" + name + "': data_offsets " + v.at("data_offsets").dump() +
                       " outside the " + std::to_string(data_size) + "-byte data section");
      t.data = data + off[0];
      t.nbytes = off[1] - off[0];
      spans.push_back({off[0], off[1]});
    } catch (const nlohmann::json::exception& e) {
      fail(path, "tensor '" + name + "': malformed entry: " + e.what());
    }
    for (int64_t d : t.shape)
      if (d < 0) fail(path, "tensor '" + name + "': negative dimension");
    if (t.numel() * dtype_size(t.dtype) != t.nbytes)
      fail(path, "tensor '" + name + "': " + std::to_string(t.nbytes) + " bytes do not match shape and dtype " +
                     dtype_name(t.dtype) + " (" + std::to_string(t.numel() * dtype_size(t.dtype)) + " expected)");
    f.tensors_[name] = std::move(t);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) fail(path, "tensor data regions overlap");
  return f;
}

const StTensor& SafeTensorsFile::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "no tensor named '" + name + "'");
  return it->second;
}

void SafeTensorsFile::to_floats(const std::string& name, float* out, int64_t n) const {
  const StTensor& t = get(name);
  if (t.numel() != n)
    fail(path_, "tensor '" + name + "' has " + std::to_string(t.numel()) + " elements, expected " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case StDtype::kF32: { float v; std::memcpy(&v, t.data + 4 * i, 4); out[i] = v; break; }
      case StDtype::kF64: { double v; std::memcpy(&v, t.data + 8 * i, 8); out[i] = static_cast<float>(v); break; }
      case StDtype::kF16: { uint16_t v; std::memcpy(&v, t.data + 2 * i, 2); out[i] = half_to_float(v); break; }
      case StDtype::kBF16: { uint16_t v; std::memcpy(&v, t.data + 2 * i, 2); out[i] = bf16_to_float(v); break; }
      default: fail(path_, "tensor '" + name + "' has dtype " + dtype_name(t.dtype) + ", not a float type");
    }
  }
}

std::vector<float> SafeTensorsFile::floats(const std::string& name) const {
  std::vector<float> v(static_cast<size_t>(get(name).numel()));
  to_floats(name, v.data(), static_cast<int64_t>(v.size()));
  return v;
}

std::vector<int32_t> SafeTensorsFile::ints(const std::string& name) const {
  const StTensor& t = get(name);
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t.dtype == StDtype::kI32) std::memcpy(&v[i], t.data + 4 * i, 4);
    else if (t.dtype == StDtype::kI64) { int64_t x; std::memcpy(&x, t.data + 8 * i, 8); v[i] = static_cast<int32_t>(x); }
    else fail(path_, "tensor '" + name + "' has dtype " + dtype_name(t.dtype) + ", not an integer type");
  }
  return v;
}

std::string safetensors_header(const std::vector<StWriteTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t off = 0;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const int64_t nb = n * dtype_size(t.dtype);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + nb}}};
    off += nb;
  }
  std::string h = header.dump();
  while (h.size() % 8) h.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(h.size()) >> (8 * i));
  return out + h;
}

void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string h = safetensors_header(tensors, metadata);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(tmp + ": cannot open for writing");
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& t : tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      out.write(static_cast<const char*>(t.data), n * dtype_size(t.dtype));
    }
    out.flush();
    if (!out) throw std::runtime_error(tmp + ": write failed (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace gf
