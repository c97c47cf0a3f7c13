// PyTorch's checkpoint files (torch.save output, e.g. Megatron-LM's model_optim_rng.pt), read
// without Python and without running any of the pickle's code (see torch_pickle.h):
//  - the zip format (torch >= 1.6): a ZIP archive of STORED entries <name>/data.pkl (the object
//    pickle), <name>/data/<key> (one raw little-endian storage each, 64-byte aligned),
//    <name>/version and, from torch 2.1, <name>/byteorder; ZIP64 for large files. Compressed or
//    encrypted entries are refused.
//  - the legacy format (torch < 1.6, or _use_new_zipfile_serialization=False): pickles of the magic
//    number 0x1950a86a20f9469cfc6c, the protocol version 1001 and a sys_info dict, then the object
//    pickle (persistent ids ('storage', type, key, location, numel, view_metadata)), then a pickled
//    list of storage keys, then per key an int64 element count and the raw bytes.
// The file is mapped (POSIX mmap) and storages are read in place: a tensor's elements are copied
// only when asked for (TorchTensor::to_float, ...). Tensors keep the mapping alive, so they may
// outlive the TorchFile; the file must not be truncated while they are used.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/io/torch_pickle.h"

namespace gf {

class TorchFile {
 public:
  enum class Format { kZip, kLegacy };

  // Detects the format by its first bytes. Throws std::runtime_error naming the file, the entry
  // (data.pkl, a storage record, the legacy header, ...) and what is wrong. `limits`: the pickle's
  // bounds and opt-ins (enum_classes; a Megatron-LM checkpoint needs its ModelType); its `where`
  // and `storages` are set here.
  static TorchFile open(const std::string& path, const PickleOptions& limits = {});
  // The same over bytes the caller keeps alive through `owner` (`path` names them in errors).
  static TorchFile parse(const std::string& path, const uint8_t* bytes, size_t size,
                         std::shared_ptr<const void> owner, const PickleOptions& limits = {});

  const std::string& path() const { return path_; }
  Format format() const { return format_; }
  const PickleValue& root() const { return root_; }
  size_t storage_count() const { return storages_.size(); }

 private:
  void parse_zip(const uint8_t* bytes, size_t size, PickleOptions opt);
  void parse_legacy(const uint8_t* bytes, size_t size, PickleOptions opt);

  std::string path_;
  Format format_ = Format::kZip;
  std::shared_ptr<const void> owner_;
  PickleValue root_;
  std::map<std::string, std::shared_ptr<TorchStorage>> storages_;
};

}  // namespace gf
