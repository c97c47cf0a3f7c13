// core/math/progress.h: a Scope's hook runs at the GEMM entry points of its own thread, at most once
// an interval, never inside an OpenMP parallel region, never from inside itself, and the outer hook is
// back when a nested Scope ends. (tests/mpi/progress_mpi.cpp: a rendezvous send completes while its
// sender only runs GEMMs.)
#include <gtest/gtest.h>
#include <omp.h>

#include <thread>
#include <vector>

#include "core/math/gemm.h"
#include "core/math/progress.h"

namespace gf {
namespace {

void one_product() {
  std::vector<float> a(16, 1.0f), b(16, 1.0f), c(16, 0.0f);
  gemm(Trans::kNo, Trans::kNo, 4, 4, 4, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4);
  ASSERT_EQ(c[0], 4.0f);
}

TEST(Progress, TheHookRunsAtEachGemmWithoutAnInterval) {
  int calls = 0;
  {
    progress::Scope s([&] { ++calls; }, 0.0);
    for (int i = 0; i < 5; ++i) one_product();
    EXPECT_EQ(calls, 5);
  }
  one_product();  // the scope has ended
  EXPECT_EQ(calls, 5);
}

TEST(Progress, TheIntervalLimitsTheCalls) {
  int calls = 0;
  progress::Scope s([&] { ++calls; }, 3600.0);  // an hour: no call in this test's time
  for (int i = 0; i < 5; ++i) one_product();
  EXPECT_EQ(calls, 0);
}

TEST(Progress, NotInsideAParallelRegionNorOnAnotherThread) {
  int calls = 0;
  progress::Scope s([&] { ++calls; }, 0.0);
#pragma omp parallel num_threads(2)
  { progress::point(); }
  EXPECT_EQ(calls, 0);
  std::thread t([] { progress::point(); });  // a thread without its own scope
  t.join();
  EXPECT_EQ(calls, 0);
  progress::point();
  EXPECT_EQ(calls, 1);
}

TEST(Progress, TheHookDoesNotReenterItself) {
  int calls = 0;
  progress::Scope s(
      [&] {
        ++calls;
        one_product();  // a point inside the hook
      },
      0.0);
  progress::point();
  EXPECT_EQ(calls, 1);
}

TEST(Progress, NestedScopesRestoreTheOuterHook) {
  int outer = 0, inner = 0;
  progress::Scope s([&] { ++outer; }, 0.0);
  {
    progress::Scope t([&] { ++inner; }, 0.0);
    progress::point();
  }
  progress::point();
  EXPECT_EQ(inner, 1);
  EXPECT_EQ(outer, 1);
}

}  // namespace
}  // namespace gf
