// Gemma 3, text (Hugging Face's Gemma3ForCausalLM, model_type gemma3_text; transformers' models/gemma3/
// modeling_gemma3.py and configuration_gemma3.py, 4.5x and 5.x: tools/torch_hf_gemma3.py names the versions
// read). The Llama model (llama_spec) with
//  * the token embedding's output times sqrt(hidden_size) (Gemma3TextScaledWordEmbedding: a float32 scalar);
//  * RMSNorms that scale by (1 + w), their weights starting at 0 (Gemma3RMSNorm), and four of them per layer:
//    input_layernorm, post_attention_layernorm on the attention's output before the residual add,
//    pre_feedforward_layernorm, post_feedforward_layernorm (TransformerSpec::sandwich_norm);
//  * q_norm and k_norm on every head before RoPE (as Qwen3's, with the (1 + w) scale);
//  * the scores scaled by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2;
//  * a GeGLU MLP: down(gelu_tanh(gate(x)) * up(x)) (hidden_activation gelu_pytorch_tanh);
//  * local and global layers (layer_types, or 4.5x's sliding_window_pattern: every pattern-th layer global):
//    the local ones see a window of sliding_window keys and rotate by rope_local_base_freq (default RoPE), the
//    global ones the whole prefix with rope_theta and rope_scaling.
// Refused: logit soft-capping (Gemma 2's; null in Gemma 3), bidirectional attention, attention biases.
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ops/rope_scaling.h"
#include "models/arch/llama.h"
#include "models/weights/hf_config.h"

namespace gf {

TransformerSpec gemma3_spec(const ModelConfig& cfg) {
  TransformerSpec s = llama_spec(cfg);
  s.mlp = MlpKind::kGeGLU;
  s.act = ops::Activation::kGeluNew;  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): torch's approximate="tanh"
  s.norm_offset = 1.0f;
  s.sandwich_norm = true;
  // torch.tensor(hidden_size ** 0.5): the double's square root rounded to float32.
  s.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(cfg.hidden_size)));
  return s;
}

std::string gemma3_name(Role role, int64_t l) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  switch (role) {
    case Role::kPostAttnNormW: return p + "post_attention_layernorm.weight";
    case Role::kNorm2W: return p + "pre_feedforward_layernorm.weight";
    case Role::kPostMlpNormW: return p + "post_feedforward_layernorm.weight";
    default: return llama_name(role, l);
  }
}

namespace {

// Gemma3TextConfig's layer_types when a file gives only the pattern: "sliding_attention" unless (i + 1) % pattern == 0.
std::vector<bool> pattern_layers(int64_t layers, int64_t pattern) {
  std::vector<bool> w(static_cast<size_t>(layers));
  for (int64_t i = 0; i < layers; ++i) w[static_cast<size_t>(i)] = (i + 1) % pattern != 0;
  return w;
}

// The pattern p whose rule gives these layers, or 0.
int64_t pattern_of(const std::vector<bool>& w) {
  for (int64_t p = 1; p <= static_cast<int64_t>(w.size()) + 1; ++p)
    if (pattern_layers(static_cast<int64_t>(w.size()), p) == w) return p;
  return 0;
}

}  // namespace

