#include "models/blocks/norm.h"

#include "core/ops/layernorm.h"
#include "core/ops/rmsnorm.h"

namespace gf {

void NormBlock::declare(ParamTable& t, const std::string& weight, const std::string& bias) const {
  t.add({weight, {dim_}, no_split(), offset_ != 0.0f ? Init::kZeros : Init::kOnes, 0.0f, false});
  if (kind_ == NormKind::kLayerNorm) t.add({bias, {dim_}, no_split(), Init::kZeros, 0.0f, false});
}

void NormBlock::bind(const Placement& t, const std::string& weight, const std::string& bias) {
  w_ = t.at(weight).offset;
  b_ = kind_ == NormKind::kLayerNorm ? t.at(bias).offset : -1;
}

const float* NormBlock::scale(const BlockEnv& e) const {
  if (scale_.empty()) return e.w(w_);
  const float* w = e.w(w_);
  for (int64_t i = 0; i < dim_; ++i) scale_[static_cast<size_t>(i)] = offset_ + w[i];
  return scale_.data();
}

void NormBlock::fwd(const BlockEnv& e, float* y, const Acts& a, const float* x, int64_t rows) const {
  if (kind_ == NormKind::kLayerNorm)
    ops::layernorm_fwd(y, {a.mean, a.rstd}, x, e.w(w_), e.w(b_), rows, dim_, eps_);
  else
    ops::rmsnorm_fwd(y, a.rstd, x, scale(e), rows, dim_, eps_);
}

void NormBlock::fwd_bf16(const BlockEnv& e, bf16* y, const Acts& a, const float* x, int64_t rows) const {
  if (kind_ == NormKind::kLayerNorm)
    ops::layernorm_fwd_bf16(y, {a.mean, a.rstd}, x, e.w(w_), e.w(b_), rows, dim_, eps_);
  else
    ops::rmsnorm_fwd_bf16(y, a.rstd, x, scale(e), rows, dim_, eps_);
}

void NormBlock::bwd(const BlockEnv& e, BwdPass pass, float* dx, const float* dy, const float* x, const Acts& a,
                    int64_t rows) const {
  if (e.frozen()) {  // LoRA: the weights are frozen, only the input gradient flows
    if (pass == BwdPass::kWeight) return;
    pass = BwdPass::kInput;
  }
  if (kind_ == NormKind::kLayerNorm) {
    const ops::LayerNormCache<float> c{a.mean, a.rstd};
    if (pass == BwdPass::kBoth) ops::layernorm_bwd(dx, e.g(w_), e.g(b_), dy, x, e.w(w_), c, rows, dim_);
    if (pass == BwdPass::kInput) ops::layernorm_bwd_input(dx, dy, x, e.w(w_), c, rows, dim_);
    if (pass == BwdPass::kWeight) ops::layernorm_bwd_weight(e.g(w_), e.g(b_), dy, x, c, rows, dim_);
  } else {
    if (pass == BwdPass::kBoth) ops::rmsnorm_bwd(dx, e.g(w_), dy, x, scale(e), a.rstd, rows, dim_);
    if (pass == BwdPass::kInput) ops::rmsnorm_bwd_input(dx, dy, x, scale(e), a.rstd, rows, dim_);
    if (pass == BwdPass::kWeight) ops::rmsnorm_bwd_weight(e.g(w_), dy, x, a.rstd, rows, dim_);
  }
}

}  // namespace gf
