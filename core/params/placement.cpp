#include "core/params/placement.h"

#include "core/math/parallel_worth.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace gf {

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t e : extent) n *= e;
  return n;
}

int64_t TensorPlacement::numel() const {
  int64_t n = 1;
  for (int64_t d : local_shape) n *= d;
  return n;
}

namespace {

// The elements one thread initializes at a time (a 4,096-element block: 16 KiB, about 0.1 ms of normals).
constexpr int64_t kInitBlock = 4096;

// p's local shape under the layout: the split dim divided over the tensor group (each part when
// it is cut into parts), a vocabulary dim padded first.
std::vector<int64_t> local_shape_of(const ParamSpec& p, const ParamLayout& layout) {
  std::vector<int64_t> l = p.shape;
  const size_t d = static_cast<size_t>(p.split.dim);
  const int tp = layout.tp_size;
  auto divide = [&](int64_t& n, const std::string& what) {
    if (n % tp != 0)
      throw std::invalid_argument(p.name + ": " + what + " " + std::to_string(n) +
                                  " is not divisible by model_parallel " + std::to_string(tp));
    n /= tp;
  };
  switch (p.split.axis) {
    case Axis::kNone: break;
    case Axis::kTensor: {
      int64_t part = p.shape[d] / p.split.parts;
      divide(part, p.split.parts == 1 ? "dim " + std::to_string(d)
                                      : "each of the " + std::to_string(p.split.parts) + " parts of dim " +
                                            std::to_string(d));
      l[d] = p.split.parts * part;
      break;
    }
    case Axis::kVocab:
      l[d] = layout.vocab_padded > 0 ? layout.vocab_padded : p.shape[d];
      if (layout.vocab_split) divide(l[d], "padded vocabulary");
      break;
  }
  return l;
}

// The pieces of p's local slice (shape l) on tensor-parallel rank `rank`.
std::vector<SlicePiece> pieces_of(const ParamSpec& p, const std::vector<int64_t>& l, const ParamLayout& layout,
                                  int rank) {
  const auto& g = p.shape;
  const std::vector<int64_t> zero(g.size(), 0);
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
      const int64_t row0 = layout.vocab_split ? rank * l[d] : 0;
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

// The runs of a piece: its elements as runs(piece) stretches of `len` consecutive elements (along
// the last dim), each contiguous in the local and in the global tensor.
class Runs {
 public:
  Runs(const TensorPlacement& t, const SlicePiece& s) : s_(s), nd_(s.global.extent.size()) {
    const auto& g = t.spec->shape;
    gstride_.assign(nd_, 1);
    lstride_.assign(nd_, 1);
    for (size_t k = nd_ - 1; k-- > 0;) {
      gstride_[k] = gstride_[k + 1] * g[k + 1];
      lstride_[k] = lstride_[k + 1] * t.local_shape[k + 1];
    }
    count_ = s.global.numel() == 0 ? 0 : s.global.numel() / s.global.extent[nd_ - 1];
  }
  int64_t count() const { return count_; }
  int64_t len() const { return s_.global.extent[nd_ - 1]; }
  // The local and the global index of run r's first element.
  void at(int64_t r, int64_t& local, int64_t& global) const {
    local = s_.local_offset[nd_ - 1];
    global = s_.global.offset[nd_ - 1];
    for (size_t k = nd_ - 1; k-- > 0;) {
      const int64_t i = r % s_.global.extent[k];
      r /= s_.global.extent[k];
      local += (s_.local_offset[k] + i) * lstride_[k];
      global += (s_.global.offset[k] + i) * gstride_[k];
    }
  }

 private:
  const SlicePiece& s_;
  size_t nd_;
  std::vector<int64_t> gstride_, lstride_;
  int64_t count_ = 0;
};

}  // namespace

Placement::Placement(std::shared_ptr<const ParamTable> table, const ParamLayout& layout, int tp_rank, int ep_rank)
    : table_(std::move(table)), layout_(layout), tp_rank_(tp_rank), ep_rank_(ep_rank) {
  if (layout_.tp_size == 1) layout_.vocab_split = true;  // one rank: nothing to replicate
  if (layout_.ep_size < 1 || ep_rank_ < 0 || ep_rank_ >= layout_.ep_size)
    throw std::invalid_argument("placement: expert-parallel rank " + std::to_string(ep_rank_) + " of " +
                                std::to_string(layout_.ep_size));
  const auto& specs = table_->specs();
  index_.assign(specs.size(), -1);
  int64_t off = 0;
  // Two passes: the dense parameters, then the experts'. A tensor starts 16-float aligned unless
  // the one laid out before it is packed_with_next.
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      off = (off + 15) / 16 * 16;
      expert_begin_ = off;
    }
    for (size_t k = 0; k < specs.size(); ++k) {
      const ParamSpec& p = specs[k];
      if (p.is_expert() != (pass == 1) || !holds(p)) continue;
      if (p.shape.empty()) throw std::invalid_argument(p.name + ": a parameter has at least one dim");
      TensorPlacement t;
      t.spec = &p;
      t.local_shape = local_shape_of(p, layout_);
      t.offset = off;
      t.pieces = pieces_of(p, t.local_shape, layout_, tp_rank_);
      t.replicated = p.split.axis == Axis::kNone || (p.split.axis == Axis::kVocab && !layout_.vocab_split);
      off += p.packed_with_next ? t.numel() : (t.numel() + 15) / 16 * 16;
      index_[k] = static_cast<int64_t>(tensors_.size());
      tensors_.push_back(std::move(t));
    }
  }
  total_ = (off + 15) / 16 * 16;
}

