// config_keys_test.cpp's proof for a LlamaConfig file: every leaf of the Llama schema (GPT-2's
// sections with LlamaConfig's model section) has exactly one rule (runner/config/arch/llama.cpp for
// the model section), and the loader does what the rule says, each key set alone on a minimal
// Llama. The GPT-2 keys a Llama does not have are refused with their reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>

#include "runner/config/config.h"
#include "runner/config/schema.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using namespace config_test;  // the key-rule probes' helpers (config_test_util.h)

const ConfigSchema& llama() { return config_schema("LlamaConfig"); }

void collect(const YAML::Node& n, const std::string& path, std::vector<std::string>& out) {
  if (llama().templates()[path].IsDefined()) {
    for (auto it = llama().templates()[path].begin(); it != llama().templates()[path].end(); ++it)
      out.push_back(path + ".0." + it->first.as<std::string>());
    return;
  }
  if (n.IsMap() && n.size() > 0) {
    for (auto it = n.begin(); it != n.end(); ++it)
      collect(it->second, (path.empty() ? "" : path + ".") + it->first.as<std::string>(), out);
    return;
  }
  out.push_back(path);
}

std::vector<std::string> leaves() {
  std::vector<std::string> out;
  collect(llama().defaults(), "", out);
  return out;
}


TEST(ConfigKeysLlama, EverySchemaKeyHasExactlyOneRuleAndEveryRuleAKey) {
  const auto all = leaves();
  ASSERT_GT(all.size(), 200u);
  EXPECT_EQ(llama().model_type(), "LlamaConfig");
  for (const std::string& l : all) {
    int n = 0;
    for (const KeyRule& r : llama().rules()) n += pattern_matches(r.path, l);
    EXPECT_EQ(n, 1) << l << " has " << n << " rules";
  }
  for (const KeyRule& r : llama().rules())
    EXPECT_TRUE(std::any_of(all.begin(), all.end(), [&](const std::string& l) { return pattern_matches(r.path, l); }))
        << "rule " << r.path << " matches no key of the Llama schema";
  // Every section but `model` (and trainer.model_name's default) is GPT-2's, with the same rules.
  const ConfigSchema& gpt2 = config_schema("GPT2Config");
  for (const KeyRule& r : gpt2.rules()) {
    if (r.path.rfind("model.", 0) == 0) continue;
    const KeyRule* same = llama().rule_for(r.path);
    ASSERT_NE(same, nullptr) << r.path;
    EXPECT_TRUE(same->use == r.use && same->why == r.why) << r.path;
  }
}

// A value other than `v` that the loader should take (keys whose default is None, or whose generic change the
// model cannot take, are chosen by hand: these, and those of config_test_util.h's probe_value).
std::string other_value(const std::string& path, const YAML::Node& v) {
  const std::string k = "model.model_config.";
  static const std::map<std::string, std::string> chosen = {
      {"callbacks.0.megatron_transformer_impl", "local"},  // Megatron's other --transformer-impl
      {k + "n_kv_heads", "2"}, {k + "max_position_embedding", "64"}, {k + "intermediate_size", "96"},
      {k + "ffn_dim_multiplier", "1.3"}, {k + "rotary_dtype", "float16"}, {k + "embedding_init_type", "bfloat16"},
      {k + "extend_method", "PI"}, {k + "rope_scaling", "{rope_type: linear, factor: 2.0}"}, {k + "head_dim", "32"},
      {k + "query_pre_attn_scalar", "64"}, {k + "layer_types", "[sliding_attention, full_attention]"},
      {k + "rope_local_base_freq", "10000.0"}, {k + "q_lora_rank", "24"}, {k + "kv_lora_rank", "48"},
      {k + "qk_nope_head_dim", "8"}, {k + "qk_rope_head_dim", "4"}, {k + "v_head_dim", "8"},
      {k + "quant_config", "{type: w8a16}"},
      {k + "pet_config", "{pet_type: lora, lora_rank: 8, lora_dropout: 0.0, target_modules: '.*wq|.*wv'}"},
      {k + "checkpoint_name_or_path", "llama2_7b"},
      {"load_checkpoint", config_test::weights_file("config_keys_llama_probe.safetensors")},
  };
  return config_test::probe_value(chosen, path, v);
}

