// The Trainer's construction (model, data, gradient sync, optimizer, schedule, machine setup) and
// what it reports about the run: the set-up lines logged before training, metrics.jsonl's
// run_start line, and the peak memory / communication report after it.
#include <cstdio>
#include <fmt/ranges.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <utility>

#include "core/math/gemm_bf16.h"
#include "models/pipeline_stage.h"
#include "models/registry.h"
#include "runner/report/logging.h"
#include "runner/report/metrics_log.h"
#include "runner/report/run_info.h"
#include "runner/report/plan.h"
#include "runner/report/step_comm.h"
#include "runner/train/trainer.h"

namespace gf {

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
  // The groups' names in the step timeline's communication spans (runner/report/profiler.h).
  micro_batches_ = ctx_.size(GridAxis::kPp) > 1 ? cfg.parallel.micro_batch_num : cfg.gradient_accumulation_steps;
  setup_engine();
  global_batch_ = cfg.batch_size * ctx_.size(GridAxis::kDp) * micro_batches_;
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
  // Built again for the run's samples: more than one epoch, or data without an epoch (a blend of prefixes).
  const bool more_epochs = epoch_samples >= 0 && total_steps_ * global_batch_ > epoch_samples;
  const bool for_the_run = from_config && (more_epochs || (epoch_samples < 0 && cfg.train_data.data_path.size() > 1));
  data_ = for_the_run ? make_batch_source(cfg.train_data, cfg.model, total_steps_ * global_batch_, 0, "train_dataset")
                      : std::move(probe);
  if (for_the_run) built_samples_ = total_steps_ * global_batch_;
  else if (from_config && epoch_samples >= 0) built_samples_ = epoch_samples;
  tokens_.resize(static_cast<size_t>(micro_batches_ * cfg.batch_size * (cfg.model.seq_length + 1)));
  if (cfg.do_eval || cfg.run_mode == RunMode::kEval) {
    // eval_dataset names its own data, or (data_path empty) the validation split of the training data.
    DatasetConfig e = cfg.eval_data;
    if (e.data_path.empty()) {
      e = cfg.train_data;
      e.shuffle = false;
    }
    eval_data_ = make_batch_source(e, cfg.model, cfg.eval_data.eval_iters * global_batch_, 1, "eval_dataset");
    // eval_iters batches, but no sample scored twice: a validation split smaller than eval_iters global batches
    // is read once (Megatron's --eval-iters reads on into further epochs; a perplexity over repeats says less).
    const int64_t epoch = eval_data_->samples_per_epoch();
    eval_batches_ = epoch < 0 ? cfg.eval_data.eval_iters : std::min(cfg.eval_data.eval_iters, std::max<int64_t>(1, epoch / global_batch_));
    if (epoch >= 0 && epoch < global_batch_)
      spdlog::warn("eval: the validation data holds {} samples, fewer than one global batch of {}: its batch repeats "
                   "samples; give it more data (train_dataset.data_loader.split, or eval_dataset.data_loader.data_path)",
                   epoch, global_batch_);
    else if (eval_batches_ < cfg.eval_data.eval_iters)
      spdlog::info("eval: {} batches of the validation data's {} samples (each once), not eval_iters {}", eval_batches_,
                   epoch, cfg.eval_data.eval_iters);
  }
  sync_ = std::make_unique<GradientSync>(
      model_->params(), ctx_, cfg.parallel.gradient_aggregation_group,
      ShardOptions{cfg.parallel.zero_stage, cfg.parallel.shard_degree, model_->weight_unit_starts()},
      cfg.parallel.use_seq_parallel);
  engine_->on_grads_ready([this](int64_t offset) { sync_->grads_ready_from(offset); });
  if (sync_->stage() >= 2) {  // the head's weight (and a tied embedding) gathered and reduced chunk by chunk
    model_->set_fine_units(true);
    engine_->on_unit_ready([this](int64_t offset) { sync_->unit_ready(offset); },
                           [this](int64_t base, int64_t width, const int32_t* ids, const float* rows, int64_t n) {
                             sync_->add_rows(base, width, ids, rows, n);
                           });
  }
  if (pipelined()) sync_->set_pipeline(&ctx_.group(GridAxis::kPp), tied_, ctx_.index(GridAxis::kPp) == 0);
  if (sync_->stage() <= 1) {  // ZeRO-1 keeps its two optimizers (the dense slice, the experts')
    opts_.push_back(std::make_unique<AdamW>(model_->params(), cfg.adamw, sync_->shard_begin(), sync_->shard_end()));
    if (sync_->expert_shard_end() > sync_->expert_shard_begin())
      opts_.push_back(std::make_unique<AdamW>(model_->params(), cfg.adamw, sync_->expert_shard_begin(),
                                              sync_->expert_shard_end()));
  } else {
    for (const ArenaRange& s : sync_->shards())
      opts_.push_back(std::make_unique<AdamW>(model_->params(), cfg.adamw, s.begin, s.end));
  }
  if (sync_->stage() >= 3) {
    CausalLM* m = model_.get();
    stream_ = std::make_unique<WeightStream>(
        sync_->layout(), m->weights(), [m](int64_t b, int64_t e) { m->convert_low(b, e); },
        [m](int64_t b, int64_t e) { m->release_low(b, e); }, cfg.parallel.zero_prefetch);
    model_->set_weight_gate(stream_.get());
  }
  lr_ = std::make_unique<LrSchedule>(cfg.lr, total_steps_);
  loss_scale_ = cfg.loss_scale.value;
  spikes_ = std::make_unique<SpikeMonitor>(cfg.spikes);
  load_initial_state();
  if (stream_) stream_->release_all();  // a load wrote the whole arena: only this rank's slices stay
  if (cfg.checkpoint.enabled && cfg.checkpoint.async_save && cfg.run_mode != RunMode::kEval)
    reserve_snapshot(checkpoint_regions());  // an async_save's copy, held for the whole run
  if (ctx_.world_rank() == 0) {
    std::filesystem::create_directories(cfg.output_dir);
    metrics_ = std::make_unique<MetricsLog>(std::filesystem::path(cfg.output_dir) / "metrics.jsonl");
    if (!cfg.tensorboard_dir.empty() && cfg.run_mode != RunMode::kEval) {  // run_mode eval writes no metrics lines either
      metrics_->add_event_writer(std::make_unique<tensorboard::EventWriter>(cfg.tensorboard_dir));
      spdlog::info("TensorBoard ({}): scalars of metrics.jsonl's lines to {}; view with `tensorboard --logdir {}`",
                   cfg.tensorboard_dir_from, metrics_->event_writer()->path().string(), cfg.tensorboard_dir);
    }
  }
  if (machine_.gemm_backend.empty()) {  // built without a machine setup (tests, benchmarks)
    machine_.cpu = cpu_model_name();
    machine_.probe_note = "no machine probe looked up";
    machine_.gemm_backend = gemm_backend_name(gemm_backend());
    machine_.gemm_reason = "the process's setting; " + machine_.probe_note;
  }
  peak_ = choose_peak(cfg.peak_tflops, cfg.compute_dtype, machine_);
  log_setup();
}

