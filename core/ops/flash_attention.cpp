#include "core/ops/flash_attention.h"
#include "core/trace/trace.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/math/gemm.h"
#include "core/math/gemm_bf16.h"
#include "core/math/parallel_worth.h"
#include "core/math/scratch.h"
#include "core/ops/attention_rows.h"

namespace gf::ops {
namespace {

constexpr int64_t kAlign = 16;  // elements: 64 bytes of float, 128 of double

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Row stride of a score tile: a multiple of 64 bytes, so every tile row starts aligned and the
// vectorised exp below splits each row into packets the same way whichever thread runs it.
int64_t tile_ld(FlashTiles t) { return round_up(t.cols, kAlign); }

// The elements of a workspace slice that the kernels use (see fwd_query_tile, bwd_head).
int64_t used_per_thread(const AttentionShape& s, FlashTiles t) {
  const int64_t br = t.rows, ld = tile_ld(t);
  const int64_t fwd = round_up(br * ld, kAlign) + round_up(br * s.head_dim, kAlign) + 2 * round_up(br, kAlign);
  const int64_t bwd = 2 * round_up(br * ld, kAlign) + round_up(br, kAlign);
  return std::max(fwd, bwd) + ld;  // + one row of dropout scales
}

template <typename S>
S* align_up(S* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<S*>((a + 63) / 64 * 64);
}

// This thread's slice of the workspace, 64-byte aligned.
template <typename S>
S* thread_slice(const FlashWorkspace<S>& ws, int64_t per) {
  S* base = ws.data ? ws.data + static_cast<int64_t>(omp_get_thread_num()) * per : scratch<S>(static_cast<size_t>(per), 1);
  return align_up(base);
}

// The OpenMP threads, at most as many as the planned workspace has slices.
template <typename S>
int team_size(const FlashWorkspace<S>& ws) {
  return ws.data ? std::clamp(omp_get_max_threads(), 1, std::max(1, ws.threads)) : omp_get_max_threads();
}

uint64_t drop_base(const AttentionShape& s, int64_t b, int64_t h) {
  const int64_t hg = s.heads_global > 0 ? s.heads_global : s.heads;
  return static_cast<uint64_t>(((s.batch_offset + b) * hg + s.head_offset + h) * s.seq * s.seq);
}

using rows::dropout_scales;
using rows::exp_shifted;
using rows::lane_max;
using rows::lane_sum;

// One (batch, head): pointers into the packed qkv (a row: the H query heads, then the kv key heads,
// then the kv value heads; row stride (H + 2 kv) D) and into y / dy (row stride C). Query head h reads
// key/value head h / (H / kv) (grouped-query attention; kv = H: its own).
template <typename P>
struct HeadView {
  P q, k, v;
  int64_t ld;
  HeadView(P qkv, const AttentionShape& s, int64_t b, int64_t h)
      : q(qkv ? qkv + b * s.seq * (s.heads + 2 * s.kv()) * s.head_dim + h * s.head_dim : nullptr),
        k(qkv ? q - h * s.head_dim + (s.heads + h / (s.heads / s.kv())) * s.head_dim : nullptr),
        v(qkv ? k + s.kv() * s.head_dim : nullptr),
        ld((s.heads + 2 * s.kv()) * s.head_dim) {}  // null qkv (q|k|v given in bf16): the head-major copy only
};

// Keys visible to query row i in the key tile starting at j0 (causal: keys 0..i), clamped to [0, bc].
int64_t visible(int64_t i, int64_t j0, int64_t bc) { return std::clamp<int64_t>(i - j0 + 1, 0, bc); }

// Packed documents (AttentionShape::key_lo; lo points at the query tile's first row, null without):
// the columns of the key tile at j0 before row r's first visible key, clamped to [0, n].
int64_t hidden_before(const int32_t* lo, int64_t r, int64_t j0, int64_t n) {
  return lo ? std::clamp<int64_t>(lo[r] - j0, 0, n) : 0;
}

// The first key tile a query tile of br rows needs: the one holding its rows' smallest first
// visible key (tiles wholly in earlier documents are skipped); 0 without key_lo.
int64_t first_key_tile(const int32_t* lo, int64_t br, int64_t cols) {
  if (!lo) return 0;
  const int64_t least = *std::min_element(lo, lo + br);
  return least / cols * cols;
}

template <typename S>
struct Ctx {
  const AttentionShape& s;
  const DropoutKey& drop;
  FlashTiles t;
  int64_t ld;  // score tile row stride
  S scale;
  bool bf16 = false;  // FlashWorkspace::bf16_products

