// Hugging Face's config.json beside the weights: written by `gridformer convert --format hf` so that
// transformers' from_pretrained opens the directory, and read where Hugging Face weights are loaded
// so that a config.json that describes another model stops the run before any work, naming the keys.
// The mapping of each architecture is its registry entry's (models/registry.h: hf_config,
// read_hf_config; models/arch/<name>.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/model_config.h"

namespace gf {

// A float32 setting as the decimal it was written as (0.02f as 0.02, not 0.019999999552965164):
// config.json holds the numbers a user reads.
double float_decimal(float v);

// The config.json of `cfg`'s architecture. Throws std::invalid_argument when the architecture has
// no Hugging Face counterpart or the config holds what its class cannot express (the message says which).
nlohmann::json hf_config_json(const ModelConfig& cfg);

// The config.json that goes with the weights at `path` (a directory, or a .safetensors / index
// file in one), parsed; nullopt when there is none. Throws naming the file when it is not JSON.
std::optional<nlohmann::json> read_hf_config_beside(const std::string& path);

// The model a config.json describes, in our terms (the architecture of its "architectures" or
// model_type, its registry entry's read_hf_config); seq_length, which a config.json does not hold, is
// its position table's length capped at 4096. Throws std::runtime_error naming `file` for a model we do
// not run or a setting ours cannot express.
ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& file);

struct HfConfigCheck {
  // Keys whose values give the weights other shapes or the model other arithmetic: the run is refused.
  std::vector<std::string> errors;
  // Keys that differ but leave the weights usable (dropout, initialisation, eos): warned.
  std::vector<std::string> warnings;
};
// `cfg` (the run's model) against `hf` (a config.json): each difference as
// "`model.model_config.num_layers: 4` but config.json's num_hidden_layers is 2". A config.json of
// an architecture we do not run, or holding what ours does not run, is one error.
HfConfigCheck check_hf_config(const nlohmann::json& hf, const ModelConfig& cfg, const std::string& file);

}  // namespace gf
