#include "runner/config/tree.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "runner/config/config.h"
#include "runner/config/schema.h"

namespace gf::config_tree {
namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  std::string p;
  while (std::getline(ss, p, '.')) parts.push_back(p);
  return parts;
}

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

bool is_index(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

enum class Kind { kAny, kBool, kInt, kFloat, kString, kMap, kSeq };

Kind kind_of_default(const YAML::Node& d) {
  if (!d.IsDefined() || d.IsNull()) return Kind::kAny;
  if (d.IsMap()) return Kind::kMap;
  if (d.IsSequence()) return Kind::kSeq;
  if (d.Tag() == "!") return Kind::kString;  // quoted in the schema
  const std::string s = d.Scalar();
  if (s == "true" || s == "false") return Kind::kBool;
  try {
    size_t pos = 0;
    std::stoll(s, &pos);
    if (pos == s.size()) return Kind::kInt;
  } catch (...) {
  }
  try {
    size_t pos = 0;
    std::stod(s, &pos);
    if (pos == s.size()) return Kind::kFloat;
  } catch (...) {
  }
  return Kind::kString;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAny: return "any value";
    case Kind::kBool: return "a boolean (True/False)";
    case Kind::kInt: return "an integer";
    case Kind::kFloat: return "a number";
    case Kind::kString: return "a string";
    case Kind::kMap: return "a mapping of keys";
    case Kind::kSeq: return "a list";
  }
  return "?";
}

bool scalar_fits(const YAML::Node& v, Kind k) {
  switch (k) {
    case Kind::kBool: { bool b; return YAML::convert<bool>::decode(v, b); }
    case Kind::kInt: { long long i; return YAML::convert<long long>::decode(v, i); }
    case Kind::kFloat: { double x; return YAML::convert<double>::decode(v, x); }
    default: return true;
  }
}

std::string closest(const std::string& key, const YAML::Node& schema) {
  std::string best;
  size_t best_d = 1000;
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    const std::string k = it->first.as<std::string>();
    const size_t d = edit_distance(key, k);
    if (d < best_d) { best_d = d; best = k; }
  }
  return best_d <= std::max<size_t>(2, key.size() / 3) ? best : "";
}

std::string known_keys(const YAML::Node& schema) {
  std::string r;
  for (auto it = schema.begin(); it != schema.end(); ++it) r += (r.empty() ? "" : ", ") + it->first.as<std::string>();
  return r;
}

bool same_scalar(const YAML::Node& a, const YAML::Node& b) {
  if (!a.IsScalar() || !b.IsDefined() || !b.IsScalar()) return false;
  bool x, y;
  if (YAML::convert<bool>::decode(a, x) && YAML::convert<bool>::decode(b, y)) return x == y;
  double p, q;
  if (YAML::convert<double>::decode(a, p) && YAML::convert<double>::decode(b, q)) return p == q;
  return a.Scalar() == b.Scalar();
}

bool truthy(const YAML::Node& v) {
  if (!v.IsScalar()) return v.IsDefined() && !v.IsNull() && v.size() > 0;
  const std::string s = v.Scalar();
  bool b;
  if (YAML::convert<bool>::decode(v, b)) return b;
  double x;
  if (YAML::convert<double>::decode(v, x)) return x != 0.0;
  return !s.empty() && s != "CPU" && s != "cpu";
}

}  // namespace

