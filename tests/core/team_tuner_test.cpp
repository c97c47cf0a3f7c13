// core/math/team_tuner.h: the policy on made-up call times (which team size wins, when it changes,
// the probes' back-off) and TeamScope's setting and restoring of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <functional>
#include <vector>

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
  // The first comparison, then probes after 32, 64, 128 and 256 calls (the next, after 512, falls past
  // call 1000). Each ends after 4 calls of 2.0, whose sum 8 reaches what 8 calls may sum to and still
  // win: 8 x 1.0 in the first comparison, 8 x 0.9 after it (the 10% margin). 5 x 4 = 20 calls.
  EXPECT_EQ(ones, 20);
}

TEST(TeamTuner, TakesOneThreadWhenItIsFaster) {
  TeamTuner t(2);
  const int ones = drive(t, 1000, [](int n, int) { return n == 1 ? 1.0 : 3.0; });
  EXPECT_EQ(t.current(), 1);
  EXPECT_EQ(t.switches(), 1);
  // All but the first run (2 calls of 2 threads) and 4 probes of 2 threads (after 32, 64, 128, 256
  // calls; the next at call 2 + 8 + 32 + 64 + 128 + 256 + 512 + 4 x 3 = 1014), each ending after 3
  // calls: 3 x 3.0 = 9 reaches 8 x 0.9 x 1.0 = 7.2, where 2 calls (6) do not.
  EXPECT_EQ(ones, 1000 - 2 - 4 * 3);
  EXPECT_EQ(t.probe_calls(), 8 + 4 * 3);  // the first comparison's one-thread window, then the team's probes
  EXPECT_EQ(t.calls(), 1000);
}

TEST(TeamTuner, AProbeThatCannotWinEndsAtItsFirstCall) {
  // Beside a busy process: a team's call waits out time slices, 10x a one-thread call.
  TeamTuner t(2);
  std::vector<int> team_calls;
  for (int i = 0; i < 1000; ++i) {
    const int n = t.threads();
    if (n == 2) team_calls.push_back(i);
    t.record(n == 1 ? 1.0 : 10.0);
  }
  EXPECT_EQ(t.current(), 1);
  // The first run of the team (calls 0 and 1); the one-thread probe (2-9) switches; each later probe
  // of the team is one call (10 >= 8 x 0.9), after 32, 64, 128 and 256 calls (the next would be at
  // 493 + 1 + 512 = 1006).
  const std::vector<int> want = {0, 1, 10 + 32, 10 + 32 + 1 + 64, 10 + 32 + 1 + 64 + 1 + 128,
                                 10 + 32 + 1 + 64 + 1 + 128 + 1 + 256};
  EXPECT_EQ(team_calls, want);
}

TEST(TeamTuner, EndingProbesEarlyKeepsTheFullWindowsDecisions) {
  // The same call times, one tuner with the shortcut (the real one) and the rule it shortens written
  // out: whenever a probe ends early, the full window's mean would not have won either. Times drawn
  // from a fixed sequence, with stalls, for both sizes; checked over every probe of 20000 calls.
  TeamTuner t(2);
  uint64_t x = 12345;
  auto next = [&x] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
  };
  int early = 0, probes = 0;
  std::vector<double> cur, probe;
  int last_switches = 0;
  bool settled = false;
  for (int i = 0; i < 20000; ++i) {
    const int n = t.threads();
    const bool probing = n != t.current();
    const double base = n == 1 ? 1.0 : 0.7 + 0.6 * (i / 2000 % 2);  // the team wins, then loses, by turns
    const double time = base * (next() < 0.05 ? 20.0 : 0.8 + 0.4 * next());
    if (probing) {
      probe.push_back(time);
    } else {
      cur.push_back(time);
      if (cur.size() > 8) cur.erase(cur.begin());
    }
    t.record(time);
    if (probing && t.threads() == t.current()) {  // the probe ended with this call
      ++probes;
      double c = 0;
      for (const double v : cur) c += v;
      c /= static_cast<double>(cur.size());
      const double bar = settled ? 0.9 * c : c;
      double sum = 0;
      for (const double v : probe) sum += v;
      const bool switched = t.switches() != last_switches;
      if (probe.size() < 8) {
        ++early;
        EXPECT_FALSE(switched) << "call " << i;
        EXPECT_GE(sum, 8 * bar) << "call " << i << ": ended early though the window could still win";
      } else {
        EXPECT_EQ(switched, sum / 8 < bar) << "call " << i;
      }
      if (switched) cur = probe;
      probe.clear();
      settled = true;
      last_switches = t.switches();
    }
  }
  EXPECT_GT(probes, 20);
  EXPECT_GT(early, 5);
  EXPECT_LT(early, probes);
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

TEST(TeamTuner, ATeamThatTurnsSlowIsProbedAtOnce) {
  // A quiet machine for 600 calls (the team, 0.6 a call, against 1.0 on one thread), then a busy process
  // arrives: a team's call waits out a time slice, 10. Quiet: the team's first 2 calls (0-1), the first
  // comparison's one-thread probe (2-6: 5 x 1.0 >= 8 x 0.6), then runs of the team of 32, 64, 128, 256
  // and 512 calls, each followed by a one-thread probe of 5 calls (5 x 1.0 >= 8 x 0.9 x 0.6): the
  // 512-call run is calls 507-1018.
  auto time = [](int n, int i) { return i < 600 ? (n == 1 ? 1.0 : 0.6) : (n == 1 ? 1.0 : 10.0); };
  auto team_calls_after_the_change = [&](TeamTuner& t) {
    drive(t, 600, time);
    EXPECT_EQ(t.current(), 2);
    int team = 0;
    for (int i = 600; i < 2000 && t.current() == 2; ++i) {
      team += t.threads() == 2;
      t.record(time(t.threads(), i));
    }
    EXPECT_EQ(t.current(), 1);
    return team;
  };
  // The one-thread probes of the quiet part end after 5 calls, so the least their window's mean can be
  // is 5 / 8; the first busy call brings the run's last 8 calls to
  // 7 x 0.6 + 10 = 14.2 >= 2 x 8 x 5 / 8, a probe of one thread starts at once and switches (its mean
  // 1.0 under 0.9 x 14.2 / 8).
  TeamTuner t(2);
  EXPECT_EQ(team_calls_after_the_change(t), 1);
  // Without the alarm the team runs on to its next probe, at call 1019: 419 calls of 10.
  TeamTuner::Options no_alarm;
  no_alarm.alarm = 1e9;
  TeamTuner u(2, no_alarm);
  EXPECT_EQ(team_calls_after_the_change(u), 419);
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
  // All threads faster, but one call of the first run waits 100x (a time slice): by the mean one
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
  o.first_window = 0;
  EXPECT_THROW(TeamTuner(2, o), std::invalid_argument);
  o = {};
  o.max_interval = 8;
  o.first_interval = 16;
  EXPECT_THROW(TeamTuner(2, o), std::invalid_argument);
  o = {};
  o.alarm = 0.5;  // would probe whenever the current size is merely as fast as the other
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
