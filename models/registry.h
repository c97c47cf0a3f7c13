// Builds models from their YAML names: model.arch.type (GPT2LMHeadModel, ...) with the matching
// model.model_config.type (GPT2Config, ...). Unknown names are errors listing what is registered.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/blocks/spec.h"
#include "models/causal_lm.h"
#include "parallel/parallel_context.h"

namespace gf {

using ModelFactory = std::function<std::unique_ptr<CausalLM>(const ModelConfig&, const ModelLayout&,
                                                               int64_t micro_batch, const ParallelContext&)>;

struct ModelEntry {
  std::string arch;         // model.arch.type
  std::string config_type;  // model.model_config.type it takes
  ModelFactory factory;
  // What the model is built from, for sizing it without building it (`gridformer plan`).
  std::function<TransformerSpec(const ModelConfig&)> spec;
  NameMap names;
};

const std::vector<ModelEntry>& model_registry();
// Throws std::invalid_argument naming the bad key and listing the registered names.
const ModelEntry& find_model(const std::string& arch, const std::string& config_type);
std::unique_ptr<CausalLM> build_model(const ModelConfig& cfg, const ModelLayout& layout, int64_t micro_batch,
                                      const ParallelContext& ctx);

}  // namespace gf
