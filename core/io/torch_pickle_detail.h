// The pickle reader's stack machine (class PickleReader, the friend of PickleValue that
// torch_pickle.h names) and the helpers its two halves share; internal to them:
// core/io/torch_pickle.cpp runs the machine (its loop, the opcodes, the depth check and tear-down,
// dict items, read_pickle); core/io/torch_pickle_globals.cpp holds the allow-list of globals and what
// the allowed callables build (tensors, storages, numpy arrays and scalars, Namespace, ...).
#pragma once
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/io/torch_pickle.h"

static_assert(std::endian::native == std::endian::little, "the pickle reader assumes a little-endian host");

namespace gf {

namespace pickle_detail {

// A T from its bytes at p (host order: little-endian, checked above).
template <class T>
T load(const uint8_t* p) { T v; std::memcpy(&v, p, sizeof(T)); return v; }

// What an allowed global is (a kGlobal value keeps it in int_); torch_pickle_globals.cpp lists the names.
enum class Callable : int64_t {
  kOrderedDict, kRebuildTensor, kRebuildTensorV2, kRebuildTensorV3, kRebuildParameter, kStorageType, kSize,
  kDevice, kNamespace, kReconstructor, kObject, kNpScalar, kNpDtype, kNpReconstruct, kNpNdarray, kCodecsEncode,
  kEnumClass, kGetattr, kBytesIO
};

// "0x" and the two hex digits of v's low byte (defined in torch_pickle.cpp).
std::string hex(unsigned v);

}  // namespace pickle_detail

// ---- the stack machine ----

class PickleReader {
 public:
  PickleReader(const uint8_t* data, size_t size, const PickleOptions& opt) : p_(data), n_(size), opt_(opt) {}
  PickleValue run(size_t* consumed);

 private:
  using Items = std::vector<PickleValue>;
  using Kind = PickleValue::Kind;
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
  template <class T> T le(const char* what) { return pickle_detail::load<T>(take(sizeof(T), what)); }
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
  PickleValue rebuild_tensor(pickle_detail::Callable id, const Items& a, const std::string& name);
  PickleValue numpy_scalar(const Items& a);
  void ndarray_state(PickleValue& inst, const PickleValue& state);
  void dict_set(detail::PickleNode& d, PickleValue key, PickleValue value);
  static bool key_like(const PickleValue& k);
  static bool same_key(const PickleValue& a, const PickleValue& b);
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

}  // namespace gf
