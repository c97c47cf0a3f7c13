#include "models/blocks/mlp.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/ops/activation.h"
#include "core/ops/swiglu.h"

namespace gf {

MlpBlock::MlpBlock(const TransformerSpec& s, int tp_size) : spec_(s), Fl_(s.ffn / tp_size) {
  up_ = {ParallelLinear::Kind::kColumn, s.hidden, up_width(), s.out_in};
  down_ = {ParallelLinear::Kind::kRow, Fl_, s.hidden, s.out_in};
}

void MlpBlock::declare(ParamTable& t, const NameMap& names, int64_t l) const {
  const int64_t C = spec_.hidden, F = spec_.ffn;
  const float std = spec_.init_std;
  const float proj_std = spec_.scaled_proj_init ? std / std::sqrt(2.0f * static_cast<float>(spec_.layers)) : std;
  auto n = [&](Role r) { return names(r, l); };
  if (gated_mlp(spec_.mlp)) {  // gate_proj, up_proj [F, C] packed: one [gate | up, C] matrix
    ParamSpec gate{n(Role::kGateW), {F, C}, split_dim(0), Init::kNormal, std, true};
    gate.packed_with_next = true;
    t.add(gate);
    t.add({n(Role::kUpW), {F, C}, split_dim(0), Init::kNormal, std, true});
  } else {
    t.add({n(Role::kFcW), {C, F}, split_dim(1), Init::kNormal, std, true});
    if (spec_.linear_bias) t.add({n(Role::kFcB), {F}, split_dim(0), Init::kZeros, 0.0f, false});
  }
  if (spec_.out_in) t.add({n(Role::kDownW), {C, F}, split_dim(1), Init::kNormal, proj_std, true});
  else t.add({n(Role::kDownW), {F, C}, split_dim(0), Init::kNormal, proj_std, true});
  if (spec_.linear_bias) t.add({n(Role::kDownB), {C}, no_split(), Init::kZeros, 0.0f, false});
}

void MlpBlock::bind(const Placement& t, const NameMap& names, int64_t l) {
  auto off = [&](Role r) { return t.at(names(r, l)).offset; };
  if (gated_mlp(spec_.mlp)) {
    up_.w = off(Role::kGateW);
    const TensorPlacement& gate = t.at(names(Role::kGateW, l));
    if (off(Role::kUpW) != gate.offset + gate.numel())
      throw std::logic_error("mlp: gate and up projections are not packed in the arena");
  } else {
    up_.w = off(Role::kFcW);
    up_.b = spec_.linear_bias ? off(Role::kFcB) : -1;
  }
  down_.w = off(Role::kDownW);
  down_.b = spec_.linear_bias ? off(Role::kDownB) : -1;
}

void MlpBlock::bind_lora(const Placement& lora, const NameMap& names, int64_t l, AdapterSite at) {
  auto site = [&](int64_t s) { return at.site = s, at; };
  if (gated_mlp(spec_.mlp)) {
    bind_adapter(up_, lora, names(Role::kGateW, l), 0, Fl_, site(5));
    bind_adapter(up_, lora, names(Role::kUpW, l), Fl_, Fl_, site(6));
  } else {
    bind_adapter(up_, lora, names(Role::kFcW, l), 0, Fl_, site(7));
  }
  bind_adapter(down_, lora, names(Role::kDownW, l), 0, 0, site(8));
}

void MlpBlock::activation_fwd(const BlockEnv& e, const Acts& a) const {
  if (keeps_bf16(e.cdt)) {
    auto* act = reinterpret_cast<bf16*>(a.act);
    const auto* h = reinterpret_cast<const bf16*>(a.h);
    if (spec_.mlp == MlpKind::kSwiGLU) ops::swiglu_fwd_bf16(act, h, h + Fl_, e.N, Fl_, 2 * Fl_);
    else if (spec_.mlp == MlpKind::kGeGLU) ops::glu_fwd_bf16(spec_.act, act, h, h + Fl_, e.N, Fl_, 2 * Fl_);
    else ops::activation_fwd_bf16(spec_.act, act, h, e.N * Fl_);
    return;
  }
  if (spec_.mlp == MlpKind::kSwiGLU) ops::swiglu_fwd(a.act, a.h, a.h + Fl_, e.N, Fl_, 2 * Fl_);
  else if (spec_.mlp == MlpKind::kGeGLU) ops::glu_fwd(spec_.act, a.act, a.h, a.h + Fl_, e.N, Fl_, 2 * Fl_);
  else ops::activation_fwd(spec_.act, a.act, a.h, e.N * Fl_);
}

void MlpBlock::fwd(const BlockEnv& e, float* out, const float* xn, const Acts& a, const void* xn_low) const {
  if (!keeps_bf16(e.cdt)) {
    up_.fwd(e, a.h, xn, xn_low);
    activation_fwd(e, a);
    down_.fwd(e, out, a.act);
    return;
  }
  up_.fwd_low(e, a.h, xn, xn_low);
  activation_fwd(e, a);
  down_.fwd(e, out, nullptr, a.act);
}

void MlpBlock::bwd(const BlockEnv& e, BwdPass pass, float* dxn, const float* dout, const float* xn, const Acts& a,
                   const Grads& g, const void* xn_low) const {
  // The down projection's input: the kept activation, fp32 or (keeps_bf16) its bf16 copy alone.
  const bool low = keeps_bf16(e.cdt);
  const float* act = low ? nullptr : a.act;
  const void* act_low = low ? a.act : nullptr;
  if (pass == BwdPass::kWeight) {
    down_.bwd(e, pass, nullptr, dout, act, act_low);
    if (low) up_.bwd(e, pass, nullptr, nullptr, xn, xn_low, g.dh);
    else up_.bwd(e, pass, nullptr, g.dh, xn, xn_low);
    return;
  }
  if (low) {
    // Autocast's backward: the down projection's input gradient and the activation's are bf16 (written
    // rounded), and the up projection's products and bias gradient read the bf16 dh.
    auto* dact = reinterpret_cast<bf16*>(g.dact);
    auto* dh = reinterpret_cast<bf16*>(g.dh);
    const auto* h = reinterpret_cast<const bf16*>(a.h);
    down_.bwd(e, pass, nullptr, dout, act, act_low, nullptr, dact);
    if (spec_.mlp == MlpKind::kSwiGLU) ops::swiglu_bwd_bf16(dh, dh + Fl_, dact, h, h + Fl_, e.N, Fl_, 2 * Fl_);
    else if (spec_.mlp == MlpKind::kGeGLU) ops::glu_bwd_bf16(spec_.act, dh, dh + Fl_, dact, h, h + Fl_, e.N, Fl_, 2 * Fl_);
    else ops::activation_bwd_bf16(spec_.act, dh, dact, h, e.N * Fl_);
    up_.bwd(e, pass, dxn, nullptr, xn, xn_low, dh);
    return;
  }
  down_.bwd(e, pass, g.dact, dout, act, act_low);
  // The activation's backward writes dh (accumulate false): no pass zeroes it first.
  constexpr bool kWrite = false;
  if (spec_.mlp == MlpKind::kSwiGLU) {
    ops::swiglu_bwd(g.dh, g.dh + Fl_, g.dact, a.h, a.h + Fl_, e.N, Fl_, 2 * Fl_, kWrite);
  } else if (spec_.mlp == MlpKind::kGeGLU) {
    ops::glu_bwd(spec_.act, g.dh, g.dh + Fl_, g.dact, a.h, a.h + Fl_, e.N, Fl_, 2 * Fl_, kWrite);
  } else {
    ops::activation_bwd(spec_.act, g.dh, g.dact, a.h, e.N * Fl_, kWrite);
  }
  up_.bwd(e, pass, dxn, g.dh, xn, xn_low);
}

}  // namespace gf
