// GPT-2 (Radford et al. 2019; the Hugging Face GPT2LMHeadModel): token + learned position
// embeddings, pre-LayerNorm layers of causal multi-head attention and a GELU MLP (biases
// everywhere, Conv1D [in, out] weights, the q|k|v projection as one c_attn), a final LayerNorm and
// an LM head tied to the token embedding. Built from the shared blocks (models/transformer_lm.h).
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "models/transformer_lm.h"

namespace gf {

TransformerSpec gpt2_spec(const ModelConfig& cfg);
// Hugging Face GPT-2 names: wte, wpe, h.{i}.ln_1 / attn.c_attn / attn.c_proj / ln_2 / mlp.c_fc /
// mlp.c_proj, ln_f.
std::string gpt2_name(Role role, int64_t layer);
// Hugging Face's config.json of transformers' GPT2Config (models/gpt2/configuration_gpt2.py) for
// `cfg`; throws std::invalid_argument naming the key GPT2LMHeadModel cannot express (rotary
// positions, no linear biases, experts). read_gpt2_hf_config sets the keys a GPT2Config file gives
// and throws for one that changes the arithmetic in a way this model does not run.
nlohmann::json gpt2_hf_config(const ModelConfig& cfg);
void read_gpt2_hf_config(const nlohmann::json& j, ModelConfig& cfg);

class GPT2LMHeadModel : public TransformerLM {
 public:
  GPT2LMHeadModel(const ModelConfig& cfg, const ModelLayout& layout, int64_t micro_batch, const ParallelContext& ctx,
                  const StageOptions& stage = {})
      : TransformerLM(gpt2_spec(cfg), gpt2_name, cfg, layout, micro_batch, ctx, stage) {}

  // The parameters of a GPT-2 with this config (Hugging Face names and shapes), whatever the layout.
  static ParamTable make_param_table(const ModelConfig& cfg) {
    return TransformerLM::make_param_table(gpt2_spec(cfg), gpt2_name);
  }
  // Placed on tensor-parallel rank tp_rank of layout.tp (layout.vocab_split splits the vocabulary).
  static Placement make_placement(const ModelConfig& cfg, const ModelLayout& layout, int tp_rank) {
    return TransformerLM::make_placement(gpt2_spec(cfg), gpt2_name, cfg, layout, tp_rank);
  }
};

}  // namespace gf
