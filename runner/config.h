// The typed configuration: the MindFormers-style YAML checked against the schema
// (config_schema.cpp), defaults filled in, --set overrides applied, then read into structs. Every
// key of the schema has a disposition (config_keys.cpp): read into a field here, warned about, or
// refused; nothing is dropped without a word.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/adamw.h"
#include "core/lr_schedule.h"
#include "models/model_config.h"

namespace gf {

// Every problem found in a config, one per line, each naming its key path and the fix.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& msg) : std::runtime_error(msg) {}
};

struct ParallelConfig {
  int64_t data_parallel = 1, model_parallel = 1, pipeline_stage = 1, expert_parallel = 1;
  bool use_seq_parallel = false;
  int64_t micro_batch_num = 1;
  bool vocab_emb_dp = true;
  int64_t gradient_aggregation_group = 4;
  bool optimizer_shard = false;  // parallel.enable_parallel_optimizer or parallel_config.optimizer_shard
  std::string pipeline_scheduler = "1f1b";  // normalised: "gpipe", "1f1b", "interleaved", "zero_bubble_h1"
  int64_t pipeline_chunks = 1;              // model chunks per stage (virtual stages): pp_interleave_num when
                                            // parallel.pipeline_config.pipeline_interleave is True, else 1
  std::vector<int64_t> stage_layers;        // resolved: layers of each virtual stage, pipeline_stage * pipeline_chunks
                                            // entries, virtual stage k = chunk * pipeline_stage + stage; {num_layers} at pp 1
  bool operator==(const ParallelConfig&) const = default;
};

struct LossScaleConfig {
  bool dynamic = false;
  double value = 1.0, factor = 2.0;
  int64_t window = 1000;
  bool operator==(const LossScaleConfig&) const = default;
};

struct DatasetConfig {
  std::string loader_type = "MegatronDataset";
  std::vector<std::pair<double, std::string>> data_path;  // (weight, prefix)
  std::string split = "949,50,1";
  bool shuffle = true;
  uint64_t seed = 1234;
  int64_t num_samples = -1;  // RandomTokens: distinct samples, cycled (-1: every sample new)
  int64_t eval_iters = 10;
  bool operator==(const DatasetConfig&) const = default;
};

// What a CheckpointMonitor callback asks for. Checkpoint saving is not built yet: the loader fills
// this and warns; nothing reads it.
struct CheckpointConfig {
  bool enabled = false;
  std::string prefix = "gridformer";
  int64_t save_steps = 1, keep_max = 5;
  std::string directory;
  bool operator==(const CheckpointConfig&) const = default;
};

// Everything the run is built from. `operator==` lets the config tests prove that a key reaches
// a field: change the key alone, and the settings must differ.
struct Settings {
  int64_t seed = 0;
  std::string run_mode = "train", output_dir = "./output";
  std::string load_checkpoint;  // the weights to start from (load_checkpoint, or in run_mode eval a path in
                                // model_config.checkpoint_name_or_path); checked to exist at load time
  std::string model_name;       // trainer.model_name: the run's label in the log
  bool use_parallel = true;     // False with several ranks: warned at start (the ranks still train together)
  bool resume_training = false;
  ParallelConfig parallel;
  bool recompute = false, select_recompute = false;
  int64_t recompute_num_layers = -1;
  int64_t epochs = 1, batch_size = 1, train_steps = -1;
  int64_t gradient_accumulation_steps = 1;  // runner_config.gradient_accumulation_steps
  double peak_tflops = 0.0;  // MFU peak per rank; 0: the machine probe's (runner/machine_probe.h)
  LossScaleConfig loss_scale;
  bool use_clip_grad = false;
  double max_grad_norm = 1.0;
  std::string optimizer_type = "AdamWeightDecay";
  AdamWConfig adamw;
  LrScheduleConfig lr;
  DatasetConfig train_data, eval_data;
  bool do_eval = false;
  int64_t eval_step_interval = 100;  // -1: not by steps
  int64_t eval_epoch_interval = -1;  // -1: not by epochs
  ModelConfig model;
  int64_t per_print_times = 1;
  CheckpointConfig checkpoint;
  bool operator==(const Settings&) const = default;
};

struct Config : Settings {
  YAML::Node resolved;                // the full resolved tree
  std::vector<std::string> warnings;  // keys that mean nothing here, and what was done instead
  std::set<std::string> consumed;     // key paths the loader read (list items by index)
};

// Reads `path`, applies `overrides` ("a.b.c=value", a YAML scalar or flow value), validates and
// resolves. Throws ConfigError listing every problem: those of the file name the file, those an
// override brings name the override (`--set a.b=c: ...`). An empty file is refused.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
Config load_config_string(const std::string& yaml, const std::vector<std::string>& overrides = {},
                          const std::string& source = "<string>");
std::string dump_resolved(const Config& cfg);

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace gf
