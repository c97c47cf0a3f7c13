// <output_dir>/metrics.jsonl (README, "Using it"): rank 0 appends one JSON object per line, the
// run_start line (runner/train/trainer_setup.cpp) and the step and evaluation lines (runner/train/trainer.cpp),
// each flushed at once so that a reader, or a run stopped mid-way, sees whole lines. With a
// TensorBoard directory (SummaryMonitor, tensorboard_dir) each line's scalars also go to this run's
// event file (runner/report/tensorboard.h), so the two always hold the same figures.
#pragma once
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "runner/report/tensorboard.h"

namespace gf {

class MetricsLog {
 public:
  // Opens `path` for appending: the lines of earlier runs stay.
  explicit MetricsLog(const std::filesystem::path& path) : out_(path, std::ios::app) {}
  // From now on every line's scalars also go to `events`.
  void add_event_writer(std::unique_ptr<tensorboard::EventWriter> events) { events_ = std::move(events); }
  const tensorboard::EventWriter* event_writer() const { return events_.get(); }
  void write(const nlohmann::json& line) {
    out_ << line.dump() << "\n";
    out_.flush();
    if (events_) events_->write_metrics_line(line);
  }

 private:
  std::ofstream out_;
  std::unique_ptr<tensorboard::EventWriter> events_;
};

}  // namespace gf
