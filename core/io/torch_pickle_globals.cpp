// The pickle reader's allow-list (torch_pickle.h): the GLOBAL / STACK_GLOBAL opcodes' check of a
// global against it, and what the allowed callables build when REDUCE / NEWOBJ / BUILD apply them
// (OrderedDict, tensors and parameters on their storages, torch.Size / device / dtype,
// argparse.Namespace, numpy arrays and scalars, _codecs.encode, opted-in Enum members), with their
// arguments checked; the persistent ids of storages. The stack machine that calls them is in
// torch_pickle.cpp; the class PickleReader and what both files share in torch_pickle_detail.h.
#include "core/io/torch_pickle.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/io/safetensors.h"  // half_to_float
#include "core/io/torch_pickle_detail.h"

namespace gf {

using namespace pickle_detail;

namespace {

struct DtypeName { const char* name; TorchDtype dtype; };
constexpr DtypeName kDtypes[] = {
    {"float32", TorchDtype::kF32}, {"float16", TorchDtype::kF16}, {"bfloat16", TorchDtype::kBF16},
    {"float64", TorchDtype::kF64}, {"int64", TorchDtype::kI64},   {"int32", TorchDtype::kI32},
    {"int16", TorchDtype::kI16},   {"int8", TorchDtype::kI8},     {"uint8", TorchDtype::kU8},
    {"bool", TorchDtype::kBool},   {"uint16", TorchDtype::kU16},  {"uint32", TorchDtype::kU32},
    {"uint64", TorchDtype::kU64}};
constexpr DtypeName kStorageTypes[] = {
    {"FloatStorage", TorchDtype::kF32}, {"HalfStorage", TorchDtype::kF16}, {"BFloat16Storage", TorchDtype::kBF16},
    {"DoubleStorage", TorchDtype::kF64}, {"LongStorage", TorchDtype::kI64}, {"IntStorage", TorchDtype::kI32},
    {"ShortStorage", TorchDtype::kI16}, {"CharStorage", TorchDtype::kI8},   {"ByteStorage", TorchDtype::kU8},
    {"BoolStorage", TorchDtype::kBool}};
constexpr DtypeName kNumpyTypes[] = {
    {"f4", TorchDtype::kF32}, {"f2", TorchDtype::kF16}, {"f8", TorchDtype::kF64}, {"i8", TorchDtype::kI64},
    {"i4", TorchDtype::kI32}, {"i2", TorchDtype::kI16}, {"i1", TorchDtype::kI8},  {"u1", TorchDtype::kU8},
    {"b1", TorchDtype::kBool}, {"u2", TorchDtype::kU16}, {"u4", TorchDtype::kU32}, {"u8", TorchDtype::kU64}};

template <size_t N>
bool lookup(const DtypeName (&table)[N], std::string_view name, TorchDtype* d) {
  for (const auto& e : table)
    if (name == e.name) { *d = e.dtype; return true; }
  return false;
}

struct AllowedGlobal { const char* name; Callable id; };
constexpr AllowedGlobal kAllowed[] = {
    {"collections.OrderedDict", Callable::kOrderedDict}, {"torch._utils._rebuild_tensor", Callable::kRebuildTensor},
    {"torch._utils._rebuild_tensor_v2", Callable::kRebuildTensorV2},
    {"torch._utils._rebuild_tensor_v3", Callable::kRebuildTensorV3},
    {"torch._utils._rebuild_parameter", Callable::kRebuildParameter},
    {"torch.UntypedStorage", Callable::kStorageType}, {"torch.storage.UntypedStorage", Callable::kStorageType},
    {"torch.Size", Callable::kSize}, {"torch.device", Callable::kDevice}, {"argparse.Namespace", Callable::kNamespace},
    {"copyreg._reconstructor", Callable::kReconstructor},  // protocol 0/1 Namespace: (Namespace, object, None)
    {"builtins.object", Callable::kObject},                // only as _reconstructor's second argument
    {"numpy.core.multiarray.scalar", Callable::kNpScalar}, {"numpy._core.multiarray.scalar", Callable::kNpScalar},
    {"numpy.core.multiarray._reconstruct", Callable::kNpReconstruct},
    {"numpy._core.multiarray._reconstruct", Callable::kNpReconstruct},
    {"numpy.dtype", Callable::kNpDtype}, {"numpy.ndarray", Callable::kNpNdarray},
    {"_codecs.encode", Callable::kCodecsEncode},  // numpy's bytes under protocol 2; latin1 only
    // Transformer Engine's get_extra_state (its fp8 metadata torch.save'd into an io.BytesIO): read as opaque
    // bytes (NEWOBJ with no arguments, then BUILD with (bytes, position, None or dict)); never parsed here.
    {"_io.BytesIO", Callable::kBytesIO},
};

// Non-printable bytes as \xNN, so a hostile name cannot garble the message.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c)) : "\\x" + hex(c).substr(2);
  return out;
}

}  // namespace

