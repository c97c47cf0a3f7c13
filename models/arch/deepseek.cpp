// DeepSeek-V2 (Hugging Face's DeepseekV2ForCausalLM, model_type deepseek_v2; transformers' models/deepseek_v2/
// modeling_deepseek_v2.py and DeepSeek's own modeling file: tools/torch_hf_deepseek.py names the versions read).
// The Llama model (llama_spec) with
//  * multi-head latent attention (models/blocks/mla.h): q_lora_rank (0: q_proj), kv_lora_rank, qk_nope_head_dim,
//    qk_rope_head_dim, v_head_dim; RoPE (yarn in the released files) over the qk_rope_head_dim part, on
//    DeepSeek's interleaved pairs; the scores scaled by qk_head_dim^-1/2 times yarn's mscale(factor,
//    mscale_all_dim)^2 (DeepSeek's softmax_scale, and transformers' since its fix of V2);
//  * Mixture of Experts from layer first_k_dense_replace on (the layers before it dense, of intermediate_size):
//    softmax over n_routed_experts, top num_experts_per_tok (`greedy`; group-limited with one group is the
//    same), weights renormalised only under norm_topk_prob, times routed_scaling_factor (1 here), plus
//    n_shared_experts shared experts as one SwiGLU MLP of moe_intermediate_size x n_shared_experts, ungated.
// transformers trains no balancing loss (aux_loss_alpha is DeepSeek's; the released files' seq_aux): read as 0.
// DeepSeek-V2's group_limited_greedy: the experts in n_group groups, each scored by its best expert, the topk_group
// best open to the token. DeepSeek-V3 (DeepseekV3ForCausalLM, deepseek_v3; modeling_deepseek_v3.py): the same
// layers with a query latent, sigmoid scores, noaux_tc (a group scored by the sum of its 2 best biased scores; the
// bias e_score_correction_bias a parameter here, moved after each step as Megatron's moe_router_enable_expert_bias
// does; transformers keeps it fixed), the weights normalised and times routed_scaling_factor. rope_interleave
// false (the RoPE key's pairs half-split) and moe_layer_freq != 1 are refused by name, as are attention biases.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ops/rope_scaling.h"
#include "models/arch/llama.h"
#include "models/weights/hf_config.h"

