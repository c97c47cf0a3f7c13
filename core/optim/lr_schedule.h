// Learning-rate schedules (YAML lr_schedule.type): polynomial, cosine, constant, each with a
// linear warmup. Step s counts optimizer steps from 1: during warmup (s <= W)
// lr = learning_rate * s / W; after it, with progress p = (s - W) / (total - W) clamped to [0, 1],
//   polynomial: lr_end + (learning_rate - lr_end) * (1 - p)^power
//   cosine:     lr_end + (learning_rate - lr_end) * 0.5 * (1 + cos(pi * p))
//   constant:   learning_rate
#pragma once
#include <cstdint>
#include <string>

namespace gf {

struct LrScheduleConfig {
  std::string type = "constant";
  double learning_rate = 1e-4;
  double lr_end = 0.0;
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;  // used when warmup_steps is 0: W = round(ratio * total)
  int64_t total_steps = -1;   // -1: the run's number of steps
  double power = 1.0;         // polynomial
  // Step s runs at the rate above for s - 1: Megatron's OptimizerParamScheduler steps after each update, so
  // iteration k uses the rate of the k - 1 steps done (its first update in warm-up has rate 0).
  bool from_steps_done = false;
  bool operator==(const LrScheduleConfig&) const = default;
};

class LrSchedule {
 public:
  // run_steps: the total steps of the run, used when total_steps is -1.
  LrSchedule(const LrScheduleConfig& cfg, int64_t run_steps);
  double at(int64_t step) const;
  int64_t warmup() const { return warmup_; }
  int64_t total() const { return total_; }

 private:
  LrScheduleConfig cfg_;
  int64_t warmup_, total_;
};

// Throws std::invalid_argument listing the registered names.
void check_lr_schedule_type(const std::string& type);

}  // namespace gf
