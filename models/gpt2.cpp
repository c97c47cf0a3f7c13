#include "models/gpt2.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/ops/attention.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/dropout.h"
#include "core/ops/embedding.h"
#include "core/ops/flash_attention.h"
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
  const bool vocab_split = !cfg.vocab_emb_dp;
  ParamTable t(tp_rank, tp_size, cfg.padded_vocab(vocab_split ? tp_size : 1), vocab_split);
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

GPT2LMHeadModel::GPT2LMHeadModel(const ModelConfig& cfg, int64_t micro_batch, const ParallelContext& ctx)
    : cfg_(cfg), B_(micro_batch), T_(cfg.seq_length), C_(cfg.hidden_size), H_(cfg.num_heads),
      F_(cfg.ffn_hidden()), V_(cfg.vocab_size), L_(cfg.num_layers), act_(ops::parse_activation(cfg.hidden_act)),
      table_(make_param_table(cfg, ctx.coord.tp, ctx.grid.tp())) {
  const int tp = ctx.grid.tp();
  if (ctx.grid.pp() != 1) throw std::invalid_argument("GPT2LMHeadModel: pipeline parallelism is not built yet");
  if (C_ % H_ != 0) throw std::invalid_argument("hidden_size must be divisible by num_heads");
  if (H_ % tp != 0 || F_ % tp != 0)
    throw std::invalid_argument("num_heads and the FFN width must be divisible by model_parallel");
  N_ = B_ * T_;
  if (cfg.use_seq_parallel && tp > 1 && T_ % tp != 0)
    throw std::invalid_argument("seq_length must be divisible by model_parallel under use_seq_parallel");
  tp_ = TensorParallel(&ctx.tp, cfg.use_seq_parallel, N_);
  Nl_ = tp_.local_rows();
  Hl_ = H_ / tp;
  Cl_ = C_ / tp;
  Fl_ = F_ / tp;
  vocab_parallel_ = table_.vocab_split() && tp > 1;
  Vp_ = cfg.padded_vocab(vocab_parallel_ ? tp : 1);
  Vl_ = vocab_parallel_ ? Vp_ / tp : Vp_;
  v_begin_ = vocab_parallel_ ? ctx.coord.tp * Vl_ : 0;
  valid_ = std::clamp<int64_t>(V_ - v_begin_, 0, Vl_);
  head_rows_ = vocab_parallel_ ? N_ : Nl_;
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
  auto buf = [](int64_t rows, int64_t cols) { return AlignedBuffer<float>(static_cast<size_t>(rows * cols)); };
  weights_ = buf(table_.total_floats(), 1);
  cdt_ = parse_compute_dtype(cfg.compute_dtype);
  low_ = AlignedBuffer<std::byte>(static_cast<size_t>(table_.total_floats() * low_copy_element_bytes(cdt_)));
  grads_ = buf(table_.total_floats(), 1);
  inputs_ = AlignedBuffer<int32_t>(static_cast<size_t>(N_));
  targets_ = AlignedBuffer<int32_t>(static_cast<size_t>(N_));
  emb_ = buf(Nl_, C_);
  lnf_ = buf(Nl_, C_);
  lnf_mean_ = buf(Nl_, 1);
  lnf_rstd_ = buf(Nl_, 1);
  logits_ = buf(head_rows_, Vl_);
  dlogits_low_ = AlignedBuffer<std::byte>(static_cast<size_t>(head_rows_ * Vl_ * low_copy_element_bytes(cdt_)));
  losses_ = buf(head_rows_, 1);
  lse_ = buf(head_rows_, 1);
  // Activations, planned for the recompute mode of each layer.
  recompute_layers_ = (cfg.recompute || cfg.select_recompute)
                          ? (cfg.recompute_num_layers < 0 ? L_ : std::min(L_, cfg.recompute_num_layers))
                          : 0;
  auto full_set = [&]() {
    LayerActs a{};
    a.ln1 = plan(Nl_, C_);
    a.ln1_mean = plan(Nl_, 1);
    a.ln1_rstd = plan(Nl_, 1);
    a.qkv = plan(N_, 3 * Cl_);
    a.atty = plan(N_, Cl_);
    a.res2 = plan(Nl_, C_);
    a.ln2 = plan(Nl_, C_);
    a.ln2_mean = plan(Nl_, 1);
    a.ln2_rstd = plan(Nl_, 1);
    a.fch = plan(N_, Fl_);
    return a;
  };
  LayerActs shared{};  // the buffers recomputed layers share
  bool have_shared = false, have_shared_core = false;
  acts_.resize(static_cast<size_t>(L_));
  for (int64_t l = 0; l < L_; ++l) {
    LayerActs& a = acts_[static_cast<size_t>(l)];
    const Recompute mode = recompute_mode(l);
    if (mode == Recompute::kFull) {
      if (!have_shared) { shared = full_set(); have_shared = true; }
      a = shared;
    } else {
      a = full_set();
    }
    // The attention core keeps the probabilities (unfused) or one log-sum-exp per row (fused,
    // which the flash backward needs with the output; it is kept even under selective recompute,
    // as there is nothing T x T to save).
    if (cfg.use_flash_attention && mode != Recompute::kFull) a.lse = plan(B_ * Hl_, T_);
    if (mode == Recompute::kNone) {
      if (!cfg.use_flash_attention) a.probs = plan(B_ * Hl_ * T_, T_);
      a.fch_act = plan(N_, Fl_);
    } else {
      if (!have_shared_core) {
        if (cfg.use_flash_attention) shared.lse = plan(B_ * Hl_, T_);
        else shared.probs = plan(B_ * Hl_ * T_, T_);
        shared.fch_act = plan(N_, Fl_);
        have_shared_core = true;
      }
      if (!cfg.use_flash_attention) a.probs = shared.probs;
      if (mode == Recompute::kFull) a.lse = shared.lse;
      a.fch_act = shared.fch_act;
    }
    a.out = plan(Nl_, C_);
  }
  dres_ = buf(Nl_, C_);
  dtmp_ = buf(Nl_, C_);
  dln_ = buf(Nl_, C_);
  datty_ = buf(N_, Cl_);
  dqkv_ = buf(N_, 3 * Cl_);
  dfch_act_ = buf(N_, Fl_);
  dfch_ = buf(N_, Fl_);
  if (tp > 1) {
    gather_ = buf(N_, C_);
    partial_ = buf(N_, C_);
    dfull_ = buf(N_, C_);
    ce_scratch_ = buf(head_rows_, 2);
  }
  if (cfg.use_flash_attention) {
    flash_ws_.threads = omp_get_max_threads();
    flash_buf_ = buf(flash_ws_.threads, ops::flash_workspace_per_thread({B_, T_, Hl_, C_ / H_}, flash_ws_.tiles));
    flash_ws_.data = flash_buf_.data();
  }
}

