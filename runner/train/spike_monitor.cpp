#include "runner/train/spike_monitor.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "runner/report/logging.h"

namespace gf {

double SpikeMonitor::mean(const std::deque<double>& v) {
  double s = 0;
  for (const double x : v) s += x;  // oldest first: the same order, so the same bits, on every rank and resume
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

SpikeMonitor::Verdict SpikeMonitor::judge(double loss, double grad_norm) const {
  Verdict v;
  if (!cfg_.enabled() || static_cast<int64_t>(loss_.size()) < cfg_.window) return v;
  v.loss_mean = mean(loss_);
  v.grad_norm_mean = mean(grad_norm_);
  v.loss = cfg_.loss_factor > 0 && std::isfinite(loss) && loss > cfg_.loss_factor * v.loss_mean;
  v.grad_norm = cfg_.grad_norm_factor > 0 && std::isfinite(grad_norm) && grad_norm > cfg_.grad_norm_factor * v.grad_norm_mean;
  return v;
}

void SpikeMonitor::record(double loss, double grad_norm) {
  if (!cfg_.enabled() || !std::isfinite(loss) || !std::isfinite(grad_norm)) return;
  loss_.push_back(loss);
  grad_norm_.push_back(grad_norm);
  while (static_cast<int64_t>(loss_.size()) > cfg_.window) {
    loss_.pop_front();
    grad_norm_.pop_front();
  }
}

std::string SpikeMonitor::Verdict::describe(double loss_value, double grad_norm_value, const SpikeConfig& cfg,
                                            int64_t window) const {
  std::string s;
  if (loss)
    s += fmt::format("loss {:.6f} > monitor_config.loss_spike_factor {} x {:.6f}", loss_value, cfg.loss_factor, loss_mean);
  if (grad_norm)
    s += fmt::format("{}global norm {:.4f} > monitor_config.grad_norm_spike_factor {} x {:.4f}", s.empty() ? "" : ", ",
                     grad_norm_value, cfg.grad_norm_factor, grad_norm_mean);
  return s + fmt::format(" (the mean of the last {} steps without a spike)", window);
}

nlohmann::json SpikeMonitor::state() const {
  return {{"loss", std::vector<double>(loss_.begin(), loss_.end())},
          {"grad_norm", std::vector<double>(grad_norm_.begin(), grad_norm_.end())}};
}

void SpikeMonitor::restore(const nlohmann::json& st) {
  loss_.clear();
  grad_norm_.clear();
  if (!st.is_object()) return;
  for (const double x : st.value("loss", std::vector<double>{})) loss_.push_back(x);
  for (const double x : st.value("grad_norm", std::vector<double>{})) grad_norm_.push_back(x);
  if (loss_.size() != grad_norm_.size()) throw std::runtime_error("the checkpoint's spike window is damaged (loss and grad_norm differ in length)");
  while (static_cast<int64_t>(loss_.size()) > cfg_.window) {  // a resume with a smaller spike_window keeps the newest
    loss_.pop_front();
    grad_norm_.pop_front();
  }
}

}  // namespace gf
