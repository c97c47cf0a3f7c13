#include "core/placement.h"

#include <algorithm>
#include <stdexcept>

namespace gf {

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t e : extent) n *= e;
  return n;
}

namespace {

// The pieces of p's local slice on tensor-parallel rank `rank`.
std::vector<SlicePiece> pieces_of(const ParamSpec& p, int rank, bool vocab_split) {
  const auto& g = p.shape;
  const auto& l = p.local_shape;
  const size_t nd = g.size();
  if (nd < 1 || nd > 2) throw std::invalid_argument(p.name + ": placement handles 1-D and 2-D parameters");
  const std::vector<int64_t> zero(nd, 0);
  const size_t d = static_cast<size_t>(p.split.dim);
  switch (p.split.axis) {
    case Axis::kNone: return {{{zero, g}, zero}};
    case Axis::kTensor: {  // one piece per part: this rank's share of it
      const int64_t lpart = l[d] / p.split.parts, gpart = g[d] / p.split.parts;
      std::vector<SlicePiece> out;
      for (int64_t part = 0; part < p.split.parts; ++part) {
        SlicePiece s{{zero, g}, zero};
        s.global.offset[d] = part * gpart + rank * lpart;
        s.global.extent[d] = lpart;
        s.local_offset[d] = part * lpart;
        out.push_back(s);
      }
      return out;
    }
    case Axis::kVocab: {
      const int64_t row0 = vocab_split ? rank * l[d] : 0;
      const int64_t rows = std::clamp<int64_t>(g[d] - row0, 0, l[d]);  // padding rows are in no box
      if (rows == 0) return {};
      SlicePiece s{{zero, g}, zero};
      s.global.offset[d] = row0;
      s.global.extent[d] = rows;
      return {s};
    }
  }
  return {};
}

// Calls f(local_index, global_index) for every element of every piece.
template <typename F>
void for_each_element(const TensorPlacement& t, F&& f) {
  const auto& g = t.spec->shape;
  const auto& l = t.spec->local_shape;
  const bool two_d = g.size() == 2;
  const int64_t gcols = two_d ? g[1] : 1, lcols = two_d ? l[1] : 1;
  for (const auto& s : t.pieces) {
    const int64_t rows = s.global.extent[0], cols = two_d ? s.global.extent[1] : 1;
    const int64_t gr0 = s.global.offset[0], gc0 = two_d ? s.global.offset[1] : 0;
    const int64_t lr0 = s.local_offset[0], lc0 = two_d ? s.local_offset[1] : 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) f((lr0 + r) * lcols + lc0 + c, (gr0 + r) * gcols + gc0 + c);
  }
}

}  // namespace

Placement::Placement(const ParamTable& table) {
  for (const auto& p : table.specs()) {
    TensorPlacement t;
    t.spec = &p;
    t.pieces = pieces_of(p, table.tp_rank(), table.vocab_split());
    t.replicated = table.replicated(p);
    tensors_.push_back(std::move(t));
  }
}

const TensorPlacement& Placement::at(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.spec->name == name) return t;
  throw std::out_of_range("no parameter named " + name);
}

void Placement::scatter(const TensorPlacement& t, const float* full, float* local) {
  std::fill(local, local + t.spec->numel(), 0.0f);
  for_each_element(t, [&](int64_t li, int64_t gi) { local[li] = full[gi]; });
}

void Placement::gather(const TensorPlacement& t, const float* local, float* full) {
  for_each_element(t, [&](int64_t li, int64_t gi) { full[gi] = local[li]; });
}

}  // namespace gf