// This rank's stage: its model chunks over one arena (the whole model without a pipeline), and the
// engine that runs the schedule on them.
void Trainer::ensure_train_samples(int64_t samples) {
  if (built_samples_ <= 0 || samples <= built_samples_) return;  // unbounded, given, or enough
  data_ = make_batch_source(cfg_.train_data, cfg_.model, samples, 0, "train_dataset");
  built_samples_ = samples;
}

void Trainer::setup_engine() {
  const Config& cfg = cfg_;
  if (ctx_.size(GridAxis::kPp) == 1) {
    model_ = build_model(cfg.model, model_layout(cfg), cfg.batch_size, ctx_);
    sched_ = pipeline::Scheduler::k1F1B;
    shape_ = {1, static_cast<int>(micro_batches_), 1};
    stage_layers_ = {cfg.model.num_layers};
    engine_ = std::make_unique<StepEngine>(engine_chunks(*model_), ctx_.group(GridAxis::kPp), sched_, shape_);
    return;
  }
  const ModelEntry& entry = find_model(cfg.model.arch, cfg.model.type);
  const TransformerSpec spec = entry.spec(cfg.model);
  sched_ = cfg.parallel.pipeline_scheduler;
  shape_ = pipeline::schedule_shape(sched_, ctx_.size(GridAxis::kPp), static_cast<int>(micro_batches_),
                                    static_cast<int>(cfg.parallel.pipeline_chunks));
  if (sched_ == pipeline::Scheduler::kFile) shape_ = pipeline::file_shape(cfg.parallel.pipeline_file, shape_);
  const std::string bad = pipeline::check_shape(sched_, shape_);
  if (!bad.empty()) throw std::runtime_error(bad);
  // A schedule file was checked by the layout check already: this only fills lists_.
  if (const std::string e = pipeline::stage_lists(sched_, shape_, cfg.parallel.pipeline_file,
                                                  cfg.parallel.pipeline_schedule_max_live, &lists_, &bubble_expected_);
      !e.empty())
    throw std::runtime_error(e);
  bubble_priced_ = priced_bubble(cfg, lists_, shape_);
  std::vector<int64_t> layers = cfg.parallel.stage_layers;
  if (layers.empty()) {  // an even split (configs read from YAML always carry the resolved one)
    const int64_t k = static_cast<int64_t>(shape_.stages) * shape_.chunks;
    for (int64_t i = 0; i < k; ++i) layers.push_back(cfg.model.num_layers / k + (i < cfg.model.num_layers % k ? 1 : 0));
  }
  stage_layers_ = layers;
  auto stage = std::make_unique<PipelineStage>(spec, entry.names, cfg.model, model_layout(cfg), cfg.batch_size, ctx_,
                                               pipeline_chunk_options(layers, lists_, shape_, ctx_.index(GridAxis::kPp)));
  engine_ = std::make_unique<StepEngine>(engine_chunks(*stage), ctx_.group(GridAxis::kPp),
                                         lists_[static_cast<size_t>(ctx_.index(GridAxis::kPp))], shape_);
  // A tied embedding has a copy on the first stage (the lookup) and the last (the head). ZB-V's V puts both on
  // stage 0, where the two chunks share the one tensor (make_param_table declares it once): nothing to sum.
  if (spec.tied_head && !shape_.v_shape) {
    const TensorPlacement* t = stage->params().find(entry.names(Role::kEmbed, -1));
    if (t != nullptr) tied_ = {t->offset, t->offset + t->numel()};
  }
  model_ = std::move(stage);
}


