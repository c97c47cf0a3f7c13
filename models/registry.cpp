#include "models/registry.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "models/arch/gpt2.h"
#include "models/arch/llama.h"

namespace gf {

namespace {

// The factory of an architecture whose model class takes (config, layout, micro batch, context).
template <typename Model>
std::unique_ptr<CausalLM> factory(const ModelConfig& c, const ModelLayout& l, int64_t b, const ParallelContext& ctx) {
  return std::make_unique<Model>(c, l, b, ctx);
}

std::vector<ModelEntry>& entries() {
  static std::vector<ModelEntry> e = {
      {"GPT2LMHeadModel", "GPT2Config",
       factory<GPT2LMHeadModel>,
       gpt2_spec, gpt2_name, "GPT-2", false, true, gpt2_hf_config, read_gpt2_hf_config, "gpt2"},
      {"LlamaForCausalLM", "LlamaConfig",
       factory<LlamaForCausalLM>,
       llama_spec, llama_name, "Llama", false, false, llama_hf_config, read_llama_hf_config, "llama"},
      // Hugging Face's name for Mixtral: a LlamaConfig with moe_config.expert_num > 1 (MindFormers' own Mixtral
      // files say LlamaForCausalLM, with the same meaning). The same model, spec and names as LlamaForCausalLM.
      {"MixtralForCausalLM", "LlamaConfig",
       factory<LlamaForCausalLM>,
       llama_spec, llama_name, "Mixtral", true, false, llama_hf_config, read_llama_hf_config, "mixtral"},
      // Qwen2 / Qwen2.5, Qwen3 and their MoE (models/arch/qwen.cpp): the Llama model with q/k/v biases, or with q/k norms
      // and heads of their own width; a LlamaConfig whose qkv_has_bias / qk_layernorm say so.
      {"Qwen2ForCausalLM", "LlamaConfig",
       factory<QwenForCausalLM>,
       llama_spec, qwen_name, "Qwen2", false, false, qwen2_hf_config, read_qwen2_hf_config, "qwen2"},
      {"Qwen3ForCausalLM", "LlamaConfig",
       factory<QwenForCausalLM>,
       llama_spec, qwen_name, "Qwen3", false, false, qwen3_hf_config, read_qwen3_hf_config, "qwen3"},
      {"Qwen2MoeForCausalLM", "LlamaConfig",
       factory<QwenForCausalLM>,
       llama_spec, qwen_name, "Qwen2-MoE", true, false, qwen2_moe_hf_config, read_qwen2_moe_hf_config, "qwen2_moe"},
      {"Qwen3MoeForCausalLM", "LlamaConfig",
       factory<QwenForCausalLM>,
       llama_spec, qwen_name, "Qwen3-MoE", true, false, qwen3_moe_hf_config, read_qwen3_moe_hf_config, "qwen3_moe"},
      // Gemma 3's text model (models/arch/gemma.cpp): a LlamaConfig with q/k norms, query_pre_attn_scalar, and
      // local and global layers (layer_types, rope_local_base_freq); the rest is the architecture's.
      {"Gemma3ForCausalLM", "LlamaConfig",
       factory<Gemma3ForCausalLM>,
       gemma3_spec, gemma3_name, "Gemma 3", false, false, gemma3_hf_config, read_gemma3_hf_config, "gemma3_text"},
      // DeepSeek-V2 (models/arch/deepseek.cpp): a LlamaConfig with kv_lora_rank and the other MLA keys.
      {"DeepseekV2ForCausalLM", "LlamaConfig",
       factory<DeepseekV2ForCausalLM>,
       deepseek_v2_spec, deepseek_v2_name, "DeepSeek-V2", false, false, deepseek_v2_hf_config,
       read_deepseek_v2_hf_config, "deepseek_v2"},
      {"DeepseekV3ForCausalLM", "LlamaConfig",
       factory<DeepseekV2ForCausalLM>,
       deepseek_v2_spec, deepseek_v2_name, "DeepSeek-V3", false, false, deepseek_v3_hf_config,
       read_deepseek_v3_hf_config, "deepseek_v3"},
  };
  return e;
}

// The entry of a config type (the arch's own when it takes that type, else the first that does), or nullptr.
const ModelEntry* entry_of(const ModelConfig& c) {
  const ModelEntry* first = nullptr;
  for (const ModelEntry& e : entries()) {
    if (e.config_type != c.type) continue;
    if (e.arch == c.arch) return &e;
    if (first == nullptr) first = &e;
  }
  return first;
}

}  // namespace

const std::vector<ModelEntry>& model_registry() { return entries(); }

bool register_architecture(ModelEntry entry) {
  for (const ModelEntry& e : entries())
    if (e.arch == entry.arch) throw std::logic_error("architecture " + entry.arch + " registered twice");
  entries().push_back(std::move(entry));
  return true;
}

int64_t ModelConfig::ffn_hidden() const {
  const ModelEntry* e = entry_of(*this);
  if (e == nullptr)
    throw std::invalid_argument("model.model_config.type: unknown type '" + type + "' (no registered architecture takes it)");
  return e->spec(*this).ffn;
}

const ModelEntry& find_model(const std::string& arch, const std::string& config_type) {
  std::string archs, configs;
  for (const auto& e : model_registry()) {
    archs += (archs.empty() ? "" : ", ") + e.arch;
    configs += (configs.empty() ? "" : ", ") + e.config_type;
  }
  const ModelEntry* found = nullptr;
  for (const auto& e : model_registry())
    if (e.arch == arch) found = &e;
  if (!found)
    throw std::invalid_argument("model.arch.type: unknown type '" + arch + "'; registered: " + archs);
  if (found->config_type != config_type) {
    bool known = false;
    for (const auto& e : model_registry()) known |= e.config_type == config_type;
    throw std::invalid_argument("model.model_config.type: " +
                                (known ? "'" + config_type + "' does not go with arch " + arch + "; use " + found->config_type
                                       : "unknown type '" + config_type + "'; registered: " + configs));
  }
  return *found;
}

std::unique_ptr<CausalLM> build_model(const ModelConfig& cfg, const ModelLayout& layout, int64_t micro_batch,
                                      const ParallelContext& ctx) {
  return find_model(cfg.arch, cfg.type).factory(cfg, layout, micro_batch, ctx);
}

}  // namespace gf
