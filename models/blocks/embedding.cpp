#include "models/blocks/embedding.h"

namespace gf {

void EmbeddingBlock::declare(ParamTable& t, const NameMap& names) const {
  ParamSpec wte{names(Role::kEmbed, -1), {spec_.vocab, spec_.hidden}, vocab_rows(), Init::kNormal, spec_.init_std,
                true};
  wte.tied = spec_.tied_head;  // the LM head reads it too
  t.add(wte);
  if (spec_.positions > 0)
    t.add({names(Role::kPosEmbed, -1), {spec_.positions, spec_.hidden}, no_split(), Init::kNormal, spec_.init_std,
           true});
}

void EmbeddingBlock::bind(const Placement& t, const NameMap& names) {
  wte_ = t.at(names(Role::kEmbed, -1)).offset;
  wpe_ = spec_.positions > 0 ? t.at(names(Role::kPosEmbed, -1)).offset : -1;
}

void EmbeddingBlock::fwd(const BlockEnv& e, float* y, const int32_t* tokens) const {
  embedding_parallel_fwd(*e.tp, y, tokens, e.w(wte_), wpe_ >= 0 ? e.w(wpe_) : nullptr, shape(e), e.partial);
  ops::dropout_apply(y, e.dropout(-1, kDropEmbedding, spec_.hidden_dropout), e.Nl, spec_.hidden, e.global_row0(), 0,
                     spec_.hidden);
}

void EmbeddingBlock::bwd(const BlockEnv& e, float* dy, const int32_t* tokens) const {
  ops::dropout_apply(dy, e.dropout(-1, kDropEmbedding, spec_.hidden_dropout), e.Nl, spec_.hidden, e.global_row0(), 0,
                     spec_.hidden);
  embedding_parallel_bwd(*e.tp, e.g(wte_), wpe_ >= 0 ? e.g(wpe_) : nullptr, dy, tokens, shape(e), e.gather);
}

}  // namespace gf
