// The team size of a call repeated many times (a decode step of one sequence), chosen by measuring.
//
// A decode step of a small model is a few short parallel regions. On a quiet machine a second thread
// may pay (the LM head's matrix-vector product over the vocabulary); beside another busy process
// every region's barrier may wait for a teammate that is off its core, and one thread is faster
// (the tiny Llama with its real vocabulary: 0.4-0.5 of its one-thread speed on 2 threads beside a
// busy 2-thread process, 0.9-1.0 on one). Which one wins depends on the machine's load, which changes,
// so the tuner measures: it times `first_window` calls with all threads, then `window` with one, keeps the
// faster by the mean (not the median: the calls that waited out a time slice are what a team costs,
// and throughput is the mean's), and from then on probes the other size for `window` calls every
// `interval` calls. A probe that confirms the choice doubles the interval (up to `max_interval`: the
// probes then cost about 1.5% of the calls); one that finds the other size at least `margin` faster
// switches to it, and the interval starts again at `first_interval`. A probe ends as soon as its
// calls' sum shows it cannot win (the decision is the full window's; beside a busy process a team's
// probe of 8 calls at about 3x a one-thread call ends after 3). The first run of all threads is short
// (2 calls): beside a busy process those are the slowest calls of a decode, and a wrong first choice
// costs at most `first_interval` calls before the next probe. A run of the size in use whose latest
// calls (at most `window`) sum to `alarm` x window x the other size's last mean (for a probe that ended
// early, the least its window's mean can be) is probed at once instead of at the interval's end: the
// team that a quiet moment chose, once the busy process is back, costs one or two of its time-slice
// calls instead of the 32 to 512 left before the next probe.
//
// The results of a call should not depend on its thread count (the caller's concern): a decode step of
// one row is matrix-vector products and per-row or per-head loops, each output computed whole by one
// thread. OpenBLAS's matrix-vector product falls short in the last bits: its threads split the output at
// boundaries that move with the thread count, and a few of the LM head's logits round differently on 1
// and 2 threads (core/math/gemm.h). core/math/gemv_fixed.h's does not (RowInvariance::kEveryRow, which
// `serve --batch-invariant` sets); predict's tuned decode keeps OpenBLAS's for its speed.
#pragma once
#include <vector>

namespace gf {

class TeamTuner {
 public:
  struct Options {
    int first_window = 2;  // the very first run of all threads, before the first comparison
    int window = 8;
    int first_interval = 32;
    int max_interval = 512;
    double margin = 0.10;
    double alarm = 2.0;
  };
  explicit TeamTuner(int most, Options o);
  explicit TeamTuner(int most) : TeamTuner(most, Options{}) {}
  // The thread count for the next call.
  int threads() const { return probing_ ? other() : current_; }
  // The wall seconds the call run with threads() took.
  void record(double seconds);
  // For tests and the log: the size in use outside probes, and how many probes switched it.
  int current() const { return current_; }
  int switches() const { return switches_; }
  // Calls run with the size not in use at the time (the probes), and calls in all.
  int probe_calls() const { return probe_calls_; }
  int calls() const { return calls_; }

 private:
  int most_;
  Options o_;
  int current_;
  bool probing_ = false;
  int left_ = 0;        // calls left in the phase (a probe, or the current size's run)
  int interval_;
  int switches_ = 0;
  int probe_calls_ = 0, calls_ = 0;
  bool settled_ = false;  // the first comparison is done
  std::vector<double> cur_, probe_;  // the last window's times of the current size and of the probe
  double other_mean_ = 0;  // the other size's last window mean (or, for a probe ended early, its least)
  int run_ = 0;            // calls of the current size since the last probe
  int other() const { return current_ == most_ ? 1 : most_; }
};

// Runs the calls in its lifetime with `n` OpenMP threads (and n for the GEMM libraries), then puts back
// what was set before. n <= 0 or the count in force already: nothing changes.
class TeamScope {
 public:
  explicit TeamScope(int n);
  ~TeamScope();
  TeamScope(const TeamScope&) = delete;
  TeamScope& operator=(const TeamScope&) = delete;

 private:
  int before_ = 0;
  bool on_ = false;
};

}  // namespace gf
