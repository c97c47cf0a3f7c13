// A restricted reader for the Python pickles that torch.save writes (protocols 2 to 5): a small
// stack machine over an allow-list of globals, never a general unpickler. Nothing is imported or
// called: a GLOBAL / STACK_GLOBAL naming anything outside the list (os.system, builtins.eval, a
// torch.nn module class, ...) is refused by that opcode itself, before anything is built, and the
// few allowed callables (tensor rebuilds, OrderedDict, torch.Size, argparse.Namespace, numpy
// scalars and arrays, _codecs.encode with latin1; members of Enum classes the caller names in
// PickleOptions::enum_classes) are interpreted here, with their arguments checked. The rule is
// PyTorch's `weights_only` unpickler (torch/_weights_only_unpickler.py), restricted further. Tensors refer to storages by persistent id; the file reader (torch_file.h)
// binds each storage to its bytes, in place.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gf {

// Element types of PyTorch tensors (and numpy arrays) this reader converts.
enum class TorchDtype { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kU16, kU32, kU64 };
const char* torch_dtype_name(TorchDtype d);  // PyTorch's name: "float32", "bfloat16", "int64", ...
// A shape as messages print it: "[4, 64]", "[]" for a scalar.
std::string shape_str(const std::vector<int64_t>& shape);
int64_t torch_dtype_size(TorchDtype d);

// One storage a pickle refers to by persistent id ('storage', type, key, location, numel[, view]).
struct TorchStorage {
  std::string key;       // the record name under data/ (zip) or the legacy key
  TorchDtype dtype = TorchDtype::kU8;  // kU8 for an untyped storage (numel then counts bytes)
  int64_t numel = 0;     // elements of dtype, as declared
  std::string location;  // "cpu", "cuda:0", ...
  const uint8_t* data = nullptr;       // nbytes() bytes once the file reader bound them
  std::shared_ptr<const void> owner;   // keeps `data` alive (the file mapping, or owned bytes)
  bool file_mapped = false;            // `data` lies in a read-only private mapping of the file (TorchFile::open)
  int64_t nbytes() const { return numel * torch_dtype_size(dtype); }  // checked when declared
  // Gives the pages wholly inside the storage's bytes back to the kernel (madvise MADV_DONTNEED), so that a reader
  // that has copied them out holds no second copy; a later read faults them in from the file again. Does nothing
  // unless file_mapped (owned bytes would be lost).
  void drop_pages() const;
};

// A strided view of a storage, as _rebuild_tensor_v2 describes it; also a numpy array (which owns
// its bytes). Shape, strides and offset were checked against the storage: no read goes outside.
// (Its members, like the value tree's accessors, are defined in torch_file.cpp beside the storage
// binding; torch_pickle.cpp holds only the stack machine, torch_pickle_globals.cpp the callables it allows.)
class TorchTensor {
 public:
  TorchDtype dtype = TorchDtype::kF32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
  int64_t storage_offset = 0;    // in elements
  std::shared_ptr<const TorchStorage> storage;

  const std::string& storage_key() const { return storage->key; }
  int64_t numel() const;
  bool is_contiguous() const;  // row-major, no gaps
  // The elements in row-major order of `shape`, converted; copies only this tensor's elements. An
  // expanded view (a zero stride) may have more elements than its storage: a caller reading an
  // untrusted file checks `shape` against what it expects before converting.
  std::vector<float> to_float() const;     // any dtype (integers rounded to float)
  std::vector<double> to_double() const;   // any dtype
  std::vector<int64_t> to_int64() const;   // integer and bool dtypes; throws for floating types
};

class PickleValue;
namespace detail { struct PickleNode; }

using PickleEntries = std::vector<std::pair<PickleValue, PickleValue>>;

// The value tree. Scalars are held inline; strings, containers and tensors are shared nodes (a
// pickle may refer to one object twice through its memo, and both see the same object).
class PickleValue {
 public:
  enum class Kind {
    kNone, kBool, kInt, kBigInt, kFloat, kString, kBytes, kList, kTuple, kDict,
    kNamespace,    // argparse.Namespace: its attribute dict (entries with str keys)
    kTensor,       // a torch tensor or parameter
    kNdArray,      // a numpy array (owns its bytes)
    kDtype,        // a torch dtype such as torch.float16 (Megatron's args.params_dtype)
    kNumpyDtype,   // a numpy dtype object
    kDevice,       // torch.device: as_string() is "cpu", "cuda:0", ...
    kStorage,      // a bare storage (saved without a tensor)
    kGlobal,       // an allowed class or function that was not called: as_string() is its name
    kEnum,         // a member of an opted-in Enum class (PickleOptions::enum_classes): as_string() is
                   // the class, enum_value() the member's value; the class is never imported or called
  };
  PickleValue() = default;