  // A tile product in S (under bf16 products the kernels call gemm_bf16 on HeadBf16's operands instead).
  void product(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, S alpha, const S* A, int64_t lda, const S* B,
               int64_t ldb, S beta, S* C, int64_t ldc) const {
    gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
};

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

// dst [B][heads][T][D] = bf16 of src, B * T rows of heads * D values (row stride ld).
void to_head_major(bf16* dst, const float* src, int64_t B, int64_t T, int64_t heads, int64_t D, int64_t ld) {
  GF_OP_SPAN("convert", "attention operands to bf16");
#pragma omp parallel for schedule(static) if (parallel_worth(B * T * heads * D))
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < heads; ++h) {
      const float* from = src + bt * ld + h * D;
      bf16* to = dst + ((b * heads + h) * T + t) * D;
      for (int64_t i = 0; i < D; ++i) to[i] = float_to_bf16(from[i]);
    }
  }
}

// The same from q|k|v kept in bf16 (the layers' kept copy): a permutation of the same bf16 values.
void to_head_major(bf16* dst, const bf16* src, int64_t B, int64_t T, int64_t heads, int64_t D, int64_t ld) {
  GF_OP_SPAN("convert", "attention operands to head-major");
#pragma omp parallel for schedule(static) if (parallel_worth(B * T * heads * D))
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(src + bt * ld + h * D, D, dst + ((b * heads + h) * T + t) * D);
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

// Forward of query rows [i0, i0 + br) of one head: online softmax over the key tiles up to the
// diagonal. yh: this head's y (row stride C); lseh: this head's lse row.
template <typename S>
void fwd_query_tile(S* yh, S* lseh, const HeadView<const S*>& hv, int64_t i0, int64_t br, uint64_t base,
                    const int32_t* lo, const Ctx<S>& c, S* w, const HeadBf16& hb) {
  const int64_t D = c.s.head_dim, T = c.s.seq, C = c.s.heads * D, Br = c.t.rows;
  S* st = w;
  S* o = st + round_up(Br * c.ld, kAlign);
  S* m = o + round_up(Br * D, kAlign);
  S* l = m + round_up(Br, kAlign);
  S* mk = l + round_up(Br, kAlign);
  std::fill(o, o + br * D, S(0));
  std::fill(m, m + br, -std::numeric_limits<S>::infinity());
  std::fill(l, l + br, S(0));
  const int64_t i_last = i0 + br - 1;
  for (int64_t j0 = first_key_tile(lo, br, c.t.cols); j0 <= i_last; j0 += c.t.cols) {
    const int64_t bc = std::min(c.t.cols, i_last - j0 + 1);
    if constexpr (std::is_same_v<S, float>)
      if (hb.on()) gemm_bf16(Trans::kNo, Trans::kYes, br, bc, D, c.scale, hb.q + i0 * D, D, hb.k + j0 * D, D, 0.0f, st, c.ld);
    if (!hb.on())
      c.product(Trans::kNo, Trans::kYes, br, bc, D, c.scale, hv.q + i0 * hv.ld, hv.ld, hv.k + j0 * hv.ld, hv.ld, S(0), st, c.ld);
    for (int64_t r = 0; r < br; ++r) {
      S* row = st + r * c.ld;
      const int64_t n = visible(i0 + r, j0, bc);
      const int64_t a = hidden_before(lo, r, j0, n);  // keys [j0, j0 + a) are another document's
      std::fill(row + n, row + bc, S(0));
      std::fill(row, row + a, S(0));
      if (n == a) {
        if constexpr (std::is_same_v<S, float>)
          if (hb.on()) row_to_bf16(hb.p + r * bc, row, bc);
        continue;
      }
      S* vis = row + a;
      const S mx = lane_max(vis, n - a, m[r]);
      const S alpha = std::exp(m[r] - mx);  // 0 on the first tile (m = -inf)
      exp_shifted(vis, n - a, mx);
      l[r] = l[r] * alpha + lane_sum(vis, n - a);
      m[r] = mx;
      if (alpha != S(1))
        for (int64_t d = 0; d < D; ++d) o[r * D + d] *= alpha;
      if (c.drop.active()) {
        dropout_scales(mk, c.drop, base + static_cast<uint64_t>((i0 + r) * T + j0 + a), n - a);
        for (int64_t j = 0; j < n - a; ++j) vis[j] *= mk[j];
      }
      if constexpr (std::is_same_v<S, float>)
        if (hb.on()) row_to_bf16(hb.p + r * bc, row, bc);
    }
    if constexpr (std::is_same_v<S, float>)
      if (hb.on()) {
        gemm_bf16(Trans::kNo, Trans::kNo, br, D, bc, 1.0f, hb.p, bc, hb.v + j0 * D, D, 1.0f, o, D);
      }
    if (!hb.on()) c.product(Trans::kNo, Trans::kNo, br, D, bc, S(1), st, c.ld, hv.v + j0 * hv.ld, hv.ld, S(1), o, D);
  }
  for (int64_t r = 0; r < br; ++r) {
    const S inv = S(1) / l[r];
    if constexpr (std::is_same_v<S, float>)
      if (hb.y_out) {
        for (int64_t d = 0; d < D; ++d) hb.y_out[(i0 + r) * C + d] = float_to_bf16(o[r * D + d] * inv);
        lseh[i0 + r] = m[r] + std::log(l[r]);
        continue;
      }
    for (int64_t d = 0; d < D; ++d) yh[(i0 + r) * C + d] = o[r * D + d] * inv;
    lseh[i0 + r] = m[r] + std::log(l[r]);
  }
}

// Row r of a tile (bwd_tile_softmax below): pr and dr are that row of p and ds.
template <typename S>
void bwd_row_softmax(S* pr, S* dr, S* mk, const S* lse, const S* di, int64_t i0, int64_t r, int64_t j0, int64_t bc,
                     uint64_t base, const int32_t* lo, const Ctx<S>& c) {
  const int64_t n = visible(i0 + r, j0, bc);
  const int64_t a = hidden_before(lo, r, j0, n);
  std::fill(pr + n, pr + bc, S(0));
  std::fill(dr + n, dr + bc, S(0));
  std::fill(pr, pr + a, S(0));
  std::fill(dr, dr + a, S(0));
  if (n == a) return;
  pr += a;
  dr += a;
  const int64_t m = n - a;
  exp_shifted(pr, m, lse[i0 + r]);
  const S d = di[r];
  if (c.drop.active()) {
    dropout_scales(mk, c.drop, base + static_cast<uint64_t>((i0 + r) * c.s.seq + j0 + a), m);
    for (int64_t j = 0; j < m; ++j) {
      dr[j] = pr[j] * (dr[j] * mk[j] - d) * c.scale;
      pr[j] *= mk[j];
    }
  } else {
    for (int64_t j = 0; j < m; ++j) dr[j] = pr[j] * (dr[j] - d) * c.scale;
  }
}

// dS = P * (dP' - Di) * scale and P' = P * mask for one tile, where P = exp(S - lse) is
// recomputed from the scores in p, dP' = (dY V^T) * mask arrives in ds, Di = rowsum(dY * Y).
// Under bf16 products (hb.on()) each finished row of P' and dS is also rounded into hb.p and hb.ds
// (dense, row stride bc).
template <typename S>
void bwd_tile_softmax(S* p, S* ds, S* mk, const S* lse, const S* di, int64_t i0, int64_t br, int64_t j0, int64_t bc,
                      uint64_t base, const int32_t* lo, const Ctx<S>& c, const HeadBf16& hb) {
  for (int64_t r = 0; r < br; ++r) {
    bwd_row_softmax(p + r * c.ld, ds + r * c.ld, mk, lse, di, i0, r, j0, bc, base, lo, c);
    if constexpr (std::is_same_v<S, float>)
      if (hb.on()) {
        row_to_bf16(hb.p + r * bc, p + r * c.ld, bc);
        row_to_bf16(hb.ds + r * bc, ds + r * c.ld, bc);
      }
  }
}

// Backward of one (batch, head), FlashAttention-2 style, query tiles outer and key tiles inner.
template <typename S>
void bwd_head(const HeadView<S*>& dh, const HeadView<const S*>& hv, const S* dyh, const S* yh, const S* lseh,
              uint64_t base, const int32_t* key_lo, const Ctx<S>& c, S* w, const HeadBf16& hb) {
  const int64_t D = c.s.head_dim, T = c.s.seq, C = c.s.heads * D, Br = c.t.rows;
  S* p = w;
  S* ds = p + round_up(Br * c.ld, kAlign);
  S* di = ds + round_up(Br * c.ld, kAlign);
  S* mk = di + round_up(Br, kAlign);
  for (int64_t i0 = 0; i0 < T; i0 += Br) {
    const int64_t br = std::min(Br, T - i0), i_last = i0 + br - 1;
    for (int64_t r = 0; r < br; ++r) {
      S acc = 0;
      if constexpr (std::is_same_v<S, float>)
        if (hb.y_in) {
          for (int64_t d = 0; d < D; ++d) acc += dyh[(i0 + r) * C + d] * bf16_to_float(hb.y_in[(i0 + r) * C + d]);
          di[r] = acc;
          continue;
        }
      for (int64_t d = 0; d < D; ++d) acc += dyh[(i0 + r) * C + d] * yh[(i0 + r) * C + d];
      di[r] = acc;
    }
    const S* qi = hv.q + i0 * hv.ld;
    const S* dyi = dyh + i0 * C;
    const int32_t* lo = key_lo ? key_lo + i0 : nullptr;
    for (int64_t j0 = first_key_tile(lo, br, c.t.cols); j0 <= i_last; j0 += c.t.cols) {
      const int64_t bc = std::min(c.t.cols, i_last - j0 + 1);
      const S* kj = hv.k + j0 * hv.ld;
      if constexpr (std::is_same_v<S, float>)
        if (hb.on()) {
          const bf16 *qb = hb.q + i0 * D, *kb = hb.k + j0 * D, *vb = hb.v + j0 * D, *dyb = hb.dy + i0 * D;
          gemm_bf16(Trans::kNo, Trans::kYes, br, bc, D, c.scale, qb, D, kb, D, 0.0f, p, c.ld);
          gemm_bf16(Trans::kNo, Trans::kYes, br, bc, D, 1.0f, dyb, D, vb, D, 0.0f, ds, c.ld);
          // P' and dS rounded once each, row by row (dS feeds two products)
          bwd_tile_softmax(p, ds, mk, lseh, di, i0, br, j0, bc, base, lo, c, hb);
          gemm_bf16(Trans::kYes, Trans::kNo, bc, D, br, 1.0f, hb.p, bc, dyb, D, 1.0f, hb.dv + j0 * D, D);
          gemm_bf16(Trans::kNo, Trans::kNo, br, D, bc, 1.0f, hb.ds, bc, kb, D, 1.0f, hb.dq + i0 * D, D);
          gemm_bf16(Trans::kYes, Trans::kNo, bc, D, br, 1.0f, hb.ds, bc, qb, D, 1.0f, hb.dk + j0 * D, D);
          continue;
        }
      c.product(Trans::kNo, Trans::kYes, br, bc, D, c.scale, qi, hv.ld, kj, hv.ld, S(0), p, c.ld);
      c.product(Trans::kNo, Trans::kYes, br, bc, D, S(1), dyi, C, hv.v + j0 * hv.ld, hv.ld, S(0), ds, c.ld);
      bwd_tile_softmax(p, ds, mk, lseh, di, i0, br, j0, bc, base, lo, c, HeadBf16{});
      // dV_j += P'^T dY_i ; dQ_i += dS K_j ; dK_j += dS^T Q_i
      c.product(Trans::kYes, Trans::kNo, bc, D, br, S(1), p, c.ld, dyi, C, S(1), dh.v + j0 * dh.ld, dh.ld);
      c.product(Trans::kNo, Trans::kNo, br, D, bc, S(1), ds, c.ld, kj, hv.ld, S(1), dh.q + i0 * dh.ld, dh.ld);
      c.product(Trans::kYes, Trans::kNo, bc, D, br, S(1), ds, c.ld, qi, hv.ld, S(1), dh.k + j0 * dh.ld, dh.ld);
    }
  }
}

template <typename S>
Ctx<S> make_ctx(const AttentionShape& s, const DropoutKey& drop, const FlashWorkspace<S>& ws) {
  const FlashTiles t = ws.tiles;
  if (t.rows < 1 || t.cols < 1) throw std::invalid_argument("flash attention: tiles must be at least 1 x 1");
  return {s, drop, t, tile_ld(t), S(1) / std::sqrt(static_cast<S>(s.head_dim)), ws.bf16_products};
}

// Kept out of make_ctx and never inlined: with the check inside it, GCC generated the kernels
// differently (other FMA contractions; bf16 training curves moved in their 19th step).
[[gnu::noinline]] void refuse_grouped_query(const AttentionShape& s) {
  if (s.kv() < 1 || s.heads % s.kv() != 0)
    throw std::invalid_argument("flash attention: " + std::to_string(s.heads) + " query heads do not share " +
                                std::to_string(s.kv()) + " key/value heads evenly");
}

}  // namespace

FlashTiles flash_tiles(bool bf16_products) { return bf16_products ? FlashTiles{128, 256} : FlashTiles{}; }

int64_t flash_bf16_scratch_floats(const AttentionShape& s, FlashTiles tiles, int threads) {
  return Bf16Scratch(s, tiles).total(std::max(1, threads)) + kAlign;  // + room to align its start
}

int64_t flash_workspace_per_thread(const AttentionShape& s, FlashTiles tiles) {
  return round_up(used_per_thread(s, tiles), kAlign) + kAlign;  // + room to align the slice
}

namespace {

// The forward, q|k|v given as S (qkv) and y written as S (y), or under bf16 products both kept in bf16
// (qkv16, y16; qkv and y are then null).
template <typename S>
void fwd_impl(S* y, bf16* y16, S* lse, const S* qkv, const bf16* qkv16, const AttentionShape& s, const DropoutKey& drop,
              const FlashWorkspace<S>& ws) {
  GF_OP_SPAN("attention", "flash attention fwd");
  refuse_grouped_query(s);
  const Ctx<S> c = make_ctx<S>(s, drop, ws);
  const int64_t H = s.heads, C = H * s.head_dim, T = s.seq;
  const int64_t nq = (T + c.t.rows - 1) / c.t.rows, per = flash_workspace_per_thread(s, c.t);
  const int64_t items = s.batch * H * nq;
  const bf16* qkvh = nullptr;  // bf16 products: q, k, v head-major in bf16 (HeadBf16)
  Bf16Scratch bs(s, c.t);
  if constexpr (std::is_same_v<S, float>)
    if (c.bf16) {
      bs.use(ws, team_size(ws));
      qkvh = qkv16 ? bs.round_qkv(qkv16, s) : bs.round_qkv(qkv, s);
    }
  // Not gated by parallel_worth: each item calls a GEMM, which outside a team could take threads of its own
  // (core/math/parallel_worth.h).
#pragma omp parallel num_threads(team_size(ws))
  {
    S* w = thread_slice(ws, per);
    bf16* p_tile = qkvh ? bs.p_tile() : nullptr;
    // Longest tiles (last rows, most keys) first; each item writes its own rows of y and lse.
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t bh = it / nq, qt = nq - 1 - it % nq, b = bh / H, h = bh % H;
      const int64_t i0 = qt * c.t.rows;
      HeadBf16 hb = head_bf16(qkvh, nullptr, s, b, h, p_tile, nullptr);
      if (y16) hb.y_out = y16 + b * T * C + h * s.head_dim;
      fwd_query_tile(y ? y + b * T * C + h * s.head_dim : nullptr, lse + bh * T, HeadView<const S*>(qkv, s, b, h), i0,
                     std::min(c.t.rows, T - i0), drop_base(s, b, h), s.key_lo ? s.key_lo + b * T + i0 : nullptr, c, w,
                     hb);
    }
  }
}

template <typename S>
void bwd_impl(S* dqkv, const S* dy, const S* qkv, const bf16* qkv16, const S* y, const bf16* y16, const S* lse,
              const AttentionShape& s, const DropoutKey& drop, const FlashWorkspace<S>& ws) {
  GF_OP_SPAN("attention", "flash attention bwd");
  refuse_grouped_query(s);
  const Ctx<S> c = make_ctx<S>(s, drop, ws);
  const int64_t H = s.heads, C = H * s.head_dim, T = s.seq;
  const int64_t per = flash_workspace_per_thread(s, c.t);
  const bf16 *qkvh = nullptr, *dyh = nullptr;  // bf16 products: q, k, v and dy head-major in bf16 (HeadBf16)
  Bf16Scratch bs(s, c.t);
  if constexpr (std::is_same_v<S, float>)
    if (c.bf16) {
      bs.use(ws, team_size(ws));
      qkvh = qkv16 ? bs.round_qkv(qkv16, s) : bs.round_qkv(qkv, s);
      bf16* g = bs.dy_copy();
      to_head_major(g, dy, s.batch, T, H, s.head_dim, C);
      dyh = g;
    }
  // Not gated by parallel_worth: each item calls a GEMM, which outside a team could take threads of its own
  // (core/math/parallel_worth.h).
#pragma omp parallel num_threads(team_size(ws))
  {
    S* w = thread_slice(ws, per);
    // Each (batch, key/value head) owns its columns of dqkv, those of its query heads among them: one
    // thread, the group's query heads in order, no atomics.
    const int64_t KV = s.kv(), G = H / KV, D = s.head_dim;
    float* dense = qkvh ? bs.dense_grads() : nullptr;  // HeadBf16: dq, dk, dv
    bf16 *p_tile = qkvh ? bs.p_tile() : nullptr, *ds_tile = qkvh ? bs.ds_tile() : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bg = 0; bg < s.batch * KV; ++bg) {
      const int64_t b = bg / KV;
      if (dense) std::fill(dense + T * D, dense + 3 * T * D, 0.0f);
      for (int64_t h = bg % KV * G; h < (bg % KV + 1) * G; ++h) {
        const int64_t bh = b * H + h, off = b * T * C + h * D;
        HeadBf16 hb = head_bf16(qkvh, dyh, s, b, h, p_tile, ds_tile);
        if (y16) hb.y_in = y16 + off;
        if (dense) {
          std::fill(dense, dense + T * D, 0.0f);
          hb.dq = dense, hb.dk = dense + T * D, hb.dv = dense + 2 * T * D;
        }
        const HeadView<S*> dh(dqkv, s, b, h);
        bwd_head(dh, HeadView<const S*>(qkv, s, b, h), dy + off, y ? y + off : nullptr, lse + bh * T, drop_base(s, b, h),
                 s.key_lo ? s.key_lo + b * T : nullptr, c, w, hb);
        if constexpr (std::is_same_v<S, float>)
          if (dense) add_rows(dh.q, dh.ld, hb.dq, T, D);
        if (dense && h == (bg % KV + 1) * G - 1)
          if constexpr (std::is_same_v<S, float>) {
            add_rows(dh.k, dh.ld, hb.dk, T, D);
            add_rows(dh.v, dh.ld, hb.dv, T, D);
          }
      }
    }
  }
}