float* GPT2LMHeadModel::plan(int64_t rows, int64_t cols) {
  storage_.emplace_back(static_cast<size_t>(rows * cols));
  return storage_.back().data();
}

GPT2LMHeadModel::Recompute GPT2LMHeadModel::recompute_mode(int64_t l) const {
  if (l >= recompute_layers_) return Recompute::kNone;
  return cfg_.recompute ? Recompute::kFull : Recompute::kSelective;
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
  const int64_t row0 = global_row0();
  const float eps = cfg_.layernorm_epsilon;
  // res2 = x + dropout(c_proj(attn(c_attn(ln1(x)))))
  ops::layernorm_fwd(a.ln1, {a.ln1_mean, a.ln1_rstd}, x, w.ln1_w, w.ln1_b, Nl_, C_, eps);
  column_parallel_fwd(tp_, a.qkv, a.ln1, wt(w.attn_w), w.attn_b, C_, 3 * Cl_, gather_.data());
  // Mixed precision: attention reads bf16 q, k, v (fp16 ones are rounded by the product already),
  // with its products accumulated and its softmax computed in fp32.
  if (cdt_ == ComputeDtype::kBFloat16) round_to_dtype(cdt_, a.qkv, N_, 3 * Cl_, 3 * Cl_);
  ops::AttentionShape s{B_, T_, Hl_, C_ / H_, info.sample_offset, tp_.rank() * Hl_, H_};
  if (cfg_.use_flash_attention)
    ops::flash_attention_fwd(a.atty, a.lse, a.qkv, s, hidden_dropout(l, kAttnProbs), flash_ws_);
  else
    ops::attention_fwd(a.atty, a.probs, a.qkv, s, hidden_dropout(l, kAttnProbs));
  row_parallel_fwd(tp_, a.res2, a.atty, wt(w.proj_w), w.proj_b, Cl_, C_, partial_.data());
  ops::dropout_apply(a.res2, hidden_dropout(l, kAttnOut), Nl_, C_, row0, 0, C_);
  add_inplace(a.res2, x, Nl_ * C_);
  // out = res2 + dropout(c_proj(act(c_fc(ln2(res2)))))
  ops::layernorm_fwd(a.ln2, {a.ln2_mean, a.ln2_rstd}, a.res2, w.ln2_w, w.ln2_b, Nl_, C_, eps);
  column_parallel_fwd(tp_, a.fch, a.ln2, wt(w.fc_w), w.fc_b, C_, Fl_, gather_.data());
  ops::activation_fwd(act_, a.fch_act, a.fch, N_ * Fl_);
  row_parallel_fwd(tp_, a.out, a.fch_act, wt(w.fcproj_w), w.fcproj_b, Fl_, C_, partial_.data());
  ops::dropout_apply(a.out, hidden_dropout(l, kMlpOut), Nl_, C_, row0, 0, C_);
  add_inplace(a.out, a.res2, Nl_ * C_);
}

