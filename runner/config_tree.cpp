#include "runner/config_tree.h"

#include <algorithm>
#include <sstream>

#include "runner/config.h"
#include "runner/config_schema.h"

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

bool polymorphic(const std::string& path) {
  const auto& p = polymorphic_keys();
  return std::find(p.begin(), p.end(), path) != p.end();
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

bool matches(const std::vector<std::string>& pattern, const std::vector<std::string>& path) {
  if (pattern.size() != path.size()) return false;
  for (size_t i = 0; i < path.size(); ++i)
    if (pattern[i] != "*" && pattern[i] != path[i]) return false;
  return true;
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
  YAML::Node n = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (n.IsSequence() && is_index(parts[i])) {
      const size_t idx = std::stoul(parts[i]);
      if (idx >= n.size())
        throw ConfigError("--set " + path + ": list index " + parts[i] + " is past the end (size " + std::to_string(n.size()) + ")");
      n.reset(n[idx]);
    } else {
      if (!n[parts[i]] || n[parts[i]].IsNull() || n[parts[i]].IsScalar()) n[parts[i]] = YAML::Node(YAML::NodeType::Map);
      n.reset(n[parts[i]]);
    }
  }
  if (n.IsSequence() && is_index(parts.back())) {
    const size_t idx = std::stoul(parts.back());
    if (idx >= n.size()) throw ConfigError("--set " + path + ": list index past the end");
    n[idx] = parsed;
  } else {
    n[parts.back()] = parsed;
  }
}

void check(const YAML::Node& user, const YAML::Node& schema, const YAML::Node& templates,
           const std::string& path, std::vector<std::string>& errors) {
  const Kind k = kind_of_default(schema);
  if (k == Kind::kAny || !user.IsDefined() || user.IsNull()) return;
  if (k == Kind::kMap) {
    if (!user.IsMap()) {
      if (!polymorphic(path)) errors.push_back("`" + path + "`: expects " + kind_name(k));
      return;
    }
    for (auto it = user.begin(); it != user.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      const std::string kp = join(path, key);
      const YAML::Node s = schema[key];
      if (!s.IsDefined()) {
        const std::string guess = closest(key, schema);
        errors.push_back("`" + kp + "`: unknown key; " +
                         (guess.empty() ? "known keys here: " + known_keys(schema) : "did you mean `" + guess + "`?"));
        continue;
      }
      check(it->second, s, templates, kp, errors);
    }
    return;
  }
  if (k == Kind::kSeq) {
    if (!user.IsSequence()) {
      if (!polymorphic(path)) errors.push_back("`" + path + "`: expects " + kind_name(k));
      return;
    }
    const YAML::Node tmpl = templates[path];
    if (tmpl.IsDefined())
      for (size_t i = 0; i < user.size(); ++i) check(user[i], tmpl, templates, join(path, std::to_string(i)), errors);
    return;
  }
  if (!user.IsScalar()) {
    if (!polymorphic(path)) errors.push_back("`" + path + "`: expects " + kind_name(k));
    return;
  }
  if (!scalar_fits(user, k))
    errors.push_back("`" + path + ": " + user.Scalar() + "`: expects " + kind_name(k));
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

void cpu_warnings(const YAML::Node& user, const YAML::Node& schema, const YAML::Node& templates,
                  const std::string& path, std::vector<std::string>& out) {
  if (!user.IsMap() && !user.IsSequence()) return;
  auto visit = [&](const std::string& kp, const YAML::Node& v) {
    const auto parts = split_path(kp);
    bool ignored = false;
    for (const auto& pat : cpu_ignored_keys()) ignored |= matches(split_path(pat), parts);
    if (ignored) {
      YAML::Node def = find(schema, kp);
      if (!def.IsDefined() && parts.size() >= 3 && is_index(parts[parts.size() - 2])) {
        std::string list_path = parts[0];
        for (size_t i = 1; i + 2 < parts.size(); ++i) list_path += "." + parts[i];
        def = find(templates, list_path + "." + parts.back());
      }
      if (truthy(v) && !same_scalar(v, def)) {
        std::string shown = v.IsScalar() ? v.Scalar() : "...";
        out.push_back("`" + kp + ": " + shown + "` has no meaning on a CPU; ignored");
      }
      return;
    }
    cpu_warnings(v, schema, templates, kp, out);
  };
  if (user.IsMap()) {
    for (auto it = user.begin(); it != user.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      if (path.empty() && (key == "train_dataset_task" || key == "eval_dataset_task")) continue;  // aliases
      visit(join(path, key), it->second);
    }
  } else {
    for (size_t i = 0; i < user.size(); ++i) visit(join(path, std::to_string(i)), user[i]);
  }
}

}  // namespace gf::config_tree
