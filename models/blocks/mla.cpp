#include "models/blocks/mla.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/math/parallel_memory.h"
#include "core/math/parallel_worth.h"
#include "core/math/gemm.h"
#include "core/ops/linear.h"
#include "core/ops/rmsnorm.h"

namespace gf {

namespace {
constexpr float kLatentNormEps = 1e-6f;  // DeepseekV2RMSNorm(kv_lora_rank) / (q_lora_rank): its default eps
}  // namespace

MlaProjection::MlaProjection(const TransformerSpec& s, int tp_size)
    : spec_(s), m_(s.mla), H_(s.heads / tp_size), D_(s.mla.qk()) {
  if (m_.rope % 2 != 0 || m_.rope <= 0) throw std::invalid_argument("MLA: qk_rope_head_dim must be even and > 0");
  if (m_.v > D_) throw std::invalid_argument("MLA: v_head_dim larger than qk_nope_head_dim + qk_rope_head_dim is not built");
  if (s.kv_heads != s.heads) throw std::logic_error("MLA: every head has its own key and value");
  const int64_t C = s.hidden;
  if (m_.q_rank > 0) {
    qa_ = {ParallelLinear::Kind::kColumn, C, m_.q_rank, true};
    qb_ = {ParallelLinear::Kind::kColumn, m_.q_rank, H_ * D_, true};
  } else {
    q_ = {ParallelLinear::Kind::kColumn, C, H_ * D_, true};
  }
  kva_ = {ParallelLinear::Kind::kColumn, C, m_.kv_rank + m_.rope, true};
  kvb_ = {ParallelLinear::Kind::kColumn, m_.kv_rank, H_ * (m_.nope + m_.v), true};
}

void MlaProjection::declare(ParamTable& t, const NameMap& names, int64_t l) const {
  const int64_t C = spec_.hidden;
  const float std = spec_.init_std;
  auto n = [&](Role r) { return names(r, l); };
  const int64_t H = spec_.heads;  // the global shapes: q and kv_b split by heads, the latents whole on every rank
  auto whole = [&](ParamSpec p) {
    p.grad_partial_over_tp = true;
    t.add(p);
  };
  if (m_.q_rank > 0) {
    whole({n(Role::kQAW), {m_.q_rank, C}, no_split(), Init::kNormal, std, true});
    whole({n(Role::kQANormW), {m_.q_rank}, no_split(), Init::kOnes, 0.0f, false});
    t.add({n(Role::kQBW), {H * D_, m_.q_rank}, split_dim(0), Init::kNormal, std, true});
  } else {
    t.add({n(Role::kQW), {H * D_, C}, split_dim(0), Init::kNormal, std, true});
  }
  whole({n(Role::kKvAW), {m_.kv_rank + m_.rope, C}, no_split(), Init::kNormal, std, true});
  whole({n(Role::kKvANormW), {m_.kv_rank}, no_split(), Init::kOnes, 0.0f, false});
  t.add({n(Role::kKvBW), {H * (m_.nope + m_.v), m_.kv_rank}, split_dim(0), Init::kNormal, std, true});
}

void MlaProjection::bind(const Placement& t, const NameMap& names, int64_t l) {
  auto off = [&](Role r) { return t.at(names(r, l)).offset; };
  if (m_.q_rank > 0) {
    qa_.w = off(Role::kQAW);
    qa_norm_ = off(Role::kQANormW);
    qb_.w = off(Role::kQBW);
  } else {
    q_.w = off(Role::kQW);
  }
  kva_.w = off(Role::kKvAW);
  kva_norm_ = off(Role::kKvANormW);
  kvb_.w = off(Role::kKvBW);
}

void MlaProjection::bind_lora(const Placement& lora, const NameMap& names, int64_t l, AdapterSite at) {
  auto site = [&](int64_t s) { return at.site = s, at; };
  if (m_.q_rank > 0) {
    bind_adapter(qa_, lora, names(Role::kQAW, l), 0, m_.q_rank, site(9));
    bind_adapter(qb_, lora, names(Role::kQBW, l), 0, H_ * D_, site(10));
  } else {
    bind_adapter(q_, lora, names(Role::kQW, l), 0, H_ * D_, site(0));
  }
  bind_adapter(kva_, lora, names(Role::kKvAW, l), 0, m_.kv_rank + m_.rope, site(11));
  bind_adapter(kvb_, lora, names(Role::kKvBW, l), 0, H_ * (m_.nope + m_.v), site(12));
}

// kv_b_proj's weight with its adapters merged, W + s B A (rows [H (nope + v), kv_rank]): the absorbed form of
// generation reads the weight itself, not its products.
const float* MlaProjection::kv_b_weight(const BlockEnv& e) const {
  const float* w = e.w(kvb_.w);
  if (kvb_.adapters.empty()) return w;
  const int64_t rows = H_ * (m_.nope + m_.v), r = m_.kv_rank, rl = kvb_.rank;
  kvb_merged_.assign(w, w + rows * r);
  for (const ParallelLinear::Adapter& ad : kvb_.adapters)
    gemm(Trans::kNo, Trans::kNo, ad.cols, r, rl, kvb_.scale, e.lora_w + ad.b, rl, e.lora_w + ad.a, r, 1.0f,
         kvb_merged_.data() + ad.col0 * r, r);
  return kvb_merged_.data();
}

int64_t MlaProjection::kept_per_row(const TransformerSpec& s) {
  const MlaSpec& m = s.mla;
  return (m.kv_rank + m.rope) + 2 * m.kv_rank + 1 + (m.q_rank > 0 ? 2 * m.q_rank + 1 : 0);
}

int64_t MlaProjection::scratch_per_row(const TransformerSpec& s) {
  const MlaSpec& m = s.mla;
  return s.heads * m.qk() + s.heads * (m.nope + m.v) + (m.kv_rank + m.rope) + 2 * m.kv_rank + s.hidden + 2 * m.q_rank;
}

MlaProjection::Kept MlaProjection::kept_of(float* kept, int64_t N) const {
  const int64_t r = m_.kv_rank, qr = m_.q_rank;
  Kept k{};
  k.kv_a = kept;
  k.c = k.kv_a + N * (r + m_.rope);
  k.cn = k.c + N * r;
  k.qa = k.cn + N * r;
  k.qan = k.qa + N * qr;
  k.c_rstd = k.qan + N * qr;
  k.qa_rstd = k.c_rstd + N;
  return k;
}

void MlaProjection::fwd(const BlockEnv& e, float* qkv, const float* xn, float* kept, float* scratch,
                        const void* xn_low) const {
  const int64_t N = e.N, H = H_, D = D_, dn = m_.nope, dr = m_.rope, dv = m_.v, r = m_.kv_rank, A = r + dr;
  const int64_t half = dr / 2, W = 3 * H * D, KV = dn + dv;
  const Kept k = kept_of(kept, N);
  float* q = scratch;           // [N, H D]: Hugging Face's q, each head nope | pe
  float* kv = q + N * H * D;    // [N, H (nope + v)]
  if (m_.q_rank > 0) {
    qa_.fwd(e, k.qa, xn, xn_low);
    ops::rmsnorm_fwd(k.qan, k.qa_rstd, k.qa, e.w(qa_norm_), N, m_.q_rank, kLatentNormEps);
    ops::linear_fwd(q, k.qan, e.wt(qb_.w, true), nullptr, N, m_.q_rank, H * D);  // every token's rows already
    qb_.adapters_fwd(e, q, k.qan);
  } else {
    q_.fwd(e, q, xn, xn_low);
  }
  kva_.fwd(e, k.kv_a, xn, xn_low);
#pragma omp parallel for schedule(static) if (parallel_worth(N * r))
  for (int64_t n = 0; n < N; ++n) std::copy_n(k.kv_a + n * A, r, k.c + n * r);
  ops::rmsnorm_fwd(k.cn, k.c_rstd, k.c, e.w(kva_norm_), N, r, kLatentNormEps);
  ops::linear_fwd(kv, k.cn, e.wt(kvb_.w, true), nullptr, N, r, H * KV);
  kvb_.adapters_fwd(e, kv, k.cn);
#pragma omp parallel for schedule(static) if (parallel_worth(N * W))
  for (int64_t n = 0; n < N; ++n) {
    float* row = qkv + n * W;
    const float* kpe = k.kv_a + n * A + r;
    for (int64_t h = 0; h < H; ++h) {
      float *qh = row + h * D, *kh = row + (H + h) * D, *vh = row + (2 * H + h) * D;
      const float* qs = q + (n * H + h) * D;
      const float* kvs = kv + (n * H + h) * KV;
      for (int64_t j = 0; j < half; ++j) {
        qh[j] = qs[dn + 2 * j];
        qh[half + j] = qs[dn + 2 * j + 1];
        kh[j] = kpe[2 * j];
        kh[half + j] = kpe[2 * j + 1];
      }
      std::copy_n(qs, dn, qh + dr);
      std::copy_n(kvs, dn, kh + dr);
      std::copy_n(kvs + dn, dv, vh);
      std::fill(vh + dv, vh + D, 0.0f);
    }
  }
}

void MlaProjection::bwd(const BlockEnv& e, float* dxn, const float* dqkv, const float* xn, const float* kept,
                        float* scratch, const void* xn_low) const {
  const int64_t N = e.N, H = H_, D = D_, dn = m_.nope, dr = m_.rope, dv = m_.v, r = m_.kv_rank, A = r + dr;
  const int64_t half = dr / 2, W = 3 * H * D, KV = dn + dv, C = spec_.hidden, qr = m_.q_rank;
  const Kept k = kept_of(const_cast<float*>(kept), N);
  float* dq = scratch;             // [N, H D]
  float* dkv = dq + N * H * D;     // [N, H (nope + v)]
  float* dkva = dkv + N * H * KV;  // [N, r + rope]
  float* dcn = dkva + N * A;       // [N, r]
  float* dc = dcn + N * r;         // [N, r]
  float* dx2 = dc + N * r;         // [N, C]
  float* dqan = dx2 + N * C;       // [N, q_rank]
  float* dqa = dqan + N * qr;      // [N, q_rank]
#pragma omp parallel for schedule(static) if (parallel_worth(N * W))
  for (int64_t n = 0; n < N; ++n) {
    const float* row = dqkv + n * W;
    float* dkpe = dkva + n * A + r;
    std::fill(dkpe, dkpe + dr, 0.0f);
    for (int64_t h = 0; h < H; ++h) {
      const float *qh = row + h * D, *kh = row + (H + h) * D, *vh = row + (2 * H + h) * D;
      float* qd = dq + (n * H + h) * D;
      float* kvd = dkv + (n * H + h) * KV;
      for (int64_t j = 0; j < half; ++j) {
        qd[dn + 2 * j] = qh[j];
        qd[dn + 2 * j + 1] = qh[half + j];
        dkpe[2 * j] += kh[j];  // the shared RoPE key: every head's gradient, summed in head order
        dkpe[2 * j + 1] += kh[half + j];
      }
      std::copy_n(qh + dr, dn, qd);
      std::copy_n(kh + dr, dn, kvd);
      std::copy_n(vh, dv, kvd + dn);
    }
  }
  // kv_b's input gradient is this rank's heads' share: kv_a's backward (column-parallel) sums it over the group.
  // LoRA: the base frozen (no weight gradient), the adapters' input and weight gradients added.
  const bool frozen = e.frozen();
  if (frozen) ops::linear_bwd_input(dcn, dkv, e.wt(kvb_.w, true), N, r, H * KV, 0.0f);
  else ops::linear_bwd(dcn, e.g(kvb_.w), nullptr, dkv, k.cn, e.wt(kvb_.w, true), N, r, H * KV, 0.0f);
  kvb_.adapters_bwd(e, dcn, dkv, k.cn, true, true);
  parallel_zero(dc, N * r);
  if (frozen) ops::rmsnorm_bwd_input(dc, dcn, k.c, e.w(kva_norm_), k.c_rstd, N, r);
  else ops::rmsnorm_bwd(dc, e.g(kva_norm_), dcn, k.c, e.w(kva_norm_), k.c_rstd, N, r);
#pragma omp parallel for schedule(static) if (parallel_worth(N * r))
  for (int64_t n = 0; n < N; ++n) std::copy_n(dc + n * r, r, dkva + n * A);
  kva_.bwd(e, BwdPass::kBoth, dxn, dkva, xn, xn_low);
  if (qr > 0) {
    if (frozen) ops::linear_bwd_input(dqan, dq, e.wt(qb_.w, true), N, m_.q_rank, H * D, 0.0f);
    else ops::linear_bwd(dqan, e.g(qb_.w), nullptr, dq, k.qan, e.wt(qb_.w, true), N, m_.q_rank, H * D, 0.0f);
    qb_.adapters_bwd(e, dqan, dq, k.qan, true, true);
    parallel_zero(dqa, N * qr);
    if (frozen) ops::rmsnorm_bwd_input(dqa, dqan, k.qa, e.w(qa_norm_), k.qa_rstd, N, qr);
    else ops::rmsnorm_bwd(dqa, e.g(qa_norm_), dqan, k.qa, e.w(qa_norm_), k.qa_rstd, N, qr);
    qa_.bwd(e, BwdPass::kBoth, dx2, dqa, xn, xn_low);
  } else {
    q_.bwd(e, BwdPass::kBoth, dx2, dq, xn, xn_low);
  }
  const int64_t Nl = e.Nl;  // dxn: this rank's rows (the column-parallel layers' reductions)
#pragma omp parallel for simd schedule(static) if (parallel_worth(Nl * C))
  for (int64_t i = 0; i < Nl * C; ++i) dxn[i] += dx2[i];
}

int64_t MlaProjection::cached_scratch_per_row(const TransformerSpec& s) {
  const MlaSpec& m = s.mla;
  // q (HF's layout), then per head the absorbed query, the rotated RoPE query and the latent output.
  return s.heads * m.qk() + s.heads * (2 * m.kv_rank + m.rope) + std::max<int64_t>(m.q_rank, 1);
}

void MlaProjection::fwd_cached(const BlockEnv& e, float* y_v, const float* xn, float* kept, float* scratch,
                               const KvCache& kv, const RowPositions& rp, const ops::RopeTable<float>& rope, float scale,
                               const void* xn_low) const {
  const int64_t N = e.N, H = H_, D = D_, dn = m_.nope, dr = m_.rope, dv = m_.v, r = m_.kv_rank, A = r + dr;
  const int64_t half = dr / 2, KV = dn + dv, cap = kv.capacity;
  const Kept k = kept_of(kept, N);
  float* q = scratch;                 // [N, H D]
  float* qabs = q + N * H * D;        // [N, H, r]
  float* qpe = qabs + N * H * r;      // [N, H, rope] rotated, de-interleaved
  float* olat = qpe + N * H * dr;     // [N, H, r]
  if (m_.q_rank > 0) {
    qa_.fwd(e, k.qa, xn, xn_low);
    ops::rmsnorm_fwd(k.qan, k.qa_rstd, k.qa, e.w(qa_norm_), N, m_.q_rank, kLatentNormEps);
    ops::linear_fwd(q, k.qan, e.wt(qb_.w, true), nullptr, N, m_.q_rank, H * D);
    qb_.adapters_fwd(e, q, k.qan);
  } else {
    q_.fwd(e, q, xn, xn_low);
  }
  kva_.fwd(e, k.kv_a, xn, xn_low);
  for (int64_t n = 0; n < N; ++n) std::copy_n(k.kv_a + n * A, r, k.c + n * r);
  ops::rmsnorm_fwd(k.cn, k.c_rstd, k.c, e.w(kva_norm_), N, r, kLatentNormEps);
  const int64_t reach = kv.positions > 0 ? kv.positions : cap;
  // A pair (x[2i], x[2i + 1]) de-interleaved to (out[i], out[half + i]) and rotated at position p (rotate-half).
  auto rotate = [&](float* out, const float* x, int64_t p) {
    const float* c = rope.cos.data() + p * rope.half;
    const float* s = rope.sin.data() + p * rope.half;
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[2 * i], b = x[2 * i + 1];
      out[i] = a * c[i] - b * s[i];
      out[half + i] = b * c[i] + a * s[i];
    }
  };
  for (int64_t n = 0; n < N; ++n) {
    if (rp.pos[n] < 0 || rp.pos[n] >= reach || rp.pos[n] >= rope.max_positions)
      throw std::out_of_range("generation: position " + std::to_string(rp.pos[n]) + " outside the KV cache's " +
                              std::to_string(reach));
    float* at = kv.k + (rp.seq[n] * cap + rp.pos[n] % cap) * A;  // [c normed | k_pe rotated]
    std::copy_n(k.cn + n * r, r, at);
    rotate(at + r, k.kv_a + n * A + r, rp.pos[n]);
  }
  const float* wkv = kv_b_weight(e);  // [H (nope + v), r]
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(N * H * (dn + dv) * r))
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q + (n * H + h) * D;
      float* qa = qabs + (n * H + h) * r;
      std::fill(qa, qa + r, 0.0f);
      for (int64_t i = 0; i < dn; ++i) {
        const float a = qh[i];
        const float* row = wkv + (h * KV + i) * r;
#pragma omp simd
        for (int64_t j = 0; j < r; ++j) qa[j] += a * row[j];
      }
      rotate(qpe + (n * H + h) * dr, qh + dn, rp.pos[n]);
    }
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(N * H * reach * (r + dr)))
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      float* p = kv.scores + static_cast<int64_t>(omp_get_thread_num()) * cap;
      const float* qa = qabs + (n * H + h) * r;
      const float* qp = qpe + (n * H + h) * dr;
      const int64_t len = rp.pos[n] + 1;
      const float* base = kv.k + rp.seq[n] * cap * A;
      float mx = -INFINITY;
      for (int64_t t = 0; t < len; ++t) {
        const float* ct = base + t * A;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < r; ++j) dot += qa[j] * ct[j];
        float dpe = 0.0f;
        for (int64_t j = 0; j < dr; ++j) dpe += qp[j] * ct[r + j];
        p[t] = scale * (dot + dpe);
        mx = std::max(mx, p[t]);
      }
      float sum = 0.0f;
      for (int64_t t = 0; t < len; ++t) {
        p[t] = std::exp(p[t] - mx);
        sum += p[t];
      }
      const float inv = 1.0f / sum;
      float* o = olat + (n * H + h) * r;
      std::fill(o, o + r, 0.0f);
      for (int64_t t = 0; t < len; ++t) {
        const float w = p[t] * inv;
        const float* ct = base + t * A;
#pragma omp simd
        for (int64_t j = 0; j < r; ++j) o[j] += w * ct[j];
      }
      float* y = y_v + (n * H + h) * dv;
      for (int64_t i = 0; i < dv; ++i) {
        const float* row = wkv + (h * KV + dn + i) * r;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t j = 0; j < r; ++j) acc += row[j] * o[j];
        y[i] = acc;
      }
    }
}

}  // namespace gf
