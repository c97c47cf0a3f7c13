#include "core/ops/ring_attention.h"
#include "core/trace/trace.h"

#include "core/math/parallel_worth.h"

#include <omp.h>
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/math/gemm.h"
#include "core/math/scratch.h"
#include "core/ops/attention_rows.h"

namespace gf::ops {
namespace {

constexpr int64_t kRows = 64, kCols = 128;  // query rows x key columns per tile (the fused core's)
// kCols is the score tiles' row stride too: a multiple of 16 floats, so on the 64-byte aligned scratch
// every row starts aligned and exp_shifted splits it into packets alike on every thread (as the fused
// core's tile_ld does).
static_assert(kCols % 16 == 0);

// The fused core's row operations (core/ops/attention_rows.h), on float rows.
using rows::dropout_scales;
using rows::exp_shifted;
using rows::lane_max;
using rows::lane_sum;

uint64_t drop_base(const RingShape& s, int64_t b, int64_t h) {
  const int64_t hg = s.heads_global > 0 ? s.heads_global : s.heads;
  return static_cast<uint64_t>(((s.batch_offset + b) * hg + s.head_offset + h) * s.seq * s.seq);
}

// The visible columns [a, n) of a query at position qp in a key tile of bc keys from position kp0.
void visible(const RingShape& s, int64_t b, int64_t qp, int64_t kp0, int64_t bc, int64_t& a, int64_t& n) {
  n = std::clamp<int64_t>(qp - kp0 + 1, 0, bc);
  a = s.key_lo ? std::clamp<int64_t>(s.key_lo[b * s.seq + qp] - kp0, 0, n) : 0;
}

// Query chunk qc of this rank's rows against key chunk kc of a block, for sample b, tile by tile:
// `tile(i0, br, j0, bc)` gets each (query tile, key tile) with a visible key. Tiles wholly after the
// diagonal, and (key_lo: documents, a sliding window) wholly before every row's first visible key,
// are skipped, so a windowed ring step outside the band costs nothing but its transfer.
template <typename F>
void chunk_pair(const RingShape& s, int64_t b, const RowChunks& qr, const RowChunks& kr, int qc, int kc, F tile) {
  const int64_t qs = qr.start[qc], ks = kr.start[kc], nq = qr.chunk, nk = kr.chunk;
  if (ks > qs + nq - 1) return;  // every key after every query: nothing visible
  for (int64_t i0 = 0; i0 < nq; i0 += kRows) {
    const int64_t br = std::min(kRows, nq - i0), q_last = qs + i0 + br - 1;
    int64_t lo = 0;  // the tile's earliest first visible key
    if (s.key_lo) lo = *std::min_element(s.key_lo + b * s.seq + qs + i0, s.key_lo + b * s.seq + q_last + 1);
    for (int64_t j0 = 0; j0 < nk && ks + j0 <= q_last; j0 += kCols) {
      const int64_t bc = std::min(kCols, nk - j0);
      if (ks + j0 + bc - 1 < lo) continue;
      tile(qc * qr.chunk + i0, br, kc * kr.chunk + j0, bc);
      // The ring's transfers move only inside MPI calls (no progress thread): the master thread (the
      // one MPI may be called from) lets them advance after each of its tiles.
      if (s.progress != nullptr && omp_get_thread_num() == 0) s.progress(s.progress_arg);
    }
  }
}

}  // namespace

void ring_attention_fwd_block(float* o, float* m, float* l, const float* q, int64_t ldq, const float* k, const float* v,
                              int64_t ldkv, const RowChunks& qr, const RowChunks& kr, const RingShape& s,
                              const DropoutKey& drop) {
  GF_OP_SPAN("attention", "ring attention fwd block");
  const int64_t H = s.heads, D = s.head_dim, R = s.rows, C = H * D, group = H / s.kv_heads;
  const float scale = s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(D));
  // Not gated by parallel_worth: each item calls a GEMM, which outside a team could take threads of its own
  // (core/math/parallel_worth.h).
#pragma omp parallel
  {
    float* const st = scratch<float>(static_cast<size_t>(kRows * kCols), 2);  // per thread, reused step after step
    float* const mk = scratch<float>(static_cast<size_t>(kCols), 3);          // one row of dropout scales
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < s.batch * H; ++bh) {
      const int64_t b = bh / H, h = bh % H, g = h / group;
      const uint64_t base = drop_base(s, b, h);
      const float* qh = q + b * R * ldq + h * D;
      const float* kh = k + b * R * ldkv + g * D;
      const float* vh = v + b * R * ldkv + g * D;
      float* oh = o + b * R * C + h * D;
      float *mh = m + bh * R, *lh = l + bh * R;
      for (int qc = 0; qc < qr.chunks; ++qc)
        for (int kc = 0; kc < kr.chunks; ++kc)
          chunk_pair(s, b, qr, kr, qc, kc, [&](int64_t i0, int64_t br, int64_t j0, int64_t bc) {
            gemm(Trans::kNo, Trans::kYes, br, bc, D, scale, qh + i0 * ldq, ldq, kh + j0 * ldkv, ldkv, 0.0f, st, kCols);
            const int64_t kp0 = kr.position(j0);
            for (int64_t r = 0; r < br; ++r) {
              float* row = st + r * kCols;
              const int64_t qp = qr.position(i0 + r);
              int64_t a, n;
              visible(s, b, qp, kp0, bc, a, n);
              std::fill(row + n, row + bc, 0.0f);
              std::fill(row, row + a, 0.0f);
              if (n == a) continue;
              float* const vis = row + a;
              const float mx = lane_max(vis, n - a, mh[i0 + r]);
              const float alpha = std::exp(mh[i0 + r] - mx);  // 0 before the first visible key (m = -inf)
              exp_shifted(vis, n - a, mx);
              lh[i0 + r] = lh[i0 + r] * alpha + lane_sum(vis, n - a);
              mh[i0 + r] = mx;
              if (alpha != 1.0f)
                for (int64_t d = 0; d < D; ++d) oh[(i0 + r) * C + d] *= alpha;
              if (drop.active()) {
                dropout_scales(mk, drop, base + static_cast<uint64_t>(qp * s.seq + kp0 + a), n - a);
                for (int64_t j = 0; j < n - a; ++j) vis[j] *= mk[j];
              }
            }
            gemm(Trans::kNo, Trans::kNo, br, D, bc, 1.0f, st, kCols, vh + j0 * ldkv, ldkv, 1.0f, oh + i0 * C, C);
          });
    }
  }
}