double GPT2LMHeadModel::forward(const int32_t* tokens, const StepInfo& info) {
  info_ = info;
  // The products of this step read the weights' low-precision copy, made from the masters as
  // they are now, unless the optimizer step wrote it already or no weight changed since.
  if (cdt_ != ComputeDtype::kFloat32 && !low_current_) {
    make_low_copy(cdt_, low_.data(), weights_.data(), table_.total_floats());
    low_current_ = true;
  }
  for (int64_t b = 0; b < B_; ++b) {
    std::memcpy(inputs_.data() + b * T_, tokens + b * (T_ + 1), sizeof(int32_t) * T_);
    std::memcpy(targets_.data() + b * T_, tokens + b * (T_ + 1) + 1, sizeof(int32_t) * T_);
  }
  for (int64_t i = 0; i < N_; ++i)
    if (inputs_[i] < 0 || inputs_[i] >= V_ || targets_[i] < 0 || targets_[i] >= V_)
      throw std::out_of_range("token id " + std::to_string(inputs_[i] < 0 || inputs_[i] >= V_ ? inputs_[i] : targets_[i]) +
                              " outside the vocabulary [0, " + std::to_string(V_) + ")");
  const EmbeddingShape es{N_, T_, C_, v_begin_, v_begin_ + Vl_, vocab_parallel_};
  embedding_parallel_fwd(tp_, emb_.data(), inputs_.data(), weights_.data() + wte_, weights_.data() + wpe_, es,
                         partial_.data());
  ops::dropout_apply(emb_.data(), hidden_dropout(-1, kEmbedding), Nl_, C_, global_row0(), 0, C_);
  const float* x = emb_.data();
  for (int64_t l = 0; l < L_; ++l) {
    layer_fwd(l, x, info);
    x = acts_[static_cast<size_t>(l)].out;
  }
  return head_fwd(x);
}

