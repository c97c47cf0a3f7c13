// Loading at the start of training: Hugging Face weights, our checkpoint's weights, or (resume_training) the
// whole state (runner/train/checkpointing.cpp holds the save, and what makes a resume exact).
#include <chrono>
#include <filesystem>

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
               r.dir(), step, consumed, loss_scale_, skipped_steps_,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               step + 1);
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

}  // namespace gf
