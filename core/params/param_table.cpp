#include "core/params/param_table.h"

#include <stdexcept>

#include "core/math/rng.h"

namespace gf {

int64_t ParamSpec::global_numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

InitialValues::InitialValues(const ParamSpec& p, uint64_t seed)
    : init_(p.init), std_(p.std), seed_(seed), stream_(hash_name(p.name)) {}

float InitialValues::operator()(int64_t global_index) const {
  switch (init_) {
    case Init::kZeros: return 0.0f;
    case Init::kOnes: return 1.0f;
    case Init::kNormal: break;
    case Init::kUniform:
      return static_cast<float>(std_ * (2.0 * counter_uniform(seed_, stream_, static_cast<uint64_t>(global_index)) - 1.0));
  }
  return static_cast<float>(std_ * counter_normal(seed_, stream_, static_cast<uint64_t>(global_index)));
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
