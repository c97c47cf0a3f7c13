// The translation of Megatron arguments in progress (runner/config/megatron_args.h): the parsed values, the
// YAML sections being filled, and the sections' functions. Internal to megatron_args*.cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runner/config/megatron_args.h"

namespace gf::megatron_args {

inline std::string str(int64_t v) { return std::to_string(v); }

// The arguments as argparse leaves them: each given one by its first spelling, the rest at the table's
// default. Values were checked against their type and choices when parsed.
class Args {
 public:
  void set(const std::string& name, std::vector<std::string> values) { given_[name] = std::move(values); }
  bool has(const std::string& name) const { return given_.count(name) != 0; }
  bool flag(const std::string& name) const { return has(name); }
  // The value given, else the table's default; nullopt for None.
  std::optional<std::string> text(const std::string& name) const;
  std::optional<int64_t> opt_int(const std::string& name) const;
  std::optional<double> opt_float(const std::string& name) const;
  int64_t i(const std::string& name) const { return opt_int(name).value_or(0); }
  double f(const std::string& name) const { return opt_float(name).value_or(0.0); }
  std::string s(const std::string& name) const { return text(name).value_or(""); }
  const std::vector<std::string>& list(const std::string& name) const;

 private:
  std::map<std::string, std::vector<std::string>> given_;
};

// Parses a Python int / float as argparse's type=int / type=float do.
bool parse_int(const std::string& s, int64_t& out);
bool parse_float(const std::string& s, double& out);
// A double as the shortest decimal that reads back as it, with a '.' (1.0e-08, 4294967296.0).
YAML::Node num(double v);

struct Job {
  Job(const Args& args, int world_size, MegatronTranslation& out) : a(args), world(world_size), t(out) {}
  const Args& a;
  const int world;
  MegatronTranslation& t;
  // The YAML's sections, assembled in this order at the end (empty ones left out). Made as maps (and a
  // list) so that a copy of the handle writes into the section itself.
  static YAML::Node map() { return YAML::Node(YAML::NodeType::Map); }
  YAML::Node top = map(), runner_config = map(), runner_wrapper = map(), parallel = map(), parallel_config = map(),
             moe_config = map(), recompute_config = map(), trainer = map(), train_dataset = map(), eval_dataset = map(),
             model = map(), lr_schedule = map(), optimizer = map(), callbacks = YAML::Node(YAML::NodeType::Sequence),
             processor = map();
  YAML::Node model_config() { return model["model_config"]; }
  // Derived as the sections go.
  int64_t tp = 1, pp = 1, cp = 1, dp = 1, ep = 1, micro = 1, global = 1, gas = 1, layers = 0, seq = 0, chunks = 1;
  int64_t vocab = 0, eod = 0;
  bool llama = false, task = false, training = true, fp16 = false, bf16 = false, experts = false;
  std::vector<double> split;

  void error(const std::string& arg, const std::string& why) { t.errors.push_back("`" + arg + "`: " + why); }
  void note(const std::string& arg, const std::string& why) { t.notes.push_back("`" + arg + "`: " + why); }
  void differ(const std::string& what) { t.differences.push_back(what); }
  // `--name VALUE` as given (or the name alone for a flag), for messages.
  std::string given(const std::string& name) const;
};

// The sections, in the order they run (megatron_args.cpp: layout, vocabulary; megatron_args_model.cpp:
// model, experts; megatron_args_train.cpp: precision, recompute, schedule, data, output, task, environment).
void translate_layout(Job& j);
void translate_vocabulary(Job& j);
void translate_model(Job& j);
void translate_experts(Job& j);
void translate_precision(Job& j);
void translate_recompute(Job& j);
void translate_schedule(Job& j);
void translate_data(Job& j);
void translate_output(Job& j);
void translate_task(Job& j);
void translate_environment(Job& j, const std::map<std::string, std::string>& env);

}  // namespace gf::megatron_args
