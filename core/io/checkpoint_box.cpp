// Sharded checkpoints' boxes (core/io/checkpoint.h): their intersections, the copy of a box between two row-major
// arrays, a flat range of a tensor as boxes, and the check that a tensor's saved boxes do not overlap. Declared in
// checkpoint_detail.h for the writer (checkpoint.cpp) and the reader (checkpoint_reader.cpp).
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/io/checkpoint_detail.h"

namespace gf::ckpt::detail {

// ---- boxes ----------------------------------------------------------------------------------

// a ∩ b; false when empty.
bool intersect(const Box& a, const Box& b, Box* out) {
  const size_t n = a.offset.size();
  out->offset.resize(n);
  out->extent.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const int64_t lo = std::max(a.offset[k], b.offset[k]);
    const int64_t hi = std::min(a.offset[k] + a.extent[k], b.offset[k] + b.extent[k]);
    if (hi <= lo) return false;
    out->offset[k] = lo;
    out->extent[k] = hi - lo;
  }
  return true;
}

// Whether `b` has `shape`'s rank and lies inside it.
bool inside(const Box& b, const std::vector<int64_t>& shape) {
  if (b.offset.size() != shape.size() || b.extent.size() != shape.size()) return false;
  for (size_t k = 0; k < shape.size(); ++k)
    if (b.offset[k] < 0 || b.extent[k] < 0 || b.offset[k] + b.extent[k] > shape[k]) return false;
  return true;
}

// Copies the box of extent `ext` at `soff` in the row-major array `src` (shape `sshape`) to `doff`
// in `dst` (shape `dshape`), 4-byte elements. One memcpy per run of the innermost dims, trailing
// dims that both arrays hold whole folded into the run (a box of whole rows is one memcpy); an
// odometer steps the outer dims, so no division per element or per run. Bytes rather than floats
// so a shard's data may sit at any alignment.
void copy_box(const void* src, const std::vector<int64_t>& sshape, const std::vector<int64_t>& soff, void* dst,
              const std::vector<int64_t>& dshape, const std::vector<int64_t>& doff, const std::vector<int64_t>& ext) {
  constexpr int64_t kElem = 4;
  const size_t n = ext.size();
  for (int64_t e : ext)
    if (e <= 0) return;
  std::vector<int64_t> ss(n, kElem), ds(n, kElem);  // byte strides
  for (size_t k = n - 1; k > 0; --k) {
    ss[k - 1] = ss[k] * sshape[k];
    ds[k - 1] = ds[k] * dshape[k];
  }
  size_t j = n - 1;
  int64_t run = ext[j] * kElem;
  while (j > 0 && ext[j] == sshape[j] && ext[j] == dshape[j]) {
    --j;
    run *= ext[j];
  }
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (size_t k = 0; k < n; ++k) {
    s += soff[k] * ss[k];
    d += doff[k] * ds[k];
  }
  if (j == 0) {
    std::memcpy(d, s, static_cast<size_t>(run));
    return;
  }
  std::vector<int64_t> idx(j, 0);  // over dims 0..j-1
  for (;;) {
    std::memcpy(d, s, static_cast<size_t>(run));
    size_t k = j;
    for (;;) {
      --k;
      if (++idx[k] < ext[k]) {
        s += ss[k];
        d += ds[k];
        break;
      }
      s -= (ext[k] - 1) * ss[k];
      d -= (ext[k] - 1) * ds[k];
      idx[k] = 0;
      if (k == 0) return;
    }
  }
}

