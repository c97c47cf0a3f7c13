#include "models/transformer_lm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/math/parallel_memory.h"
#include "core/trace/trace.h"
#include "models/frozen_base.h"
#include "models/lora.h"

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
  m.drop_by_probs = c.token_drop_policy == TokenDropPolicy::kProbs;
  m.aux_factor = static_cast<float>(c.aux_loss_factor);
  m.z_factor = static_cast<float>(c.z_loss_factor);
  m.router_low_precision = c.router_bf16;
  m.allgather_dispatch = c.token_dispatcher == TokenDispatcher::kAllGather;
  m.ffn = c.expert_ffn;
  m.shared_ffn = c.shared_expert_ffn;
  m.shared_gate = c.shared_expert_gate;
  m.sparse_step = c.sparse_step;
  m.dense_layers = c.dense_layers;
  m.sigmoid = c.router_sigmoid;
  m.groups = c.router_groups;
  m.group_topk = c.router_group_topk;
  m.group_score_k = c.router_group_score_topk > 0 ? c.router_group_score_topk
                                                   : std::max<int64_t>(1, c.num_experts_chosen / std::max<int64_t>(1, c.router_group_topk));
  m.scale = static_cast<float>(c.router_scaling);
  m.expert_bias = c.expert_bias;
  return m;
}

ParamTable TransformerLM::make_param_table(const TransformerSpec& s, const NameMap& names, const StageOptions& st) {
  if (!s.lora.on) return make_base_table(s, names, st);
  const bool whole = st.layer_begin == 0 && (st.layer_end < 0 || st.layer_end == s.layers);
  return lora_table(s.lora, names, make_base_table(s, names, st), s.layers, whole, s.tied_head);
}

