// The safetensors format, by its published spec: 8-byte little-endian header length N, N bytes
// of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the raw
// little-endian data (offsets relative to the start of the data). Used for Hugging Face GPT-2
// weights, golden files and checkpoints.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gf {

enum class StDtype { kF32, kF16, kBF16, kI32, kI64, kF64, kU8 };

struct StTensor {
  StDtype dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the file's bytes
  int64_t nbytes = 0;
  int64_t numel() const;
};

class SafeTensorsFile {
 public:
  // Maps the file (read-only, private: POSIX mmap; its pages are read as tensors are converted) and
  // validates it; throws std::runtime_error naming the file, and the tensor where one is at fault
  // (unknown dtype, size that does not match the shape, offsets outside the data or overlapping).
  // The file must not be truncated while the result (or a tensor's data pointer) is used.
  static SafeTensorsFile open(const std::string& path);
  // The same from a file's bytes already in memory (kept by the result; `path` names them in
  // errors): a checkpoint reader checksums the bytes it read before parsing them.
  static SafeTensorsFile parse(const std::string& path, std::vector<uint8_t> bytes);
  // The same over bytes the caller keeps alive through `owner` (a checkpoint reader's mapping of the
  // file: no copy of it in the process's own memory).
  static SafeTensorsFile parse(const std::string& path, const uint8_t* bytes, size_t size,
                               std::shared_ptr<const void> owner);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  const StTensor& get(const std::string& name) const;  // throws naming the missing tensor
  const std::map<std::string, StTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Converts an F32/F16/BF16/F64 tensor to float.
  std::vector<float> floats(const std::string& name) const;
  void to_floats(const std::string& name, float* out, int64_t n) const;
  std::vector<int32_t> ints(const std::string& name) const;  // I32 or I64
  // Gives the mapped pages wholly inside tensor `name`'s bytes back to the kernel (madvise MADV_DONTNEED) once
  // the caller has its own copy: reading a file tensor by tensor then holds one tensor beyond what it keeps. A
  // later read faults them in from the file again. Nothing for a file opened from bytes in memory (parse).
  void drop_pages(const std::string& name) const;

 private:
  std::string path_;
  std::shared_ptr<const void> owner_;  // keeps the bytes alive (a vector, or a file mapping)
  bool mapped_ = false;                // bytes_ is open()'s private read-only mapping of the file
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct StWriteTensor {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// The bytes before the data: the 8-byte little-endian header length and the JSON header (tensors
// in the given order, their data back to back; padded with spaces to a multiple of 8 bytes, as the
// reference implementation does, so the data starts 8-byte aligned).
std::string safetensors_header(const std::vector<StWriteTensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Writes `path` atomically (to path + ".tmp", then rename).
void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The spec's name of a dtype ("F32", "BF16", ...).
const char* dtype_name(StDtype d);

float half_to_float(uint16_t h);
float bf16_to_float(uint16_t h);

// The index of the first finite value that float16 cannot hold (|v| >= 65520 rounds to inf; up to that it
// rounds to ±65504), or -1. A writer in float16 refuses such a tensor by name rather than write inf.
int64_t first_float16_overflow(const float* v, size_t n);
// "NAME: element I is V, beyond float16's range (±65504): ..." for that refusal.
std::string float16_overflow_message(const std::string& name, int64_t index, float value);

}  // namespace gf
