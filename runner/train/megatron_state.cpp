// Megatron-LM checkpoints as a training run's state (see Trainer::resume_megatron / write_megatron_layout).
//
// In: resume_training from a Megatron checkpoint (pretrain_gpt's --load without --finetune) takes its weights (the
// fp32 master copies under fp16 / bf16), Adam's moments, the iteration (our step), args.consumed_train_samples (where
// the data goes on), Adam's step count (our bias correction counts step - skipped_steps, so the steps Megatron
// skipped for overflow are iteration - Adam's step), fp16's loss scale and its growth count, and checks the schedule
// against the checkpoint's as Megatron's OptimizerParamScheduler does (models/weights/megatron_optimizer.cpp reads
// them). Out: after each of our checkpoints commits, rank 0 reads it back and writes the same state in Megatron's
// layout beside it (models/weights/megatron_save.h), so that Megatron-LM, its converters, or gridformer resume from it.
#include <chrono>
#include <filesystem>

#include "core/io/checkpoint.h"
#include "models/weights/megatron_checkpoint.h"
#include "models/weights/megatron_save.h"
#include "runner/report/logging.h"
#include "runner/train/arena_shard.h"
#include "runner/train/trainer.h"

namespace gf {

namespace fs = std::filesystem;

namespace {

// Megatron's --lr-decay-style for our schedule (the translation's inverse: megatron_args_train.cpp).
std::string megatron_style(const LrScheduleConfig& l) {
  if (l.type == "polynomial" && l.power == 1.0) return "linear";
  return l.type;  // constant, cosine; any other is a style Megatron does not have
}

}  // namespace

void Trainer::resume_megatron(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  if (lora())
    throw std::runtime_error(path + " is a Megatron-LM checkpoint: a LoRA run trains adapters over a base, it resumes from "
                             "its own checkpoints; give it as the base with resume_training False");
  if (stream_)
    throw std::runtime_error("resuming a Megatron-LM checkpoint (" + path + ") under ZeRO-3 is not built: resume at "
                             "optimizer sharding stage 1 or 2 (Megatron's --use-distributed-optimizer is stage 1)");
  auto sink = [this](int k, const TensorPlacement& t, const std::vector<float>& full) {
    std::vector<float> local(static_cast<size_t>(t.numel()));
    Placement::scatter(t, full.data(), local.data());
    for (const auto& op : opts_) {
      AdamW* o = op.get();
      int64_t lo, hi;
      if (shard_part(t, o->shard_begin(), o->shard_end(), lo, hi))
        o->write_moments(k, t.offset + lo - o->shard_begin(), hi - lo, local.data() + lo);
    }
  };
  const MegatronTrainingState s = load_megatron_training(*model_, path, sink);
  const int64_t step = s.iteration;
  const int64_t consumed = s.consumed_samples > 0 || step == 0 ? s.consumed_samples : step * global_batch_;
  if (s.global_batch > 0 && s.global_batch != global_batch_)
    spdlog::info("global batch changes at the resume: {} samples per step up to iteration {}, {} from step {} on; step {} "
                 "reads samples [{}, {}), the first not yet consumed",
                 s.global_batch, step, global_batch_, step + 1, step + 1, consumed, consumed + global_batch_);
  ensure_train_samples(consumed + std::max<int64_t>(0, total_steps_ - step) * global_batch_);
  if (s.scheduler) {  // Megatron's figures in samples, as our schedule's state in steps of the checkpoint's batch
    const int64_t g = s.global_batch > 0 ? s.global_batch : global_batch_;
    if (s.warmup_samples % g != 0 || s.decay_samples % g != 0)
      throw std::runtime_error(s.dir + ": the checkpoint's schedule warms up over " + std::to_string(s.warmup_samples) +
                               " and decays over " + std::to_string(s.decay_samples) + " samples, not whole global "
                               "batches of " + std::to_string(g) + ": gridformer's schedule changes at step boundaries");
    std::string type = s.decay_style;
    double power = cfg_.lr.power;
    if (type == "linear") type = "polynomial", power = 1.0;
    if (type != "constant" && type != "cosine" && type != "polynomial")
      throw std::runtime_error(s.dir + ": the checkpoint's lr_decay_style is " + s.decay_style +
                               "; gridformer runs constant, linear and cosine");
    const nlohmann::json saved = {{"step", step},
                                  {"lr_schedule",
                                   {{"type", type}, {"learning_rate", s.max_lr}, {"lr_end", s.min_lr},
                                    {"warmup", s.warmup_samples / g}, {"total", s.decay_samples / g}, {"power", power},
                                    {"from_steps_done", true}}}};
    reconcile_schedule(saved, s.dir);
  }
  start_step_ = last_saved_step_ = step;
  consumed_base_ = consumed;
  skipped_steps_ = step - s.adam_step;
  if (s.grad_scaler) {
    loss_scale_ = s.loss_scale;
    good_steps_ = s.growth_tracker;
  }
  spikes_in_a_row_ = 0;
  resumed_from_ = s.dir;
  spdlog::info("resumed from {} ({}): step {} ({} samples consumed), loss scale {}, {} steps skipped for overflow; read in "
               "{:.2f} s; training continues at step {}",
               s.dir, s.note, step, consumed, loss_scale_, skipped_steps_,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), step + 1);
}

