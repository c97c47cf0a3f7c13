#include "models/arch/gpt2.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "models/weights/hf_config.h"

namespace gf {

TransformerSpec gpt2_spec(const ModelConfig& cfg) {
  TransformerSpec s;
  s.lora = cfg.lora;
  s.vocab = cfg.vocab_size;
  s.seq = cfg.seq_length;
  s.hidden = cfg.hidden_size;
  s.layers = cfg.num_layers;
  s.heads = s.kv_heads = cfg.num_heads;
  s.ffn = cfg.hidden_size * cfg.expand_ratio;
  // MindSpeed's GPT MoE: rotary positions instead of the learned table, no linear biases.
  s.rope = cfg.position_embedding_type == "rope";
  s.positions = s.rope ? 0 : cfg.max_position_embeddings;
  s.rope_theta = cfg.rope_theta;
  s.rope_positions = std::max(cfg.seq_length, cfg.max_position_embeddings);
  s.norm = NormKind::kLayerNorm;
  s.norm_eps = cfg.layernorm_epsilon;
  s.linear_bias = s.qkv_bias = cfg.add_bias_linear;
  s.out_in = false;
  s.fused_qkv_param = true;
  s.mlp = MlpKind::kGelu;
  s.act = ops::parse_activation(cfg.hidden_act);
  s.tied_head = true;
  s.init_std = cfg.initializer_range;
  s.scaled_proj_init = true;
  s.hidden_dropout = cfg.hidden_dropout_rate;
  s.attention_dropout = cfg.attention_dropout_rate;
  s.flash = cfg.use_flash_attention;
  s.window = cfg.sliding_window;
  s.moe = moe_spec(cfg);
  return s;
}

std::string gpt2_name(Role role, int64_t l) {
  const std::string h = "h." + std::to_string(l) + ".";
  switch (role) {
    case Role::kEmbed: return "wte.weight";
    case Role::kPosEmbed: return "wpe.weight";
    case Role::kFinalNormW: return "ln_f.weight";
    case Role::kFinalNormB: return "ln_f.bias";
    case Role::kNorm1W: return h + "ln_1.weight";
    case Role::kNorm1B: return h + "ln_1.bias";
    case Role::kQkvW: return h + "attn.c_attn.weight";
    case Role::kQkvB: return h + "attn.c_attn.bias";
    case Role::kOW: return h + "attn.c_proj.weight";
    case Role::kOB: return h + "attn.c_proj.bias";
    case Role::kNorm2W: return h + "ln_2.weight";
    case Role::kNorm2B: return h + "ln_2.bias";
    case Role::kFcW: return h + "mlp.c_fc.weight";
    case Role::kFcB: return h + "mlp.c_fc.bias";
    case Role::kDownW: return h + "mlp.c_proj.weight";
    case Role::kDownB: return h + "mlp.c_proj.bias";
    case Role::kRouterW: return h + "mlp.router.weight";
    case Role::kExpertUpW: return h + "mlp.experts.{e}.c_fc.weight";
    case Role::kExpertUpB: return h + "mlp.experts.{e}.c_fc.bias";
    case Role::kExpertDownW: return h + "mlp.experts.{e}.c_proj.weight";
    case Role::kExpertDownB: return h + "mlp.experts.{e}.c_proj.bias";
    default: break;
  }
  throw std::logic_error("GPT-2 has no parameter for this role");
}

namespace {
// Our hidden_act names and Hugging Face's (transformers' ACT2FN) for the same function.
const std::pair<const char*, const char*> kGpt2Activations[] = {
    {"gelu", "gelu"}, {"gelu_new", "gelu_new"}, {"fast_gelu", "quick_gelu"}};
}  // namespace

nlohmann::json gpt2_hf_config(const ModelConfig& c) {
  auto refuse = [](const std::string& why) {
    throw std::invalid_argument("Hugging Face's GPT2LMHeadModel has no " + why);
  };
  if (c.position_embedding_type != "learned_absolute")
    refuse("rotary positions (model_config.position_embedding_type: " + c.position_embedding_type + ")");
  if (!c.add_bias_linear) refuse("GPT-2 without linear biases (model_config.add_bias_linear: False)");
  if (c.moe.enabled()) refuse("experts (moe_config.expert_num: " + std::to_string(c.moe.expert_num) + ")");
  const char* act = nullptr;
  for (const auto& [ours, hf] : kGpt2Activations)
    if (c.hidden_act == ours) act = hf;
  if (act == nullptr) refuse("activation " + c.hidden_act);
  return nlohmann::json{{"architectures", {"GPT2LMHeadModel"}},
                        {"model_type", "gpt2"},
                        {"vocab_size", c.vocab_size},
                        {"n_positions", c.max_position_embeddings},
                        {"n_ctx", c.max_position_embeddings},
                        {"n_embd", c.hidden_size},
                        {"n_layer", c.num_layers},
                        {"n_head", c.num_heads},
                        {"n_inner", c.hidden_size * c.expand_ratio},
                        {"activation_function", act},
                        {"resid_pdrop", float_decimal(c.hidden_dropout_rate)},
                        {"embd_pdrop", float_decimal(c.hidden_dropout_rate)},
                        {"attn_pdrop", float_decimal(c.attention_dropout_rate)},
                        {"layer_norm_epsilon", float_decimal(c.layernorm_epsilon)},
                        {"initializer_range", float_decimal(c.initializer_range)},
                        {"scale_attn_weights", true},
                        {"scale_attn_by_inverse_layer_idx", false},
                        {"reorder_and_upcast_attn", false},
                        {"bos_token_id", c.eos_token_id},
                        {"eos_token_id", c.eos_token_id},
                        {"tie_word_embeddings", true},
                        {"torch_dtype", "float32"}};
}

void read_gpt2_hf_config(const nlohmann::json& j, ModelConfig& c) {
  auto refuse = [](const std::string& why) { throw std::invalid_argument("config.json: " + why); };
  // GPT2Config's defaults (configuration_gpt2.py) for a key the file leaves out.
  auto get = [&](const char* key, auto def) { return j.contains(key) && !j[key].is_null() ? j[key].get<decltype(def)>() : def; };
  c.vocab_size = get("vocab_size", int64_t{50257});
  c.max_position_embeddings = get("n_positions", int64_t{1024});
  c.hidden_size = get("n_embd", int64_t{768});
  c.num_layers = get("n_layer", int64_t{12});
  c.num_heads = get("n_head", int64_t{12});
  const int64_t inner = get("n_inner", 4 * c.hidden_size);
  if (inner % c.hidden_size != 0)
    refuse("n_inner " + std::to_string(inner) + " is not a multiple of n_embd " + std::to_string(c.hidden_size) +
           " (gridformer's GPT-2 FFN width is hidden_size x expand_ratio)");
  c.expand_ratio = inner / c.hidden_size;
  const std::string act = get("activation_function", std::string("gelu_new"));
  bool known = false;
  for (const auto& [ours, hf] : kGpt2Activations)
    if (act == hf) c.hidden_act = ours, known = true;
  if (act == "gelu_pytorch_tanh") c.hidden_act = "gelu_new", known = true;  // the same tanh formula
  if (!known) refuse("activation_function " + act + ": gridformer's GPT-2 runs gelu, gelu_new (gelu_pytorch_tanh) or quick_gelu");
  c.hidden_dropout_rate = get("resid_pdrop", 0.1f);
  c.attention_dropout_rate = get("attn_pdrop", 0.1f);
  c.layernorm_epsilon = get("layer_norm_epsilon", 1e-5f);
  c.initializer_range = get("initializer_range", 0.02f);
  c.eos_token_id = get("eos_token_id", int64_t{50256});
  if (!get("scale_attn_weights", true)) refuse("scale_attn_weights false: gridformer's attention always scales by 1/sqrt(d)");
  if (get("scale_attn_by_inverse_layer_idx", false) || get("reorder_and_upcast_attn", false))
    refuse("scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn: not run by gridformer's GPT-2");
  c.position_embedding_type = "learned_absolute";
  c.add_bias_linear = true;
}

}  // namespace gf
