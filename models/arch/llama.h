// Llama (Touvron et al. 2023; Hugging Face's LlamaForCausalLM, MindFormers' LlamaConfig names):
// token embedding without learned positions, pre-RMSNorm layers of causal grouped-query attention
// (n_kv_heads key/value heads) with RoPE in Hugging Face's rotate-half convention (base theta) and
// a SwiGLU MLP, no biases (q/k/v biases with qkv_has_bias), nn.Linear [out, in] weights, a final
// RMSNorm and an untied lm_head (tie_word_embeddings: True reads the embedding). Mixtral and
// MindSpeed's MoE GPT are built from these parts. Built from the shared blocks.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "models/transformer_lm.h"

namespace gf {

TransformerSpec llama_spec(const ModelConfig& cfg);
// Hugging Face Llama names: model.embed_tokens, model.layers.{i}.input_layernorm /
// self_attn.{q,k,v,o}_proj / post_attention_layernorm / mlp.{gate,up,down}_proj, model.norm, lm_head.
std::string llama_name(Role role, int64_t layer);
// Hugging Face's config.json: transformers' LlamaConfig, or MixtralConfig with experts
// (models/llama/configuration_llama.py, models/mixtral/configuration_mixtral.py); throws
// std::invalid_argument naming the key the class cannot express. read_llama_hf_config sets the keys
// such a file gives (either class), refusing what this model does not run (rope_scaling, a head_dim
// other than hidden/heads, attention_bias on the output projection, a sliding window).
nlohmann::json llama_hf_config(const ModelConfig& cfg);
void read_llama_hf_config(const nlohmann::json& j, ModelConfig& cfg);

// What the Llama-like families' config.json classes (LlamaConfig, MistralConfig, MixtralConfig,
// Qwen2Config, Qwen3Config) share: the sizes, head_dim, RoPE with its scaling (ops::read_rope_config),
// norm epsilon, eos and tying, each from the file or the class's default. Clears biases, q/k norms,
// experts and the window, which each family's reader sets.
struct LlamaLikeDefaults {
  int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008, num_layers = 32, num_heads = 32;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
};
void read_llama_like_hf_config(const nlohmann::json& j, ModelConfig& cfg, const LlamaLikeDefaults& d);
nlohmann::json llama_like_hf_json(const ModelConfig& c, const std::string& cls, const std::string& model_type);

// Qwen2 and Qwen3 (models/arch/qwen.cpp): LlamaForCausalLM's model with q/k/v biases (Qwen2, MindFormers'
// Qwen2.5 files: qkv_has_bias) or q/k norms and heads of their own width (Qwen3).
nlohmann::json qwen2_hf_config(const ModelConfig& cfg);
void read_qwen2_hf_config(const nlohmann::json& j, ModelConfig& cfg);
nlohmann::json qwen3_hf_config(const ModelConfig& cfg);
void read_qwen3_hf_config(const nlohmann::json& j, ModelConfig& cfg);
// Qwen2-MoE (Qwen2's attention; a shared expert with its sigmoid gate beside the routed ones) and Qwen3-MoE
// (Qwen3's attention): MoE layers with experts of moe_intermediate_size, picked by decoder_sparse_step and
// mlp_only_layers, Hugging Face's names under mlp.gate / mlp.experts.{e} / mlp.shared_expert (qwen_name).
nlohmann::json qwen2_moe_hf_config(const ModelConfig& cfg);
void read_qwen2_moe_hf_config(const nlohmann::json& j, ModelConfig& cfg);
nlohmann::json qwen3_moe_hf_config(const ModelConfig& cfg);
void read_qwen3_moe_hf_config(const nlohmann::json& j, ModelConfig& cfg);
std::string qwen_name(Role role, int64_t layer);

// Gemma 3, text (models/arch/gemma.cpp): the Llama model with a scaled embedding, (1 + w) RMSNorms, a norm on
// each sublayer's output, q/k norms, query_pre_attn_scalar, a GeGLU MLP, and local (windowed, own RoPE base)
// and global layers; Hugging Face's names (pre_feedforward_layernorm, post_feedforward_layernorm, ...).
TransformerSpec gemma3_spec(const ModelConfig& cfg);
std::string gemma3_name(Role role, int64_t layer);
nlohmann::json gemma3_hf_config(const ModelConfig& cfg);
void read_gemma3_hf_config(const nlohmann::json& j, ModelConfig& cfg);

// DeepSeek-V2 (models/arch/deepseek.cpp): multi-head latent attention (models/blocks/mla.h) and MoE layers from
// first_k_dense_replace on with ungated shared experts; Hugging Face's names (self_attn.kv_a_proj_with_mqa, ...).
TransformerSpec deepseek_v2_spec(const ModelConfig& cfg);
std::string deepseek_v2_name(Role role, int64_t layer);
nlohmann::json deepseek_v2_hf_config(const ModelConfig& cfg);
void read_deepseek_v2_hf_config(const nlohmann::json& j, ModelConfig& cfg);
// DeepSeek-V3: the same model (deepseek_v2_spec, deepseek_v2_name) with sigmoid routing over groups and the
// aux-loss-free expert bias; DeepseekV3ForCausalLM's config.json.
nlohmann::json deepseek_v3_hf_config(const ModelConfig& cfg);
void read_deepseek_v3_hf_config(const nlohmann::json& j, ModelConfig& cfg);

class DeepseekV2ForCausalLM : public TransformerLM {
 public:
  DeepseekV2ForCausalLM(const ModelConfig& cfg, const ModelLayout& layout, int64_t micro_batch,
                        const ParallelContext& ctx, const StageOptions& stage = {})
      : TransformerLM(deepseek_v2_spec(cfg), deepseek_v2_name, cfg, layout, micro_batch, ctx, stage) {}
};

class Gemma3ForCausalLM : public TransformerLM {
 public:
  Gemma3ForCausalLM(const ModelConfig& cfg, const ModelLayout& layout, int64_t micro_batch, const ParallelContext& ctx,
                    const StageOptions& stage = {})
      : TransformerLM(gemma3_spec(cfg), gemma3_name, cfg, layout, micro_batch, ctx, stage) {}
};

// The router's loss and capacity in transformers' MoE classes (Mixtral, Qwen-MoE): router_aux_loss_coef counts
// only under output_router_logits; every token reaches its experts (read as dropless).
void read_hf_router_loss(const nlohmann::json& j, ModelConfig& cfg);
void write_hf_router_loss(nlohmann::json& j, const ModelConfig& cfg);

// Qwen2 / Qwen3 (and their MoE): the Llama model under Qwen's MoE names.
class QwenForCausalLM : public TransformerLM {
 public:
  QwenForCausalLM(const ModelConfig& cfg, const ModelLayout& layout, int64_t micro_batch, const ParallelContext& ctx,
                  const StageOptions& stage = {})
      : TransformerLM(llama_spec(cfg), qwen_name, cfg, layout, micro_batch, ctx, stage) {}
};

class LlamaForCausalLM : public TransformerLM {
 public:
  LlamaForCausalLM(const ModelConfig& cfg, const ModelLayout& layout, int64_t micro_batch, const ParallelContext& ctx,
                   const StageOptions& stage = {})
      : TransformerLM(llama_spec(cfg), llama_name, cfg, layout, micro_batch, ctx, stage) {}
  // The parameters of a Llama with this config (Hugging Face names and shapes), whatever the layout.
  static ParamTable make_param_table(const ModelConfig& cfg) {
    return TransformerLM::make_param_table(llama_spec(cfg), llama_name);
  }
  // Placed on tensor-parallel rank tp_rank of layout.tp (layout.vocab_split splits the vocabulary).
  static Placement make_placement(const ModelConfig& cfg, const ModelLayout& layout, int tp_rank) {
    return TransformerLM::make_placement(llama_spec(cfg), llama_name, cfg, layout, tp_rank);
  }
};

}  // namespace gf