void Trainer::write_megatron_layout(const std::string& ours, int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  MegatronSaveOptions o;
  o.tp = ctx_.size(GridAxis::kTp);
  o.pp = ctx_.size(GridAxis::kPp);
  o.ep = ctx_.size(GridAxis::kEp);
  o.core = cfg_.checkpoint.megatron_use_mcore_models;
  o.transformer_engine = cfg_.checkpoint.megatron_transformer_impl != "local";
  o.grouped_gemm = cfg_.checkpoint.megatron_moe_grouped_gemm;
  o.dtype = cfg_.compute_dtype == ComputeDtype::kBFloat16 ? TorchDtype::kBF16
            : cfg_.compute_dtype == ComputeDtype::kFloat16 ? TorchDtype::kF16
                                                            : TorchDtype::kF32;
  std::string why = lora() ? "a LoRA run's checkpoints hold its adapters, not the model" : megatron_save_problem(cfg_.model, o);
  if (why.empty() && cfg_.parallel.zero_stage >= 1) {  // Megatron's --use-distributed-optimizer
    o.dp = ctx_.size(GridAxis::kDp) * ctx_.size(GridAxis::kCp);  // the distributed optimizer's group: dp x cp
    o.cp = ctx_.size(GridAxis::kCp);
    o.bucket_size = cfg_.checkpoint.megatron_ddp_bucket_size;
    const std::string problem = megatron_distributed_problem(cfg_.model, o);
    o.distributed_optimizer = problem.empty();
    static bool said = false;  // once a run: every save would say the same
    if (!problem.empty() && !said) {
      spdlog::info("CheckpointMonitor megatron_format: the optimizer state is written in the non-distributed form (which "
                   "Megatron-LM loads without --use-distributed-optimizer), not the distributed optimizer's: {}",
                   problem);
      said = true;
    }
  }
  if (!why.empty()) {
    static bool warned = false;  // once a run: every save would say the same
    if (!warned) spdlog::warn("CheckpointMonitor megatron_format: Megatron-LM's layout is not written beside the checkpoints: {}", why);
    warned = true;
    return;
  }
  ckpt::Reader r = ckpt::Reader::open(ours);
  MegatronTrainState tr;
  tr.moment = [&r](int k, const std::string& name) { return r.read_full(kMomentPrefix[k] + name); };
  tr.adam_step = step - skipped_steps_;
  tr.lr = lr_->at(step);
  tr.beta1 = cfg_.adamw.beta1;
  tr.beta2 = cfg_.adamw.beta2;
  tr.eps = cfg_.adamw.eps;
  tr.weight_decay = cfg_.adamw.weight_decay;
  tr.grad_scaler = cfg_.compute_dtype == ComputeDtype::kFloat16;
  tr.loss_scale = loss_scale_;
  tr.growth_tracker = good_steps_;
  tr.global_batch = global_batch_;
  tr.max_lr = cfg_.lr.learning_rate;
  tr.min_lr = cfg_.lr.lr_end;
  tr.warmup_samples = lr_->warmup() * global_batch_;
  tr.decay_samples = lr_->total() * global_batch_;
  tr.num_samples = consumed_after(step);
  tr.wd_incr_samples = total_steps_ * global_batch_;
  tr.decay_style = megatron_style(cfg_.lr);
  o.iteration = step;
  o.consumed_train_samples = consumed_after(step);
  o.train = &tr;
  const std::vector<std::string> files =
      save_megatron(checkpoint_root(), cfg_.model, [&r](const std::string& name) { return r.read_full(name); }, o);
  r.release();
  spdlog::info("Megatron-LM layout written: {} ({}, {} shard file(s) of TP {} x PP {}{}, {}, with the optimizer state{}; "
               "{:.2f} s)", (fs::path(files.front()).parent_path().parent_path()).string(),
               megatron_writes_core(cfg_.model, o) ? "Megatron-core's" : "megatron/model's", files.size(), o.tp, o.pp,
               o.ep > 1 ? " x EP " + std::to_string(o.ep) : std::string(), torch_dtype_name(o.dtype),
               !o.distributed_optimizer ? std::string()
               : megatron_writes_core(cfg_.model, o)
                   ? " of the distributed optimizer (distrib_optim.pt for DP " + std::to_string(o.dp) +
                         (o.bucket_size > 0 ? ", buckets of " + std::to_string(o.bucket_size) : "") + ")"
                   : " of the distributed optimizer (285068c's: model_rng.pt, optim.pt for each of DP " +
                         std::to_string(o.dp) + ")",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace gf
