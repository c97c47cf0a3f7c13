// <output_dir>/metrics.jsonl (README, "Using it"): rank 0 appends one JSON object per line, the
// run_start line (runner/trainer_setup.cpp) and the step and evaluation lines (runner/trainer.cpp),
// each flushed at once so that a reader, or a run stopped mid-way, sees whole lines.
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace gf {

class MetricsLog {
 public:
  // Opens `path` for appending: the lines of earlier runs stay.
  explicit MetricsLog(const std::filesystem::path& path) : out_(path, std::ios::app) {}
  void write(const nlohmann::json& line) {
    out_ << line.dump() << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

}  // namespace gf