namespace {
YAML::Node find_parts(const YAML::Node& n, const std::vector<std::string>& parts, size_t i) {
  if (i == parts.size()) return n;
  const std::string& p = parts[i];
  if (n.IsMap()) {
    const YAML::Node c = n[p];
    if (!c.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    return find_parts(c, parts, i + 1);
  }
  if (n.IsSequence() && is_index(p) && std::stoul(p) < n.size()) return find_parts(n[std::stoul(p)], parts, i + 1);
  return YAML::Node(YAML::NodeType::Undefined);
}
}  // namespace

YAML::Node find(const YAML::Node& root, const std::string& path) {
  return find_parts(root, split_path(path), 0);
}

void set_path(YAML::Node root, const std::string& path, const std::string& value) {
  const auto parts = split_path(path);
  if (parts.empty()) throw ConfigError("--set " + path + "=" + value + ": empty key path");
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set " + path + "=" + value + ": value is not valid YAML: " + e.msg);
  }
  // A list item one past the end, or `+`, appends one (`--set callbacks.1.type=CheckpointMonitor` on a list of
  // one callback, `--set "callbacks.+={type: CheckpointMonitor}"`); further past the end is an error.
  const auto item = [&](const YAML::Node& list, const std::string& part) -> std::optional<size_t> {
    if (part == "+") return list.size();
    if (!is_index(part)) return std::nullopt;
    const size_t idx = std::stoul(part);
    if (idx > list.size())
      throw ConfigError("--set " + path + ": list index " + part + " is past the end (size " + std::to_string(list.size()) +
                        "; index " + std::to_string(list.size()) + " or `+` appends an item)");
    return idx;
  };
  YAML::Node n = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (n.IsSequence() && item(n, parts[i])) {
      const size_t idx = *item(n, parts[i]);
      if (idx == n.size()) n.push_back(YAML::Node(YAML::NodeType::Map));
      n.reset(n[idx]);
    } else {
      if (!n[parts[i]] || n[parts[i]].IsNull() || n[parts[i]].IsScalar()) n[parts[i]] = YAML::Node(YAML::NodeType::Map);
      n.reset(n[parts[i]]);
    }
  }
  if (n.IsSequence() && item(n, parts.back())) {
    const size_t idx = *item(n, parts.back());
    if (idx == n.size()) n.push_back(parsed);
    else n[idx] = parsed;
  } else {
    n[parts.back()] = parsed;
  }
}

namespace {

void check_node(const YAML::Node& user, const YAML::Node& schema, const ConfigSchema& whole, const std::string& path,
                std::vector<std::string>& errors) {
  const Kind k = kind_of_default(schema);
  if (k == Kind::kAny || !user.IsDefined() || user.IsNull()) return;
  if (k == Kind::kMap) {
    if (!user.IsMap()) {
      if (!whole.polymorphic(path)) errors.push_back("`" + path + "`: expects " + kind_name(k));
      return;
    }
    for (auto it = user.begin(); it != user.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      const std::string kp = join(path, key);
      const YAML::Node s = schema[key];
      if (!s.IsDefined()) {
        if (const std::string* why = whole.foreign_key(kp)) {
          errors.push_back("`" + kp + "`: not a " + whole.model_type() + " key: " + *why);
          continue;
        }
        const std::string guess = closest(key, schema);
        errors.push_back("`" + kp + "`: unknown key; " +
                         (guess.empty() ? "known keys here: " + known_keys(schema) : "did you mean `" + guess + "`?"));
        continue;
      }
      check_node(it->second, s, whole, kp, errors);
    }
    return;
  }
  if (k == Kind::kSeq) {
    if (!user.IsSequence()) {
      if (!whole.polymorphic(path)) errors.push_back("`" + path + "`: expects " + kind_name(k));
      return;
    }
    const YAML::Node tmpl = whole.templates()[path];
    if (tmpl.IsDefined())
      for (size_t i = 0; i < user.size(); ++i) check_node(user[i], tmpl, whole, join(path, std::to_string(i)), errors);
    return;
  }
  if (!user.IsScalar()) {
    if (!whole.polymorphic(path)) errors.push_back("`" + path + "`: expects " + kind_name(k));
    return;
  }
  if (!scalar_fits(user, k)) {
    errors.push_back("`" + path + ": " + user.Scalar() + "`: expects " + kind_name(k));
    return;
  }
  // No key of ours means anything by NaN, and every comparison a reader makes with it is false, so a
  // bound written as `v <= 0` would let it through.
  if (double v = 0; k == Kind::kFloat && YAML::convert<double>::decode(user, v) && std::isnan(v))
    errors.push_back("`" + path + ": " + user.Scalar() + "`: not a number; expects " + kind_name(k));
}

}  // namespace

void check(const YAML::Node& user, const ConfigSchema& schema, std::vector<std::string>& errors) {
  check_node(user, schema.defaults(), schema, "", errors);
}

YAML::Node overlay(const YAML::Node& defaults, const YAML::Node& user) {
  if (!user.IsDefined() || user.IsNull()) return YAML::Clone(defaults);
  if (!defaults.IsDefined() || !defaults.IsMap() || !user.IsMap()) return YAML::Clone(user);
  YAML::Node out = YAML::Clone(defaults);
  for (auto it = user.begin(); it != user.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    out[key] = overlay(defaults[key], it->second);
  }
  return out;
}

