#include "models/gpt2.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/ops/attention.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/dropout.h"
#include "core/ops/embedding.h"
#include "core/ops/linear.h"
#include "core/gemm.h"

namespace gf {
namespace {

std::string layer_name(int64_t l, const char* rest) { return "h." + std::to_string(l) + "." + rest; }

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void zero(AlignedBuffer<float>& b) { b.zero(); }

enum DropSite : int64_t { kEmbedding = 0, kAttnOut = 1, kMlpOut = 2, kAttnProbs = 3 };

}  // namespace

struct GPT2LMHeadModel::LayerWeights {
  float *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b,
      *fcproj_w, *fcproj_b;
};

ParamTable GPT2LMHeadModel::make_param_table(const ModelConfig& cfg, int tp_rank, int tp_size) {
  const int64_t C = cfg.hidden_size, F = cfg.ffn_hidden();
  const float std = cfg.initializer_range;
  const float proj_std = std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers));
  ParamTable t(tp_rank, tp_size, cfg.padded_vocab(tp_size));
  auto weight = [&](std::string name, std::vector<int64_t> shape, Split split, float s) {
    t.add({std::move(name), std::move(shape), split, Init::kNormal, s, true});
  };
  auto vec = [&](std::string name, int64_t n, Split split, Init init) {
    t.add({std::move(name), {n}, split, init, 0.0f, false});
  };
  weight("wte.weight", {cfg.vocab_size, C}, Split::kVocab, std);
  weight("wpe.weight", {cfg.max_position_embeddings, C}, Split::kNone, std);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    vec(layer_name(l, "ln_1.weight"), C, Split::kNone, Init::kOnes);
    vec(layer_name(l, "ln_1.bias"), C, Split::kNone, Init::kZeros);
    weight(layer_name(l, "attn.c_attn.weight"), {C, 3 * C}, Split::kColsQKV, std);
    vec(layer_name(l, "attn.c_attn.bias"), 3 * C, Split::kColsQKV, Init::kZeros);
    weight(layer_name(l, "attn.c_proj.weight"), {C, C}, Split::kRows, proj_std);
    vec(layer_name(l, "attn.c_proj.bias"), C, Split::kNone, Init::kZeros);
    vec(layer_name(l, "ln_2.weight"), C, Split::kNone, Init::kOnes);
    vec(layer_name(l, "ln_2.bias"), C, Split::kNone, Init::kZeros);
    weight(layer_name(l, "mlp.c_fc.weight"), {C, F}, Split::kCols, std);
    vec(layer_name(l, "mlp.c_fc.bias"), F, Split::kCols, Init::kZeros);
    weight(layer_name(l, "mlp.c_proj.weight"), {F, C}, Split::kRows, proj_std);
    vec(layer_name(l, "mlp.c_proj.bias"), C, Split::kNone, Init::kZeros);
  }
  vec("ln_f.weight", C, Split::kNone, Init::kOnes);
  vec("ln_f.bias", C, Split::kNone, Init::kZeros);
  t.finalize();
  return t;
}

