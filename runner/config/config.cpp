#include "runner/config/config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "runner/config/arch_section.h"
#include "runner/config/read.h"
#include "runner/config/schema.h"
#include "runner/config/tree.h"

namespace gf {

namespace {
constexpr RunMode kRunModes[] = {RunMode::kTrain, RunMode::kFinetune, RunMode::kEval, RunMode::kPredict};
constexpr OptimizerType kOptimizerTypes[] = {OptimizerType::kAdamWeightDecay, OptimizerType::kFusedAdamWeightDecay,
                                             OptimizerType::kFP32StateAdamWeightDecay, OptimizerType::kAdamW};

// The value of `all` whose name is `s`, into `out`; false when none is.
template <typename E, size_t N>
bool parse_by_name(const std::string& s, const E (&all)[N], const char* (*name)(E), E& out) {
  for (const E v : all)
    if (s == name(v)) {
      out = v;
      return true;
    }
  return false;
}
}  // namespace

const char* spike_action_name(SpikeAction a) {
  switch (a) {
    case SpikeAction::kWarn: return "warn";
    case SpikeAction::kSkip: return "skip";
    case SpikeAction::kStop: return "stop";
  }
  return "?";
}

bool parse_spike_action(const std::string& s, SpikeAction& out) {
  constexpr SpikeAction all[] = {SpikeAction::kWarn, SpikeAction::kSkip, SpikeAction::kStop};
  return parse_by_name(s, all, spike_action_name, out);
}

const char* run_mode_name(RunMode m) {
  switch (m) {
    case RunMode::kTrain: return "train";
    case RunMode::kFinetune: return "finetune";
    case RunMode::kEval: return "eval";
    case RunMode::kPredict: return "predict";
  }
  return "?";
}

bool parse_run_mode(const std::string& s, RunMode& out) { return parse_by_name(s, kRunModes, run_mode_name, out); }

const char* optimizer_type_name(OptimizerType t) {
  switch (t) {
    case OptimizerType::kAdamWeightDecay: return "AdamWeightDecay";
    case OptimizerType::kFusedAdamWeightDecay: return "FusedAdamWeightDecay";
    case OptimizerType::kFP32StateAdamWeightDecay: return "FP32StateAdamWeightDecay";
    case OptimizerType::kAdamW: return "AdamW";
  }
  return "?";
}

bool parse_optimizer_type(const std::string& s, OptimizerType& out) {
  return parse_by_name(s, kOptimizerTypes, optimizer_type_name, out);
}

std::string optimizer_type_names() {
  std::string r;
  for (const OptimizerType t : kOptimizerTypes) r += (r.empty() ? "" : ", ") + std::string(optimizer_type_name(t));
  return r;
}

namespace {

struct Override {
  std::string text, key, value;  // "a.b=c", "a.b", "c"
};

// One resolution of the config: the file laid over the defaults, the overrides applied, checked and
// read. Problems are collected, not thrown.
struct Resolution {
  Config c;
  std::vector<std::string> errors;
};

// The model type a file and its overrides ask for (model.model_config.type): it picks the schema.
// Overrides may name it (`--set model.model_config.type=LlamaConfig`), so it is read from the file
// laid over the base schema with the overrides applied; anything unreadable is the base type's.
std::string model_type_of(const YAML::Node& user, const std::vector<Override>& overrides) {
  const std::string& base = arch_sections().front().config_type;
  YAML::Node tree = config_tree::overlay(config_schema(base).defaults(), user);
  for (const auto& o : overrides) {
    try {
      config_tree::set_path(tree, o.key, o.value);
    } catch (const ConfigError&) {  // reported by resolve
    }
  }
  const YAML::Node type = config_tree::find(tree, "model.model_config.type");
  return type.IsScalar() ? type.Scalar() : base;
}

Resolution resolve(const YAML::Node& user, const std::vector<Override>& overrides) {
  const ConfigSchema& schema = config_schema(model_type_of(user, overrides));
  Resolution res;
  Config& c = res.c;
  // Overrides apply to the file laid over the defaults, so they can reach keys (and list items)
  // the file does not mention; the schema check then covers the file and the overrides alike.
  c.resolved = config_tree::overlay(schema.defaults(), user);
  bool lr_schedule_given = user["lr_schedule"].IsDefined();
  for (const auto& o : overrides) {
    try {
      config_tree::set_path(c.resolved, o.key, o.value);
      lr_schedule_given |= o.key == "lr_schedule" || o.key.rfind("lr_schedule.", 0) == 0;
    } catch (const ConfigError& e) {
      res.errors.push_back(e.what());
    }
  }
  config_tree::check(c.resolved, schema, res.errors);
  if (!res.errors.empty()) return res;
  // Only keys that differ from their defaults warn, so the resolved tree gives the same warnings
  // as the file plus the overrides.
  config_tree::apply_rules(c.resolved, schema, c.warnings, res.errors);
  config_read::ReadContext x{config_read::KeyReader(c.resolved, c.consumed), c, res.errors, user, lr_schedule_given,
                             schema.defaults()};
  try {
    config_read::read_training(x);
    config_read::read_parallel(x);
    config_read::read_optimizer(x);
    config_read::read_model(x);
    config_read::read_pipeline(x);
    config_read::read_moe(x);
    config_read::read_lora(x);
    config_read::read_weights(x);
    config_read::read_generation(x);
    config_read::read_callbacks(x);
    config_read::read_tensorboard(x);
    config_read::read_datasets(x);
  } catch (const YAML::Exception& e) {  // a value the schema check let through but its reader cannot convert
    res.errors.push_back(std::string("a value cannot be read: ") + e.what());
  }
  return res;
}

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  YAML::Node n;
  try {
    n = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(source + ": YAML syntax error at line " + std::to_string(e.mark.line + 1) + ", column " +
                      std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (n.IsNull() || (n.IsMap() && n.size() == 0)) throw ConfigError("config " + source + " is empty");
  if (!n.IsMap()) throw ConfigError(source + ": the top level must be a mapping of keys");
  return n;
}

// The key path a message is about: the text between its first backtick and the ':' or backtick after it.
std::string key_of(const std::string& msg) {
  if (msg.empty() || msg[0] != '`') return "";
  const size_t end = msg.find_first_of(":`", 1);
  return end == std::string::npos ? "" : msg.substr(1, end - 1);
}

bool under(const std::string& path, const std::string& prefix) {
  return path == prefix || (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
                            path[prefix.size()] == '.');
}

// A problem that only the overrides bring, said as the override's: `--set a.b=c: ...`.
std::string as_override_problem(const std::string& msg, const std::vector<Override>& overrides) {
  if (msg.rfind("--set ", 0) == 0) return msg;  // set_path's own messages name the override already
  const std::string key = key_of(msg);
  const Override* o = nullptr;
  for (const auto& cand : overrides)
    if (!key.empty() && (under(key, cand.key) || under(cand.key, key))) o = &cand;
  if (!o)
    for (const auto& cand : overrides)
      if (!o && msg.find(cand.key) != std::string::npos) o = &cand;
  if (!o && overrides.size() == 1) o = &overrides[0];
  if (!o) return "--set overrides: " + msg;
  // "`a.b`: unknown key" or "`a.b: c`: must be > 0" -> "--set a.b=c: unknown key" or "--set a.b=c: must be > 0"
  for (const std::string& plain : {"`" + o->key + "`: ", "`" + o->key + ": " + o->value + "`: "})
    if (msg.rfind(plain, 0) == 0) return "--set " + o->text + ": " + msg.substr(plain.size());
  return "--set " + o->text + ": " + msg;
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Config load_config_string(const std::string& yaml, const std::vector<std::string>& overrides,
                          const std::string& source) {
  const YAML::Node user = parse_yaml(yaml, source);
  std::vector<Override> sets;
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) throw ConfigError("--set " + o + ": expects key.path=value");
    sets.push_back({o, o.substr(0, eq), o.substr(eq + 1)});
  }
  Resolution full = resolve(user, sets);
  if (full.errors.empty()) return std::move(full.c);
  // The file's own problems name the file; the ones only the overrides bring name the override.
  const std::vector<std::string> file_errors = sets.empty() ? full.errors : resolve(user, {}).errors;
  std::vector<std::string> mine, theirs;
  for (const auto& e : full.errors) {
    if (std::find(file_errors.begin(), file_errors.end(), e) != file_errors.end()) mine.push_back(e);
    else theirs.push_back(as_override_problem(e, sets));
  }
  const size_t n = full.errors.size();
  std::string msg = mine.empty() ? std::to_string(n) + " problem(s) in the --set overrides:"
                                 : source + ": " + std::to_string(n) + " problem(s) in the config:";
  for (const auto& e : mine) msg += "\n  " + e;
  for (const auto& e : theirs) msg += "\n  " + e;
  throw ConfigError(msg);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open the config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return load_config_string(ss.str(), overrides, path);
}

std::string dump_resolved(const Config& cfg) {
  YAML::Emitter out;
  out << cfg.resolved;
  return std::string(out.c_str()) + "\n";
}

}  // namespace gf
