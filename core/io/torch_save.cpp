// torch.save's zip format written (core/io/torch_save.h). The pickle follows what Python's pickle module
// writes at protocol 2 for these values (PyTorch's default, DEFAULT_PROTOCOL = 2 in torch/serialization.py),
// without the memo, which no reader needs for a tree; the tensors as torch.Tensor.__reduce_ex__ writes them
// (torch/_tensor.py: _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
// backward_hooks)), their storages by persistent id (torch/serialization.py _save's persistent_id). The
// archive as PyTorchStreamWriter (caffe2/serialize/inline_container.cc) lays it out: records under
// `archive/`, each record's data 64-byte aligned through padding in the local header's extra field, the
// version record last.
#include "core/io/torch_save.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/math/gemm_bf16.h"

namespace gf {

namespace {

// ---- values ---------------------------------------------------------------------------------

const char* storage_type(TorchDtype d) {
  switch (d) {
    case TorchDtype::kF32: return "FloatStorage";
    case TorchDtype::kF16: return "HalfStorage";
    case TorchDtype::kBF16: return "BFloat16Storage";
    case TorchDtype::kF64: return "DoubleStorage";
    case TorchDtype::kI64: return "LongStorage";
    case TorchDtype::kI32: return "IntStorage";
    case TorchDtype::kI16: return "ShortStorage";
    case TorchDtype::kI8: return "CharStorage";
    case TorchDtype::kU8: return "ByteStorage";
    case TorchDtype::kBool: return "BoolStorage";
    default: break;
  }
  throw std::invalid_argument(std::string("torch_save: no torch storage type for ") + torch_dtype_name(d));
}

// ---- the pickle -----------------------------------------------------------------------------

class Pickler {
 public:
  explicit Pickler(std::vector<const TorchOut*>& tensors) : tensors_(tensors) {}
  std::string out;

  void value(const TorchOut& v) {
    using K = TorchOut::Kind;
    switch (v.kind) {
      case K::kNone: op('N'); break;
      case K::kBool: op(v.b ? '\x88' : '\x89'); break;
      case K::kInt: integer(v.i); break;
      case K::kFloat: {
        op('G');
        const uint64_t u = std::bit_cast<uint64_t>(v.f);
        for (int k = 7; k >= 0; --k) out.push_back(static_cast<char>(u >> (8 * k)));  // big-endian
        break;
      }
      case K::kString: string(v.s); break;
      case K::kList:
        op(']');
        if (!v.items.empty()) {
          op('(');
          for (const TorchOut& x : v.items) value(x);
          op('e');  // APPENDS
        }
        break;
      case K::kTuple:
        if (v.items.empty()) {
          op(')');
        } else {
          op('(');
          for (const TorchOut& x : v.items) value(x);
          op('t');
        }
        break;
      case K::kDict:
        op('}');
        setitems(v);
        break;
      case K::kOrderedDict:  // OrderedDict.__reduce__: the class called with (), then its items
        global("collections", "OrderedDict");
        op(')');
        op('R');
        setitems(v);
        break;
      case K::kNamespace:  // an object with a __dict__: copyreg.__newobj__ (NEWOBJ), then BUILD with the dict
        global("argparse", "Namespace");
        op(')');
        op('\x81');
        op('}');
        setitems(v);
        op('b');
        break;
      case K::kTensor: tensor(v); break;
      case K::kGlobal: {
        const size_t dot = v.s.rfind('.');
        global(v.s.substr(0, dot).c_str(), v.s.substr(dot + 1).c_str());
        break;
      }
    }
  }

 private:
  std::vector<const TorchOut*>& tensors_;

  void op(char c) { out.push_back(c); }
  void u32(uint32_t n) {
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>(n >> (8 * k)));
  }
  void integer(int64_t n) {
    if (n >= INT32_MIN && n <= INT32_MAX) {
      op('J');  // BININT
      u32(static_cast<uint32_t>(static_cast<int32_t>(n)));
      return;
    }
    op('\x8a');  // LONG1: little-endian two's complement, 8 bytes (no shorter form is needed)
    out.push_back(8);
    for (int k = 0; k < 8; ++k) out.push_back(static_cast<char>(static_cast<uint64_t>(n) >> (8 * k)));
  }
  void string(const std::string& s) {
    op('X');  // BINUNICODE: UTF-8 bytes
    u32(static_cast<uint32_t>(s.size()));
    out += s;
  }
  void global(const char* module, const char* name) {
    op('c');
    out += module;
    out += '\n';
    out += name;
    out += '\n';
  }
  void setitems(const TorchOut& v) {
    if (v.entries.empty()) return;
    op('(');
    for (size_t i = 0; i < v.entries.size(); ++i) {
      const auto& [k, x] = v.entries[i];
      if (!v.keys.empty()) value(v.keys[i]);
      else if (v.int_keys) integer(std::stoll(k));
      else string(k);
      value(x);
    }
    op('u');
  }
  void tensor(const TorchOut& t) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (!t.bytes || static_cast<int64_t>(t.bytes->size()) != numel * torch_dtype_size(t.dtype))
      throw std::invalid_argument("torch_save: a tensor's bytes do not match its shape and dtype");
    const std::string key = std::to_string(tensors_.size());
    tensors_.push_back(&t);
    global("torch._utils", "_rebuild_tensor_v2");
    op('(');
    // The storage, by persistent id: ('storage', storage type, key, location, numel).
    op('(');
    string("storage");
    global("torch", storage_type(t.dtype));
    string(key);
    string("cpu");
    integer(numel);
    op('t');
    op('Q');  // BINPERSID
    integer(0);  // storage_offset
    op('(');
    for (int64_t d : t.shape) integer(d);
    op('t');
    op('(');  // contiguous strides
    std::vector<int64_t> stride(t.shape.size(), 1);
    for (size_t k = t.shape.size(); k-- > 1;) stride[k - 1] = stride[k] * t.shape[k];
    for (int64_t s : stride) integer(s);
    op('t');
    op('\x89');  // requires_grad False
    global("collections", "OrderedDict");  // backward_hooks: OrderedDict()
    op(')');
    op('R');
    op('t');
    op('R');
  }
};

