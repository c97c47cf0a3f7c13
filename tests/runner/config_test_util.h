// What the config tests share: the smallest config that loads, and the error a config gives.
#pragma once
#include <string>
#include <vector>

#include "runner/config.h"

namespace gf::config_test {

inline const std::string kMinimal = R"(
model:
  model_config: {type: GPT2Config, seq_length: 32, vocab_size: 1000, hidden_size: 64, num_layers: 2, num_heads: 4}
  arch: {type: GPT2LMHeadModel}
)";

// The smallest LlamaConfig that loads (multi-head: n_kv_heads is None).
inline const std::string kMinimalLlama = R"(
model:
  model_config:
    type: LlamaConfig
    seq_length: 32
    vocab_size: 1000
    hidden_size: 64
    num_layers: 2
    num_heads: 4
  arch: {type: LlamaForCausalLM}
)";

// The ConfigError's message, or "" when the config loads.
inline std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    load_config_string(yaml, sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace gf::config_test