// ln_f, then the LM head tied to wte and the cross-entropy. Vocabulary-parallel: every rank
// computes its vocabulary slice of the logits of all N rows (gathered under SP) and the softmax is
// reduced across the group. Replicated: every rank computes all logits of its own rows.
double GPT2LMHeadModel::head_fwd(const float* x) {
  const float* wte = weights_.data() + wte_;
  ops::layernorm_fwd(lnf_.data(), {lnf_mean_.data(), lnf_rstd_.data()}, x, weights_.data() + lnf_w_,
                     weights_.data() + lnf_b_, Nl_, C_, cfg_.layernorm_epsilon);
  const float* h = vocab_parallel_ ? tp_.gather_rows(lnf_.data(), gather_.data(), C_) : lnf_.data();
  const int32_t* tgt = targets_.data() + (vocab_parallel_ ? 0 : tp_.row_begin());
  // logits [rows, Vl] = h [rows, C] @ wte[Vl, C]^T (padded rows of wte are zero and masked below)
  const Weight w = wt(wte);
  gemm_mixed(cdt_, Trans::kNo, Trans::kYes, head_rows_, Vl_, C_, 1.0f, h, nullptr, C_, wte, w.low, C_, 0.0f,
             logits_.data(), Vl_, true);
  if (vocab_parallel_)
    vocab_parallel_cross_entropy_fwd(tp_, losses_.data(), lse_.data(), logits_.data(), tgt, head_rows_, Vl_, v_begin_,
                                     valid_, ce_scratch_.data());
  else
    ops::cross_entropy_fwd(losses_.data(), lse_.data(), logits_.data(), tgt, head_rows_, Vl_, valid_);
  double sum = 0.0;
  for (int64_t i = 0; i < head_rows_; ++i) sum += losses_[i];
  // Replicated head under SP: each rank has the loss of its own rows.
  if (!vocab_parallel_ && tp_.sequence_parallel()) tp_.allreduce_sum(&sum, 1);
  return sum;
}

// Before layer l's backward: what its forward did not keep, computed again from what it did (the
// same operations on the same inputs with the same dropout keys, so bitwise the same values).
void GPT2LMHeadModel::recompute_fwd(int64_t l, const float* x) {
  const Recompute mode = recompute_mode(l);
  if (mode == Recompute::kNone) return;
  if (mode == Recompute::kFull) {
    layer_fwd(l, x, info_);  // also rewrites the layer's output with the same values
    return;
  }
  LayerActs& a = acts_[static_cast<size_t>(l)];
  if (!cfg_.use_flash_attention) {  // the fused backward recomputes its probabilities itself
    ops::AttentionShape s{B_, T_, Hl_, C_ / H_, info_.sample_offset, tp_.rank() * Hl_, H_};
    ops::attention_fwd(datty_.data(), a.probs, a.qkv, s, hidden_dropout(l, kAttnProbs));  // y itself is kept
  }
  ops::activation_fwd(act_, a.fch_act, a.fch, N_ * Fl_);
}