void Trainer::log_pipeline_stages() const {
  const int P = ctx_.size(GridAxis::kPp);
  std::vector<double> acts(static_cast<size_t>(P), 0.0), params(acts.size(), 0.0);
  acts[static_cast<size_t>(ctx_.index(GridAxis::kPp))] = static_cast<double>(model_->activation_bytes());
  params[static_cast<size_t>(ctx_.index(GridAxis::kPp))] = 4.0 * static_cast<double>(model_->params().total_floats());
  ctx_.group(GridAxis::kPp).allreduce_sum(acts.data(), P);
  ctx_.group(GridAxis::kPp).allreduce_sum(params.data(), P);
  if (ctx_.world_rank() != 0) return;
  const std::vector<int64_t>& layers = stage_layers_;
  spdlog::info("pipeline: {} stages{}, schedule {}{}, {} micro-batches of {} per step and data-parallel rank; {} bubble "
               "{:.1f}% (equal stages), {:.1f}% simulated with each virtual stage's FLOPs", P, shape_.chunks > 1 ? fmt::format(" x {} model chunks", shape_.chunks) : std::string(),
               pipeline::scheduler_name(sched_),
               sched_ == pipeline::Scheduler::kFile ? " " + cfg_.parallel.pipeline_file.path : std::string(),
               shape_.micro_batches, cfg_.batch_size, pipeline::bubble_is_simulated(sched_) ? "simulated" : "analytic",
               100.0 * bubble_expected_, 100.0 * bubble_priced_);
  for (int s = 0; s < P; ++s) {
    std::string ranges;
    for (const StageOptions& c : pipeline_chunk_options(layers, lists_, shape_, s))
        ranges += fmt::format("{}[{}, {}) x {} slot(s)", ranges.empty() ? "" : ", ", c.layer_begin, c.layer_end, c.slots);
    spdlog::info("pipeline stage {} (tensor-parallel rank 0): layers {}{}{}; parameters {}, activations {} (planned)", s,
                 ranges, s == 0 ? ", the embedding" : "",
                 s == pipeline::stage_of(shape_, pipeline::virtual_stages(shape_) - 1) ? ", the final norm, head and loss"
                                                                                      : "",
                 human_bytes(params[static_cast<size_t>(s)]),
                 human_bytes(acts[static_cast<size_t>(s)]));
  }
}

