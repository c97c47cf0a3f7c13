// The central-difference check of a backward, shared by the tests that run an op's forward and backward in
// double precision (ops_fd_test.cpp, flash_attention_test.cpp).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace gf::test {

// Checks `analytic` == d loss / d x by central differences of step h on every element of x; loss() reads x (which
// is restored). Fails when the largest |numeric - analytic| passes tol x max(1, the largest |numeric|), or when the
// numeric gradient is zero everywhere (the check would be vacuous).
inline void expect_grad(const char* what, std::vector<double>& x, const std::vector<double>& analytic,
                        const std::function<double()>& loss, double h = 1e-6, double tol = 1e-7) {
  ASSERT_EQ(x.size(), analytic.size());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    const double num = (up - down) / (2 * h);
    max_diff = std::max(max_diff, std::abs(num - analytic[i]));
    max_ref = std::max(max_ref, std::abs(num));
  }
  EXPECT_GT(max_ref, 0.0) << what << ": gradient is identically zero; the check would be vacuous";
  EXPECT_LE(max_diff, tol * std::max(1.0, max_ref)) << what << ": max |numeric - analytic| = " << max_diff
                                                     << " (max |numeric| = " << max_ref << ")";
}

}  // namespace gf::test
