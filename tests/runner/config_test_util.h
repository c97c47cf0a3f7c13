// What the config tests share: the smallest config that loads, the error a config gives, and MindFormers' files.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/layout_check.h"
#include "runner/config/read.h"

namespace gf::config_test {

inline const std::string kMinimal = R"(
model:
  model_config: {type: GPT2Config, seq_length: 32, vocab_size: 1000, hidden_size: 64, num_layers: 2, num_heads: 4}
  arch: {type: GPT2LMHeadModel}
)";

// The smallest LlamaConfig that loads (multi-head: n_kv_heads is None).
inline const std::string kMinimalLlama = R"(
model:
  model_config:
    type: LlamaConfig
    seq_length: 32
    vocab_size: 1000
    hidden_size: 64
    num_layers: 2
    num_heads: 4
  arch: {type: LlamaForCausalLM}
)";

// The ConfigError's message, or "" when the config loads.
inline std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    load_config_string(yaml, sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The key-rule probes (config_keys_test, config_keys_llama_test) share these.
struct Outcome {
  bool refused = false;
  std::string error;
  Config c;
};

inline Outcome load_outcome(const std::string& yaml, const std::vector<std::string>& sets) {
  Outcome o;
  try {
    o.c = load_config_string(yaml, sets);
  } catch (const ConfigError& e) {
    o.refused = true;
    o.error = e.what();
  }
  return o;
}

// Whether a rule's dotted pattern (`*` matches one component) matches `path`.
inline bool pattern_matches(const std::string& pattern, const std::string& path) {
  std::stringstream a(pattern), b(path);
  std::string x, y;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(a, x, '.')), gb = static_cast<bool>(std::getline(b, y, '.'));
    if (ga != gb) return false;
    if (!ga) return true;
    if (x != "*" && x != y) return false;
  }
}

inline std::string number(double v) {
  std::ostringstream os;
  os << std::setprecision(12) << v;
  return os.str();
}

// Whether `msg` names `path` (in full, or its leaf within its section, as grouped messages do).
inline bool names(const std::string& msg, const std::string& path) {
  if (msg.find(path) != std::string::npos) return true;
  const std::string leaf = path.substr(path.rfind('.') + 1), section = path.substr(0, path.find('.'));
  return msg.find(leaf) != std::string::npos && msg.find(section) != std::string::npos;
}

// The callback type a callbacks item key belongs to, for the key-rule probes: the SummaryMonitor's
// keys on a SummaryMonitor, the others (CheckpointMonitor's) on a CheckpointMonitor.
inline std::string callback_type_of(const std::string& key) {
  const auto& s = config_read::summary_monitor_keys();
  return std::find(s.begin(), s.end(), key) != s.end() ? "SummaryMonitor" : "CheckpointMonitor";
}

// Whether `probe` has a warning `base` has not that names `path`.
inline bool new_warning_names(const Config& base, const Config& probe, const std::string& path) {
  for (const auto& w : probe.warnings)
    if (std::find(base.warnings.begin(), base.warnings.end(), w) == base.warnings.end() && names(w, path)) return true;
  return false;
}

// An existing weights file for load_checkpoint, GF_BINARY_DIR/NAME (only its existence and name are checked at load).
inline std::string weights_file(const std::string& name) {
  const std::string p = std::string(GF_BINARY_DIR) + "/" + name;
  std::ofstream(p) << "";
  return p;
}

