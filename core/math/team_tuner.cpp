#include "core/math/team_tuner.h"

#include <omp.h>

#include <algorithm>
#include <stdexcept>

#include "core/math/gemm.h"

namespace gf {

namespace {

double sum(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x;
  return s;
}

// The mean, not the median: a call that waited out a time slice is what the team size costs, and the
// throughput is the mean's.
double mean(const std::vector<double>& v) { return v.empty() ? 0.0 : sum(v) / static_cast<double>(v.size()); }

}  // namespace

TeamTuner::TeamTuner(int most, Options o) : most_(std::max(1, most)), o_(o), current_(most_), interval_(o.first_interval) {
  if (o_.first_window < 1 || o_.window < 1 || o_.first_interval < 1 || o_.max_interval < o_.first_interval ||
      !(o_.margin >= 0) || !(o_.alarm >= 1))
    throw std::invalid_argument(
        "TeamTuner: first_window, window >= 1, 1 <= first_interval <= max_interval, margin >= 0, alarm >= 1");
  left_ = o_.first_window;  // first the current size (all threads), briefly
}

void TeamTuner::record(double seconds) {
  if (most_ == 1) return;  // one size only
  ++calls_;
  if (probing_) {
    ++probe_calls_;
    probe_.push_back(seconds);
    // The probe wins if its window's mean is under `bar`. Times are not negative, so once the sum so
    // far reaches window x bar the rest of the window cannot change the outcome: the probe ends there
    // (beside a busy process a team's probe is its slowest calls; this keeps the decisions and drops
    // those calls).
    const double c = mean(cur_), bar = settled_ ? c * (1.0 - o_.margin) : c;
    const bool lost = sum(probe_) >= bar * o_.window;
    if (--left_ > 0 && !lost) return;
    // The probe's window against the current size's last one.
    const double p = lost ? bar : mean(probe_);
    probing_ = false;
    if (p < bar) {
      current_ = other();
      other_mean_ = c;
      cur_ = probe_;
      ++switches_;
      interval_ = o_.first_interval;
    } else {
      // A probe that ended early ran fewer calls than the window: its window's mean is at least
      // their sum over the window.
      other_mean_ = lost ? sum(probe_) / o_.window : p;
      if (settled_) interval_ = std::min(2 * interval_, o_.max_interval);
    }
    settled_ = true;
    probe_.clear();
    left_ = interval_;
    run_ = 0;
    return;
  }
  cur_.push_back(seconds);
  if (static_cast<int>(cur_.size()) > o_.window) cur_.erase(cur_.begin());
  ++run_;
  if (settled_ && other_mean_ > 0) {
    // The run's latest calls (cur_'s last min(run_, window)) against the alarm.
    double recent = 0;
    const int n = std::min(run_, static_cast<int>(cur_.size()));
    for (size_t i = cur_.size() - static_cast<size_t>(n); i < cur_.size(); ++i) recent += cur_[i];
    if (recent >= o_.alarm * o_.window * other_mean_) left_ = 1;  // probe now
  }
  if (--left_ > 0) return;
  probing_ = true;  // the other size for a window
  left_ = o_.window;
}

TeamScope::TeamScope(int n) : before_(omp_get_max_threads()) {
  if (n <= 0 || n == before_ || omp_in_parallel()) return;
  on_ = true;
  omp_set_num_threads(n);
  gemm_set_threads(n);
}

TeamScope::~TeamScope() {
  if (!on_) return;
  omp_set_num_threads(before_);
  gemm_set_threads(before_);
}

}  // namespace gf