// Names the end-of-document id that reset_position_ids, reset_attention_mask and eod_mask_loss act at
// and where it comes from, and counts it in the first samples of the data: an id that never occurs
// there (a Llama config's eos_token_id 2 over GPT-2 ids, whose end of document is 50256) makes the
// options change nothing, which is said as a warning.
void Trainer::log_documents() const {
  const DocumentConfig& docs = cfg_.model.documents;
  if (!docs.resets() && !docs.eod_mask_loss) return;
  const int64_t eod = cfg_.model.eod_id();
  const std::string from = docs.eod_token_id >= 0 ? "train_dataset.data_loader.eod_token_id"
                                                  : "model_config.eos_token_id (data_loader.eod_token_id unset)";
  std::string what;
  for (const auto& [on, name] : {std::pair{docs.reset_position_ids, "reset_position_ids"},
                                 std::pair{docs.reset_attention_mask, "reset_attention_mask"},
                                 std::pair{docs.eod_mask_loss, "eod_mask_loss"}})
    if (on) what += (what.empty() ? "" : ", ") + std::string(name);
  const int64_t T1 = cfg_.model.seq_length + 1;
  const int64_t epoch = data_->samples_per_epoch();
  const int64_t n = std::max<int64_t>(1, epoch < 0 ? kEodProbeSamples : std::min(kEodProbeSamples, epoch));
  std::vector<int32_t> tokens(static_cast<size_t>(n * T1));
  data_->read(0, n, tokens.data());
  int64_t count = 0;
  for (int32_t t : tokens) count += (t & ~kNotTrainedBit) == eod;
  if (count > 0) {
    spdlog::info("documents: {} at end-of-document id {} (from {}); it occurs {} times in the first {} samples ({} tokens)",
                 what, eod, from, count, n, n * T1);
    return;
  }
  spdlog::warn("documents: {} act at end-of-document id {} (from {}), which never occurs in the first {} samples ({} "
               "tokens) of the data: they change nothing. Set train_dataset.data_loader.eod_token_id to the data's "
               "end-of-document id (GPT-2 BPE: 50256, what preprocess_data --append-eod writes)",
               what, eod, from, n, n * T1);
}