GPT2LMHeadModel::GPT2LMHeadModel(const ModelConfig& cfg, int64_t micro_batch,
                                 const ParallelContext& ctx)
    : cfg_(cfg), B_(micro_batch), T_(cfg.seq_length), C_(cfg.hidden_size), H_(cfg.num_heads),
      F_(cfg.ffn_hidden()), V_(cfg.vocab_size), Vp_(cfg.padded_vocab(1)), L_(cfg.num_layers),
      act_(ops::parse_activation(cfg.hidden_act)), table_(make_param_table(cfg, 0, 1)) {
  if (ctx.grid.tp() != 1 || ctx.grid.pp() != 1)
    throw std::invalid_argument("GPT2LMHeadModel: tensor and pipeline parallelism are not built yet");
  if (C_ % H_ != 0) throw std::invalid_argument("hidden_size must be divisible by num_heads");
  for (int64_t l = 0; l < L_; ++l) {
    auto o = [&](const char* n) { return table_.at(layer_name(l, n)).offset; };
    layer_offsets_.push_back({o("ln_1.weight"), o("ln_1.bias"), o("attn.c_attn.weight"), o("attn.c_attn.bias"),
                              o("attn.c_proj.weight"), o("attn.c_proj.bias"), o("ln_2.weight"), o("ln_2.bias"),
                              o("mlp.c_fc.weight"), o("mlp.c_fc.bias"), o("mlp.c_proj.weight"), o("mlp.c_proj.bias")});
  }
  wte_ = table_.at("wte.weight").offset;
  wpe_ = table_.at("wpe.weight").offset;
  lnf_w_ = table_.at("ln_f.weight").offset;
  lnf_b_ = table_.at("ln_f.bias").offset;
  const size_t N = static_cast<size_t>(B_ * T_), C = static_cast<size_t>(C_);
  weights_ = AlignedBuffer<float>(static_cast<size_t>(table_.total_floats()));
  grads_ = AlignedBuffer<float>(static_cast<size_t>(table_.total_floats()));
  inputs_ = AlignedBuffer<int32_t>(N);
  targets_ = AlignedBuffer<int32_t>(N);
  emb_ = AlignedBuffer<float>(N * C);
  lnf_ = AlignedBuffer<float>(N * C);
  lnf_mean_ = AlignedBuffer<float>(N);
  lnf_rstd_ = AlignedBuffer<float>(N);
  logits_ = AlignedBuffer<float>(N * static_cast<size_t>(Vp_));
  losses_ = AlignedBuffer<float>(N);
  lse_ = AlignedBuffer<float>(N);
  acts_.resize(static_cast<size_t>(L_));
  for (auto& a : acts_) {
    a.ln1 = AlignedBuffer<float>(N * C);
    a.ln1_mean = AlignedBuffer<float>(N);
    a.ln1_rstd = AlignedBuffer<float>(N);
    a.qkv = AlignedBuffer<float>(N * 3 * C);
    a.probs = AlignedBuffer<float>(static_cast<size_t>(B_ * H_ * T_ * T_));
    a.atty = AlignedBuffer<float>(N * C);
    a.res2 = AlignedBuffer<float>(N * C);
    a.ln2 = AlignedBuffer<float>(N * C);
    a.ln2_mean = AlignedBuffer<float>(N);
    a.ln2_rstd = AlignedBuffer<float>(N);
    a.fch = AlignedBuffer<float>(N * static_cast<size_t>(F_));
    a.fch_act = AlignedBuffer<float>(N * static_cast<size_t>(F_));
    a.out = AlignedBuffer<float>(N * C);
  }
  dres_ = AlignedBuffer<float>(N * C);
  dtmp_ = AlignedBuffer<float>(N * C);
  dln_ = AlignedBuffer<float>(N * C);
  datty_ = AlignedBuffer<float>(N * C);
  dqkv_ = AlignedBuffer<float>(N * 3 * C);
  dfch_act_ = AlignedBuffer<float>(N * static_cast<size_t>(F_));
  dfch_ = AlignedBuffer<float>(N * static_cast<size_t>(F_));
}

GPT2LMHeadModel::LayerWeights GPT2LMHeadModel::layer_weights(float* base, int64_t l) const {
  const LayerOffsets& o = layer_offsets_[static_cast<size_t>(l)];
  return {base + o.ln1_w, base + o.ln1_b, base + o.attn_w, base + o.attn_b, base + o.proj_w, base + o.proj_b,
          base + o.ln2_w, base + o.ln2_b, base + o.fc_w, base + o.fc_b, base + o.fcproj_w, base + o.fcproj_b};
}

ops::DropoutKey GPT2LMHeadModel::hidden_dropout(int64_t layer, int64_t site) const {
  ops::DropoutKey k;
  k.rate = info_.training ? (site == kAttnProbs ? cfg_.attention_dropout_rate : cfg_.hidden_dropout_rate) : 0.0f;
  k.seed = 0x6766u;  // fixed salt; the step and the global element index make masks unique
  k.stream = ops::dropout_stream(static_cast<uint64_t>(info_.step), static_cast<uint64_t>(layer), static_cast<uint64_t>(site));
  return k;
}