void GPT2LMHeadModel::layer_bwd(int64_t l, const float* x) {
  LayerActs& a = acts_[static_cast<size_t>(l)];
  const LayerWeights w = layer_weights(weights_.data(), l);
  const LayerWeights g = layer_weights(grads_.data(), l);
  const int64_t row0 = global_row0();
  // MLP: out = res2 + drop(c_proj(act(c_fc(ln2(res2)))))
  std::memcpy(dtmp_.data(), dres_.data(), sizeof(float) * Nl_ * C_);
  ops::dropout_apply(dtmp_.data(), hidden_dropout(l, kMlpOut), Nl_, C_, row0, 0, C_);
  row_parallel_bwd(tp_, dfch_act_.data(), g.fcproj_w, g.fcproj_b, dtmp_.data(), a.fch_act, wt(w.fcproj_w), Fl_, C_,
                   gather_.data());
  zero(dfch_);
  ops::activation_bwd(act_, dfch_.data(), dfch_act_.data(), a.fch, N_ * Fl_);
  column_parallel_bwd(tp_, dln_.data(), g.fc_w, g.fc_b, dfch_.data(), a.ln2, wt(w.fc_w), C_, Fl_, gather_.data(),
                      dfull_.data());
  ops::layernorm_bwd(dres_.data(), g.ln2_w, g.ln2_b, dln_.data(), a.res2, w.ln2_w,
                     {a.ln2_mean, a.ln2_rstd}, Nl_, C_);
  // Attention: res2 = x + drop(c_proj(attn(c_attn(ln1(x)))))
  std::memcpy(dtmp_.data(), dres_.data(), sizeof(float) * Nl_ * C_);
  ops::dropout_apply(dtmp_.data(), hidden_dropout(l, kAttnOut), Nl_, C_, row0, 0, C_);
  row_parallel_bwd(tp_, datty_.data(), g.proj_w, g.proj_b, dtmp_.data(), a.atty, wt(w.proj_w), Cl_, C_,
                   gather_.data());
  zero(dqkv_);
  ops::AttentionShape s{B_, T_, Hl_, C_ / H_, info_.sample_offset, tp_.rank() * Hl_, H_};
  if (cfg_.use_flash_attention)
    ops::flash_attention_bwd(dqkv_.data(), datty_.data(), a.qkv, a.atty, a.lse, s, hidden_dropout(l, kAttnProbs),
                             flash_ws_);
  else
    ops::attention_bwd(dqkv_.data(), datty_.data(), a.qkv, a.probs, s, hidden_dropout(l, kAttnProbs));
  column_parallel_bwd(tp_, dln_.data(), g.attn_w, g.attn_b, dqkv_.data(), a.ln1, wt(w.attn_w), C_, 3 * Cl_,
                      gather_.data(), dfull_.data());
  ops::layernorm_bwd(dres_.data(), g.ln1_w, g.ln1_b, dln_.data(), x, w.ln1_w, {a.ln1_mean, a.ln1_rstd},
                     Nl_, C_);
}

void GPT2LMHeadModel::head_bwd(float grad_scale, const float* x) {
  const float* wte = weights_.data() + wte_;
  float* dwte = grads_.data() + wte_;
  const int32_t* tgt = targets_.data() + (vocab_parallel_ ? 0 : tp_.row_begin());
  // Vocabulary-parallel: a column-parallel layer with W = wte^T, so dh is a partial sum over the
  // vocabulary slices. Under SP, gather_ still holds the rows head_fwd gathered (backward starts
  // here, nothing used it since).
  const float* h = vocab_parallel_ && tp_.sequence_parallel() ? gather_.data() : lnf_.data();
  float* dh = vocab_parallel_ ? dfull_.data() : dln_.data();
  if (cdt_ == ComputeDtype::kFloat32) {
    vocab_parallel_cross_entropy_bwd(logits_.data(), lse_.data(), tgt, head_rows_, Vl_, v_begin_, valid_, grad_scale);
    gemm(Trans::kNo, Trans::kNo, head_rows_, C_, Vl_, 1.0f, logits_.data(), Vl_, wte, C_, 0.0f, dh, C_);
    gemm(Trans::kYes, Trans::kNo, Vl_, C_, head_rows_, 1.0f, logits_.data(), Vl_, h, C_, 1.0f, dwte, C_);
  } else {
    // The logits' gradient goes straight from the fp32 logits to its low-precision copy, in column
    // chunks: both products run chunk by chunk over the vocabulary (K of dh, rows of dwte), each on
    // dense operands, and dh accumulates over the chunks in fp32.
    const ColumnChunks ch = column_chunks(head_rows_, Vl_);
    cross_entropy_bwd_low(cdt_, dlogits_low_.data(), ch, logits_.data(), lse_.data(), tgt, valid_, grad_scale,
                          v_begin_);
    const void* h_low = low_copy_scratch(cdt_, h, head_rows_, C_, 1);
    const int64_t eb = low_copy_element_bytes(cdt_);
    const auto* wte_low = static_cast<const std::byte*>(wt(wte).low);
    for (int64_t c = 0; c < ch.count(); ++c) {
      const int64_t k0 = ch.begin(c), kc = ch.cols(c);
      const std::byte* dl = dlogits_low_.data() + ch.offset(c) * eb;
      gemm_mixed(cdt_, Trans::kNo, Trans::kNo, head_rows_, C_, kc, 1.0f, nullptr, dl, kc, nullptr,
                 wte_low + k0 * C_ * eb, C_, c == 0 ? 0.0f : 1.0f, dh, C_, false);
      gemm_mixed(cdt_, Trans::kYes, Trans::kNo, kc, C_, head_rows_, 1.0f, nullptr, dl, kc, nullptr, h_low, C_, 1.0f,
                 dwte + k0 * C_, C_, false);
    }
    // fp16: dh is an activation, rounded once its sum over the chunks is complete (as gemm_mixed's round_c).
    if (cdt_ == ComputeDtype::kFloat16) round_to_dtype(cdt_, dh, head_rows_, C_, C_);
  }
  if (vocab_parallel_) tp_.reduce_rows(dfull_.data(), dln_.data(), C_);
  zero(dres_);
  ops::layernorm_bwd(dres_.data(), grads_.data() + lnf_w_, grads_.data() + lnf_b_, dln_.data(), x,
                     weights_.data() + lnf_w_, {lnf_mean_.data(), lnf_rstd_.data()}, Nl_, C_);
}

