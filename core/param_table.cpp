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
  return p.split.axis == Axis::kNone || (p.split.axis == Axis::kVocab && !vocab_split_);
}

void ParamTable::add(ParamSpec spec) {
  if (finalized_) throw std::logic_error("ParamTable::add after finalize");
  if (index_.count(spec.name)) throw std::logic_error("duplicate parameter " + spec.name);
  const SplitSpec& s = spec.split;
  if (s.axis != Axis::kNone) {
    if (s.dim < 0 || s.dim >= static_cast<int>(spec.shape.size()))
      throw std::logic_error(spec.name + ": split dim " + std::to_string(s.dim) + " is not a dim of the parameter");
    if (s.parts < 1 || spec.shape[static_cast<size_t>(s.dim)] % s.parts != 0)
      throw std::logic_error(spec.name + ": split dim " + std::to_string(s.dim) + " does not cut into " +
                             std::to_string(s.parts) + " equal parts");
  }
  index_[spec.name] = specs_.size();
  specs_.push_back(std::move(spec));
}

void ParamTable::finalize() {
  int64_t off = 0;
  for (auto& p : specs_) {
    p.local_shape = p.shape;
    const size_t d = static_cast<size_t>(p.split.dim);
    auto divide = [&](int64_t& n, const std::string& what) {
      if (n % tp_size_ != 0)
        throw std::invalid_argument(p.name + ": " + what + " " + std::to_string(n) +
                                    " is not divisible by model_parallel " + std::to_string(tp_size_));
      n /= tp_size_;
    };
    switch (p.split.axis) {
      case Axis::kNone: break;
      case Axis::kTensor: {
        int64_t part = p.shape[d] / p.split.parts;
        divide(part, p.split.parts == 1 ? "dim " + std::to_string(d)
                                        : "each of the " + std::to_string(p.split.parts) + " parts of dim " +
                                              std::to_string(d));
        p.local_shape[d] = p.split.parts * part;
        break;
      }
      case Axis::kVocab:
        p.local_shape[d] = vocab_padded_ > 0 ? vocab_padded_ : p.shape[d];
        if (vocab_split_) divide(p.local_shape[d], "padded vocabulary");
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
  if (p.split.axis == Axis::kNone) return i;
  // Only the split dim differs between the local and the global index.
  const size_t d = static_cast<size_t>(p.split.dim);
  int64_t inner = 1;
  for (size_t k = d + 1; k < p.shape.size(); ++k) inner *= p.shape[k];
  const int64_t lext = p.local_shape[d], gext = p.shape[d];
  const int64_t x = i / inner % lext, outer = i / inner / lext, in = i % inner;
  int64_t gx = 0;
  if (p.split.axis == Axis::kTensor) {
    const int64_t lpart = lext / p.split.parts, gpart = gext / p.split.parts;
    gx = x / lpart * gpart + tp_rank_ * lpart + x % lpart;
  } else {
    gx = (vocab_split_ ? tp_rank_ * lext : 0) + x;
    if (gx >= gext) return -1;
  }
  return (outer * gext + gx) * inner + in;
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
