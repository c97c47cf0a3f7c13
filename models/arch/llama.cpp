#include "models/arch/llama.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "core/ops/rope_scaling.h"
#include "models/weights/hf_config.h"

namespace gf {

// intermediate_size when > 0, else MindFormers' LlamaFeedForward derivation (r1.0-r1.3, the meaning
// of its files' keys): 4 h, times (ffn_dim_multiplier + 0.01) when set, times 2/3, rounded up to a
// multiple of multiple_of. Meta's reference applies the multiplier after the 2/3 and without the 0.01;
// the two agree without a multiplier, and MindFormers' Llama 2 70B keys (1.3, multiple_of 256) give
// Meta's 70B width (1.3, multiple_of 4096): 28672.
int64_t llama_ffn_width(const ModelConfig& cfg) {
  if (cfg.intermediate_size > 0) return cfg.intermediate_size;
  int64_t f = 4 * cfg.hidden_size;
  if (cfg.ffn_dim_multiplier > 0.0) f = static_cast<int64_t>((cfg.ffn_dim_multiplier + 0.01) * static_cast<double>(f));
  f = 2 * f / 3;
  const int64_t m = cfg.multiple_of > 0 ? cfg.multiple_of : 1;
  return (f + m - 1) / m * m;
}

TransformerSpec llama_spec(const ModelConfig& cfg) {
  TransformerSpec s;
  s.lora = cfg.lora;
  s.vocab = cfg.vocab_size;
  s.seq = cfg.seq_length;
  s.hidden = cfg.hidden_size;
  s.layers = cfg.num_layers;
  s.heads = cfg.num_heads;
  s.kv_heads = cfg.kv_heads();
  s.ffn = llama_ffn_width(cfg);
  s.positions = 0;  // rotary positions only
  s.norm = NormKind::kRMSNorm;
  s.norm_eps = cfg.rms_norm_eps;
  s.linear_bias = false;
  s.qkv_bias = cfg.qkv_has_bias;
  s.out_in = true;
  s.fused_qkv_param = false;
  s.rope = true;
  s.rope_theta = cfg.rope_theta;
  s.rope_positions = std::max(cfg.seq_length, cfg.max_position_embeddings);
  s.rope_scaling = cfg.rope_scaling;
  s.max_positions = cfg.max_position_embeddings;
  s.head_width = cfg.head_dim_explicit;
  s.qk_norm = cfg.qk_layernorm;
  s.mlp = MlpKind::kSwiGLU;
  s.tied_head = cfg.tie_word_embeddings;
  s.init_std = cfg.initializer_range;
  s.scaled_proj_init = false;  // Hugging Face's _init_weights: normal(0, initializer_range) everywhere
  s.hidden_dropout = cfg.hidden_dropout_rate;
  s.attention_dropout = cfg.attention_dropout_rate;
  s.flash = cfg.use_flash_attention;
  s.window = cfg.sliding_window;
  s.window_layers = cfg.window_layers;
  s.local_rope_theta = cfg.rope_local_theta;
  if (cfg.query_pre_attn_scalar > 0) s.attn_scale = static_cast<float>(std::pow(cfg.query_pre_attn_scalar, -0.5));
  s.moe = moe_spec(cfg);  // Mixtral: SwiGLU experts
  return s;
}

std::string llama_name(Role role, int64_t l) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  switch (role) {
    case Role::kEmbed: return "model.embed_tokens.weight";
    case Role::kFinalNormW: return "model.norm.weight";
    case Role::kLmHead: return "lm_head.weight";
    case Role::kNorm1W: return p + "input_layernorm.weight";
    case Role::kQW: return p + "self_attn.q_proj.weight";
    case Role::kKW: return p + "self_attn.k_proj.weight";
    case Role::kVW: return p + "self_attn.v_proj.weight";
    case Role::kQB: return p + "self_attn.q_proj.bias";
    case Role::kKB: return p + "self_attn.k_proj.bias";
    case Role::kVB: return p + "self_attn.v_proj.bias";
    case Role::kOW: return p + "self_attn.o_proj.weight";
    case Role::kQNormW: return p + "self_attn.q_norm.weight";
    case Role::kKNormW: return p + "self_attn.k_norm.weight";
    case Role::kNorm2W: return p + "post_attention_layernorm.weight";
    case Role::kGateW: return p + "mlp.gate_proj.weight";
    case Role::kUpW: return p + "mlp.up_proj.weight";
    case Role::kDownW: return p + "mlp.down_proj.weight";
    case Role::kRouterW: return p + "block_sparse_moe.gate.weight";
    case Role::kExpertGateW: return p + "block_sparse_moe.experts.{e}.w1.weight";
    case Role::kExpertUpW: return p + "block_sparse_moe.experts.{e}.w3.weight";
    case Role::kExpertDownW: return p + "block_sparse_moe.experts.{e}.w2.weight";
    default: break;
  }
  throw std::logic_error("Llama has no parameter for this role");
}

