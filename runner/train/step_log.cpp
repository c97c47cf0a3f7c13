// The step lines of the log and metrics.jsonl (Trainer::log_step): loss, learning rate, gradient
// norm, loss scale, timing and throughput, the MoE router's figures, the pipeline bubble, progress.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "runner/report/logging.h"
#include "runner/report/metrics_log.h"
#include "runner/train/trainer.h"

namespace gf {

namespace {

std::string hms(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", static_cast<int>(t / 3600), static_cast<int>(t / 60 % 60), static_cast<int>(t % 60));
  return buf;
}

std::string progress_bar(double frac, int width = 20) {
  std::string bar;
  const int full = static_cast<int>(frac * width + 1e-9);
  for (int i = 0; i < width; ++i) bar += i < full ? "\u2588" : " ";
  return bar;
}

}  // namespace

// Megatron-LM's training_log line (megatron/training.py, core_r0.6.0), so that its users' log parsers read ours:
// the loss is the mean over the interval's steps that updated (Megatron's total_loss_dict over advanced
// iterations), the time the interval's mean, the learning rate and loss scale those of the step printed.
// Megatron prints a loss only when it is > 0, and "number of nan iterations" counts steps whose loss was not
// finite, which stop a run here (0).
void Trainer::log_step_megatron(int64_t step, const StepResult& r, const IntervalRates& x) {
  std::string line = fmt::format(" iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time per iteration (ms): "
                                 "{:.1f} | learning rate: {:.3E} | global batch size: {:5d} |",
                                 step, total_steps_, consumed_after(step), x.step_ms, r.lr, global_batch_);
  const double mean = interval_loss_steps_ > 0 ? interval_loss_sum_ / static_cast<double>(interval_loss_steps_) : 0.0;
  if (mean > 0.0) line += fmt::format(" lm loss: {:.6E} |", mean);
  line += fmt::format(" loss scale: {:.1f} |", r.loss_scale);
  if (std::isfinite(r.grad_norm)) line += fmt::format(" grad norm: {:.3f} |", r.grad_norm);
  line += fmt::format(" number of skipped iterations: {:3d} | number of nan iterations: {:3d} |", interval_skipped_, 0);
  spdlog::info("{}", line);
}

void Trainer::log_step(int64_t step, const StepResult& r, const Interval& iv, double steady_ms_per_step) {
  const IntervalRates x =
      interval_rates(iv, static_cast<double>(global_batch_ * cfg_.model.seq_length), static_cast<double>(global_batch_),
                     model_->flops_per_step(global_batch_), ctx_.world().size(), peak_.tflops);
  const int64_t epoch = steps_per_epoch_ > 0 ? (step - 1) / steps_per_epoch_ + 1 : 1;
  const int64_t epochs = steps_per_epoch_ > 0 ? (total_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_ : 1;
  const double frac = static_cast<double>(step) / total_steps_;
  const double eta = steady_ms_per_step / 1000.0 * static_cast<double>(total_steps_ - step);
  const std::string span = iv.startup                ? fmt::format("step {} alone: start-up", iv.last_step)
                           : iv.steps() == 1         ? fmt::format("step {}", iv.last_step)
                                                     : fmt::format("mean of steps {}-{}", iv.first_step, iv.last_step);
  // An overflowing fp16 step has no finite gradient norm to show (the sum of squares is inf or NaN).
  const std::string grad_norm = std::isfinite(r.grad_norm) ? fmt::format("{:.4f}", r.grad_norm) : "overflow";
  if (cfg_.megatron_log) log_step_megatron(step, r, x);
  else spdlog::info("{{ Epoch:[{:3d}/{:3d}], step:[{:5d}/{:5d}], loss: {:.6f}, lr: {:.6e}, grad_norm: {}, "
               "loss_scale: {}{}, per_step_time: {:.1f} ms ({}), tokens/s: {:.1f}, samples/s: {:.2f}, "
               "TFLOP/s: {:.4f}, MFU: {:.2f}% }}",
               epoch, epochs, step, total_steps_, r.loss, r.lr, grad_norm, r.loss_scale,
               r.spike ? (r.skipped ? " (spike, step skipped)" : " (spike)") : r.skipped ? " (overflow, step skipped)" : "", x.step_ms, span, x.tokens_per_s, x.samples_per_s, x.tflops,
               100.0 * x.mfu);
  interval_loss_sum_ = 0.0;  // the next line's interval starts here (Megatron's line means over it)
  interval_loss_steps_ = interval_skipped_ = 0;
  if (!iv.startup && x.mfu > 1.0 && !mfu_warned_) {
    // Not a share of anything: the peak is below what the run reaches. Said once, with what to do.
    mfu_warned_ = true;
    const std::string fix = peak_.measured
        ? "the probe measured its FMA kernel in a slow moment (other processes, a throttled CPU): re-run "
          "build/bin/machine_probe on a quiet machine, or set runner_config.peak_tflops"
        : cfg_.peak_tflops > 0 ? "raise runner_config.peak_tflops to this machine's hardware peak (build/bin/machine_probe "
                                 "measures it)"
                               : "run build/bin/machine_probe, or set runner_config.peak_tflops";
    spdlog::warn("MFU {:.1f}% is above 100%: this run reaches {:.4f} TFLOP/s per rank, more than the peak it divides by "
                 "({:.4g} TFLOP/s, {}); {}",
                 100.0 * x.mfu, x.tflops, peak_.tflops, peak_.source, fix);
  }
  if (!r.moe.empty()) {
    int64_t dropped = 0, assigned = 0;
    double imbalance = 0;
    for (const StepResult::MoeLayer& m : r.moe) {
      dropped += m.dropped;
      assigned += m.assignments;
      imbalance = std::max(imbalance, static_cast<double>(m.tokens_max) / std::max(m.tokens_mean, 1e-300));
    }
    spdlog::info("moe: aux_loss: {:.6f} (x{}), z_loss: {:.6f} (x{}), objective: {:.6f}, tokens per expert max/mean: "
                 "{:.3f} (worst of {} layers), dropped: {} of {} assignments",
                 r.aux_loss, cfg_.model.moe.aux_loss_factor, r.z_loss, cfg_.model.moe.z_loss_factor, r.objective,
                 imbalance, r.moe.size(), dropped, assigned);
  }
  if (r.bubble >= 0)
    spdlog::info("pipeline: {} over {} stages{}, {} micro-batches: bubble {:.1f}% measured (the time a stage did not compute "
                 "over the slowest stage's time in the schedule, mean of the stages; worst stage {:.1f}%), {:.1f}% {} (equal stages)",
                 pipeline::scheduler_name(sched_), shape_.stages,
                 shape_.chunks > 1 ? fmt::format(" x {} chunks", shape_.chunks) : std::string(), shape_.micro_batches,
                 100.0 * r.bubble, 100.0 * r.bubble_max, 100.0 * r.bubble_analytic,
                 sched_ == pipeline::Scheduler::kFile ? "simulated" : "analytic");
  if (!cfg_.megatron_log)
    spdlog::info("{:5.1f}% |{}| {:.2f} samples/s/p  ETA {}", 100.0 * frac, progress_bar(frac),
                 x.samples_per_s / ctx_.world().size(), hms(eta));
  const PerRank ranks = per_rank(r.local_loss);  // a collective: before the rank-0-only part
  if (metrics_) {
    nlohmann::json j = {{"step", step}, {"epoch", epoch}, {"loss", r.loss}, {"lr", r.lr},
                        {"grad_norm", r.grad_norm}, {"loss_scale", r.loss_scale}, {"skipped", r.skipped},
                        {"consumed_samples", consumed_after(step)},
                        {"interval_steps", iv.steps()}, {"startup", iv.startup},
                        {"step_ms", x.step_ms}, {"tokens_per_s", x.tokens_per_s}, {"samples_per_s", x.samples_per_s},
                        {"tflops", x.tflops}, {"mfu", x.mfu}, {"peak_rss_bytes", ranks.rss},
                        {"rank_loss_sum", ranks.loss}};
    if (!r.moe.empty()) {
      j["aux_loss"] = r.aux_loss;
      j["z_loss"] = r.z_loss;
      j["objective"] = r.objective;
      nlohmann::json layers = nlohmann::json::array();
      for (const StepResult::MoeLayer& m : r.moe)
        layers.push_back({{"layer", m.layer}, {"aux_loss", m.aux}, {"z_loss", m.z}, {"tokens_max", m.tokens_max},
                          {"tokens_mean", m.tokens_mean}, {"dropped", m.dropped}, {"assignments", m.assignments},
                          {"tokens_per_expert", m.tokens},
                          {"margin", std::isfinite(m.margin) ? nlohmann::json(m.margin) : nlohmann::json()}});
      j["moe"] = layers;
    }
    if (cfg_.skip_data.enabled || cfg_.spikes.enabled()) j["spike"] = r.spike;
    if (r.bubble >= 0) {
      j["bubble"] = r.bubble;
      j["bubble_max"] = r.bubble_max;
      j["bubble_analytic"] = r.bubble_analytic;
    }
    metrics_->write(j);
  }
}

}  // namespace gf