void ring_attention_fwd_finish(float* o, float* l, const float* m, const RingShape& s) {
  const int64_t H = s.heads, D = s.head_dim, R = s.rows, C = H * D;
#pragma omp parallel for schedule(static) if (parallel_worth(s.batch * H * R * D))
  for (int64_t bh = 0; bh < s.batch * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    for (int64_t r = 0; r < R; ++r) {
      float* y = o + (b * R + r) * C + h * D;
      const float inv = 1.0f / l[bh * R + r];
      for (int64_t d = 0; d < D; ++d) y[d] *= inv;
      l[bh * R + r] = m[bh * R + r] + std::log(l[bh * R + r]);
    }
  }
}

void ring_attention_bwd_prepare(float* di, const float* dy, const float* y, const RingShape& s) {
  const int64_t H = s.heads, D = s.head_dim, R = s.rows, C = H * D;
#pragma omp parallel for schedule(static) if (parallel_worth(s.batch * H * R * D))
  for (int64_t bh = 0; bh < s.batch * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    for (int64_t r = 0; r < R; ++r) {
      const float *a = dy + (b * R + r) * C + h * D, *c = y + (b * R + r) * C + h * D;
      float acc = 0.0f;
      for (int64_t d = 0; d < D; ++d) acc += a[d] * c[d];
      di[bh * R + r] = acc;
    }
  }
}