void GPT2LMHeadModel::backward(float grad_scale) {
  head_bwd(grad_scale, L_ > 0 ? acts_.back().out : emb_.data());
  grads_ready_from(lnf_w_);
  for (int64_t l = L_ - 1; l >= 0; --l) {
    const float* x = l > 0 ? acts_[static_cast<size_t>(l - 1)].out : emb_.data();
    recompute_fwd(l, x);
    layer_bwd(l, x);
    grads_ready_from(layer_offsets_[static_cast<size_t>(l)].ln1_w);
  }
  ops::dropout_apply(dres_.data(), hidden_dropout(-1, kEmbedding), Nl_, C_, global_row0(), 0, C_);
  const EmbeddingShape es{N_, T_, C_, v_begin_, v_begin_ + Vl_, vocab_parallel_};
  embedding_parallel_bwd(tp_, grads_.data() + wte_, grads_.data() + wpe_, dres_.data(), inputs_.data(), es,
                         gather_.data());
  grads_ready_from(0);
}

int64_t GPT2LMHeadModel::activation_bytes() const {
  // Everything planned besides the parameters and their gradients: the layers' activations (as the
  // recompute mode laid them out), the embedding/head buffers, backward scratch and the
  // tensor-parallel buffers.
  int64_t floats = 0;
  for (const auto& b : storage_) floats += static_cast<int64_t>(b.size());
  for (const AlignedBuffer<float>* b : {&emb_, &lnf_, &lnf_mean_, &lnf_rstd_, &logits_, &losses_, &lse_, &dres_, &dtmp_,
                                        &dln_, &datty_, &dqkv_, &dfch_act_, &dfch_, &gather_, &partial_, &dfull_,
                                        &ce_scratch_, &flash_buf_})
    floats += static_cast<int64_t>(b->size());
  return 4 * floats + static_cast<int64_t>(dlogits_low_.size()) +
         static_cast<int64_t>(sizeof(int32_t) * (inputs_.size() + targets_.size()));
}

double GPT2LMHeadModel::flops_per_step(int64_t batch) const {
  // Megatron (Narayanan et al. 2021), no recompute: 72 B T L h^2 (1 + T/(6h) + V/(12 L h)).
  const double B = static_cast<double>(batch), T = static_cast<double>(T_), L = static_cast<double>(L_),
               h = static_cast<double>(C_), V = static_cast<double>(V_);
  return 72.0 * B * T * L * h * h * (1.0 + T / (6.0 * h) + V / (12.0 * L * h));
}

}  // namespace gf