void Trainer::log_setup() const {
  const auto& m = cfg_.model;
  const ModelLayout& L = model_->layout();
  int64_t nparams = 0;
  for (const ParamSpec& p : model_->params().table().specs()) nparams += p.global_numel();
  const bool vocab_split = L.vocab_parallel();
  const int64_t vp = m.padded_vocab(vocab_split ? ctx_.size(GridAxis::kTp) : 1);
  spdlog::info("model {}{} ({}): {} layers, hidden {}, heads {}, vocab {}, seq {}, {} parameters",
               cfg_.model_name.empty() ? "" : cfg_.model_name + ": ", m.arch, m.type, m.num_layers, m.hidden_size,
               m.num_heads, m.vocab_size, m.seq_length, nparams);
  if (vp != m.vocab_size)
    spdlog::info("vocabulary {} padded to {} (a multiple of {}{}); the {} padding logits are masked out of the softmax, "
                 "so the loss is that of the {}-token vocabulary",
                 m.vocab_size, vp, m.vocab_pad_multiple * (vocab_split ? ctx_.size(GridAxis::kTp) : 1),
                 vocab_split ? fmt::format(" = {} x model_parallel {}, split by vocabulary: vocab_emb_dp False",
                                           m.vocab_pad_multiple, ctx_.size(GridAxis::kTp))
                             : std::string(""),
                 vp - m.vocab_size, m.vocab_size);
  if (ctx_.size(GridAxis::kTp) > 1)
    spdlog::info("tensor parallel over {} ranks: attention heads and MLP split by columns/rows; embedding and LM head {}; "
                 "sequence parallel {}",
                 ctx_.size(GridAxis::kTp), vocab_split ? "split by vocabulary" : "replicated (vocab_emb_dp True)",
                 L.sequence_parallel ? fmt::format("on ({} of {} tokens per rank in LayerNorm/dropout)",
                                                  m.seq_length / ctx_.size(GridAxis::kTp), m.seq_length)
                                    : std::string("off"));
  const ParallelConfig& pc = cfg_.parallel;
  const std::string cp_core =
      pc.context_parallel <= 1 ? std::string()
      : pc.context_parallel_algo == "hybrid_cp"
          ? fmt::format(" (hybrid_cp: Ulysses {} x ring {})", pc.ulysses_degree_in_cp, pc.context_parallel / pc.ulysses_degree_in_cp)
          : fmt::format(" ({})", pc.context_parallel_algo);
  spdlog::info("layout: {}{}; micro batch {} per rank{}, global batch {} samples ({} tokens)", ctx_.grid().describe(), cp_core,
               cfg_.batch_size,
               micro_batches_ == 1 ? std::string()
                   : fmt::format(", {} micro-batches per step ({}; gradients accumulate over them)", micro_batches_,
                                 pipelined() ? "parallel_config.micro_batch_num" : "runner_config.gradient_accumulation_steps"),
               global_batch_, global_batch_ * m.seq_length);
  spdlog::info("data: {}", data_->describe());
  log_documents();
  const double pbytes = 4.0 * static_cast<double>(model_->params().total_floats());
  spdlog::info("memory on rank {}: parameters {}, gradients {}, optimizer state {} (AdamW moments{}), "
               "activations {} (planned{})",
               ctx_.world_rank(), human_bytes(pbytes), human_bytes(pbytes), human_bytes(static_cast<double>(optimizer_state_bytes())),
               !sync_->sharded() ? std::string()
               : sync_->stage() == 1
                   ? fmt::format(" of a 1/{} shard, ZeRO-1", sync_->layout().shard_group(false).size())
                   : fmt::format(" of 1/{} slices, ZeRO-{}: gradients{} resident only as slices and the units in use",
                                 sync_->layout().shard_group(false).size(), sync_->stage(),
                                 sync_->stage() >= 3 ? " and weights" : ""),
               human_bytes(static_cast<double>(model_->activation_bytes())),
               L.recompute != RecomputePolicy::kNone
                   ? fmt::format("; {} recompute of {} layer(s)", L.recompute == RecomputePolicy::kFull ? "full" : "selective",
                                 L.recomputed_layers(m.num_layers))
                   : std::string("; no recompute"));
  if (lora()) {  // the arena above is the adapters'; the frozen base is held beside it
    double frozen = 0;
    int64_t base_params = 0;
    for (CausalLM* b : model_->frozen_bases()) frozen += 4.0 * static_cast<double>(b->params().total_floats());
    const ModelEntry& entry = find_model(m.arch, m.type);
    const ParamTable base = TransformerLM::make_base_table(entry.spec(m), entry.names);
    for (const ParamSpec& p : base.specs()) base_params += p.global_numel();
    int64_t adapters = 0;
    for (const ParamSpec& p : model_->params().table().specs()) adapters += p.global_numel();
    spdlog::info("LoRA: {} adapter parameters train ({:.2f}% of the model's {}), the base frozen: {} on this rank{}",
                 adapters, 100.0 * static_cast<double>(adapters) / static_cast<double>(base_params), base_params,
                 human_bytes(frozen), m.lora.base_bf16 ? " before its layers are held in bf16 (half of theirs)" : "");
  }
  if (L.low_precision())
    spdlog::info("mixed precision: matrix products in {} ({}), {}; master weights, gradients, gradient reduction, "
                 "AdamW, the norms' statistics and softmax in float32; a {} copy of the weights ({}) is {}; "
                 "loss scale {}",
                 compute_dtype_name(L.compute),
                 L.compute == ComputeDtype::kBFloat16 ? gemm_bf16_backend_info()
                                               : std::string("emulated: fp16-rounded operands and activations, fp32 GEMM"),
                 L.compute == ComputeDtype::kBFloat16
                     ? "attention reads bf16 q, k, v (the fused attention keeps them and its output in bf16 alone); the "
                       "norms' outputs that feed products, the MLP's up product and activation and their gradients are "
                       "kept in bf16"
                     : "activations rounded to fp16 values",
                 compute_dtype_name(L.compute), human_bytes(static_cast<double>(model_->weight_copy_bytes())),
                 optimizer_updates_every_weight() ? "written by AdamW's update"
                     : "converted from the gathered weights before each forward (ZeRO)",
                 cfg_.loss_scale.dynamic
                     ? fmt::format("dynamic from {} (x{} after {} good steps, /{} and the step skipped on overflow)",
                                   cfg_.loss_scale.value, cfg_.loss_scale.factor, cfg_.loss_scale.window,
                                   cfg_.loss_scale.factor)
                     : fmt::format("fixed {}", cfg_.loss_scale.value));
  if (ctx_.data_like().size() > 1) {
    const ShardLayout& zl = sync_->layout();
    const int shard = zl.shard_group(false).size();
    const std::string hybrid =
        zl.replicated(false) ? fmt::format(", replicated over {} shard groups (hybrid sharding: each slice's gradient "
                                           "then all-reduced over its replicas)",
                                           zl.replica_group(false).size())
                             : std::string();
    std::string how;
    switch (sync_->stage()) {
      case 0:
        how = fmt::format("{} bucket(s) all-reduced in the background of backward (parallel_config.gradient_aggregation_group)",
                          sync_->buckets().size());
        break;
      case 1:
        how = fmt::format("ZeRO-1 over {} ranks{}: reduce-scatter of the whole arena after backward, all-gather of "
                          "parameters after the update", shard, hybrid);
        break;
      case 2:
        how = fmt::format("ZeRO-2 over {} ranks{}: each unit reduce-scattered as backward finishes it (the other "
                          "slices' gradient pages given back), all-gather of parameters after the update", shard, hybrid);
        break;
      default:
        how = fmt::format("ZeRO-3 over {} ranks{}: each unit's weights all-gathered before a block's forward and its "
                          "backward ({}) and given back after; each unit reduce-scattered as backward finishes it",
                          shard, hybrid,
                          cfg_.parallel.zero_prefetch ? "the next block's fetched meanwhile"
                                                     : "when the block runs: parallel.zero_prefetch False");
    }
    spdlog::info("data-parallel gradients: {}", how);
    if (sync_->stage() >= 1) {
      std::vector<int64_t> sizes;
      for (const ShardUnit& u : zl.units()) sizes.push_back(u.end - u.begin);
      spdlog::info("ZeRO-{} units (floats): [{}]", sync_->stage(), fmt::join(sizes, ", "));
      std::vector<int> chunk_units;
      for (int64_t o : model_->vocab_chunk_offsets()) chunk_units.push_back(zl.unit_at(o));
      if (!chunk_units.empty())
        spdlog::info("ZeRO-{}: the LM head's weight (a token embedding tied to it too) in {} vocabulary chunks, each a "
                     "unit gathered and reduced on its own: units [{}]",
                     sync_->stage(), chunk_units.size(), fmt::join(chunk_units, ", "));
    }
  }
  if (cfg_.run_mode == RunMode::kEval)
    spdlog::info("run_mode eval: the weights' loss and perplexity over {} global batches of {} validation samples; no step "
                 "is trained (the optimizer and schedule are not used)", eval_batches_, global_batch_);
  else
    log_training_plan();
  spdlog::info("fp32 GEMM backend: {} ({})", machine_.gemm_backend, machine_.gemm_reason);
  if (const std::string slow = bf16_slower_note(L.compute, machine_); !slow.empty()) spdlog::warn("{}", slow);
  spdlog::info("MFU relative to {}", describe_peak(peak_));
}

