#include "runner/config/arch_section.h"

#include <fmt/format.h>

#include <stdexcept>

#include "runner/config/keys.h"
#include "runner/config/read.h"

namespace gf {
namespace {

std::string gpt2_ffn_problem(const ModelConfig& m, int64_t mp) {
  return fmt::format("the FFN width `hidden_size` x `expand_ratio` ({} x {} = {}) is not divisible by "
                     "`parallel_config.model_parallel` ({})",
                     m.hidden_size, m.expand_ratio, m.ffn_hidden(), mp);
}

std::string llama_ffn_problem(const ModelConfig& m, int64_t mp) {
  if (m.intermediate_size > 0)
    return fmt::format("the FFN width `model.model_config.intermediate_size` ({}) is not divisible by "
                       "`parallel_config.model_parallel` ({})",
                       m.intermediate_size, mp);
  return fmt::format("the FFN width ({}, derived from `hidden_size` {}{} rounded up to `multiple_of` {}, as "
                     "`intermediate_size` is unset) is not divisible by `parallel_config.model_parallel` ({}); set "
                     "`model.model_config.intermediate_size` to a multiple of it",
                     m.ffn_hidden(), m.hidden_size,
                     m.ffn_dim_multiplier > 0 ? fmt::format(" x `ffn_dim_multiplier` {}", m.ffn_dim_multiplier) : "",
                     m.multiple_of, mp);
}

std::vector<ArchConfigSection>& sections() {
  // The first is the base: its model section is the shared schema's own (kConfigDefaults).
  static std::vector<ArchConfigSection> s = {
      {"GPT2Config", "GPT-2", nullptr, config_keys::gpt2_model_rules, nullptr, config_read::read_gpt2_model,
       gpt2_ffn_problem},
      {"LlamaConfig", "Llama", kLlamaDefaults, config_keys::llama_model_rules, config_keys::llama_foreign_keys,
       config_read::read_llama_model, llama_ffn_problem},
  };
  return s;
}

}  // namespace

const std::vector<ArchConfigSection>& arch_sections() { return sections(); }

const ArchConfigSection* find_arch_section(const std::string& config_type) {
  for (const ArchConfigSection& s : sections())
    if (s.config_type == config_type) return &s;
  return nullptr;
}

const ArchConfigSection& arch_section_or_base(const std::string& config_type) {
  const ArchConfigSection* s = find_arch_section(config_type);
  return s != nullptr ? *s : sections().front();
}

bool register_arch_section(ArchConfigSection section) {
  if (find_arch_section(section.config_type) != nullptr)
    throw std::logic_error("config section " + section.config_type + " registered twice");
  if (!section.model_rules || !section.read || !section.ffn_problem)
    throw std::logic_error("config section " + section.config_type + ": model_rules, read and ffn_problem are required");
  sections().push_back(std::move(section));
  return true;
}

}  // namespace gf
