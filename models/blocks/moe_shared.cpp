// MoeBlock's shared expert (TransformerSpec::moe.shared_ffn > 0, Qwen2-MoE): a SwiGLU MLP every token runs beside
// the routed experts, split over the tensor group like the dense MLP, its output times sigmoid(x . w) when gated.
#include <cmath>

#include "core/math/parallel_worth.h"
#include "models/blocks/moe.h"

namespace gf {

NameMap MoeBlock::shared_names(const NameMap& names) const {
  return [names](Role r, int64_t l) {
    switch (r) {
      case Role::kGateW: return names(Role::kSharedGateProjW, l);
      case Role::kUpW: return names(Role::kSharedUpProjW, l);
      case Role::kDownW: return names(Role::kSharedDownProjW, l);
      default: return names(r, l);
    }
  };
}

// Hugging Face's Qwen2MoeSparseMoeBlock: final = routed + sigmoid(shared_expert_gate(x)) * shared_expert(x), the
// gate's dot product in float32, the product with the shared output rounded before the add.
void MoeBlock::shared_fwd(const BlockEnv& e, float* out, const float* xn, const Acts& a) const {
  const int64_t Nl = e.Nl, C = d_.C;
  shared_.fwd(e, a.shared_out, xn, MlpBlock::Acts{a.shared_h, a.shared_act});
  const float* wg = shared_gate_ >= 0 ? e.w(shared_gate_) : nullptr;
  // LoRA on the gate: its part of each row's logit, held in shared_score until the row's sigmoid replaces it.
  const bool gate_lora = wg && shared_gate_lora_.a >= 0;
  if (gate_lora) rows_lora_fwd(e, shared_gate_lora_, 1, a.shared_score, 0.0f, xn, Nl);
#pragma omp parallel for schedule(static) if (parallel_worth(Nl * C))
  for (int64_t t = 0; t < Nl; ++t) {
    float s = 1.0f;
    if (wg) {
      float z = 0.0f;
      for (int64_t c = 0; c < C; ++c) z += xn[t * C + c] * wg[c];
      if (gate_lora) z += a.shared_score[t];
      s = 1.0f / (1.0f + std::exp(-z));
    }
    a.shared_score[t] = s;
    float* o = out + t * C;
    const float* h = a.shared_out + t * C;
    for (int64_t c = 0; c < C; ++c) o[c] += s * h[c];
  }
}

// d shared_out = s dout; the gate: ds = dout . shared_out (this rank's whole rows), dz = ds s (1 - s),
// dw += sum_t dz x_t (this rank's rows: under sequence parallel the gradient sync sums the replicated w),
// dx += dz w plus the shared MLP's input gradient.
void MoeBlock::shared_bwd(const BlockEnv& e, float* dxn, const float* dout, const float* xn, const Acts& a,
                          const Scratch& sc) const {
  const int64_t Nl = e.Nl, C = d_.C;
  const float* wg = shared_gate_ >= 0 ? e.w(shared_gate_) : nullptr;
  float* dz = sc.shared_dz;  // [Nl]: d loss / d (x . w)
#pragma omp parallel for schedule(static) if (parallel_worth(Nl * C))
  for (int64_t t = 0; t < Nl; ++t) {
    const float s = a.shared_score[t];
    const float* g = dout + t * C;
    const float* h = a.shared_out + t * C;
    float* d = sc.shared_dout + t * C;
    float ds = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      ds += g[c] * h[c];
      d[c] = s * g[c];
    }
    if (wg) dz[t] = ds * s * (1.0f - s);
  }
  shared_.bwd(e, BwdPass::kBoth, sc.shared_dx, sc.shared_dout, xn, MlpBlock::Acts{a.shared_h, a.shared_act},
              MlpBlock::Grads{sc.shared_dact, sc.shared_dh});
  if (wg && !e.frozen()) {  // LoRA: a frozen gate passes its input gradient alone
    float* dw = e.g(shared_gate_);
    for (int64_t c = 0; c < C; ++c) {  // each column summed in row order
      float acc = 0.0f;
      for (int64_t t = 0; t < Nl; ++t) acc += dz[t] * xn[t * C + c];
      dw[c] += acc;
    }
  }
#pragma omp parallel for schedule(static) if (parallel_worth(Nl * C))
  for (int64_t t = 0; t < Nl; ++t)
    for (int64_t c = 0; c < C; ++c)
      dxn[t * C + c] += sc.shared_dx[t * C + c] + (wg ? dz[t] * wg[c] : 0.0f);
  if (wg && shared_gate_lora_.a >= 0) rows_lora_bwd(e, shared_gate_lora_, 1, dxn, dz, xn, Nl);
}

}  // namespace gf
