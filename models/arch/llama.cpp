#include "models/arch/llama.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

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
  s.mlp = MlpKind::kSwiGLU;
  s.tied_head = cfg.tie_word_embeddings;
  s.init_std = cfg.initializer_range;
  s.scaled_proj_init = false;  // Hugging Face's _init_weights: normal(0, initializer_range) everywhere
  s.hidden_dropout = cfg.hidden_dropout_rate;
  s.attention_dropout = cfg.attention_dropout_rate;
  s.flash = cfg.use_flash_attention;
  s.window = cfg.sliding_window;
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

nlohmann::json llama_hf_config(const ModelConfig& c) {
  const bool moe = c.moe.enabled();
  const std::string cls = moe ? "MixtralForCausalLM" : "LlamaForCausalLM";
  auto refuse = [&](const std::string& why) { throw std::invalid_argument("Hugging Face's " + cls + " has no " + why); };
  if (c.qkv_has_bias)
    refuse("q/k/v biases without an output-projection bias (model_config.qkv_has_bias: True; its attention_bias "
           "biases all four projections)");
  if (moe && !c.moe.norm_topk_prob) refuse("router without renormalised top-k probabilities (moe_config.norm_topk_prob: False)");
  if (moe && c.moe.moe_layer_freq != 1)
    refuse("dense layers between the MoE layers (moe_config.moe_layer_freq: " + std::to_string(c.moe.moe_layer_freq) + ")");
  nlohmann::json j{{"architectures", {cls}},
                   {"model_type", moe ? "mixtral" : "llama"},
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
                   // transformers 4.x reads rope_theta, 5.x rope_parameters (and converts the former).
                   {"rope_theta", c.rope_theta},
                   {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
                   {"rope_scaling", nullptr},
                   {"attention_bias", false},
                   {"attention_dropout", float_decimal(c.attention_dropout_rate)},
                   {"eos_token_id", c.eos_token_id},
                   {"tie_word_embeddings", c.tie_word_embeddings},
                   {"torch_dtype", "float32"}};
  if (moe) {
    j["num_local_experts"] = c.moe.expert_num;
    j["num_experts_per_tok"] = c.moe.num_experts_chosen;
    j["router_aux_loss_coef"] = c.moe.aux_loss_factor;
  } else {
    j["mlp_bias"] = false;
  }
  // Mistral's and Mixtral's key (null: the whole prefix); LlamaConfig has none.
  if (moe || c.sliding_window > 0) j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json();
  return j;
}

void read_llama_hf_config(const nlohmann::json& j, ModelConfig& c) {
  auto refuse = [](const std::string& why) { throw std::invalid_argument("config.json: " + why); };
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto get = [&](const char* key, auto def) { return has(key) ? j[key].get<decltype(def)>() : def; };
  const bool moe = get("model_type", std::string()) == "mixtral" || has("num_local_experts");
  // LlamaConfig's defaults, or MixtralConfig's, for a key the file leaves out.
  c.vocab_size = get("vocab_size", int64_t{32000});
  c.hidden_size = get("hidden_size", int64_t{4096});
  c.intermediate_size = get("intermediate_size", int64_t{moe ? 14336 : 11008});
  c.num_layers = get("num_hidden_layers", int64_t{32});
  c.num_heads = get("num_attention_heads", int64_t{32});
  c.num_kv_heads = get("num_key_value_heads", c.num_heads);
  if (has("head_dim") && j["head_dim"].get<int64_t>() * c.num_heads != c.hidden_size)
    refuse("head_dim " + std::to_string(j["head_dim"].get<int64_t>()) + " x num_attention_heads " +
           std::to_string(c.num_heads) + " is not hidden_size " + std::to_string(c.hidden_size) +
           ": gridformer's heads are hidden_size / num_heads wide");
  if (get("hidden_act", std::string("silu")) != "silu")
    refuse("hidden_act " + j["hidden_act"].get<std::string>() + ": gridformer's Llama MLP is SwiGLU (silu)");
  c.max_position_embeddings = get("max_position_embeddings", int64_t{moe ? 4096 * 32 : 2048});
  c.initializer_range = get("initializer_range", 0.02f);
  c.rms_norm_eps = get("rms_norm_eps", moe ? 1e-5f : 1e-6f);
  c.rope_theta = get("rope_theta", moe ? 1e6 : 10000.0);
  if (has("rope_parameters")) {
    const nlohmann::json& r = j["rope_parameters"];
    if (r.contains("rope_theta")) c.rope_theta = r["rope_theta"].get<double>();
    if (r.value("rope_type", std::string("default")) != "default")
      refuse("rope_parameters.rope_type " + r["rope_type"].get<std::string>() + ": gridformer runs the default RoPE only");
  }
  if (has("rope_scaling"))
    refuse("rope_scaling " + j["rope_scaling"].dump() + ": gridformer runs the default RoPE only");
  if (get("attention_bias", false))
    refuse("attention_bias true: gridformer's Llama has no bias on the output projection (qkv_has_bias biases q, k, v)");
  if (get("mlp_bias", false)) refuse("mlp_bias true: gridformer's Llama MLP has no biases");
  c.sliding_window = has("sliding_window") ? j["sliding_window"].get<int64_t>() : 0;
  if (c.sliding_window < 0) refuse("sliding_window " + std::to_string(c.sliding_window) + ": expects a number of tokens or null");
  c.attention_dropout_rate = get("attention_dropout", 0.0f);
  if (has("eos_token_id"))
    c.eos_token_id = j["eos_token_id"].is_array() ? j["eos_token_id"][0].get<int64_t>() : j["eos_token_id"].get<int64_t>();
  c.tie_word_embeddings = get("tie_word_embeddings", false);
  c.qkv_has_bias = false;
  if (moe) {
    c.moe.expert_num = get("num_local_experts", int64_t{8});
    c.moe.num_experts_chosen = get("num_experts_per_tok", int64_t{2});
    c.moe.aux_loss_factor = get("router_aux_loss_coef", 0.001);
    c.moe.norm_topk_prob = true;
    c.moe.moe_layer_freq = 1;
  } else {
    c.moe.expert_num = 1;
  }
}

}  // namespace gf
