#include "runner/trainer.h"

#include "core/gemm_bf16.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include "core/parallel_memory.h"
#include "models/registry.h"
#include "runner/logging.h"
#include "runner/metrics_log.h"
#include "runner/run_info.h"

namespace gf {

std::atomic<int> g_stop_signal{0};

void install_stop_handlers() {
  auto handler = [](int sig) { g_stop_signal.store(sig); };
  std::signal(SIGINT, handler);
  std::signal(SIGTERM, handler);
}

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) { b /= 1024.0; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

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

Trainer::Trainer(const Config& cfg, ParallelContext& ctx, MachineSetup machine)
    : cfg_(cfg), ctx_(ctx), machine_(std::move(machine)) {
  setup(nullptr);
}

Trainer::Trainer(const Config& cfg, ParallelContext& ctx, std::unique_ptr<BatchSource> data)
    : cfg_(cfg), ctx_(ctx) {
  setup(std::move(data));
}

void Trainer::setup(std::unique_ptr<BatchSource> given) {
  const Config& cfg = cfg_;
  model_ = build_model(cfg.model, cfg.batch_size, ctx_);
  if (!cfg.load_checkpoint.empty()) {
    model_->load_hf_checkpoint(cfg.load_checkpoint);
    spdlog::info("loaded weights from {}", cfg.load_checkpoint);
  } else {
    model_->init_weights(static_cast<uint64_t>(cfg.seed));
  }
  global_batch_ = cfg.batch_size * ctx_.grid.dp();
  // How many steps: train_steps if set, else epochs x (samples per epoch / global batch).
  const bool from_config = !given;
  auto probe = given ? std::move(given) : make_batch_source(cfg.train_data, cfg.model, 0, 0, "train_dataset");
  const int64_t epoch_samples = probe->samples_per_epoch();
  steps_per_epoch_ = epoch_samples < 0 ? -1 : epoch_samples / global_batch_;
  if (steps_per_epoch_ == 0)
    throw std::runtime_error("the training data holds " + std::to_string(epoch_samples) + " samples of seq_length + 1 = " +
                             std::to_string(cfg.model.seq_length + 1) + " tokens, fewer than one global batch of " +
                             std::to_string(global_batch_) + "; use more data or lower runner_config.batch_size");
  if (cfg.train_steps > 0) total_steps_ = cfg.train_steps;
  else if (steps_per_epoch_ > 0) total_steps_ = cfg.epochs * steps_per_epoch_;
  else throw std::runtime_error("runner_config.train_steps must be set when the data has no epoch size (RandomTokens)");
  const bool more_epochs = epoch_samples >= 0 && total_steps_ * global_batch_ > epoch_samples;
  data_ = more_epochs && from_config
              ? make_batch_source(cfg.train_data, cfg.model, total_steps_ * global_batch_, 0, "train_dataset")
              : std::move(probe);
  tokens_.resize(static_cast<size_t>(cfg.batch_size * (cfg.model.seq_length + 1)));
  if (cfg.do_eval || cfg.run_mode == "eval") {
    // eval_dataset names its own data, or (data_path empty) the validation split of the training data.
    DatasetConfig e = cfg.eval_data;
    if (e.data_path.empty()) {
      e = cfg.train_data;
      e.shuffle = false;
    }
    eval_data_ = make_batch_source(e, cfg.model, cfg.eval_data.eval_iters * global_batch_, 1, "eval_dataset");
  }
  sync_ = std::make_unique<GradientSync>(model_->params(), ctx_, cfg.parallel.gradient_aggregation_group,
                                         cfg.parallel.optimizer_shard, cfg.parallel.use_seq_parallel);
  model_->set_grad_ready_hook([this](int64_t offset) { sync_->grads_ready_from(offset); });
  opt_ = std::make_unique<AdamW>(model_->params(), cfg.adamw, sync_->shard_begin(), sync_->shard_end());
  lr_ = std::make_unique<LrSchedule>(cfg.lr, total_steps_);
  loss_scale_ = cfg.loss_scale.value;
  if (ctx_.world_rank == 0) {
    std::filesystem::create_directories(cfg.output_dir);
    metrics_ = std::make_unique<MetricsLog>(std::filesystem::path(cfg.output_dir) / "metrics.jsonl");
  }
  if (machine_.gemm_backend.empty()) {  // built without a machine setup (tests, benchmarks)
    machine_.cpu = cpu_model_name();
    machine_.probe_note = "no machine probe looked up";
    machine_.gemm_backend = gemm_backend_name(gemm_backend());
    machine_.gemm_reason = "the process's setting; " + machine_.probe_note;
  }
  peak_ = choose_peak(cfg.peak_tflops, cfg.model.compute_dtype, machine_);
  log_setup();
}

Trainer::~Trainer() = default;

void Trainer::log_setup() const {
  const auto& m = cfg_.model;
  int64_t nparams = 0;
  for (const auto& p : model_->params().specs()) nparams += p.global_numel();
  const bool vocab_split = !m.vocab_emb_dp && ctx_.grid.tp() > 1;
  const int64_t vp = m.padded_vocab(vocab_split ? ctx_.grid.tp() : 1);
  spdlog::info("model {}{} ({}): {} layers, hidden {}, heads {}, vocab {}, seq {}, {} parameters",
               cfg_.model_name.empty() ? "" : cfg_.model_name + ": ", m.arch, m.type, m.num_layers, m.hidden_size,
               m.num_heads, m.vocab_size, m.seq_length, nparams);
  if (vp != m.vocab_size)
    spdlog::info("vocabulary {} padded to {} (a multiple of {}{}); the {} padding logits are masked out of the softmax, "
                 "so the loss is that of the {}-token vocabulary",
                 m.vocab_size, vp, m.vocab_pad_multiple * (vocab_split ? ctx_.grid.tp() : 1),
                 vocab_split ? fmt::format(" = {} x model_parallel {}, split by vocabulary: vocab_emb_dp False",
                                           m.vocab_pad_multiple, ctx_.grid.tp())
                             : std::string(""),
                 vp - m.vocab_size, m.vocab_size);
  if (ctx_.grid.tp() > 1)
    spdlog::info("tensor parallel over {} ranks: attention heads and MLP split by columns/rows; embedding and LM head {}; "
                 "sequence parallel {}",
                 ctx_.grid.tp(), vocab_split ? "split by vocabulary" : "replicated (vocab_emb_dp True)",
                 m.use_seq_parallel ? fmt::format("on ({} of {} tokens per rank in LayerNorm/dropout)",
                                                  m.seq_length / ctx_.grid.tp(), m.seq_length)
                                    : std::string("off"));
  spdlog::info("layout: {}; micro batch {} per rank, global batch {} samples ({} tokens)", ctx_.grid.describe(),
               cfg_.batch_size, global_batch_, global_batch_ * m.seq_length);
  spdlog::info("data: {}", data_->describe());
  const double pbytes = 4.0 * static_cast<double>(model_->params().total_floats());
  spdlog::info("memory on rank {}: parameters {}, gradients {}, optimizer state {} (AdamW moments{}), "
               "activations {} (planned{})",
               ctx_.world_rank, human_bytes(pbytes), human_bytes(pbytes), human_bytes(static_cast<double>(opt_->state_bytes())),
               sync_->sharded() ? fmt::format(" of a 1/{} shard, ZeRO-1", ctx_.grid.dp()) : std::string(),
               human_bytes(static_cast<double>(model_->activation_bytes())),
               m.recompute || m.select_recompute
                   ? fmt::format("; {} recompute of {} layer(s)", m.recompute ? "full" : "selective",
                                 m.recompute_num_layers < 0 ? m.num_layers : std::min(m.num_layers, m.recompute_num_layers))
                   : std::string("; no recompute"));
  if (m.compute_dtype != "float32")
    spdlog::info("mixed precision: matrix products in {} ({}), {}; master weights, gradients, gradient reduction, "
                 "AdamW, LayerNorm and softmax in float32; a {} copy of the weights ({}) is {}; "
                 "loss scale {}",
                 m.compute_dtype,
                 m.compute_dtype == "bfloat16" ? gemm_bf16_backend_info()
                                               : std::string("emulated: fp16-rounded operands and activations, fp32 GEMM"),
                 m.compute_dtype == "bfloat16" ? "attention reads bf16 q, k, v" : "activations rounded to fp16 values",
                 m.compute_dtype, human_bytes(static_cast<double>(model_->weight_copy_bytes())),
                 optimizer_updates_every_weight() ? "written by AdamW's update"
                     : "converted from the gathered weights before each forward (ZeRO)",
                 cfg_.loss_scale.dynamic
                     ? fmt::format("dynamic from {} (x{} after {} good steps, /{} and the step skipped on overflow)",
                                   cfg_.loss_scale.value, cfg_.loss_scale.factor, cfg_.loss_scale.window,
                                   cfg_.loss_scale.factor)
                     : fmt::format("fixed {}", cfg_.loss_scale.value));
  if (ctx_.grid.dp() > 1)
    spdlog::info("data-parallel gradients: {}", sync_->sharded()
        ? std::string("reduce-scatter of the whole arena after backward, all-gather of parameters after the update")
        : fmt::format("{} bucket(s) all-reduced in the background of backward (parallel_config.gradient_aggregation_group)",
                      sync_->buckets().size()));
  spdlog::info("optimizer {} (AdamW: beta1 {}, beta2 {}, eps {}, weight decay {} on 2-D weights); lr schedule {} peak {} "
               "warmup {} total {}; clip {}",
               cfg_.optimizer_type, cfg_.adamw.beta1, cfg_.adamw.beta2, cfg_.adamw.eps, cfg_.adamw.weight_decay,
               cfg_.lr.type, cfg_.lr.learning_rate, lr_->warmup(), lr_->total(),
               cfg_.use_clip_grad ? fmt::format("max_grad_norm {}", cfg_.max_grad_norm) : std::string("off"));
  spdlog::info("fp32 GEMM backend: {} ({})", machine_.gemm_backend, machine_.gemm_reason);
  spdlog::info("MFU relative to {:.4g} TFLOP/s per rank {}", peak_.tflops, peak_.source);
  spdlog::info("training {} steps ({} per epoch); the log lines' step time, tokens/s, samples/s, TFLOP/s and MFU are "
               "averages over the steps since the previous line (step 1, the start-up, alone; evaluation not counted)",
               total_steps_, steps_per_epoch_ > 0 ? std::to_string(steps_per_epoch_) : std::string("unbounded"));
}

bool Trainer::eval_due(int64_t step) const {
  if (step == total_steps_) return true;
  if (cfg_.eval_step_interval > 0 && step % cfg_.eval_step_interval == 0) return true;
  return cfg_.eval_epoch_interval > 0 && steps_per_epoch_ > 0 && step % (cfg_.eval_epoch_interval * steps_per_epoch_) == 0;
}

StepResult Trainer::train_step(int64_t step) {
  StepResult r;
  r.loss_scale = loss_scale_;
  const int64_t T = cfg_.model.seq_length;
  const int64_t first = (step - 1) * global_batch_ + ctx_.coord.dp * cfg_.batch_size;
  data_->read(first, cfg_.batch_size, tokens_.data());
  float* grads = model_->grads();
  const int64_t n = model_->params().total_floats();
  parallel_zero(grads, n);  // 124M floats for GPT-2 124M: on every thread
  sync_->begin_step(grads);
  StepInfo info{step, first, true};
  double loss_sum = model_->forward(tokens_.data(), info);
  const double global_tokens = static_cast<double>(global_batch_ * T);
  model_->backward(static_cast<float>(loss_scale_ / global_tokens));
  ctx_.dp.allreduce_sum(&loss_sum, 1);
  sync_->finish();
  r.loss = loss_sum / global_tokens;
  // From here on only this rank's shard of the gradients is used (all of them without ZeRO).
  float* shard = grads + sync_->shard_begin();
  const int64_t shard_n = sync_->shard_end() - sync_->shard_begin();
  if (loss_scale_ != 1.0) scale_inplace(shard, shard_n, static_cast<float>(1.0 / loss_scale_));
  r.grad_norm = std::sqrt(sync_->global_sq_norm(grads));
  r.lr = lr_->at(step);
  if (!std::isfinite(r.grad_norm) && cfg_.loss_scale.dynamic) {
    r.skipped = true;
    ++skipped_steps_;
    good_steps_ = 0;
    loss_scale_ = std::max(1.0, loss_scale_ / cfg_.loss_scale.factor);
    return r;
  }
  AdamWStepExtras extras;
  if (cfg_.use_clip_grad) {  // the clipped gradient is computed inside the update's pass
    const double coef = clip_coefficient(r.grad_norm, cfg_.max_grad_norm);
    if (coef < 1.0) extras.grad_scale = static_cast<float>(coef);
  }
  // Without ZeRO this rank updates every weight, so the update also writes the weights' bf16/fp16
  // copy (under ZeRO the next forward converts the gathered weights).
  float* weights = model_->weights();
  if (optimizer_updates_every_weight() && model_->weight_copy() != nullptr) {
    extras.low = model_->weight_copy();
    extras.low_dtype = model_->weight_copy_dtype();
  }
  opt_->step(weights, grads, r.lr, step - skipped_steps_, extras);
  sync_->allgather_params(weights);
  if (extras.low != nullptr) model_->weight_copy_is_current();
  if (cfg_.loss_scale.dynamic && ++good_steps_ >= cfg_.loss_scale.window) {
    loss_scale_ *= cfg_.loss_scale.factor;
    good_steps_ = 0;
  }
  return r;
}

void Trainer::log_step(int64_t step, const StepResult& r, const Interval& iv, double steady_ms_per_step) {
  const IntervalRates x =
      interval_rates(iv, static_cast<double>(global_batch_ * cfg_.model.seq_length), static_cast<double>(global_batch_),
                     model_->flops_per_step(global_batch_), ctx_.world.size(), peak_.tflops);
  const int64_t epoch = steps_per_epoch_ > 0 ? (step - 1) / steps_per_epoch_ + 1 : 1;
  const int64_t epochs = steps_per_epoch_ > 0 ? (total_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_ : 1;
  const double frac = static_cast<double>(step) / total_steps_;
  const double eta = steady_ms_per_step / 1000.0 * static_cast<double>(total_steps_ - step);
  const std::string span = iv.startup                ? std::string("step 1 alone: start-up")
                           : iv.steps() == 1         ? fmt::format("step {}", iv.last_step)
                                                     : fmt::format("mean of steps {}-{}", iv.first_step, iv.last_step);
  // An overflowing fp16 step has no finite gradient norm to show (the sum of squares is inf or NaN).
  const std::string grad_norm = std::isfinite(r.grad_norm) ? fmt::format("{:.4f}", r.grad_norm) : "overflow";
  spdlog::info("{{ Epoch:[{:3d}/{:3d}], step:[{:5d}/{:5d}], loss: {:.6f}, lr: {:.6e}, grad_norm: {}, "
               "loss_scale: {}{}, per_step_time: {:.1f} ms ({}), tokens/s: {:.1f}, samples/s: {:.2f}, "
               "TFLOP/s: {:.4f}, MFU: {:.2f}% }}",
               epoch, epochs, step, total_steps_, r.loss, r.lr, grad_norm, r.loss_scale,
               r.skipped ? " (overflow, step skipped)" : "", x.step_ms, span, x.tokens_per_s, x.samples_per_s, x.tflops,
               100.0 * x.mfu);
  spdlog::info("{:5.1f}% |{}| {:.2f} samples/s/p  ETA {}", 100.0 * frac, progress_bar(frac),
               x.samples_per_s / ctx_.world.size(), hms(eta));
  if (metrics_) {
    nlohmann::json j = {{"step", step}, {"epoch", epoch}, {"loss", r.loss}, {"lr", r.lr},
                        {"grad_norm", r.grad_norm}, {"loss_scale", r.loss_scale}, {"skipped", r.skipped},
                        {"interval_steps", iv.steps()}, {"startup", iv.startup},
                        {"step_ms", x.step_ms}, {"tokens_per_s", x.tokens_per_s}, {"samples_per_s", x.samples_per_s},
                        {"tflops", x.tflops}, {"mfu", x.mfu}};
    metrics_->write(j);
  }
}

// One line before the first step: what ran, where, with what (metrics.jsonl readers select the
// step lines by their "loss" key and skip it).
void Trainer::write_run_start() {
  if (!metrics_) return;
  const ProcessGrid& g = ctx_.grid;
  nlohmann::json j = {
      {"event", "run_start"},
      {"time", iso8601_utc_now()},
      {"config_hash", fnv1a64_hex(dump_resolved(cfg_))},
      {"git_commit", build_git_commit()},
      {"layout", {{"dp", g.dp()}, {"mp", g.tp()}, {"pp", g.pp()}, {"sp", cfg_.parallel.use_seq_parallel},
                  {"zero", sync_->sharded()}, {"ranks", ctx_.world.size()}}},
      {"cpu", machine_.cpu},
      {"threads", machine_.threads},
      {"compute_dtype", cfg_.model.compute_dtype},
      {"gemm_backend", machine_.gemm_backend},
      {"gemm_backend_reason", machine_.gemm_reason},
      {"peak_tflops", peak_.tflops},
      {"peak_source", peak_.source},
      {"machine_probe", machine_.probe ? nlohmann::json(machine_.probe->path) : nlohmann::json(nullptr)},
      {"train_steps", total_steps_},
      {"global_batch", global_batch_},
      {"seq_length", cfg_.model.seq_length},
      {"per_print_times", cfg_.per_print_times}};
  metrics_->write(j);
}

double Trainer::evaluate() {
  const int64_t T = cfg_.model.seq_length;
  double sum = 0.0;
  for (int64_t i = 0; i < cfg_.eval_data.eval_iters; ++i) {
    const int64_t first = i * global_batch_ + ctx_.coord.dp * cfg_.batch_size;
    eval_data_->read(first, cfg_.batch_size, tokens_.data());
    sum += model_->forward(tokens_.data(), StepInfo{0, first, false});
  }
  ctx_.dp.allreduce_sum(&sum, 1);
  return sum / static_cast<double>(cfg_.eval_data.eval_iters * global_batch_ * T);
}

int Trainer::run() {
  write_run_start();
  const auto origin = std::chrono::steady_clock::now();
  const auto now = [&origin] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count(); };
  IntervalMeter meter(now());
  for (int64_t step = 1; step <= total_steps_; ++step) {
    double stop = g_stop_signal.load();
    ctx_.world.allreduce_max(&stop, 1);
    if (stop != 0) {
      spdlog::warn("stopped by signal {} before step {}; {} steps done", static_cast<int>(stop), step, step - 1);
      return 128 + static_cast<int>(stop);
    }
    const StepResult r = train_step(step);
    meter.step_done();
    if (!std::isfinite(r.loss) || (!std::isfinite(r.grad_norm) && !cfg_.loss_scale.dynamic)) {
      spdlog::error("step {}: loss is {} and gradient norm {} (lr {:.3e}); training stopped. Lower "
                    "lr_schedule.learning_rate, set runner_wrapper.use_clip_grad: True, or check the data",
                    step, r.loss, r.grad_norm, r.lr);
      return 3;
    }
    // Step 1 (start-up: first-touch allocation, oneDNN primitives, cold caches) is reported alone.
    if (step == 1 || step % cfg_.per_print_times == 0 || step == total_steps_) {
      const Interval iv = meter.close(now());
      log_step(step, r, iv, meter.steady_ms_per_step());
    }
    if (eval_data_ && eval_due(step)) {
      const double t0 = now();
      const double loss = evaluate();
      spdlog::info("eval at step {}: loss {:.6f}, perplexity {:.3f} ({} batches of the validation data)", step, loss,
                   std::exp(loss), cfg_.eval_data.eval_iters);
      if (metrics_) metrics_->write(nlohmann::json{{"step", step}, {"eval_loss", loss}, {"ppl", std::exp(loss)}});
      meter.exclude(now() - t0);  // not training time
    }
  }
  spdlog::info("training finished: {} steps, {} skipped for overflow; step 1 {:.1f} ms{}", total_steps_, skipped_steps_,
               meter.startup().ms_per_step(),
               meter.steady_steps() > 0 ? fmt::format(", then {:.1f} ms per step (mean of steps 2-{}, evaluation not counted)",
                                                      meter.steady_ms_per_step(), total_steps_)
                                        : std::string());
  log_resource_report();
  return 0;
}

void Trainer::log_resource_report() {
  // Per rank: peak RSS, bytes sent in the tensor, data and world groups. Gathered by a sum over
  // the world of vectors in which each rank fills its own slot.
  const int W = ctx_.world.size(), me = ctx_.world_rank;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  constexpr int K = 7;
  std::vector<double> v(static_cast<size_t>(K * W), 0.0);
  v[K * me + 0] = 1024.0 * static_cast<double>(ru.ru_maxrss);
  v[K * me + 1] = static_cast<double>(ctx_.tp.stats().bytes_sent);
  v[K * me + 2] = static_cast<double>(ctx_.dp.stats().bytes_sent);
  v[K * me + 3] = static_cast<double>(ctx_.world.stats().bytes_sent);
  v[K * me + 4] = static_cast<double>(opt_->state_bytes());
  v[K * me + 5] = static_cast<double>(model_->activation_bytes());
  v[K * me + 6] = static_cast<double>(model_->weight_copy_bytes());
  ctx_.world.allreduce_sum(v.data(), static_cast<int64_t>(v.size()));
  if (me != 0) return;
  const double steps = static_cast<double>(std::max<int64_t>(1, total_steps_));
  for (int r = 0; r < W; ++r)
    spdlog::info("rank {}: peak RSS {}; sent {} in the tensor group, {} in the data group, {} in the world group "
                 "({} per step in all)",
                 r, human_bytes(v[K * r]), human_bytes(v[K * r + 1]), human_bytes(v[K * r + 2]), human_bytes(v[K * r + 3]),
                 human_bytes((v[K * r + 1] + v[K * r + 2] + v[K * r + 3]) / steps));
  // The same, machine-readable, in output_dir/resources.json.
  nlohmann::json j;
  j["steps"] = total_steps_;
  j["layout"] = ctx_.grid.describe();
  for (int r = 0; r < W; ++r)
    j["ranks"].push_back({{"rank", r}, {"peak_rss_bytes", v[K * r]}, {"tp_bytes_sent", v[K * r + 1]},
                          {"dp_bytes_sent", v[K * r + 2]}, {"world_bytes_sent", v[K * r + 3]},
                          {"optimizer_state_bytes", v[K * r + 4]}, {"planned_activation_bytes", v[K * r + 5]},
                          {"weight_copy_bytes", v[K * r + 6]}});
  std::ofstream(std::filesystem::path(cfg_.output_dir) / "resources.json") << j.dump(1) << "\n";
}

}  // namespace gf