void ring_attention_bwd_block(float* dq, int64_t lddq, float* dk, float* dv, int64_t lddkv, const float* q, int64_t ldq,
                              const float* k, const float* v, int64_t ldkv, const float* dy, const float* lse,
                              const float* di, const RowChunks& qr, const RowChunks& kr, const RingShape& s,
                              const DropoutKey& drop) {
  GF_OP_SPAN("attention", "ring attention bwd block");
  const int64_t H = s.heads, Hk = s.kv_heads, D = s.head_dim, R = s.rows, C = H * D, group = H / Hk;
  const float scale = s.scale > 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(D));
  // One (sample, kv head) per item: its query heads' dq columns and its dk, dv columns are written
  // by one thread, in a fixed order.
  // Not gated by parallel_worth: each item calls a GEMM, which outside a team could take threads of its own
  // (core/math/parallel_worth.h).
#pragma omp parallel
  {
    float* const p = scratch<float>(static_cast<size_t>(kRows * kCols), 2);
    float* const ds = scratch<float>(static_cast<size_t>(kRows * kCols), 3);
    float* const mk = scratch<float>(static_cast<size_t>(kCols), 1);  // one row of dropout scales
#pragma omp for schedule(dynamic, 1)
    for (int64_t bg = 0; bg < s.batch * Hk; ++bg) {
      const int64_t b = bg / Hk, g = bg % Hk;
      const float* kh = k + b * R * ldkv + g * D;
      const float* vh = v + b * R * ldkv + g * D;
      float* dkh = dk + b * R * lddkv + g * D;
      float* dvh = dv + b * R * lddkv + g * D;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const int64_t bh = b * H + h;
        const uint64_t base = drop_base(s, b, h);
        const float* qh = q + b * R * ldq + h * D;
        const float* dyh = dy + b * R * C + h * D;
        float* dqh = dq + b * R * lddq + h * D;
        for (int qc = 0; qc < qr.chunks; ++qc)
          for (int kc = 0; kc < kr.chunks; ++kc)
            chunk_pair(s, b, qr, kr, qc, kc, [&](int64_t i0, int64_t br, int64_t j0, int64_t bc) {
              gemm(Trans::kNo, Trans::kYes, br, bc, D, scale, qh + i0 * ldq, ldq, kh + j0 * ldkv, ldkv, 0.0f, p, kCols);
              gemm(Trans::kNo, Trans::kYes, br, bc, D, 1.0f, dyh + i0 * C, C, vh + j0 * ldkv, ldkv, 0.0f, ds, kCols);
              const int64_t kp0 = kr.position(j0);
              for (int64_t r = 0; r < br; ++r) {
                float *pr = p + r * kCols, *dr = ds + r * kCols;
                const int64_t qp = qr.position(i0 + r);
                int64_t a, n;
                visible(s, b, qp, kp0, bc, a, n);
                std::fill(pr + n, pr + bc, 0.0f);
                std::fill(dr + n, dr + bc, 0.0f);
                std::fill(pr, pr + a, 0.0f);
                std::fill(dr, dr + a, 0.0f);
                if (n == a) continue;
                const float d = di[bh * R + i0 + r];
                const int64_t w = n - a;
                pr += a;
                dr += a;
                exp_shifted(pr, w, lse[bh * R + i0 + r]);
                if (drop.active()) {
                  dropout_scales(mk, drop, base + static_cast<uint64_t>(qp * s.seq + kp0 + a), w);
                  for (int64_t j = 0; j < w; ++j) {
                    dr[j] = pr[j] * (dr[j] * mk[j] - d) * scale;
                    pr[j] *= mk[j];
                  }
                } else {
                  for (int64_t j = 0; j < w; ++j) dr[j] = pr[j] * (dr[j] - d) * scale;
                }
              }
              // dV_j += P'^T dY_i ; dQ_i += dS K_j ; dK_j += dS^T Q_i
              gemm(Trans::kYes, Trans::kNo, bc, D, br, 1.0f, p, kCols, dyh + i0 * C, C, 1.0f, dvh + j0 * lddkv, lddkv);
              gemm(Trans::kNo, Trans::kNo, br, D, bc, 1.0f, ds, kCols, kh + j0 * ldkv, ldkv, 1.0f, dqh + i0 * lddq, lddq);
              gemm(Trans::kYes, Trans::kNo, bc, D, br, 1.0f, ds, kCols, qh + i0 * ldq, ldq, 1.0f, dkh + j0 * lddkv, lddkv);
            });
      }
    }
  }
}

}  // namespace gf::ops
