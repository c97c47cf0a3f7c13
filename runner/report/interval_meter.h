// The log line's timing: throughput over the steps since the last report, not of the one step
// printed. Pure arithmetic over clock readings the caller passes in (seconds on a monotonic clock),
// so it is testable without a clock.
//
// The training loop starts the meter before step 1, counts each step, closes an interval when it
// prints, and excludes what is not training (evaluation) from the interval it falls in. The first
// interval the loop closes is the start-up one: the trainer closes it right after step 1, so
// first-touch allocation, oneDNN primitive creation and cold caches are reported apart, and the
// intervals after it (and the ETA and the final average) are the steady state.
#pragma once
#include <cstdint>

namespace gf {

struct Interval {
  int64_t first_step = 0, last_step = 0;  // steps [first_step, last_step], counted from 1
  double seconds = 0.0;                   // wall clock of those steps, excluded time taken out
  bool startup = false;                   // the interval holding step 1
  int64_t steps() const { return last_step - first_step + 1; }
  double ms_per_step() const { return steps() > 0 ? 1000.0 * seconds / static_cast<double>(steps()) : 0.0; }
};

// Rates over an interval: global tokens and samples per second, achieved TFLOP/s per rank and MFU
// against a per-rank peak.
struct IntervalRates {
  double step_ms = 0.0, tokens_per_s = 0.0, samples_per_s = 0.0, tflops = 0.0, mfu = 0.0;
};

inline IntervalRates interval_rates(const Interval& iv, double tokens_per_step, double samples_per_step,
                                    double flops_per_step, int ranks, double peak_tflops) {
  IntervalRates r;
  r.step_ms = iv.ms_per_step();
  if (iv.seconds <= 0.0) return r;
  const double steps = static_cast<double>(iv.steps());
  r.tokens_per_s = tokens_per_step * steps / iv.seconds;
  r.samples_per_s = samples_per_step * steps / iv.seconds;
  r.tflops = flops_per_step * steps / iv.seconds / 1e12 / ranks;
  r.mfu = peak_tflops > 0.0 ? r.tflops / peak_tflops : 0.0;
  return r;
}

class IntervalMeter {
 public:
  // `now`: the clock just before the first step (`first_step`: its number).
  explicit IntervalMeter(double now, int64_t first_step = 1) : start_(now), next_step_(first_step) {}

  // One more step of the open interval has finished.
  void step_done() { ++open_steps_; }
  // `seconds` of the open interval were not training (evaluation): they do not count.
  void exclude(double seconds) { excluded_ += seconds; }

  // Closes the open interval at `now` (its steps, its wall clock minus excluded time) and opens
  // the next one there.
  Interval close(double now) {
    Interval iv;
    iv.first_step = next_step_;
    iv.last_step = next_step_ + open_steps_ - 1;
    iv.seconds = now - start_ - excluded_;
    if (iv.seconds < 0.0) iv.seconds = 0.0;
    iv.startup = !closed_any_;
    if (!iv.startup) {
      steady_seconds_ += iv.seconds;
      steady_steps_ += open_steps_;
    } else {
      startup_ = iv;
    }
    closed_any_ = true;
    next_step_ += open_steps_;
    open_steps_ = 0;
    excluded_ = 0.0;
    start_ = now;
    return iv;
  }

  // Over the closed intervals after the start-up one (the start-up interval alone until then).
  double steady_ms_per_step() const {
    if (steady_steps_ > 0) return 1000.0 * steady_seconds_ / static_cast<double>(steady_steps_);
    return startup_.ms_per_step();
  }
  int64_t steady_steps() const { return steady_steps_; }
  // The start-up interval once closed.
  const Interval& startup() const { return startup_; }

 private:
  double start_ = 0.0, excluded_ = 0.0;
  int64_t next_step_ = 1, open_steps_ = 0;
  bool closed_any_ = false;
  double steady_seconds_ = 0.0;
  int64_t steady_steps_ = 0;
  Interval startup_;
};

}  // namespace gf