ParamTable TransformerLM::make_base_table(const TransformerSpec& s, const NameMap& names, const StageOptions& st) {
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
  if (ctx.size(GridAxis::kCp) != layout.cp)
    throw std::invalid_argument("TransformerLM: the layout's context_parallel " + std::to_string(layout.cp) +
                                " is not the process grid's " + std::to_string(ctx.size(GridAxis::kCp)));
  tp_ = TensorParallel(&ctx.group(GridAxis::kTp), layout.sequence_parallel, d.N);
  ep_ = ExpertParallel(&ctx.group(GridAxis::kEp));
  {  // the context group and the groups its core exchanges in (parallel/context_parallel.h)
    const Communicator& g = ctx.group(GridAxis::kCp);
    if (d.cp_ring && d.cp_ulysses > 1) {
      if (ctx.context_ulysses().size() != d.cp_ulysses)
        throw std::invalid_argument("TransformerLM: hybrid_cp's Ulysses degree " + std::to_string(d.cp_ulysses) +
                                    " is not the process grid's Ulysses groups' " + std::to_string(ctx.context_ulysses().size()));
      cp_ = ContextParallel(&g, &ctx.context_ulysses(), &ctx.context_ring());
    } else {
      cp_ = ContextParallel(&g, d.cp_ring ? nullptr : &g, d.cp_ring ? &g : nullptr);
    }
  }
  cdt_ = layout.compute;
  if (arena != nullptr) {
    w_ = arena->weights;
    g_ = arena->grads;
    lowp_ = arena->low;
    low_current_ = arena->low_current;
  } else {
    // On demand (pages resident once written): ZeRO-2 and 3 give the other ranks' slices back.
    weights_ = AlignedBuffer<float>(static_cast<size_t>(params_.total_floats()), kOnDemand);
    grads_ = AlignedBuffer<float>(static_cast<size_t>(params_.total_floats()), kOnDemand);
    low_ = AlignedBuffer<std::byte>(static_cast<size_t>(params_.total_floats() * low_copy_element_bytes(cdt_)), kOnDemand);
    w_ = weights_.data();
    g_ = grads_.data();
    lowp_ = low_.data();
  }
  if (spec.rope)
    rope_ = std::make_unique<ops::RopeTable<float>>(
        rope_table(spec, spec.rope_positions));
  if (spec.rope && spec.local_rope_theta > 0)
    rope_local_ = std::make_unique<ops::RopeTable<float>>(rope_table_local(spec, spec.rope_positions));
  if (spec.lora.on) {
    // LoRA: the blocks read the frozen base (this chunk's own weights); params_ are the adapters.
    if (cdt_ != ComputeDtype::kFloat32)
      throw std::invalid_argument("LoRA (model_config.pet_config) computes in float32: set model_config.compute_dtype: float32");
    base_params_ = make_placement_base(spec, names_, cfg, layout, ctx.index(GridAxis::kTp), stage, ctx.index(GridAxis::kEp));
    base_weights_ = AlignedBuffer<float>(static_cast<size_t>(base_params_.total_floats()), kOnDemand);
    bw_ = base_weights_.data();
    lora_scratch_ = AlignedBuffer<float>(static_cast<size_t>(2 * d.N * spec.lora.rank));
    if (spec.lora.dropout > 0.0f)  // the widest adapted input: hidden, the local FFN width or the local heads' width
      lora_drop_ = AlignedBuffer<float>(static_cast<size_t>(
          d.N * std::max({spec.hidden, spec.ffn / d.tp, spec.heads * spec.head_dim() / d.tp, spec.mla.kv_rank,
                          spec.mla.q_rank})));
    base_view_ = std::make_unique<FrozenBaseView>(*this, base_params_, bw_, d.first && d.last);
  }
  const Placement& bound = spec.lora.on ? base_params_ : params_;
  if (d.first) {
    embedding_ = EmbeddingBlock(spec, d.vocab);
    embedding_.bind(bound, names_);
    if (spec.lora.on) embedding_.bind_saved(params_, names_);  // PEFT's modules_to_save embed_tokens
  }
  for (int64_t l = d.l0; l < d.l1; ++l) {
    layers_.emplace_back(spec, d.tp, l, rope_.get(), &flash_ws_, d.ep, d.N, rope_local_.get());
    layers_.back().bind(bound, names_);
    if (spec.lora.on)
      layers_.back().bind_lora(params_, names_, spec.lora);
  }
  if (d.last) {
    head_ = LmHeadBlock(spec, d.vocab, d.head_rows);
    head_.set_loss_chunk(d.loss_chunk);
    head_.bind(bound, names_);
    if (spec.lora.on) head_.bind_saved(params_, names_);  // PEFT's modules_to_save lm_head
  }
  if (spec.lora.on) {
    lora_layout();  // the bf16 base's layer ranges, ZeRO-3's adapter units (models/transformer_lm_lora.cpp)
  } else {
    if (d.first) emb_reads_ = {embedding_.first_offset()};
    for (const TransformerLayer& l : layers_) {
      layer_reads_.push_back({l.first_offset(), l.mlp_offset(), l.expert_offset()});
      attn_reads_.push_back({l.first_offset()});
      mlp_reads_.push_back({l.mlp_offset(), l.expert_offset()});
    }
    if (d.last) head_reads_ = {head_.first_offset(), head_.weight_offset()};
  }
  if (d.last && !spec.lora.on) {
    std::vector<int64_t> dense, experts;
    for (const TransformerLayer& l : layers_) {
      dense.push_back(l.first_offset());
      dense.push_back(l.mlp_offset());
      if (l.expert_offset() >= 0) experts.push_back(l.expert_offset());
    }
    dense.push_back(head_.first_offset());
    chunk_rows_ = vocab_chunk_rows(spec, names_, params_, d.first, dense, experts);
  }
  head_all_reads_ = head_reads_;
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
  cps_ = b.cp;
  cp_ints_ = b.cp_ints;
  partial_ = b.partial;
  dfull_ = b.dfull;
  mla_scratch_ = b.mla;
  // RoPE's fp32 q|k|v before a layer keeps it in bf16: the backward's shared q|k|v gradient scratch, which
  // holds nothing between one layer's backward and the next (a layer's weight pass run apart reads its
  // stashed copy), so nothing is live in it while any layer's forward runs, a full recompute's included.
  if (d.core_bf16 && (d.rope || d.qk_norm)) qkv_rope_ = b.scratch.attn.dqkv;
  if (d.flash) {
    flash_ws_.threads = omp_get_max_threads();
    flash_ws_.data = b.flash;
    flash_ws_.tiles = d.flash_tiles;
    flash_ws_.bf16_scratch = b.flash_bf16;
    flash_ws_.bf16_scratch_floats = d.flash_bf16_floats;
  }
}