// The optimizer, the schedule (and a warm-up the run never leaves) and the steps the run trains.
void Trainer::log_training_plan() const {
  spdlog::info("optimizer {} (AdamW: beta1 {}, beta2 {}, eps {}, weight decay {} on 2-D weights, {} moments); lr schedule {} "
               "peak {} warmup {} total {}; clip {}",
               optimizer_type_name(cfg_.optimizer_type), cfg_.adamw.beta1, cfg_.adamw.beta2, cfg_.adamw.eps, cfg_.adamw.weight_decay,
               moment_dtype_name(cfg_.adamw.moment_dtype),
               cfg_.lr.type, cfg_.lr.learning_rate, lr_->warmup(), lr_->total(),
               cfg_.use_clip_grad ? fmt::format("max_grad_norm {}", cfg_.max_grad_norm) : std::string("off"));
  if (lr_->warmup() >= total_steps_ && lr_->warmup() > 0)
    spdlog::warn("lr_schedule warms up over {} steps and the run trains {}: the learning rate never reaches its peak {} "
                 "(step {}: {:.6g}); lower lr_schedule.warmup_steps (or warmup_ratio) below the run's steps",
                 lr_->warmup(), total_steps_, cfg_.lr.learning_rate, total_steps_, lr_->at(total_steps_));
  spdlog::info("training {} ({} per epoch); the log lines' step time, tokens/s, samples/s, TFLOP/s and MFU are "
               "averages over the steps since the previous line (the run's first step, the start-up, alone; evaluation "
               "not counted)",
               start_step_ > 0 ? fmt::format("steps {}-{} ({} steps; resumed after step {})", start_step_ + 1, total_steps_,
                                             total_steps_ - start_step_, start_step_)
                               : fmt::format("{} steps", total_steps_),
               steps_per_epoch_ > 0 ? std::to_string(steps_per_epoch_) : std::string("unbounded"));
}

