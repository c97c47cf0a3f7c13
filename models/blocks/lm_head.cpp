#include "models/blocks/lm_head.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/math/gemm.h"
#include "core/math/mixed_precision.h"
#include "core/math/parallel_memory.h"
#include "core/ops/cross_entropy.h"
#include "models/lora.h"

namespace gf {

void LmHeadBlock::declare_norm(ParamTable& t, const NameMap& names) const {
  norm_.declare(t, names(Role::kFinalNormW, -1), spec_.norm == NormKind::kLayerNorm ? names(Role::kFinalNormB, -1) : std::string());
}

void LmHeadBlock::declare_head(ParamTable& t, const NameMap& names) const {
  if (!spec_.tied_head)
    t.add({names(Role::kLmHead, -1), {spec_.vocab, spec_.hidden}, vocab_rows(), Init::kNormal, spec_.init_std, true});
}

void LmHeadBlock::bind(const Placement& t, const NameMap& names) {
  norm_.bind(t, names(Role::kFinalNormW, -1), spec_.norm == NormKind::kLayerNorm ? names(Role::kFinalNormB, -1) : std::string());
  w_ = t.at(names(spec_.tied_head ? Role::kEmbed : Role::kLmHead, -1)).offset;
}

void LmHeadBlock::bind_saved(const Placement& adapters, const NameMap& names) {
  if (const TensorPlacement* t = adapters.find(lora_head_name(names))) {  // (a tied head's copy too)
    w_ = t->offset;
    saved_ = true;
  }
}

double LmHeadBlock::fwd(const BlockEnv& e, const float* x, const int32_t* targets, const Acts& a,
                        const VocabChunks* chunks) const {
  const int64_t C = spec_.hidden, Vl = v_.local;
  norm_.fwd(e, a.ln, a.norm, x, e.Nl);
  const float* h = v_.parallel ? e.tp->gather_rows(a.ln, e.gather, C) : a.ln;
  const int32_t* tgt = local_targets(e, targets);
  // logits [rows, Vl] = h [rows, C] @ W[Vl, C]^T (padded rows of W are zero and masked below)
  if (chunk_ > 0) {
    if (!e.frozen() || saved_ || e.cdt != ComputeDtype::kFloat32 || v_.parallel || (chunks && chunks->count() > 0))
      throw std::logic_error("lm head: the chunked loss is built for a frozen fp32 head, whole on this rank");
    chunked_loss_fwd(e, tgt, a);
  } else if (chunks && chunks->count() > 0) {
    for (size_t c = 0; c < chunks->count(); ++c) {
      const int64_t v0 = chunks->at[c], vc = chunks->at[c + 1] - v0;
      chunks->enter(c);
      const Weight w = e.wt(w_ + v0 * C, false);
      gemm_mixed(e.cdt, Trans::kNo, Trans::kYes, rows_, vc, C, 1.0f, h, nullptr, C, w.f32, w.low, C, 0.0f,
                 a.logits + v0, Vl, true);
      chunks->leave(c);
    }
  } else {
    const Weight w = head_weight(e);
    gemm_mixed(e.cdt, Trans::kNo, Trans::kYes, rows_, Vl, C, 1.0f, h, nullptr, C, w.f32, w.low, C, 0.0f, a.logits, Vl,
               true);
  }
  if (chunk_ > 0) {
    // (the losses are made)
  } else if (v_.parallel) {
    vocab_parallel_cross_entropy_fwd(*e.tp, a.losses, a.lse, a.logits, tgt, rows_, Vl, v_.begin, v_.valid, e.dfull);
  } else {
    ops::cross_entropy_fwd(a.losses, a.lse, a.logits, tgt, rows_, Vl, v_.valid);
  }
  double sum = 0.0;
  for (int64_t i = 0; i < rows_; ++i) sum += a.losses[i];
  // Replicated head under SP: each rank has the loss of its own rows.
  if (!v_.parallel && e.tp->sequence_parallel()) e.tp->allreduce_sum(&sum, 1);
  return sum;
}

// Per row r with maximum m (so far), denominator s = sum_v exp(z_v - m) and acc = sum_v exp(z_v - m) W_v: each
// chunk's logits z = h W_c^T raise m to m' (both sums scaled by exp(m - m')), then add theirs. At the end
// lse = m + log s, the loss lse - z_target, and the loss's gradient with respect to h is acc / s - W_target
// (softmax minus the one-hot, times W), which bwd scales by grad_scale. Rows with a negative target: loss 0,
// gradient 0, as ops::cross_entropy's.
void LmHeadBlock::chunked_loss_fwd(const BlockEnv& e, const int32_t* tgt, const Acts& a) const {
  using Row = Eigen::Map<Eigen::ArrayXf>;
  const int64_t C = spec_.hidden, V = v_.valid, rows = rows_;
  const float* h = a.ln;
  const float* W = head_weight(e).f32;
  float *m = a.lse, *s = a.sum, *zt = a.losses, *acc = a.dh, *z = a.logits;
  std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
  std::fill(s, s + rows, 0.0f);
  std::fill(zt, zt + rows, 0.0f);
  for (int64_t v0 = 0; v0 < V; v0 += chunk_) {
    const int64_t vc = std::min(chunk_, V - v0);
    gemm(Trans::kNo, Trans::kYes, rows, vc, C, 1.0f, h, C, W + v0 * C, C, 0.0f, z, vc);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      Row x(z + r * vc, vc);
      if (const int64_t t = tgt[r] - v0; t >= 0 && t < vc) zt[r] = x[t];
      const float mx = std::max(m[r], x.maxCoeff()), scale = std::exp(m[r] - mx);  // exp(-inf) = 0 on the first
      x = (x - mx).exp();
      s[r] = s[r] * scale + x.sum();
      if (v0 > 0 && scale != 1.0f) Row(acc + r * C, C) *= scale;
      m[r] = mx;
    }
    gemm(Trans::kNo, Trans::kNo, rows, C, vc, 1.0f, z, vc, W + v0 * C, C, v0 == 0 ? 0.0f : 1.0f, acc, C);
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    Row d(acc + r * C, C);
    a.lse[r] = m[r] + std::log(s[r]);
    if (tgt[r] < 0) {
      a.losses[r] = 0.0f;
      d.setZero();
    } else {
      a.losses[r] = a.lse[r] - zt[r];
      d = d / s[r] - Eigen::Map<const Eigen::ArrayXf>(W + tgt[r] * C, C);
    }
  }
}

