// The row operations the fused attention core (flash_attention.cpp) and the ring attention blocks
// (ring_attention.cpp) share on a score tile's rows: a sum and a maximum whose order depends only on
// the length, the dropout scales of a run of keys, and exp(x - shift) through Eigen's vectorised exp.
#pragma once
#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

#include "core/ops/dropout.h"

namespace gf::ops::rows {
// Internal linkage: each including file compiles (and inlines) its own copies, as when each had them
// itself, so sharing the source does not make one file's calls take the other's out-of-line code
// (which moved the ring's results in the last bit).
namespace {

// Sum of x[0..n) in 16 interleaved lanes: vectorises without -ffast-math and the order of the
// additions depends only on n.
template <typename S>
S lane_sum(const S* x, int64_t n) {
  S acc[16] = {};
  int64_t c = 0;
  for (; c + 16 <= n; c += 16)
    for (int k = 0; k < 16; ++k) acc[k] += x[c + k];
  for (int k = 0; c < n; ++c, ++k) acc[k] += x[c];
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

template <typename S>
S lane_max(const S* x, int64_t n, S init) {
  S acc[16];
  std::fill(acc, acc + 16, init);
  int64_t c = 0;
  for (; c + 16 <= n; c += 16)
    for (int k = 0; k < 16; ++k) acc[k] = acc[k] > x[c + k] ? acc[k] : x[c + k];
  for (; c < n; ++c) acc[0] = acc[0] > x[c] ? acc[0] : x[c];
  return *std::max_element(acc, acc + 16);
}

// mk[j] = drop.scale(at + j), j < n: the same function as the unfused path, in a loop of its own
// (with the key in a local) so that the compiler vectorises the hashing.
template <typename S>
void dropout_scales(S* mk, const DropoutKey& drop, uint64_t at, int64_t n) {
  const DropoutKey k = drop;
  for (int64_t j = 0; j < n; ++j) mk[j] = static_cast<S>(k.scale(at + static_cast<uint64_t>(j)));
}

// x[0..n) = exp(x - shift) (Eigen's vectorised exp; where x starts relative to a 64-byte boundary
// decides how Eigen splits it, so callers keep that independent of the heap: core/math/scratch.h).
// GCC 12 takes the _mm512_undefined_* operands inside Eigen's AVX-512 exp for maybe-uninitialized values.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <typename S>
void exp_shifted(S* x, int64_t n, S shift) {
  Eigen::Map<Eigen::Array<S, Eigen::Dynamic, 1>> a(x, n);
  a = (a - shift).exp();
}
#pragma GCC diagnostic pop

}  // namespace
}  // namespace gf::ops::rows
