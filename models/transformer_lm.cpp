#include "models/transformer_lm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/trace/trace.h"

namespace gf {

MoeSpec moe_spec(const ModelConfig& cfg) {
  MoeSpec m;
  const MoeConfig& c = cfg.moe;
  if (!c.enabled()) return m;
  m.experts = c.expert_num;
  m.topk = c.num_experts_chosen;
  m.layer_freq = c.moe_layer_freq;
  m.capacity_factor = c.capacity_factor;
  m.norm_topk = c.norm_topk_prob;
  m.drop_by_probs = c.token_drop_policy == "probs";
  m.aux_factor = static_cast<float>(c.aux_loss_factor);
  m.z_factor = static_cast<float>(c.z_loss_factor);
  m.router_low_precision = c.router_dense_type != "float32";
  m.allgather_dispatch = c.token_dispatcher == "allgather";
  return m;
}

StageDims StageDims::make(const TransformerSpec& s, const ModelConfig& cfg, const ModelLayout& layout,
                          int64_t micro_batch, int tp_rank, const StageOptions& st) {
  const int tp = layout.tp;
  StageDims d;
  d.B = micro_batch;
  d.T = s.seq;
  d.N = d.B * d.T;
  d.C = s.hidden;
  d.L = s.layers;
  d.l0 = st.layer_begin;
  d.l1 = st.layer_end < 0 ? s.layers : st.layer_end;
  if (d.l0 < 0 || d.l1 > d.L || d.l0 > d.l1)
    throw std::invalid_argument("stage layers [" + std::to_string(d.l0) + ", " + std::to_string(d.l1) +
                                ") are not a range of the model's " + std::to_string(d.L));
  d.slots = st.slots;
  if (d.slots < 1) throw std::invalid_argument("a stage needs at least one micro-batch slot");
  d.tp = tp;
  d.first = d.l0 == 0;
  d.last = d.l1 == d.L;
  d.defer = st.defer_weight_grads;
  d.share_logits = st.share_logits && d.last;
  d.low_precision = layout.low_precision();
  d.flash = s.flash;
  if (s.hidden % s.heads != 0) throw std::invalid_argument("hidden_size must be divisible by num_heads");
  if (s.heads % tp != 0 || s.ffn % tp != 0)
    throw std::invalid_argument("num_heads and the FFN width must be divisible by model_parallel");
  if (s.kv_heads % tp != 0)
    throw std::invalid_argument("the key/value heads (n_kv_heads " + std::to_string(s.kv_heads) +
                                ") must be divisible by model_parallel " + std::to_string(tp));
  if (s.heads % s.kv_heads != 0)
    throw std::invalid_argument("num_heads must be a multiple of n_kv_heads");
  if (s.flash && s.kv_heads != s.heads)
    throw std::invalid_argument("use_flash_attention: the fused attention core does not read grouped-query "
                                "shapes (n_kv_heads < num_heads) yet; set use_flash_attention: False");
  if (layout.sequence_parallel && tp > 1 && d.T % tp != 0)
    throw std::invalid_argument("seq_length must be divisible by model_parallel under use_seq_parallel");
  d.Nl = layout.sequence_parallel && tp > 1 ? d.N / tp : d.N;
  d.heads_local = s.heads / tp;
  d.head_dim = s.head_dim();
  d.qkv_width = (s.heads + 2 * s.kv_heads) / tp * d.head_dim;
  d.attn_width = d.heads_local * d.head_dim;
  d.ffn_local = s.ffn / tp;
  d.up_width = s.mlp == MlpKind::kSwiGLU ? 2 * d.ffn_local : d.ffn_local;
  d.layer_norm = s.norm == NormKind::kLayerNorm;
  const bool vocab_parallel = layout.vocab_parallel();
  const int64_t Vp = cfg.padded_vocab(vocab_parallel ? tp : 1);
  d.vocab.parallel = vocab_parallel;
  d.vocab.local = vocab_parallel ? Vp / tp : Vp;
  d.vocab.begin = vocab_parallel ? tp_rank * d.vocab.local : 0;
  d.vocab.valid = std::clamp<int64_t>(s.vocab - d.vocab.begin, 0, d.vocab.local);
  d.head_rows = vocab_parallel ? d.N : d.Nl;
  if (d.low_precision) {
    const int64_t bytes = d.head_rows * d.vocab.local * low_copy_element_bytes(layout.compute);
    d.dlogits_low_floats = (bytes + 3) / 4;
  }
  if (s.flash)
    d.flash_floats = omp_get_max_threads() *
                     ops::flash_workspace_per_thread({d.B, d.T, d.heads_local, d.head_dim}, ops::FlashTiles{});
  d.recompute_layers = layout.recomputed_layers(d.L);
  d.full_recompute = layout.recompute == RecomputePolicy::kFull;
  d.ep = layout.ep;
  d.moe = s.moe;
  d.any_moe = d.any_dense = false;
  for (int64_t l = d.l0; l < d.l1; ++l) (s.moe.is_moe(l) ? d.any_moe : d.any_dense) = true;
  if (s.moe.experts > 1) {
    if (s.moe.topk < 1 || s.moe.topk > s.moe.experts)
      throw std::invalid_argument("moe_config.num_experts_chosen " + std::to_string(s.moe.topk) +
                                  " must be between 1 and expert_num " + std::to_string(s.moe.experts));
    d.md = MoeBlock::dims(s, d.N, tp, d.ep);
  } else if (d.ep > 1) {
    throw std::invalid_argument("parallel_config.expert_parallel " + std::to_string(d.ep) +
                                " needs MoE layers (moe_config.expert_num > 1)");
  }
  if (d.defer && d.recompute_layers > d.l0)
    throw std::invalid_argument("a deferred weight pass reads activations that recompute would overwrite; "
                                "turn recompute off for zero-bubble schedules");
  return d;
}

// lay_out's parts, taking the plan's buffers in lay_out's one order: per slot its inputs, layers and
// head, then the backward, tensor-parallel, fused-attention and MoE scratch. Layers under full
// recompute share one set of buffers (only their output is their own); under selective recompute the
// attention probabilities and the activation function's output are shared.
struct TransformerLM::LayoutBuilder {
  const StageDims& d;
  BufferPlan& p;
  const int64_t N, Nl, C, probs, lse;
  TransformerLayer::Acts shared;
  MoeBlock::Acts shared_moe;
  bool have_shared = false, have_shared_core = false, have_shared_moe = false;

