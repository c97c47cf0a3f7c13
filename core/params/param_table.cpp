#include "core/params/param_table.h"

#include <algorithm>
#include <stdexcept>

#include "core/math/rng.h"

namespace gf {

int64_t ParamSpec::global_numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

InitialValues::InitialValues(const ParamSpec& p, uint64_t seed)
    : init_(p.init), std_(p.std), key_(counter_key(seed, hash_name(p.name))) {}

float InitialValues::operator()(int64_t global_index) const {
  float v = 0.0f;
  fill(&v, global_index, 1);
  return v;
}

void InitialValues::fill(float* out, int64_t global_index, int64_t n) const {
  const uint64_t g = static_cast<uint64_t>(global_index);
  switch (init_) {
    case Init::kZeros: std::fill(out, out + n, 0.0f); return;
    case Init::kOnes: std::fill(out, out + n, 1.0f); return;
    case Init::kUniform:
      for (int64_t k = 0; k < n; ++k)
        out[k] = static_cast<float>(std_ * (2.0 * keyed_uniform(key_, g + static_cast<uint64_t>(k)) - 1.0));
      return;
    case Init::kNormal:
      for (int64_t k = 0; k < n; ++k) out[k] = static_cast<float>(std_ * keyed_normal(key_, g + static_cast<uint64_t>(k)));
      return;
  }
}

void ParamTable::add(ParamSpec spec) {
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

int64_t ParamTable::index_of(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : static_cast<int64_t>(it->second);
}

const ParamSpec* ParamTable::find(const std::string& name) const {
  const int64_t k = index_of(name);
  return k < 0 ? nullptr : &specs_[static_cast<size_t>(k)];
}

const ParamSpec& ParamTable::at(const std::string& name) const {
  const ParamSpec* p = find(name);
  if (!p) throw std::out_of_range("no parameter named " + name);
  return *p;
}

}  // namespace gf
