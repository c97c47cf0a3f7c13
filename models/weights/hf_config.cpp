#include "models/weights/hf_config.h"

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "models/registry.h"

namespace gf {

namespace fs = std::filesystem;

double float_decimal(float v) {
  char buf[32];
  // The shortest of %.1g .. %.9g that reads back as the same float.
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return std::strtod(buf, nullptr);
}

nlohmann::json hf_config_json(const ModelConfig& cfg) {
  const ModelEntry& e = find_model(cfg.arch, cfg.type);
  if (!e.hf_config)
    throw std::invalid_argument("model.arch.type " + cfg.arch + " has no Hugging Face counterpart to write a config.json for");
  return e.hf_config(cfg);
}

std::optional<nlohmann::json> read_hf_config_beside(const std::string& path) {
  const fs::path p(path);
  const fs::path file = (fs::is_directory(p) ? p : p.parent_path()) / "config.json";
  if (!fs::is_regular_file(file)) return std::nullopt;
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(file.string() + ": not JSON (" + e.what() + "); fix or remove it");
  }
}

namespace {

// The registry entry a config.json describes: its "architectures" name, else its model_type.
const ModelEntry* entry_of(const nlohmann::json& hf, std::string& what) {
  if (hf.contains("architectures") && hf["architectures"].is_array() && !hf["architectures"].empty()) {
    what = hf["architectures"][0].get<std::string>();
    for (const ModelEntry& e : model_registry())
      if (e.arch == what && e.read_hf_config) return &e;
  }
  if (hf.contains("model_type") && hf["model_type"].is_string()) {
    const std::string t = hf["model_type"].get<std::string>();
    if (what.empty()) what = "model_type " + t;
    for (const ModelEntry& e : model_registry())
      if (!e.hf_model_type.empty() && e.hf_model_type == t && e.read_hf_config) return &e;
  }
  if (what.empty()) what = "a model without \"architectures\" or \"model_type\"";
  return nullptr;
}

template <typename T>
std::string text_of(T v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& file) {
  std::string what;
  const ModelEntry* e = entry_of(hf, what);
  if (e == nullptr) throw std::runtime_error(file + " describes " + what + ", which gridformer does not run");
  ModelConfig m;
  m.type = e->config_type;
  m.arch = e->arch;
  m.seq_length = 4096;  // read_hf_config compares a sliding window with it; set from the table below
  try {
    e->read_hf_config(hf, m);
  } catch (const std::exception& x) {
    throw std::runtime_error(file + ": " + x.what());
  }
  m.seq_length = std::min<int64_t>(m.max_position_embeddings, 4096);
  return m;
}

HfConfigCheck check_hf_config(const nlohmann::json& hf, const ModelConfig& cfg, const std::string& file) {
  HfConfigCheck out;
  std::string what;
  const ModelEntry* e = entry_of(hf, what);
  if (e == nullptr) {
    out.errors.push_back(file + " describes " + what + ", which gridformer does not run");
    return out;
  }
  if (e->config_type != cfg.type) {
    out.errors.push_back(file + " describes a " + what + " (model.model_config.type " + e->config_type +
                         "), the config a " + cfg.type);
    return out;
  }
  ModelConfig theirs = cfg;
  try {
    e->read_hf_config(hf, theirs);
  } catch (const std::exception& x) {
    out.errors.push_back(file + ": " + x.what());
    return out;
  }
  auto differ = [&](std::vector<std::string>& into, const char* quantity, const char* keys, auto ours, auto them) {
    if (ours == them) return;
    into.push_back(std::string(quantity) + ": " + text_of(ours) + " in the config (" + keys + "), " + text_of(them) +
                   " in " + file);
  };
  auto close = [](double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(std::abs(a), std::abs(b)); };
  auto differ_real = [&](const char* quantity, const char* keys, double ours, double them) {
    if (!close(ours, them)) differ(out.errors, quantity, keys, ours, them);
  };
  const TransformerSpec a = e->spec(cfg), b = e->spec(theirs);
  std::vector<std::string>& E = out.errors;
  differ(E, "vocabulary", "model_config.vocab_size", a.vocab, b.vocab);
  differ(E, "hidden size", "model_config.hidden_size", a.hidden, b.hidden);
  differ(E, "layers", "model_config.num_layers", a.layers, b.layers);
  differ(E, "attention heads", "model_config.num_heads", a.heads, b.heads);
  differ(E, "key/value heads", "model_config.n_kv_heads", a.kv_heads, b.kv_heads);
  differ(E, "sliding window", "model_config.sliding_window", a.window, b.window);
  differ(E, "FFN width", "model_config.intermediate_size or hidden_size x expand_ratio", a.ffn, b.ffn);
  differ(E, "learned position rows", "model_config.max_position_embeddings", a.positions, b.positions);
  differ(E, "tied LM head", "model_config.tie_word_embeddings", a.tied_head, b.tied_head);
  differ(E, "q/k/v biases", "model_config.qkv_has_bias", a.qkv_bias, b.qkv_bias);
  differ(E, "head width", "model_config.head_dim or hidden_size / num_heads", a.head_dim(), b.head_dim());
  differ(E, "q/k norms", "model_config.qk_layernorm", a.qk_norm, b.qk_norm);
  auto layers_text = [](const TransformerSpec& s) {  // the windowed layers, as "0 1 3"
    std::string t;
    for (int64_t l = 0; l < s.layers; ++l) {
      if (s.layer_window(l) <= 0) continue;
      if (!t.empty()) t.push_back(' ');
      t.append(std::to_string(l));
    }
    return t;
  };
  differ(E, "windowed layers", "model_config.layer_types, sliding_window", layers_text(a), layers_text(b));
  differ_real("attention score scale", "model_config.query_pre_attn_scalar", a.attn_scale, b.attn_scale);
  differ(E, "key/value latent", "model_config.kv_lora_rank", a.mla.kv_rank, b.mla.kv_rank);
  differ(E, "query latent", "model_config.q_lora_rank", a.mla.q_rank, b.mla.q_rank);
  differ(E, "heads' RoPE part", "model_config.qk_rope_head_dim", a.mla.rope, b.mla.rope);
  differ(E, "value head width", "model_config.v_head_dim", a.mla.v, b.mla.v);
  differ_real("local layers' RoPE base", "model_config.rope_local_base_freq", a.local_rope_theta, b.local_rope_theta);
  if (a.rope && !(a.rope_scaling == b.rope_scaling))
    differ(E, "RoPE scaling", "model_config.rope_scaling", a.rope_scaling.describe(), b.rope_scaling.describe());
  differ(E, "linear biases", "model_config.add_bias_linear", a.linear_bias, b.linear_bias);
  differ(E, "rotary positions", "model_config.position_embedding_type", a.rope, b.rope);
  differ(E, "experts", "moe_config.expert_num", a.moe.experts, b.moe.experts);
  if (a.moe.experts > 1 && b.moe.experts > 1) {
    differ(E, "experts per token", "moe_config.num_experts_chosen", a.moe.topk, b.moe.topk);
    differ(E, "top-k probabilities renormalised", "moe_config.norm_topk_prob", a.moe.norm_topk, b.moe.norm_topk);
    differ(E, "sigmoid router scores", "moe_config.moe_router_score_function", a.moe.sigmoid, b.moe.sigmoid);
    differ(E, "expert groups", "moe_config.moe_router_num_groups", a.moe.groups, b.moe.groups);
    differ(E, "groups open to a token", "moe_config.moe_router_group_topk", a.moe.group_topk, b.moe.group_topk);
    differ(E, "expert bias", "moe_config.moe_router_enable_expert_bias", a.moe.expert_bias, b.moe.expert_bias);
    differ_real("routed experts' scale", "moe_config.moe_router_topk_scaling_factor", a.moe.scale, b.moe.scale);
    std::string la, lb;  // the MoE layers, as "0 1 3"
    for (int64_t l = 0; l < std::min(a.layers, b.layers); ++l) {
      if (a.moe.is_moe(l)) la += (la.empty() ? "" : " ") + std::to_string(l);
      if (b.moe.is_moe(l)) lb += (lb.empty() ? "" : " ") + std::to_string(l);
    }
    differ(E, "MoE layers", "moe_config.moe_layer_freq, decoder_sparse_step, mlp_only_layers", la, lb);
    differ(E, "experts' FFN width", "moe_config.moe_intermediate_size", a.moe.ffn > 0 ? a.moe.ffn : a.ffn,
           b.moe.ffn > 0 ? b.moe.ffn : b.ffn);
  }
  differ_real("norm epsilon", "model_config.layernorm_epsilon or rms_norm_eps", a.norm_eps, b.norm_eps);
  if (a.rope) differ_real("RoPE base", "model_config.rope_theta or theta", a.rope_theta, b.rope_theta);
  std::vector<std::string>& W = out.warnings;
  // A GELU variant: MindFormers' GPT-2 files say gelu (erf) where Hugging Face's GPT-2 runs gelu_new
  // (tanh); they differ by about 1e-3 at most, so the weights are usable and the difference is said.
  differ(W, "MLP activation", "model_config.hidden_act", cfg.hidden_act, theirs.hidden_act);
  differ(W, "hidden dropout", "model_config.hidden_dropout_rate", cfg.hidden_dropout_rate, theirs.hidden_dropout_rate);
  differ(W, "attention dropout", "model_config.attention_dropout_rate", cfg.attention_dropout_rate,
         theirs.attention_dropout_rate);
  differ(W, "end-of-text token", "model_config.eos_token_id", cfg.eos_token_id, theirs.eos_token_id);
  return out;
}

}  // namespace gf
