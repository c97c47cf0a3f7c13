// The small models the placement and checkpoint tests lay out: a ModelConfig with the run's
// parallel_config.vocab_emb_dp (False: the vocabulary is split over the tensor-parallel ranks), which
// the run's ModelLayout carries beside the config.
#pragma once
#include "models/layout.h"
#include "models/model_config.h"

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
  SmallConfig c;
  c.vocab_size = 1000;
  c.seq_length = 16;
  c.max_position_embeddings = 16;
  c.hidden_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.vocab_emb_dp = vocab_emb_dp;
  return c;
}

}  // namespace gf::test
