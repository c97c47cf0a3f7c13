// The stage plan: the sizes a layout gives one rank (StageDims::make) and every buffer of its
// activations, workspaces and scratch (TransformerLM::lay_out), shared by training, `plan`
// (activation_plan) and, through StageDims, generation. Nothing here allocates.
#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "models/transformer_lm.h"

namespace gf {

StageDims StageDims::make(const TransformerSpec& s, const ModelConfig& cfg, const ModelLayout& layout,
                          int64_t micro_batch, int tp_rank, const StageOptions& st) {
  const int tp = layout.tp;
  StageDims d;
  d.B = micro_batch;
  d.cp = layout.cp;
  d.cp_ring = layout.cp > 1 && layout.cp_ring;
  d.cp_ulysses = layout.cp <= 1 ? 1 : layout.cp_ring ? layout.cp_ulysses : layout.cp;
  d.T_full = s.seq;
  context_parallel_check(s, layout);
  d.T = s.seq / d.cp;
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
  d.document_resets = cfg.documents.resets() || cfg.sliding_window > 0;
  d.mixed_windows = s.mixed_windows();
  d.reset_mask = cfg.documents.reset_attention_mask;
  d.sandwich_norm = s.sandwich_norm;
  if (s.head_width <= 0 && s.hidden % s.heads != 0) throw std::invalid_argument("hidden_size must be divisible by num_heads");
  if (s.heads % tp != 0 || s.ffn % tp != 0)
    throw std::invalid_argument("num_heads and the FFN width must be divisible by model_parallel");
  if (s.kv_heads % tp != 0)
    throw std::invalid_argument("the key/value heads (n_kv_heads " + std::to_string(s.kv_heads) +
                                ") must be divisible by model_parallel " + std::to_string(tp));
  if (s.heads % s.kv_heads != 0)
    throw std::invalid_argument("num_heads must be a multiple of n_kv_heads");
  if (layout.sequence_parallel && tp > 1 && d.T % tp != 0)
    throw std::invalid_argument(d.cp > 1 ? "seq_length / context_parallel must be divisible by model_parallel under use_seq_parallel"
                                         : "seq_length must be divisible by model_parallel under use_seq_parallel");
  d.Nl = layout.sequence_parallel && tp > 1 ? d.N / tp : d.N;
  d.heads_local = s.heads / tp;
  d.head_dim = s.head_dim();
  d.qkv_width = (s.heads + 2 * s.kv_heads) / tp * d.head_dim;
  d.attn_width = d.heads_local * d.head_dim;
  d.ffn_local = s.ffn / tp;
  d.up_width = gated_mlp(s.mlp) ? 2 * d.ffn_local : d.ffn_local;
  d.act_floats = MlpBlock::act_floats(layout.compute, d.N * d.ffn_local);
  d.h_floats = MlpBlock::act_floats(layout.compute, d.N * d.up_width);
  d.norm_bf16 = TransformerLayer::ln1_keeps_bf16(layout.compute);
  d.ln_floats = MlpBlock::act_floats(layout.compute, d.Nl * s.hidden);
  d.rope = s.rope;
  d.qk_norm = s.qk_norm;
  if (s.qk_norm) {
    d.qk_pre_floats = d.N * (d.qkv_width / d.head_dim - s.kv_heads / tp) * d.head_dim;
    d.qk_rstd_floats = d.qk_pre_floats / d.head_dim;
  }
  d.core_bf16 = AttentionBlock::keeps_core_bf16(s.flash, layout.compute, d.cp > 1, s.mla.on());
  if (s.mla.on()) {
    d.mla_kept_floats = d.N * MlaProjection::kept_per_row(s);
    d.y_v_floats = d.N * d.heads_local * s.mla.v;
    d.mla_scratch_floats = d.N * MlaProjection::scratch_per_row(s);
  }
  d.qkv_floats = d.core_bf16 ? (d.N * d.qkv_width + 1) / 2 : d.N * d.qkv_width;
  d.attn_y_floats = d.core_bf16 ? (d.N * d.attn_width + 1) / 2 : d.N * d.attn_width;
  d.layer_norm = s.norm == NormKind::kLayerNorm;
  const bool vocab_parallel = layout.vocab_parallel();
  const int64_t Vp = cfg.padded_vocab(vocab_parallel ? tp : 1);
  d.vocab.parallel = vocab_parallel;
  d.vocab.local = vocab_parallel ? Vp / tp : Vp;
  d.vocab.begin = vocab_parallel ? tp_rank * d.vocab.local : 0;
  d.vocab.valid = std::clamp<int64_t>(s.vocab - d.vocab.begin, 0, d.vocab.local);
  d.head_rows = vocab_parallel ? d.N : d.Nl;
  if (s.lora.on && s.lora.loss_chunk > 0) {
    if (vocab_parallel)
      throw std::invalid_argument("pet_config.loss_vocab_chunk with a vocabulary-parallel head is not built: set "
                                  "parallel_config.vocab_emb_dp: True or loss_vocab_chunk: 0");
    d.loss_chunk = std::min(s.lora.loss_chunk, std::max<int64_t>(d.vocab.valid, 1));
  }
  if (d.low_precision) {
    const int64_t bytes = d.head_rows * d.vocab.local * low_copy_element_bytes(layout.compute);
    d.dlogits_low_floats = (bytes + 3) / 4;
  }
  if (s.flash) {
    d.flash_tiles = ops::flash_tiles(layout.compute == ComputeDtype::kBFloat16);
    d.flash_floats = omp_get_max_threads() *
                     ops::flash_workspace_per_thread({d.B, d.T, d.heads_local, d.head_dim}, d.flash_tiles);
    if (layout.compute == ComputeDtype::kBFloat16 && !d.cp_ring) {
      // The shape the core sees (AttentionBlock::shape): under ulysses_cp the whole sequence of 1 / cp of
      // this rank's heads.
      const int64_t U = d.cp > 1 ? d.cp_ulysses : 1, kv_local = (d.qkv_width / d.head_dim - d.heads_local) / 2;
      ops::AttentionShape core{d.B, d.T_full, d.heads_local / U, d.head_dim};
      core.kv_heads = kv_local / U;
      d.flash_bf16_floats = ops::flash_bf16_scratch_floats(core, d.flash_tiles, omp_get_max_threads());
    }
  }
  d.recomputed.assign(static_cast<size_t>(d.L), false);
  for (int64_t l = 0; l < d.L; ++l) d.recomputed[l] = layout.recomputes(l);
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
  bool recomputes_here = false;
  for (int64_t l = d.l0; l < d.l1; ++l) recomputes_here = recomputes_here || d.recomputed[l];
  if (d.defer && recomputes_here)
    throw std::invalid_argument("a deferred weight pass reads activations that recompute would overwrite; "
                                "turn recompute off for zero-bubble schedules");
  return d;
}

// Context parallel (parallel/context_parallel.h): each rank holds seq_length / cp positions; the
// Ulysses core sees the whole sequence of 1 / cp of this tensor-parallel rank's heads, the ring its
// rows' chunks of all of them, hybrid_cp its Ulysses group's chunks of 1 / U of them.
void StageDims::context_parallel_check(const TransformerSpec& s, const ModelLayout& layout) {
  const int cp = layout.cp;
  if (cp < 1) throw std::invalid_argument("parallel_config.context_parallel must be >= 1");
  if (cp == 1) return;
  const std::string key = "parallel_config.context_parallel " + std::to_string(cp);
  if (s.seq % cp != 0)
    throw std::invalid_argument(key + ": seq_length " + std::to_string(s.seq) + " is not divisible by it");
  const int U = layout.cp_ring ? layout.cp_ulysses : cp;  // Ulysses' degree (1: the ring alone)
  if (U < 1 || cp % U != 0)
    throw std::invalid_argument(key + ": the Ulysses degree " + std::to_string(U) + " does not divide it");
  if (layout.cp_ring) {
    if (s.seq % (2 * cp) != 0)
      throw std::invalid_argument(key + ": " + (U > 1 ? "hybrid_cp" : "colossalai_cp") +
                                  " cuts the sequence into 2 x context_parallel chunks (causal load "
                                  "balance); seq_length " + std::to_string(s.seq) + " is not divisible by " + std::to_string(2 * cp));
  }
  const int64_t heads = static_cast<int64_t>(layout.tp) * U;
  if (U > 1 && (s.heads % heads != 0 || s.kv_heads % heads != 0))
    throw std::invalid_argument(key + ": " + (layout.cp_ring ? "hybrid_cp" : "ulysses_cp") +
                                " gives each rank of a Ulysses group whole heads, so num_heads (" + std::to_string(s.heads) +
                                ") and the key/value heads (" + std::to_string(s.kv_heads) + ") must be divisible by model_parallel x " +
                                (layout.cp_ring ? "ulysses_degree_in_cp" : "context_parallel") + " = " + std::to_string(heads));
  if (s.moe.experts > 1 && s.moe.capacity_factor > 0.0)
    throw std::invalid_argument(key + ": an MoE capacity (moe_config.capacity_factor > 0) drops by position in the whole "
                                "sequence, which context parallel splits; not built: use capacity_factor <= 0 (dropless)");
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
      : d(dims), p(plan), N(dims.N), Nl(dims.Nl), C(dims.C), probs(dims.B * dims.heads_local * dims.T * dims.T_full),
        lse(dims.B * dims.heads_local * dims.T) {}

  int32_t* ints(const std::string& n, int64_t count) { return reinterpret_cast<int32_t*>(p.take(n, count)); }
  NormBlock::Acts norm_acts(const std::string& n) {
    NormBlock::Acts a;
    if (d.layer_norm) a.mean = p.take(n + ".mean", Nl);
    a.rstd = p.take(n + ".rstd", Nl);
    return a;
  }
  // dense: the set has an MLP's buffers; ln2_low: its ln2 holds bf16 alone (TransformerLayer::ln2_keeps_bf16).
  TransformerLayer::Acts full_set(const std::string& n, bool dense, bool ln2_low) {
    TransformerLayer::Acts a;
    a.ln1 = p.take(n + ".ln1", d.ln_floats);
    a.n1 = norm_acts(n + ".norm1");
    a.attn.qkv = p.take(n + ".qkv", d.qkv_floats);
    a.attn.y = p.take(n + ".attn_y", d.attn_y_floats);
    if (d.mla_kept_floats > 0) {
      a.attn.mla = p.take(n + ".mla_latents", d.mla_kept_floats);
      a.attn.y_v = p.take(n + ".attn_y_v", d.y_v_floats);
    }
    if (d.qk_norm) {
      a.attn.qk_pre = p.take(n + ".qk_pre", d.qk_pre_floats);
      a.attn.qk_rstd = p.take(n + ".qk_rstd", d.qk_rstd_floats);
    }
    a.res2 = p.take(n + ".res2", Nl * C);
    a.ln2 = p.take(n + ".ln2", ln2_low ? d.ln_floats : Nl * C);
    a.n2 = norm_acts(n + ".norm2");
    if (dense) a.mlp.h = p.take(n + ".mlp_h", d.h_floats);
    if (d.sandwich_norm) {  // the sublayers' outputs, their norms' inputs
      a.attn_out = p.take(n + ".attn_out", Nl * C);
      a.n3 = norm_acts(n + ".post_attn_norm");
      a.mlp_out = p.take(n + ".mlp_out", Nl * C);
      a.n4 = norm_acts(n + ".post_mlp_norm");
    }
    return a;
  }
  TransformerLayer::Grads stash(const std::string& n) {
    TransformerLayer::Grads g;
    g.dout_mlp = p.take(n + ".dout_mlp", Nl * C);
    g.dout_attn = p.take(n + ".dout_attn", Nl * C);
    g.dln2 = p.take(n + ".dln2", Nl * C);
    g.dln1 = p.take(n + ".dln1", Nl * C);
    g.attn.dqkv = p.take(n + ".dqkv", N * d.qkv_width);
    g.mlp.dh = p.take(n + ".dmlp_h", d.h_floats);  // bf16 under MlpBlock::keeps_bf16, as h
    if (d.sandwich_norm) {
      g.dpost_mlp = p.take(n + ".dpost_mlp", Nl * C);
      g.dpost_attn = p.take(n + ".dpost_attn", Nl * C);
    }
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
    if (d.keeps_lse() && mode != Recompute::kFull) a.attn.lse = p.take(n + ".lse", lse);
    if (mode == Recompute::kNone) {
      if (!d.keeps_lse()) a.attn.probs = p.take(n + ".probs", probs);
      if (!d.moe.is_moe(l)) a.mlp.act = p.take(n + ".mlp_act", d.act_floats);
      return;
    }
    if (!have_shared_core) {
      if (d.keeps_lse()) shared.attn.lse = p.take("recompute.lse", lse);
      else shared.attn.probs = p.take("recompute.probs", probs);
      shared.mlp.act = p.take("recompute.mlp_act", d.act_floats);
      have_shared_core = true;
    }
    if (!d.keeps_lse()) a.attn.probs = shared.attn.probs;
    if (mode == Recompute::kFull) a.attn.lse = shared.attn.lse;
    a.mlp.act = shared.mlp.act;
  }
  TransformerLayer::Acts layer(const std::string& n, int64_t l) {
    const Recompute mode = d.mode(l);
    TransformerLayer::Acts a;
    if (mode == Recompute::kFull) {
      if (!have_shared) {
        shared = full_set("recompute.full", d.any_dense, d.norm_bf16 && !d.any_moe);
        have_shared = true;
      }
      a = shared;
    } else {
      a = full_set(n, !d.moe.is_moe(l), d.norm_bf16 && !d.moe.is_moe(l));
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
    if (d.loss_chunk > 0) {
      // A frozen head's chunked loss (LmHeadBlock::Acts::dh): one chunk of logits and the running sums, shared
      // by the slots (used within a forward alone); each slot keeps its input gradient until its backward.
      if (k == 0) {
        h.logits = p.take("head.logits_chunk", d.head_rows * d.loss_chunk);
        h.sum = p.take("head.chunk_sum", d.head_rows);
      } else {
        h.logits = b.slots[0].head.logits;
        h.sum = b.slots[0].head.sum;
      }
      h.dh = p.take(sn + ".head_dh", d.head_rows * C);
    } else if (!d.share_logits || k == 0) {
      h.logits = p.take((d.share_logits ? "head" : sn) + ".logits", d.head_rows * d.vocab.local);
    } else {
      h.logits = b.slots[0].head.logits;
    }
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
    if (d.document_resets || d.cp > 1) s.positions = ints(sn + ".positions", N);
    if (d.document_resets) s.key_lo = ints(sn + ".key_lo", d.B * d.T_full);
    if (d.mixed_windows && d.reset_mask) s.key_lo_full = ints(sn + ".key_lo_full", d.B * d.T_full);
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
    if (d.sandwich_norm) g.dpost_mlp = g.dpost_attn = p.take("bwd.dpost", Nl * C);
    g.attn.dy = p.take("bwd.attn_dy", N * d.attn_width);
    g.attn.dqkv = p.take("bwd.dqkv", N * d.qkv_width);
    g.mlp.dact = p.take("bwd.mlp_dact", d.act_floats);  // bf16 under MlpBlock::keeps_bf16, as act
    g.mlp.dh = p.take("bwd.mlp_dh", d.h_floats);
    if (d.mla_scratch_floats > 0) b.mla = p.take("mla.scratch", d.mla_scratch_floats);
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
    if (d.flash && !d.cp_ring) b.flash = p.take("flash.workspace", d.flash_floats);
    if (d.flash_bf16_floats > 0) b.flash_bf16 = p.take("flash.bf16_scratch", d.flash_bf16_floats);
    if (d.cp_ring) {  // ring attention's blocks (parallel/context_parallel.h)
      const int64_t kv = N * (d.qkv_width - d.attn_width);
      for (int i = 0; i < 2; ++i) b.cp.ring.kv[i] = p.take("cp.ring_kv" + std::to_string(i), kv);
      for (int i = 0; i < 2; ++i) b.cp.ring.dkv[i] = p.take("cp.ring_dkv" + std::to_string(i), kv);
      b.cp.ring.dkv_in = p.take("cp.ring_dkv_in", kv);
      b.cp.ring.m = p.take("cp.ring_max", N * d.heads_local);
      b.cp.ring.di = p.take("cp.ring_di", N * d.heads_local);
    }
    if (d.cp_ulysses > 1) {  // Ulysses' exchanges (parallel/context_parallel.h)
      b.cp.local = p.take("cp.qkv_local", N * d.qkv_width);
      b.cp.send = p.take("cp.send", N * d.qkv_width);
      b.cp.recv = p.take("cp.recv", N * d.qkv_width);
      b.cp.y = p.take("cp.attn_y", N * d.attn_width);
      b.cp.dqkv = p.take("cp.dqkv", N * d.qkv_width);
    }
    if (d.cp > 1) b.cp_ints = ints("cp.sequence", 3 * d.B * d.T_full);
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

BufferPlan TransformerLM::activation_plan(const TransformerSpec& s, const ModelConfig& cfg, const ModelLayout& layout,
                                          int64_t micro_batch, int tp_rank, const StageOptions& st) {
  BufferPlan p;
  Buffers b;
  lay_out(StageDims::make(s, cfg, layout, micro_batch, tp_rank, st), p, b);
  return p;
}

}  // namespace gf
