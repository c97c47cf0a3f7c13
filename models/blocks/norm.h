// Norm block: LayerNorm (weight and bias; GPT-2) or RMSNorm (weight only; Llama) over the hidden
// dimension of this rank's residual rows.
#pragma once
#include <string>
#include <vector>

#include "core/params/placement.h"
#include "models/blocks/env.h"
#include "models/blocks/spec.h"

namespace gf {

class NormBlock {
 public:
  struct Acts {
    float* mean = nullptr;  // LayerNorm only
    float* rstd = nullptr;
  };
  NormBlock() = default;
  // offset (RMSNorm): the norm scales by offset + w (Gemma's 1 + w, its weights starting at 0).
  NormBlock(NormKind kind, int64_t dim, float eps, float offset = 0.0f)
      : kind_(kind), dim_(dim), eps_(eps), offset_(offset) {
    if (offset_ != 0.0f) scale_.resize(static_cast<size_t>(dim_));
  }

  void declare(ParamTable& t, const std::string& weight, const std::string& bias) const;
  void bind(const Placement& t, const std::string& weight, const std::string& bias);

  void fwd(const BlockEnv& e, float* y, const Acts& a, const float* x, int64_t rows) const;
  // y written as its bf16 rounding alone (ops::layernorm_fwd_bf16 / rmsnorm_fwd_bf16): the output a bf16
  // step keeps when only bf16 products read it (TransformerLayer::ln1_keeps_bf16).
  void fwd_bf16(const BlockEnv& e, bf16* y, const Acts& a, const float* x, int64_t rows) const;
  // dx += d(input) (kBoth, kInput); dw, db += (kBoth, kWeight).
  void bwd(const BlockEnv& e, BwdPass pass, float* dx, const float* dy, const float* x, const Acts& a,
           int64_t rows) const;
  int64_t first_offset() const { return w_; }

 private:
  // The weight as the norm scales by it: the parameter, or offset + w (computed into scale_ per call, rounded as
  // torch's `1.0 + weight`); its gradient is the parameter's (d(offset + w) / dw = 1).
  const float* scale(const BlockEnv& e) const;
  NormKind kind_ = NormKind::kLayerNorm;
  int64_t dim_ = 0;
  float eps_ = 1e-5f;
  float offset_ = 0.0f;
  mutable std::vector<float> scale_;
  int64_t w_ = 0, b_ = -1;
};

}  // namespace gf