// The allow-list: the GLOBAL / STACK_GLOBAL opcode refuses anything else, before it is used.
PickleValue PickleReader::global(const std::string& module, const std::string& name) {
  const std::string full = module + "." + name;
  TorchDtype d;
  if (module == "torch" && lookup(kDtypes, name, &d)) return scalar(Kind::kDtype, static_cast<int64_t>(d));
  bool allowed = module == "torch" && lookup(kStorageTypes, name, &d);
  Callable id = Callable::kStorageType;
  for (const auto& a : kAllowed)
    if (full == a.name) { allowed = true; id = a.id; }
  for (const auto& e : opt_.enum_classes)
    if (full == e) { allowed = true; id = Callable::kEnumClass; }
  if (!opt_.enum_classes.empty() && (full == "builtins.getattr" || full == "__builtin__.getattr")) {
    allowed = true;  // Python 3.11 pickles an Enum member as getattr(Class, name): only that is accepted
    id = Callable::kGetattr;
  }
  if (!allowed)
    fail("refused global '" + printable(full) + "': not on the allow-list (tensors, storages, OrderedDict, "
         "torch.Size/dtype/device, argparse.Namespace, numpy arrays and scalars)");
  PickleValue v = make(Kind::kGlobal, static_cast<int64_t>(id));
  v.node_->text = full;
  return v;
}

std::vector<int64_t> PickleReader::ints(const PickleValue& v, const char* what) {
  if (v.kind_ != Kind::kTuple && v.kind_ != Kind::kList) fail(std::string(what) + " is a " + v.kind_name() + ", not a tuple");
  std::vector<int64_t> out;
  for (const auto& e : v.node_->items) {
    if (e.kind_ != Kind::kInt) fail(std::string(what) + " holds a " + e.kind_name() + ", not an int");
    out.push_back(e.int_);
  }
  return out;
}

