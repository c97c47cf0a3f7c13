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
#include "core/ops/flash_attention_bf16.h"

namespace gf::ops {
namespace {

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
    // Di = rowsum(dY * Y). A kept bf16 y is widened into a float row first (ds is free until the tiles
    // below), so both entries run this one loop: two loops of their own were compiled differently under
    // -march=native on a Xeon (one contracted into fmas, the other its products apart from an in-order
    // sum), and the two entries gave other bits there.
    for (int64_t r = 0; r < br; ++r) {
      const S* yr = yh ? yh + (i0 + r) * C : nullptr;
      if constexpr (std::is_same_v<S, float>)
        if (hb.y_in) {
          float* row = ds;
          if (Br * c.ld < D) {  // tiles smaller than a head's row: a spare row of the thread's own
            thread_local std::vector<float> spare;
            row = align64(spare, static_cast<size_t>(D));
          }
          for (int64_t d = 0; d < D; ++d) row[d] = bf16_to_float(hb.y_in[(i0 + r) * C + d]);
          yr = row;
        }
      S acc = 0;
      for (int64_t d = 0; d < D; ++d) acc += dyh[(i0 + r) * C + d] * yr[d];
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
  return {s, drop, t, tile_ld(t), s.template score_scale<S>(), ws.bf16_products};
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
