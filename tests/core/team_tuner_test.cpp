// core/math/team_tuner.h: the policy on made-up call times (which team size wins, when it changes,
// the probes' back-off) and TeamScope's setting and restoring of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <functional>

#include "core/math/team_tuner.h"

namespace gf {
namespace {

// Runs `calls` calls; `time(threads, call)` is the made-up wall time of a call. Returns how many
// calls ran with one thread.
int drive(TeamTuner& t, int calls, const std::function<double(int, int)>& time, int first = 0) {
  int ones = 0;
  for (int i = first; i < first + calls; ++i) {
    const int n = t.threads();
    ones += n == 1;
    t.record(time(n, i));
  }
  return ones;
}

TEST(TeamTuner, KeepsAllThreadsWhenTheyAreFaster) {
  TeamTuner t(4);
  const int ones = drive(t, 1000, [](int n, int) { return n == 1 ? 2.0 : 1.0; });
  EXPECT_EQ(t.current(), 4);
  EXPECT_EQ(t.switches(), 0);
  // The first comparison (8 calls of one thread), then probes of 8 after 32, 64, 128 and 256 calls
  // (the next, after 512, falls past call 1000): 40 calls.
  EXPECT_EQ(ones, 40);
}

TEST(TeamTuner, TakesOneThreadWhenItIsFaster) {
  TeamTuner t(2);
  const int ones = drive(t, 1000, [](int n, int) { return n == 1 ? 1.0 : 3.0; });
  EXPECT_EQ(t.current(), 1);
  EXPECT_EQ(t.switches(), 1);
  EXPECT_EQ(ones, 960);  // all but the first window and 4 probes of 2 threads, 8 calls each
}

TEST(TeamTuner, FollowsAChangeOfConditions) {
  // A quiet machine (all threads faster), then another process arrives at call 200 (one thread
  // faster), then leaves at call 2000.
  TeamTuner t(2);
  auto time = [](int n, int i) {
    const bool busy = i >= 200 && i < 2000;
    return busy ? (n == 1 ? 1.0 : 4.0) : (n == 1 ? 1.0 : 0.6);
  };
  drive(t, 200, time);
  EXPECT_EQ(t.current(), 2);
  drive(t, 1800, time, 200);
  EXPECT_EQ(t.current(), 1);  // the first probe after the change switched: within 512 + 8 calls
  drive(t, 1000, time, 2000);
  EXPECT_EQ(t.current(), 2);
  EXPECT_EQ(t.switches(), 2);
}

TEST(TeamTuner, AMarginKeepsNearTiesFromFlipping) {
  TeamTuner t(2);
  // One thread 5% faster: under the 10% margin after the first comparison (which takes the faster).
  drive(t, 2000, [](int n, int) { return n == 1 ? 0.95 : 1.0; });
  EXPECT_EQ(t.switches(), 1);  // the first comparison only
  EXPECT_EQ(t.current(), 1);
}

TEST(TeamTuner, OneStallCountsAndTheNextProbeCorrectsIt) {
  TeamTuner t(2);
  // All threads faster, but one call of the first window waits 100x (a time slice): by the mean one
  // thread wins the first comparison; the probe of all threads 32 calls later takes them back.
  drive(t, 100, [](int n, int i) { return n == 1 ? 2.0 : (i == 1 ? 100.0 : 1.0); });
  EXPECT_EQ(t.current(), 2);
  EXPECT_EQ(t.switches(), 2);
}

TEST(TeamTuner, OneThreadOnlyNeverProbes) {
  TeamTuner t(1);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(t.threads(), 1);
    t.record(1.0);
  }
}

TEST(TeamTuner, RefusesBadOptions) {
  TeamTuner::Options o;
  o.window = 0;
  EXPECT_THROW(TeamTuner(2, o), std::invalid_argument);
  o = {};
  o.max_interval = 8;
  o.first_interval = 16;
  EXPECT_THROW(TeamTuner(2, o), std::invalid_argument);
}

TEST(TeamScope, SetsAndRestoresTheThreadCount) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  {
    const TeamScope s(1);
    EXPECT_EQ(omp_get_max_threads(), 1);
  }
  EXPECT_EQ(omp_get_max_threads(), 3);
  {
    const TeamScope s(0);  // nothing asked
    EXPECT_EQ(omp_get_max_threads(), 3);
  }
  omp_set_num_threads(before);
}

}  // namespace
}  // namespace gf
