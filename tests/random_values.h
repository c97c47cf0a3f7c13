// Normally distributed test values, the same for a seed on every machine's libstdc++ (mt19937_64 and
// normal_distribution<float>): shared by the tests that compare two computations on random inputs.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace gf::test_values {

inline std::vector<float> normal_values(int64_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace gf::test_values
