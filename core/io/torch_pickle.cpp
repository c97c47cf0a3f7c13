#include "core/io/torch_pickle.h"

#include <bit>
#include <cstring>
#include <stdexcept>

#include "core/io/safetensors.h"  // half_to_float, bf16_to_float

static_assert(std::endian::native == std::endian::little, "the pickle reader assumes a little-endian host");

namespace gf {

namespace {

using Kind = PickleValue::Kind;

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

template <class T>
T load(const uint8_t* p) { T v; std::memcpy(&v, p, sizeof(T)); return v; }

enum class Callable : int64_t {
  kOrderedDict, kRebuildTensor, kRebuildTensorV2, kRebuildTensorV3, kRebuildParameter, kStorageType, kSize,
  kDevice, kNamespace, kReconstructor, kObject, kNpScalar, kNpDtype, kNpReconstruct, kNpNdarray, kCodecsEncode,
  kEnumClass, kGetattr
};

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
};

struct OpcodeName { uint8_t op; const char* name; };
constexpr OpcodeName kOpcodes[] = {
    {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'F', "FLOAT"}, {'I', "INT"},
    {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"}, {'M', "BININT2"}, {'N', "NONE"}, {'P', "PERSID"},
    {'Q', "BINPERSID"}, {'R', "REDUCE"}, {'S', "STRING"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"}, {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"}, {'c', "GLOBAL"}, {'d', "DICT"},
    {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"}, {'i', "INST"}, {'j', "LONG_BINGET"},
    {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"}, {'q', "BINPUT"}, {'r', "LONG_BINPUT"},
    {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"}, {'u', "SETITEMS"}, {'G', "BINFLOAT"},
    {0x80, "PROTO"}, {0x81, "NEWOBJ"}, {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"}, {0x85, "TUPLE1"},
    {0x86, "TUPLE2"}, {0x87, "TUPLE3"}, {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"}, {0x8a, "LONG1"}, {0x8b, "LONG4"},
    {'B', "BINBYTES"}, {'C', "SHORT_BINBYTES"}, {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"}, {0x95, "FRAME"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"},
    {0x98, "READONLY_BUFFER"}};

std::string hex(unsigned v) {
  static const char* const kDigits = "0123456789abcdef";
  return std::string("0x") + kDigits[(v >> 4) & 15] + kDigits[v & 15];
}

// Non-printable bytes as \xNN, so a hostile name cannot garble the message.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c)) : "\\x" + hex(c).substr(2);
  return out;
}

}  // namespace

// ---- the stack machine ----

class PickleReader {
 public:
  PickleReader(const uint8_t* data, size_t size, const PickleOptions& opt) : p_(data), n_(size), opt_(opt) {}
  PickleValue run(size_t* consumed);

 private:
  using Items = std::vector<PickleValue>;
  const uint8_t* p_;
  size_t n_;
  const PickleOptions& opt_;
  size_t pos_ = 0, op_pos_ = 0;
  Items stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PickleValue> memo_;
  std::vector<std::shared_ptr<detail::PickleNode>> nodes_;  // every node made, to tear cycles down

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(opt_.where + ": pickle byte " + std::to_string(op_pos_) + ": " + what);
  }
  const uint8_t* take(uint64_t k, const char* what) {
    if (k > n_ - pos_)
      fail(std::string(what) + " needs " + std::to_string(k) + " bytes, only " + std::to_string(n_ - pos_) + " left");
    pos_ += static_cast<size_t>(k);
    return p_ + pos_ - k;
  }
  template <class T> T le(const char* what) { return load<T>(take(sizeof(T), what)); }
  static PickleValue scalar(Kind k, int64_t i = 0, double f = 0) {
    PickleValue v;
    v.kind_ = k; v.int_ = i; v.float_ = f;
    return v;
  }
  PickleValue make(Kind k, int64_t i = 0) {
    if (nodes_.size() >= opt_.max_objects) fail("more than " + std::to_string(opt_.max_objects) + " objects");
    PickleValue v = scalar(k, i);
    v.node_ = nodes_.emplace_back(std::make_shared<detail::PickleNode>());
    return v;
  }
  PickleValue text(Kind k, uint64_t len, const char* what) {
    const uint8_t* b = take(len, what);
    PickleValue v = make(k);
    v.node_->text.assign(reinterpret_cast<const char*>(b), static_cast<size_t>(len));
    return v;
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(PickleValue v) {
    if (stack_.size() >= opt_.max_stack) fail("stack deeper than " + std::to_string(opt_.max_stack));
    stack_.push_back(std::move(v));
  }
  PickleValue& top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  PickleValue pop() {
    PickleValue v = std::move(top());
    stack_.pop_back();
    return v;
  }
  Items pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const size_t m = marks_.back();
    marks_.pop_back();
    Items items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)), std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  std::string line(const char* what) {
    const size_t limit = std::min<size_t>(n_ - pos_, 512);
    const void* nl = std::memchr(p_ + pos_, '\n', limit);
    if (!nl) fail(std::string(what) + " is not a line of at most 511 bytes");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<const uint8_t*>(nl) - (p_ + pos_));
    pos_ += s.size() + 1;
    return s;
  }
  PickleValue long_value(const uint8_t* b, size_t k);
  void step(uint8_t op);
  PickleValue global(const std::string& module, const std::string& name);
  PickleValue reduce(const PickleValue& fn, const PickleValue& args);
  PickleValue newobj(const PickleValue& cls, const PickleValue& args);
  void build(PickleValue& inst, const PickleValue& state);
  PickleValue persistent(const PickleValue& pid);
  PickleValue rebuild_tensor(Callable id, const Items& a, const std::string& name);
  PickleValue numpy_scalar(const Items& a);
  void ndarray_state(PickleValue& inst, const PickleValue& state);
  void dict_set(detail::PickleNode& d, PickleValue key, PickleValue value);
  void memo_put(uint64_t idx) { memo_[idx] = top(); }
  std::vector<int64_t> ints(const PickleValue& v, const char* what);
  void arity(const Items& a, size_t lo, size_t hi, const std::string& name) {
    if (a.size() < lo || a.size() > hi)
      fail("'" + name + "' called with " + std::to_string(a.size()) + " arguments, expected " + std::to_string(lo) +
           (hi > lo ? " to " + std::to_string(hi) : ""));
  }
  void expect(const PickleValue& v, Kind k, const std::string& what) {
    if (v.kind_ != k) fail(what + " is a " + v.kind_name() + ", expected a " + scalar(k).kind_name());
  }
  int depth_of(const detail::PickleNode* n, std::unordered_map<const detail::PickleNode*, int>& seen, size_t level);
  void check_depth();
  void tear_down();
};

PickleValue PickleReader::run(size_t* consumed) {
  try {
    for (;;) {
      if (pos_ >= n_) fail("input ends before the STOP opcode");
      op_pos_ = pos_;
      const uint8_t op = p_[pos_++];
      if (op != '.') { step(op); continue; }
      PickleValue result = pop();
      check_depth();
      stack_.clear();
      memo_.clear();
      nodes_.clear();  // nodes no longer reachable go now; check_depth bounded their nesting
      if (consumed) *consumed = pos_;
      return result;
    }
  } catch (...) {
    tear_down();
    throw;
  }
}

// Empties every container first (their children stay alive through nodes_, so nothing recurses),
// then frees the nodes: a cycle or a very deep chain from a hostile input is released safely.
void PickleReader::tear_down() {
  for (auto& n : nodes_) { n->items.clear(); n->entries.clear(); }
  stack_.clear();
  memo_.clear();
  nodes_.clear();
}

int PickleReader::depth_of(const detail::PickleNode* n, std::unordered_map<const detail::PickleNode*, int>& seen,
                           size_t level) {
  if (level > opt_.max_depth) fail("containers nested deeper than " + std::to_string(opt_.max_depth));
  auto [it, fresh] = seen.try_emplace(n, -1);
  if (!fresh) {
    if (it->second < 0) fail("a container holds itself (a cycle)");
    return it->second;
  }
  int d = 0;
  auto visit = [&](const PickleValue& v) {
    if (v.node_ && (!v.node_->items.empty() || !v.node_->entries.empty()))
      d = std::max(d, 1 + depth_of(v.node_.get(), seen, level + 1));
  };
  for (const auto& v : n->items) visit(v);
  for (const auto& [k, v] : n->entries) visit(v);
  if (static_cast<size_t>(d) > opt_.max_depth) fail("containers nested deeper than " + std::to_string(opt_.max_depth));
  seen[n] = d;
  return d;
}

void PickleReader::check_depth() {
  std::unordered_map<const detail::PickleNode*, int> seen;
  for (const auto& n : nodes_)
    if (!n->items.empty() || !n->entries.empty()) depth_of(n.get(), seen, 0);
}

PickleValue PickleReader::long_value(const uint8_t* b, size_t k) {
  const uint8_t sign = (k > 0 && (b[k - 1] & 0x80)) ? 0xff : 0x00;
  bool fits = true;
  for (size_t i = 8; i < k; ++i) fits = fits && b[i] == sign && (b[7] & 0x80) == (sign & 0x80);
  if (!fits) {
    PickleValue v = make(Kind::kBigInt);
    v.node_->text.assign(reinterpret_cast<const char*>(b), k);
    return v;
  }
  uint64_t u = 0;
  for (size_t i = 0; i < 8; ++i) u |= static_cast<uint64_t>(i < k ? b[i] : sign) << (8 * i);
  return scalar(Kind::kInt, static_cast<int64_t>(u));
}

void PickleReader::step(uint8_t op) {
  switch (op) {
    case 0x80: if (*take(1, "PROTO") > 5) fail("pickle protocol above 5"); break;
    case 0x95: { const uint64_t len = le<uint64_t>("FRAME"); if (len > n_ - pos_) fail("FRAME runs past the end"); break; }
    case '(':
      if (marks_.size() >= opt_.max_stack) fail("too many MARKs");
      marks_.push_back(stack_.size());
      break;
    case '0': pop(); break;
    case '1': pop_mark(); break;
    case 'N': push(scalar(Kind::kNone)); break;
    case 0x88: push(scalar(Kind::kBool, 1)); break;
    case 0x89: push(scalar(Kind::kBool, 0)); break;
    case 'J': push(scalar(Kind::kInt, le<int32_t>("BININT"))); break;
    case 'K': push(scalar(Kind::kInt, le<uint8_t>("BININT1"))); break;
    case 'M': push(scalar(Kind::kInt, le<uint16_t>("BININT2"))); break;
    case 0x8a: { const uint8_t k = le<uint8_t>("LONG1"); push(long_value(take(k, "LONG1"), k)); break; }
    case 0x8b: {
      const int32_t k = le<int32_t>("LONG4");
      if (k < 0) fail("LONG4 with a negative length");
      push(long_value(take(static_cast<uint64_t>(k), "LONG4"), static_cast<size_t>(k)));
      break;
    }
    case 'G': {
      const uint8_t* b = take(8, "BINFLOAT");
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = bits << 8 | b[i];  // big-endian
      push(scalar(Kind::kFloat, 0, std::bit_cast<double>(bits)));
      break;
    }
    case 'X': push(text(Kind::kString, le<uint32_t>("BINUNICODE"), "BINUNICODE")); break;
    case 0x8c: push(text(Kind::kString, le<uint8_t>("SHORT_BINUNICODE"), "SHORT_BINUNICODE")); break;
    case 0x8d: push(text(Kind::kString, le<uint64_t>("BINUNICODE8"), "BINUNICODE8")); break;
    case 'U': push(text(Kind::kString, le<uint8_t>("SHORT_BINSTRING"), "SHORT_BINSTRING")); break;
    case 'T': {
      const int32_t k = le<int32_t>("BINSTRING");
      if (k < 0) fail("BINSTRING with a negative length");
      push(text(Kind::kString, static_cast<uint64_t>(k), "BINSTRING"));
      break;
    }
    case 'B': push(text(Kind::kBytes, le<uint32_t>("BINBYTES"), "BINBYTES")); break;
    case 'C': push(text(Kind::kBytes, le<uint8_t>("SHORT_BINBYTES"), "SHORT_BINBYTES")); break;
    case 0x8e: push(text(Kind::kBytes, le<uint64_t>("BINBYTES8"), "BINBYTES8")); break;
    case 0x96: push(text(Kind::kBytes, le<uint64_t>("BYTEARRAY8"), "BYTEARRAY8")); break;
    case ']': push(make(Kind::kList)); break;
    case ')': push(make(Kind::kTuple)); break;
    case '}': push(make(Kind::kDict)); break;
    case 'l': case 't': {
      Items items = pop_mark();
      PickleValue v = make(op == 'l' ? Kind::kList : Kind::kTuple);
      v.node_->items = std::move(items);
      push(std::move(v));
      break;
    }
    case 0x85: case 0x86: case 0x87: {
      const size_t k = op - 0x84u;
      if (stack_.size() < floor() + k) fail("stack underflow");
      PickleValue v = make(Kind::kTuple);
      v.node_->items.assign(std::make_move_iterator(stack_.end() - static_cast<std::ptrdiff_t>(k)), std::make_move_iterator(stack_.end()));
      stack_.resize(stack_.size() - k);
      push(std::move(v));
      break;
    }
    case 'd': case 'u': {
      Items items = pop_mark();
      if (items.size() % 2) fail("odd number of values for dict items");
      if (op == 'd') push(make(Kind::kDict));
      PickleValue& d = top();
      expect(d, Kind::kDict, "SETITEMS target");
      for (size_t i = 0; i < items.size(); i += 2) dict_set(*d.node_, std::move(items[i]), std::move(items[i + 1]));
      break;
    }
    case 's': {
      PickleValue v = pop(), k = pop();
      PickleValue& d = top();
      expect(d, Kind::kDict, "SETITEM target");
      dict_set(*d.node_, std::move(k), std::move(v));
      break;
    }
    case 'a': case 'e': {
      Items items;
      if (op == 'a') items.push_back(pop()); else items = pop_mark();
      PickleValue& l = top();
      expect(l, Kind::kList, "APPEND target");
      for (auto& v : items) l.node_->items.push_back(std::move(v));
      break;
    }
    case 'q': memo_put(le<uint8_t>("BINPUT")); break;
    case 'r': memo_put(le<uint32_t>("LONG_BINPUT")); break;
    case 0x94: memo_put(memo_.size()); break;
    case 'h': case 'j': {
      const uint64_t idx = op == 'h' ? le<uint8_t>("BINGET") : le<uint32_t>("LONG_BINGET");
      auto it = memo_.find(idx);
      if (it == memo_.end()) fail("memo index " + std::to_string(idx) + " was never stored");
      push(it->second);
      break;
    }
    case 'c': {
      const std::string module = line("GLOBAL module");
      const std::string name = line("GLOBAL name");
      push(global(module, name));
      break;
    }
    case 0x93: {
      PickleValue name = pop(), module = pop();
      expect(name, Kind::kString, "STACK_GLOBAL name");
      expect(module, Kind::kString, "STACK_GLOBAL module");
      push(global(module.node_->text, name.node_->text));
      break;
    }
    case 'R': { PickleValue args = pop(), fn = pop(); push(reduce(fn, args)); break; }
    case 0x81: { PickleValue args = pop(), cls = pop(); push(newobj(cls, args)); break; }
    case 'b': { PickleValue state = pop(); build(top(), state); break; }
    case 'Q': { PickleValue pid = pop(); push(persistent(pid)); break; }
    default:
      for (const auto& o : kOpcodes)
        if (o.op == op) fail(std::string("unsupported pickle opcode ") + o.name + " (" + hex(op) + ")");
      fail("unknown pickle opcode " + hex(op));
  }
}

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
  if (cls.kind_ != Kind::kGlobal || cls.int_ != static_cast<int64_t>(Callable::kNamespace))
    fail(std::string("NEWOBJ of a ") + (cls.kind_ == Kind::kGlobal ? "'" + cls.node_->text + "'" : cls.kind_name()) +
         " (only argparse.Namespace)");
  expect(args, Kind::kTuple, "NEWOBJ arguments");
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

void PickleReader::dict_set(detail::PickleNode& d, PickleValue key, PickleValue value) {
  size_t* slot = nullptr;
  if (key.kind_ == Kind::kString) {
    auto [it, fresh] = d.str_index.try_emplace(key.node_->text, d.entries.size());
    if (!fresh) slot = &it->second;
  } else if (key.kind_ == Kind::kInt || key.kind_ == Kind::kBool) {
    auto [it, fresh] = d.int_index.try_emplace(key.int_, d.entries.size());
    if (!fresh) slot = &it->second;
  } else {
    fail(std::string("dict key of type ") + key.kind_name() + " (only str and int keys are read)");
  }
  if (slot) d.entries[*slot].second = std::move(value);
  else d.entries.emplace_back(std::move(key), std::move(value));
}

PickleValue read_pickle(const uint8_t* data, size_t size, const PickleOptions& options, size_t* consumed) {
  return PickleReader(data, size, options).run(consumed);
}

}  // namespace gf
