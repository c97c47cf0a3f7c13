// The parts of the key rules (config_schema.h) that config_keys.cpp, config_keys_llama.cpp and
// config_keys_moe.cpp share: the reasons several keys give, LlamaConfig's model section and the
// moe_config section.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "runner/config_schema.h"

namespace gf::config_keys {

// Shared reasons: kIgnored keys with the same reason share one warning.
inline constexpr const char* kGeneration = "used by text generation (run_mode: predict), which is not built yet";

// LlamaConfig's model.model_config and model.arch rules, and those of the shared keys whose rule
// differs for a Llama (a rule with the path of a shared one replaces it).
std::vector<KeyRule> llama_model_rules();
// moe_config's rules (config_keys_moe.cpp), the same for every model type.
std::vector<KeyRule> moe_rules();
// GPT-2's model_config keys that LlamaConfig does not have: (path, why), refused with the reason.
std::vector<std::pair<std::string, std::string>> llama_foreign_keys();

}  // namespace gf::config_keys
