// What the config tests share: the smallest config that loads, and the error a config gives.
#pragma once
#include <algorithm>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "runner/config/config.h"
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

}  // namespace gf::config_test