YAML::Node default_of(const YAML::Node& schema, const YAML::Node& templates, const std::string& path) {
  const YAML::Node def = find(schema, path);
  if (def.IsDefined()) return def;
  const auto parts = split_path(path);
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    if (!is_index(parts[i])) continue;
    std::string list_path = parts[0], rest;
    for (size_t j = 1; j < i; ++j) list_path += "." + parts[j];
    for (size_t j = i + 1; j < parts.size(); ++j) rest += (rest.empty() ? "" : ".") + parts[j];
    return find(templates, list_path + "." + rest);
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string show(const YAML::Node& v) {
  if (!v.IsDefined() || v.IsNull()) return "~";
  if (v.IsScalar()) return v.Scalar();
  YAML::Node flow = YAML::Clone(v);  // a parsed node keeps its block style; one line reads better in a message
  flow.SetStyle(YAML::EmitterStyle::Flow);
  YAML::Emitter e;
  e << flow;
  return e.c_str();
}

bool same_value(const YAML::Node& a, const YAML::Node& b) {
  if (!a.IsDefined() || !b.IsDefined()) return a.IsDefined() == b.IsDefined();
  if (a.IsNull() || b.IsNull()) return a.IsNull() == b.IsNull();
  if (a.IsScalar() && b.IsScalar()) return same_scalar(a, b);
  if (a.IsScalar() != b.IsScalar()) return false;
  return show(a) == show(b);
}

namespace {

struct RuleWalk {
  const ConfigSchema& schema;
  std::vector<std::string>& warnings;
  std::vector<std::string>& errors;
  std::vector<std::pair<std::string, std::string>> ignored;  // (why, "`key: value`, ...")

  void visit(const std::string& path, const YAML::Node& v) {
    const KeyRule* rule = schema.rule_for(path);
    if (!rule) {
      if (v.IsMap() || (v.IsSequence() && find(schema.templates(), path).IsDefined())) return children(path, v);
      errors.push_back("`" + path + "`: the schema has this key but no rule says what gridformer does with it "
                       "(runner/config/keys.cpp)");
      return;
    }
    const YAML::Node def = default_of(schema.defaults(), schema.templates(), path);
    const std::string kv = "`" + path + ": " + show(v) + "`";
    switch (rule->use) {
      case KeyUse::kBuilt:
      case KeyUse::kChecked:
        return;
      case KeyUse::kCpu:
        if (truthy(v) && !same_value(v, def))
          warnings.push_back(kv + (rule->why.empty() ? " has no meaning on a CPU" : ": " + rule->why) + "; ignored");
        return;
      case KeyUse::kIgnored:
        if (!same_value(v, def)) {
          auto it = std::find_if(ignored.begin(), ignored.end(), [&](const auto& p) { return p.first == rule->why; });
          if (it == ignored.end()) ignored.emplace_back(rule->why, kv);
          else it->second += ", " + kv;
        }
        return;
      case KeyUse::kRefused:
        if (!same_value(v, def)) errors.push_back(kv + ": " + rule->why);
        return;
    }
  }

  void children(const std::string& path, const YAML::Node& n) {
    if (n.IsMap()) {
      for (auto it = n.begin(); it != n.end(); ++it) visit(join(path, it->first.as<std::string>()), it->second);
    } else if (n.IsSequence()) {
      for (size_t i = 0; i < n.size(); ++i)
        if (n[i].IsMap()) children(join(path, std::to_string(i)), n[i]);
    }
  }
};

}  // namespace

void apply_rules(const YAML::Node& resolved, const ConfigSchema& schema, std::vector<std::string>& warnings,
                 std::vector<std::string>& errors) {
  RuleWalk walk{schema, warnings, errors, {}};
  walk.children("", resolved);
  for (const auto& [why, keys] : walk.ignored) warnings.push_back(keys + ": " + why + "; ignored");
}

nlohmann::json to_json(const YAML::Node& v) {
  if (!v || v.IsNull()) return nullptr;
  if (v.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const YAML::Node& e : v) a.push_back(to_json(e));
    return a;
  }
  if (v.IsMap()) {
    nlohmann::json m = nlohmann::json::object();
    for (const auto& kv : v) m[kv.first.as<std::string>()] = to_json(kv.second);
    return m;
  }
  const std::string& s = v.Scalar();
  if (v.Tag() == "!") return s;  // quoted: a string whatever it reads like
  bool b = false;
  if (YAML::convert<bool>::decode(v, b)) return b;
  int64_t i = 0;
  if (s.find_first_of(".eE") == std::string::npos && YAML::convert<int64_t>::decode(v, i)) return i;
  double d = 0;
  if (YAML::convert<double>::decode(v, d)) return d;
  return s;
}

}  // namespace gf::config_tree
