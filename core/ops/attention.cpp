#include "core/ops/attention.h"
#include "core/trace/trace.h"

#include <algorithm>
#include <cmath>

#include "core/math/gemm.h"
#include "core/math/scratch.h"

namespace gf::ops {
namespace {

uint64_t drop_base(const AttentionShape& s, int64_t b, int64_t h) {
  const int64_t hg = s.heads_global > 0 ? s.heads_global : s.heads;
  return static_cast<uint64_t>(((s.batch_offset + b) * hg + s.head_offset + h) * s.seq * s.seq);
}

// Row-wise causal softmax of a T x T score block in place over keys [lo_i, i] (lo_i = key_lo[i],
// 0 without key_lo); the other entries become 0, so backward needs no mask of its own.
template <typename S>
void causal_softmax(S* p, int64_t T, const int32_t* key_lo) {
  for (int64_t i = 0; i < T; ++i) {
    S* row = p + i * T;
    const int64_t lo = key_lo ? key_lo[i] : 0;
    S mx = row[lo];
    for (int64_t j = lo + 1; j <= i; ++j) mx = std::max(mx, row[j]);
    S sum = 0;
    for (int64_t j = lo; j <= i; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const S inv = S(1) / sum;
    for (int64_t j = lo; j <= i; ++j) row[j] *= inv;
    std::fill(row, row + lo, S(0));
    std::fill(row + i + 1, row + T, S(0));
  }
}

// Copies probs to dst with the dropout mask applied.
template <typename S>
void dropped_probs(S* dst, const S* p, int64_t T, const DropoutKey& drop, uint64_t base) {
  for (int64_t i = 0; i < T * T; ++i) dst[i] = p[i] * drop.scale(base + i);
}

// Pointers to one (batch, query head)'s q and its kv head's k, v in the packed
// [B, T, W] tensor, W = (H + 2 Hkv) D its row stride.
template <typename P>
struct HeadQKV {
  P q, k, v;
  HeadQKV(P qkv, int64_t b, int64_t h, const AttentionShape& s)
      : q(qkv + b * s.seq * width(s) + h * s.head_dim),
        k(qkv + b * s.seq * width(s) + (s.heads + h / (s.heads / s.kv())) * s.head_dim),
        v(k + s.kv() * s.head_dim) {}
  static int64_t width(const AttentionShape& s) { return (s.heads + 2 * s.kv()) * s.head_dim; }
};

}  // namespace

template <typename S>
void attention_fwd(S* y, S* probs, const S* qkv, const AttentionShape& s,
                   const DropoutKey& drop) {
  GF_OP_SPAN("attention", "attention fwd");
  const int64_t T = s.seq, D = s.head_dim, H = s.heads, C = H * D, W = HeadQKV<const S*>::width(s);
  const S scale = s.score_scale<S>();
  // Not gated by parallel_worth: each item calls a GEMM, which outside a team could take threads of its own
  // (core/math/parallel_worth.h).
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.batch * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    const auto [q, k, v] = HeadQKV<const S*>(qkv, b, h, s);
    S* p = probs + bh * T * T;
    gemm(Trans::kNo, Trans::kYes, T, T, D, scale, q, W, k, W, S(0), p, T);
    causal_softmax(p, T, s.key_lo ? s.key_lo + b * T : nullptr);
    const S* pv = p;
    if (drop.active()) {
      S* tmp = scratch<S>(static_cast<size_t>(T * T));
      dropped_probs(tmp, p, T, drop, drop_base(s, b, h));
      pv = tmp;
    }
    gemm(Trans::kNo, Trans::kNo, T, D, T, S(1), pv, T, v, W, S(0), y + b * T * C + h * D, C);
  }
}

template <typename S>
void attention_bwd(S* dqkv, const S* dy, const S* qkv, const S* probs,
                   const AttentionShape& s, const DropoutKey& drop) {
  GF_OP_SPAN("attention", "attention bwd");
  const int64_t T = s.seq, D = s.head_dim, H = s.heads, C = H * D, W = HeadQKV<const S*>::width(s);
  const int64_t G = s.kv(), rep = H / G;
  const S scale = s.score_scale<S>();
  // One thread per (batch, kv head): the query heads that share a kv head add into its dK, dV in
  // head order, so there is no race and the sums do not depend on the thread count.
  // Not gated by parallel_worth: each item calls a GEMM, which outside a team could take threads of its own
  // (core/math/parallel_worth.h).
#pragma omp parallel for schedule(static)
  for (int64_t bg = 0; bg < s.batch * G; ++bg) {
    for (int64_t r = 0; r < rep; ++r) {
      const int64_t b = bg / G, h = (bg % G) * rep + r, bh = b * H + h;
      const auto [q, k, v] = HeadQKV<const S*>(qkv, b, h, s);
      const auto [dq, dk, dv] = HeadQKV<S*>(dqkv, b, h, s);
      const S* dyb = dy + b * T * C + h * D;
      const S* p = probs + bh * T * T;
      S* dp = scratch<S>(static_cast<size_t>(2 * T * T));
      const S* pv = p;
      const uint64_t base = drop_base(s, b, h);
      if (drop.active()) {
        S* tmp = dp + T * T;
        dropped_probs(tmp, p, T, drop, base);
        pv = tmp;
      }
      // dV += P'^T dY ; dP' = dY V^T
      gemm(Trans::kYes, Trans::kNo, T, D, T, S(1), pv, T, dyb, C, S(1), dv, W);
      gemm(Trans::kNo, Trans::kYes, T, T, D, S(1), dyb, C, v, W, S(0), dp, T);
      // dS = P * (dP - rowsum(dP * P)) (through the dropout mask), times the score scale.
      for (int64_t i = 0; i < T; ++i) {
        S* dpr = dp + i * T;
        const S* pr = p + i * T;
        if (drop.active())
          for (int64_t j = 0; j <= i; ++j) dpr[j] *= drop.scale(base + i * T + j);
        S dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += dpr[j] * pr[j];
        for (int64_t j = 0; j <= i; ++j) dpr[j] = pr[j] * (dpr[j] - dot) * scale;
        std::fill(dpr + i + 1, dpr + T, S(0));
      }
      // dQ += dS K ; dK += dS^T Q
      gemm(Trans::kNo, Trans::kNo, T, D, T, S(1), dp, T, k, W, S(1), dq, W);
      gemm(Trans::kYes, Trans::kNo, T, D, T, S(1), dp, T, q, W, S(1), dk, W);
    }
  }
}

template void attention_fwd<float>(float*, float*, const float*, const AttentionShape&, const DropoutKey&);
template void attention_fwd<double>(double*, double*, const double*, const AttentionShape&, const DropoutKey&);
template void attention_bwd<float>(float*, const float*, const float*, const float*, const AttentionShape&, const DropoutKey&);
template void attention_bwd<double>(double*, const double*, const double*, const double*, const AttentionShape&, const DropoutKey&);

}  // namespace gf::ops