BlockEnv TransformerLM::env(const Slot& s) {
  BlockEnv e;
  e.tp = &tp_;
  e.ep = &ep_;
  if (cp_.on()) {
    e.cp = &cp_;
    e.cps = cps_;
  }
  e.cdt = cdt_;
  e.weights = w_;
  e.grads = g_;
  e.low = lowp_;
  if (spec_.lora.on) {  // the blocks read the frozen base; the adapters are the arena that trains
    e.weights = bw_;
    e.grads = nullptr;
    e.low = nullptr;
    e.lora_w = w_;
    e.lora_g = g_;
    e.lora_scratch = lora_scratch_.data();
    e.lora_drop = lora_drop_.data();
  }
  e.B = dims_.B;
  e.T = dims_.T;
  e.N = dims_.N;
  e.Nl = dims_.Nl;
  e.gather = gather_;
  e.partial = partial_;
  e.dfull = dfull_;
  e.qkv_rope = qkv_rope_;
  e.mla_scratch = mla_scratch_;
  e.info = s.info;
  if (cfg_.documents.reset_position_ids || cp_.on()) e.positions = s.positions;
  if (cfg_.documents.reset_attention_mask || cfg_.sliding_window > 0) e.key_lo = s.key_lo;
  if (dims_.mixed_windows && cfg_.documents.reset_attention_mask) e.key_lo_full = s.key_lo_full;
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
  g.dpost_mlp = k.dpost_mlp;
  g.dpost_attn = k.dpost_attn;
  return g;
}

