// The parts of the key rules (runner/config/schema.h) that runner/config/keys.cpp, runner/config/arch/*.cpp and
// runner/config/keys_moe.cpp share: the reasons several keys give, LlamaConfig's model section and the
// moe_config section.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "runner/config/schema.h"

namespace gf::config_keys {

// Shared reasons: kIgnored keys with the same reason share one warning.
inline constexpr const char* kGeneration =
    "a MindFormers generation setting that gridformer predict does not use (runner/infer/generate.h lists those it reads)";
inline constexpr const char* kGenerationBuilt = "generation (gridformer predict; runner/config/read_generation.cpp)";
// model_config.offset and pp_interleave_num: GPT2Config's and LlamaConfig's alike.
inline constexpr const char* kOffset =
    "parallel.layer_offset and parallel.stage_layers: layers moved between pipeline stages, MindFormers' int (layer i "
    "on stage min((i + offset) // pp_dis, pipeline_stage - 1)), list per stage (num_layers // pipeline_stage + "
    "offset[s] layers) or [chunk][stage] lists (parallel/pipeline/partition.h); refused (the layout check) when it "
    "leaves a stage empty or the layers do not add up. MindFormers' GPT2Model reads no offset (it passes 0); here it "
    "applies to GPT-2 as to a Llama";
inline constexpr const char* kInterleaveNum =
    "parallel.pipeline_chunks: model chunks (virtual stages) per pipeline stage when "
    "parallel.pipeline_config.pipeline_interleave is True and pipeline_stage > 1; warned otherwise (it means nothing "
    "there). GPT2Config has no such key in MindFormers: here it is LlamaConfig's, for both";

// LlamaConfig's model.model_config and model.arch rules, and those of the shared keys whose rule
// differs for a Llama (a rule with the path of a shared one replaces it).
// (runner/config/arch/llama.cpp)
std::vector<KeyRule> llama_model_rules();
// moe_config's rules (runner/config/keys_moe.cpp), the same for every model type.
std::vector<KeyRule> moe_rules();
// GPT-2's model_config keys that LlamaConfig does not have: (path, why), refused with the reason.
std::vector<std::pair<std::string, std::string>> llama_foreign_keys();

}  // namespace gf::config_keys
