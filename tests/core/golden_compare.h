// How the op tests compare with PyTorch's goldens: max |got - ref| / max |ref| <= tol (and the
// reference not all zero, so the check is not vacuous).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace gf::golden {

inline void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double diff = 0, mx = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - ref[i]));
    mx = std::max(mx, std::abs(static_cast<double>(ref[i])));
  }
  EXPECT_GT(mx, 0.0) << what;
  EXPECT_LE(diff / mx, tol) << what << ": max abs diff " << diff << ", max abs " << mx;
}

}  // namespace gf::golden
