// An architecture's half of the config room: what its `model.model_config.type` brings to the
// schema, the key rules and the reader. The other half, the model itself (spec, names, factory,
// Hugging Face mapping), is its entry in models/registry.h. Adding an architecture is an entry in
// each: models/arch/<name>.cpp and a section here (built in below, or register_arch_section from
// anywhere, as tests/models/test_arch_test.cpp does). No code outside the two registries asks which
// architecture a config names.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/model_config.h"
#include "runner/config/schema.h"

namespace gf {
namespace config_read {
struct ReadContext;
}

struct ArchConfigSection {
  std::string config_type;  // model.model_config.type (GPT2Config)
  std::string family;       // the name users know (GPT-2), in messages
  // The schema's `model` section and trainer.model_name for this type, as YAML text (the rest of the
  // schema is shared); nullptr: the base schema's own (GPT2Config's).
  const char* model_defaults = nullptr;
  // Its model section's key rules (a rule with the path of a shared one replaces it).
  std::function<std::vector<KeyRule>()> model_rules;
  // Other types' keys that this one lacks, with what to do instead (refused with that reason).
  std::function<std::vector<std::pair<std::string, std::string>>()> foreign_keys;
  // Reads model.model_config (and model.arch.type) into Settings::model.
  std::function<void(config_read::ReadContext&)> read;
  // Why the FFN width does not split over `mp` tensor-parallel ranks, said in this type's keys.
  std::function<std::string(const ModelConfig&, int64_t mp)> ffn_problem;
  // The YAML of a model (its `model:` section, and `moe_config:` for a mixture of experts) in this type's
  // keys, for `gridformer config --from-hf`; nullptr: the type cannot be written out.
  std::function<std::string(const ModelConfig&)> model_yaml = nullptr;
};

// Every section: the built-in ones (GPT2Config, LlamaConfig) and those registered since.
const std::vector<ArchConfigSection>& arch_sections();
// The section of `config_type`, or nullptr.
const ArchConfigSection* find_arch_section(const std::string& config_type);
// The section of `config_type`, or the base one (GPT2Config's) for a type nobody registered: the
// model registry then refuses the name with the list of registered ones.
const ArchConfigSection& arch_section_or_base(const std::string& config_type);
// Adds a section (its config_type must be new). Returns true, so a file can register at static
// initialisation: `static const bool registered = register_arch_section({...});`.
bool register_arch_section(ArchConfigSection section);

}  // namespace gf