void LmHeadBlock::logits_fwd(const BlockEnv& e, float* logits, float* ln, const NormBlock::Acts& norm, const float* x,
                             int64_t rows) const {
  const int64_t C = spec_.hidden, Vl = v_.local;
  norm_.fwd(e, ln, norm, x, rows);
  const Weight w = head_weight(e);
  gemm_mixed(e.cdt, Trans::kNo, Trans::kYes, rows, Vl, C, 1.0f, ln, nullptr, C, w.f32, w.low, C, 0.0f, logits, Vl, true);
}

// The fused backward one vocabulary chunk at a time, from the last to the first: dh sums the chunks'
// products in that order (beta 0 for the first), each chunk's weight gradient is complete when it
// is left. The logits' gradient is made whole first (fp32: in place; low precision: the column-chunked
// copy, whose column chunks a vocabulary chunk may cut: the products then read a strided part).
void LmHeadBlock::chunked_bwd(const BlockEnv& e, float* dh, const float* h, float grad_scale, const int32_t* targets,
                              const Acts& a, const VocabChunks& chunks) const {
  const int64_t C = spec_.hidden, Vl = v_.local, rows = rows_;
  float* dw = e.g(w_);
  const int32_t* tgt = local_targets(e, targets);
  bool first = true;
  if (e.cdt == ComputeDtype::kFloat32) {
    vocab_parallel_cross_entropy_bwd(a.logits, a.lse, tgt, rows, Vl, v_.begin, v_.valid, grad_scale);
    for (size_t c = chunks.count(); c-- > 0;) {
      const int64_t v0 = chunks.at[c], vc = chunks.at[c + 1] - v0;
      chunks.enter(c);
      const Weight w = e.wt(w_ + v0 * C, false);
      gemm(Trans::kNo, Trans::kNo, rows, C, vc, 1.0f, a.logits + v0, Vl, w.f32, C, first ? 0.0f : 1.0f, dh, C);
      gemm(Trans::kYes, Trans::kNo, vc, C, rows, 1.0f, a.logits + v0, Vl, h, C, 1.0f, dw + v0 * C, C);
      first = false;
      chunks.leave(c);
    }
    return;
  }
  const ColumnChunks ch = column_chunks(rows, Vl);
  const int64_t eb = low_copy_element_bytes(e.cdt);
  cross_entropy_bwd_low(e.cdt, a.dlogits_low, ch, a.logits, a.lse, tgt, v_.valid, grad_scale, v_.begin);
  const void* h_low = low_copy_scratch(e.cdt, h, rows, C, 1);
  for (size_t c = chunks.count(); c-- > 0;) {
    const int64_t v0 = chunks.at[c], v1 = chunks.at[c + 1];
    chunks.enter(c);
    const auto* w_low = static_cast<const std::byte*>(e.wt(w_, false).low);
    for (int64_t j = 0; j < ch.count(); ++j) {
      const int64_t k0 = ch.begin(j), kc = ch.cols(j), lo = std::max(v0, k0), hi = std::min(v1, k0 + kc);
      if (lo >= hi) continue;
      const std::byte* dl = a.dlogits_low + (ch.offset(j) + (lo - k0)) * eb;
      gemm_mixed(e.cdt, Trans::kNo, Trans::kNo, rows, C, hi - lo, 1.0f, nullptr, dl, kc, nullptr, w_low + lo * C * eb,
                 C, first ? 0.0f : 1.0f, dh, C, false);
      gemm_mixed(e.cdt, Trans::kYes, Trans::kNo, hi - lo, C, rows, 1.0f, nullptr, dl, kc, nullptr, h_low, C, 1.0f,
                 dw + lo * C, C, false);
      first = false;
    }
    chunks.leave(c);
  }
  if (e.cdt == ComputeDtype::kFloat16) round_to_dtype(e.cdt, dh, rows, C, C);
}