PickleValue PickleReader::reduce(const PickleValue& fn, const PickleValue& args) {
  if (fn.kind_ != Kind::kGlobal) fail(std::string("REDUCE calls a ") + fn.kind_name() + ", not an allowed global");
  const std::string& name = fn.node_->text;
  expect(args, Kind::kTuple, "REDUCE arguments of '" + name + "'");
  const Items& a = args.node_->items;
  const auto id = static_cast<Callable>(fn.int_);
  switch (id) {
    case Callable::kOrderedDict: arity(a, 0, 0, name); return make(Kind::kDict);
    case Callable::kRebuildTensor: case Callable::kRebuildTensorV2: case Callable::kRebuildTensorV3:
      return rebuild_tensor(id, a, name);
    case Callable::kRebuildParameter:
      arity(a, 3, 3, name);
      expect(a[0], Kind::kTensor, "parameter data");
      expect(a[1], Kind::kBool, "parameter requires_grad");
      if (a[2].kind_ != Kind::kDict || !a[2].node_->entries.empty()) fail("parameter backward hooks are not empty");
      return a[0];
    case Callable::kSize: {
      arity(a, 1, 1, name);
      PickleValue t = make(Kind::kTuple);
      for (int64_t d : ints(a[0], "torch.Size")) t.node_->items.push_back(scalar(Kind::kInt, d));
      return t;
    }
    case Callable::kDevice: {
      arity(a, 1, 2, name);
      expect(a[0], Kind::kString, "torch.device type");
      PickleValue v = make(Kind::kDevice);
      v.node_->text = a[0].node_->text;
      if (a.size() == 2 && a[1].kind_ != Kind::kNone) {
        expect(a[1], Kind::kInt, "torch.device index");
        v.node_->text += ":" + std::to_string(a[1].int_);
      }
      return v;
    }
    case Callable::kReconstructor:
      arity(a, 3, 3, name);
      if (a[0].kind_ != Kind::kGlobal || a[0].int_ != static_cast<int64_t>(Callable::kNamespace) ||
          a[1].kind_ != Kind::kGlobal || a[1].int_ != static_cast<int64_t>(Callable::kObject) || !a[2].is_none())
        fail("copyreg._reconstructor is only allowed as (argparse.Namespace, object, None)");
      return make(Kind::kNamespace);
    case Callable::kNpScalar: return numpy_scalar(a);
    case Callable::kNpDtype: {
      arity(a, 3, 3, name);
      expect(a[0], Kind::kString, "numpy dtype");
      TorchDtype d;
      if (!lookup(kNumpyTypes, a[0].node_->text, &d)) fail("numpy dtype '" + printable(a[0].node_->text) + "' is not supported");
      return make(Kind::kNumpyDtype, static_cast<int64_t>(d));
    }
    case Callable::kNpReconstruct:
      arity(a, 3, 3, name);
      if (a[0].kind_ != Kind::kGlobal || a[0].int_ != static_cast<int64_t>(Callable::kNpNdarray))
        fail("numpy _reconstruct is only allowed for numpy.ndarray");
      return make(Kind::kNdArray);
    case Callable::kCodecsEncode: {
      arity(a, 2, 2, name);
      expect(a[0], Kind::kString, "_codecs.encode text");
      expect(a[1], Kind::kString, "_codecs.encode encoding");
      if (a[1].node_->text != "latin1") fail("_codecs.encode is only allowed with 'latin1'");
      PickleValue v = make(Kind::kBytes);
      const std::string& s = a[0].node_->text;
      for (size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<uint8_t>(s[i]);
        if (c < 0x80) { v.node_->text += static_cast<char>(c); continue; }
        if ((c != 0xc2 && c != 0xc3) || i + 1 >= s.size() || (static_cast<uint8_t>(s[i + 1]) & 0xc0) != 0x80)
          fail("_codecs.encode text is not latin1");
        v.node_->text += static_cast<char>(((c & 3) << 6) | (static_cast<uint8_t>(s[++i]) & 0x3f));
      }
      return v;
    }
    case Callable::kEnumClass: case Callable::kGetattr: {  // Class(value) or getattr(Class, name): recorded
      const bool by_name = id == Callable::kGetattr;
      arity(a, by_name ? 2 : 1, by_name ? 2 : 1, name);
      if (by_name && (a[0].kind_ != Kind::kGlobal || a[0].int_ != static_cast<int64_t>(Callable::kEnumClass)))
        fail("getattr is only allowed on an opted-in enum class");
      const PickleValue& member = a[by_name ? 1 : 0];
      if (member.kind_ != Kind::kInt && member.kind_ != Kind::kString) fail("enum member is a " + std::string(member.kind_name()));
      PickleValue v = make(Kind::kEnum);
      v.node_->text = by_name ? a[0].node_->text : name;
      v.node_->items.push_back(member);
      return v;
    }
    default: fail("'" + name + "' cannot be called");
  }
}

