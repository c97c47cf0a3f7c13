// Checkpoints in the training loop: what a rank saves (its slices of the weights and of AdamW's
// moments, as boxes of the global tensors; core/io/checkpoint.h), the training state beside them, the
// save's steps across the ranks (synchronous or from a background thread), and loading at start:
// Hugging Face weights, our checkpoint's weights, or (resume_training) the whole state.
//
// Who writes what: every element is written once. The weights and, without ZeRO, the moments are
// the same on every data-parallel rank, so data-parallel rank 0 writes them (for an expert's tensor,
// expert-data-parallel rank 0); a replicated tensor is the same on every tensor-parallel rank, so
// tensor rank 0 writes it; under pipelining the last stage's copy of a tied embedding is left to the
// first stage. Under ZeRO each data-parallel rank holds the moments of its shard of the arena and
// writes those (tensors cut by a shard boundary are written as the boxes of their two parts).
//
// What makes a resume exact: the weights and moments are the fp32 values themselves; the data of a
// step is a function of the step and the samples consumed before it (Trainer::batch_first), dropout's masks of the step and the
// sample, the learning rate of the step; AdamW's bias correction counts step - skipped_steps; the
// dynamic loss scale and its counters are in the state. So a run resumed after step s computes
// step s + 1 from the same numbers as the run that went on.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/io/checkpoint.h"
#include "models/registry.h"
#include "models/weights/megatron_checkpoint.h"
#include "runner/report/logging.h"
#include "runner/report/metrics_log.h"
#include "runner/report/run_info.h"
#include "runner/train/arena_shard.h"
#include "runner/train/output_paths.h"
#include "runner/train/trainer.h"
#include "core/trace/fault.h"

namespace gf {

namespace fs = std::filesystem;

namespace {



std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}


}  // namespace

struct Trainer::PendingSave {
  std::string name, tmp;
  int64_t step = 0;
  nlohmann::json state;
  std::vector<ckpt::Piece> pieces;
  double snapshot_s = 0, bytes = 0;
  std::chrono::steady_clock::time_point t0;
  std::thread thread;
  std::atomic<bool> done{false};
  std::string fragment, error;
};

std::string Trainer::checkpoint_root() const { return checkpoint_directory(cfg_); }

void read_checkpoint_weights(ckpt::Reader& r, CausalLM& model, const Config& cfg) {
  // Every tensor of the checkpoint is one of the model's (a checkpoint of a deeper model is refused,
  // not silently truncated); the shapes are checked as each is read.
  const ModelEntry& entry = find_model(cfg.model.arch, cfg.model.type);
  const ParamTable whole = TransformerLM::make_param_table(entry.spec(cfg.model), entry.names);
  for (const std::string& n : r.names())
    if (n.rfind("optimizer.", 0) != 0 && !whole.find(n))
      throw std::runtime_error(r.dir() + ": holds tensor '" + n + "', which the configured model does not have (" +
                               cfg.model.arch + ", " + std::to_string(cfg.model.num_layers) +
                               " layers): the checkpoint is of another model shape");
  for (const ParamSpec& p : whole.specs())
    if (!r.has(p.name))
      throw std::runtime_error(r.dir() + ": has no tensor '" + p.name + "', which the configured model needs");
  float* w = model.weights();
  for (const TensorPlacement& t : model.params().tensors()) r.read(t.spec->name, t, w + t.offset);
}

