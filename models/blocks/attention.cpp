#include "models/blocks/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/math/mixed_precision.h"
#include "core/math/parallel_memory.h"
#include "core/math/parallel_worth.h"
#include "core/ops/rmsnorm.h"

namespace gf {

ops::RopeTable<float> rope_table(const TransformerSpec& s, int64_t rows) {
  // MLA: the frequencies of its qk_rope_head_dim part, which leads each assembled q/k head (models/blocks/mla.h).
  if (s.mla.on())
    return ops::make_rope_table<float>(
        rows, s.head_dim(), ops::rope_frequencies(s.mla.rope, s.rope_theta, s.rope_scaling, s.max_positions, s.seq));
  if (s.rope_scaling == ops::RopeScaling{}) return ops::make_rope_table<float>(rows, s.head_dim(), s.rope_theta);
  return ops::make_rope_table<float>(rows, s.head_dim(),
                                     ops::rope_frequencies(s.head_dim(), s.rope_theta, s.rope_scaling, s.max_positions, s.seq));
}

ops::RopeTable<float> rope_table_local(const TransformerSpec& s, int64_t rows) {
  return ops::make_rope_table<float>(rows, s.head_dim(), s.local_rope_theta);
}

AttentionBlock::AttentionBlock(const TransformerSpec& s, int tp_size, const ops::RopeTable<float>* rope,
                               const ops::FlashWorkspace<float>* flash, int64_t layer)
    : spec_(s), Hl_(s.heads / tp_size), Hkvl_(s.kv_heads / tp_size), D_(s.head_dim()), rope_(rope),
      flash_(flash) {
  window_ = layer >= 0 ? s.layer_window(layer) : s.window;
  full_bounds_ = layer >= 0 && s.mixed_windows() && window_ == 0;
  if (s.qk_norm && s.norm_offset != 0.0f) qk_w_.resize(static_cast<size_t>(2 * D_));
  qkv_ = {ParallelLinear::Kind::kColumn, s.hidden, qkv_width(), s.out_in};
  o_ = {ParallelLinear::Kind::kRow, width(), s.hidden, s.out_in};
  if (s.mla.on()) {
    if (s.qk_norm || s.qkv_bias) throw std::invalid_argument("MLA with q/k norms or q/k/v biases is not built");
    mla_ = MlaProjection(s, tp_size);
    o_ = {ParallelLinear::Kind::kRow, Hl_ * s.mla.v, s.hidden, s.out_in};
  }
}

void AttentionBlock::declare(ParamTable& t, const NameMap& names, int64_t l) const {
  const int64_t C = spec_.hidden, D = D_;
  const float std = spec_.init_std;
  const float proj_std = spec_.scaled_proj_init ? std / std::sqrt(2.0f * static_cast<float>(spec_.layers)) : std;
  auto n = [&](Role r) { return names(r, l); };
  if (spec_.mla.on()) {  // the latents' projections, then o_proj from the heads' values
    mla_.declare(t, names, l);
    t.add({n(Role::kOW), {C, spec_.heads * spec_.mla.v}, split_dim(1), Init::kNormal, proj_std, true});
    return;
  }
  if (spec_.fused_qkv_param) {  // GPT-2's c_attn: [C, 3C], each third split by heads
    t.add({n(Role::kQkvW), {C, 3 * C}, split_dim(1, 3), Init::kNormal, std, true});
    if (spec_.qkv_bias) t.add({n(Role::kQkvB), {3 * C}, split_dim(0, 3), Init::kZeros, 0.0f, false});
  } else {  // q_proj, k_proj, v_proj [out, in], split by (kv) heads, packed into one q|k|v matrix
    const int64_t widths[3] = {spec_.heads * D, spec_.kv_heads * D, spec_.kv_heads * D};
    const Role w[3] = {Role::kQW, Role::kKW, Role::kVW}, b[3] = {Role::kQB, Role::kKB, Role::kVB};
    for (int i = 0; i < 3; ++i) {
      ParamSpec p{n(w[i]), {widths[i], C}, split_dim(0), Init::kNormal, std, true};
      p.packed_with_next = i < 2;
      t.add(p);
    }
    if (spec_.qkv_bias)
      for (int i = 0; i < 3; ++i) {
        ParamSpec p{n(b[i]), {widths[i]}, split_dim(0), Init::kZeros, 0.0f, false};
        p.packed_with_next = i < 2;
        t.add(p);
      }
  }
  if (spec_.out_in) t.add({n(Role::kOW), {C, spec_.heads * D}, split_dim(1), Init::kNormal, proj_std, true});
  else t.add({n(Role::kOW), {spec_.heads * D, C}, split_dim(0), Init::kNormal, proj_std, true});
  if (spec_.linear_bias) t.add({n(Role::kOB), {C}, no_split(), Init::kZeros, 0.0f, false});
  if (spec_.qk_norm)  // whole on every rank, read by its heads alone: gradients summed over the tensor group
    for (const Role r : {Role::kQNormW, Role::kKNormW}) {
      ParamSpec p{n(r), {D}, no_split(), spec_.norm_offset != 0.0f ? Init::kZeros : Init::kOnes, 0.0f, false};
      p.grad_partial_over_tp = true;
      t.add(p);
    }
}

void AttentionBlock::bind(const Placement& t, const NameMap& names, int64_t l) {
  auto off = [&](Role r) { return t.at(names(r, l)).offset; };
  if (spec_.mla.on()) {
    mla_.bind(t, names, l);
    o_.w = off(Role::kOW);
    return;
  }
  if (spec_.fused_qkv_param) {
    qkv_.w = off(Role::kQkvW);
    qkv_.b = spec_.qkv_bias ? off(Role::kQkvB) : -1;
  } else {
    qkv_.w = off(Role::kQW);
    qkv_.b = spec_.qkv_bias ? off(Role::kQB) : -1;
    // q, k, v (and their biases) must lie back to back: one [q|k|v, C] matrix.
    const TensorPlacement &q = t.at(names(Role::kQW, l)), &k = t.at(names(Role::kKW, l)),
                          &v = t.at(names(Role::kVW, l));
    if (k.offset != q.offset + q.numel() || v.offset != k.offset + k.numel())
      throw std::logic_error("attention: q, k, v projections are not packed in the arena");
  }
  o_.w = off(Role::kOW);
  o_.b = spec_.linear_bias ? off(Role::kOB) : -1;
  q_norm_ = spec_.qk_norm ? off(Role::kQNormW) : -1;
  k_norm_ = spec_.qk_norm ? off(Role::kKNormW) : -1;
}

void AttentionBlock::bind_lora(const Placement& lora, const NameMap& names, int64_t l, AdapterSite at) {
  auto site = [&](int64_t s) { return at.site = s, at; };
  if (spec_.mla.on()) {  // latent attention's projections, then o_proj as any attention's
    mla_.bind_lora(lora, names, l, at);
    bind_adapter(o_, lora, names(Role::kOW, l), 0, 0, site(3));
    return;
  }
  if (spec_.fused_qkv_param) {
    bind_adapter(qkv_, lora, names(Role::kQkvW, l), 0, qkv_width(), site(4));
  } else {
    bind_adapter(qkv_, lora, names(Role::kQW, l), 0, Hl_ * D_, site(0));
    bind_adapter(qkv_, lora, names(Role::kKW, l), Hl_ * D_, Hkvl_ * D_, site(1));
    bind_adapter(qkv_, lora, names(Role::kVW, l), (Hl_ + Hkvl_) * D_, Hkvl_ * D_, site(2));
  }
  bind_adapter(o_, lora, names(Role::kOW, l), 0, 0, site(3));
}

std::pair<const float*, const float*> AttentionBlock::qk_weights(const BlockEnv& e) const {
  if (qk_w_.empty()) return {e.w(q_norm_), e.w(k_norm_)};
  // Gemma's (1 + w): the scale each norm multiplies by, rounded as torch's `1.0 + weight` rounds it.
  for (int64_t i = 0; i < D_; ++i) {
    qk_w_[static_cast<size_t>(i)] = spec_.norm_offset + e.w(q_norm_)[i];
    qk_w_[static_cast<size_t>(D_ + i)] = spec_.norm_offset + e.w(k_norm_)[i];
  }
  return {qk_w_.data(), qk_w_.data() + D_};
}

void AttentionBlock::qk_norm_fwd(const BlockEnv& e, float* qkv, int64_t rows, const Acts* a) const {
  const auto [wq, wk] = qk_weights(e);
  ops::head_rmsnorm_fwd(qkv, a ? a->qk_pre : nullptr, a ? a->qk_rstd : nullptr, wq, wk, Hl_, rows, Hl_ + Hkvl_, D_,
                        qkv_width(), spec_.norm_eps);
}

void AttentionBlock::qk_norm_bwd(const BlockEnv& e, float* dqkv, const Acts& a) const {
  // The weights' gradients do not depend on the offset: d(offset + w) / dw = 1.
  const auto [wq, wk] = qk_weights(e);
  ops::head_rmsnorm_bwd(dqkv, e.g(q_norm_), e.g(k_norm_), a.qk_pre, wq, wk, a.qk_rstd, Hl_, e.N, Hl_ + Hkvl_, D_,
                        qkv_width());
}

ops::AttentionShape AttentionBlock::shape(const BlockEnv& e) const {
  // Under ulysses_cp the core sees the whole sequence of this rank's 1/cp of the local heads.
  const int64_t P = e.context_parallel() ? e.cp->ulysses_size() : 1, H = Hl_ / P,
                c = e.context_parallel() ? e.cp->ulysses_rank() : 0;
  ops::AttentionShape s{e.B, e.seq_full(), H, D_, e.info.sample_offset, e.tp->rank() * Hl_ + c * H, spec_.heads};
  if (Hkvl_ != Hl_) s.kv_heads = Hkvl_ / P;
  s.key_lo = full_bounds_ ? e.key_lo_full : e.key_lo;
  s.scale = spec_.attn_scale;
  return s;
}

ops::RingShape AttentionBlock::ring_shape(const BlockEnv& e) const {
  // hybrid_cp: the ring runs on the Ulysses group's rows (U T per sample) of 1/U of the local heads.
  const int64_t U = e.cp->ulysses_size();
  ops::RingShape s;
  s.batch = e.B;
  s.rows = e.T * U;
  s.heads = Hl_ / U;
  s.kv_heads = Hkvl_ / U;
  s.head_dim = D_;
  s.seq = e.seq_full();
  s.batch_offset = e.info.sample_offset;
  s.head_offset = e.tp->rank() * Hl_ + e.cp->ulysses_rank() * s.heads;
  s.heads_global = spec_.heads;
  s.key_lo = full_bounds_ ? e.key_lo_full : e.key_lo;
  s.scale = spec_.attn_scale;
  return s;
}

std::vector<int64_t> AttentionBlock::qkv_segments() const { return {Hl_ * D_, Hkvl_ * D_, Hkvl_ * D_}; }

ops::FlashWorkspace<float> AttentionBlock::flash_ws(const BlockEnv& e) const {
  ops::FlashWorkspace<float> ws = *flash_;
  ws.bf16_products = e.cdt == ComputeDtype::kBFloat16;
  return ws;
}

void AttentionBlock::core_fwd(const BlockEnv& e, int64_t l, const Acts& a, float* y) const {
  if (spec_.flash) ops::flash_attention_fwd(y, a.lse, a.qkv, shape(e), probs_dropout(e, l), flash_ws(e));
  else ops::attention_fwd(y, a.probs, a.qkv, shape(e), probs_dropout(e, l));
}

void AttentionBlock::fwd(const BlockEnv& e, int64_t l, float* out, const float* xn, const Acts& a,
                         const void* xn_low) const {
  const int64_t W = qkv_width();
  // Context parallel: q|k|v of this rank's rows first, then exchanged into a.qkv as the whole
  // sequence of this rank's heads (parallel/context_parallel.h).
  const bool ulysses = e.context_parallel() && e.cp->ulysses(), ring = e.context_parallel() && e.cp->ring();
  const bool low = keeps_core_bf16(e);
  float* qkv = low ? e.qkv_rope : ulysses ? e.cps.local : a.qkv;
  if (low && !rope_ && !spec_.qk_norm) {  // the projection writes the kept bf16 q|k|v itself (its fp32 accumulator rounded)
    qkv_.fwd_low(e, a.qkv, xn, xn_low);
  } else {
    if (spec_.mla.on()) mla_.fwd(e, qkv, xn, a.mla, e.mla_scratch, xn_low);
    else qkv_.fwd(e, qkv, xn, xn_low);
    if (spec_.qk_norm) qk_norm_fwd(e, qkv, e.N, &a);
    if (rope_ && e.positions) ops::rope_fwd_at(qkv, qkv, *rope_, e.N, Hl_ + Hkvl_, e.positions, W);
    else if (rope_) ops::rope_fwd(qkv, qkv, *rope_, e.N, e.T, Hl_ + Hkvl_, 0, W);  // q and k heads are adjacent
    // Mixed precision: attention reads bf16 q, k, v (fp16 ones are rounded by the product already),
    // with its products accumulated and its softmax computed in fp32.
    if (low) convert_to_bf16(reinterpret_cast<bf16*>(a.qkv), qkv, e.N, W, W);
    else if (e.cdt == ComputeDtype::kBFloat16) round_to_dtype(e.cdt, qkv, e.N, W, W);
  }
  if (low) {
    ops::flash_attention_fwd(reinterpret_cast<bf16*>(a.y), a.lse, reinterpret_cast<const bf16*>(a.qkv), shape(e),
                             probs_dropout(e, l), flash_ws(e));
  } else if (ulysses) {  // the core on the gathered rows of this rank's heads (hybrid_cp: the ring across the groups)
    e.cp->seq_to_heads(qkv, a.qkv, e.B, e.T, qkv_segments(), e.cps.send, e.cps.recv);
    if (ring) e.cp->ring_fwd(a.qkv, W / e.cp->ulysses_size(), e.cps.y, a.lse, ring_shape(e), probs_dropout(e, l), e.cps.ring);
    else core_fwd(e, l, a, e.cps.y);
    e.cp->heads_to_seq(e.cps.y, a.y, e.B, e.T, {width()}, e.cps.send, e.cps.recv);
  } else if (ring) {  // ring attention on this rank's rows
    e.cp->ring_fwd(a.qkv, W, a.y, a.lse, ring_shape(e), probs_dropout(e, l), e.cps.ring);
  } else {
    core_fwd(e, l, a, a.y);
  }
  if (low) o_.fwd(e, out, nullptr, a.y);  // the kept bf16 y, the output projection's low operand
  else if (spec_.mla.on()) o_.fwd(e, out, values_of(e.N, a.y, a.y_v));
  else o_.fwd(e, out, a.y);
}

const float* AttentionBlock::values_of(int64_t N, const float* y, float* y_v) const {
  const int64_t D = D_, V = spec_.mla.v, H = Hl_;
#pragma omp parallel for schedule(static) if (parallel_worth(N * H * V))
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) std::copy_n(y + (n * H + h) * D, V, y_v + (n * H + h) * V);
  return y_v;
}

