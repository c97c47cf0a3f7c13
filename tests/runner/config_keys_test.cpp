// Nothing in a config is ignored without a word. Every leaf of the schema (and of the list-item
// templates) has exactly one rule in runner/config/keys.cpp, and the loader does what the rule
// says: each key alone is set to a value other than its default and the load is compared with the
// load without it.
//   kBuilt    the loader reads the key (it is in Config::consumed) and the Settings differ;
//   kChecked  the loader reads the key and a new warning names it, or the load is refused;
//   kCpu, kIgnored  nobody reads the key and a new warning names it;
//   kRefused  nobody reads the key and the load is refused.
// A key that nobody reads and nobody warns about fails here, whatever its rule says.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>

#include "runner/config/config.h"
#include "tests/runner/config_test_util.h"
#include "runner/config/schema.h"

namespace gf {
namespace {

using namespace config_test;  // the key-rule probes' helpers (config_test_util.h)

struct Leaf {
  std::string path;
};

// The leaves of the schema; list items (callbacks, eval_callbacks) from the templates, as index 0.
void collect(const YAML::Node& n, const std::string& path, const YAML::Node& templates, std::vector<Leaf>& out) {
  if (templates[path].IsDefined()) {
    for (auto it = templates[path].begin(); it != templates[path].end(); ++it)
      out.push_back({path + ".0." + it->first.as<std::string>()});
    return;
  }
  if (n.IsMap() && n.size() > 0) {
    for (auto it = n.begin(); it != n.end(); ++it)
      collect(it->second, (path.empty() ? "" : path + ".") + it->first.as<std::string>(), templates, out);
    return;
  }
  out.push_back({path});
}

std::vector<Leaf> schema_leaves() {
  std::vector<Leaf> out;
  collect(YAML::Load(kConfigDefaults), "", YAML::Load(kItemTemplates), out);
  return out;
}


TEST(ConfigKeys, EverySchemaKeyHasExactlyOneRuleAndEveryRuleAKey) {
  const auto leaves = schema_leaves();
  ASSERT_GT(leaves.size(), 150u);
  for (const Leaf& l : leaves) {
    int n = 0;
    for (const KeyRule& r : key_rules()) n += pattern_matches(r.path, l.path);
    EXPECT_EQ(n, 1) << l.path << " has " << n << " rules in runner/config/keys.cpp";
  }
  for (const KeyRule& r : key_rules()) {
    const bool used = std::any_of(leaves.begin(), leaves.end(), [&](const Leaf& l) { return pattern_matches(r.path, l.path); });
    EXPECT_TRUE(used) << "rule " << r.path << " matches no key of the schema";
  }
}

// A value other than `v` (the key's resolved value) that the loader should take: these keys' by hand, the others
// as config_test_util.h's probe_value gives them.
std::string other_value(const std::string& path, const YAML::Node& v) {
  static const std::map<std::string, std::string> chosen = {
      {"load_checkpoint", config_test::weights_file("config_keys_probe.safetensors")},
      {"model.model_config.hidden_act", "gelu_new"},
      {"model.model_config.pet_config", "{r: 4, target_modules: [c_attn]}"},
      {"model.model_config.position_embedding_type", "rope"},
      {"callbacks.0.megatron_transformer_impl", "local"},  // Megatron's other --transformer-impl
  };
  return config_test::probe_value(chosen, path, v);
}

YAML::Node resolved_value(const YAML::Node& root, const std::string& path) {
  YAML::Node n = YAML::Clone(root);
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    const YAML::Node next = n.IsSequence() ? n[std::stoul(p)] : n[p];
    n.reset(next);
  }
  return n;
}

Outcome load(const std::vector<std::string>& sets) { return config_test::load_outcome(kMinimal, sets); }

const char* use_name(KeyUse u) {
  switch (u) {
    case KeyUse::kBuilt: return "built";
    case KeyUse::kChecked: return "checked";
    case KeyUse::kCpu: return "cpu";
    case KeyUse::kIgnored: return "ignored";
    case KeyUse::kRefused: return "refused";
  }
  return "?";
}

// Built keys whose registry holds one name: any other value is refused by name.
bool single_valued(const std::string& path) { return path == "model.model_config.type" || path == "model.arch.type"; }

// What one key does when set alone; "" when that is what its rule says.
std::string probe(const Leaf& leaf) {
  const KeyRule* rule = rule_for(leaf.path);
  if (!rule) return "no rule";
  std::vector<std::string> base_sets, sets;
  const std::string key = leaf.path.substr(leaf.path.rfind('.') + 1);
  if (leaf.path.rfind("callbacks.0.", 0) == 0 && key != "type" && key != "per_print_times") {
    const std::string type = config_test::callback_type_of(key);
    base_sets = {"callbacks=[{type: " + type + "}]"};
    const YAML::Node def = YAML::Load(kItemTemplates)["callbacks"][key];
    sets = {"callbacks=[{type: " + type + ", " + key + ": " + other_value(leaf.path, def) + "}]"};
  } else if (leaf.path == "callbacks.0.type") {  // the default item's per_print_times belongs to MFLossMonitor
    sets = {"callbacks=[{type: CheckpointMonitor}]"};
  } else if (leaf.path == "eval_callbacks.0.type") {
    base_sets = {"eval_callbacks=[{type: ObsMonitor}]"};
    sets = {"eval_callbacks=[{type: SummaryMonitor}]"};
  } else if (leaf.path == "moe_config.moe_router_score_function") {  // sigmoid scores train no balancing loss
    base_sets = {"moe_config.expert_num=4", "moe_config.aux_loss_factor=0", "moe_config.z_loss_factor=0"};
  } else if (leaf.path == "moe_config.moe_router_group_topk") {  // the groups it picks from
    base_sets = {"moe_config.expert_num=4", "moe_config.moe_router_num_groups=2"};
  } else if (leaf.path.rfind("moe_config.", 0) == 0 && leaf.path != "moe_config.expert_num") {
    base_sets = {"moe_config.expert_num=4"};  // the other moe keys on a MoE model (so top-k up to 4 loads)
  } else if (leaf.path == "parallel_config.context_parallel") {
    base_sets = {"parallel_config.context_parallel_algo=ulysses_cp"};  // MindFormers' default algorithm is not built
  } else if (leaf.path == "parallel.pipeline_config.pipeline_interleave") {
    // The model chunks per stage come from this key and pp_interleave_num together, over pipeline stages.
    base_sets = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                 "model.model_config.pp_interleave_num=2"};
  } else if (leaf.path == "model.model_config.pp_interleave_num") {
    base_sets = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                 "parallel.pipeline_config.pipeline_interleave=True"};
  }
  const Outcome base = load(base_sets);
  if (base.refused) return "the baseline is refused: " + base.error;
  const YAML::Node current = resolved_value(base.c.resolved, leaf.path);
  bool on;
  if (rule->use == KeyUse::kCpu && YAML::convert<bool>::decode(current, on) && on && current.Scalar() != "1")
    return "";  // a CPU-only switch that is on by default: turning it off asks for nothing, so nothing to warn about
  if (sets.empty()) {
    sets = base_sets;
    sets.push_back(leaf.path + "=" + other_value(leaf.path, current));
  }
  const Outcome out = load(sets);
  const bool read = out.refused ? base.c.consumed.count(leaf.path) > 0 : out.c.consumed.count(leaf.path) > 0;
  const std::string what = std::string(use_name(rule->use)) + " key, set with --set " + sets.back() + ": ";
  switch (rule->use) {
    case KeyUse::kBuilt:
      if (!read) return what + "the loader did not read it";
      if (out.refused && !single_valued(leaf.path)) return what + "refused: " + out.error;
      if (out.refused) return "";
      if (static_cast<const Settings&>(out.c) == static_cast<const Settings&>(base.c)) return what + "no field changed";
      return "";
    case KeyUse::kChecked:
      if (!read) return what + "the loader did not read it";
      if (!out.refused && !new_warning_names(base.c, out.c, leaf.path)) return what + "neither warned nor refused";
      return "";
    case KeyUse::kCpu:
    case KeyUse::kIgnored:
      if (read) return what + "the loader read it (so it is not ignored: say what it does)";
      if (out.refused) return what + "refused: " + out.error;
      if (!new_warning_names(base.c, out.c, leaf.path)) return what + "no warning names it";
      return "";
    case KeyUse::kRefused:
      if (read) return what + "the loader read it";
      if (!out.refused) return what + "accepted";
      return "";
  }
  return "?";
}

TEST(ConfigKeys, EveryKeyIsReadIntoAFieldOrWarnedOrRefused) {
  std::string failures;
  int n = 0;
  for (const Leaf& leaf : schema_leaves()) {
    const std::string f = probe(leaf);
    if (!f.empty()) failures += "\n  " + leaf.path + ": " + f;
    ++n;
  }
  EXPECT_TRUE(failures.empty()) << "keys whose rule the loader does not keep (of " << n << "):" << failures;
}

}  // namespace
}  // namespace gf
