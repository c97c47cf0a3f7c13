// The Trainer's step loop: run() (stop signals, steps, log lines, evaluation), one optimizer step
// (train_step), evaluation, stopping with a checkpoint. The step lines of the log and metrics.jsonl are
// in runner/train/step_log.cpp; construction and the
// reports about the run are in runner/train/trainer_setup.cpp, save_weights in runner/train/weight_gather.cpp.
#include "runner/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/math/parallel_memory.h"
#include "core/trace/trace.h"
#include "runner/report/logging.h"
#include "runner/report/metrics_log.h"
#include "runner/report/profiler.h"
#include "runner/train/stop_signals.h"

namespace gf {

namespace {

// Seconds `f` takes.
template <typename F>
double timed_s(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

bool Trainer::eval_due(int64_t step) const {
  if (step == total_steps_) return true;
  if (cfg_.eval_step_interval > 0 && step % cfg_.eval_step_interval == 0) return true;
  return cfg_.eval_epoch_interval > 0 && steps_per_epoch_ > 0 && step % (cfg_.eval_epoch_interval * steps_per_epoch_) == 0;
}

void Trainer::read_micro_batches(BatchSource& src, int64_t first) {
  const int64_t n = cfg_.batch_size * (cfg_.model.seq_length + 1);
  for (int64_t i = 0; i < micro_batches_; ++i) src.read(micro_first(first, i), cfg_.batch_size, tokens_.data() + i * n);
}

double Trainer::trained_targets_read(const BatchSource& src) {
  const int64_t T = cfg_.model.seq_length;
  if (!src.has_loss_mask() && !cfg_.model.documents.eod_mask_loss) return static_cast<double>(global_batch_ * T);
  auto n = static_cast<double>(trained_targets(cfg_.model, tokens_.data(), micro_batches_ * cfg_.batch_size, T));
  // Every context-parallel rank read the same whole samples: the count is summed over data parallel only.
  ctx_.group(GridAxis::kDp).allreduce_sum(&n, 1);
  // A global batch whose every target is masked trains nothing (its loss and gradients are 0).
  return std::max(n, 1.0);
}

// A test hook (tests/integration/resume_batch.sh): with GF_SAMPLE_TRACE=<file> in the environment each
// rank appends "step <s> rank <r> samples <first> <count>" for every micro-batch it reads for training.
void Trainer::trace_samples(int64_t step) const {
  static const char* path = std::getenv("GF_SAMPLE_TRACE");
  if (!path || !*path) return;
  std::string lines;
  for (int64_t i = 0; i < micro_batches_; ++i)
    lines += fmt::format("step {} rank {} samples {} {}\n", step, ctx_.world_rank(), micro_first(batch_first(step), i),
                         cfg_.batch_size);
  if (FILE* f = std::fopen(path, "a")) {  // one write per step: lines of several ranks do not interleave
    std::fwrite(lines.data(), 1, lines.size(), f);
    std::fclose(f);
  }
}

// This step's micro-batches through the engine: the gradients add up in the arena (without a
// pipeline the data-parallel reduction starts during the last one's backward). Returns the summed
// token loss (over the stages), and with a pipeline the step's bubble.
double Trainer::run_micro_batches(int64_t step, float scale, StepResult& r) {
  const int64_t n = cfg_.batch_size * (cfg_.model.seq_length + 1);
  trace::Span schedule("pipeline", pipelined() ? "pipeline schedule" : "micro-batches");
  const auto t0 = std::chrono::steady_clock::now();
  double loss_sum = engine_->train(
      [&](int i) { return StepEngine::Micro{tokens_.data() + i * n, StepInfo{step, micro_first(batch_first(step), i), true}}; },
      scale);
  r.local_loss = loss_sum;
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  schedule.end();
  moe_acc_ = engine_->moe_stats();
  if (!pipelined()) return loss_sum;
  trace::Span reductions("pipeline", "pipeline reductions");  // loss, bubble (the tied embedding: grad sync)
  const Communicator& pp = ctx_.group(GridAxis::kPp);
  pp.allreduce_sum(&loss_sum, 1);  // the last stage's
  // The bubble as the schedule's analytic one counts it: over one window for every stage (the
  // slowest stage's time in the schedule; a stage that finishes early idles until the step's
  // collectives), the part a stage did not compute.
  double makespan = run_s;
  pp.allreduce_max(&makespan, 1);
  double b[2] = {1.0 - engine_->compute_seconds() / std::max(makespan, 1e-12), 0};
  b[1] = b[0];
  pp.allreduce_sum(&b[0], 1);
  pp.allreduce_max(&b[1], 1);
  r.bubble = b[0] / ctx_.size(GridAxis::kPp);
  r.bubble_max = b[1];
  r.bubble_analytic = bubble_expected_;
  return loss_sum;
}

StepResult Trainer::train_step(int64_t step) {
  StepResult r;
  r.loss_scale = loss_scale_;
  // The step timeline's spans (runner/report/profiler.h): the phases of the step, each a direct child of
  // the step's span, so that together they account for its time.
  {
    trace::Span span("data", "data");
    read_micro_batches(*data_, batch_first(step));
    trace_samples(step);
  }
  const double global_tokens = trained_targets_read(*data_);
  float* grads = model_->grads();
  {
    trace::Span span("step", "zero grads");
    const int64_t n = model_->params().total_floats();
    if (sync_->stage() >= 2) {
      // ZeRO-2 and 3: the pages given back read as zeros; the other ranks' slices stay away until the
      // backward writes them. Only the partial pages at the two ends are written.
      const int64_t edge = std::min<int64_t>(n, 4096);
      parallel_zero(grads, edge);
      parallel_zero(grads + n - edge, edge);
      release_pages(grads, grads + n);
    } else {
      parallel_zero(grads, n);  // 124M floats for GPT-2 124M: on every thread
    }
  }
  {
    trace::Span span("step", "grad sync begin");
    sync_->begin_step(grads);
  }
  const auto scale = static_cast<float>(loss_scale_ / global_tokens);
  moe_acc_.clear();
  double loss_sum = run_micro_batches(step, scale, r);
  {
    trace::Span span("step", "loss all-reduce");
    ctx_.data_like().allreduce_sum(&loss_sum, 1);
  }
  {
    trace::Span span("step", "grad sync");  // the data-parallel reduction's rest (buckets not done in backward)
    sync_->finish();
  }
  r.loss = loss_sum / global_tokens;
  {
    trace::Span span("step", "moe stats");
    gather_moe_stats(r);
  }
  // From here on only this rank's shard of the gradients is used (all of them without ZeRO).
  if (loss_scale_ != 1.0) {
    trace::Span span("step", "unscale grads");
    for (const ArenaRange& s : sync_->shards())
      scale_inplace(grads + s.begin, s.end - s.begin, static_cast<float>(1.0 / loss_scale_));
  }
  {
    trace::Span span("step", "grad norm");
    r.grad_norm = std::sqrt(sync_->global_sq_norm(grads));
  }
  r.lr = lr_->at(step);
  if (!std::isfinite(r.grad_norm) && cfg_.loss_scale.dynamic) {
    r.skipped = true;
    ++skipped_steps_;
    good_steps_ = 0;
    loss_scale_ = std::max(1.0, loss_scale_ / cfg_.loss_scale.factor);
    return r;
  }
  if (spike_skips_step(r)) return r;
  optimizer_update(step, r);
  return r;
}

// MindFormers' data skip: a global norm above the threshold updates nothing (the next step reads the
// next batch), counted. The running statistic: a spike warned, skipped like that, or stopped at (no
// update; the run ends before it). A step without a spike resets the count and joins the window.
bool Trainer::spike_skips_step(StepResult& r) {
  bool skip = false;
  if (cfg_.skip_data.enabled && std::isfinite(r.grad_norm) && r.grad_norm > cfg_.skip_data.threshold) {
    r.spike = skip = true;
    r.spike_why = fmt::format("global norm {:.4f} above monitor_config.global_norm_spike_threshold {}", r.grad_norm,
                              cfg_.skip_data.threshold);
  }
  if (cfg_.spikes.enabled()) {
    trace::Span span("step", "spike check");
    if (const SpikeMonitor::Verdict v = spikes_->judge(r.loss, r.grad_norm); v.any()) {
      r.spike_why += (r.spike ? "; " : "") + v.describe(r.loss, r.grad_norm, cfg_.spikes, cfg_.spikes.window);
      r.spike = true;
      skip = skip || cfg_.spikes.action == SpikeAction::kSkip;
      r.spike_stop = cfg_.spikes.action == SpikeAction::kStop;
    } else if (!r.spike) {
      spikes_->record(r.loss, r.grad_norm);
    }
  }
  if (r.spike_stop) return true;  // the run ends before this step: nothing counted
  if (r.spike) spike_since_save_ = true;
  if (!skip) {
    spikes_in_a_row_ = 0;
    return false;
  }
  r.skipped = true;
  ++skipped_steps_;
  ++spikes_in_a_row_;
  return true;
}

// Clip (inside the update's pass), AdamW on this rank's shard, the ZeRO all-gather, the loss scale's growth.
void Trainer::optimizer_update(int64_t step, const StepResult& r) {
  float* grads = model_->grads();
  AdamWStepExtras extras;
  if (cfg_.use_clip_grad) {  // the clipped gradient is computed inside the update's pass
    // Its span is the coefficient only: the multiply is in the optimizer's span.
    trace::Span span("step", "grad clip");
    const double coef = clip_coefficient(r.grad_norm, cfg_.max_grad_norm);
    if (coef < 1.0) extras.grad_scale = static_cast<float>(coef);
  }
  trace::Span opt_span("step", "optimizer");
  // Without ZeRO this rank updates every weight, so the update also writes the weights' bf16/fp16
  // copy (under ZeRO the next forward converts the gathered weights).
  float* weights = model_->weights();
  if (optimizer_updates_every_weight() && model_->weight_copy() != nullptr) {
    extras.low = model_->weight_copy();
    extras.low_dtype = model_->weight_copy_dtype();
  }
  for (const auto& o : opts_) o->step(weights, grads, r.lr, step - skipped_steps_, extras);
  opt_span.end();
  if (cfg_.model.moe.expert_bias) update_expert_bias(weights, r);
  {
    trace::Span span("step", "param all-gather");  // ZeRO: the updated shards to every rank
    sync_->allgather_params(weights);
  }
  if (extras.low != nullptr) model_->weight_copy_is_current();
  if (cfg_.loss_scale.dynamic && ++good_steps_ >= cfg_.loss_scale.window) {
    loss_scale_ *= cfg_.loss_scale.factor;
    good_steps_ = 0;
  }
}

double Trainer::forward_micro_batches(int64_t index) {
  const int64_t n = cfg_.batch_size * (cfg_.model.seq_length + 1);
  auto info = [&](int64_t i) { return StepInfo{0, micro_first(index * global_batch_, i), false}; };
  return engine_->forward_only([&](int i) { return StepEngine::Micro{tokens_.data() + i * n, info(i)}; },
                               static_cast<int>(micro_batches_));
}

double Trainer::evaluate() {
  const int64_t T = cfg_.model.seq_length;
  double sum = 0.0, targets = 0.0;
  for (int64_t i = 0; i < eval_batches_; ++i) {
    read_micro_batches(*eval_data_, i * global_batch_);
    targets += trained_targets_read(*eval_data_);
    sum += forward_micro_batches(i);
  }
  if (pipelined()) ctx_.group(GridAxis::kPp).allreduce_sum(&sum, 1);
  ctx_.data_like().allreduce_sum(&sum, 1);
  if (!eval_data_->has_loss_mask() && !cfg_.model.documents.eod_mask_loss)
    return sum / static_cast<double>(eval_batches_ * global_batch_ * T);
  return sum / targets;
}

int Trainer::run() {
  if (pipelined()) log_pipeline_stages();
  write_run_start();
  if (start_step_ >= total_steps_) {
    spdlog::info("resumed at step {} of {}: nothing left to train (raise runner_config.train_steps or epochs to go on)",
                 start_step_, total_steps_);
    return 0;
  }
  try {
    return train_loop();
  } catch (const CheckpointError& e) {
    if (ctx_.world_rank() == 0) spdlog::error("{}; training stopped", e.what());
    return 4;
  }
}

int Trainer::train_loop() {
  using Clock = std::chrono::steady_clock;
  const auto origin = Clock::now();
  const auto secs = [&origin](Clock::time_point t) { return std::chrono::duration<double>(t - origin).count(); };
  const auto now = [&] { return secs(Clock::now()); };
  const int64_t first = start_step_ + 1;
  const bool saving = cfg_.checkpoint.enabled && cfg_.run_mode != RunMode::kEval;
  // profile: True (runner/report/profiler.h): the step timeline of steps [profile_start_step, profile_stop_step].
  StepProfiler profile(cfg_.profile, ctx_, cfg_.output_dir, first, total_steps_,
                       profile_events_per_step(cfg_.model.num_layers, micro_batches_, shape_.chunks, cfg_.profile.communication,
                                               cfg_.profile.ops));
  const auto planned = static_cast<double>(model_->activation_bytes());
  profile.before_interval_close(first - 1);
  profile.before_interval_opens();
  Clock::time_point t = Clock::now();
  IntervalMeter meter(secs(t), first);
  profile.interval_opens(first, t);
  for (int64_t step = first; step <= total_steps_; ++step) {
    // The step's span: from here to the close of its interval (the log line, evaluation and
    // checkpoint after it are spans of their own).
    trace::Span step_span(trace::kOn, "step", "step %lld", static_cast<long long>(step));
    step_span.arg("step", static_cast<double>(step)).thread_times();
    trace::memory_counter(planned);
    if (const double stop = stop_signal(); stop != 0) {
      step_span.end();
      profile.finish();
      const std::string saved = final_checkpoint(step - 1, saving);  // a save under way completed first
      spdlog::warn("stopped by signal {} before step {}; {} steps done{}", static_cast<int>(stop), step, step - 1, saved);
      return 128 + static_cast<int>(stop);
    }
    if (saving && cfg_.checkpoint.async_save) {
      trace::Span span("checkpoint", "checkpoint commit");
      finish_checkpoint(false);  // commits a save whose files are written
    }
    const double before[7] = {sent_by(0), sent_by(1), sent_by(2), sent_by(3), sent_by(4), sent_by(5), sent_by(6)};
    const double messages_before = messages_sent();
    const auto step_t0 = std::chrono::steady_clock::now();
    const StepResult r = train_step(step);
    step_seconds_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - step_t0).count());
    for (int g = 0; g < 7; ++g) step_sent_[g] += sent_by(g) - before[g];
    step_messages_ += messages_sent() - messages_before;
    ++steps_counted_;
    meter.step_done();
    if (!finite_step(r)) {
      step_span.end();
      profile.finish();
      report_nonfinite(step, r);
      finish_checkpoint(true);
      return 3;
    }
    if (r.spike && spike_stops_run(step, r)) {
      step_span.end();
      profile.finish();
      if (r.spike_stop)
        spdlog::error("step {}: a spike (monitor_config.spike_action: stop); training stopped before its update{}", step,
                      final_checkpoint(step - 1, saving));
      else
        spdlog::error("step {}: {} steps in a row skipped for spikes (monitor_config.global_norm_spike_count_threshold {}); "
                      "training stopped{}",
                      step, spikes_in_a_row_, cfg_.skip_data.count_threshold, final_checkpoint(step, saving));
      return 5;
    }
    if (r.skipped) ++interval_skipped_;
    else interval_loss_sum_ += r.loss, ++interval_loss_steps_;
    profile.before_interval_close(step);
    // The first step (start-up: first-touch allocation, oneDNN primitives, cold caches) is reported alone.
    const bool print = step == first || step % cfg_.per_print_times == 0 || step == total_steps_;
    Interval iv;
    if (print) {
      profile.before_interval_opens();
      t = Clock::now();
      iv = meter.close(secs(t));
      profile.interval_opens(step + 1, t);
    }
    // The span ends with the interval (the next one opened at t); the memory counter's reading (/proc, slower on a
    // busy machine: 0.25 ms once under the suite) is taken after it, so it is not counted in the step.
    step_span.end();
    trace::memory_counter(planned);
    if (print) {
      trace::Span span(trace::kOn, "log", "log step %lld", static_cast<long long>(step));
      log_step(step, r, iv, meter.steady_ms_per_step());
    }
    evaluate_and_save(step, saving, meter);
    // After the last profiled step: the trace files (not training time either).
    const double t0 = now();
    if (profile.after_step(step)) meter.exclude(now() - t0);
    if (const std::string why = step < total_steps_ ? exit_due(step, now()) : std::string(); !why.empty()) {
      profile.finish();
      spdlog::info("exiting after step {} of {} ({}){}", step, total_steps_, why, final_checkpoint(step, saving));
      return 0;
    }
  }
  profile.finish();
  finish_checkpoint(true);
  spdlog::info("training finished: {} steps, {} skipped (fp16 overflow or global-norm spike); step {} {:.1f} ms{}", total_steps_, skipped_steps_,
               first, meter.startup().ms_per_step(),
               meter.steady_steps() > 0 ? fmt::format(", then {:.1f} ms per step (mean of steps {}-{}, evaluation{} not counted)",
                                                      meter.steady_ms_per_step(), first + 1, total_steps_,
                                                      saving ? " and checkpoints" : "")
                                        : std::string());
  log_resource_report();
  return 0;
}


// A stop request on any rank (SIGINT/SIGTERM), agreed by all: the signal, or 0.
double Trainer::stop_signal() const {
  double stop = g_stop_signal.load();
  trace::Span span("step", "stop check");
  ctx_.world().allreduce_max(&stop, 1);
  return stop;
}

// A spike's warning, with the step's samples; true when it ends the run: spike_action stop, or
// global_norm_spike_count_threshold skipped spikes in a row.
bool Trainer::spike_stops_run(int64_t step, const StepResult& r) const {
  const char* what = r.spike_stop ? "the run stops before its update" : r.skipped ? "no update, its data skipped" : "updated (spike_action: warn)";
  spdlog::warn("step {}: spike: {}; {} (samples [{}, {}) of the global order){}", step, r.spike_why, what, batch_first(step),
               consumed_after(step), r.skipped ? fmt::format("; {} such step(s) in a row", spikes_in_a_row_) : std::string());
  return r.spike_stop || (r.skipped && spikes_in_a_row_ >= cfg_.skip_data.count_threshold);
}

// After `step`: evaluation when due, and a checkpoint every save_checkpoint_steps steps and after the
// last one (MindSpore's ModelCheckpoint saves at the end too). Neither is training time: the meter
// excludes evaluation, a synchronous save's whole and an asynchronous one's snapshot.
void Trainer::evaluate_and_save(int64_t step, bool saving, IntervalMeter& meter) {
  if (eval_data_ && eval_due(step)) meter.exclude(timed_s([&] { evaluate_and_log(step); }));
  if (saving && (step % cfg_.checkpoint.save_steps == 0 || step == total_steps_)) {
    trace::Span span("checkpoint", cfg_.checkpoint.async_save ? "checkpoint snapshot" : "checkpoint save");
    span.arg("excluded", 1.0);
    meter.exclude(timed_s([&] { save_checkpoint(step); }));
  }
}

// Megatron's clean exits after `step`: why the run ends here, or "" (exit_duration_in_mins: the
// slowest rank's clock, so every rank decides alike).
std::string Trainer::exit_due(int64_t step, double elapsed_s) const {
  if (cfg_.exit_interval > 0 && step % cfg_.exit_interval == 0)
    return fmt::format("runner_config.exit_interval: {}", cfg_.exit_interval);
  if (cfg_.exit_duration_in_mins > 0) {
    double t = elapsed_s;
    ctx_.world().allreduce_max(&t, 1);
    if (t >= 60.0 * cfg_.exit_duration_in_mins)
      return fmt::format("runner_config.exit_duration_in_mins: {}; {:.2f} minutes of training", cfg_.exit_duration_in_mins,
                         t / 60.0);
  }
  return "";
}

// The checkpoint a stopping run leaves: the state after `step` (its last finished step), saved and
// committed unless it is already (a save under way is completed first). Returns the log's words on it.
std::string Trainer::final_checkpoint(int64_t step, bool saving) {
  finish_checkpoint(true);
  if (!saving) return cfg_.run_mode == RunMode::kEval ? "" : "; no checkpoint saved (no CheckpointMonitor in callbacks)";
  if (step <= start_step_)
    return start_step_ > 0 ? "; nothing trained since the checkpoint the run started from" : "; no step finished, no checkpoint";
  if (step > last_saved_step_) {
    trace::Span span("checkpoint", "checkpoint save");
    save_checkpoint(step);
    finish_checkpoint(true);
  }
  return fmt::format("; checkpoint {} of step {} committed (resume_training: True goes on from it)",
                     (std::filesystem::path(checkpoint_root()) / checkpoint_name(step)).string(), step);
}

bool Trainer::finite_step(const StepResult& r) const {
  return std::isfinite(r.loss) && std::isfinite(r.objective) && (std::isfinite(r.grad_norm) || cfg_.loss_scale.dynamic);
}

void Trainer::report_nonfinite(int64_t step, const StepResult& r) const {
  const PerRank ranks = per_rank(r.local_loss);  // a collective: every rank reports the step
  if (std::isfinite(r.loss))
    spdlog::error("step {}: the MoE router's losses are not finite (aux {}, z {})", step, r.aux_loss, r.z_loss);
  spdlog::error("step {}: loss is {} and gradient norm {} (lr {:.3e}); training stopped. Lower "
                "lr_schedule.learning_rate, set runner_wrapper.use_clip_grad: True, or check the data; `gridformer "
                "replay --checkpoint {} --steps {}` tells a deterministic fault (and its first layer output that is "
                "not finite) from the machine's",
                step, r.loss, r.grad_norm, r.lr, last_saved_step_ > 0 ? checkpoint_root() : std::string("<a checkpoint>"), step);
  // The step's line (NaN and inf are written as null), so that a replay can compare it.
  if (metrics_)
    metrics_->write(nlohmann::json{{"step", step}, {"loss", r.loss}, {"grad_norm", r.grad_norm}, {"lr", r.lr},
                                   {"skipped", r.skipped}, {"nonfinite", true}, {"rank_loss_sum", ranks.loss},
                                   {"consumed_samples", consumed_after(step)}});
}

// Evaluation after `step` (do_eval): its log line and metrics.jsonl line.
void Trainer::evaluate_and_log(int64_t step) {
  trace::Span span("eval", "eval");
  span.arg("excluded", 1.0);  // not training time: the meter excludes it
  const double loss = evaluate();
  spdlog::info("eval at step {}: loss {:.6f}, perplexity {:.3f} ({} batches of the validation data)", step, loss,
               std::exp(loss), eval_batches_);
  if (metrics_) metrics_->write(nlohmann::json{{"step", step}, {"eval_loss", loss}, {"ppl", std::exp(loss)}});
}

}  // namespace gf