// bf16 q|k|v and y: the bf16 products' path alone (its only reader of q|k|v is the head-major copy).
void refuse_without_bf16_products(bool on, const char* what) {
  if (!on) throw std::invalid_argument(std::string("flash attention ") + what + ": bf16 q|k|v and y need bf16 products");
}

}  // namespace

template <typename S>
void flash_attention_fwd(S* y, S* lse, const S* qkv, const AttentionShape& s, const DropoutKey& drop,
                         const FlashWorkspace<S>& ws) {
  fwd_impl<S>(y, nullptr, lse, qkv, nullptr, s, drop, ws);
}

void flash_attention_fwd(bf16* y, float* lse, const bf16* qkv, const AttentionShape& s, const DropoutKey& drop,
                         const FlashWorkspace<float>& ws) {
  refuse_without_bf16_products(ws.bf16_products, "forward");
  fwd_impl<float>(nullptr, y, lse, nullptr, qkv, s, drop, ws);
}

template <typename S>
void flash_attention_bwd(S* dqkv, const S* dy, const S* qkv, const S* y, const S* lse, const AttentionShape& s,
                         const DropoutKey& drop, const FlashWorkspace<S>& ws) {
  bwd_impl<S>(dqkv, dy, qkv, nullptr, y, nullptr, lse, s, drop, ws);
}

void flash_attention_bwd(float* dqkv, const float* dy, const bf16* qkv, const bf16* y, const float* lse,
                         const AttentionShape& s, const DropoutKey& drop, const FlashWorkspace<float>& ws) {
  refuse_without_bf16_products(ws.bf16_products, "backward");
  bwd_impl<float>(dqkv, dy, nullptr, qkv, nullptr, y, lse, s, drop, ws);
}

template void flash_attention_fwd<float>(float*, float*, const float*, const AttentionShape&, const DropoutKey&,
                                         const FlashWorkspace<float>&);
template void flash_attention_fwd<double>(double*, double*, const double*, const AttentionShape&, const DropoutKey&,
                                          const FlashWorkspace<double>&);
template void flash_attention_bwd<float>(float*, const float*, const float*, const float*, const float*,
                                         const AttentionShape&, const DropoutKey&, const FlashWorkspace<float>&);
template void flash_attention_bwd<double>(double*, const double*, const double*, const double*, const double*,
                                          const AttentionShape&, const DropoutKey&, const FlashWorkspace<double>&);

}  // namespace gf::ops
