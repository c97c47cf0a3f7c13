#include "runner/report/profiler.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "runner/report/logging.h"

namespace gf {

namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("profile: cannot write " + path.string() + " (check that output_dir is writable)");
}

}  // namespace

size_t profile_events_per_step(int64_t layers, int64_t micro_batches, int64_t chunks, bool communication, bool ops) {
  // Per layer and micro-batch: forward, backward (or its input and weight passes), and with
  // profile_communication up to eight collectives (tensor-parallel all-reduces or gathers, MoE
  // all-to-alls, bucket all-reduce starts). Per micro-batch and chunk: the pipeline actions, their waits
  // and memory counters. Per step (the 256): the trainer's phases, the step's own collectives, the interval's
  // instant and the 'thread times' span read before it (trace::read_thread_times).
  // profile_ops: up to about 64 op spans per layer and micro-batch over its passes (GEMMs, attention,
  // norms, elementwise; recomputation repeats the forward ones).
  const int64_t per_layer = 3 * (1 + (communication ? 8 : 0)) + (ops ? 64 : 0);
  const int64_t per_micro = layers * per_layer + 16 * std::max<int64_t>(1, chunks) + 16;
  return static_cast<size_t>(micro_batches * per_micro + 256);
}

StepProfiler::StepProfiler(const ProfileConfig& cfg, const ParallelContext& ctx, std::string output_dir,
                           int64_t first_step, int64_t last_step, size_t events_per_step)
    : cfg_(cfg), ctx_(ctx), dir_(std::move(output_dir)) {
  if (!cfg.enabled) return;
  const int64_t a = std::max(cfg.first_step(), first_step), b = std::min(cfg.stop_step, last_step);
  if (a > b) {
    if (ctx.world_rank() == 0)
      spdlog::warn("profile: steps {}-{} asked for, this run trains steps {}-{}: nothing is profiled", cfg.first_step(),
                   cfg.stop_step, first_step, last_step);
    return;
  }
  first_ = a;
  last_ = b;
  capacity_ = events_per_step * static_cast<size_t>(b - a + 1) + 1024;
  if (ctx.world_rank() == 0)
    spdlog::info("profile: steps {}-{} will be recorded{}{}{} and written to {}/profile", a, b,
                 cfg.communication ? ", with communication" : "", cfg.memory ? ", with memory counters" : "",
                 cfg.ops ? ", with a span per op" : "", dir_);
}

void StepProfiler::before_interval_close(int64_t done) {
  if (!profiling() || recording_ || done + 1 != first_) return;
  // The one barrier that aligns the ranks' clocks (profiler.h): every timestamp after it counts from
  // this rank's own clock reading as it leaves.
  ctx_.world().barrier();
  unsigned flags = trace::kOn;
  if (cfg_.communication) flags |= trace::kCommunication;
  if (cfg_.memory) flags |= trace::kMemory;
  if (cfg_.ops) flags |= trace::kOps;
  trace::start(flags, capacity_, trace::Clock::now());
  recording_ = true;
}

void StepProfiler::before_interval_opens() {
  if (recording_) times_ = trace::read_thread_times();
}

void StepProfiler::interval_opens(int64_t step, trace::Clock::time_point t) const {
  if (!recording_) return;
  const int64_t i = trace::instant("meter", "interval start", t);
  if (i < 0) return;
  trace::add_arg(i, "step", static_cast<double>(step));
  trace::add_thread_times(i, times_);
}

bool StepProfiler::after_step(int64_t step) {
  if (!recording_ || step != last_) return false;
  write();
  return true;
}

void StepProfiler::finish() {
  if (recording_) write();
}

void StepProfiler::write() {
  trace::stop();
  recording_ = false;
  const std::vector<trace::Event>& events = trace::events();
  const int rank = ctx_.world_rank();
  const GridCoord& c = ctx_.coord();
  const std::string name = "rank " + std::to_string(rank) + " (dp " + std::to_string(c[GridAxis::kDp]) + ", tp " +
                           std::to_string(c[GridAxis::kTp]) + ", pp " + std::to_string(c[GridAxis::kPp]) + ", ep " +
                           std::to_string(c[GridAxis::kEp]) + ")";
  // This rank's metadata and events: its own file, and its fragment of the merged one.
  const std::string meta = trace::process_name_json(rank, name) + ",\n" + trace::process_sort_json(rank, rank) + ",\n" +
                           trace::thread_name_json(rank, 0, "trainer");
  const std::string body = trace::events_json(events, rank, 0);
  const size_t count = events.size();
  const std::string other = "{\"tool\":\"gridformer\",\"steps\":[" + std::to_string(first_) + "," + std::to_string(last_) +
                            "],\"world_size\":" + std::to_string(ctx_.world().size()) +
                            ",\"profile_communication\":" + (cfg_.communication ? "true" : "false") +
                            ",\"profile_memory\":" + (cfg_.memory ? "true" : "false") +
                            ",\"profile_ops\":" + (cfg_.ops ? "true" : "false") +
                            ",\"clock\":\"microseconds since this rank left the world barrier at the profile's start\"}";
  const std::filesystem::path root = std::filesystem::path(dir_) / "profile";
  const std::filesystem::path own = root / ("rank_" + std::to_string(rank)) / "trace.json";
  write_file(own, trace::trace_file_json({meta}, {body}, other));
  spdlog::info("profile: steps {}-{}: {} events of rank {} written to {}{}", first_, last_, count, rank, own.string(),
               trace::growths() > 0 ? fmt::format(" (the event buffer grew {} times past its estimate of {})",
                                                  trace::growths(), capacity_)
                                    : std::string());
  const std::vector<std::string> all = ctx_.world().gather_strings(meta + (body.empty() ? "" : ",\n" + body), 0);
  double total = static_cast<double>(count);
  ctx_.world().allreduce_sum(&total, 1);
  if (rank == 0) {
    const std::filesystem::path merged = root / "trace.json";
    write_file(merged, trace::trace_file_json({}, all, other));
    spdlog::info("profile: steps {}-{}: {:.0f} events of {} ranks merged into {} (open it in https://ui.perfetto.dev "
                 "or chrome://tracing)",
                 first_, last_, total, all.size(), merged.string());
  }
}

}  // namespace gf
