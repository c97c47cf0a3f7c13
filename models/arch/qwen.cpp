// Qwen2 / Qwen2.5 and Qwen3 (Hugging Face's Qwen2ForCausalLM and Qwen3ForCausalLM, transformers 4.57's
// models/qwen2/configuration_qwen2.py, modeling_qwen2.py, models/qwen3/...): the Llama model (llama_spec,
// llama_name) with
//  * Qwen2: biases on q_proj, k_proj and v_proj, not o_proj (MindFormers' Qwen2.5 files: a LlamaConfig with
//    qkv_has_bias: True);
//  * Qwen3: no biases, an RMSNorm of head_dim with its own weight on every query head and every key head
//    after the projection and before RoPE (self_attn.q_norm, self_attn.k_norm: qk_layernorm), and heads of
//    head_dim (128 in the released models) whatever hidden_size / num_attention_heads is.
// Both have a sliding window on the layers from max_window_layers on when use_sliding_window is true
// (layer_types in transformers >= 4.53); a mix of windowed and full layers runs as Gemma 3's does
// (model_config.layer_types).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/arch/llama.h"

namespace gf {

namespace {

// Qwen2Config's and Qwen3Config's defaults (they agree but for head_dim).
LlamaLikeDefaults qwen_defaults(bool qwen3) {
  LlamaLikeDefaults d;
  d.vocab_size = 151936;
  d.hidden_size = 4096;
  d.intermediate_size = 22016;
  d.num_layers = 32;
  d.num_heads = 32;
  d.head_dim = qwen3 ? 128 : 0;
  d.max_position_embeddings = 32768;
  d.rms_norm_eps = 1e-6f;
  d.rope_theta = 10000.0;
  d.tie_word_embeddings = false;
  return d;
}

// The window and the layers it applies to, as Qwen2Config / Qwen3Config (transformers >= 4.53) decide them: no
// window unless use_sliding_window (sliding_window is then None, whatever layer_types says); the windowed layers are
// layer_types' "sliding_attention" ones, or (no layer_types) those from max_window_layers on.
void read_qwen_window(const nlohmann::json& j, ModelConfig& c) {
  auto refuse = [](const std::string& why) { throw std::invalid_argument("config.json: " + why); };
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  const int64_t layers = c.num_layers;
  std::vector<bool> sliding(static_cast<size_t>(std::max<int64_t>(layers, 0)), false);
  if (has("layer_types")) {
    size_t i = 0;
    for (const auto& t : j["layer_types"]) {
      const std::string s = t.get<std::string>();
      if (s != "sliding_attention" && s != "full_attention")
        refuse("layer_types holds '" + s + "': expects full_attention or sliding_attention");
      if (i < sliding.size()) sliding[i] = s == "sliding_attention";
      ++i;
    }
    if (static_cast<int64_t>(i) != layers)
      refuse("layer_types has " + std::to_string(i) + " entries for " + std::to_string(layers) + " layers");
  } else {
    const int64_t from = has("max_window_layers") ? j["max_window_layers"].get<int64_t>() : 28;
    for (int64_t l = 0; l < layers; ++l) sliding[static_cast<size_t>(l)] = l >= from;
  }
  c.sliding_window = 0;
  c.window_layers.clear();
  const bool on = has("use_sliding_window") && j["use_sliding_window"].get<bool>();
  const int64_t n = std::count(sliding.begin(), sliding.end(), true);
  if (!on || n == 0) return;
  const int64_t window = has("sliding_window") ? j["sliding_window"].get<int64_t>() : 4096;
  if (window <= 0) refuse("sliding_window " + std::to_string(window) + ": expects a number of tokens");
  c.sliding_window = window;
  if (n != layers) c.window_layers = sliding;  // a mix: the windowed layers named
}

// use_sliding_window, sliding_window, max_window_layers and (a mix) layer_types for the window and its layers.
void write_window(nlohmann::json& j, const ModelConfig& c) {
  j["use_sliding_window"] = c.sliding_window > 0;
  j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json();
  bool mixed = false;
  for (bool w : c.window_layers) mixed = mixed || !w;
  if (c.sliding_window <= 0 || !mixed) {
    j["max_window_layers"] = c.sliding_window > 0 ? 0 : c.num_layers;
    return;
  }
  // transformers before 4.53 read max_window_layers alone: the windowed layers must be those from it on.
  int64_t from = 0;
  while (from < c.num_layers && !c.window_layers[static_cast<size_t>(from)]) ++from;
  for (int64_t l = from; l < c.num_layers; ++l)
    if (!c.window_layers[static_cast<size_t>(l)])
      throw std::invalid_argument("Hugging Face's Qwen configs window the layers from max_window_layers on; "
                                  "model_config.layer_types windows others");
  j["max_window_layers"] = from;
  nlohmann::json types = nlohmann::json::array();
  for (bool w : c.window_layers) types.push_back(w ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
}

}  // namespace

nlohmann::json qwen2_hf_config(const ModelConfig& c) {
  if (c.moe.enabled()) return qwen2_moe_hf_config(c);
  if (!c.qkv_has_bias)
    throw std::invalid_argument("Hugging Face's Qwen2ForCausalLM always has q/k/v biases (model_config.qkv_has_bias: False)");
  if (c.qk_layernorm)
    throw std::invalid_argument("Hugging Face's Qwen2ForCausalLM has no q/k norms (model_config.qk_layernorm: True)");
  nlohmann::json j = llama_like_hf_json(c, "Qwen2ForCausalLM", "qwen2");
  // Qwen2Config has no head_dim (transformers before 4.48 derive it and ignore the key): written only when it differs.
  if (c.head_dim_explicit == 0) j.erase("head_dim");
  write_window(j, c);
  return j;
}

void read_qwen2_hf_config(const nlohmann::json& j, ModelConfig& c) {
  read_llama_like_hf_config(j, c, qwen_defaults(false));
  c.qkv_has_bias = true;  // Qwen2Attention: q_proj, k_proj, v_proj with bias=True, o_proj without
  read_qwen_window(j, c);
}

nlohmann::json qwen3_hf_config(const ModelConfig& c) {
  if (c.moe.enabled()) return qwen3_moe_hf_config(c);
  if (!c.qk_layernorm)
    throw std::invalid_argument("Hugging Face's Qwen3ForCausalLM always has q/k norms (model_config.qk_layernorm: False)");
  if (c.qkv_has_bias)
    throw std::invalid_argument("Hugging Face's Qwen3ForCausalLM has no q/k/v biases without an output-projection bias "
                                "(model_config.qkv_has_bias: True; its attention_bias biases all four projections)");
  nlohmann::json j = llama_like_hf_json(c, "Qwen3ForCausalLM", "qwen3");
  j["attention_bias"] = false;
  write_window(j, c);
  return j;
}

void read_qwen3_hf_config(const nlohmann::json& j, ModelConfig& c) {
  read_llama_like_hf_config(j, c, qwen_defaults(true));
  if (j.contains("attention_bias") && j["attention_bias"].is_boolean() && j["attention_bias"].get<bool>())
    throw std::invalid_argument("config.json: attention_bias true: Qwen3's biases all four attention projections; "
                                "gridformer's Llama biases q, k and v alone");
  c.qk_layernorm = true;  // Qwen3Attention: q_norm and k_norm, always
  read_qwen_window(j, c);
}

namespace {

// The MoE keys Qwen2-MoE and Qwen3-MoE share (their config classes' names).
void write_qwen_moe(nlohmann::json& j, const ModelConfig& c, const std::string& cls) {
  if (c.moe.sparse_step == 0 && c.moe.moe_layer_freq != 1)
    throw std::invalid_argument("Hugging Face's " + cls + " picks its MoE layers by decoder_sparse_step ((i + 1) % S == 0) "
                                "and mlp_only_layers, not moe_config.moe_layer_freq " +
                                std::to_string(c.moe.moe_layer_freq) + " (i % N == 0)");
  j["num_experts"] = c.moe.expert_num;
  j["num_experts_per_tok"] = c.moe.num_experts_chosen;
  j["norm_topk_prob"] = c.moe.norm_topk_prob;
  j["moe_intermediate_size"] = c.moe.expert_ffn > 0 ? c.moe.expert_ffn : c.ffn_hidden();
  j["decoder_sparse_step"] = c.moe.sparse_step > 0 ? c.moe.sparse_step : 1;
  j["mlp_only_layers"] = c.moe.dense_layers;
  write_hf_router_loss(j, c);
}

void read_qwen_moe(const nlohmann::json& j, ModelConfig& c, int64_t experts, int64_t topk, int64_t width) {
  auto get = [&](const char* key, auto def) {
    return j.contains(key) && !j[key].is_null() ? j[key].get<decltype(def)>() : def;
  };
  c.moe.expert_num = get("num_experts", experts);
  c.moe.num_experts_chosen = get("num_experts_per_tok", topk);
  c.moe.norm_topk_prob = get("norm_topk_prob", false);
  c.moe.expert_ffn = get("moe_intermediate_size", width);
  c.moe.sparse_step = get("decoder_sparse_step", int64_t{1});
  if (c.moe.sparse_step < 1)
    throw std::invalid_argument("config.json: decoder_sparse_step " + std::to_string(c.moe.sparse_step) + ": expects >= 1");
  c.moe.dense_layers = get("mlp_only_layers", std::vector<int64_t>{});
  c.moe.moe_layer_freq = 1;
  c.moe.shared_expert_ffn = 0;
  c.moe.shared_expert_gate = false;
  read_hf_router_loss(j, c);
}

}  // namespace

nlohmann::json qwen2_moe_hf_config(const ModelConfig& c) {
  const std::string cls = "Qwen2MoeForCausalLM";
  if (!c.qkv_has_bias)
    throw std::invalid_argument("Hugging Face's " + cls + " always has q/k/v biases (model_config.qkv_has_bias: False)");
  if (c.qk_layernorm)
    throw std::invalid_argument("Hugging Face's " + cls + " has no q/k norms (model_config.qk_layernorm: True)");
  if (c.moe.shared_expert_ffn <= 0 || !c.moe.shared_expert_gate)
    throw std::invalid_argument("Hugging Face's " + cls + " always has a shared expert with its sigmoid gate "
                                "(moe_config.moe_shared_expert_intermediate_size, use_shared_expert_gating: True)");
  nlohmann::json j = llama_like_hf_json(c, cls, "qwen2_moe");
  if (c.head_dim_explicit == 0) j.erase("head_dim");
  write_window(j, c);
  write_qwen_moe(j, c, cls);
  j["shared_expert_intermediate_size"] = c.moe.shared_expert_ffn;
  return j;
}

void read_qwen2_moe_hf_config(const nlohmann::json& j, ModelConfig& c) {
  read_llama_like_hf_config(j, c, qwen_defaults(false));
  c.qkv_has_bias = true;
  read_qwen_window(j, c);
  read_qwen_moe(j, c, 60, 4, 1408);  // Qwen2MoeConfig's defaults
  c.moe.shared_expert_ffn = j.contains("shared_expert_intermediate_size") && !j["shared_expert_intermediate_size"].is_null()
                                ? j["shared_expert_intermediate_size"].get<int64_t>()
                                : 5632;
  if (c.moe.shared_expert_ffn <= 0)
    throw std::invalid_argument("config.json: shared_expert_intermediate_size " + std::to_string(c.moe.shared_expert_ffn) +
                                ": Qwen2-MoE's shared expert needs a width > 0");
  c.moe.shared_expert_gate = true;  // Qwen2MoeSparseMoeBlock's shared_expert_gate, always
}

std::string qwen_name(Role role, int64_t l) {
  const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
  switch (role) {
    case Role::kRouterW: return p + "gate.weight";
    case Role::kExpertGateW: return p + "experts.{e}.gate_proj.weight";
    case Role::kExpertUpW: return p + "experts.{e}.up_proj.weight";
    case Role::kExpertDownW: return p + "experts.{e}.down_proj.weight";
    case Role::kSharedGateProjW: return p + "shared_expert.gate_proj.weight";
    case Role::kSharedUpProjW: return p + "shared_expert.up_proj.weight";
    case Role::kSharedDownProjW: return p + "shared_expert.down_proj.weight";
    case Role::kSharedExpertGateW: return p + "shared_expert_gate.weight";
    default: return llama_name(role, l);
  }
}

nlohmann::json qwen3_moe_hf_config(const ModelConfig& c) {
  const std::string cls = "Qwen3MoeForCausalLM";
  if (!c.qk_layernorm)
    throw std::invalid_argument("Hugging Face's " + cls + " always has q/k norms (model_config.qk_layernorm: False)");
  if (c.qkv_has_bias)
    throw std::invalid_argument("Hugging Face's " + cls + " has no q/k/v biases without an output-projection bias "
                                "(model_config.qkv_has_bias: True)");
  if (c.moe.shared_expert_ffn > 0)
    throw std::invalid_argument("Hugging Face's " + cls + " has no shared expert (moe_config.moe_shared_expert_intermediate_size)");
  nlohmann::json j = llama_like_hf_json(c, cls, "qwen3_moe");
  j["attention_bias"] = false;
  write_window(j, c);
  write_qwen_moe(j, c, cls);
  return j;
}

void read_qwen3_moe_hf_config(const nlohmann::json& j, ModelConfig& c) {
  read_qwen3_hf_config(j, c);
  read_qwen_moe(j, c, 128, 8, 768);  // Qwen3MoeConfig's defaults
}

}  // namespace gf