// resume_training without load_checkpoint: of the run's committed checkpoints (the one `latest` names and
// those before it), the newest recorded healthy (any, with resume_healthy_only: False) whose files pass
// their sizes and CRCs; each one passed over is named in a warning. "" when nothing is committed yet.
std::string Trainer::own_resume_checkpoint() const {
  const std::string root = checkpoint_root();
  const std::string latest = ckpt::resolve(root, true);
  if (latest.empty()) return "";
  const std::string latest_name = fs::path(latest).filename().string();
  std::vector<ckpt::Listed> all = ckpt::list_checkpoints(root);
  const auto at = std::find_if(all.begin(), all.end(), [&](const ckpt::Listed& c) { return c.name == latest_name; });
  if (at != all.end()) all.erase(at + 1, all.end());  // a newer one renamed into place but never committed
  int passed_over = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it, ++passed_over) {
    const std::string dir = (fs::path(root) / it->name).string();
    if (cfg_.resume_healthy_only && !it->healthy) {
      spdlog::warn("checkpoint {} (step {}) is not recorded healthy (a spike among its steps since the checkpoint "
                   "before): passed over for an earlier healthy one (resume_healthy_only: False would take it)",
                   dir, it->step);
      continue;
    }
    std::string bad;
    try {
      bad = ckpt::Reader::open(dir).verify();
    } catch (const std::exception& e) {
      bad = e.what();
    }
    if (!bad.empty()) {
      spdlog::warn("checkpoint {} (step {}) is damaged: {}; passed over for the one before", dir, it->step, bad);
      continue;
    }
    if (passed_over > 0)
      spdlog::warn("resuming from {} (step {}), not from the newest committed checkpoint {}", dir, it->step, latest);
    return dir;
  }
  throw std::runtime_error(fmt::format(
      "`resume_training: True`: none of the {} committed checkpoints under {} is {}whole (see the warnings above): give "
      "one with load_checkpoint{}, or remove them to start from step 1",
      all.size(), root, cfg_.resume_healthy_only ? "recorded healthy and " : "",
      cfg_.resume_healthy_only ? ", set resume_healthy_only: False" : ""));
}

// The seed's weights; under ZeRO-3 only this rank's slices (the rest is never resident).

// pet_config.target_modules as PEFT would save it: the regex or the list given under PEFT's names; under MindFormers'
// names (wq, w1, ...) none, and the export names the modules adapted.

void Trainer::init_weights() {
  const auto seed = static_cast<uint64_t>(cfg_.seed);
  std::vector<std::pair<int64_t, int64_t>> own;  // ZeRO-3: this rank's slices alone (empty: the whole arena)
  if (stream_)
    for (const ArenaRange& s : sync_->shards()) own.emplace_back(s.begin, s.end);
  if (stream_) model_->params().initialize(model_->weights(), seed, own);
  else model_->init_weights(seed);
  // LoRA's modules_to_save start as copies of the base just loaded (or initialised).
  if (lora()) model_->lora_saved_from_base(own);
}