Outcome load(const std::vector<std::string>& sets) { return config_test::load_outcome(kMinimalLlama, sets); }

// What one key does when set alone; "" when that is what its rule says.
std::string probe(const std::string& path) {
  const KeyRule* rule = llama().rule_for(path);
  if (!rule) return "no rule";
  std::vector<std::string> base_sets, sets;
  const std::string key = path.substr(path.rfind('.') + 1);
  if (path.rfind("callbacks.0.", 0) == 0 && key != "type" && key != "per_print_times") {
    const std::string type = config_test::callback_type_of(key);
    base_sets = {"callbacks=[{type: " + type + "}]"};
    sets = {"callbacks=[{type: " + type + ", " + key + ": " + other_value(path, llama().templates()["callbacks"][key]) +
            "}]"};
  } else if (path == "callbacks.0.type") {
    sets = {"callbacks=[{type: CheckpointMonitor}]"};
  } else if (path == "eval_callbacks.0.type") {
    base_sets = {"eval_callbacks=[{type: ObsMonitor}]"};
    sets = {"eval_callbacks=[{type: SummaryMonitor}]"};
  } else if (path == "moe_config.moe_router_score_function") {  // sigmoid scores train no balancing loss
    base_sets = {"moe_config.expert_num=4", "moe_config.aux_loss_factor=0", "moe_config.z_loss_factor=0"};
  } else if (path == "moe_config.moe_router_group_topk") {  // the groups it picks from
    base_sets = {"moe_config.expert_num=4", "moe_config.moe_router_num_groups=2"};
  } else if (path.rfind("moe_config.", 0) == 0 && path != "moe_config.expert_num") {
    base_sets = {"moe_config.expert_num=4"};  // the other moe keys on a MoE model (so top-k up to 4 loads)
  } else if (path == "model.model_config.q_lora_rank" || path == "model.model_config.kv_lora_rank" ||
             path == "model.model_config.qk_nope_head_dim" || path == "model.model_config.qk_rope_head_dim" ||
             path == "model.model_config.v_head_dim") {
    // The latent-attention keys on a DeepSeek-V2 model (the others set).
    base_sets = {"model.arch.type=DeepseekV2ForCausalLM", "model.model_config.kv_lora_rank=32",
                 "model.model_config.qk_nope_head_dim=16", "model.model_config.qk_rope_head_dim=8",
                 "model.model_config.v_head_dim=16"};
  } else if (path == "parallel_config.context_parallel") {
    base_sets = {"parallel_config.context_parallel_algo=ulysses_cp"};  // MindFormers' default algorithm is not built
  } else if (path == "parallel.pipeline_config.pipeline_interleave") {
    // The model chunks per stage come from this key and pp_interleave_num together, over pipeline stages.
    base_sets = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                 "model.model_config.pp_interleave_num=2"};
  } else if (path == "model.model_config.pp_interleave_num") {
    base_sets = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                 "parallel.pipeline_config.pipeline_interleave=True"};
  }
  const Outcome base = load(base_sets);
  if (base.refused) return "the baseline is refused: " + base.error;
  YAML::Node current = YAML::Clone(base.c.resolved);
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    const YAML::Node next = current.IsSequence() ? current[std::stoul(p)] : current[p];
    current.reset(next);
  }
  bool on;
  if (rule->use == KeyUse::kCpu && YAML::convert<bool>::decode(current, on) && on && current.Scalar() != "1") return "";
  if (sets.empty()) {
    sets = base_sets;
    sets.push_back(path + "=" + other_value(path, current));
  }
  const Outcome out = load(sets);
  const bool read = out.refused ? base.c.consumed.count(path) > 0 : out.c.consumed.count(path) > 0;
  const std::string what = "set with --set " + sets.back() + ": ";
  // Keys whose registry holds one name for a Llama: any other value is refused by name.
  const bool refusal_ok = path == "model.model_config.type" || path == "model.arch.type";
  switch (rule->use) {
    case KeyUse::kBuilt:
      if (!read) return what + "the loader did not read it";
      if (out.refused) return refusal_ok ? "" : what + "refused: " + out.error;
      if (static_cast<const Settings&>(out.c) == static_cast<const Settings&>(base.c)) return what + "no field changed";
      return "";
    case KeyUse::kChecked:
      if (!read) return what + "the loader did not read it";
      if (!out.refused && !new_warning_names(base.c, out.c, path)) return what + "neither warned nor refused";
      return "";
    case KeyUse::kCpu:
    case KeyUse::kIgnored:
      if (read) return what + "the loader read it (so it is not ignored: say what it does)";
      if (out.refused) return what + "refused: " + out.error;
      if (!new_warning_names(base.c, out.c, path)) return what + "no warning names it";
      return "";
    case KeyUse::kRefused:
      if (read) return what + "the loader read it";
      if (!out.refused) return what + "accepted";
      if (!names(out.error, path)) return what + "the refusal does not name it: " + out.error;
      return "";
  }
  return "?";
}

