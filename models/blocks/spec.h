// What a decoder-only transformer is made of, apart from its sizes' source and its names: the
// blocks read a TransformerSpec (GPT-2 and Llama each fill one from their config) and declare
// their parameters under the names the model's NameMap gives them.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/ops/activation.h"

namespace gf {

enum class NormKind { kLayerNorm, kRMSNorm };
enum class MlpKind { kGelu, kSwiGLU };

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
  MlpKind mlp = MlpKind::kGelu;
  ops::Activation act = ops::Activation::kGeluNew;
  bool tied_head = true;       // the LM head reads the token embedding
  float init_std = 0.02f;
  bool scaled_proj_init = true;  // output projections at std / sqrt(2 L) (GPT-2)
  float hidden_dropout = 0.0f, attention_dropout = 0.0f;
  bool flash = false;
  int64_t head_dim() const { return hidden / heads; }
};

// Canonical parameter roles, mapped to a model's checkpoint names. Layer roles get the layer index.
enum class Role {
  kEmbed, kPosEmbed, kFinalNormW, kFinalNormB, kLmHead,
  kNorm1W, kNorm1B, kQkvW, kQkvB, kQW, kQB, kKW, kKB, kVW, kVB, kOW, kOB,
  kNorm2W, kNorm2B, kFcW, kFcB, kGateW, kUpW, kDownW, kDownB,
};
using NameMap = std::function<std::string(Role, int64_t layer)>;

}  // namespace gf