double TransformerLM::stage_forward(int64_t slot, const int32_t* tokens, const float* hidden_in, const StepInfo& info) {
  const StageDims& d = dims_;
  Slot& s = slots_.at(static_cast<size_t>(slot));
  s.info = info;
  // The products of this step read the weights' low-precision copy, made from the masters as
  // they are now, unless the optimizer step wrote it already or no weight changed since.
  if (cdt_ != ComputeDtype::kFloat32 && !*low_current_ && gate_ == nullptr) {
    make_low_copy(cdt_, lowp_, w_, params_.total_floats());
    *low_current_ = true;
  }
  if (cp_.on()) {
    context_rows(s, tokens);
  } else {
    for (int64_t b = 0; b < d.B; ++b) {
      std::memcpy(s.inputs + b * d.T, tokens + b * (d.T + 1), sizeof(int32_t) * d.T);
      std::memcpy(s.targets + b * d.T, tokens + b * (d.T + 1) + 1, sizeof(int32_t) * d.T);
    }
    split_targets(cfg_, s.inputs, s.targets, d.N);
  }
  const int64_t V = spec_.vocab;
  for (int64_t i = 0; i < d.N; ++i)
    if (s.inputs[i] < 0 || s.inputs[i] >= V || s.targets[i] < -1 || s.targets[i] >= V)
      throw std::out_of_range("token id " + std::to_string(s.inputs[i] < 0 || s.inputs[i] >= V ? s.inputs[i] : s.targets[i]) +
                              " outside the vocabulary [0, " + std::to_string(V) + ")");
  if (d.document_resets && !cp_.on()) {
    document_layout(cfg_.documents, cfg_.eod_id(), s.inputs, d.B, d.T, s.positions, s.key_lo, cfg_.sliding_window);
    if (s.key_lo_full) document_layout(cfg_.documents, cfg_.eod_id(), s.inputs, d.B, d.T, s.positions, s.key_lo_full);
  }
  const BlockEnv e = env(s);
  // The step timeline's spans (core/trace/trace.h; nothing when not profiling): the embedding, each layer, the head.
  const int64_t rows = d.Nl * d.C;  // the residual stream's elements on this rank
  // ZeRO-3: each block's weights are brought just before it runs and handed back after; the next
  // block's are fetched meanwhile.
  auto reads_after = [&](int64_t l) -> const std::vector<int64_t>& {  // what follows layer l (l0 - 1: the embedding)
    static const std::vector<int64_t> none;
    if (l + 1 < d.l1) return (halves_ ? attn_reads_ : layer_reads_)[static_cast<size_t>(l + 1 - d.l0)];
    return d.last ? head_reads_ : none;
  };
  if (d.first) {
    trace::Span span("compute", "embedding fwd");
    if (chunks_on_ && spec_.tied_head && gate_) {
      // ZeRO-3, the token embedding tied to the head's chunks: looked up one chunk at a time.
      const std::vector<int64_t> pos =
          embedding_.position_offset() >= 0 ? std::vector<int64_t>{embedding_.position_offset()} : no_reads_;
      need(pos, {chunk_offset(0)});
      chunks_.enter = [&](size_t c) {
        need({chunk_offset(c)}, c + 1 < chunks_.count() ? std::vector<int64_t>{chunk_offset(c + 1)} : reads_after(d.l0 - 1));
      };
      chunks_.leave = [&](size_t c) { done({chunk_offset(c)}); };
      embedding_.fwd(e, s.emb, s.inputs, &chunks_);
      done(pos);
    } else {
      need(emb_reads_, reads_after(d.l0 - 1));
      embedding_.fwd(e, s.emb, s.inputs);
      done(emb_reads_);
    }
    check_finite(s.emb, rows, "the embedding's output");
  } else {
    parallel_copy(s.xin, hidden_in, d.Nl * d.C);
    check_finite(s.xin, rows, "the hidden state received from the previous pipeline stage");
  }
  for (int64_t l = d.l0; l < d.l1; ++l) {
    trace::Span span(trace::kOn, "compute", "layer %d fwd", static_cast<int>(l));
    span.arg("layer", static_cast<double>(l));
    const TransformerLayer::Acts& a = s.layers[static_cast<size_t>(l - d.l0)];
    const size_t i = static_cast<size_t>(l - d.l0);
    const BaseWeights held(*this, i);
    if (halves_) {  // ZeRO-2 and 3: the attention's half, then the MLP's (fetched meanwhile)
      need(attn_reads_[i], mlp_reads_[i]);
      const std::function<void()> between = [&] {
        done(attn_reads_[i]);
        need(mlp_reads_[i], reads_after(l));
      };
      layers_[i].fwd(e, layer_input(s, l), a, &between);
      done(mlp_reads_[i]);
    } else {
      need(layer_reads_[i], reads_after(l));
      layers_[i].fwd(e, layer_input(s, l), a);
      done(layer_reads_[i]);
    }
    if (check_finite_) {
      if (d.mode(l) == Recompute::kNone && a.res2)
        check_finite(a.res2, rows, "layer " + std::to_string(l) + "'s attention (input + attention output)");
      check_finite(a.out, rows, "layer " + std::to_string(l) + "'s output (" +
                                     (layers_[static_cast<size_t>(l - d.l0)].is_moe() ? "MoE" : "MLP") + " + residual)");
    }
    progress();
  }
  if (!d.last) return 0.0;
  trace::Span span("compute", "head fwd");
  double loss = 0.0;
  if (chunks_on_) {  // ZeRO-2 and 3: the logits one vocabulary chunk of the weight at a time
    const std::vector<int64_t> norm{head_.first_offset()};
    need(norm, {chunk_offset(0)});
    chunks_.enter = [&](size_t c) {
      need({chunk_offset(c)}, c + 1 < chunks_.count() ? std::vector<int64_t>{chunk_offset(c + 1)} : no_reads_);
    };
    chunks_.leave = [&](size_t c) { done({chunk_offset(c)}); };
    loss = head_.fwd(e, layer_input(s, d.l1), s.targets, s.head, &chunks_);
    done(norm);
  } else {
    need(head_all_reads_, no_reads_);
    loss = head_.fwd(e, layer_input(s, d.l1), s.targets, s.head);
    done(head_all_reads_);
  }
  if (check_finite_ && !std::isfinite(loss) && first_nonfinite_.empty())
    first_nonfinite_ = "the head's loss (final norm, logits and cross-entropy; its inputs were finite)";
  return loss;
}

// Context parallel: the micro-batch's whole samples give this rank's chunk of rows. Targets, the
// documents' positions and the attention bounds are found over the whole sequence first, as on one
// rank, then this rank's rows (ContextParallel::rows: one chunk, or the ring's two) are kept with
// their global positions.
void TransformerLM::context_rows(Slot& s, const int32_t* tokens) {
  const StageDims& d = dims_;
  const int64_t Tf = d.T_full, n = d.B * Tf;
  const ops::RowChunks at = cp_.rows(d.T);
  int32_t *in = cp_ints_, *tg = cp_ints_ + n, *pos = cp_ints_ + 2 * n;
  for (int64_t b = 0; b < d.B; ++b) {
    std::memcpy(in + b * Tf, tokens + b * (Tf + 1), sizeof(int32_t) * Tf);
    std::memcpy(tg + b * Tf, tokens + b * (Tf + 1) + 1, sizeof(int32_t) * Tf);
  }
  split_targets(cfg_, in, tg, n);
  if (d.document_resets) document_layout(cfg_.documents, cfg_.eod_id(), in, d.B, Tf, pos, s.key_lo, cfg_.sliding_window);
  if (d.document_resets && s.key_lo_full) document_layout(cfg_.documents, cfg_.eod_id(), in, d.B, Tf, pos, s.key_lo_full);
  const bool reset_positions = d.document_resets && cfg_.documents.reset_position_ids;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.T; ++t) {
      const int64_t p = at.position(t), from = b * Tf + p, to = b * d.T + t;
      s.inputs[to] = in[from];
      s.targets[to] = tg[from];
      s.positions[to] = static_cast<int32_t>(reset_positions ? pos[from] : p);
    }
}