void GPT2LMHeadModel::layer_fwd(int64_t l, const float* x, const StepInfo& info) {
  LayerActs& a = acts_[static_cast<size_t>(l)];
  const LayerWeights w = layer_weights(weights_.data(), l);
  const int64_t N = B_ * T_;
  const int64_t row0 = info.sample_offset * T_;
  ops::layernorm_fwd(a.ln1.data(), {a.ln1_mean.data(), a.ln1_rstd.data()}, x, w.ln1_w, w.ln1_b, N, C_, cfg_.layernorm_epsilon);
  ops::linear_fwd(a.qkv.data(), a.ln1.data(), w.attn_w, w.attn_b, N, C_, 3 * C_);
  ops::AttentionShape s{B_, T_, H_, C_ / H_, info.sample_offset, 0, H_};
  ops::attention_fwd(a.atty.data(), a.probs.data(), a.qkv.data(), s, hidden_dropout(l, kAttnProbs));
  // res2 = x + dropout(c_proj(atty))
  ops::linear_fwd(a.res2.data(), a.atty.data(), w.proj_w, w.proj_b, N, C_, C_);
  ops::dropout_apply(a.res2.data(), hidden_dropout(l, kAttnOut), N, C_, row0, 0, C_);
  add_inplace(a.res2.data(), x, N * C_);
  ops::layernorm_fwd(a.ln2.data(), {a.ln2_mean.data(), a.ln2_rstd.data()}, a.res2.data(), w.ln2_w, w.ln2_b, N, C_, cfg_.layernorm_epsilon);
  ops::linear_fwd(a.fch.data(), a.ln2.data(), w.fc_w, w.fc_b, N, C_, F_);
  ops::activation_fwd(act_, a.fch_act.data(), a.fch.data(), N * F_);
  ops::linear_fwd(a.out.data(), a.fch_act.data(), w.fcproj_w, w.fcproj_b, N, F_, C_);
  ops::dropout_apply(a.out.data(), hidden_dropout(l, kMlpOut), N, C_, row0, 0, C_);
  add_inplace(a.out.data(), a.res2.data(), N * C_);
}

double GPT2LMHeadModel::forward(const int32_t* tokens, const StepInfo& info) {
  info_ = info;
  const int64_t N = B_ * T_;
  for (int64_t b = 0; b < B_; ++b) {
    std::memcpy(inputs_.data() + b * T_, tokens + b * (T_ + 1), sizeof(int32_t) * T_);
    std::memcpy(targets_.data() + b * T_, tokens + b * (T_ + 1) + 1, sizeof(int32_t) * T_);
  }
  for (int64_t i = 0; i < N; ++i)
    if (inputs_[i] < 0 || inputs_[i] >= V_ || targets_[i] < 0 || targets_[i] >= V_)
      throw std::out_of_range("token id " + std::to_string(inputs_[i] < 0 || inputs_[i] >= V_ ? inputs_[i] : targets_[i]) +
                              " outside the vocabulary [0, " + std::to_string(V_) + ")");
  const float* wte = weights_.data() + wte_;
  const float* wpe = weights_.data() + wpe_;
  ops::embedding_fwd(emb_.data(), inputs_.data(), wte, wpe, B_, T_, C_);
  ops::dropout_apply(emb_.data(), hidden_dropout(-1, kEmbedding), N, C_, info.sample_offset * T_, 0, C_);
  const float* x = emb_.data();
  for (int64_t l = 0; l < L_; ++l) {
    layer_fwd(l, x, info);
    x = acts_[static_cast<size_t>(l)].out.data();
  }
  const float* lnf_w = weights_.data() + lnf_w_;
  const float* lnf_b = weights_.data() + lnf_b_;
  ops::layernorm_fwd(lnf_.data(), {lnf_mean_.data(), lnf_rstd_.data()}, x, lnf_w, lnf_b, N, C_, cfg_.layernorm_epsilon);
  // logits [N, Vp] = lnf [N, C] @ wte[Vp, C]^T (the padded rows of wte are zero and masked below)
  gemm(Trans::kNo, Trans::kYes, N, Vp_, C_, 1.0f, lnf_.data(), C_, wte, C_, 0.0f, logits_.data(), Vp_);
  ops::cross_entropy_fwd(losses_.data(), lse_.data(), logits_.data(), targets_.data(), N, Vp_, V_);
  double sum = 0.0;
  for (int64_t i = 0; i < N; ++i) sum += losses_[i];
  return sum;
}

