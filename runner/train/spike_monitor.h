// Spikes against a running statistic (monitor_config.loss_spike_factor, grad_norm_spike_factor,
// spike_window; runner/config/config.h's SpikeConfig): the window of the last steps without a spike,
// and the verdict on a new step. The loss and the gradient norm it judges are the all-reduced ones, the
// same on every rank, so every rank reaches the same verdict without communicating. Its window is part
// of a checkpoint's state, so a resumed run judges its steps as the uninterrupted run does.
#pragma once
#include <cstdint>
#include <deque>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "runner/config/config.h"

namespace gf {

class SpikeMonitor {
 public:
  explicit SpikeMonitor(const SpikeConfig& cfg) : cfg_(cfg) {}
  struct Verdict {
    bool loss = false, grad_norm = false;     // which value spiked
    double loss_mean = 0, grad_norm_mean = 0;  // the window's means it was judged against
    bool any() const { return loss || grad_norm; }
    // "loss 9.1 > 2 x 4.5 (mean of the last 100 steps)", for the warning.
    std::string describe(double loss_value, double grad_norm_value, const SpikeConfig& cfg, int64_t window) const;
  };
  // The verdict on a step (nothing before the window is full, nothing for a value that is not finite:
  // that is the non-finite check's).
  Verdict judge(double loss, double grad_norm) const;
  // A step without a spike joins the window (the oldest leaves it once it holds `window` steps).
  void record(double loss, double grad_norm);
  size_t size() const { return loss_.size(); }
  nlohmann::json state() const;            // {"loss": [...], "grad_norm": [...]}, oldest first
  void restore(const nlohmann::json& st);  // from state(); an absent state leaves the window empty

 private:
  static double mean(const std::deque<double>& v);
  SpikeConfig cfg_;
  std::deque<double> loss_, grad_norm_;
};

}  // namespace gf
