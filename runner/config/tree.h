// Schema checks on YAML trees: unknown keys (with the closest known key), value types, overlaying
// a tree on the defaults, --set overrides, and the CPU-meaningless keys. Used by config.cpp.
#pragma once
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "runner/config/schema.h"

namespace gf::config_tree {

// Sets the node at dotted `path` (list items by index) to the YAML value `value`, creating maps.
void set_path(YAML::Node root, const std::string& path, const std::string& value);

// Appends one message per key of `user` that the schema does not know (another model type's key with
// the schema's reason) or whose value has the wrong type.
void check(const YAML::Node& user, const ConfigSchema& schema, std::vector<std::string>& errors);

// A deep copy of `defaults` with `user` laid over it (maps merged, everything else replaced;
// null user values keep the default).
YAML::Node overlay(const YAML::Node& defaults, const YAML::Node& user);

// Applies the kCpu, kIgnored and kRefused rules (runner/config/schema.h) to the resolved tree: one warning
// per kCpu key set to something that would matter on an accelerator (true, non-zero, non-empty, and
// not the default), one warning per reason for the kIgnored keys not at their default, one error
// per kRefused key not at its default. A leaf without a rule is an error (a schema key nobody
// decided about).
void apply_rules(const YAML::Node& resolved, const ConfigSchema& schema, std::vector<std::string>& warnings,
                 std::vector<std::string>& errors);

// The default of `path` (list items from the templates), or an undefined node.
YAML::Node default_of(const YAML::Node& schema, const YAML::Node& templates, const std::string& path);

// Whether two values are the same (scalars compared as booleans, numbers or text; lists and maps
// compared as emitted YAML).
bool same_value(const YAML::Node& a, const YAML::Node& b);

// A value shown in a message: the scalar, or the flow-style YAML of a list or map.
std::string show(const YAML::Node& v);

// The node at dotted `path`, or an undefined node.
YAML::Node find(const YAML::Node& root, const std::string& path);

// The JSON of a YAML value (a map such as rope_scaling read with Hugging Face's config.json reader):
// null, true/false (YAML's spellings), integers, numbers, strings, lists and maps.
nlohmann::json to_json(const YAML::Node& v);

}  // namespace gf::config_tree
