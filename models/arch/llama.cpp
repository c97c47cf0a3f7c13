#include "models/arch/llama.h"

#include <algorithm>
#include <stdexcept>
#include <string>

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

}  // namespace gf
