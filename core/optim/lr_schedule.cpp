#include "core/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace gf {

void check_lr_schedule_type(const std::string& type) {
  if (type == "polynomial" || type == "cosine" || type == "constant") return;
  throw std::invalid_argument("lr_schedule.type: unknown type '" + type +
                              "'; registered: constant, cosine, polynomial");
}

LrSchedule::LrSchedule(const LrScheduleConfig& cfg, int64_t run_steps) : cfg_(cfg) {
  check_lr_schedule_type(cfg.type);
  total_ = cfg.total_steps > 0 ? cfg.total_steps : run_steps;
  warmup_ = cfg.warmup_steps > 0 ? cfg.warmup_steps
                                 : static_cast<int64_t>(std::llround(cfg.warmup_ratio * total_));
}

double LrSchedule::at(int64_t optimizer_step) const {
  const int64_t step = cfg_.from_steps_done ? optimizer_step - 1 : optimizer_step;
  const double peak = cfg_.learning_rate;
  if (warmup_ > 0 && step <= warmup_) return peak * static_cast<double>(step) / warmup_;
  if (cfg_.type == "constant") return peak;
  const int64_t span = total_ - warmup_;
  const double p = span > 0 ? std::clamp(static_cast<double>(step - warmup_) / span, 0.0, 1.0) : 1.0;
  if (cfg_.type == "cosine")
    return cfg_.lr_end + (peak - cfg_.lr_end) * 0.5 * (1.0 + std::cos(M_PI * p));
  return cfg_.lr_end + (peak - cfg_.lr_end) * std::pow(1.0 - p, cfg_.power);
}

}  // namespace gf