void AttentionBlock::fwd_cached(const BlockEnv& e, float* out, const float* xn, const Acts& a, const KvCache& kv,
                                const RowPositions& rp, const void* xn_low) const {
  if (spec_.mla.on()) {  // attention in the latent space against the cached latents (MlaProjection::fwd_cached)
    const float scale = spec_.attn_scale > 0.0f ? spec_.attn_scale : 1.0f / std::sqrt(static_cast<float>(D_));
    mla_.fwd_cached(e, a.y_v, xn, a.mla, e.mla_scratch, kv, rp, *rope_, scale, xn_low);
    o_.fwd(e, out, a.y_v);
    return;
  }
  const int64_t W = qkv_width(), N = e.N, D = D_, Hl = Hl_, Hk = Hkvl_, cap = kv.capacity;
  qkv_.fwd(e, a.qkv, xn, xn_low);
  if (spec_.qk_norm) qk_norm_fwd(e, a.qkv, N, nullptr);
  if (rope_) {
    // Runs of rows at consecutive positions (a prompt's rows) rotate in one call.
    for (int64_t r0 = 0; r0 < N;) {
      int64_t r1 = r0 + 1;
      while (r1 < N && rp.seq[r1] == rp.seq[r0] && rp.pos[r1] == rp.pos[r1 - 1] + 1) ++r1;
      ops::rope_fwd(a.qkv + r0 * W, a.qkv + r0 * W, *rope_, r1 - r0, r1 - r0, Hl + Hk, rp.pos[r0], W);
      r0 = r1;
    }
  }
  if (e.cdt == ComputeDtype::kBFloat16) round_to_dtype(e.cdt, a.qkv, N, W, W);
  const int64_t reach = kv.positions > 0 ? kv.positions : cap;
  int64_t keys = 0;  // (query row, key) pairs of one head, for the threads' decision below
  for (int64_t r = 0; r < N; ++r) {
    if (rp.pos[r] < 0 || rp.pos[r] >= reach)
      throw std::out_of_range("generation: position " + std::to_string(rp.pos[r]) + " outside the KV cache's " +
                              std::to_string(reach));
    keys += window_ > 0 ? std::min<int64_t>(rp.pos[r] + 1, window_) : rp.pos[r] + 1;
  }
#pragma omp parallel for schedule(static) if (parallel_worth(N * Hk * 2 * D))
  for (int64_t r = 0; r < N; ++r)
    for (int64_t g = 0; g < Hk; ++g) {
      const int64_t at = ((rp.seq[r] * Hk + g) * cap + rp.pos[r] % cap) * D;
      std::copy_n(a.qkv + r * W + (Hl + g) * D, D, kv.k + at);
      std::copy_n(a.qkv + r * W + (Hl + Hk + g) * D, D, kv.v + at);
    }
  // The core of attention_fwd (core/ops/attention.cpp) for one query row against the cached keys:
  // scaled dot products, the softmax with its maximum subtracted, the probabilities times values.
  const float scale = spec_.attn_scale > 0.0f ? spec_.attn_scale : 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t group = Hl / Hk, Y = Hl * D;
  // Per key: two dot products of D and an exp. Each (row, head) is computed alike on any thread.
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (parallel_worth(keys * Hl * (2 * D + kTranscendentalWork)))
  for (int64_t r = 0; r < N; ++r)
    for (int64_t h = 0; h < Hl; ++h) {
      float* p = kv.scores + static_cast<int64_t>(omp_get_thread_num()) * cap;
      const float* q = a.qkv + r * W + h * D;
      // Keys [t0, pos]: the whole prefix, or the sliding window's last window_ positions, position t
      // at t % cap (a rolling cache holds them in order from t0 % cap, wrapping at cap).
      const int64_t t0 = window_ > 0 ? std::max<int64_t>(0, rp.pos[r] - window_ + 1) : 0;
      const int64_t base = (rp.seq[r] * Hk + h / group) * cap * D, len = rp.pos[r] + 1 - t0, s0 = t0 % cap;
      const float *K = kv.k + base, *V = kv.v + base;
      auto row = [&](int64_t t) { return (s0 + t < cap ? s0 + t : s0 + t - cap) * D; };
      float mx = -INFINITY;
      for (int64_t t = 0; t < len; ++t) {
        float dot = 0.0f;
        const float* k = K + row(t);
#pragma omp simd reduction(+ : dot)
        for (int64_t i = 0; i < D; ++i) dot += q[i] * k[i];
        p[t] = scale * dot;
        mx = std::max(mx, p[t]);
      }
      float sum = 0.0f;
      for (int64_t t = 0; t < len; ++t) {
        p[t] = std::exp(p[t] - mx);
        sum += p[t];
      }
      const float inv = 1.0f / sum;
      float* y = a.y + r * Y + h * D;
      std::fill(y, y + D, 0.0f);
      for (int64_t t = 0; t < len; ++t) {
        const float w = p[t] * inv;
        const float* v = V + row(t);
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) y[i] += w * v[i];
      }
    }
  o_.fwd(e, out, a.y);
}

