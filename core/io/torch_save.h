// Writing the files torch.save writes (its default zip serialization, as PyTorch 1.6 to 2.x write it), for
// Megatron-LM checkpoints out (models/weights/megatron_save.h): a tree of the values Megatron's
// save_checkpoint pickles (None, booleans, integers, floats, strings, lists, tuples, dicts, OrderedDicts,
// an argparse.Namespace, tensors) as a protocol-2 pickle `archive/data.pkl` whose tensors name their
// storages by persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel) and are rebuilt by
// torch._utils._rebuild_tensor_v2, beside one record `archive/data/<key>` of raw little-endian bytes per
// tensor (each its own storage, 64-byte aligned as PyTorch aligns them), `archive/byteorder` and
// `archive/version`. The ZIP entries are STORED with their CRC-32; the archive is not ZIP64, so a file is at
// most 4 GiB (refused above). Read back by torch.load and by our own reader (core/io/torch_file.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/io/torch_pickle.h"

namespace gf {

struct TorchOut {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kOrderedDict, kNamespace, kTensor, kGlobal };
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<TorchOut> items;                            // list, tuple
  std::vector<std::pair<std::string, TorchOut>> entries;  // dict, OrderedDict, Namespace (in this order)
  bool int_keys = false;  // a dict keyed by integers (the keys above in decimal): torch optimizer's 'state'
  std::vector<TorchOut> keys;  // when not empty, the pickled keys of `entries` (set_key): a dtype, an int, a string

  TorchDtype dtype = TorchDtype::kF32;                    // tensor: its element type, shape and bytes
  std::vector<int64_t> shape;
  std::shared_ptr<const std::vector<uint8_t>> bytes;

  static TorchOut none() { return {}; }
  static TorchOut boolean(bool v);
  static TorchOut integer(int64_t v);
  static TorchOut real(double v);
  static TorchOut string(std::string v);
  static TorchOut list(std::vector<TorchOut> v);
  static TorchOut tuple(std::vector<TorchOut> v);
  static TorchOut dict(Kind kind = Kind::kDict);  // kDict, kOrderedDict or kNamespace; add entries with set()
  static TorchOut int_dict();                     // a kDict whose keys set() gives in decimal are pickled as ints
  // A module-level name, as pickle's GLOBAL: torch.float32 (a dtype, as Megatron keys its grad buffers) is
  // global("torch", "float32"); `s` holds "module.name".
  static TorchOut global(const std::string& module, const std::string& name);
  // A tensor of `dtype` from float32 values (rounded to nearest even for float16 / bfloat16).
  static TorchOut tensor(TorchDtype dtype, std::vector<int64_t> shape, const std::vector<float>& values);

  TorchOut& set(const std::string& key, TorchOut v);  // appends (a dict's key order is the pickle's)
  // Appends with `key` pickled as itself (an integer, a string or a global); a dict uses set() or set_key() alone.
  TorchOut& set_key(TorchOut key, TorchOut v);
};

// The pickle and storages of `root` written to `path` (through `path`.tmp, renamed when complete). Throws
// std::runtime_error naming the path when it cannot be written or would exceed 4 GiB.
void torch_save(const std::string& path, const TorchOut& root);

}  // namespace gf
