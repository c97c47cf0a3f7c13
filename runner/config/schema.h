// The config schema (runner/config/schema.cpp: every key with its default) and what gridformer does with
// each key (runner/config/keys.cpp, runner/config/arch/*.cpp). Used by config.cpp and runner/config/tree.cpp.
//
// The schema depends on the model: `model.model_config.type` picks the keys of `model.model_config`
// (GPT2Config's, the default, or LlamaConfig's, as MindFormers' config classes take them); every
// other section is the same for every model.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>
#include <utility>
#include <vector>

namespace gf {

// The schema of a GPT2Config file (the default model type): every key with its default.
extern const char* const kConfigDefaults;
extern const char* const kItemTemplates;
// Paths whose value may have another shape than their default (checked by the loader); of every
// model type (a path absent from a schema does nothing there).
const std::vector<std::string>& polymorphic_keys();

// What happens to a key. Every leaf of the schema (and of the list-item templates) has exactly one
// rule; tests/runner/config_keys_test.cpp (GPT2Config) and config_keys_llama_test.cpp (LlamaConfig)
// prove each disposition on the loader.
enum class KeyUse {
  kBuilt,    // the loader reads it into a Settings field (and refuses values it cannot honour)
  kChecked,  // the loader reads it and warns or refuses as its value needs; it fills nothing
  kCpu,      // means nothing on a CPU: one warning when set to something that would matter on an accelerator
  kIgnored,  // read by nobody: one warning (shared by the keys with the same `why`) when not at its default
  kRefused,  // a feature that is not built: refused when not at its default, `why` says what to do
};

struct KeyRule {
  std::string path;  // dotted; `*` matches one element (a list index)
  KeyUse use;
  std::string why;  // kBuilt: the field it fills; kChecked: what is checked; else the message ("": the default)
};

// GPT2Config's rules (the default model type).
const std::vector<KeyRule>& key_rules();
// The rule of key_rules() whose path matches `path` (list items by index), or nullptr.
const KeyRule* rule_for(const std::string& path);

// The rules of a model type: the sections every model shares, and that type's model section.
// An unknown type gets GPT2Config's (the registry then refuses the name).
std::vector<KeyRule> key_rules_of(const std::string& model_config_type);
// Keys that another model type has and `model_config_type` has not, with what to do instead:
// (path, why). Such a key is refused with its reason rather than as unknown.
std::vector<std::pair<std::string, std::string>> foreign_keys_of(const std::string& model_config_type);

// Everything the loader checks a config against, for one model type.
class ConfigSchema {
 public:
  explicit ConfigSchema(const std::string& model_config_type);
  const std::string& model_type() const { return type_; }
  const YAML::Node& defaults() const { return defaults_; }    // read only: overlay clones it
  const YAML::Node& templates() const { return templates_; }  // list items by the list's path
  const std::vector<KeyRule>& rules() const { return rules_; }
  const KeyRule* rule_for(const std::string& path) const;
  bool polymorphic(const std::string& path) const;
  // Why `path` is not a key of this model type (another type's key), or nullptr.
  const std::string* foreign_key(const std::string& path) const;

 private:
  std::string type_;
  YAML::Node defaults_, templates_;
  std::vector<KeyRule> rules_;
  std::vector<std::vector<std::string>> patterns_;  // rules_' paths split at '.'
  std::vector<std::pair<std::string, std::string>> foreign_;
};

// The schema of a model type, built once (GPT2Config's for an unknown type).
const ConfigSchema& config_schema(const std::string& model_config_type);

}  // namespace gf
