#include "core/math/team_tuner.h"

#include <omp.h>

#include <algorithm>
#include <stdexcept>

#include "core/math/gemm.h"

namespace gf {

namespace {

// The mean, not the median: a call that waited out a time slice is what the team size costs, and the
// throughput is the mean's.
double mean(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

}  // namespace

TeamTuner::TeamTuner(int most, Options o) : most_(std::max(1, most)), o_(o), current_(most_), interval_(o.first_interval) {
  if (o_.window < 1 || o_.first_interval < 1 || o_.max_interval < o_.first_interval || !(o_.margin >= 0))
    throw std::invalid_argument("TeamTuner: window >= 1, 1 <= first_interval <= max_interval, margin >= 0");
  left_ = o_.window;  // first the current size (all threads) for a window
}

void TeamTuner::record(double seconds) {
  if (most_ == 1) return;  // one size only
  if (probing_) {
    probe_.push_back(seconds);
    if (--left_ > 0) return;
    // The probe's window against the current size's last one.
    const double p = mean(probe_), c = mean(cur_);
    probing_ = false;
    if (p < c * (1.0 - o_.margin) || (!settled_ && p < c)) {
      current_ = other();
      cur_ = probe_;
      ++switches_;
      interval_ = o_.first_interval;
    } else if (settled_) {
      interval_ = std::min(2 * interval_, o_.max_interval);
    }
    settled_ = true;
    probe_.clear();
    left_ = interval_;
    return;
  }
  cur_.push_back(seconds);
  if (static_cast<int>(cur_.size()) > o_.window) cur_.erase(cur_.begin());
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