void TransformerLM::check_finite(const float* p, int64_t n, const std::string& what) {
  if (!check_finite_ || !first_nonfinite_.empty() || p == nullptr) return;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) {
      first_nonfinite_ = what + " (element " + std::to_string(i) + " of " + std::to_string(n) + " on this rank is " +
                         (std::isnan(p[i]) ? "nan" : p[i] > 0 ? "inf" : "-inf") + ")";
      return;
    }
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
  chunks_reduced_ = false;
  const bool input = pass != BwdPass::kWeight;
  // The step timeline's names of the pass (the input and weight passes apart when split).
  const char* const pass_name = pass == BwdPass::kBoth ? "bwd" : pass == BwdPass::kInput ? "bwd input" : "bwd weight";
  if (d.last) {
    // share_logits: the head's whole backward in the input pass (the logits are shared), none in the weight pass.
    const BwdPass head_pass = d.share_logits && pass == BwdPass::kInput ? BwdPass::kBoth : pass;
    if (!(d.share_logits && pass == BwdPass::kWeight)) {
      trace::Span span(trace::kOn, "compute", "head %s", pass_name);
      const std::vector<int64_t>& after = d.l1 > d.l0 ? (halves_ ? mlp_reads_ : layer_reads_).back() : no_reads_;
      if (chunks_on_ && head_pass == BwdPass::kBoth) {
        // ZeRO-2 and 3: from the last vocabulary chunk to the first, each chunk's gradient handed to
        // its reduce-scatter as soon as it is made.
        const std::vector<int64_t> norm{head_.first_offset()};
        need(norm, {chunk_offset(chunks_.count() - 1)});
        chunks_.enter = [&](size_t c) { need({chunk_offset(c)}, c > 0 ? std::vector<int64_t>{chunk_offset(c - 1)} : after); };
        chunks_.leave = [&](size_t c) {
          done({chunk_offset(c)});
          if (unit_grads_ready(chunk_offset(c))) chunks_reduced_ = true;
        };
        head_.bwd(e, head_pass, scratch_.dres, grad_scale, layer_input(s, d.l1), s.targets, s.head, &chunks_);
        done(norm);
      } else {
        need(head_all_reads_, after);
        head_.bwd(e, head_pass, scratch_.dres, grad_scale, layer_input(s, d.l1), s.targets, s.head);
        done(head_all_reads_);
      }
      if (head_pass != BwdPass::kWeight) check_finite(scratch_.dres, d.Nl * d.C, "the head's backward (the gradient into the last layer)");
    }
    if (pass == BwdPass::kBoth && !spec_.lora.on) grads_ready_from(head_.first_offset());
    if (pass == BwdPass::kBoth && spec_.lora.on && head_.saved()) grads_ready_from(head_.weight_offset());
  } else if (input) {
    parallel_copy(scratch_.dres, dhidden_out, d.Nl * d.C);
  }
  for (int64_t l = d.l1 - 1; l >= d.l0; --l) {
    const TransformerLayer& layer = layers_[static_cast<size_t>(l - d.l0)];
    const TransformerLayer::Acts& a = s.layers[static_cast<size_t>(l - d.l0)];
    const float* x = layer_input(s, l);
    trace::Span span(trace::kOn, "compute", "layer %d %s", static_cast<int>(l), pass_name);
    span.arg("layer", static_cast<double>(l));
    const size_t i = static_cast<size_t>(l - d.l0);
    const std::vector<int64_t>& before = l > d.l0 ? (halves_ ? mlp_reads_ : layer_reads_)[i - 1] : no_reads_;
    const BaseWeights held(*this, input ? i : layers_.size());  // a weight pass reads no base weight
    if (halves_ && pass == BwdPass::kBoth && d.mode(l) == Recompute::kNone) {
      // ZeRO-2 and 3: the MLP's half (its gradients reduce-scattered as soon as they are final), then
      // the attention's (fetched meanwhile).
      need(mlp_reads_[i], attn_reads_[i]);
      const std::function<void()> between = [&] {
        done(mlp_reads_[i]);
        grads_ready_from(ready_offset(layer, true));
        need(attn_reads_[i], before);
      };
      layer.bwd(e, pass, x, a, layer_grads(s, l), &between);
      done(attn_reads_[i]);
    } else {
      need(layer_reads_[i], before);
      if (input) layer.recompute(e, d.mode(l), x, a, scratch_.attn.dy);
      layer.bwd(e, pass, x, a, layer_grads(s, l));
      done(layer_reads_[i]);
    }
    if (input) check_finite(scratch_.dres, d.Nl * d.C, "layer " + std::to_string(l) + "'s backward (the gradient into its input)");
    if (pass == BwdPass::kBoth) grads_ready_from(ready_offset(layer, false));
    progress();
  }
  // The embedding has only a weight gradient: it runs in the weight pass, from its output
  // gradient as the input pass left it (kept per slot when the passes run apart), so a tied
  // embedding accumulates its two gradients in the fused order.
  if (d.first) {
    if (pass == BwdPass::kInput) {
      parallel_copy(s.demb, scratch_.dres, d.Nl * d.C);
    } else {
      trace::Span span(trace::kOn, "compute", "embedding %s", pass_name);
      if (chunks_reduced_ && spec_.tied_head && pass == BwdPass::kBoth) {
        // The head's chunks are reduced already: the lookup's rows are added where they are owned.
        const int64_t base = embedding_.token_offset(), C = d.C;
        embedding_.bwd_rows(e, scratch_.dres, s.inputs, [&](const int32_t* ids, const float* rows, int64_t n) {
          add_grad_rows(base, C, ids, rows, n);
        });
      } else {
        embedding_.bwd(e, pass == BwdPass::kBoth ? scratch_.dres : s.demb, s.inputs);
      }
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
    m.margin = st[3 + 2 * E];
    out.push_back(m);
  }
  return out;
}

