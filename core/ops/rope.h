// Rotary position embedding in Hugging Face's convention (modeling_llama.py: rotate_half): the
// head dimension's first half is rotated against its second half,
//   y[i]        = x[i] cos(p f_i) - x[i + d/2] sin(p f_i)
//   y[i + d/2]  = x[i + d/2] cos(p f_i) + x[i] sin(p f_i),   f_i = theta^(-2i/d), i < d/2,
// for a token at position p. Weights converted from Hugging Face assume exactly this layout.
#pragma once
#include <cstdint>
#include <vector>

namespace gf::ops {

// cos/sin of p f_i for p < max_positions, i < head_dim / 2 (row p at p * half). For float the
// frequencies and angles are computed in float as Hugging Face's LlamaRotaryEmbedding computes
// them (inv_freq = 1 / theta^(2i/d) and p * inv_freq in float32, then cos/sin of that angle);
// for double everything is double (the finite-difference checks).
template <typename T>
struct RopeTable {
  int64_t max_positions = 0, half = 0;
  std::vector<T> cos, sin;
};
template <typename T>
RopeTable<T> make_rope_table(int64_t max_positions, int64_t head_dim, double theta);

// x, y: `rows` tokens x `heads` heads x head_dim (= 2 half), row r at position pos0 + r % seq_len
// (rows hold whole sequences of seq_len tokens). y may be x (in place). ld: the row stride of x and
// y (0: heads x head_dim), so the q or k part of a packed q|k|v row rotates in place.
template <typename T>
void rope_fwd(T* y, const T* x, const RopeTable<T>& table, int64_t rows, int64_t seq_len, int64_t heads,
              int64_t pos0 = 0, int64_t ld = 0);
// The transpose rotation: dx = R^T dy (writes dx; dx may be dy).
template <typename T>
void rope_bwd(T* dx, const T* dy, const RopeTable<T>& table, int64_t rows, int64_t seq_len, int64_t heads,
              int64_t pos0 = 0, int64_t ld = 0);
// The same with row r at position positions[r] (documents packed with reset position ids).
template <typename T>
void rope_fwd_at(T* y, const T* x, const RopeTable<T>& table, int64_t rows, int64_t heads, const int32_t* positions,
                 int64_t ld = 0);
template <typename T>
void rope_bwd_at(T* dx, const T* dy, const RopeTable<T>& table, int64_t rows, int64_t heads, const int32_t* positions,
                 int64_t ld = 0);

}  // namespace gf::ops
