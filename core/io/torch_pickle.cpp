// The pickle reader's stack machine (torch_pickle.h): its loop over the opcodes, the depth check and
// the tear-down of what it made, dict items, and read_pickle. The allow-list of globals and what the
// allowed callables build (tensors, storages, numpy arrays and scalars, ...) are in
// torch_pickle_globals.cpp; the class PickleReader and what both files share in torch_pickle_detail.h.
#include "core/io/torch_pickle.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>

#include "core/io/torch_pickle_detail.h"

namespace gf {

using namespace pickle_detail;

namespace {

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

}  // namespace

namespace pickle_detail {

std::string hex(unsigned v) {
  static const char* const kDigits = "0123456789abcdef";
  return std::string("0x") + kDigits[(v >> 4) & 15] + kDigits[v & 15];
}

}  // namespace pickle_detail

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

// A dict key other than str and int that is read: a torch dtype, or a tuple of keys.
bool PickleReader::key_like(const PickleValue& k) {
  if (k.kind_ == Kind::kDtype || k.kind_ == Kind::kString || k.kind_ == Kind::kInt || k.kind_ == Kind::kBool) return true;
  if (k.kind_ != Kind::kTuple) return false;
  for (const PickleValue& i : k.node_->items)
    if (!key_like(i)) return false;
  return true;
}

bool PickleReader::same_key(const PickleValue& a, const PickleValue& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Kind::kDtype: case Kind::kInt: case Kind::kBool: return a.int_ == b.int_;
    case Kind::kString: return a.node_->text == b.node_->text;
    case Kind::kTuple: {
      if (a.node_->items.size() != b.node_->items.size()) return false;
      for (size_t i = 0; i < a.node_->items.size(); ++i)
        if (!same_key(a.node_->items[i], b.node_->items[i])) return false;
      return true;
    }
    default: return false;
  }
}

void PickleReader::dict_set(detail::PickleNode& d, PickleValue key, PickleValue value) {
  size_t* slot = nullptr;
  if (key.kind_ == Kind::kString) {
    auto [it, fresh] = d.str_index.try_emplace(key.node_->text, d.entries.size());
    if (!fresh) slot = &it->second;
  } else if (key.kind_ == Kind::kInt || key.kind_ == Kind::kBool) {
    auto [it, fresh] = d.int_index.try_emplace(key.int_, d.entries.size());
    if (!fresh) slot = &it->second;
  } else if (key_like(key)) {
    // A torch dtype, or a tuple of keys (Megatron's distributed optimizer keys its buffers by dtype or by
    // (param dtype, grad dtype)): few in a dict, found by a scan; not reachable through find().
    for (auto& e : d.entries)
      if (same_key(e.first, key)) {
        e.second = std::move(value);
        return;
      }
  } else {
    fail(std::string("dict key of type ") + key.kind_name() + " (only str, int, torch dtype and tuple keys are read)");
  }
  if (slot) d.entries[*slot].second = std::move(value);
  else d.entries.emplace_back(std::move(key), std::move(value));
}

PickleValue read_pickle(const uint8_t* data, size_t size, const PickleOptions& options, size_t* consumed) {
  return PickleReader(data, size, options).run(consumed);
}

}  // namespace gf