  Kind kind() const { return kind_; }
  const char* kind_name() const;
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_dict() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }

  bool as_bool() const;                 // kBool
  int64_t as_int() const;               // kInt or kBool
  double as_float() const;              // kFloat or kInt
  TorchDtype as_dtype() const;          // kDtype, kNumpyDtype
  const std::string& as_string() const; // kString, kDevice, kGlobal, kEnum (its class)
  const std::string& as_bytes() const;  // kBytes; kBigInt: little-endian two's complement
  const std::vector<PickleValue>& items() const;  // kList, kTuple
  const PickleEntries& entries() const;           // kDict, kNamespace (insertion order)
  const TorchTensor& tensor() const;              // kTensor, kNdArray
  const TorchStorage& storage() const;            // kStorage
  // kEnum: the member's value (pickled as Class(value)) or its name (pickled as getattr(Class,
  // name), which Python 3.11 writes): an int or str.
  const PickleValue& enum_value() const;

  // A tensor value made by a reader, not a pickle: a view that one reads out of a flat tensor of the file (Megatron's
  // distributed-optimizer buffers). The caller checks the view against its storage (view_of does).
  static PickleValue of_tensor(std::shared_ptr<TorchTensor> t);

  // Dict / Namespace lookup: nullptr when the key is absent; at() throws naming the key.
  const PickleValue* find(std::string_view key) const;
  const PickleValue* find(int64_t key) const;
  const PickleValue& at(std::string_view key) const;

 private:
  friend class PickleReader;
  Kind kind_ = Kind::kNone;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<detail::PickleNode> node_;
};

namespace detail {
// A value's shared part (only the fields of its kind are used).
struct PickleNode {
  std::string text;                 // string, bytes, big int, device, global name
  std::vector<PickleValue> items;   // list, tuple
  PickleEntries entries;            // dict, namespace
  std::unordered_map<std::string, size_t> str_index;  // dict keys -> entries
  std::unordered_map<int64_t, size_t> int_index;
  std::shared_ptr<TorchTensor> tensor;    // tensor, ndarray (null until an ndarray's BUILD)
  std::shared_ptr<TorchStorage> storage;  // storage
  bool bytes_io = false;  // bytes made by NEWOBJ of io.BytesIO, waiting for their BUILD (then false)
};
}  // namespace detail

// Empty when the view (t's shape, strides, offset and dtype) lies inside `storage_bytes` bytes;
// otherwise what is wrong (a negative size, an overflow, an element past the end, ...).
std::string torch_view_error(const TorchTensor& t, int64_t storage_bytes, size_t max_dims);

struct PickleOptions {
  std::string where;  // names the input in every error ("ckpt.pt: archive/data.pkl")
  // Persistent ids resolve into this table (key -> storage, shared by every tensor on it); when
  // null, a persistent id is refused. The caller binds each storage's bytes afterwards.
  std::map<std::string, std::shared_ptr<TorchStorage>>* storages = nullptr;
  size_t max_depth = 1000;          // containers inside containers
  size_t max_stack = 1u << 20;      // values on the stack, and marks
  size_t max_objects = 1u << 22;    // strings, containers and tensors made
  size_t max_dims = 64;             // tensor rank
  // Opt-in, empty by default: Python Enum classes ("module.Class") whose members may appear, as
  // Class(value) or getattr(Class, name) (builtins.getattr is allowed for exactly that, and only
  // when this list is not empty). Megatron-LM stores args.model_type as a member of
  // megatron.core.enums.ModelType (megatron.model.enums.ModelType before core): its reader lists it.
  std::vector<std::string> enum_classes;
};

// Runs one pickle from data[0, size) up to its STOP. `consumed` (optional) receives the bytes used
// (the legacy format holds several pickles back to back). Throws std::runtime_error starting with
// `options.where` and the byte offset: an unknown or unsupported opcode (named, with its hex), a
// refused global (named module.name), a length, memo index or count outside the input or the
// limits, a tensor outside its storage, nesting deeper than max_depth, or a cycle.
PickleValue read_pickle(const uint8_t* data, size_t size, const PickleOptions& options,
                        size_t* consumed = nullptr);

}  // namespace gf