TEST(ConfigKeysLlama, EveryKeyIsReadIntoAFieldOrWarnedOrRefused) {
  std::string failures;
  int n = 0;
  for (const std::string& leaf : leaves()) {
    const std::string f = probe(leaf);
    if (!f.empty()) failures += "\n  " + leaf + ": " + f;
    ++n;
  }
  EXPECT_TRUE(failures.empty()) << "keys whose rule the loader does not keep (of " << n << "):" << failures;
}

TEST(ConfigKeysLlama, GptTwoKeysALlamaDoesNotHaveAreRefusedWithTheirReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"expand_ratio=4", "a Llama's SwiGLU width is intermediate_size"},
      {"hidden_act=silu", "a Llama's MLP is SwiGLU (silu(gate) x up)"},
      {"hidden_dropout_rate=0.1", "its Llama trains without dropout"},
      {"attention_dropout_rate=0.0", "its Llama trains without dropout"},
      {"layernorm_epsilon=1e-6", "whose epsilon is rms_norm_eps"},
      {"max_position_embeddings=4096", "LlamaConfig spells it max_position_embedding (singular)"},
      {"num_labels=2", "LlamaConfig has no num_labels"},
  };
  for (auto [set, why] : cases) {
    const std::string key = std::string(set).substr(0, std::string(set).find('='));
    const std::string e = error_of(kMinimalLlama, {std::string("model.model_config.") + set});
    EXPECT_NE(e.find("--set model.model_config." + std::string(set) + ": not a LlamaConfig key: "), std::string::npos)
        << set << ": " << e;
    EXPECT_NE(e.find(why), std::string::npos) << set << ": " << e;
    // Written in the file, the refusal names the key.
    const std::string f = error_of(
        "model:\n  model_config: {type: LlamaConfig, seq_length: 32, vocab_size: 1000, hidden_size: 64, num_layers: 2, "
        "num_heads: 4, " + key + ": 1}\n  arch: {type: LlamaForCausalLM}\n");
    EXPECT_NE(f.find("`model.model_config." + key + "`: not a LlamaConfig key"), std::string::npos) << f;
  }
  // Keys no model type has stay unknown keys, with the closest one.
  const std::string e = error_of(kMinimalLlama, {"model.model_config.n_kv_head=2"});
  EXPECT_NE(e.find("unknown key; did you mean `n_kv_heads`?"), std::string::npos) << e;
}

}  // namespace
}  // namespace gf
