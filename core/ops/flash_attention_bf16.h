// The fused attention core's bf16 parts (FlashWorkspace::bf16_products), for core/ops/flash_attention.cpp,
// its only includer: the head-major bf16 operand copies, each working thread's bf16 tiles and dense
// gradients, and where their scratch lives; with the alignment helpers the kernels share.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/math/gemm_bf16.h"
#include "core/math/parallel_worth.h"
#include "core/math/scratch.h"
#include "core/ops/flash_attention.h"
#include "core/trace/trace.h"

namespace gf::ops {
// Internal linkage, as core/ops/attention_rows.h: the one including file compiles (and inlines) its own copies.
namespace {

constexpr int64_t kAlign = 16;  // elements: 64 bytes of float, 128 of double

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

template <typename S>
S* align_up(S* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<S*>((a + 63) / 64 * 64);
}

// Under bf16 products: this head's q, k, v (and, in backward, its dy) as bf16, head-major ([T][D] each,
// made once per call by to_head_major), and this thread's bf16 copies of a P and a dS tile. The tile
// products then read dense bf16 operands: each element of q, k, v and dy is rounded once per call, where
// gemm_bf16's float entry rounded it again for every tile product that read it (a key tile once per
// query tile, four times in the backward). The same roundings (float_to_bf16) of the same values, the
// same dense layouts and the same primitives: the same products, bit for bit.
//
// In backward the tile products also accumulate into dense fp32 gradients, dq of this query head and dk, dv
// of its key/value head ([T][D] each, the working thread's gf::scratch<float> slot 3), which the caller
// adds into dqkv's strided columns once per head (dq) and once per key/value group (dk, dv). A strided C
// made gemm_bf16 write each product to a dense buffer and add it to C in a pass of its own (add_product),
// once per tile product. The sums are the same: each element still starts from zero and adds the same
// products in the same order, and dqkv (zero, as the layers pass it) + that sum is the sum.
struct HeadBf16 {
  const bf16 *q = nullptr, *k = nullptr, *v = nullptr, *dy = nullptr;
  bf16 *p = nullptr, *ds = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;  // backward only
  // y kept in bf16 alone (the layers' fused core under bf16 compute): this head's columns, row stride H D; the
  // forward writes y_out rounded, the backward reads y_in for rowsum(dY * Y). Null: y in S.
  bf16* y_out = nullptr;
  const bf16* y_in = nullptr;
  bool on() const { return q != nullptr; }
};

// dst (rows of n values, row stride ld) += src (dense).
inline void add_rows(float* dst, int64_t ld, const float* src, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) dst[r * ld + j] += src[r * n + j];
}

// One score row rounded to bf16 (the rounding convert_to_bf16 applies), while the row is still in cache.
inline void row_to_bf16(bf16* dst, const float* src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = float_to_bf16(src[j]);
}

// An operand element as bf16: an fp32 one rounded (float_to_bf16), a bf16 one (the layers' kept q|k|v) as it is.
inline bf16 as_bf16(float x) { return float_to_bf16(x); }
inline bf16 as_bf16(bf16 x) { return x; }

// dst [B][heads][T][D] = bf16 of src, B * T rows of heads * D values (row stride ld): from fp32 operands a
// rounding, from bf16 ones a permutation of the same values.
template <typename Src>
void to_head_major(bf16* dst, const Src* src, int64_t B, int64_t T, int64_t heads, int64_t D, int64_t ld) {
  GF_OP_SPAN("convert", "attention operands to head-major bf16");
#pragma omp parallel for schedule(static) if (parallel_worth(B * T * heads * D))
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < heads; ++h) {
      const Src* from = src + bt * ld + h * D;
      bf16* to = dst + ((b * heads + h) * T + t) * D;
      for (int64_t i = 0; i < D; ++i) to[i] = as_bf16(from[i]);
    }
  }
}

// Head (b, h)'s view of the head-major copies (qkvh: q, k, v heads; dyh: the query heads' dy, or null)
// and this thread's tile buffers.
HeadBf16 head_bf16(const bf16* qkvh, const bf16* dyh, const AttentionShape& s, int64_t b, int64_t h, bf16* p_tile,
                   bf16* ds_tile) {
  HeadBf16 hb;
  if (!qkvh) return hb;
  const int64_t T = s.seq, D = s.head_dim, H = s.heads, KV = s.kv(), all = H + 2 * KV, g = h / (H / KV);
  hb.q = qkvh + (b * all + h) * T * D;
  hb.k = qkvh + (b * all + H + g) * T * D;
  hb.v = qkvh + (b * all + H + KV + g) * T * D;
  if (dyh) hb.dy = dyh + (b * H + h) * T * D;
  hb.p = p_tile;
  hb.ds = ds_tile;
  return hb;
}

// Where the bf16 products' scratch lives (HeadBf16): in FlashWorkspace::bf16_scratch when the caller
// planned enough of it (flash_bf16_scratch_floats), else in gf::scratch. Sizes in floats, each part
// rounded up to 64 bytes.
struct Bf16Scratch {
  int64_t qkv = 0, dy = 0, tile = 0, dense = 0;  // head-major q|k|v, dy; one bf16 tile; dq|dk|dv
  float* planned = nullptr;

  Bf16Scratch(const AttentionShape& s, FlashTiles t) {
    const int64_t T = s.seq, D = s.head_dim, H = s.heads, all = H + 2 * s.kv();
    qkv = round_up((s.batch * T * all * D + 1) / 2, kAlign);
    dy = round_up((s.batch * T * H * D + 1) / 2, kAlign);
    tile = round_up((t.rows * t.cols + 1) / 2, kAlign);
    dense = round_up(3 * T * D, kAlign);
  }
  int64_t per_thread() const { return 2 * tile + dense; }
  int64_t total(int threads) const { return qkv + dy + threads * per_thread(); }
  // Takes the planned area when it holds `threads` threads' parts (+ room to align its start).
  template <typename S>
  void use(const FlashWorkspace<S>& ws, int threads) {
    if (ws.bf16_scratch && ws.bf16_scratch_floats >= total(threads) + kAlign) planned = align_up(ws.bf16_scratch);
  }
  bf16* qkv_copy() const { return planned ? reinterpret_cast<bf16*>(planned) : scratch<bf16>(static_cast<size_t>(2 * qkv), 0); }
  bf16* dy_copy() const { return planned ? reinterpret_cast<bf16*>(planned + qkv) : scratch<bf16>(static_cast<size_t>(2 * dy), 1); }
  // The calling thread's parts (inside the team).
  float* mine() const { return planned + qkv + dy + static_cast<int64_t>(omp_get_thread_num()) * per_thread(); }
  bf16* p_tile() const { return planned ? reinterpret_cast<bf16*>(mine()) : scratch<bf16>(static_cast<size_t>(2 * tile), 2); }
  bf16* ds_tile() const { return planned ? reinterpret_cast<bf16*>(mine() + tile) : scratch<bf16>(static_cast<size_t>(2 * tile), 3); }
  float* dense_grads() const { return planned ? mine() + 2 * tile : scratch<float>(static_cast<size_t>(dense), 3); }
  // The call's q, k, v rounded (or, given in bf16, copied) into the head-major bf16 copy (HeadBf16).
  template <typename Q>
  const bf16* round_qkv(const Q* qkv, const AttentionShape& s) const {
    const int64_t all = s.heads + 2 * s.kv();
    bf16* h = qkv_copy();
    to_head_major(h, qkv, s.batch, s.seq, all, s.head_dim, all * s.head_dim);
    return h;
  }
};

}  // namespace
}  // namespace gf::ops