void Trainer::load_initial_state() {
  const Config& cfg = cfg_;
  std::string path = cfg.load_checkpoint;
  if (cfg.resume_training && path.empty()) {
    // A restarted job resumes from its own checkpoints when it has some.
    path = own_resume_checkpoint();
    if (path.empty() && is_megatron_checkpoint(checkpoint_root())) return resume_megatron(checkpoint_root());
    if (path.empty()) {
      spdlog::warn("`resume_training: True` without load_checkpoint, and no checkpoint under {} yet: training starts "
                   "from step 1",
                   checkpoint_root());
      init_weights();
      return;
    }
  }
  if (path.empty()) {
    if (lora()) {
      model_->init_frozen(static_cast<uint64_t>(cfg_.seed));
      model_->frozen_loaded();
      spdlog::warn("LoRA without load_checkpoint: the frozen base model is the seed's random initialisation");
    }
    init_weights();
    return;
  }
  if (lora() && is_peft_adapter_dir(path)) {  // PEFT's adapters (no optimizer state): training starts from them
    if (cfg.resume_training)
      throw std::runtime_error("`resume_training: True` needs one of our LoRA checkpoints (adapters, moments and the step); " +
                               path + " is PEFT's adapter directory: drop resume_training to train on from its adapters");
    lora_base_ = fs::absolute(load_peft_adapters(*model_, cfg, path)).lexically_normal().string();
    return;
  }
  if (!lora() && is_peft_adapter_dir(path)) load_peft_adapters(*model_, cfg, path);  // refused: it says what to set
  if (lora()) {
    // A LoRA checkpoint of ours names its base and holds the adapters; anything else is the base itself.
    const bool adapters = holds_lora_adapters(path);
    if (!adapters) {
      if (cfg.resume_training)
        throw std::runtime_error("`resume_training: True` with LoRA needs a LoRA checkpoint of a run (its adapters and "
                                 "their optimizer state), and `load_checkpoint: " + path + "` is a base model: drop "
                                 "resume_training to start training adapters on it");
      load_lora_base(path);
      init_weights();
      return;
    }
    const ckpt::Reader r = ckpt::Reader::open(path);
    const std::string base = r.state()["lora"].at("base").get<std::string>();
    if (base.empty()) {  // its run trained over the seed's random base (no load_checkpoint): the same again
      model_->init_frozen(static_cast<uint64_t>(r.state().value("seed", cfg_.seed)));
      model_->frozen_loaded();
      spdlog::warn("{} names no base model (its run trained over the seed's random initialisation): the same base again",
                   path);
    } else {
      load_lora_base(base);
    }
  } else if (holds_lora_adapters(path)) {
    throw std::runtime_error(path + " holds LoRA adapters: set model.model_config.pet_config as the run that saved it "
                             "did (or merge them into the base: gridformer convert --merge-lora)");
  }
  if (!ckpt::is_checkpoint(path)) {
    if (cfg.resume_training && is_megatron_checkpoint(path)) return resume_megatron(path);
    if (cfg.resume_training)
      throw std::runtime_error("`resume_training: True` needs a training run's checkpoint (gridformer's, or Megatron-LM's), and `load_checkpoint: " + path +
                               "` holds weights only (Hugging Face or MindSpore; no optimizer state or step): drop resume_training to "
                               "start training from these weights");
    const auto t0 = std::chrono::steady_clock::now();
    const std::string note = model_->load_hf_checkpoint(path);  // Hugging Face, MindSpore or Megatron-LM weights
    spdlog::info("loaded weights from {}{} in {:.2f} s", path, note.empty() ? "" : " (" + note + ")",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  ckpt::Reader r = ckpt::Reader::open(path);
  read_checkpoint_weights(r, *model_, cfg);
  if (!cfg.resume_training) {
    spdlog::info("loaded weights from checkpoint {} (step {}); training starts from step 1 (resume_training: False)",
                 r.dir(), r.state().value("step", int64_t{0}));
    return;
  }
  const nlohmann::json& st = r.state();
  if (st.value("weights_only", false) || !st.contains("global_batch"))
    throw std::runtime_error(r.dir() + ": holds weights only (" +
                             (st.contains("converted_from") ? "converted from " + st["converted_from"].dump()
                                                            : std::string("no training state")) +
                             "), not a training run's state: drop resume_training to train from these weights");
  const int64_t step = st.at("step").get<int64_t>(), g = st.at("global_batch").get<int64_t>();
  // Megatron's consumed-samples rule: the next step reads on from the first sample not yet consumed,
  // whatever the global batch was (checkpoints before the key was saved consumed step x global batch).
  const int64_t consumed = st.value("consumed_samples", step * g);
  if (g != global_batch_)
    spdlog::info("global batch changes at the resume: {} samples per step up to step {}, {} from step {} on (batch_size {} "
                 "x data_parallel {} x {} micro-batches); step {} reads samples [{}, {}), the first not yet consumed; the "
                 "learning-rate schedule follows steps (train_steps {})",
                 g, step, global_batch_, step + 1, cfg.batch_size, ctx_.size(GridAxis::kDp), micro_batches_, step + 1,
                 consumed, consumed + global_batch_, total_steps_);
  // The data as the saved run built it (Megatron's shuffle depends on the sample count it is built for),
  // or for more samples when this run needs them.
  ensure_train_samples(std::max(st.value("data_samples", int64_t{0}), consumed + (total_steps_ - step) * global_batch_));
  for (const auto& op : opts_) {
    AdamW* o = op.get();
    const int64_t b = o->shard_begin(), e = o->shard_end();
    std::vector<float> part;
    for (const TensorPlacement& t : model_->params().tensors()) {
      int64_t lo, hi;
      if (!shard_part(t, b, e, lo, hi)) continue;
      for (int k = 0; k < 2; ++k) {  // read as F32, stored in the optimizer's moment dtype
        if (k == 1 && injected_fault("resume-drops-moment")) continue;  // the suite's injected bug (core/trace/fault.h)
        part.assign(static_cast<size_t>(t.numel()), 0.0f);
        r.read(kMomentPrefix[k] + t.spec->name, t, part.data(), lo, hi);
        o->write_moments(k, t.offset + lo - b, hi - lo, part.data() + lo);
      }
    }
  }
  reconcile_schedule(st, r.dir());
  start_step_ = last_saved_step_ = step;
  consumed_base_ = consumed;
  skipped_steps_ = st.at("skipped_steps").get<int64_t>();
  good_steps_ = st.at("good_steps").get<int64_t>();
  loss_scale_ = st.at("loss_scale").get<double>();
  spikes_in_a_row_ = st.value("spikes_in_a_row", int64_t{0});
  spikes_->restore(st.value("spike_window", nlohmann::json()));
  resumed_from_ = r.dir();
  spdlog::info("resumed from {}: step {} ({} samples consumed), loss scale {}, {} steps skipped for overflow; read in "
               "{:.2f} s; training continues at step {}",
               r.dir(), step, consumed, loss_scale_, skipped_steps_, seconds_since(t0),
               step + 1);
}

// What this rank writes of the weights and AdamW moments: local elements [lo, hi) of a tensor under a
// name, and how to read them from the live state.
std::vector<Trainer::CheckpointRegion> Trainer::checkpoint_regions() const {
  const Placement& pl = model_->params();
  const float* w = model_->weight_values();
  const bool pipeline_copy = pipelined() && ctx_.index(GridAxis::kPp) != 0 && tied_.end > tied_.begin;
  auto writes = [&](const TensorPlacement& t, bool sharded) {
    if (pipeline_copy && t.offset == tied_.begin) return false;
    if (t.replicated && ctx_.index(GridAxis::kTp) != 0) return false;
    if (sharded) return true;  // ZeRO: each data-parallel rank its own shard
    // Dense tensors: one copy from the first data-parallel and context-parallel rank (context ranks hold the same weights).
    return t.spec->is_expert() ? ctx_.expert_data_like().rank() == 0
                               : ctx_.index(GridAxis::kDp) == 0 && ctx_.index(GridAxis::kCp) == 0;
  };
  std::vector<CheckpointRegion> regions;
  auto weights = [&](const TensorPlacement& t, int64_t lo, int64_t hi) {
    const float* local = w + t.offset;
    regions.push_back({&t, t.spec->name, lo, hi < 0 ? t.numel() : hi, [local](int64_t i0, int64_t n, float* dst) {
                         std::memcpy(dst, local + i0, sizeof(float) * static_cast<size_t>(n));
                       }});
  };
  // ZeRO-3: each rank holds only its slices of the weights; they are written as the moments are.
  const bool weights_sharded = sync_->stage() >= 3;
  if (!weights_sharded)
    for (const TensorPlacement& t : pl.tensors())
      if (writes(t, false)) weights(t, 0, -1);
  for (const auto& op : opts_) {
    const AdamW* o = op.get();
    const int64_t b = o->shard_begin(), e = o->shard_end();
    const bool sharded = sync_->sharded();
    for (const TensorPlacement& t : pl.tensors()) {
      int64_t lo, hi;
      if (!shard_part(t, b, e, lo, hi) || !writes(t, sharded) || (sharded && !writes_shard(t))) continue;
      if (weights_sharded) weights(t, lo, hi);
      for (int k = 0; k < 2; ++k) {  // saved as F32 whatever the optimizer's moment dtype
        const int64_t base = t.offset - b;  // local element i is the shard's moment base + i
        regions.push_back({&t, kMomentPrefix[k] + t.spec->name, lo, hi, [o, k, base](int64_t i0, int64_t n, float* dst) {
                             o->read_moments(k, base + i0, n, dst);
                           }});
      }
    }
  }
  return regions;
}

// Grows the async_save snapshot area (snapshot_) to hold `regions`. The trainer calls it while it is
// built, so the area's pages are touched then, not in the first save, where the kernel's clearing of
// 1.4 GiB of fresh pages paused gpt2-124M's training for 5 s; `gridformer plan` counts it from the start.
void Trainer::reserve_snapshot(const std::vector<CheckpointRegion>& regions) {
  int64_t total = 0;
  for (const CheckpointRegion& r : regions) total += r.hi - r.lo;
  if (snapshot_.size() < static_cast<size_t>(total)) snapshot_.resize(static_cast<size_t>(total));
}

// The pieces of this rank's share of the weights and AdamW moments. A synchronous save reads the live
// state while it writes (nothing changes it meanwhile), so a save holds no second copy of the state
// in memory (gpt2-124M: 1.4 GiB, and 4-6 s of copying on the 2-vCPU EPYC). An asynchronous save
// copies it first (the snapshot), so that training may go on while it is written, into one area kept
// for the whole run (snapshot_).
void Trainer::checkpoint_pieces(std::vector<ckpt::Piece>& pieces, bool live) {
  std::vector<CheckpointRegion> regions = checkpoint_regions();
  if (!live) {
    reserve_snapshot(regions);
    int64_t at = 0;
    for (CheckpointRegion& r : regions) {
      float* copy = snapshot_.data() + at;
      r.read(r.lo, r.hi - r.lo, copy);
      at += r.hi - r.lo;
      r.read = [copy, lo = r.lo](int64_t i0, int64_t n, float* dst) {
        std::memcpy(dst, copy + (i0 - lo), sizeof(float) * static_cast<size_t>(n));
      };
    }
  }
  for (CheckpointRegion& r : regions)
    for (ckpt::Piece& piece : ckpt::live_pieces_of(*r.t, r.name, std::move(r.read), r.lo, r.hi))
      pieces.push_back(std::move(piece));
}

// The learning-rate schedule as it runs (warm-up and total in steps, resolved), saved with every checkpoint.
nlohmann::json Trainer::schedule_state() const {
  return {{"type", cfg_.lr.type}, {"learning_rate", cfg_.lr.learning_rate}, {"lr_end", cfg_.lr.lr_end},
          {"warmup", lr_->warmup()}, {"total", lr_->total()}, {"power", cfg_.lr.power},
          {"from_steps_done", cfg_.lr.from_steps_done}};
}

// A resume's schedule against the checkpoint's, as Megatron's OptimizerParamScheduler.load_state_dict: equal, or
// lr_schedule.override_opt_param_scheduler (this config's wins) or use_checkpoint_opt_param_scheduler (the
// checkpoint's wins, rebuilt from its saved figures); neither set and a value differs: refused, naming each.
// ("Train 20 steps, then resume for 10 more" with total_steps -1 is such a difference: the cosine's total moves
// from 20 to 30, which is neither run's curve unless one of them is chosen.) A difference that changes no rate of
// the steps this run trains (a constant schedule's total) needs no choice. Checkpoints from before the schedule
// was saved are taken as they are.
void Trainer::reconcile_schedule(const nlohmann::json& st, const std::string& dir) {
  if (!st.contains("lr_schedule")) return;
  const nlohmann::json saved = st["lr_schedule"], now = schedule_state();
  LrScheduleConfig l;
  l.type = saved.at("type").get<std::string>();
  l.learning_rate = saved.at("learning_rate").get<double>();
  l.lr_end = saved.at("lr_end").get<double>();
  l.warmup_steps = saved.at("warmup").get<int64_t>();
  l.total_steps = saved.at("total").get<int64_t>();
  l.power = saved.at("power").get<double>();
  l.from_steps_done = saved.value("from_steps_done", false);
  const LrSchedule theirs(l, total_steps_);
  // The same rates for every step this run trains (a constant rate's total, say, does not matter): nothing to choose.
  bool same = true;
  for (int64_t s = st.at("step").get<int64_t>() + 1; same && s <= total_steps_; ++s) same = theirs.at(s) == lr_->at(s);
  if (same) return;
  std::string diffs;
  for (const auto& [key, value] : saved.items())
    if (now.contains(key) && now[key] != value)
      diffs += fmt::format("{}{} {} in the checkpoint, {} in this run", diffs.empty() ? "" : "; ", key, value.dump(), now[key].dump());
  if (cfg_.lr_override_scheduler) {
    spdlog::info("learning-rate schedule: this config's replaces the checkpoint's (lr_schedule.override_opt_param_scheduler): {}",
                 diffs);
    return;
  }
  if (!cfg_.lr_use_checkpoint_scheduler)
    throw std::runtime_error(
        "resuming from " + dir + ": the learning-rate schedule differs from the checkpoint's (" + diffs +
        "). Set lr_schedule.use_checkpoint_opt_param_scheduler: True to continue the checkpoint's schedule, or "
        "lr_schedule.override_opt_param_scheduler: True to follow this config's from the resumed step on (Megatron's "
        "--use-checkpoint-opt_param-scheduler / --override-opt_param-scheduler)");
  lr_ = std::make_unique<LrSchedule>(l, total_steps_);
  spdlog::info("learning-rate schedule: the checkpoint's (lr_schedule.use_checkpoint_opt_param_scheduler): {} peak {} "
               "warmup {} total {}, lr_end {} ({})", l.type, l.learning_rate, lr_->warmup(), lr_->total(), l.lr_end, diffs);
}

// The index's state: where training stands after `step`, the model, the layout and the config.
nlohmann::json Trainer::checkpoint_state(int64_t step, int64_t epoch) const {
  return {{"step", step},
          {"epoch", epoch},
          {"consumed_samples", consumed_after(step)},
          {"global_batch", global_batch_},
          {"data_samples", built_samples_},
          {"skipped_steps", skipped_steps_},
          {"good_steps", good_steps_},
          {"loss_scale", loss_scale_},
          {"lr", lr_->at(step)},
          {"lr_schedule", schedule_state()},
          // Healthy: every step since the previous checkpoint finite (a non-finite one stops the run) and
          // without a spike; resume without load_checkpoint prefers the newest healthy checkpoint.
          {"healthy", !spike_since_save_},
          {"spikes_in_a_row", spikes_in_a_row_},
          {"spike_window", spikes_->state()},
          {"seed", cfg_.seed},
          {"model", {{"arch", cfg_.model.arch}, {"type", cfg_.model.type}, {"num_layers", cfg_.model.num_layers},
                     {"vocab_size", cfg_.model.vocab_size}}},
          {"layout", {{"dp", ctx_.size(GridAxis::kDp)}, {"mp", ctx_.size(GridAxis::kTp)}, {"pp", ctx_.size(GridAxis::kPp)},
                      {"ep", ctx_.size(GridAxis::kEp)}, {"cp", ctx_.size(GridAxis::kCp)}, {"sp", cfg_.parallel.use_seq_parallel},
                      {"zero", sync_->sharded()},
                      {"ranks", ctx_.world().size()}}},
          // LoRA: the checkpoint holds the adapters; the frozen base is named, not copied.
          {"lora", !lora() ? nlohmann::json() : nlohmann::json{{"base", lora_base_},
                                                                           {"rank", cfg_.model.lora.rank},
                                                                           {"alpha", cfg_.model.lora.alpha},
                                                                           {"use_rslora", cfg_.model.lora.rslora},
                                                                           {"target_modules", lora_targets_json()},
                                                                           {"modules_to_save", cfg_.model.lora.modules_to_save.empty() ? nlohmann::json() : nlohmann::json(cfg_.model.lora.modules_to_save)},
                                                                           {"fan_in_fan_out", lora_fan_in_fan_out()}}},
          {"time", iso8601_utc_now()},
          {"git_commit", build_git_commit()},
          {"config", dump_resolved(cfg_)}};
}

// Rank 0 makes the checkpoint's temporary directory and tells every rank its path (or why it could
// not: then every rank throws the same CheckpointError).
std::string Trainer::begin_save_on_every_rank(const std::string& name, int64_t step) {
  std::string tmp, problem;
  if (ctx_.world_rank() == 0) {
    try {
      tmp = ckpt::begin_save(checkpoint_root(), name);
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  int64_t len[2] = {static_cast<int64_t>(tmp.size()), static_cast<int64_t>(problem.size())};
  ctx_.world().broadcast(len, sizeof len, 0);
  tmp.resize(static_cast<size_t>(len[0]));
  problem.resize(static_cast<size_t>(len[1]));
  ctx_.world().broadcast(tmp.data(), len[0], 0);
  ctx_.world().broadcast(problem.data(), len[1], 0);
  if (!problem.empty()) throw CheckpointError("checkpoint at step " + std::to_string(step) + ": " + problem);
  return tmp;
}

std::string Trainer::checkpoint_name(int64_t step) const {
  const int64_t epoch = steps_per_epoch_ > 0 ? (step - 1) / steps_per_epoch_ + 1 : 1;
  return fmt::format("{}-{}_{}", cfg_.checkpoint.prefix, epoch, step);
}

void Trainer::save_checkpoint(int64_t step) {
  finish_checkpoint(true);  // one save at a time
  ckpt::set_fault_step(step);
  ckpt::fault_point("begin");
  auto ps = std::make_shared<PendingSave>();
  PendingSave& p = *ps;
  p.t0 = std::chrono::steady_clock::now();
  p.step = step;
  const int64_t epoch = steps_per_epoch_ > 0 ? (step - 1) / steps_per_epoch_ + 1 : 1;
  p.name = checkpoint_name(step);
  last_saved_step_ = step;
  checkpoint_pieces(p.pieces, !cfg_.checkpoint.async_save);
  for (const ckpt::Piece& piece : p.pieces) p.bytes += 4.0 * static_cast<double>(piece.numel());
  p.snapshot_s = seconds_since(p.t0);
  p.state = checkpoint_state(step, epoch);
  spike_since_save_ = false;
  p.tmp = begin_save_on_every_rank(p.name, step);
  ckpt::install_checkpoint_signal_handling();
  const int rank = ctx_.world_rank();
  auto work = [&p, rank] {
    try {
      p.fragment = ckpt::write_shard(p.tmp, rank, p.pieces);
      ckpt::fault_point("shard");
    } catch (const std::exception& e) {
      p.error = e.what();
    }
    p.pieces.clear();
    p.pieces.shrink_to_fit();
    p.done.store(true);
  };
  pending_save_ = std::move(ps);
  if (cfg_.checkpoint.async_save) {
    pending_save_->thread = std::thread(work);
  } else {
    work();
    finish_checkpoint(true);
  }
}

void Trainer::finish_checkpoint(bool wait) {
  if (!pending_save_) return;  // every rank starts the same saves
  PendingSave& p = *pending_save_;
  if (!wait) {
    double busy = p.done.load() ? 0 : 1;
    ctx_.world().allreduce_max(&busy, 1);
    if (busy != 0) return;
  }
  if (p.thread.joinable()) p.thread.join();
  const double write_s = seconds_since(p.t0) - p.snapshot_s;
  // Each rank's fragment (or its error) to rank 0, which writes the index and commits.
  const std::string mine = p.error.empty() ? "F" + p.fragment : "E" + p.error;
  const std::vector<std::string> all = ctx_.world().gather_strings(mine, 0);
  std::string problem;
  std::vector<std::string> removed;
  if (ctx_.world_rank() == 0) {
    std::vector<std::string> fragments;
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].empty() || all[r][0] != 'F') {
        problem += fmt::format("{}rank {}: {}", problem.empty() ? "" : "; ", r, all[r].substr(1));
        continue;
      }
      fragments.push_back(all[r].substr(1));
    }
    try {
      if (problem.empty()) {
        ckpt::write_index(p.tmp, fragments, p.state);
        ckpt::fault_point("index");
        removed = ckpt::commit_save(checkpoint_root(), p.name, static_cast<int>(cfg_.checkpoint.keep_max));
        ckpt::fault_point("latest");
      }
    } catch (const std::exception& e) {
      problem = e.what();
    }
    if (!problem.empty()) {
      try {
        ckpt::abort_save(checkpoint_root(), p.name);
      } catch (const std::exception& e) {
        problem += std::string(" (and its temporary directory could not be removed: ") + e.what() + ")";
      }
    }
    if (problem.empty() && cfg_.checkpoint.megatron_format) {
      try {
        write_megatron_layout((fs::path(checkpoint_root()) / p.name).string(), p.step);
      } catch (const std::exception& e) {
        problem = "it is committed, but its Megatron-LM layout could not be written: " + std::string(e.what());
      }
    }
  }
  double bytes = p.bytes;
  ctx_.world().allreduce_sum(&bytes, 1);
  int64_t len = static_cast<int64_t>(problem.size());  // rank 0's verdict to every rank
  ctx_.world().broadcast(&len, sizeof len, 0);
  problem.resize(static_cast<size_t>(len));
  ctx_.world().broadcast(problem.data(), len, 0);
  const int64_t step = p.step;
  const std::string name = p.name;
  const double snapshot_s = p.snapshot_s, total_s = seconds_since(p.t0);
  pending_save_.reset();
  if (!problem.empty()) {
    const std::string latest = ckpt::resolve(checkpoint_root(), true);
    throw CheckpointError(fmt::format("checkpoint at step {} could not be saved: {}; {}", step, problem,
                                         latest.empty() ? std::string("no earlier checkpoint exists")
                                                        : "the previous checkpoint " + latest + " is untouched"));
  }
  spdlog::info("checkpoint saved: {} (step {}, {}; snapshot {:.2f} s{}, {:.2f} s in all){}",
               (fs::path(checkpoint_root()) / name).string(), step, mib(bytes), snapshot_s,
               cfg_.checkpoint.async_save ? fmt::format(", written in the background in {:.2f} s", write_s)
                                          : fmt::format(", written in {:.2f} s", write_s),
               total_s, removed.empty() ? std::string() : fmt::format("; removed {} (keep_checkpoint_max: {})",
                                                                      fmt::join(removed, ", "), cfg_.checkpoint.keep_max));
  if (metrics_)
    metrics_->write(nlohmann::json{{"event", "checkpoint"}, {"step", step}, {"name", name}, {"bytes", bytes},
                                   {"snapshot_s", snapshot_s}, {"write_s", write_s}, {"async", cfg_.checkpoint.async_save}});
}

Trainer::~Trainer() {
  // A save still being written when the run ends early (an exception): its thread is joined; the
  // temporary directory stays, and the next save of that name replaces it.
  abandon_pending_save();
}

void Trainer::abandon_pending_save() noexcept {
  if (pending_save_ && pending_save_->thread.joinable()) pending_save_->thread.join();
  pending_save_.reset();
}

}  // namespace gf
