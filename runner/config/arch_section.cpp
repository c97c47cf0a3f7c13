#include "runner/config/arch_section.h"

#include <stdexcept>

#include "runner/config/arch/sections.h"

namespace gf {
namespace {

std::vector<ArchConfigSection>& sections() {
  // The first is the base: its model section is the shared schema's own (kConfigDefaults).
  static std::vector<ArchConfigSection> s = {
      gpt2_config_section(),
      llama_config_section(),
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