PickleValue PickleReader::newobj(const PickleValue& cls, const PickleValue& args) {
  const bool bytes_io = cls.kind_ == Kind::kGlobal && cls.int_ == static_cast<int64_t>(Callable::kBytesIO);
  if (!bytes_io && (cls.kind_ != Kind::kGlobal || cls.int_ != static_cast<int64_t>(Callable::kNamespace)))
    fail(std::string("NEWOBJ of a ") + (cls.kind_ == Kind::kGlobal ? "'" + cls.node_->text + "'" : cls.kind_name()) +
         " (only argparse.Namespace and io.BytesIO)");
  expect(args, Kind::kTuple, "NEWOBJ arguments");
  if (bytes_io) {
    if (!args.node_->items.empty()) fail("io.BytesIO made with arguments");
    PickleValue v = make(Kind::kBytes);
    v.node_->bytes_io = true;
    return v;
  }
  if (!args.node_->items.empty()) fail("argparse.Namespace made with arguments");
  return make(Kind::kNamespace);
}

void PickleReader::build(PickleValue& inst, const PickleValue& state) {
  switch (inst.kind_) {
    case Kind::kNamespace:
      expect(state, Kind::kDict, "argparse.Namespace state");
      for (const auto& [k, v] : state.node_->entries) {
        expect(k, Kind::kString, "attribute name");
        dict_set(*inst.node_, k, v);
      }
      return;
    case Kind::kDict:  // an OrderedDict's instance attributes (a state dict's _metadata): dropped
      expect(state, Kind::kDict, "OrderedDict state");
      return;
    case Kind::kNumpyDtype: {
      expect(state, Kind::kTuple, "numpy dtype state");
      const Items& s = state.node_->items;
      if (s.size() < 5 || s[1].kind_ != Kind::kString || !s[2].is_none() || !s[3].is_none() || !s[4].is_none())
        fail("numpy dtype state is not that of a plain numeric dtype");
      const std::string& order = s[1].node_->text;
      if (order != "<" && order != "|" && order != "=" && !(order == ">" && torch_dtype_size(inst.as_dtype()) == 1))
        fail("numpy dtype byte order '" + printable(order) + "' (only little-endian data is read)");
      return;
    }
    case Kind::kNdArray: return ndarray_state(inst, state);
    case Kind::kBytes: {  // io.BytesIO.__setstate__: (the buffer's bytes, the position, None or the __dict__)
      if (!inst.node_->bytes_io) fail("BUILD on bytes is not allowed (only on a new io.BytesIO)");
      expect(state, Kind::kTuple, "io.BytesIO state");
      const Items& s = state.node_->items;
      if (s.size() != 3 || s[0].kind_ != Kind::kBytes || s[0].node_->bytes_io || s[1].kind_ != Kind::kInt ||
          !(s[2].is_none() || s[2].kind_ == Kind::kDict))
        fail("io.BytesIO state is not (bytes, position, None or dict)");
      inst.node_->text = s[0].node_->text;
      inst.node_->bytes_io = false;
      return;
    }
    default: fail(std::string("BUILD on a ") + inst.kind_name() + " is not allowed");
  }
}