// The keys every Llama-like config.json (Llama, Mistral, Mixtral, Qwen2, Qwen3) writes alike.
nlohmann::json llama_like_hf_json(const ModelConfig& c, const std::string& cls, const std::string& model_type) {
  // Gemma 3's own keys (models/arch/gemma.cpp), which the other classes cannot say.
  const bool layer_types = model_type == "gemma3_text" || model_type.rfind("qwen", 0) == 0;  // they can say a mix
  if (model_type != "gemma3_text") {
    auto refuse = [&](const std::string& why) { throw std::invalid_argument("Hugging Face's " + cls + " has no " + why); };
    if (c.query_pre_attn_scalar > 0) refuse("query_pre_attn_scalar (model_config.query_pre_attn_scalar)");
    if (c.rope_local_theta > 0) refuse("local layers' RoPE base (model_config.rope_local_base_freq)");
    bool mixed = false;
    for (bool w : c.window_layers) mixed = mixed || !w;
    if (mixed && !layer_types) refuse("mix of windowed and full layers (model_config.layer_types)");
  }
  if (model_type != "deepseek_v2" && model_type != "deepseek_v3" && c.kv_lora_rank > 0)
    throw std::invalid_argument("Hugging Face's " + cls + " has no latent attention (model_config.kv_lora_rank)");
  nlohmann::json j{{"architectures", {cls}},
                        {"model_type", model_type},
                        {"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden_size},
                        {"intermediate_size", llama_ffn_width(c)},
                        {"num_hidden_layers", c.num_layers},
                        {"num_attention_heads", c.num_heads},
                        {"num_key_value_heads", c.kv_heads()},
                        {"head_dim", c.head_dim()},
                        {"hidden_act", "silu"},
                        {"max_position_embeddings", std::max(c.max_position_embeddings, c.seq_length)},
                        {"initializer_range", float_decimal(c.initializer_range)},
                        {"rms_norm_eps", float_decimal(c.rms_norm_eps)},
                        {"attention_dropout", float_decimal(c.attention_dropout_rate)},
                        {"eos_token_id", c.eos_token_id},
                        {"tie_word_embeddings", c.tie_word_embeddings},
                        {"torch_dtype", "float32"}};
  // transformers 4.x reads rope_theta and rope_scaling (partial_rotary_factor beside them), 5.x rope_parameters
  // (and converts the former).
  ops::write_rope_config(j, ops::RopeConfig{c.rope_theta, c.rope_scaling});
  return j;
}

nlohmann::json llama_hf_config(const ModelConfig& c) {
  // A Llama with q/k norms is Qwen3's, with q/k/v biases alone Qwen2's: Hugging Face's Llama has neither.
  if (c.qk_layernorm) return c.moe.enabled() ? qwen3_moe_hf_config(c) : qwen3_hf_config(c);
  if (c.qkv_has_bias) return qwen2_hf_config(c);
  const bool moe = c.moe.enabled();
  const std::string cls = moe ? "MixtralForCausalLM" : "LlamaForCausalLM";
  auto refuse = [&](const std::string& why) { throw std::invalid_argument("Hugging Face's " + cls + " has no " + why); };
  if (moe && !c.moe.norm_topk_prob) refuse("router without renormalised top-k probabilities (moe_config.norm_topk_prob: False)");
  if (moe && (c.moe.moe_layer_freq != 1 || c.moe.sparse_step > 1 || !c.moe.dense_layers.empty()))
    refuse("dense layers between the MoE layers (moe_config.moe_layer_freq, decoder_sparse_step, mlp_only_layers)");
  if (moe && c.rope_scaling.rope_type != "default")
    refuse("rope_scaling in transformers 4.x (" + c.rope_scaling.describe() + "); Mixtral runs the default RoPE");
  nlohmann::json j = llama_like_hf_json(c, cls, moe ? "mixtral" : "llama");
  if (!moe) {  // transformers 5's form of the same: the scaling's keys with rope_type and rope_theta
    nlohmann::json r = ops::rope_scaling_json(c.rope_scaling);
    if (r.is_null()) r = {{"rope_type", "default"}};
    r["rope_theta"] = c.rope_theta;
    if (c.rope_scaling.partial_rotary_factor != 1.0) r["partial_rotary_factor"] = c.rope_scaling.partial_rotary_factor;
    j["rope_parameters"] = r;
  }
  j["attention_bias"] = false;
  if (moe) {
    if (c.moe.expert_ffn > 0 && c.moe.expert_ffn != llama_ffn_width(c))
      refuse("experts of another width than intermediate_size (moe_config.moe_intermediate_size)");
    j["num_local_experts"] = c.moe.expert_num;
    j["num_experts_per_tok"] = c.moe.num_experts_chosen;
    write_hf_router_loss(j, c);
  } else {
    j["mlp_bias"] = false;
  }
  // Mistral's and Mixtral's key (null: the whole prefix); LlamaConfig has none.
  if (moe || c.sliding_window > 0) j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json();
  return j;
}

void read_hf_router_loss(const nlohmann::json& j, ModelConfig& c) {
  // transformers adds router_aux_loss_coef x its load-balancing loss to the training loss only when
  // output_router_logits is true (false in the released Mixtral and Qwen MoE files); every token reaches its
  // experts (no capacity).
  const bool added = j.contains("output_router_logits") && j["output_router_logits"].is_boolean() &&
                     j["output_router_logits"].get<bool>();
  c.moe.aux_loss_factor = added ? j.value("router_aux_loss_coef", 0.001) : 0.0;
  c.moe.z_loss_factor = 0.0;
  c.moe.capacity_factor = 0.0;  // dropless
}

// The weights are the model whatever capacity and router losses trained them (transformers routes every token):
// written as they are, the balancing loss counted only when it was trained with.
void write_hf_router_loss(nlohmann::json& j, const ModelConfig& c) {
  j["output_router_logits"] = c.moe.aux_loss_factor > 0;
  j["router_aux_loss_coef"] = c.moe.aux_loss_factor;
}

void read_llama_like_hf_config(const nlohmann::json& j, ModelConfig& c, const LlamaLikeDefaults& d) {
  auto refuse = [](const std::string& why) { throw std::invalid_argument("config.json: " + why); };
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto get = [&](const char* key, auto def) { return has(key) ? j[key].get<decltype(def)>() : def; };
  // The class's defaults for a key the file leaves out.
  c.vocab_size = get("vocab_size", d.vocab_size);
  c.hidden_size = get("hidden_size", d.hidden_size);
  c.intermediate_size = get("intermediate_size", d.intermediate_size);
  c.num_layers = get("num_hidden_layers", d.num_layers);
  c.num_heads = get("num_attention_heads", d.num_heads);
  c.num_kv_heads = get("num_key_value_heads", c.num_heads);
  // head_dim: Llama's `getattr(config, "head_dim", hidden_size // num_attention_heads)`; Qwen3Config's default 128.
  const int64_t head_dim = get("head_dim", d.head_dim > 0 ? d.head_dim : int64_t{0});
  if (head_dim < 0 || head_dim % 2 != 0) refuse("head_dim " + std::to_string(head_dim) + ": RoPE needs an even head width");
  c.head_dim_explicit = head_dim > 0 && (c.num_heads <= 0 || head_dim * c.num_heads != c.hidden_size) ? head_dim : 0;
  if (get("hidden_act", std::string("silu")) != "silu")
    refuse("hidden_act " + j["hidden_act"].get<std::string>() + ": gridformer's Llama MLP is SwiGLU (silu)");
  c.max_position_embeddings = get("max_position_embeddings", d.max_position_embeddings);
  c.initializer_range = get("initializer_range", 0.02f);
  c.rms_norm_eps = get("rms_norm_eps", d.rms_norm_eps);
  const ops::RopeConfig rope = ops::read_rope_config(j, d.rope_theta);
  c.rope_theta = rope.theta;
  c.rope_scaling = rope.scaling;
  if (get("mlp_bias", false)) refuse("mlp_bias true: gridformer's Llama MLP has no biases");
  c.attention_dropout_rate = get("attention_dropout", 0.0f);
  if (has("eos_token_id"))
    c.eos_token_id = j["eos_token_id"].is_array() ? j["eos_token_id"][0].get<int64_t>() : j["eos_token_id"].get<int64_t>();
  c.tie_word_embeddings = get("tie_word_embeddings", d.tie_word_embeddings);
  c.qkv_has_bias = false;
  c.qk_layernorm = false;
  c.moe.expert_num = 1;
  c.sliding_window = 0;
}

void read_llama_hf_config(const nlohmann::json& j, ModelConfig& c) {
  auto refuse = [](const std::string& why) { throw std::invalid_argument("config.json: " + why); };
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto get = [&](const char* key, auto def) { return has(key) ? j[key].get<decltype(def)>() : def; };
  const bool moe = get("model_type", std::string()) == "mixtral" || has("num_local_experts");
  // LlamaConfig's defaults, or MixtralConfig's.
  LlamaLikeDefaults d;
  d.intermediate_size = moe ? 14336 : 11008;
  d.max_position_embeddings = moe ? 4096 * 32 : 2048;
  d.rms_norm_eps = moe ? 1e-5f : 1e-6f;
  d.rope_theta = moe ? 1e6 : 10000.0;
  read_llama_like_hf_config(j, c, d);
  if (get("attention_bias", false))
    refuse("attention_bias true: gridformer's Llama has no bias on the output projection (qkv_has_bias biases q, k, v)");
  c.sliding_window = has("sliding_window") ? j["sliding_window"].get<int64_t>() : 0;
  if (c.sliding_window < 0) refuse("sliding_window " + std::to_string(c.sliding_window) + ": expects a number of tokens or null");
  if (moe) {
    c.moe.expert_num = get("num_local_experts", int64_t{8});
    c.moe.num_experts_chosen = get("num_experts_per_tok", int64_t{2});
    read_hf_router_loss(j, c);
    c.moe.norm_topk_prob = true;
    c.moe.moe_layer_freq = 1;
  }
}

}  // namespace gf