// One line before the first step: what ran, where, with what (metrics.jsonl readers select the
// step lines by their "loss" key and skip it).
void Trainer::write_run_start() {
  if (!metrics_) return;
  const ProcessGrid& g = ctx_.grid();
  nlohmann::json j = {
      {"event", "run_start"},
      {"time", iso8601_utc_now()},
      {"config_hash", fnv1a64_hex(dump_resolved(cfg_))},
      {"git_commit", build_git_commit()},
      {"layout", {{"dp", g.size(GridAxis::kDp)}, {"mp", g.size(GridAxis::kTp)}, {"pp", g.size(GridAxis::kPp)}, {"cp", g.size(GridAxis::kCp)}, {"sp", cfg_.parallel.use_seq_parallel},
                  {"zero", sync_->sharded()}, {"zero_stage", sync_->stage()}, {"ranks", ctx_.world().size()}}},
      {"cpu", machine_.cpu},
      {"threads", machine_.threads},
      {"compute_dtype", compute_dtype_name(cfg_.compute_dtype)},
      {"gemm_backend", machine_.gemm_backend},
      {"gemm_backend_reason", machine_.gemm_reason},
      {"peak_tflops", peak_.tflops},
      {"peak_source", peak_.source},
      {"gemm_ceiling_tflops", peak_.gemm_ceiling_tflops > 0 ? nlohmann::json(peak_.gemm_ceiling_tflops) : nlohmann::json(nullptr)},
      {"machine_probe", machine_.probe ? nlohmann::json(machine_.probe->path) : nlohmann::json(nullptr)},
      {"train_steps", total_steps_},
      {"global_batch", global_batch_},
      {"seq_length", cfg_.model.seq_length},
      {"per_print_times", cfg_.per_print_times}};
  if (!resumed_from_.empty()) {
    j["resumed_from"] = resumed_from_;
    j["resumed_step"] = start_step_;
  }
  metrics_->write(j);
}

Trainer::PerRank Trainer::per_rank(double local_loss) const {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const size_t W = static_cast<size_t>(ctx_.world().size()), me = static_cast<size_t>(ctx_.world_rank());
  std::vector<double> v(2 * W, 0.0);
  v[me] = 1024.0 * static_cast<double>(ru.ru_maxrss);  // ru_maxrss is in KiB
  v[W + me] = local_loss;
  ctx_.world().allreduce_sum(v.data(), static_cast<int64_t>(v.size()));
  return {std::vector<double>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(W)),
          std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(W), v.end())};
}

void Trainer::set_finite_check(bool on) {
  for (TransformerLM* c : engine_chunks(*model_)) c->set_finite_check(on);
}

std::string Trainer::first_nonfinite() const {
  for (TransformerLM* c : engine_chunks(*model_))
    if (!c->first_nonfinite().empty()) return c->first_nonfinite();
  return "";
}

}  // namespace gf
