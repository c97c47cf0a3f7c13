#include "models/blocks/embedding.h"

#include "core/math/parallel_worth.h"

#include <stdexcept>
#include <string>

namespace gf {

void EmbeddingBlock::declare(ParamTable& t, const NameMap& names) const {
  if (spec_.embed_scale != 0.0f && spec_.positions > 0)
    throw std::logic_error("embedding: a scale (TransformerSpec::embed_scale) with learned positions is not built");
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

void EmbeddingBlock::bind_saved(const Placement& adapters, const NameMap& names) {
  if (const TensorPlacement* t = adapters.find(names(Role::kEmbed, -1))) {
    wte_ = t->offset;
    saved_ = true;
  }
}

void EmbeddingBlock::scale_rows(float* y, int64_t rows) const {
  if (spec_.embed_scale == 0.0f) return;
  const float k = spec_.embed_scale;
  const int64_t n = rows * spec_.hidden;
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) y[i] *= k;
}

void EmbeddingBlock::fwd(const BlockEnv& e, float* y, const int32_t* tokens, const VocabChunks* chunks) const {
  embedding_parallel_fwd(*e.tp, y, tokens, token_weight(e), wpe_ >= 0 ? e.w(wpe_) : nullptr, shape(e), e.partial, chunks);
  scale_rows(y, e.Nl);
  e.dropout_rows(y, e.dropout(-1, kDropEmbedding, spec_.hidden_dropout), spec_.hidden);
}

void EmbeddingBlock::fwd_at(const BlockEnv& e, float* y, const int32_t* tokens, const int64_t* pos) const {
  const int64_t C = spec_.hidden;
  // The token rows (summed over a vocabulary-parallel group, where one rank holds each row), then
  // each row's learned position: the same sum as embedding_parallel_fwd's for a training row.
  embedding_parallel_fwd(*e.tp, y, tokens, token_weight(e), nullptr, {e.N, e.N, C, v_.begin, v_.begin + v_.local, v_.parallel},
                         e.partial);
  scale_rows(y, e.N);
  if (wpe_ < 0) return;
  for (int64_t r = 0; r < e.N; ++r)
    if (pos[r] < 0 || pos[r] >= spec_.positions)
      throw std::out_of_range("generation: position " + std::to_string(pos[r]) + " outside the model's " +
                              std::to_string(spec_.positions) + " learned positions (max_position_embeddings)");
  const float* wpe = e.w(wpe_);
#pragma omp parallel for schedule(static) if (parallel_worth(e.N * C))
  for (int64_t r = 0; r < e.N; ++r)
    for (int64_t c = 0; c < C; ++c) y[r * C + c] += wpe[pos[r] * C + c];
}

void EmbeddingBlock::bwd(const BlockEnv& e, float* dy, const int32_t* tokens) const {
  // LoRA: the embedding is frozen and nothing comes before it, unless modules_to_save trains its copy.
  if (token_grad(e) == nullptr) return;
  e.dropout_rows(dy, e.dropout(-1, kDropEmbedding, spec_.hidden_dropout), spec_.hidden);
  scale_rows(dy, e.Nl);
  embedding_parallel_bwd(*e.tp, token_grad(e), wpe_ >= 0 ? e.g(wpe_) : nullptr, dy, tokens, shape(e), e.gather);
}

void EmbeddingBlock::bwd_rows(const BlockEnv& e, float* dy, const int32_t* tokens,
                              const std::function<void(const int32_t*, const float*, int64_t)>& rows) const {
  if (e.frozen()) return;  // (a frozen embedding's saved copy is never cut into a tied head's chunks)
  e.dropout_rows(dy, e.dropout(-1, kDropEmbedding, spec_.hidden_dropout), spec_.hidden);
  scale_rows(dy, e.Nl);
  embedding_parallel_bwd_rows(*e.tp, wpe_ >= 0 ? e.g(wpe_) : nullptr, dy, tokens, shape(e), e.gather, rows);
}

}  // namespace gf