nlohmann::json gemma3_hf_config(const ModelConfig& c) {
  const std::string cls = "Gemma3ForCausalLM";
  auto refuse = [&](const std::string& why) { throw std::invalid_argument("Hugging Face's " + cls + " " + why); };
  if (c.moe.enabled()) refuse("has no experts (moe_config.expert_num)");
  if (c.qkv_has_bias) refuse("has no q/k/v biases without an output-projection bias (model_config.qkv_has_bias: True)");
  if (!c.qk_layernorm) refuse("always has q/k norms (model_config.qk_layernorm: False)");
  if (c.sliding_window <= 0) refuse("always has local layers with a window (model_config.sliding_window)");
  nlohmann::json j = llama_like_hf_json(c, cls, "gemma3_text");
  j.erase("hidden_act");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["attention_bias"] = false;
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  j["query_pre_attn_scalar"] = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(c.head_dim());
  j["sliding_window"] = c.sliding_window;
  const std::vector<bool> w = c.window_layers.empty() ? std::vector<bool>(static_cast<size_t>(c.num_layers), true)
                                                      : c.window_layers;
  nlohmann::json types = nlohmann::json::array();
  for (bool b : w) types.push_back(b ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;  // transformers >= 4.53
  // transformers 4.50-4.52 read the pattern alone (default 6): written where one gives these layers.
  if (const int64_t p = pattern_of(w); p > 0) j["sliding_window_pattern"] = p;
  j["rope_local_base_freq"] = c.rope_local_theta > 0 ? c.rope_local_theta : c.rope_theta;
  // transformers 5: per layer type.
  nlohmann::json full = ops::rope_scaling_json(c.rope_scaling);
  if (full.is_null()) full = {{"rope_type", "default"}};
  full["rope_theta"] = c.rope_theta;
  j["rope_parameters"] = {{"full_attention", full},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", j["rope_local_base_freq"]}}}};
  return j;
}

void read_gemma3_hf_config(const nlohmann::json& j_in, ModelConfig& c) {
  auto refuse = [](const std::string& why) { throw std::invalid_argument("config.json: " + why); };
  auto has = [&](const char* key) { return j_in.contains(key) && !j_in[key].is_null(); };
  nlohmann::json j = j_in;
  // transformers 5's rope_parameters per layer type: the global layers' is the model's RoPE, the local layers'
  // gives their base (default RoPE only).
  double local_theta = has("rope_local_base_freq") ? j_in["rope_local_base_freq"].get<double>() : 10000.0;
  if (has("rope_parameters") && j_in["rope_parameters"].is_object() && j_in["rope_parameters"].contains("full_attention")) {
    const nlohmann::json& rp = j_in["rope_parameters"];
    j["rope_parameters"] = rp["full_attention"];
    if (rp.contains("sliding_attention") && !rp["sliding_attention"].is_null()) {
      const nlohmann::json& sl = rp["sliding_attention"];
      if (sl.value("rope_type", std::string("default")) != "default")
        refuse("rope_parameters.sliding_attention.rope_type " + sl["rope_type"].get<std::string>() +
               ": the local layers' RoPE is built as default RoPE with its own base only");
      if (sl.contains("rope_theta")) local_theta = sl["rope_theta"].get<double>();
    }
  }
  LlamaLikeDefaults d;  // Gemma3TextConfig's defaults
  d.vocab_size = 262208;
  d.hidden_size = 2304;
  d.intermediate_size = 9216;
  d.num_layers = 26;
  d.num_heads = 8;
  d.head_dim = 256;
  d.max_position_embeddings = 131072;
  d.rms_norm_eps = 1e-6f;
  d.rope_theta = 1000000.0;
  d.tie_word_embeddings = true;
  if (!j.contains("num_key_value_heads")) j["num_key_value_heads"] = 4;
  const std::string act = has("hidden_activation") ? j_in["hidden_activation"].get<std::string>() : "gelu_pytorch_tanh";
  if (act != "gelu_pytorch_tanh" && act != "gelu_new")
    refuse("hidden_activation " + act + ": gridformer's Gemma 3 MLP is GeGLU with the tanh GELU (gelu_pytorch_tanh)");
  j.erase("hidden_act");
  read_llama_like_hf_config(j, c, d);
  // Gemma3Attention takes head_dim from the config whatever hidden_size / heads is.
  if (c.head_dim_explicit == 0 && has("head_dim") && c.num_heads > 0 && j_in["head_dim"].get<int64_t>() * c.num_heads != c.hidden_size)
    c.head_dim_explicit = j_in["head_dim"].get<int64_t>();
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (has(key)) refuse(std::string(key) + " " + j_in[key].dump() + ": logit soft-capping (Gemma 2's) is not built");
  if (has("use_bidirectional_attention") && j_in["use_bidirectional_attention"].get<bool>())
    refuse("use_bidirectional_attention true: gridformer's models are causal");
  if (has("attention_bias") && j_in["attention_bias"].get<bool>())
    refuse("attention_bias true: gridformer's Gemma 3 has no attention biases");
  c.qk_layernorm = true;
  c.query_pre_attn_scalar = has("query_pre_attn_scalar") ? j_in["query_pre_attn_scalar"].get<double>() : 256.0;
  if (!(c.query_pre_attn_scalar > 0)) refuse("query_pre_attn_scalar " + j_in["query_pre_attn_scalar"].dump() + ": expects > 0");
  c.sliding_window = has("sliding_window") ? j_in["sliding_window"].get<int64_t>() : 4096;
  if (c.sliding_window <= 0) refuse("sliding_window " + std::to_string(c.sliding_window) + ": expects a number of tokens");
  if (has("layer_types")) {
    c.window_layers.clear();
    for (const auto& t : j_in["layer_types"]) {
      const std::string s = t.get<std::string>();
      if (s != "sliding_attention" && s != "full_attention")
        refuse("layer_types holds '" + s + "': expects full_attention or sliding_attention");
      c.window_layers.push_back(s == "sliding_attention");
    }
    if (static_cast<int64_t>(c.window_layers.size()) != c.num_layers)
      refuse("layer_types has " + std::to_string(c.window_layers.size()) + " entries for " +
             std::to_string(c.num_layers) + " layers");
  } else {
    const int64_t p = has("sliding_window_pattern") ? j_in["sliding_window_pattern"].get<int64_t>() : 6;
    if (p < 1) refuse("sliding_window_pattern " + std::to_string(p) + ": expects >= 1");
    c.window_layers = pattern_layers(c.num_layers, p);
  }
  c.rope_local_theta = local_theta;
  if (!(c.rope_local_theta > 0)) refuse("rope_local_base_freq: expects > 0");
}

}  // namespace gf
