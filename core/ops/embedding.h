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

}  // namespace gf::ops
