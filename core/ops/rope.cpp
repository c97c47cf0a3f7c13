#include "core/ops/rope.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace gf::ops {

template <typename T>
RopeTable<T> make_rope_table(int64_t max_positions, int64_t head_dim, double theta) {
  if (head_dim % 2 != 0) throw std::invalid_argument("RoPE needs an even head dimension");
  RopeTable<T> t;
  t.max_positions = max_positions;
  t.half = head_dim / 2;
  t.head_dim = head_dim;
  t.cos.resize(static_cast<size_t>(max_positions * t.half));
  t.sin.resize(t.cos.size());
  for (int64_t i = 0; i < t.half; ++i) {
    // Hugging Face: inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in float32.
    const T exponent = static_cast<T>(2 * i) / static_cast<T>(head_dim);
    const T inv_freq = T(1) / std::pow(static_cast<T>(theta), exponent);
    for (int64_t p = 0; p < max_positions; ++p) {
      const T angle = static_cast<T>(p) * inv_freq;  // float32 product, as HF's freqs
      t.cos[static_cast<size_t>(p * t.half + i)] = static_cast<T>(std::cos(static_cast<double>(angle)));
      t.sin[static_cast<size_t>(p * t.half + i)] = static_cast<T>(std::sin(static_cast<double>(angle)));
    }
  }
  return t;
}

template <typename T>
RopeTable<T> make_rope_table(int64_t max_positions, int64_t head_dim, const RopeFrequencies& f) {
  const int64_t half = static_cast<int64_t>(f.inv_freq.size());
  if (f.rotary_dim != 2 * half || half == 0)
    throw std::invalid_argument("RoPE: rotary_dim " + std::to_string(f.rotary_dim) + " is not 2 x the " +
                                std::to_string(half) + " inverse frequencies");
  if (head_dim < f.rotary_dim)
    throw std::invalid_argument("RoPE: rotary_dim " + std::to_string(f.rotary_dim) + " exceeds head_dim " +
                                std::to_string(head_dim));
  RopeTable<T> t;
  t.max_positions = max_positions;
  t.half = half;
  t.head_dim = head_dim;
  t.cos.resize(static_cast<size_t>(max_positions * half));
  t.sin.resize(t.cos.size());
  const T scaling = static_cast<T>(f.attention_scaling);
  for (int64_t i = 0; i < half; ++i) {
    const T inv_freq = static_cast<T>(f.inv_freq[static_cast<size_t>(i)]);
    for (int64_t p = 0; p < max_positions; ++p) {
      const T angle = static_cast<T>(p) * inv_freq;  // float32 product, as HF's inv_freq @ position_ids
      // HF: cos = emb.cos() * attention_scaling, each step rounded to float32 (x * 1 is exact).
      t.cos[static_cast<size_t>(p * half + i)] = static_cast<T>(std::cos(static_cast<double>(angle))) * scaling;
      t.sin[static_cast<size_t>(p * half + i)] = static_cast<T>(std::sin(static_cast<double>(angle))) * scaling;
    }
  }
  return t;
}

namespace {

// y = R(sign * angle) x per head: sign +1 forward, -1 the transpose.
template <typename T>
void rotate(T* y, const T* x, const RopeTable<T>& table, int64_t rows, int64_t seq_len, int64_t heads, int64_t pos0,
            T sign, int64_t ld, const int32_t* positions = nullptr) {
  // dim: the head's width (the stride between heads); the first 2 half elements rotate, the rest pass.
  const int64_t half = table.half, dim = table.head_stride(), rot = 2 * half;
  if (dim < rot) throw std::invalid_argument("RoPE: head_dim " + std::to_string(dim) + " < rotary_dim " +
                                             std::to_string(rot));
  if (ld == 0) ld = heads * dim;
  if (positions) {
    for (int64_t r = 0; r < rows; ++r)
      if (positions[r] < 0 || positions[r] >= table.max_positions)
        throw std::out_of_range("RoPE: position " + std::to_string(positions[r]) + " outside the table (max_positions " +
                                std::to_string(table.max_positions) + ")");
  } else if (pos0 + seq_len > table.max_positions) {
    throw std::out_of_range("RoPE: position past the table (max_positions " + std::to_string(table.max_positions) + ")");
  }
#pragma omp parallel for schedule(static) if (parallel_worth(rows * heads * dim))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = positions ? positions[r] : pos0 + r % seq_len;
    const T* c = table.cos.data() + p * half;
    const T* s = table.sin.data() + p * half;
    for (int64_t h = 0; h < heads; ++h) {
      const T* xh = x + r * ld + h * dim;
      T* yh = y + r * ld + h * dim;
      for (int64_t i = 0; i < half; ++i) {
        const T a = xh[i], b = xh[i + half], si = sign * s[i];
        yh[i] = a * c[i] - b * si;
        yh[i + half] = b * c[i] + a * si;
      }
      if (yh != xh)
        for (int64_t i = rot; i < dim; ++i) yh[i] = xh[i];  // partial rotary: the rest passes through
    }
  }
}

}  // namespace

template <typename T>
void rope_fwd(T* y, const T* x, const RopeTable<T>& table, int64_t rows, int64_t seq_len, int64_t heads, int64_t pos0,
              int64_t ld) {
  GF_OP_SPAN("elementwise", "rope fwd");
  rotate(y, x, table, rows, seq_len, heads, pos0, T(1), ld);
}

template <typename T>
void rope_bwd(T* dx, const T* dy, const RopeTable<T>& table, int64_t rows, int64_t seq_len, int64_t heads,
              int64_t pos0, int64_t ld) {
  GF_OP_SPAN("elementwise", "rope bwd");
  rotate(dx, dy, table, rows, seq_len, heads, pos0, T(-1), ld);
}

template <typename T>
void rope_fwd_at(T* y, const T* x, const RopeTable<T>& table, int64_t rows, int64_t heads, const int32_t* positions,
                 int64_t ld) {
  rotate(y, x, table, rows, 1, heads, 0, T(1), ld, positions);
}

template <typename T>
void rope_bwd_at(T* dx, const T* dy, const RopeTable<T>& table, int64_t rows, int64_t heads, const int32_t* positions,
                 int64_t ld) {
  rotate(dx, dy, table, rows, 1, heads, 0, T(-1), ld, positions);
}

#define GF_INSTANTIATE(T)                                                                                     \
  template RopeTable<T> make_rope_table<T>(int64_t, int64_t, double);                                         \
  template RopeTable<T> make_rope_table<T>(int64_t, int64_t, const RopeFrequencies&);                         \
  template void rope_fwd<T>(T*, const T*, const RopeTable<T>&, int64_t, int64_t, int64_t, int64_t, int64_t);  \
  template void rope_bwd<T>(T*, const T*, const RopeTable<T>&, int64_t, int64_t, int64_t, int64_t, int64_t);  \
  template void rope_fwd_at<T>(T*, const T*, const RopeTable<T>&, int64_t, int64_t, const int32_t*, int64_t); \
  template void rope_bwd_at<T>(T*, const T*, const RopeTable<T>&, int64_t, int64_t, const int32_t*, int64_t);
GF_INSTANTIATE(float)
GF_INSTANTIATE(double)
#undef GF_INSTANTIATE

}  // namespace gf::ops