void PickleReader::ndarray_state(PickleValue& inst, const PickleValue& state) {
  expect(state, Kind::kTuple, "numpy array state");
  const Items& s = state.node_->items;
  if (s.size() != 5) fail("numpy array state has " + std::to_string(s.size()) + " items, expected 5");
  if (inst.node_->tensor) fail("numpy array built twice");
  expect(s[2], Kind::kNumpyDtype, "numpy array dtype");
  expect(s[3], Kind::kBool, "numpy array fortran flag");
  expect(s[4], Kind::kBytes, "numpy array data");
  auto t = std::make_shared<TorchTensor>();
  t->dtype = s[2].as_dtype();
  t->shape = ints(s[1], "numpy array shape");
  t->strides.assign(t->shape.size(), 1);
  const size_t nd = t->shape.size();
  for (size_t i = 1; i < nd; ++i) {  // C order: last fastest; Fortran: first fastest
    const size_t d = s[3].int_ ? i : nd - 1 - i, prev = s[3].int_ ? i - 1 : nd - i;
    if (t->shape[prev] < 0 || __builtin_mul_overflow(t->strides[prev], std::max<int64_t>(t->shape[prev], 1), &t->strides[d]))
      fail("numpy array shape overflows");
  }
  const std::string& bytes = s[4].node_->text;
  const int64_t size = torch_dtype_size(t->dtype);
  auto storage = std::make_shared<TorchStorage>();
  storage->key = "<numpy array>";
  storage->dtype = t->dtype;
  storage->numel = static_cast<int64_t>(bytes.size()) / size;
  storage->data = reinterpret_cast<const uint8_t*>(bytes.data());
  storage->owner = s[4].node_;
  t->storage = storage;
  const std::string err = torch_view_error(*t, static_cast<int64_t>(bytes.size()), opt_.max_dims);
  if (!err.empty()) fail("numpy array: " + err);
  if (t->numel() * size != static_cast<int64_t>(bytes.size()))
    fail("numpy array data has " + std::to_string(bytes.size()) + " bytes, its shape needs " + std::to_string(t->numel() * size));
  inst.node_->tensor = std::move(t);
}

PickleValue PickleReader::numpy_scalar(const Items& a) {
  arity(a, 2, 2, "numpy scalar");
  expect(a[0], Kind::kNumpyDtype, "numpy scalar dtype");
  expect(a[1], Kind::kBytes, "numpy scalar data");
  const TorchDtype d = a[0].as_dtype();
  const std::string& b = a[1].node_->text;
  if (static_cast<int64_t>(b.size()) != torch_dtype_size(d)) fail("numpy scalar data size does not match its dtype");
  const auto* p = reinterpret_cast<const uint8_t*>(b.data());
  switch (d) {
    case TorchDtype::kF32: return scalar(Kind::kFloat, 0, load<float>(p));
    case TorchDtype::kF64: return scalar(Kind::kFloat, 0, load<double>(p));
    case TorchDtype::kF16: return scalar(Kind::kFloat, 0, half_to_float(load<uint16_t>(p)));
    case TorchDtype::kBool: return scalar(Kind::kBool, p[0] != 0);
    case TorchDtype::kU64:
      if (load<uint64_t>(p) > static_cast<uint64_t>(INT64_MAX)) fail("numpy uint64 scalar beyond int64");
      return scalar(Kind::kInt, load<int64_t>(p));
    case TorchDtype::kI64: return scalar(Kind::kInt, load<int64_t>(p));
    case TorchDtype::kI32: return scalar(Kind::kInt, load<int32_t>(p));
    case TorchDtype::kU32: return scalar(Kind::kInt, load<uint32_t>(p));
    case TorchDtype::kI16: return scalar(Kind::kInt, load<int16_t>(p));
    case TorchDtype::kU16: return scalar(Kind::kInt, load<uint16_t>(p));
    case TorchDtype::kI8: return scalar(Kind::kInt, load<int8_t>(p));
    default: return scalar(Kind::kInt, p[0]);  // uint8
  }
}