namespace gf {

namespace {

// DeepSeek's yarn_get_mscale.
double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

TransformerSpec deepseek_v2_spec(const ModelConfig& cfg) {
  TransformerSpec s = llama_spec(cfg);
  s.mla = {cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim};
  if (cfg.moe.router_groups > 1 && cfg.moe.router_group_score_topk == 0)
    s.moe.group_score_k = 1;  // HF's group score is the best expert's (V2) unless the config says otherwise
  s.kv_heads = s.heads;
  s.head_width = 0;
  double scale = std::pow(static_cast<double>(s.mla.qk()), -0.5);
  if (cfg.rope_scaling.rope_type == "yarn" && cfg.rope_scaling.mscale_all_dim != 0.0) {
    const double m = yarn_mscale(cfg.rope_scaling.factor, cfg.rope_scaling.mscale_all_dim);
    scale = scale * m * m;
  }
  s.attn_scale = static_cast<float>(scale);
  return s;
}

std::string deepseek_v2_name(Role role, int64_t l) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  switch (role) {
    case Role::kQAW: return p + "self_attn.q_a_proj.weight";
    case Role::kQANormW: return p + "self_attn.q_a_layernorm.weight";
    case Role::kQBW: return p + "self_attn.q_b_proj.weight";
    case Role::kKvAW: return p + "self_attn.kv_a_proj_with_mqa.weight";
    case Role::kKvANormW: return p + "self_attn.kv_a_layernorm.weight";
    case Role::kKvBW: return p + "self_attn.kv_b_proj.weight";
    case Role::kRouterW: return p + "mlp.gate.weight";
    case Role::kRouterBias: return p + "mlp.gate.e_score_correction_bias";
    case Role::kExpertGateW: return p + "mlp.experts.{e}.gate_proj.weight";
    case Role::kExpertUpW: return p + "mlp.experts.{e}.up_proj.weight";
    case Role::kExpertDownW: return p + "mlp.experts.{e}.down_proj.weight";
    case Role::kSharedGateProjW: return p + "mlp.shared_experts.gate_proj.weight";
    case Role::kSharedUpProjW: return p + "mlp.shared_experts.up_proj.weight";
    case Role::kSharedDownProjW: return p + "mlp.shared_experts.down_proj.weight";
    default: return llama_name(role, l);
  }
}

namespace {
nlohmann::json deepseek_hf_config(const ModelConfig& c, bool v3) {
  const std::string cls = v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM";
  auto refuse = [&](const std::string& why) { throw std::invalid_argument("Hugging Face's " + cls + " " + why); };
  if (c.kv_lora_rank <= 0) refuse("always has latent attention (model_config.kv_lora_rank)");
  if (c.qkv_has_bias || c.qk_layernorm) refuse("has no q/k/v biases or q/k norms");
  if (c.sliding_window > 0) refuse("has no sliding window (model_config.sliding_window)");
  nlohmann::json j = llama_like_hf_json(c, cls, v3 ? "deepseek_v3" : "deepseek_v2");
  j.erase("head_dim");
  j["num_key_value_heads"] = c.num_heads;
  j["attention_bias"] = false;
  j["q_lora_rank"] = c.q_lora_rank > 0 ? nlohmann::json(c.q_lora_rank) : nlohmann::json();
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  const MoeConfig& m = c.moe;
  if (m.enabled()) {
    // The MoE layers: from first_k_dense_replace on, every one.
    int64_t k = 0;
    while (std::find(m.dense_layers.begin(), m.dense_layers.end(), k) != m.dense_layers.end()) ++k;
    for (int64_t l = k; l < c.num_layers; ++l)
      if (std::find(m.dense_layers.begin(), m.dense_layers.end(), l) != m.dense_layers.end())
        refuse("makes every layer from first_k_dense_replace on an MoE layer (moe_config.mlp_only_layers)");
    if (m.moe_layer_freq != 1 || m.sparse_step > 1) refuse("has an MoE layer in every layer past the dense ones");
    if (m.shared_expert_gate) refuse("has no gate on its shared experts (moe_config.use_shared_expert_gating)");
    const int64_t width = m.expert_ffn > 0 ? m.expert_ffn : c.ffn_hidden();
    if (m.shared_expert_ffn % width != 0)
      refuse("has shared experts of moe_intermediate_size each (moe_config.moe_shared_expert_intermediate_size " +
             std::to_string(m.shared_expert_ffn) + " is not a multiple of " + std::to_string(width) + ")");
    j["n_routed_experts"] = m.expert_num;
    j["num_experts_per_tok"] = m.num_experts_chosen;
    j["moe_intermediate_size"] = width;
    j["n_shared_experts"] = m.shared_expert_ffn / width;
    j["first_k_dense_replace"] = k;
    j["moe_layer_freq"] = 1;
    j["norm_topk_prob"] = m.norm_topk_prob;
    j["routed_scaling_factor"] = m.router_scaling;
    j["n_group"] = m.router_groups;
    j["topk_group"] = m.router_group_topk;
    const int64_t group_k = m.router_group_score_topk > 0 ? m.router_group_score_topk
                                                          : (v3 ? 2 : 1);
    if (v3) {
      if (!m.router_sigmoid || !m.expert_bias) refuse("scores by sigmoid with e_score_correction_bias (moe_config.moe_router_score_function: sigmoid, moe_router_enable_expert_bias: True)");
      if (group_k != 2) refuse("scores a group by its 2 best experts (moe_config.moe_router_group_score_topk)");
      j["topk_method"] = "noaux_tc";
      j["scoring_func"] = "sigmoid";
      j["rope_interleave"] = true;
    } else {
      if (m.router_sigmoid || m.expert_bias) refuse("scores by softmax without a bias (DeepseekV3ForCausalLM's are sigmoid)");
      if (m.router_groups > 1 && group_k != 1) refuse("scores a group by its best expert (moe_config.moe_router_group_score_topk)");
      j["topk_method"] = m.router_groups > 1 ? "group_limited_greedy" : "greedy";
      j["scoring_func"] = "softmax";
    }
    j["aux_loss_alpha"] = m.aux_loss_factor;
  } else {
    j["n_routed_experts"] = nullptr;
    j["first_k_dense_replace"] = c.num_layers;
  }
  return j;
}
}  // namespace

nlohmann::json deepseek_v2_hf_config(const ModelConfig& c) { return deepseek_hf_config(c, false); }
nlohmann::json deepseek_v3_hf_config(const ModelConfig& c) { return deepseek_hf_config(c, true); }

namespace {
void read_deepseek_hf_config(const nlohmann::json& j_in, ModelConfig& c, bool v3) {
  auto refuse = [](const std::string& why) { throw std::invalid_argument("config.json: " + why); };
  auto has = [&](const char* key) { return j_in.contains(key) && !j_in[key].is_null(); };
  auto get = [&](const char* key, auto def) { return has(key) ? j_in[key].get<decltype(def)>() : def; };
  nlohmann::json j = j_in;
  j.erase("head_dim");
  LlamaLikeDefaults d;  // DeepseekV2Config's / DeepseekV3Config's defaults
  d.vocab_size = v3 ? 129280 : 102400;
  d.hidden_size = v3 ? 7168 : 4096;
  d.intermediate_size = v3 ? 18432 : 11008;
  d.num_layers = v3 ? 61 : 30;
  d.num_heads = v3 ? 128 : 32;
  d.max_position_embeddings = v3 ? 4096 : 2048;
  d.rms_norm_eps = 1e-6f;
  d.rope_theta = 10000.0;
  if (v3 && has("rope_interleave") && !j_in["rope_interleave"].get<bool>())
    refuse("rope_interleave false: the RoPE key's pairs half-split are not built (DeepSeek's interleaved pairs are)");
  read_llama_like_hf_config(j, c, d);
  c.num_kv_heads = c.num_heads;  // every head has its own key and value (num_key_value_heads is not read)
  c.head_dim_explicit = 0;
  if (get("attention_bias", false)) refuse("attention_bias true: gridformer's DeepSeek-V2 has no attention biases");
  // null: q_proj (DeepSeek-V2-Lite); absent: DeepseekV2Config's 1536.
  c.q_lora_rank = !j_in.contains("q_lora_rank") ? 1536 : j_in["q_lora_rank"].is_null() ? 0 : j_in["q_lora_rank"].get<int64_t>();
  c.kv_lora_rank = get("kv_lora_rank", int64_t{512});
  c.qk_nope_head_dim = get("qk_nope_head_dim", int64_t{128});
  c.qk_rope_head_dim = get("qk_rope_head_dim", int64_t{64});
  c.v_head_dim = get("v_head_dim", int64_t{128});
  for (const auto& [key, v] : {std::pair<const char*, int64_t>{"kv_lora_rank", c.kv_lora_rank},
                               {"qk_nope_head_dim", c.qk_nope_head_dim}, {"qk_rope_head_dim", c.qk_rope_head_dim},
                               {"v_head_dim", c.v_head_dim}})
    if (v <= 0) refuse(std::string(key) + " " + std::to_string(v) + ": expects > 0");
  if (c.q_lora_rank < 0) refuse("q_lora_rank " + std::to_string(c.q_lora_rank) + ": expects > 0 or null");
  if (c.qk_rope_head_dim % 2 != 0) refuse("qk_rope_head_dim " + std::to_string(c.qk_rope_head_dim) + ": RoPE rotates pairs");
  if (c.v_head_dim > c.qk_nope_head_dim + c.qk_rope_head_dim)
    refuse("v_head_dim " + std::to_string(c.v_head_dim) + " wider than qk_nope_head_dim + qk_rope_head_dim: not built");
  const int64_t experts = get("n_routed_experts", int64_t{0});
  if (experts > 1) {
    c.moe.expert_num = experts;
    c.moe.num_experts_chosen = get("num_experts_per_tok", int64_t{0});
    c.moe.norm_topk_prob = get("norm_topk_prob", false);
    c.moe.expert_ffn = get("moe_intermediate_size", int64_t{v3 ? 2048 : 1407});
    const int64_t shared = get("n_shared_experts", int64_t{0});
    c.moe.shared_expert_ffn = shared * c.moe.expert_ffn;
    c.moe.shared_expert_gate = false;
    const int64_t k = get("first_k_dense_replace", int64_t{0});
    c.moe.dense_layers.clear();
    for (int64_t l = 0; l < std::min(k, c.num_layers); ++l) c.moe.dense_layers.push_back(l);
    c.moe.sparse_step = 0;
    c.moe.moe_layer_freq = 1;
    if (get("moe_layer_freq", int64_t{1}) != 1) refuse("moe_layer_freq " + j_in["moe_layer_freq"].dump() + ": only 1 is built");
    c.moe.router_scaling = get("routed_scaling_factor", v3 ? 2.5 : 1.0);
    if (!(c.moe.router_scaling > 0)) refuse("routed_scaling_factor " + j_in["routed_scaling_factor"].dump() + ": expects > 0");
    const std::string scoring = get("scoring_func", std::string(v3 ? "sigmoid" : "softmax"));
    const std::string method = get("topk_method", std::string(v3 ? "noaux_tc" : "greedy"));
    c.moe.router_groups = get("n_group", int64_t{v3 ? 8 : 1});
    c.moe.router_group_topk = get("topk_group", int64_t{v3 ? 4 : 1});
    if (c.moe.router_groups < 1 || c.moe.expert_num % c.moe.router_groups != 0 || c.moe.router_group_topk < 1 ||
        c.moe.router_group_topk > c.moe.router_groups)
      refuse("n_group " + std::to_string(c.moe.router_groups) + ", topk_group " + std::to_string(c.moe.router_group_topk) +
             ": the groups must divide n_routed_experts and topk_group be between 1 and n_group");
    if (v3) {
      if (scoring != "sigmoid" || method != "noaux_tc")
        refuse("scoring_func " + scoring + " with topk_method " + method + ": DeepSeek-V3's are sigmoid and noaux_tc");
      c.moe.router_sigmoid = true;
      c.moe.expert_bias = true;  // e_score_correction_bias
      c.moe.router_group_score_topk = 2;
      c.moe.norm_topk_prob = get("norm_topk_prob", true);
    } else {
      if (scoring != "softmax") refuse("scoring_func " + scoring + ": DeepSeek-V2's is softmax");
      if (method == "greedy") {
        c.moe.router_groups = c.moe.router_group_topk = 1;  // n_group / topk_group are not read by greedy
      } else if (method != "group_limited_greedy") {
        refuse("topk_method " + method + ": DeepSeek-V2's are greedy and group_limited_greedy");
      }
      c.moe.router_sigmoid = false;
      c.moe.expert_bias = false;
      c.moe.router_group_score_topk = c.moe.router_groups > 1 ? 1 : 0;
    }
    c.moe.aux_loss_factor = 0.0;  // transformers trains none
    c.moe.z_loss_factor = 0.0;
    c.moe.capacity_factor = 0.0;  // dropless
  }
}
}  // namespace

void read_deepseek_v2_hf_config(const nlohmann::json& j, ModelConfig& c) { read_deepseek_hf_config(j, c, false); }
void read_deepseek_v3_hf_config(const nlohmann::json& j, ModelConfig& c) { read_deepseek_hf_config(j, c, true); }

}  // namespace gf