void LmHeadBlock::bwd(const BlockEnv& e, BwdPass pass, float* dx, float grad_scale, const float* x,
                      const int32_t* targets, const Acts& a, const VocabChunks* chunks) const {
  const int64_t C = spec_.hidden, Vl = v_.local, rows = rows_;
  const Weight w = head_weight(e);
  float* dw = weight_grad(e);
  // LoRA: the head is frozen (its input gradient alone, in the input pass or the fused one) unless modules_to_save
  // trains its copy.
  const bool input = pass != BwdPass::kWeight, weight = pass != BwdPass::kInput && dw != nullptr;
  // The rows the forward multiplied: under vocabulary-parallel SP the gathered ones, which the
  // gather buffer still holds right after the forward (fused backward) and are gathered again for
  // a weight pass run apart.
  const float* h = a.ln;
  if (v_.parallel && e.tp->sequence_parallel())
    h = pass == BwdPass::kBoth ? e.gather : (weight ? e.tp->gather_rows(a.ln, e.gather, C) : nullptr);
  // Vocabulary-parallel: a column-parallel layer with W^T, so dh is a partial sum over the slices.
  float* dh = v_.parallel ? e.dfull : a.dln;
  if (chunk_ > 0) {  // the forward made the input gradient of the summed loss (chunked_loss_fwd)
    if (!e.frozen() || saved_) throw std::logic_error("lm head: the chunked loss is built for a frozen head");
    if (input) {
      const float* g = a.dh;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < rows * C; ++i) dh[i] = grad_scale * g[i];
    }
  } else if (chunks && chunks->count() > 0) {
    if (!input || !weight) throw std::logic_error("lm head: a vocabulary-chunked backward runs its two passes fused");
    if (e.frozen()) throw std::logic_error("lm head: a frozen head is not cut into vocabulary chunks");
    chunked_bwd(e, dh, h, grad_scale, targets, a, *chunks);
  } else if (e.cdt == ComputeDtype::kFloat32) {
    if (input) {
      vocab_parallel_cross_entropy_bwd(a.logits, a.lse, local_targets(e, targets), rows, Vl, v_.begin, v_.valid,
                                       grad_scale);
      gemm(Trans::kNo, Trans::kNo, rows, C, Vl, 1.0f, a.logits, Vl, w.f32, C, 0.0f, dh, C);
    }
    if (weight) gemm(Trans::kYes, Trans::kNo, Vl, C, rows, 1.0f, a.logits, Vl, h, C, 1.0f, dw, C);
  } else {
    // The logits' gradient goes straight from the fp32 logits to its low-precision copy, in column
    // chunks: both products run chunk by chunk over the vocabulary (K of dh, rows of dW), each on
    // dense operands, and dh accumulates over the chunks in fp32.
    const ColumnChunks ch = column_chunks(rows, Vl);
    const int64_t eb = low_copy_element_bytes(e.cdt);
    const auto* w_low = static_cast<const std::byte*>(w.low);
    if (input)
      cross_entropy_bwd_low(e.cdt, a.dlogits_low, ch, a.logits, a.lse, local_targets(e, targets), v_.valid,
                            grad_scale, v_.begin);
    const void* h_low = weight ? low_copy_scratch(e.cdt, h, rows, C, 1) : nullptr;
    for (int64_t c = 0; c < ch.count(); ++c) {
      const int64_t k0 = ch.begin(c), kc = ch.cols(c);
      const std::byte* dl = a.dlogits_low + ch.offset(c) * eb;
      if (input)
        gemm_mixed(e.cdt, Trans::kNo, Trans::kNo, rows, C, kc, 1.0f, nullptr, dl, kc, nullptr, w_low + k0 * C * eb, C,
                   c == 0 ? 0.0f : 1.0f, dh, C, false);
      if (weight)
        gemm_mixed(e.cdt, Trans::kYes, Trans::kNo, kc, C, rows, 1.0f, nullptr, dl, kc, nullptr, h_low, C, 1.0f,
                   dw + k0 * C, C, false);
    }
    // fp16: dh is an activation, rounded once its sum over the chunks is complete (as gemm_mixed's round_c).
    if (input && e.cdt == ComputeDtype::kFloat16) round_to_dtype(e.cdt, dh, rows, C, C);
  }
  if (input) {
    if (v_.parallel) e.tp->reduce_rows(e.dfull, a.dln, C);
    parallel_zero(dx, e.Nl * C);
  }
  norm_.bwd(e, pass, dx, a.dln, x, a.norm, e.Nl);
}

}  // namespace gf
