// runner/train/stop_signals.h: SIGINT/SIGTERM go to the signal thread only. Each case runs in a
// forked child (the routing changes the process's signal mask for good), which reports by its exit.
#include "runner/train/stop_signals.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace {

// Runs `body` in a forked child; its wait status.
template <typename F>
int in_child(F body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

bool blocked_here(int sig) {
  sigset_t s;
  pthread_sigmask(SIG_BLOCK, nullptr, &s);
  return sigismember(&s, sig) == 1;
}

// Waits up to 5 s for the stop request to read `sig`.
bool stop_becomes(int sig) {
  for (int i = 0; i < 500; ++i) {
    if (gf::g_stop_signal.load() == sig) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

TEST(StopSignals, ThreadsStartedAfterTheRoutingHaveThemBlocked) {
  const int status = in_child([] {
    if (blocked_here(SIGTERM)) _exit(10);  // not before
    gf::route_stop_signals();
    if (!blocked_here(SIGTERM) || !blocked_here(SIGINT)) _exit(11);
    bool worker = false;
    std::thread([&] { worker = blocked_here(SIGTERM) && blocked_here(SIGINT); }).join();
    if (!worker) _exit(12);
    // A forked grandchild (a launcher Open MPI starts, say) has them back.
    const int grandchild = in_child([] { _exit(blocked_here(SIGTERM) || blocked_here(SIGINT) ? 13 : 0); });
    if (!WIFEXITED(grandchild) || WEXITSTATUS(grandchild) != 0) _exit(13);
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: blocked before the routing, 11: not blocked after it, 12: not in a "
                                       "later thread, 13: still blocked in a forked child";
}

TEST(StopSignals, BeforeArmingASignalEndsTheProcessAsByDefault) {
  const int status = in_child([] {
    gf::route_stop_signals();
    kill(getpid(), SIGINT);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    _exit(20);  // still alive: the signal was swallowed
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

TEST(StopSignals, ArmedTheFirstAsksToStopAndTheSecondEndsTheProcess) {
  const int status = in_child([] {
    gf::route_stop_signals();
    gf::install_stop_handlers();
    kill(getpid(), SIGTERM);
    if (!stop_becomes(SIGTERM)) _exit(30);
    kill(getpid(), SIGTERM);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    _exit(31);  // the second one did not end it
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << "30: the first SIGTERM set no stop request, 31: the second did not exit";
}

TEST(StopSignals, ArmingWithoutTheRoutingIsRefused) {
  const int status = in_child([] {
    try {
      gf::install_stop_handlers();
    } catch (const std::logic_error&) {
      _exit(0);
    }
    _exit(40);
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
