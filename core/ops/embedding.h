// Token + learned position embedding: y[b, t] = wte[tok[b, t]] + wpe[t].
#pragma once
#include <cstdint>

namespace gf::ops {

template <typename T>
void embedding_fwd(T* y, const int32_t* tokens, const T* wte, const T* wpe,
                   int64_t batch, int64_t seq, int64_t dim);

// Accumulates into dwte (rows of the looked-up tokens) and dwpe. Deterministic: the columns are
// split across threads and every thread walks the tokens in order.
template <typename T>
void embedding_bwd(T* dwte, T* dwpe, const T* dy, const int32_t* tokens,
                   int64_t batch, int64_t seq, int64_t dim);

// The two halves of embedding_fwd/bwd for split layouts. y[i] = wte[tok[i] - vocab_begin] when
// vocab_begin <= tok[i] < vocab_end (wte holds those rows), else 0.
template <typename T>
void embedding_lookup_fwd(T* y, const int32_t* tokens, const T* wte, int64_t rows, int64_t dim,
                          int64_t vocab_begin, int64_t vocab_end);
// As embedding_lookup_fwd, but only the rows whose token is in [vocab_begin, vocab_end) are written
// (the others are left as they are): the lookup done one vocabulary chunk at a time (ZeRO-3).
template <typename T>
void embedding_lookup_rows(T* y, const int32_t* tokens, const T* wte, int64_t rows, int64_t dim,
                           int64_t vocab_begin, int64_t vocab_end);
// y[i] += wpe[(row0 + i) % seq], or wpe[positions[row0 + i]] when positions is given (packed
// documents with reset position ids).
template <typename T>
void position_add_fwd(T* y, const T* wpe, int64_t rows, int64_t row0, int64_t seq, int64_t dim,
                      const int32_t* positions = nullptr);
// Accumulate into dwte (rows of tokens in [vocab_begin, vocab_end)) / dwpe; deterministic.
template <typename T>
void embedding_lookup_bwd(T* dwte, const T* dy, const int32_t* tokens, int64_t rows, int64_t dim,
                          int64_t vocab_begin, int64_t vocab_end);
template <typename T>
void position_bwd(T* dwpe, const T* dy, int64_t rows, int64_t row0, int64_t seq, int64_t dim,
                  const int32_t* positions = nullptr);

}  // namespace gf::ops