void GPT2LMHeadModel::layer_bwd(int64_t l, const float* x) {
  LayerActs& a = acts_[static_cast<size_t>(l)];
  const LayerWeights w = layer_weights(weights_.data(), l);
  const LayerWeights g = layer_weights(grads_.data(), l);
  const int64_t N = B_ * T_;
  const int64_t row0 = info_.sample_offset * T_;
  // MLP: out = res2 + drop(c_proj(act(c_fc(ln2(res2)))))
  std::memcpy(dtmp_.data(), dres_.data(), sizeof(float) * N * C_);
  ops::dropout_apply(dtmp_.data(), hidden_dropout(l, kMlpOut), N, C_, row0, 0, C_);
  zero(dfch_act_);
  ops::linear_bwd(dfch_act_.data(), g.fcproj_w, g.fcproj_b, dtmp_.data(), a.fch_act.data(), w.fcproj_w, N, F_, C_);
  zero(dfch_);
  ops::activation_bwd(act_, dfch_.data(), dfch_act_.data(), a.fch.data(), N * F_);
  zero(dln_);
  ops::linear_bwd(dln_.data(), g.fc_w, g.fc_b, dfch_.data(), a.ln2.data(), w.fc_w, N, C_, F_);
  ops::layernorm_bwd(dres_.data(), g.ln2_w, g.ln2_b, dln_.data(), a.res2.data(), w.ln2_w, {a.ln2_mean.data(), a.ln2_rstd.data()}, N, C_);
  // Attention: res2 = x + drop(c_proj(attn(c_attn(ln1(x)))))
  std::memcpy(dtmp_.data(), dres_.data(), sizeof(float) * N * C_);
  ops::dropout_apply(dtmp_.data(), hidden_dropout(l, kAttnOut), N, C_, row0, 0, C_);
  zero(datty_);
  ops::linear_bwd(datty_.data(), g.proj_w, g.proj_b, dtmp_.data(), a.atty.data(), w.proj_w, N, C_, C_);
  zero(dqkv_);
  ops::AttentionShape s{B_, T_, H_, C_ / H_, info_.sample_offset, 0, H_};
  ops::attention_bwd(dqkv_.data(), datty_.data(), a.qkv.data(), a.probs.data(), s, hidden_dropout(l, kAttnProbs));
  zero(dln_);
  ops::linear_bwd(dln_.data(), g.attn_w, g.attn_b, dqkv_.data(), a.ln1.data(), w.attn_w, N, C_, 3 * C_);
  ops::layernorm_bwd(dres_.data(), g.ln1_w, g.ln1_b, dln_.data(), x, w.ln1_w, {a.ln1_mean.data(), a.ln1_rstd.data()}, N, C_);
}

void GPT2LMHeadModel::backward(float grad_scale) {
  const int64_t N = B_ * T_;
  float* wte = weights_.data() + wte_;
  float* dwte = grads_.data() + wte_;
  ops::cross_entropy_bwd_inplace(logits_.data(), lse_.data(), targets_.data(), N, Vp_, V_, grad_scale);
  // dlnf = dlogits @ wte ; dwte += dlogits^T @ lnf
  zero(dln_);
  gemm(Trans::kNo, Trans::kNo, N, C_, Vp_, 1.0f, logits_.data(), Vp_, wte, C_, 0.0f, dln_.data(), C_);
  gemm(Trans::kYes, Trans::kNo, Vp_, C_, N, 1.0f, logits_.data(), Vp_, lnf_.data(), C_, 1.0f, dwte, C_);
  const float* xlast = L_ > 0 ? acts_.back().out.data() : emb_.data();
  zero(dres_);
  ops::layernorm_bwd(dres_.data(), grads_.data() + lnf_w_, grads_.data() + lnf_b_, dln_.data(), xlast,
                     weights_.data() + lnf_w_, {lnf_mean_.data(), lnf_rstd_.data()}, N, C_);
  for (int64_t l = L_ - 1; l >= 0; --l) {
    const float* x = l > 0 ? acts_[static_cast<size_t>(l - 1)].out.data() : emb_.data();
    layer_bwd(l, x);
  }
  ops::dropout_apply(dres_.data(), hidden_dropout(-1, kEmbedding), N, C_, info_.sample_offset * T_, 0, C_);
  ops::embedding_bwd(dwte, grads_.data() + wpe_, dres_.data(), inputs_.data(), B_, T_, C_);
}

int64_t GPT2LMHeadModel::activation_bytes() const {
  const int64_t N = B_ * T_;
  // per layer: ln1, atty, res2, ln2, out (C each), qkv (3C), fch and its activation (F each),
  // two LayerNorm means and rstds, and the attention probabilities
  const int64_t per_layer = N * (5 * C_ + 3 * C_ + 2 * F_ + 4) + B_ * H_ * T_ * T_;
  // emb, lnf (C each), logits (padded vocabulary), losses, lse, lnf mean/rstd, inputs, targets
  const int64_t other = N * (2 * C_ + Vp_ + 6);
  const int64_t scratch = N * (4 * C_ + 3 * C_ + 2 * F_);
  return 4 * (L_ * per_layer + other + scratch);
}

double GPT2LMHeadModel::flops_per_step(int64_t batch) const {
  // Megatron (Narayanan et al. 2021), no recompute: 72 B T L h^2 (1 + T/(6h) + V/(12 L h)).
  const double B = static_cast<double>(batch), T = static_cast<double>(T_), L = static_cast<double>(L_),
               h = static_cast<double>(C_), V = static_cast<double>(V_);
  return 72.0 * B * T * L * h * h * (1.0 + T / (6.0 * h) + V / (12.0 * L * h));
}

}  // namespace gf
