// Builds models from their YAML names: model.arch.type (GPT2LMHeadModel, ...) with the matching
// model.model_config.type (GPT2Config, ...). Unknown names are errors listing what is registered.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "models/blocks/spec.h"
#include "models/causal_lm.h"
#include "parallel/parallel_context.h"

namespace gf {

using ModelFactory = std::function<std::unique_ptr<CausalLM>(const ModelConfig&, const ModelLayout&,
                                                               int64_t micro_batch, const ParallelContext&)>;

// An architecture, as the model room knows it. Its config half (schema section, key rules, reader)
// is its section in runner/config/arch_section.h. Nothing outside the two registries compares an
// architecture's name: what differs between architectures is a field here or there.
struct ModelEntry {
  std::string arch;         // model.arch.type
  std::string config_type;  // model.model_config.type it takes
  ModelFactory factory;
  // What the model is built from, for sizing it without building it (`gridformer plan`); its ffn is the
  // FFN width (ModelConfig::ffn_hidden), its positions the learned table's rows (0: rotary only).
  std::function<TransformerSpec(const ModelConfig&)> spec;
  NameMap names;
  std::string family;  // the name users know (GPT-2, Llama), in messages
  // Mixture of Experts by name (Mixtral): a dense config of this arch is warned about.
  bool expects_experts = false;
  // MindFormers' GPT-2 .ckpt names map onto this model's (models/weights/mindspore_checkpoint.h).
  bool reads_mindformers_gpt2_ckpt = false;
  // Hugging Face's config.json (models/weights/hf_config.h): the file for a config (throws
  // std::invalid_argument naming what transformers' class cannot express), and the keys such a
  // file sets (throws for what this model does not run). Null: no Hugging Face counterpart. The
  // file's "architectures" entry is `arch` (our names are Hugging Face's); `hf_model_type` its
  // model_type, for a file without "architectures".
  std::function<nlohmann::json(const ModelConfig&)> hf_config;
  std::function<void(const nlohmann::json&, ModelConfig&)> read_hf_config;
  std::string hf_model_type;
};

// Every registered architecture: the built-in ones (GPT-2, Llama, Mixtral) and those added since.
const std::vector<ModelEntry>& model_registry();
// Adds an architecture (its arch name must be new). Returns true, so a file can register at static
// initialisation: `static const bool registered = register_architecture({...});`.
bool register_architecture(ModelEntry entry);
// Throws std::invalid_argument naming the bad key and listing the registered names.
const ModelEntry& find_model(const std::string& arch, const std::string& config_type);
std::unique_ptr<CausalLM> build_model(const ModelConfig& cfg, const ModelLayout& layout, int64_t micro_batch,
                                      const ParallelContext& ctx);

}  // namespace gf
