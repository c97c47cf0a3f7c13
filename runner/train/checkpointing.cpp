// Checkpoints in the training loop: what a rank saves (its slices of the weights and of AdamW's
// moments, as boxes of the global tensors; core/io/checkpoint.h), the training state beside them, the
// save's steps across the ranks (synchronous or from a background thread). Loading at start (Hugging Face
// weights, our checkpoint's weights, or with resume_training the whole state) is runner/train/checkpoint_load.cpp.
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