double TransformerLM::flops_per_step(int64_t batch) const { return model_flops(spec_, batch); }

double TransformerLM::model_flops(const TransformerSpec& s, int64_t batch) {
  // Megatron's model FLOPs (Narayanan et al. 2021), generalised to grouped-query attention and a
  // gated MLP: 3 (forward + 2x backward) x 2 FLOPs per multiply-add, per token:
  //   L (C (H + 2 Hkv) D + C H D + m C F + 2 T H D) + C V,   m = 3 (SwiGLU) or 2 (GELU MLP);
  // for GPT-2 this is 72 B T L h^2 (1 + T/(6h) + V/(12 L h)).
  const double C = static_cast<double>(s.hidden), D = static_cast<double>(s.head_dim()),
               H = static_cast<double>(s.heads), Hkv = static_cast<double>(s.kv_heads),
               F = static_cast<double>(s.ffn), T = static_cast<double>(s.seq), L = static_cast<double>(s.layers),
               V = static_cast<double>(s.vocab), m = gated_mlp(s.mlp) ? 3.0 : 2.0;
  // An MoE layer counts the FLOPs its tokens run (active): k experts' MLPs and the router's C E.
  double moe_layers = 0;
  for (int64_t l = 0; l < s.layers; ++l) moe_layers += s.moe.is_moe(l) ? 1.0 : 0.0;
  const double k = static_cast<double>(s.moe.topk), E = static_cast<double>(s.moe.experts);
  const double Fe = s.moe.ffn > 0 ? static_cast<double>(s.moe.ffn) : F;
  const double Fs = static_cast<double>(s.moe.shared_ffn);
  const double mlp = (L - moe_layers) * m * C * F + moe_layers * (k * m * C * Fe + C * E + m * C * Fs);
  const double per_token = L * (C * (H + 2 * Hkv) * D + C * H * D + 2 * T * H * D) + mlp + C * V;
  return 6.0 * static_cast<double>(batch) * T * per_token;
}

}  // namespace gf