void AttentionBlock::recompute_core(const BlockEnv& e, int64_t l, const Acts& a, float* y_scratch) const {
  if (!spec_.flash && !(e.context_parallel() && e.cp->ring())) core_fwd(e, l, a, y_scratch);  // y itself is kept
}

void AttentionBlock::bwd(const BlockEnv& e, BwdPass pass, int64_t l, float* dxn, const float* dout, const float* xn,
                         const Acts& a, const Grads& g, const void* xn_low) const {
  const bool low = keeps_core_bf16(e);
  const float* y_f32 = low ? nullptr : a.y;  // y as the output projection reads it: fp32, or its kept bf16 alone
  const void* y_low = low ? a.y : nullptr;
  const bool mla = spec_.mla.on();
  if (mla) y_f32 = a.y_v;  // the output projection's input: the values' part of y
  if (pass == BwdPass::kWeight) {
    o_.bwd(e, pass, nullptr, dout, y_f32, y_low);
    if (!mla) qkv_.bwd(e, pass, nullptr, g.dqkv, xn, xn_low);  // MLA's projections finished in the input pass
    return;
  }
  o_.bwd(e, pass, g.dy, dout, y_f32, y_low);
  if (mla) {  // [N, Hl v] -> [N, Hl D] in place, each head's D - v padding columns 0 (from the last head back)
    const int64_t D = D_, V = spec_.mla.v, H = Hl_;
    for (int64_t i = e.N * H - 1; i >= 0; --i) {
      std::copy_backward(g.dy + i * V, g.dy + (i + 1) * V, g.dy + i * D + V);
      std::fill(g.dy + i * D + V, g.dy + (i + 1) * D, 0.0f);
    }
  }
  // Context parallel: the output and its gradient exchanged into head-split form, the core's
  // backward there, and the q|k|v gradient exchanged back to this rank's rows.
  const bool ulysses = e.context_parallel() && e.cp->ulysses(), ring = e.context_parallel() && e.cp->ring();
  float* dqkv = ulysses ? e.cps.dqkv : g.dqkv;
  const float *dy = g.dy, *y = a.y;
  if (ulysses) {
    e.cp->seq_to_heads(g.dy, e.cps.local, e.B, e.T, {width()}, e.cps.send, e.cps.recv);
    e.cp->seq_to_heads(a.y, e.cps.y, e.B, e.T, {width()}, e.cps.send, e.cps.recv);
    dy = e.cps.local;
    y = e.cps.y;
  }
  const int64_t W = qkv_width() / (ulysses ? e.cp->ulysses_size() : 1);  // a row of the core's q|k|v
  parallel_zero(dqkv, e.N * qkv_width());
  if (ring) e.cp->ring_bwd(dqkv, dy, a.qkv, W, y, a.lse, ring_shape(e), probs_dropout(e, l), e.cps.ring);
  else if (low)
    ops::flash_attention_bwd(dqkv, dy, reinterpret_cast<const bf16*>(a.qkv), reinterpret_cast<const bf16*>(a.y), a.lse,
                             shape(e), probs_dropout(e, l), flash_ws(e));
  else if (spec_.flash) ops::flash_attention_bwd(dqkv, dy, a.qkv, y, a.lse, shape(e), probs_dropout(e, l), flash_ws(e));
  else ops::attention_bwd(dqkv, dy, a.qkv, a.probs, shape(e), probs_dropout(e, l));
  if (ulysses) e.cp->heads_to_seq(dqkv, g.dqkv, e.B, e.T, qkv_segments(), e.cps.send, e.cps.recv);
  if (rope_ && e.positions) ops::rope_bwd_at(g.dqkv, g.dqkv, *rope_, e.N, Hl_ + Hkvl_, e.positions, qkv_width());
  else if (rope_) ops::rope_bwd(g.dqkv, g.dqkv, *rope_, e.N, e.T, Hl_ + Hkvl_, 0, qkv_width());
  if (spec_.qk_norm) qk_norm_bwd(e, g.dqkv, a);  // q_norm's and k_norm's gradients in the input pass
  // MLA: the projections' whole backward here (weights too, in an input pass: the weight pass skips them).
  if (mla) mla_.bwd(e, dxn, g.dqkv, xn, a.mla, e.mla_scratch, xn_low);
  else qkv_.bwd(e, pass, dxn, g.dqkv, xn, xn_low);
}

}  // namespace gf
