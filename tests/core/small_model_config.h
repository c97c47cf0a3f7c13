// The small models the placement and checkpoint tests lay out: a ModelConfig with the run's
// parallel_config.vocab_emb_dp (False: the vocabulary is split over the tensor-parallel ranks), which
// the run's ModelLayout carries beside the config; and their placements on a tensor-parallel rank.
#pragma once
#include "core/params/placement.h"
#include "models/arch/gpt2.h"
#include "models/arch/llama.h"
#include "models/layout.h"
#include "models/model_config.h"
#include "tests/tiny_model.h"

namespace gf::test {

struct SmallConfig : ModelConfig {
  bool vocab_emb_dp = true;
  ModelLayout layout(int tp) const {
    ModelLayout l;
    l.tp = tp;
    l.vocab_split = !vocab_emb_dp;
    return l;
  }
};

// A 2-layer GPT-2 whose vocabulary (1000) is padded: the last rank (or the single one) holds padding rows.
inline SmallConfig gpt2_small(bool vocab_emb_dp) {
  SmallConfig c = tiny_model<SmallConfig>({.vocab = 1000, .seq = 16, .hidden = 48, .layers = 2, .heads = 4});
  c.vocab_emb_dp = vocab_emb_dp;
  return c;
}

// A 2-layer Llama of the same vocabulary, 8 query heads of 8 and kv_heads key/value heads, SwiGLU of 96, its head
// tied to the embedding or not, q/k/v biases or not.
inline SmallConfig llama_small(bool vocab_emb_dp, int64_t kv_heads = 4, bool tied = false, bool qkv_bias = false) {
  SmallConfig c =
      tiny_model<SmallConfig>({.vocab = 1000, .seq = 16, .hidden = 64, .layers = 2, .heads = 8, .act = "silu"});
  make_llama(c, kv_heads, 96);
  c.tie_word_embeddings = tied;
  c.qkv_has_bias = qkv_bias;
  c.vocab_emb_dp = vocab_emb_dp;
  return c;
}

// Rank `rank` of tp tensor-parallel ranks' placement of c's parameters.
inline Placement placement_of(const SmallConfig& c, int rank, int tp) {
  return (c.type == "LlamaConfig") ? LlamaForCausalLM::make_placement(c, c.layout(tp), rank)
                                   : GPT2LMHeadModel::make_placement(c, c.layout(tp), rank);
}

}  // namespace gf::test
