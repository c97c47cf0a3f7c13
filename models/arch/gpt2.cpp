#include "models/arch/gpt2.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gf {

TransformerSpec gpt2_spec(const ModelConfig& cfg) {
  TransformerSpec s;
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

}  // namespace gf