// ---- the archive ----------------------------------------------------------------------------

uint32_t crc32(const uint8_t* p, size_t n) {  // IEEE 802.3 (zlib's), as ZIP records it
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

class ZipWriter {
 public:
  explicit ZipWriter(const std::string& path) : path_(path), out_(path, std::ios::binary | std::ios::trunc) {
    if (!out_) throw std::runtime_error(path + ": cannot create");
  }

  void add(const std::string& name, const uint8_t* data, size_t size) {
    // The local header is 30 bytes, then the name, then the extra field: padding ("FB" and a length, as
    // PyTorchStreamWriter writes it) so that the data starts at a multiple of 64.
    const uint64_t header_end = offset_ + 30 + name.size();
    uint64_t pad = (64 - (header_end + 4) % 64) % 64;
    const uint16_t extra = static_cast<uint16_t>(4 + pad);
    const uint32_t crc = crc32(data, size);
    check_size(header_end + extra + size);
    Entry e{name, crc, static_cast<uint32_t>(size), static_cast<uint32_t>(offset_)};
    std::string h;
    le32(h, 0x04034b50u);
    le16(h, 20);  // version needed: 2.0
    le16(h, 0);   // flags
    le16(h, 0);   // STORED
    le16(h, 0);   // time
    le16(h, 0x21);  // date: 1980-01-01
    le32(h, crc);
    le32(h, e.size);
    le32(h, e.size);
    le16(h, static_cast<uint16_t>(name.size()));
    le16(h, extra);
    h += name;
    le16(h, 0x4246);  // "FB"
    le16(h, static_cast<uint16_t>(pad));
    h.append(pad, 'Z');
    write(h.data(), h.size());
    write(reinterpret_cast<const char*>(data), size);
    entries_.push_back(std::move(e));
  }
  void add(const std::string& name, const std::string& s) {
    add(name, reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }

  void finish() {
    const uint64_t cd_start = offset_;
    std::string cd;
    for (const Entry& e : entries_) {
      le32(cd, 0x02014b50u);
      le16(cd, 20);  // made by
      le16(cd, 20);  // needed
      le16(cd, 0);
      le16(cd, 0);
      le16(cd, 0);
      le16(cd, 0x21);
      le32(cd, e.crc);
      le32(cd, e.size);
      le32(cd, e.size);
      le16(cd, static_cast<uint16_t>(e.name.size()));
      le16(cd, 0);  // extra
      le16(cd, 0);  // comment
      le16(cd, 0);  // disk
      le16(cd, 0);  // internal attributes
      le32(cd, 0);  // external attributes
      le32(cd, e.offset);
      cd += e.name;
    }
    check_size(cd_start + cd.size() + 22);
    const uint32_t cd_size = static_cast<uint32_t>(cd.size());
    le32(cd, 0x06054b50u);  // the end of central directory record
    le16(cd, 0);
    le16(cd, 0);
    le16(cd, static_cast<uint16_t>(entries_.size()));
    le16(cd, static_cast<uint16_t>(entries_.size()));
    le32(cd, cd_size);
    le32(cd, static_cast<uint32_t>(cd_start));
    le16(cd, 0);
    write(cd.data(), cd.size());
    out_.flush();
    if (!out_) throw std::runtime_error(path_ + ": cannot write (disk full?)");
    out_.close();
  }

 private:
  struct Entry {
    std::string name;
    uint32_t crc, size, offset;
  };
  std::string path_;
  std::ofstream out_;
  uint64_t offset_ = 0;
  std::vector<Entry> entries_;

  static void le16(std::string& s, uint16_t v) {
    s.push_back(static_cast<char>(v));
    s.push_back(static_cast<char>(v >> 8));
  }
  static void le32(std::string& s, uint32_t v) {
    for (int k = 0; k < 4; ++k) s.push_back(static_cast<char>(v >> (8 * k)));
  }
  void check_size(uint64_t end) const {
    if (end > 0xFFFFFFFFull || entries_.size() >= 0xFFFF)
      throw std::runtime_error(path_ + ": over 4 GiB or 65535 records, which needs ZIP64 (not written here); save "
                               "with more tensor- or pipeline-parallel shards");
  }
  void write(const char* p, size_t n) {
    out_.write(p, static_cast<std::streamsize>(n));
    if (!out_) throw std::runtime_error(path_ + ": cannot write (disk full?)");
    offset_ += n;
  }
};

}  // namespace

// ---- TorchOut ---------------------------------------------------------------------------------

TorchOut TorchOut::boolean(bool v) {
  TorchOut o;
  o.kind = Kind::kBool;
  o.b = v;
  return o;
}
TorchOut TorchOut::integer(int64_t v) {
  TorchOut o;
  o.kind = Kind::kInt;
  o.i = v;
  return o;
}
TorchOut TorchOut::real(double v) {
  TorchOut o;
  o.kind = Kind::kFloat;
  o.f = v;
  return o;
}
TorchOut TorchOut::string(std::string v) {
  TorchOut o;
  o.kind = Kind::kString;
  o.s = std::move(v);
  return o;
}
TorchOut TorchOut::list(std::vector<TorchOut> v) {
  TorchOut o;
  o.kind = Kind::kList;
  o.items = std::move(v);
  return o;
}
TorchOut TorchOut::tuple(std::vector<TorchOut> v) {
  TorchOut o;
  o.kind = Kind::kTuple;
  o.items = std::move(v);
  return o;
}
TorchOut TorchOut::dict(Kind kind) {
  if (kind != Kind::kDict && kind != Kind::kOrderedDict && kind != Kind::kNamespace)
    throw std::invalid_argument("TorchOut::dict: kDict, kOrderedDict or kNamespace");
  TorchOut o;
  o.kind = kind;
  return o;
}
TorchOut& TorchOut::set(const std::string& key, TorchOut v) {
  if (!keys.empty()) throw std::invalid_argument("TorchOut::set: a dict keyed by set_key() too");
  entries.emplace_back(key, std::move(v));
  return *this;
}

TorchOut& TorchOut::set_key(TorchOut key, TorchOut v) {
  if (keys.size() != entries.size()) throw std::invalid_argument("TorchOut::set_key: a dict keyed by set() too");
  const std::string label = key.kind == Kind::kInt ? std::to_string(key.i) : key.s;
  keys.push_back(std::move(key));
  entries.emplace_back(label, std::move(v));
  return *this;
}

TorchOut TorchOut::global(const std::string& module, const std::string& name) {
  TorchOut o;
  o.kind = Kind::kGlobal;
  o.s = module + "." + name;
  return o;
}

TorchOut TorchOut::int_dict() {
  TorchOut d = dict();
  d.int_keys = true;
  return d;
}

TorchOut TorchOut::tensor(TorchDtype dtype, std::vector<int64_t> shape, const std::vector<float>& values) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  if (numel != static_cast<int64_t>(values.size()))
    throw std::invalid_argument("TorchOut::tensor: " + std::to_string(values.size()) + " values for " +
                                std::to_string(numel) + " elements");
  auto bytes = std::make_shared<std::vector<uint8_t>>(values.size() * torch_dtype_size(dtype));
  uint8_t* p = bytes->data();
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case TorchDtype::kF32: std::memcpy(p + 4 * i, &values[i], 4); break;
      case TorchDtype::kBF16: { const uint16_t b = float_to_bf16(values[i]).bits; std::memcpy(p + 2 * i, &b, 2); break; }
      case TorchDtype::kF16: {
        const uint16_t h = std::bit_cast<uint16_t>(static_cast<_Float16>(values[i]));
        std::memcpy(p + 2 * i, &h, 2);
        break;
      }
      default: throw std::invalid_argument(std::string("TorchOut::tensor: float32, float16 or bfloat16, not ") +
                                           torch_dtype_name(dtype));
    }
  }
  TorchOut o;
  o.kind = Kind::kTensor;
  o.dtype = dtype;
  o.shape = std::move(shape);
  o.bytes = std::move(bytes);
  return o;
}

// ---- the file ---------------------------------------------------------------------------------

void torch_save(const std::string& path, const TorchOut& root) {
  std::vector<const TorchOut*> tensors;
  Pickler p(tensors);
  p.out = "\x80\x02";  // PROTO 2
  p.value(root);
  p.out.push_back('.');  // STOP
  const std::string tmp = path + ".tmp";
  try {
    ZipWriter z(tmp);
    z.add("archive/data.pkl", p.out);
    z.add("archive/byteorder", "little");
    for (size_t k = 0; k < tensors.size(); ++k)
      z.add("archive/data/" + std::to_string(k), tensors[k]->bytes->data(), tensors[k]->bytes->size());
    z.add("archive/version", "3\n");
    z.finish();
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error(tmp + ": cannot rename to " + path + ": " + ec.message());
}

}  // namespace gf
