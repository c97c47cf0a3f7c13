// `gridformer replay` (the Resilience issue's exact replay): re-runs steps of a run from one of its
// checkpoints with the same samples, dropout masks and order (the checkpoint's config, its data
// position and state), and compares each step's loss, gradient norm and per-rank losses bit for bit
// with the run's metrics.jsonl. Same bits: the step is deterministic, so a fault seen in it is the
// data's or the arithmetic's (for a step that was not finite the replay, which checks every layer's
// output, names the first one that is not, and re-runs the steps in fp32 when the run computed in
// bf16/fp16); different bits: the machine (a transient fault), and the ranks whose own losses differ.
// A checkpoint whose files fail their CRCs is named with its damaged tensors and replayed as it is.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace gf {

struct ReplayRequest {
  std::string checkpoint;         // one of our checkpoints (its directory, a run's checkpoint/ or output_dir)
  std::string steps;              // "N" or "N-M"
  std::vector<std::string> sets;  // overrides of the checkpoint's config
  std::string metrics;            // the run's metrics.jsonl ("": beside the checkpoint root, or the config's output_dir)
  std::string output_dir = "output/replay";
};

// What a rank needs to start the replay (rank-local: every rank reads the same checkpoint).
struct ReplayPlan {
  std::string checkpoint;      // resolved to its directory
  int64_t checkpoint_step = 0;
  int64_t first = 0, last = 0;  // the steps to compare (the replay runs checkpoint_step + 1 .. last)
  std::string config_path;     // the checkpoint's config written to a temporary file
  std::vector<std::string> sets;
  std::string metrics;          // the run's metrics.jsonl
  std::string damage;           // Reader::verify's finding ("" when the files are whole)
};
// Throws std::runtime_error naming what to fix (a step range the checkpoint cannot reach, no metrics).
ReplayPlan plan_replay(const ReplayRequest& req);

// One step of the run as metrics.jsonl recorded it (the last line of the step: a resumed run's).
struct RunStep {
  double loss = 0, grad_norm = 0;
  bool loss_finite = true, grad_norm_finite = true;  // JSON null (NaN) or a non-finite number: false
  std::vector<double> rank_loss;                      // rank_loss_sum, when recorded
};
std::map<int64_t, RunStep> read_run_steps(const std::string& metrics_path);

// The comparison of one replayed step with the run's, for the report.
struct StepCompare {
  int64_t step = 0;
  bool recorded = false, same = false, nonfinite = false;
  std::vector<int> ranks;  // ranks whose own loss differs (when the run recorded them)
  std::string line;        // the report's line
};
StepCompare compare_step(int64_t step, const std::map<int64_t, RunStep>& run, double loss, double grad_norm,
                         const std::vector<double>& rank_loss);

// `gridformer replay`'s options, filling `r` (runner/cli/replay.cpp).
CLI::App* add_replay_command(CLI::App& app, ReplayRequest& r);

}  // namespace gf