  LayoutBuilder(const StageDims& dims, BufferPlan& plan)
      : d(dims), p(plan), N(dims.N), Nl(dims.Nl), C(dims.C), probs(dims.B * dims.heads_local * dims.T * dims.T),
        lse(dims.B * dims.heads_local * dims.T) {}

  int32_t* ints(const std::string& n, int64_t count) { return reinterpret_cast<int32_t*>(p.take(n, count)); }
  NormBlock::Acts norm_acts(const std::string& n) {
    NormBlock::Acts a;
    if (d.layer_norm) a.mean = p.take(n + ".mean", Nl);
    a.rstd = p.take(n + ".rstd", Nl);
    return a;
  }
  TransformerLayer::Acts full_set(const std::string& n, bool dense) {
    TransformerLayer::Acts a;
    a.ln1 = p.take(n + ".ln1", Nl * C);
    a.n1 = norm_acts(n + ".norm1");
    a.attn.qkv = p.take(n + ".qkv", N * d.qkv_width);
    a.attn.y = p.take(n + ".attn_y", N * d.attn_width);
    a.res2 = p.take(n + ".res2", Nl * C);
    a.ln2 = p.take(n + ".ln2", Nl * C);
    a.n2 = norm_acts(n + ".norm2");
    if (dense) a.mlp.h = p.take(n + ".mlp_h", N * d.up_width);
    return a;
  }
  TransformerLayer::Grads stash(const std::string& n) {
    TransformerLayer::Grads g;
    g.dout_mlp = p.take(n + ".dout_mlp", Nl * C);
    g.dout_attn = p.take(n + ".dout_attn", Nl * C);
    g.dln2 = p.take(n + ".dln2", Nl * C);
    g.dln1 = p.take(n + ".dln1", Nl * C);
    g.attn.dqkv = p.take(n + ".dqkv", N * d.qkv_width);
    g.mlp.dh = p.take(n + ".dmlp_h", N * d.up_width);
    return g;
  }
  // An MoE layer's buffers: per layer, or (full recompute) one set shared; the statistics stay per layer.
  void moe(TransformerLayer::Acts& a, const std::string& n, Recompute mode) {
    if (mode == Recompute::kFull) {
      if (!have_shared_moe) {
        shared_moe = MoeBlock::take_acts(p, "recompute.moe", d.md);
        have_shared_moe = true;
      }
      a.moe = shared_moe;
    } else {
      a.moe = MoeBlock::take_acts(p, n, d.md);
    }
    a.moe.stats = reinterpret_cast<double*>(p.take(n + ".moe_stats", 2 * MoeBlock::stats_doubles(d.md.E)));
  }
  // The attention core keeps the probabilities (unfused) or one log-sum-exp per row (fused, which the
  // flash backward needs with the output; it is kept even under selective recompute, as there is
  // nothing T x T to save); recomputed layers share them and the activation function's output.
  void core(TransformerLayer::Acts& a, const std::string& n, int64_t l, Recompute mode) {
    if (d.flash && mode != Recompute::kFull) a.attn.lse = p.take(n + ".lse", lse);
    if (mode == Recompute::kNone) {
      if (!d.flash) a.attn.probs = p.take(n + ".probs", probs);
      if (!d.moe.is_moe(l)) a.mlp.act = p.take(n + ".mlp_act", N * d.ffn_local);
      return;
    }
    if (!have_shared_core) {
      if (d.flash) shared.attn.lse = p.take("recompute.lse", lse);
      else shared.attn.probs = p.take("recompute.probs", probs);
      shared.mlp.act = p.take("recompute.mlp_act", N * d.ffn_local);
      have_shared_core = true;
    }
    if (!d.flash) a.attn.probs = shared.attn.probs;
    if (mode == Recompute::kFull) a.attn.lse = shared.attn.lse;
    a.mlp.act = shared.mlp.act;
  }
  TransformerLayer::Acts layer(const std::string& n, int64_t l) {
    const Recompute mode = d.mode(l);
    TransformerLayer::Acts a;
    if (mode == Recompute::kFull) {
      if (!have_shared) {
        shared = full_set("recompute.full", d.any_dense);
        have_shared = true;
      }
      a = shared;
    } else {
      a = full_set(n, !d.moe.is_moe(l));
    }
    if (d.moe.is_moe(l)) moe(a, n, mode);
    core(a, n, l, mode);
    a.out = p.take(n + ".out", Nl * C);
    return a;
  }
  void head(Buffers& b, int64_t k, const std::string& sn) {
    LmHeadBlock::Acts& h = b.slots[static_cast<size_t>(k)].head;
    h.ln = p.take(sn + ".final_norm", Nl * C);
    h.norm = norm_acts(sn + ".final_norm");
    if (!d.share_logits || k == 0) h.logits = p.take((d.share_logits ? "head" : sn) + ".logits", d.head_rows * d.vocab.local);
    else h.logits = b.slots[0].head.logits;
    h.losses = p.take(sn + ".losses", d.head_rows);
    h.lse = p.take(sn + ".lse", d.head_rows);
    if (!d.defer) return;
    h.dln = p.take(sn + ".head_dln", Nl * C);
    if (!d.share_logits || k == 0)
      h.dlogits_low = reinterpret_cast<std::byte*>(p.take((d.share_logits ? "head" : sn) + ".dlogits_low", d.dlogits_low_floats));
    else
      h.dlogits_low = b.slots[0].head.dlogits_low;
  }
  void slot(Buffers& b, int64_t k) {
    Slot& s = b.slots[static_cast<size_t>(k)];
    const std::string sn = "slot" + std::to_string(k);
    s.inputs = ints(sn + ".inputs", N);
    s.targets = ints(sn + ".targets", N);
    if (d.first) s.emb = p.take(sn + ".embedding", Nl * C);
    else s.xin = p.take(sn + ".hidden_in", Nl * C);
    if (d.first && d.defer) s.demb = p.take(sn + ".embedding_grad", Nl * C);
    for (int64_t l = d.l0; l < d.l1; ++l) {
      const std::string n = sn + ".layer" + std::to_string(l);
      s.layers.push_back(layer(n, l));
      if (d.defer) s.stash.push_back(stash(n + ".stash"));
    }
    if (d.last) head(b, k, sn);
  }
  // Backward scratch shared by the layers and the slots; tensor-parallel ([N, C] each; none on one
  // rank), fused-attention and MoE scratch.
  void scratch(Buffers& b) {
    TransformerLayer::Grads& g = b.scratch;
    g.dres = p.take("bwd.dres", Nl * C);
    g.dout_mlp = g.dout_attn = p.take("bwd.dout", Nl * C);
    g.dln1 = g.dln2 = p.take("bwd.dln", Nl * C);
    g.attn.dy = p.take("bwd.attn_dy", N * d.attn_width);
    g.attn.dqkv = p.take("bwd.dqkv", N * d.qkv_width);
    g.mlp.dact = p.take("bwd.mlp_dact", N * d.ffn_local);
    g.mlp.dh = p.take("bwd.mlp_dh", N * d.up_width);
    if (d.last && !d.defer) {
      std::byte* low = reinterpret_cast<std::byte*>(p.take("bwd.dlogits_low", d.dlogits_low_floats));
      for (Slot& s : b.slots) {
        s.head.dln = g.dln1;
        s.head.dlogits_low = low;
      }
    }
    if (d.tp > 1) {
      b.gather = p.take("tp.gather", N * C);
      b.partial = p.take("tp.partial", N * C);
      b.dfull = p.take("tp.dfull", N * C);
    }
    if (d.flash) b.flash = p.take("flash.workspace", d.flash_floats);
    if (d.any_moe) {  // shared by the MoE layers
      b.moe = MoeBlock::take_scratch(p, d.md, d.tp);
      for (Slot& s : b.slots)
        for (TransformerLayer::Acts& a : s.layers) a.moe_sc = b.moe;
    }
  }
};

// Every buffer, in one order for both passes (LayoutBuilder).
void TransformerLM::lay_out(const StageDims& d, BufferPlan& p, Buffers& b) {
  LayoutBuilder lb(d, p);
  b.slots.assign(static_cast<size_t>(d.slots), Slot{});
  for (int64_t k = 0; k < d.slots; ++k) lb.slot(b, k);
  lb.scratch(b);
}

ParamTable TransformerLM::make_param_table(const TransformerSpec& s, const NameMap& names, const StageOptions& st) {
  ParamTable t;
  const int64_t l1 = st.layer_end < 0 ? s.layers : st.layer_end;
  const bool first = st.layer_begin == 0, last = l1 == s.layers;
  // The tied head reads the token embedding: the last stage holds it too (not the positions).
  if (first) {
    EmbeddingBlock(s, {}).declare(t, names);
  } else if (last && s.tied_head) {
    TransformerSpec token_only = s;
    token_only.positions = 0;
    EmbeddingBlock(token_only, {}).declare(t, names);
  }
  // Declaring reads no layout: the layers are built for one rank.
  for (int64_t l = st.layer_begin; l < l1; ++l) TransformerLayer(s, 1, l, nullptr, nullptr).declare(t, names);
  if (last) {
    const LmHeadBlock head(s, {}, 0);
    head.declare_norm(t, names);
    head.declare_head(t, names);
  }
  return t;
}

ParamTable TransformerLM::make_param_table(const TransformerSpec& s, const NameMap& names,
                                          const std::vector<StageOptions>& chunks) {
  ParamTable t;
  for (const StageOptions& st : chunks) {
    const ParamTable c = make_param_table(s, names, st);
    for (const ParamSpec& p : c.specs())
      if (t.find(p.name) == nullptr) t.add(p);
  }
  return t;
}

ParamLayout TransformerLM::param_layout(const ModelConfig& cfg, const ModelLayout& layout) {
  return {layout.tp, layout.vocab_split, cfg.padded_vocab(layout.vocab_split ? layout.tp : 1), layout.ep};
}

Placement TransformerLM::make_placement(const TransformerSpec& s, const NameMap& names, const ModelConfig& cfg,
                                        const ModelLayout& layout, int tp_rank, const StageOptions& st, int ep_rank) {
  return Placement(make_param_table(s, names, st), param_layout(cfg, layout), tp_rank, ep_rank);
}

BufferPlan TransformerLM::activation_plan(const TransformerSpec& s, const ModelConfig& cfg, const ModelLayout& layout,
                                          int64_t micro_batch, int tp_rank, const StageOptions& st) {
  BufferPlan p;
  Buffers b;
  lay_out(StageDims::make(s, cfg, layout, micro_batch, tp_rank, st), p, b);
  return p;
}

TransformerLM::TransformerLM(const TransformerSpec& spec, NameMap names, const ModelConfig& cfg,
                             const ModelLayout& layout, int64_t micro_batch, const ParallelContext& ctx,
                             const StageOptions& stage, const SharedArena* arena)
    : spec_(spec), names_(std::move(names)), cfg_(cfg), layout_(layout),
      dims_(StageDims::make(spec, cfg, layout, micro_batch, ctx.index(GridAxis::kTp), stage)),
      params_(arena != nullptr ? *arena->params
                               : make_placement(spec, names_, cfg, layout, ctx.index(GridAxis::kTp), stage,
                                                ctx.index(GridAxis::kEp))) {
  const StageDims& d = dims_;
  if (ctx.size(GridAxis::kTp) != layout.tp || ctx.size(GridAxis::kEp) != layout.ep)
    throw std::invalid_argument("TransformerLM: the layout's model_parallel " + std::to_string(layout.tp) +
                                " and expert_parallel " + std::to_string(layout.ep) + " are not the process grid's " +
                                std::to_string(ctx.size(GridAxis::kTp)) + " and " + std::to_string(ctx.size(GridAxis::kEp)));
  tp_ = TensorParallel(&ctx.group(GridAxis::kTp), layout.sequence_parallel, d.N);
  ep_ = ExpertParallel(&ctx.group(GridAxis::kEp));
  cdt_ = layout.compute;
  if (arena != nullptr) {
    w_ = arena->weights;
    g_ = arena->grads;
    lowp_ = arena->low;
    low_current_ = arena->low_current;
  } else {
    weights_ = AlignedBuffer<float>(static_cast<size_t>(params_.total_floats()));
    grads_ = AlignedBuffer<float>(static_cast<size_t>(params_.total_floats()));
    low_ = AlignedBuffer<std::byte>(static_cast<size_t>(params_.total_floats() * low_copy_element_bytes(cdt_)));
    w_ = weights_.data();
    g_ = grads_.data();
    lowp_ = low_.data();
  }
  if (spec.rope)
    rope_ = std::make_unique<ops::RopeTable<float>>(
        ops::make_rope_table<float>(spec.rope_positions, spec.head_dim(), spec.rope_theta));
  if (d.first) {
    embedding_ = EmbeddingBlock(spec, d.vocab);
    embedding_.bind(params_, names_);
  }
  for (int64_t l = d.l0; l < d.l1; ++l) {
    layers_.emplace_back(spec, d.tp, l, rope_.get(), &flash_ws_, d.ep, d.N);
    layers_.back().bind(params_, names_);
  }
  if (d.last) {
    head_ = LmHeadBlock(spec, d.vocab, d.head_rows);
    head_.bind(params_, names_);
  }
  // Sized first, then one allocation, then placed in the same order.
  Buffers b;
  lay_out(d, plan_, b);
  plan_.allocate();
  b = Buffers{};
  lay_out(d, plan_, b);
  if (!plan_.placed_all()) throw std::logic_error("TransformerLM: the buffer plan was not placed whole");
  slots_ = std::move(b.slots);
  scratch_ = b.scratch;
  gather_ = b.gather;
  partial_ = b.partial;
  dfull_ = b.dfull;
  if (d.flash) {
    flash_ws_.threads = omp_get_max_threads();
    flash_ws_.data = b.flash;
  }
}

BlockEnv TransformerLM::env(const Slot& s) {
  BlockEnv e;
  e.tp = &tp_;
  e.ep = &ep_;
  e.cdt = cdt_;
  e.weights = w_;
  e.grads = g_;
  e.low = lowp_;
  e.B = dims_.B;
  e.T = dims_.T;
  e.N = dims_.N;
  e.Nl = dims_.Nl;
  e.gather = gather_;
  e.partial = partial_;
  e.dfull = dfull_;
  e.info = s.info;
  return e;
}

const float* TransformerLM::layer_input(const Slot& s, int64_t l) const {
  if (l > dims_.l0) return s.layers[static_cast<size_t>(l - 1 - dims_.l0)].out;
  return dims_.first ? s.emb : s.xin;
}

TransformerLayer::Grads TransformerLM::layer_grads(const Slot& s, int64_t l) const {
  TransformerLayer::Grads g = scratch_;
  if (!dims_.defer) return g;
  const TransformerLayer::Grads& k = s.stash[static_cast<size_t>(l - dims_.l0)];
  g.dout_mlp = k.dout_mlp;
  g.dout_attn = k.dout_attn;
  g.dln1 = k.dln1;
  g.dln2 = k.dln2;
  g.attn.dqkv = k.attn.dqkv;
  g.mlp.dh = k.mlp.dh;
  return g;
}

double TransformerLM::stage_forward(int64_t slot, const int32_t* tokens, const float* hidden_in, const StepInfo& info) {
  const StageDims& d = dims_;
  Slot& s = slots_.at(static_cast<size_t>(slot));
  s.info = info;
  // The products of this step read the weights' low-precision copy, made from the masters as
  // they are now, unless the optimizer step wrote it already or no weight changed since.
  if (cdt_ != ComputeDtype::kFloat32 && !*low_current_) {
    make_low_copy(cdt_, lowp_, w_, params_.total_floats());
    *low_current_ = true;
  }
  for (int64_t b = 0; b < d.B; ++b) {
    std::memcpy(s.inputs + b * d.T, tokens + b * (d.T + 1), sizeof(int32_t) * d.T);
    std::memcpy(s.targets + b * d.T, tokens + b * (d.T + 1) + 1, sizeof(int32_t) * d.T);
  }
  const int64_t V = spec_.vocab;
  for (int64_t i = 0; i < d.N; ++i)
    if (s.inputs[i] < 0 || s.inputs[i] >= V || s.targets[i] < 0 || s.targets[i] >= V)
      throw std::out_of_range("token id " + std::to_string(s.inputs[i] < 0 || s.inputs[i] >= V ? s.inputs[i] : s.targets[i]) +
                              " outside the vocabulary [0, " + std::to_string(V) + ")");
  const BlockEnv e = env(s);
  // The step timeline's spans (core/trace/trace.h; nothing when not profiling): the embedding, each layer, the head.
  if (d.first) {
    trace::Span span("compute", "embedding fwd");
    embedding_.fwd(e, s.emb, s.inputs);
  } else {
    std::memcpy(s.xin, hidden_in, sizeof(float) * d.Nl * d.C);
  }
  for (int64_t l = d.l0; l < d.l1; ++l) {
    trace::Span span(trace::kOn, "compute", "layer %d fwd", static_cast<int>(l));
    span.arg("layer", static_cast<double>(l));
    layers_[static_cast<size_t>(l - d.l0)].fwd(e, layer_input(s, l), s.layers[static_cast<size_t>(l - d.l0)]);
    progress();
  }
  if (!d.last) return 0.0;
  trace::Span span("compute", "head fwd");
  return head_.fwd(e, layer_input(s, d.l1), s.targets, s.head);
}

const float* TransformerLM::stage_output(int64_t slot) const {
  const Slot& s = slots_.at(static_cast<size_t>(slot));
  return layer_input(s, dims_.l1);
}

void TransformerLM::stage_backward(int64_t slot, BwdPass pass, const float* dhidden_out, float grad_scale) {
  const StageDims& d = dims_;
  if (pass != BwdPass::kBoth && !d.defer)
    throw std::logic_error("a backward split into input and weight passes needs defer_weight_grads (what the weight "
                           "pass reads is scratch otherwise)");
  Slot& s = slots_.at(static_cast<size_t>(slot));
  BlockEnv e = env(s);
  e.grad_scale = grad_scale;
  const bool input = pass != BwdPass::kWeight;
  // The step timeline's names of the pass (the input and weight passes apart when split).
  const char* const pass_name = pass == BwdPass::kBoth ? "bwd" : pass == BwdPass::kInput ? "bwd input" : "bwd weight";
  if (d.last) {
    // share_logits: the head's whole backward in the input pass (the logits are shared), none in the weight pass.
    const BwdPass head_pass = d.share_logits && pass == BwdPass::kInput ? BwdPass::kBoth : pass;
    if (!(d.share_logits && pass == BwdPass::kWeight)) {
      trace::Span span(trace::kOn, "compute", "head %s", pass_name);
      head_.bwd(e, head_pass, scratch_.dres, grad_scale, layer_input(s, d.l1), s.targets, s.head);
    }
    if (pass == BwdPass::kBoth) grads_ready_from(head_.first_offset());
  } else if (input) {
    std::memcpy(scratch_.dres, dhidden_out, sizeof(float) * d.Nl * d.C);
  }
  for (int64_t l = d.l1 - 1; l >= d.l0; --l) {
    const TransformerLayer& layer = layers_[static_cast<size_t>(l - d.l0)];
    const TransformerLayer::Acts& a = s.layers[static_cast<size_t>(l - d.l0)];
    const float* x = layer_input(s, l);
    trace::Span span(trace::kOn, "compute", "layer %d %s", static_cast<int>(l), pass_name);
    span.arg("layer", static_cast<double>(l));
    if (input) layer.recompute(e, d.mode(l), x, a, scratch_.attn.dy);
    layer.bwd(e, pass, x, a, layer_grads(s, l));
    if (pass == BwdPass::kBoth) grads_ready_from(layer.first_offset());
    progress();
  }
  // The embedding has only a weight gradient: it runs in the weight pass, from its output
  // gradient as the input pass left it (kept per slot when the passes run apart), so a tied
  // embedding accumulates its two gradients in the fused order.
  if (d.first) {
    if (pass == BwdPass::kInput) {
      std::memcpy(s.demb, scratch_.dres, sizeof(float) * d.Nl * d.C);
    } else {
      trace::Span span(trace::kOn, "compute", "embedding %s", pass_name);
      embedding_.bwd(e, pass == BwdPass::kBoth ? scratch_.dres : s.demb, s.inputs);
    }
  }
  if (pass != BwdPass::kInput) grads_ready_from(0);
}

double TransformerLM::forward(const int32_t* tokens, const StepInfo& info) {
  return stage_forward(0, tokens, nullptr, info);
}

void TransformerLM::backward(float grad_scale) { stage_backward(0, BwdPass::kBoth, nullptr, grad_scale); }

std::vector<MoeLayerStats> TransformerLM::moe_stats() const { return moe_stats(0); }

std::vector<MoeLayerStats> TransformerLM::moe_stats(int64_t slot) const {
  std::vector<MoeLayerStats> out;
  const Slot& s = slots_.at(static_cast<size_t>(slot));
  for (int64_t l = dims_.l0; l < dims_.l1; ++l) {
    if (!spec_.moe.is_moe(l)) continue;
    const double* st = s.layers[static_cast<size_t>(l - dims_.l0)].moe.stats;
    MoeLayerStats m;
    m.layer = l;
    m.aux_sum = st[0];
    m.z_sum = st[1];
    m.dropped = static_cast<int64_t>(st[2]);
    const int64_t E = spec_.moe.experts;
    for (int64_t e = 0; e < E; ++e) m.tokens_per_expert.push_back(static_cast<int64_t>(st[3 + e]));
    for (int64_t e = 0; e < E; ++e) m.kept_per_expert.push_back(static_cast<int64_t>(st[3 + E + e]));
    out.push_back(m);
  }
  return out;
}

double TransformerLM::flops_per_step(int64_t batch) const {
  // Megatron's model FLOPs (Narayanan et al. 2021), generalised to grouped-query attention and a
  // gated MLP: 3 (forward + 2x backward) x 2 FLOPs per multiply-add, per token:
  //   L (C (H + 2 Hkv) D + C H D + m C F + 2 T C) + C V,   m = 3 (SwiGLU) or 2 (GELU MLP);
  // for GPT-2 this is 72 B T L h^2 (1 + T/(6h) + V/(12 L h)).
  const TransformerSpec& s = spec_;
  const double C = static_cast<double>(s.hidden), D = static_cast<double>(s.head_dim()),
               H = static_cast<double>(s.heads), Hkv = static_cast<double>(s.kv_heads),
               F = static_cast<double>(s.ffn), T = static_cast<double>(s.seq), L = static_cast<double>(s.layers),
               V = static_cast<double>(s.vocab), m = s.mlp == MlpKind::kSwiGLU ? 3.0 : 2.0;
  // An MoE layer counts the FLOPs its tokens run (active): k experts' MLPs and the router's C E.
  double moe_layers = 0;
  for (int64_t l = 0; l < s.layers; ++l) moe_layers += s.moe.is_moe(l) ? 1.0 : 0.0;
  const double k = static_cast<double>(s.moe.topk), E = static_cast<double>(s.moe.experts);
  const double mlp = (L - moe_layers) * m * C * F + moe_layers * (k * m * C * F + C * E);
  const double per_token = L * (C * (H + 2 * Hkv) * D + C * H * D + 2 * T * C) + mlp + C * V;
  return 6.0 * static_cast<double>(batch) * T * per_token;
}

}  // namespace gf
