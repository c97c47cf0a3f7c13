// A per-thread scratch buffer that grows to the largest request and is then reused, so ops that
// need a little temporary memory (per-thread partial sums) allocate only on the first step.
//
// Scratch memory is 64-byte aligned wherever the heap puts it: Eigen splits an expression written
// into an unaligned buffer into a scalar head and tail and a vectorised body at the buffer's first
// aligned element, and some scalar functions (std::exp) differ from their vectorised forms in the
// last bit, so an unaligned scratch made results depend on the heap's layout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gf {

// `v` grown to hold n values from its first 64-byte aligned element on; returns that element.
template <typename T>
inline T* align64(std::vector<T>& v, size_t n) {
  static_assert(64 % sizeof(T) == 0 || sizeof(T) % 64 == 0);
  const size_t pad = sizeof(T) >= 64 ? 0 : 64 / sizeof(T);
  if (v.size() < n + pad) v.resize(n + pad);
  const auto at = reinterpret_cast<std::uintptr_t>(v.data());
  return reinterpret_cast<T*>((at + 63) / 64 * 64);
}

// Returns `n` values owned by the calling thread, valid until its next call with that slot.
template <typename T = float>
inline T* scratch(size_t n, int slot = 0) {
  thread_local std::vector<T> buf[4];
  return align64(buf[slot], n);
}

inline float* scratch_floats(size_t n, int slot = 0) { return scratch<float>(n, slot); }

}  // namespace gf
