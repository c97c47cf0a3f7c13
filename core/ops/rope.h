// Rotary position embedding in Hugging Face's convention (modeling_llama.py: rotate_half): the
// head dimension's first half is rotated against its second half,
//   y[i]        = x[i] cos(p f_i) - x[i + d/2] sin(p f_i)
//   y[i + d/2]  = x[i + d/2] cos(p f_i) + x[i] sin(p f_i),   f_i = theta^(-2i/d), i < d/2,
// for a token at position p. Weights converted from Hugging Face assume exactly this layout.
#pragma once
#include <cstdint>
#include <vector>

namespace gf::ops {

// Partial rotary (Hugging Face's partial_rotary_factor: Phi, GLM, StableLM, GPT-NeoX's rotary_pct):
// only the first rotary_dim = 2 half elements of each head_dim-wide head rotate, in the rotate-half
// layout above with d = rotary_dim; the other head_dim - rotary_dim elements pass through unchanged.

// cos/sin of p f_i for p < max_positions, i < half = rotary_dim / 2 (row p at p * half). For float the
// frequencies and angles are computed in float as Hugging Face's LlamaRotaryEmbedding computes
// them (inv_freq = 1 / theta^(2i/d) and p * inv_freq in float32, then cos/sin of that angle);
// for double everything is double (the finite-difference checks).
template <typename T>
struct RopeTable {
  int64_t max_positions = 0, half = 0;
  std::vector<T> cos, sin;
  // The width of a head, the stride between heads in a row: 2 half when the whole head rotates;
  // 0 (a table built by hand) means 2 half.
  int64_t head_dim = 0;
  int64_t head_stride() const { return head_dim > 0 ? head_dim : 2 * half; }
};

// The inverse frequencies of a RoPE variant (core/ops/rope_scaling.h computes them from Hugging
// Face's rope_scaling): inv_freq[i] for i < rotary_dim / 2, in float32 as HF computes them, and the
// factor HF multiplies cos and sin by (yarn's and longrope's attention_factor; 1 otherwise).
struct RopeFrequencies {
  std::vector<float> inv_freq;
  float attention_scaling = 1.0f;
  int64_t rotary_dim = 0;  // 2 inv_freq.size(): the first rotary_dim elements of a head rotate
};

// The whole head rotates, f_i = theta^(-2i/head_dim): Hugging Face's default RoPE.
template <typename T>
RopeTable<T> make_rope_table(int64_t max_positions, int64_t head_dim, double theta);
// Any variant: angle = float32(p) * inv_freq[i] (one float32 product, as HF's inv_freq @ position),
// cos = cos(angle) * attention_scaling in float32 (HF: `emb.cos() * self.attention_scaling`).
// head_dim >= f.rotary_dim; the rest of each head passes through. For double the same from the
// float32 inv_freq, in double. With f = rope_frequencies(head_dim, theta, RopeScaling{}, ...) the
// table is bitwise the one above (tests/core/rope_scaling_test.cpp checks it).
template <typename T>
RopeTable<T> make_rope_table(int64_t max_positions, int64_t head_dim, const RopeFrequencies& f);

// x, y: `rows` tokens x `heads` heads x head_dim (table.head_stride(); 2 half unless partial rotary),
// row r at position pos0 + r % seq_len (rows hold whole sequences of seq_len tokens). y may be x (in
// place); otherwise the pass-through part of each head is copied. ld: the row stride of x and y (0:
// heads x head_dim), so the q or k part of a packed q|k|v row rotates in place.
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
