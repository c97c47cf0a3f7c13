// The layouts of Megatron's tensors (megatron_checkpoint.h): strided views of a shard's tensor (no
// data is read), and the tensor-parallel shards joined into the full tensor and made ours (transposed
// for an [in, out] model, the vocabulary's padding rows dropped, q, k and v split out of each query
// group). The table of names and the collection of the pieces (MegatronTensorMap), which call these,
// are in megatron_checkpoint_map.cpp; what both use in megatron_checkpoint_map_detail.h.
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/weights/megatron_checkpoint_map_detail.h"

namespace gf {
namespace megatron_detail {

// ---- strided views (no data is read) ----

TorchTensor rows_of(TorchTensor t, int64_t begin, int64_t n) {
  t.storage_offset += begin * t.strides[0];
  t.shape[0] = n;
  return t;
}

TorchTensor transposed(TorchTensor t) {
  std::swap(t.shape[0], t.shape[1]);
  std::swap(t.strides[0], t.strides[1]);
  return t;
}

// A contiguous tensor seen with another shape of the same element count (torch's view).
TorchTensor viewed(TorchTensor t, std::vector<int64_t> shape) {
  t.shape = std::move(shape);
  t.strides.assign(t.shape.size(), 1);
  for (size_t d = t.shape.size(); d-- > 1;)
    t.strides[d - 1] = t.strides[d] * t.shape[d];
  return t;
}

TorchTensor permuted(const TorchTensor& t, const std::vector<size_t>& order) {
  TorchTensor p = t;
  for (size_t d = 0; d < order.size(); ++d) {
    p.shape[d] = t.shape[order[d]];
    p.strides[d] = t.strides[order[d]];
  }
  return p;
}

std::vector<float> transpose2d(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> t(v.size());
  constexpr int64_t kTile = 32;  // tiles of 32 x 32: both sides' rows stay in cache (a plain loop strides through t)
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c)
          t[static_cast<size_t>(c * rows + r)] = v[static_cast<size_t>(r * cols + c)];
  return t;
}

// ---- joining the shards ----

// The full tensor's shape (checking that the shards fit together).
std::vector<int64_t> joined_shape(const Entry& e, const std::string& what) {
  if (e.join == kWhole) return e.shards[0]->shape;
  std::vector<int64_t> s = e.shards[0]->shape;
  const size_t dim = e.join == kRows ? 0 : 1;
  if (dim >= s.size()) throw std::runtime_error(what + " is a vector; a row-parallel weight is a matrix");
  s[dim] = 0;
  for (const std::optional<Piece>& p : e.shards) {
    std::vector<int64_t> a = p->shape, b = e.shards[0]->shape;
    a[dim] = b[dim] = 0;
    if (a != b)
      throw std::runtime_error(what + ": its tensor-parallel shards do not fit together (" + p->where + " has shape " +
                               shape_str(p->shape) + ", " + e.shards[0]->where + " " + shape_str(e.shards[0]->shape) + ")");
    s[dim] += p->shape[dim];
  }
  return s;
}

namespace {

// A shard's elements as float32, its file pages then given back (the copy is what the reader keeps).
std::vector<float> read_shard(const Piece& p) {
  std::vector<float> v = p.view.to_float();
  p.view.storage->drop_pages();
  return v;
}

// The full tensor, row-major: the shards' elements joined on the entry's dim. One copy of it is held beyond the
// file (one shard alone is returned as read).
std::vector<float> join(const Entry& e, const std::vector<int64_t>& shape) {
  if (e.join != kCols) {
    if (e.join == kWhole || e.shards.size() == 1) return read_shard(*e.shards.front());
    std::vector<float> out;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out.reserve(static_cast<size_t>(n));
    for (const std::optional<Piece>& p : e.shards) {
      const std::vector<float> v = read_shard(*p);
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
  const int64_t rows = shape[0], cols = shape[1];
  std::vector<float> out(static_cast<size_t>(rows * cols));
  int64_t at = 0;
  for (const std::optional<Piece>& p : e.shards) {
    const std::vector<float> v = read_shard(*p);
    const int64_t w = p->shape[1];
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(v.begin() + r * w, w, out.begin() + r * cols + at);
    at += w;
  }
  return out;
}

}  // namespace

// Our tensors from the full Megatron tensor (group()'s names and shapes, in order).
std::vector<std::vector<float>> assemble(const Entry& e, const std::vector<int64_t>& full, const TransformerSpec& s) {
  std::vector<float> v = join(e, full);
  const bool matrix = full.size() == 2;
  const int64_t cols = matrix ? full[1] : 1;
  auto ours = [&](std::vector<float> x, int64_t rows) {  // an [out, in] matrix in the model's layout
    return matrix && !s.out_in ? transpose2d(x, rows, cols) : x;
  };
  switch (e.layout) {
    case kLinear:
      return {ours(std::move(v), full[0])};
    case kVocab:
      v.resize(static_cast<size_t>(s.vocab * cols));
      return {std::move(v)};
    case kQkv: {
      // Per query group: heads / groups q heads, then one k head, then one v head (the rows of
      // get_query_key_value_tensors' [ng, (np/ng + 2) * hn] view; legacy [np, 3, hn] has ng = np).
      const int64_t H = s.heads, G = s.kv_heads, D = s.head_dim(), per = H / G;
      std::vector<float> q, k, val;
      for (int64_t g = 0; g < G; ++g) {
        const auto at = v.begin() + g * (per + 2) * D * cols;
        q.insert(q.end(), at, at + per * D * cols);
        k.insert(k.end(), at + per * D * cols, at + (per + 1) * D * cols);
        val.insert(val.end(), at + (per + 1) * D * cols, at + (per + 2) * D * cols);
      }
      if (!s.fused_qkv_param) return {ours(std::move(q), H * D), ours(std::move(k), G * D), ours(std::move(val), G * D)};
      q.insert(q.end(), k.begin(), k.end());
      q.insert(q.end(), val.begin(), val.end());
      return {ours(std::move(q), (H + 2 * G) * D)};
    }
    default:
      return {std::move(v)};
  }
}

}  // namespace megatron_detail
}  // namespace gf