// A value other than `v` (the key's resolved value at `path`) that the loader should take, for the key-rule probes:
// `chosen`'s for its keys (the probe's own), else the value both probes choose by hand for keys whose default is
// None or whose generic change the model cannot take, else the generic change: a bool negated, an integer + 1
// (-1: 2), a number x 1.5 (0: 0.5), anything else "gf_probe".
inline std::string probe_value(const std::map<std::string, std::string>& chosen, const std::string& path,
                               const YAML::Node& v) {
  const std::string k = "model.model_config.";
  static const std::map<std::string, std::string> both = {
      {"run_mode", "eval"}, {"output_dir", "./probe_output"}, {k + "hidden_size", "128"}, {k + "num_heads", "8"},
      {k + "compute_dtype", "bfloat16"}, {k + "param_init_type", "bfloat16"}, {k + "layernorm_compute_type", "bfloat16"},
      {k + "softmax_compute_type", "bfloat16"}, {"lr_schedule.type", "cosine"},
      {"optimizer.type", "AdamW"}, {k + "top_p", "0.9"}, {"optimizer.beta1", "0.8"}, {"optimizer.beta2", "0.95"},
      {"optimizer.betas", "[0.8, 0.95]"}, {"optimizer.learning_rate", "0.002"}, {"optimizer.moment_dtype", "bfloat16"},
      {"train_dataset.data_loader.type", "RandomTokens"}, {"eval_dataset.data_loader.type", "RandomTokens"},
      {"train_dataset.data_loader.split", "90,5,5"}, {"eval_dataset.data_loader.split", "90,5,5"},
      {"train_dataset.data_loader.data_path", "probe/prefix"}, {"eval_dataset.data_loader.data_path", "probe/prefix"},
      {"train_dataset.input_columns", "[input_ids, labels]"}, {"eval_dataset.input_columns", "[input_ids, labels]"},
      {"train_dataset_task.dataset_config", "{data_loader: {type: RandomTokens}}"},
      {"eval_dataset_task.dataset_config", "{data_loader: {type: RandomTokens}}"}, {"callbacks.0.type", "CheckpointMonitor"},
      {"moe_config.routing_policy", "TopkRouterV2"}, {"moe_config.router_dense_type", "bfloat16"},
      {"moe_config.token_drop_policy", "probs"}, {"moe_config.token_dispatcher", "allgather"},
      {"moe_config.moe_ffn_hidden_size", "32"}, {"moe_config.moe_router_score_function", "sigmoid"},
      {"moe_config.moe_router_group_score_topk", "1"}, {"moe_config.moe_shared_expert_intermediate_size", "32"},
      {"moe_config.mlp_only_layers", "[0]"}, {"parallel.pipeline_config.pipeline_scheduler", "gpipe"},
      {"monitor_config.spike_action", "skip"}, {"parallel.collectives", "mpi"},
      {"parallel_config.context_parallel_algo", "ulysses_cp"}, {k + "sliding_window", "64"}, {k + "pre_tokens", "63"},
      {"log_format", "megatron"},
  };
  if (auto it = chosen.find(path); it != chosen.end()) return it->second;
  if (auto it = both.find(path); it != both.end()) return it->second;
  if (v.IsScalar()) {
    bool b;
    long long i;
    double d;
    if (YAML::convert<bool>::decode(v, b)) return b ? "False" : "True";
    if (YAML::convert<long long>::decode(v, i)) return std::to_string(i == -1 ? 2 : i + 1);
    if (YAML::convert<double>::decode(v, d)) return number(d == 0 ? 0.5 : d * 1.5);
  }
  return "gf_probe";
}

// A file of MindFormers' own under tests/data/mindformers (config_mindformers_test, config_mindformers_llama_test).
inline std::string mindformers_data(const std::string& f) { return std::string(GF_SOURCE_DIR) + "/tests/data/mindformers/" + f; }

// What that file refuses: its ConfigError's message, else its layout problems a line each ("": none).
inline std::string file_error(const std::string& f, const std::vector<std::string>& sets = {}) {
  try {
    const Config c = load_config(mindformers_data(f), sets);
    std::string all;
    for (const auto& u : config_layout_problems(c)) all += u + "\n";
    return all;
  } catch (const ConfigError& e) {
    return e.what();
  }
}

// Whether one of c's warnings holds `needle`.
inline bool has_warning(const Config& c, const std::string& needle) {
  return std::any_of(c.warnings.begin(), c.warnings.end(), [&](const std::string& w) { return w.find(needle) != std::string::npos; });
}

// A MindFormers file, what it refuses as it is ("": nothing), and the overrides that make it load.
struct MindFormersFile {
  const char* file;
  const char* refusal;
  std::vector<std::string> sets;
};

// f loaded as its test expects: as it is when it refuses nothing, else refused naming f.refusal and then loaded
// with f.sets; warned that MindFormers' Ascend target means nothing here, and of no unknown key. The config.
inline Config load_mindformers_file(const MindFormersFile& f) {
  const std::string e = file_error(f.file);
  if (std::string(f.refusal).empty()) {
    EXPECT_EQ(e, "") << f.file;
  } else {
    EXPECT_NE(e.find(f.refusal), std::string::npos) << f.file << ": " << e;
    EXPECT_EQ(file_error(f.file, f.sets), "") << f.file;
  }
  Config c = load_config(mindformers_data(f.file), f.sets);
  EXPECT_TRUE(has_warning(c, "`context.device_target: Ascend` has no meaning on a CPU")) << f.file;
  for (const auto& w : c.warnings) EXPECT_EQ(w.find("unknown"), std::string::npos) << f.file << ": " << w;
  return c;
}

}  // namespace gf::config_test