bool Placement::holds(const ParamSpec& p) const {
  if (!p.is_expert()) return true;
  if (p.experts % layout_.ep_size != 0)
    throw std::invalid_argument(p.name + ": " + std::to_string(p.experts) + " experts are not divisible by expert_parallel " +
                                std::to_string(layout_.ep_size));
  return p.expert / (p.experts / layout_.ep_size) == ep_rank_;
}

const TensorPlacement* Placement::find(const std::string& name) const {
  const int64_t k = table_->index_of(name);
  if (k < 0 || index_[static_cast<size_t>(k)] < 0) return nullptr;
  return &tensors_[static_cast<size_t>(index_[static_cast<size_t>(k)])];
}

const TensorPlacement& Placement::at(const std::string& name) const {
  const TensorPlacement* t = find(name);
  if (!t) throw std::out_of_range("no parameter named " + name);
  return *t;
}

void Placement::initialize(float* arena, uint64_t seed) const {
  initialize(arena, seed, {{0, total_floats()}});
}

void Placement::initialize(float* arena, uint64_t seed, const std::vector<std::pair<int64_t, int64_t>>& only) const {
  for (const TensorPlacement& t : tensors_) {
    float* w = arena + t.offset;
    const InitialValues value(*t.spec, seed);
    for (const auto& [rb, re] : only) {
      // This tensor's local elements [lo, hi) inside the range.
      const int64_t lo = std::max<int64_t>(0, rb - t.offset), hi = std::min<int64_t>(t.numel(), re - t.offset);
      if (lo >= hi) continue;
      std::fill(w + lo, w + hi, 0.0f);
      for (const SlicePiece& s : t.pieces) {
        const Runs runs(t, s);
        const int64_t len = runs.len();
        // A counter-based normal per element (a logarithm and a cosine), so any split of the work gives the same
        // values: the threads share blocks of a run, not whole runs (an unsplit embedding is one run).
        const int64_t blocks = (len + kInitBlock - 1) / kInitBlock;
#pragma omp parallel for schedule(static) if (parallel_worth(runs.count() * len * kTranscendentalWork))
        for (int64_t rb = 0; rb < runs.count() * blocks; ++rb) {
          int64_t li = 0, gi = 0;
          runs.at(rb / blocks, li, gi);
          const int64_t first = li + (rb % blocks) * kInitBlock;
          const int64_t a = std::max(first, lo), b = std::min({first + kInitBlock, li + len, hi});
          if (a < b) value.fill(w + a, gi + (a - li), b - a);
        }
      }
    }
  }
}

void Placement::scatter(const TensorPlacement& t, const float* full, float* local) {
  std::fill(local, local + t.numel(), 0.0f);
  for (const SlicePiece& s : t.pieces) {
    const Runs runs(t, s);
    for (int64_t r = 0; r < runs.count(); ++r) {
      int64_t li = 0, gi = 0;
      runs.at(r, li, gi);
      std::memcpy(local + li, full + gi, sizeof(float) * static_cast<size_t>(runs.len()));
    }
  }
}

void Placement::gather(const TensorPlacement& t, const float* local, float* full) {
  for (const SlicePiece& s : t.pieces) {
    const Runs runs(t, s);
    for (int64_t r = 0; r < runs.count(); ++r) {
      int64_t li = 0, gi = 0;
      runs.at(r, li, gi);
      std::memcpy(full + gi, local + li, sizeof(float) * static_cast<size_t>(runs.len()));
    }
  }
}

}  // namespace gf
