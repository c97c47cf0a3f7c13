// The config schema (config_schema.cpp: every key with its default) and what gridformer does with
// each key (config_keys.cpp). Used by config.cpp and config_tree.cpp.
#pragma once
#include <string>
#include <vector>

namespace gf {

extern const char* const kConfigDefaults;
extern const char* const kItemTemplates;
const std::vector<std::string>& polymorphic_keys();

// What happens to a key. Every leaf of the schema (and of the list-item templates) has exactly one
// rule; tests/runner/config_keys_test.cpp proves each disposition on the loader.
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

const std::vector<KeyRule>& key_rules();
// The rule whose path matches `path` (list items by index), or nullptr.
const KeyRule* rule_for(const std::string& path);

}  // namespace gf
