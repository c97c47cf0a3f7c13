#include "models/blocks/transformer_layer.h"

#include "core/math/parallel_memory.h"
#include "core/math/parallel_worth.h"

#include <stdexcept>

namespace gf {
namespace {

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// A kept norm output as the products take it: the fp32 buffer, or (low) the buffer holding its bf16 copy alone.
struct NormOut {
  const float* f32 = nullptr;
  const void* low = nullptr;
  NormOut(const float* buf, bool is_low) : f32(is_low ? nullptr : buf), low(is_low ? buf : nullptr) {}
};

void norm_fwd(const NormBlock& n, const BlockEnv& e, float* y, const NormBlock::Acts& a, const float* x, int64_t rows,
              bool low) {
  if (low) n.fwd_bf16(e, reinterpret_cast<bf16*>(y), a, x, rows);
  else n.fwd(e, y, a, x, rows);
}

}  // namespace

TransformerLayer::TransformerLayer(const TransformerSpec& s, int tp_size, int64_t layer,
                                   const ops::RopeTable<float>* rope, const ops::FlashWorkspace<float>* flash,
                                   int ep_size, int64_t rows, const ops::RopeTable<float>* rope_local)
    : spec_(s), layer_(layer), norm1_(s.norm, s.hidden, s.norm_eps, s.norm_offset),
      norm2_(s.norm, s.hidden, s.norm_eps, s.norm_offset),
      attn_(s, tp_size, s.local_rope(layer) && rope_local ? rope_local : rope, flash, layer), mlp_(s, tp_size) {
  if (s.local_rope(layer) && rope && !rope_local)
    throw std::logic_error("TransformerLayer: a windowed layer of its own RoPE base without its table");
  if (s.sandwich_norm) {
    if (s.norm != NormKind::kRMSNorm) throw std::invalid_argument("sandwich norms are built for RMSNorm models only");
    post_attn_ = NormBlock(s.norm, s.hidden, s.norm_eps, s.norm_offset);
    post_mlp_ = NormBlock(s.norm, s.hidden, s.norm_eps, s.norm_offset);
  }
  if (is_moe()) moe_ = MoeBlock(s, tp_size, ep_size, layer, rows > 0 ? rows : s.seq);
}

namespace {
// RMSNorm has no bias: its name is asked only of LayerNorm.
std::string norm_bias(const TransformerSpec& s, const NameMap& names, Role r, int64_t l) {
  return s.norm == NormKind::kLayerNorm ? names(r, l) : std::string();
}
}  // namespace

void TransformerLayer::declare(ParamTable& t, const NameMap& names) const {
  norm1_.declare(t, names(Role::kNorm1W, layer_), norm_bias(spec_, names, Role::kNorm1B, layer_));
  attn_.declare(t, names, layer_);
  if (spec_.sandwich_norm) post_attn_.declare(t, names(Role::kPostAttnNormW, layer_), "");
  norm2_.declare(t, names(Role::kNorm2W, layer_), norm_bias(spec_, names, Role::kNorm2B, layer_));
  if (is_moe()) moe_.declare(t, names);
  else mlp_.declare(t, names, layer_);
  if (spec_.sandwich_norm) post_mlp_.declare(t, names(Role::kPostMlpNormW, layer_), "");
}

void TransformerLayer::bind(const Placement& t, const NameMap& names) {
  norm1_.bind(t, names(Role::kNorm1W, layer_), norm_bias(spec_, names, Role::kNorm1B, layer_));
  attn_.bind(t, names, layer_);
  if (spec_.sandwich_norm) post_attn_.bind(t, names(Role::kPostAttnNormW, layer_), "");
  norm2_.bind(t, names(Role::kNorm2W, layer_), norm_bias(spec_, names, Role::kNorm2B, layer_));
  if (is_moe()) moe_.bind(t, names);
  else mlp_.bind(t, names, layer_);
  if (spec_.sandwich_norm) post_mlp_.bind(t, names(Role::kPostMlpNormW, layer_), "");
}

void TransformerLayer::fwd(const BlockEnv& e, const float* x, const Acts& a, const std::function<void()>* between) const {
  const int64_t Nl = e.Nl, C = spec_.hidden;
  const NormOut in1(a.ln1, ln1_keeps_bf16(e.cdt)), in2(a.ln2, ln2_keeps_bf16(e.cdt));
  const bool post = spec_.sandwich_norm;
  norm_fwd(norm1_, e, a.ln1, a.n1, x, Nl, in1.low != nullptr);
  attn_.fwd(e, layer_, post ? a.attn_out : a.res2, in1.f32, a.attn, in1.low);
  if (post) post_attn_.fwd(e, a.res2, a.n3, a.attn_out, Nl);
  e.dropout_rows(a.res2, e.dropout(layer_, kDropAttnOut, spec_.hidden_dropout), C);
  add_inplace(a.res2, x, Nl * C);
  if (between) (*between)();
  norm_fwd(norm2_, e, a.ln2, a.n2, a.res2, Nl, in2.low != nullptr);
  float* mlp_out = post ? a.mlp_out : a.out;
  if (is_moe()) moe_.fwd(e, mlp_out, a.ln2, a.moe, a.moe_sc);
  else mlp_.fwd(e, mlp_out, in2.f32, a.mlp, in2.low);
  if (post) post_mlp_.fwd(e, a.out, a.n4, a.mlp_out, Nl);
  e.dropout_rows(a.out, e.dropout(layer_, kDropMlpOut, spec_.hidden_dropout), C);
  add_inplace(a.out, a.res2, Nl * C);
}

void TransformerLayer::fwd_cached(const BlockEnv& e, const float* x, const Acts& a, const KvCache& kv,
                                  const RowPositions& rp) const {
  const int64_t N = e.N, C = spec_.hidden;
  const NormOut in1(a.ln1, ln1_keeps_bf16(e.cdt)), in2(a.ln2, ln2_keeps_bf16(e.cdt));
  const bool post = spec_.sandwich_norm;
  norm_fwd(norm1_, e, a.ln1, a.n1, x, N, in1.low != nullptr);
  attn_.fwd_cached(e, post ? a.attn_out : a.res2, in1.f32, a.attn, kv, rp, in1.low);
  if (post) post_attn_.fwd(e, a.res2, a.n3, a.attn_out, N);
  add_inplace(a.res2, x, N * C);
  norm_fwd(norm2_, e, a.ln2, a.n2, a.res2, N, in2.low != nullptr);
  float* mlp_out = post ? a.mlp_out : a.out;
  if (is_moe()) moe_.fwd(e, mlp_out, a.ln2, a.moe, a.moe_sc);
  else mlp_.fwd(e, mlp_out, in2.f32, a.mlp, in2.low);
  if (post) post_mlp_.fwd(e, a.out, a.n4, a.mlp_out, N);
  add_inplace(a.out, a.res2, N * C);
}

void TransformerLayer::recompute(const BlockEnv& e, Recompute mode, const float* x, const Acts& a,
                                 float* y_scratch) const {
  if (mode == Recompute::kNone) return;
  if (mode == Recompute::kFull) {
    fwd(e, x, a);  // also rewrites the layer's output with the same values
    return;
  }
  attn_.recompute_core(e, layer_, a.attn, y_scratch);
  if (!is_moe()) mlp_.activation_fwd(e, a.mlp);  // an MoE layer keeps its experts' activations
}

const float* TransformerLayer::output_grad(const BlockEnv& e, BwdPass pass, float* copy, const float* dres,
                                          int64_t site) const {
  const ops::DropoutKey k = e.dropout(layer_, site, spec_.hidden_dropout);
  if (pass == BwdPass::kBoth && k.rate <= 0.0f) return dres;
  const int64_t C = spec_.hidden;
  parallel_copy(copy, dres, e.Nl * C);
  e.dropout_rows(copy, k, C);
  return copy;
}

void TransformerLayer::bwd(const BlockEnv& e, BwdPass pass, const float* x, const Acts& a, const Grads& g,
                           const std::function<void()>* between) const {
  const int64_t Nl = e.Nl;
  const NormOut in1(a.ln1, ln1_keeps_bf16(e.cdt)), in2(a.ln2, ln2_keeps_bf16(e.cdt));
  // An MoE block has no passes apart: its whole backward (the experts' and router's weight
  // gradients too) runs in the input pass, and the weight pass skips it.
  const bool post = spec_.sandwich_norm;
  const int64_t C = spec_.hidden;
  if (pass == BwdPass::kWeight) {
    if (post) post_mlp_.bwd(e, pass, nullptr, g.dout_mlp, a.mlp_out, a.n4, Nl);
    if (!is_moe()) mlp_.bwd(e, pass, nullptr, post ? g.dpost_mlp : g.dout_mlp, in2.f32, a.mlp, g.mlp, in2.low);
    norm2_.bwd(e, pass, nullptr, g.dln2, a.res2, a.n2, Nl);
    if (post) post_attn_.bwd(e, pass, nullptr, g.dout_attn, a.attn_out, a.n3, Nl);
    attn_.bwd(e, pass, layer_, nullptr, post ? g.dpost_attn : g.dout_attn, in1.f32, a.attn, g.attn, in1.low);
    norm1_.bwd(e, pass, nullptr, g.dln1, x, a.n1, Nl);
    return;
  }
  // MLP: out = res2 + dropout(mlp(norm2(res2))) (sandwich: dropout(norm4(mlp(...))), its input gradient in dpost_mlp)
  const float* dout_mlp = output_grad(e, pass, g.dout_mlp, g.dres, kDropMlpOut);
  if (post) {
    parallel_zero(g.dpost_mlp, Nl * C);
    post_mlp_.bwd(e, pass, g.dpost_mlp, dout_mlp, a.mlp_out, a.n4, Nl);
    dout_mlp = g.dpost_mlp;
  }
  if (is_moe()) moe_.bwd(e, g.dln2, dout_mlp, a.ln2, a.moe, a.moe_sc);
  else mlp_.bwd(e, pass, g.dln2, dout_mlp, in2.f32, a.mlp, g.mlp, in2.low);
  norm2_.bwd(e, pass, g.dres, g.dln2, a.res2, a.n2, Nl);
  if (between) (*between)();
  // Attention: res2 = x + dropout(attention(norm1(x)))
  const float* dout_attn = output_grad(e, pass, g.dout_attn, g.dres, kDropAttnOut);
  if (post) {
    parallel_zero(g.dpost_attn, Nl * C);
    post_attn_.bwd(e, pass, g.dpost_attn, dout_attn, a.attn_out, a.n3, Nl);
    dout_attn = g.dpost_attn;
  }
  attn_.bwd(e, pass, layer_, g.dln1, dout_attn, in1.f32, a.attn, g.attn, in1.low);
  norm1_.bwd(e, pass, g.dres, g.dln1, x, a.n1, Nl);
}

}  // namespace gf
