// Schema checks on YAML trees: unknown keys (with the closest known key), value types, overlaying
// a tree on the defaults, --set overrides, and the CPU-meaningless keys. Used by config.cpp.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace gf::config_tree {

// Sets the node at dotted `path` (list items by index) to the YAML value `value`, creating maps.
void set_path(YAML::Node root, const std::string& path, const std::string& value);

// Appends one message per key of `user` that the schema does not know or whose value has the
// wrong type.
void check(const YAML::Node& user, const YAML::Node& schema, const YAML::Node& item_templates,
           const std::string& path, std::vector<std::string>& errors);

// A deep copy of `defaults` with `user` laid over it (maps merged, everything else replaced;
// null user values keep the default).
YAML::Node overlay(const YAML::Node& defaults, const YAML::Node& user);

// Messages for keys in `user` that mean nothing on a CPU and are set to something that would
// matter on an accelerator (true, non-zero, non-empty, and not the default).
void cpu_warnings(const YAML::Node& user, const YAML::Node& schema, const YAML::Node& templates,
                  const std::string& path, std::vector<std::string>& out);

// The node at dotted `path`, or an undefined node.
YAML::Node find(const YAML::Node& root, const std::string& path);

}  // namespace gf::config_tree
