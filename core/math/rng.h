// Counter-based random numbers: every value is a pure function of (seed, stream, index), so a
// tensor generated element by element is the same whatever slice of it a rank asks for, and a
// dropout mask can be regenerated in backward instead of being stored.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

namespace gf {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a of a name: the stream id of a parameter.
inline uint64_t hash_name(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) { h ^= c; h *= 1099511628211ull; }
  return h;
}

// The key of (seed, stream): what the counter functions below hash an index with. A loop over one
// stream's elements computes it once (the keyed_* forms) and gets the same bits as the counter_* forms.
inline uint64_t counter_key(uint64_t seed, uint64_t stream) { return splitmix64(seed ^ splitmix64(stream)); }

inline uint64_t keyed_bits(uint64_t key, uint64_t index) { return splitmix64(key + index); }

// Uniform in (0, 1), from 53 random bits, never exactly 0.
inline double keyed_uniform(uint64_t key, uint64_t index) {
  return (static_cast<double>(keyed_bits(key, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal for element `index` (Box-Muller on two counters).
inline double keyed_normal(uint64_t key, uint64_t index) {
  double u1 = keyed_uniform(key, 2 * index);
  double u2 = keyed_uniform(key, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// 64 random bits for (seed, stream, index).
inline uint64_t counter_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return keyed_bits(counter_key(seed, stream), index);
}

inline double counter_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return keyed_uniform(counter_key(seed, stream), index);
}

// Standard normal for element `index` of stream `stream`.
inline double counter_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  return keyed_normal(counter_key(seed, stream), index);
}

}  // namespace gf
