// What a decoder-only transformer is made of, apart from its sizes' source and its names: the
// blocks read a TransformerSpec (GPT-2 and Llama each fill one from their config) and declare
// their parameters under the names the model's NameMap gives them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ops/activation.h"
#include "core/ops/rope_scaling.h"
#include "models/lora_config.h"

namespace gf {

enum class NormKind { kLayerNorm, kRMSNorm };
// kGelu: GPT-2's act(c_fc(x)); the gated ones down(act(gate(x)) * up(x)): SwiGLU (silu; Llama) and GeGLU
// (TransformerSpec::act, Gemma's gelu_pytorch_tanh).
enum class MlpKind { kGelu, kSwiGLU, kGeGLU };
inline bool gated_mlp(MlpKind k) { return k != MlpKind::kGelu; }

// Mixture of Experts (models/blocks/moe.h; the arithmetic in core/ops/router.h). experts 0: dense.
struct MoeSpec {
  int64_t experts = 0, topk = 1, layer_freq = 1;
  double capacity_factor = 0.0;  // <= 0: dropless
  bool norm_topk = true, drop_by_probs = false;
  float aux_factor = 0.0f, z_factor = 0.0f;
  bool router_low_precision = false;  // router_dense_type: the router product in the compute dtype
  bool allgather_dispatch = false;    // token_dispatcher: allgather (else alltoall)
  int64_t ffn = 0;                    // each expert's FFN width (0: the model's)
  int64_t shared_ffn = 0;             // a shared expert of this width beside the routed ones (0: none; Qwen2-MoE)
  bool shared_gate = false;           // the shared expert's output times sigmoid(x . w) (Qwen2-MoE's shared_expert_gate)
  int64_t sparse_step = 0;            // MoeConfig::sparse_step (Qwen's decoder_sparse_step; 0: layer_freq's rule)
  // DeepSeek's routing (MoeConfig): sigmoid scores, groups of experts, the weights' scale, and the aux-loss-free
  // balancing bias (a [E] parameter of each router, e_score_correction_bias, that the trainer moves).
  bool sigmoid = false;
  int64_t groups = 1, group_topk = 1, group_score_k = 1;
  float scale = 1.0f;
  bool expert_bias = false;
  std::vector<int64_t> dense_layers;  // MoeConfig::dense_layers (Qwen's mlp_only_layers)
  bool is_moe(int64_t layer) const {
    if (experts <= 1 || std::find(dense_layers.begin(), dense_layers.end(), layer) != dense_layers.end()) return false;
    return sparse_step > 0 ? (layer + 1) % sparse_step == 0 : layer % (layer_freq < 1 ? 1 : layer_freq) == 0;
  }
};

// Multi-head latent attention (DeepSeek-V2/V3; Hugging Face's DeepseekV2Attention): q from x (q_proj) or through a
// low-rank latent (q_a_proj, q_a_layernorm, q_b_proj); keys and values from one latent of kv_rank per token
// (kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj) plus one RoPE key of rope dims shared by every head. Each head's
// query and key are nope + rope wide, its value v wide. kv_rank 0: off.
struct MlaSpec {
  int64_t q_rank = 0, kv_rank = 0, nope = 0, rope = 0, v = 0;
  bool on() const { return kv_rank > 0; }
  int64_t qk() const { return nope + rope; }
};

struct TransformerSpec {
  int64_t vocab = 0, seq = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0;
  int64_t positions = 0;       // learned position table rows (0: none)
  NormKind norm = NormKind::kLayerNorm;
  float norm_eps = 1e-5f;
  bool linear_bias = true;     // biases on every projection (GPT-2)
  bool qkv_bias = true;        // biases on q, k, v
  bool out_in = false;         // projections stored [out, in] (nn.Linear, Llama) or [in, out] (Conv1D, GPT-2)
  bool fused_qkv_param = true; // one q|k|v parameter (GPT-2's c_attn) or three (q_proj, k_proj, v_proj)
  bool rope = false;
  double rope_theta = 10000.0;
  int64_t rope_positions = 0;  // rows of the RoPE table
  ops::RopeScaling rope_scaling;  // Hugging Face's rope_scaling (default: theta alone)
  int64_t max_positions = 0;   // the config's max_position_embeddings (RoPE scaling's original context by default)
  int64_t head_width = 0;      // ModelConfig::head_dim_explicit (0: hidden / heads)
  bool qk_norm = false;        // per-head RMSNorm of q and k before RoPE (Qwen3)
  MlpKind mlp = MlpKind::kGelu;
  ops::Activation act = ops::Activation::kGeluNew;
  bool tied_head = true;       // the LM head reads the token embedding
  float init_std = 0.02f;
  bool scaled_proj_init = true;  // output projections at std / sqrt(2 L) (GPT-2)
  float hidden_dropout = 0.0f, attention_dropout = 0.0f;
  bool flash = false;
  int64_t window = 0;  // ModelConfig::sliding_window (0: none)
  // The layers the window applies to (ModelConfig::window_layers; empty: every layer), and the RoPE base of
  // those layers (Gemma 3's rope_local_base_freq, default RoPE without scaling; 0: the model's RoPE).
  std::vector<bool> window_layers;
  double local_rope_theta = 0.0;
  float attn_scale = 0.0f;   // the scores' scale (Gemma's query_pre_attn_scalar^-1/2; 0: head_dim^-1/2)
  float norm_offset = 0.0f;  // RMSNorms scale by (offset + w) (Gemma's 1 + w; its weights start at 0)
  bool sandwich_norm = false;  // a norm on each sublayer's output before the residual add (Gemma 2/3's
                               // post_attention_layernorm, post_feedforward_layernorm)
  float embed_scale = 0.0f;  // the token embedding's output times this (Gemma's sqrt(hidden)); 0: none
  MoeSpec moe;
  LoraConfig lora;  // LoRA adapters on the projections it targets, the rest frozen (models/lora.h)
  MlaSpec mla;  // MLA in place of q, k, v projections (then kv_heads == heads, head_dim() the query/key width)
  int64_t head_dim() const { return mla.on() ? mla.qk() : head_width > 0 ? head_width : hidden / heads; }
  // Layer l's window (0: the whole prefix).
  int64_t layer_window(int64_t l) const {
    return window > 0 && (window_layers.empty() || (l >= 0 && l < static_cast<int64_t>(window_layers.size()) &&
                                                     window_layers[static_cast<size_t>(l)]))
               ? window
               : 0;
  }
  // Some layers windowed, others not: two attention bounds per row (BlockEnv::key_lo_full).
  bool mixed_windows() const {
    if (window <= 0 || window_layers.empty()) return false;
    for (int64_t l = 0; l < layers; ++l)
      if (layer_window(l) == 0) return true;
    return false;
  }
  bool local_rope(int64_t l) const { return local_rope_theta > 0 && layer_window(l) > 0; }
};

// Canonical parameter roles, mapped to a model's checkpoint names. Layer roles get the layer index.
enum class Role {
  kEmbed, kPosEmbed, kFinalNormW, kFinalNormB, kLmHead,
  kNorm1W, kNorm1B, kQkvW, kQkvB, kQW, kQB, kKW, kKB, kVW, kVB, kOW, kOB, kQNormW, kKNormW,
  kNorm2W, kNorm2B, kFcW, kFcB, kGateW, kUpW, kDownW, kDownB,
  // An MoE layer's router and its experts' projections; the experts' names hold "{e}" where the
  // expert's index goes (expert_name).
  kRouterW, kExpertUpW, kExpertUpB, kExpertGateW, kExpertDownW, kExpertDownB,
  // An MoE layer's shared expert (a SwiGLU MLP every token runs) and the [1, C] weight of its sigmoid gate.
  kSharedGateProjW, kSharedUpProjW, kSharedDownProjW, kSharedExpertGateW,
  // TransformerSpec::sandwich_norm: the norms of the attention's and the MLP's outputs.
  kPostAttnNormW, kPostMlpNormW,
  // MLA (MlaSpec): the query latent's projection, norm and up-projection, the key/value latent's (with the shared
  // RoPE key) projection, norm and up-projection.
  kQAW, kQANormW, kQBW, kKvAW, kKvANormW, kKvBW,
  kRouterBias,  // MoeSpec::expert_bias: the router's [E] selection bias
};
using NameMap = std::function<std::string(Role, int64_t layer)>;

// `pattern` with its "{e}" replaced by the expert index.
inline std::string expert_name(std::string pattern, int64_t expert) {
  const size_t at = pattern.find("{e}");
  if (at != std::string::npos) pattern.replace(at, 3, std::to_string(expert));
  return pattern;
}

}  // namespace gf
