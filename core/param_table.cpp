#include "core/param_table.h"

#include <stdexcept>

#include "core/rng.h"

namespace gf {
namespace {

int64_t product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace

int64_t ParamSpec::numel() const { return product(local_shape); }
int64_t ParamSpec::global_numel() const { return product(shape); }

ParamTable::ParamTable(int tp_rank, int tp_size, int64_t vocab_padded, bool vocab_split)
    : tp_rank_(tp_rank), tp_size_(tp_size), vocab_padded_(vocab_padded), vocab_split_(vocab_split || tp_size == 1) {}

bool ParamTable::replicated(const ParamSpec& p) const {
  return p.split == Split::kNone || (p.split == Split::kVocab && !vocab_split_);
}

void ParamTable::add(ParamSpec spec) {
  if (finalized_) throw std::logic_error("ParamTable::add after finalize");
  if (index_.count(spec.name)) throw std::logic_error("duplicate parameter " + spec.name);
  index_[spec.name] = specs_.size();
  specs_.push_back(std::move(spec));
}

void ParamTable::finalize() {
  int64_t off = 0;
  for (auto& p : specs_) {
    p.local_shape = p.shape;
    auto divide = [&](int64_t& d, const char* what) {
      if (d % tp_size_ != 0)
        throw std::invalid_argument(p.name + ": " + what + " " + std::to_string(d) +
                                    " is not divisible by model_parallel " + std::to_string(tp_size_));
      d /= tp_size_;
    };
    switch (p.split) {
      case Split::kNone: break;
      case Split::kRows: divide(p.local_shape.front(), "dim 0"); break;
      case Split::kCols: divide(p.local_shape.back(), "last dim"); break;
      case Split::kColsQKV: {
        int64_t third = p.local_shape.back() / 3;
        divide(third, "per-projection width");
        p.local_shape.back() = 3 * third;
        break;
      }
      case Split::kVocab:
        p.local_shape.front() = (vocab_padded_ > 0 ? vocab_padded_ : p.shape.front());
        if (vocab_split_) divide(p.local_shape.front(), "padded vocabulary");
        break;
    }
    p.offset = off;
    off += p.packed_with_next ? p.numel() : (p.numel() + 15) / 16 * 16;
  }
  total_ = off;
  finalized_ = true;
}

const ParamSpec* ParamTable::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &specs_[it->second];
}

const ParamSpec& ParamTable::at(const std::string& name) const {
  const ParamSpec* p = find(name);
  if (!p) throw std::out_of_range("no parameter named " + name);
  return *p;
}

int64_t ParamTable::global_index(const ParamSpec& p, int64_t i) const {
  const int64_t lcols = p.local_shape.back();
  const int64_t gcols = p.shape.back();
  const int64_t r = i / lcols, c = i % lcols;
  switch (p.split) {
    case Split::kNone: return i;
    case Split::kRows: return (tp_rank_ * p.local_shape.front() + r) * gcols + c;
    case Split::kCols: return r * gcols + tp_rank_ * lcols + c;
    case Split::kColsQKV: {
      const int64_t lthird = lcols / 3, gthird = gcols / 3;
      const int64_t part = c / lthird, within = c % lthird;
      return r * gcols + part * gthird + tp_rank_ * lthird + within;
    }
    case Split::kVocab: {
      const int64_t grow = (vocab_split_ ? tp_rank_ * p.local_shape.front() : 0) + r;
      return grow < p.shape.front() ? grow * gcols + c : -1;
    }
  }
  return i;
}

void ParamTable::initialize(float* arena, uint64_t seed) const {
  for (const auto& p : specs_) {
    float* w = arena + p.offset;
    const uint64_t stream = hash_name(p.name);
    const int64_t n = p.numel();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = global_index(p, i);
      if (g < 0) { w[i] = 0.0f; continue; }
      switch (p.init) {
        case Init::kZeros: w[i] = 0.0f; break;
        case Init::kOnes: w[i] = 1.0f; break;
        case Init::kNormal:
          w[i] = static_cast<float>(p.std * counter_normal(seed, stream, static_cast<uint64_t>(g)));
          break;
      }
    }
  }
}

}  // namespace gf