PickleValue PickleReader::rebuild_tensor(Callable id, const Items& a, const std::string& name) {
  const bool v1 = id == Callable::kRebuildTensor, v3 = id == Callable::kRebuildTensorV3;
  arity(a, v1 ? 4 : v3 ? 7 : 6, v1 ? 4 : v3 ? 8 : 7, name);
  expect(a[0], Kind::kStorage, "tensor storage");
  expect(a[1], Kind::kInt, "tensor storage offset");
  auto t = std::make_shared<TorchTensor>();
  t->storage = a[0].node_->storage;
  t->dtype = t->storage->dtype;
  t->storage_offset = a[1].int_;
  t->shape = ints(a[2], "tensor size");
  t->strides = ints(a[3], "tensor stride");
  if (!v1) {
    expect(a[4], Kind::kBool, "tensor requires_grad");
    if (a[5].kind_ != Kind::kDict || !a[5].node_->entries.empty()) fail("tensor backward hooks are not empty");
  }
  if (v3) {
    expect(a[6], Kind::kDtype, "tensor dtype");
    t->dtype = a[6].as_dtype();
    if (t->storage->dtype != TorchDtype::kU8 && t->storage->dtype != t->dtype)
      fail(std::string("tensor dtype ") + torch_dtype_name(t->dtype) + " on a " + torch_dtype_name(t->storage->dtype) + " storage");
  }
  const size_t meta = v3 ? 7 : 6;
  if (!v1 && a.size() > meta) {  // conj / neg bits: a reader that ignored them would return wrong values
    expect(a[meta], Kind::kDict, "tensor metadata");
    for (const auto& [k, v] : a[meta].node_->entries)
      if (!(v.kind_ == Kind::kBool && v.int_ == 0)) fail("tensor metadata sets a flag this reader does not apply");
  }
  const std::string err = torch_view_error(*t, t->storage->nbytes(), opt_.max_dims);
  if (!err.empty()) fail("tensor on storage '" + printable(t->storage->key) + "': " + err);
  PickleValue v = make(Kind::kTensor);
  v.node_->tensor = std::move(t);
  return v;
}

PickleValue PickleReader::persistent(const PickleValue& pid) {
  if (!opt_.storages) fail("persistent id outside a checkpoint's object pickle");
  expect(pid, Kind::kTuple, "persistent id");
  const Items& a = pid.node_->items;
  if (a.size() != 5 && a.size() != 6) fail("persistent id has " + std::to_string(a.size()) + " items, expected 5 or 6");
  if (a[0].kind_ != Kind::kString || a[0].node_->text != "storage") fail("persistent id is not a storage");
  if (a[1].kind_ != Kind::kGlobal || a[1].int_ != static_cast<int64_t>(Callable::kStorageType))
    fail("persistent id's storage type is not a storage class");
  TorchDtype dtype = TorchDtype::kU8;  // UntypedStorage: numel counts bytes
  const std::string& type = a[1].node_->text;
  if (type.rfind("torch.", 0) == 0) lookup(kStorageTypes, std::string_view(type).substr(6), &dtype);
  std::string key;
  if (a[2].kind_ == Kind::kString) key = a[2].node_->text;
  else if (a[2].kind_ == Kind::kInt) key = std::to_string(a[2].int_);
  else fail("storage key is a " + std::string(a[2].kind_name()));
  expect(a[3], Kind::kString, "storage location");
  expect(a[4], Kind::kInt, "storage size");
  if (a.size() == 6 && !a[5].is_none()) fail("storage '" + printable(key) + "' is a legacy storage view (not supported)");
  int64_t nbytes = 0;
  if (a[4].int_ < 0 || __builtin_mul_overflow(a[4].int_, torch_dtype_size(dtype), &nbytes))
    fail("storage '" + printable(key) + "' has a bad size " + std::to_string(a[4].int_));
  auto [it, fresh] = opt_.storages->try_emplace(key);
  if (fresh) {
    it->second = std::make_shared<TorchStorage>();
    *it->second = TorchStorage{key, dtype, a[4].int_, a[3].node_->text, nullptr, nullptr};
  } else if (it->second->dtype != dtype || it->second->numel != a[4].int_) {
    fail("storage '" + printable(key) + "' declared twice with different types or sizes");
  }
  PickleValue v = make(Kind::kStorage);
  v.node_->storage = it->second;
  return v;
}

}  // namespace gf