// Flat elements [lo, hi) of the sub-tensor shape[d..] (the dims before d fixed at prefix[0..d))
// as boxes of the whole tensor: a partial first row (recursively), the whole rows, a partial last
// row (recursively). At most 2 (ndim - 1) + 1 boxes.
void flat_boxes(const std::vector<int64_t>& shape, size_t d, int64_t lo, int64_t hi, std::vector<int64_t>& prefix,
                std::vector<Box>& out) {
  if (lo >= hi) return;
  const size_t n = shape.size();
  auto rows = [&](int64_t first, int64_t count) {  // rows [first, first + count) of dim d, whole below
    Box b;
    b.offset.assign(n, 0);
    b.extent.assign(n, 1);
    for (size_t k = 0; k < d; ++k) b.offset[k] = prefix[k];
    b.offset[d] = first;
    b.extent[d] = count;
    for (size_t k = d + 1; k < n; ++k) b.extent[k] = shape[k];
    out.push_back(std::move(b));
  };
  if (d + 1 == n) {
    rows(lo, hi - lo);
    return;
  }
  int64_t row = 1;
  for (size_t k = d + 1; k < n; ++k) row *= shape[k];
  int64_t r0 = lo / row;
  const int64_t r1 = hi / row;
  if (r0 == r1) {  // inside one row
    prefix[d] = r0;
    flat_boxes(shape, d + 1, lo - r0 * row, hi - r0 * row, prefix, out);
    prefix[d] = 0;
    return;
  }
  if (lo % row != 0) {
    prefix[d] = r0;
    flat_boxes(shape, d + 1, lo % row, row, prefix, out);
    ++r0;
  }
  if (r1 > r0) rows(r0, r1 - r0);
  if (hi % row != 0) {
    prefix[d] = r1;
    flat_boxes(shape, d + 1, 0, hi % row, prefix, out);
  }
  prefix[d] = 0;
}

int64_t end_of(const TensorPlacement& t, int64_t lo, int64_t hi, const char* what) {
  if (!t.spec) throw std::invalid_argument(std::string(what) + ": a TensorPlacement without its ParamSpec");
  if (t.local_shape.empty() || t.local_shape.size() != t.spec->shape.size())
    throw std::invalid_argument(std::string(what) + ": " + t.spec->name + ": local shape " + shape_str(t.local_shape) +
                                " does not match the rank of the global shape " + shape_str(t.spec->shape));
  const int64_t n = t.numel();
  if (hi < 0) hi = n;
  if (lo < 0 || lo > hi || hi > n)
    throw std::invalid_argument(std::string(what) + ": " + t.spec->name + ": flat range [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + ") outside its " + std::to_string(n) + " local elements");
  return hi;
}

// Local elements [lo, hi) of t as global boxes, each with where it starts in the local tensor:
// the range's boxes of the local tensor intersected with t's pieces (padding is in none).
std::vector<SlicePiece> wanted_boxes(const TensorPlacement& t, int64_t lo, int64_t hi) {
  std::vector<Box> flat;
  std::vector<int64_t> prefix(t.local_shape.size(), 0);
  flat_boxes(t.local_shape, 0, lo, hi, prefix, flat);
  std::vector<SlicePiece> out;
  for (const Box& b : flat) {
    for (const SlicePiece& p : t.pieces) {
      const Box held{p.local_offset, p.global.extent};  // the piece, in local coordinates
      Box both;
      if (!intersect(b, held, &both)) continue;
      SlicePiece w;
      w.global.offset.resize(both.offset.size());
      for (size_t k = 0; k < both.offset.size(); ++k)
        w.global.offset[k] = p.global.offset[k] + both.offset[k] - p.local_offset[k];
      w.global.extent = both.extent;
      w.local_offset = both.offset;
      out.push_back(std::move(w));
    }
  }
  return out;
}

// Throws when two of a tensor's boxes overlap (`where` names each box's file and key). Sorted by
// their first dim's offset, each box is compared with the following ones that start before it
// ends on that dim only.
void check_disjoint(const std::string& context, const std::string& tensor, const std::vector<Box>& boxes,
                    const std::vector<std::string>& where) {
  std::vector<size_t> order(boxes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return boxes[a].offset[0] < boxes[b].offset[0]; });
  for (size_t i = 0; i < order.size(); ++i) {
    const Box& a = boxes[order[i]];
    if (a.numel() == 0) continue;
    for (size_t j = i + 1; j < order.size(); ++j) {
      const Box& b = boxes[order[j]];
      if (b.offset[0] >= a.offset[0] + a.extent[0]) break;
      Box both;
      if (b.numel() > 0 && intersect(a, b, &both))
        throw std::runtime_error(context + ": tensor " + tensor + ": box " + show(a) + " (" + where[order[i]] +
                                 ") overlaps box " + show(b) + " (" + where[order[j]] +
                                 "); each element must be saved by exactly one rank");
    }
  }
}

}  // namespace gf::ckpt::detail
