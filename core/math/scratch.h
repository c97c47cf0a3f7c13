// A per-thread scratch buffer that grows to the largest request and is then reused, so ops that
// need a little temporary memory (per-thread partial sums) allocate only on the first step.
#pragma once
#include <cstddef>
#include <vector>

namespace gf {

// Returns `n` values owned by the calling thread, valid until its next call with that slot.
template <typename T = float>
inline T* scratch(size_t n, int slot = 0) {
  thread_local std::vector<T> buf[4];
  auto& b = buf[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

inline float* scratch_floats(size_t n, int slot = 0) { return scratch<float>(n, slot); }

}  // namespace gf
