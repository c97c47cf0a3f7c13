#include "models/blocks/moe.h"

#include "core/math/parallel_memory.h"
#include "core/math/parallel_worth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/ops/activation.h"
#include "core/ops/grouped_linear.h"
#include "core/ops/linear.h"
#include "core/ops/swiglu.h"

namespace gf {

MoeBlock::Dims MoeBlock::dims(const TransformerSpec& s, int64_t N, int tp, int ep) {
  Dims d;
  d.N = N;
  d.C = s.hidden;
  d.E = s.moe.experts;
  d.k = s.moe.topk;
  d.ep = ep;
  if (d.E % ep != 0)
    throw std::invalid_argument("moe_config.expert_num " + std::to_string(d.E) + " is not divisible by expert_parallel " +
                                std::to_string(ep));
  d.El = d.E / ep;
  const int64_t F = s.moe.ffn > 0 ? s.moe.ffn : s.ffn;  // each expert's width
  if (F % tp != 0)
    throw std::invalid_argument("the experts' FFN width " + std::to_string(F) + " is not divisible by model_parallel " +
                                std::to_string(tp));
  d.Fl = F / tp;
  if (s.moe.shared_ffn % tp != 0)
    throw std::invalid_argument("the shared expert's FFN width " + std::to_string(s.moe.shared_ffn) +
                                " is not divisible by model_parallel " + std::to_string(tp));
  d.Fs = s.moe.shared_ffn / tp;
  d.up = s.mlp == MlpKind::kSwiGLU ? 2 * d.Fl : d.Fl;
  d.S = N * d.k;
  // Rows this rank's experts can receive: every choice of every rank of the group, or what
  // capacity lets through (each local expert takes at most `cap` rows of each of the group's
  // sequences).
  d.R = N * d.k * ep;
  if (s.moe.capacity_factor > 0.0) {
    const ops::RouterShape rs{N / s.seq, s.seq, d.E, d.k};
    d.R = std::min(d.R, d.El * ops::expert_capacity(rs, s.moe.capacity_factor) * rs.B * ep);
  }
  d.allgather = s.moe.allgather_dispatch;
  d.lora_r = s.lora.on ? s.lora.rank : 0;
  if (d.allgather) d.S = std::max(d.S, d.R);  // the experts' outputs stay on the expert's rank
  return d;
}

namespace {
TransformerSpec shared_expert_spec(TransformerSpec s) {
  s.ffn = s.moe.shared_ffn;
  return s;
}
}  // namespace

MoeBlock::MoeBlock(const TransformerSpec& s, int tp, int ep, int64_t layer, int64_t rows)
    : spec_(s), layer_(layer), d_(dims(s, rows, tp, ep)) {
  if (s.mlp == MlpKind::kGeGLU) throw std::invalid_argument("MoE layers of GeGLU experts are not built (SwiGLU or GELU)");
  if (s.moe.shared_ffn > 0) {
    if (s.mlp != MlpKind::kSwiGLU) throw std::invalid_argument("a shared expert is built for SwiGLU models only");
    shared_ = MlpBlock(shared_expert_spec(s), tp);
  }
}


void MoeBlock::declare(ParamTable& t, const NameMap& names) const {
  const int64_t C = spec_.hidden, F = spec_.moe.ffn > 0 ? spec_.moe.ffn : spec_.ffn, E = spec_.moe.experts, l = layer_;
  const float std = spec_.init_std;
  const float proj_std = spec_.scaled_proj_init ? std / std::sqrt(2.0f * static_cast<float>(spec_.layers)) : std;
  if (spec_.moe.shared_ffn > 0) {  // dense parameters, before the router (the experts' region comes last)
    shared_.declare(t, shared_names(names), l);
    if (spec_.moe.shared_gate) t.add({names(Role::kSharedExpertGateW, l), {1, C}, no_split(), Init::kNormal, std, true});
  }
  t.add({names(Role::kRouterW, l), {E, C}, no_split(), Init::kNormal, std, true});
  // The aux-loss-free bias: no gradient ever (AdamW leaves it: a zero gradient and no decay); the trainer moves it.
  if (spec_.moe.expert_bias) t.add({names(Role::kRouterBias, l), {E}, no_split(), Init::kZeros, 0.0f, false});
  // Each kind of expert tensor for experts 0..E-1 back to back (packed), so a rank's local experts
  // form one stack the grouped product reads at a stride.
  auto stack = [&](Role r, std::vector<int64_t> shape, SplitSpec split, Init init, float sd, bool decay,
                   Role packed_role = Role::kRouterW) {
    for (int64_t e = 0; e < E; ++e) {
      ParamSpec p{expert_name(names(r, l), e), shape, split, init, sd, decay};
      p.expert = e;
      p.experts = E;
      p.packed_with_next = e + 1 < E;
      if (packed_role != Role::kRouterW) {  // SwiGLU: gate_e then up_e, one [2F, C] matrix per expert
        p.packed_with_next = true;
        t.add(p);
        ParamSpec q{expert_name(names(packed_role, l), e), shape, split, init, sd, decay};
        q.expert = e;
        q.experts = E;
        q.packed_with_next = e + 1 < E;
        t.add(q);
        continue;
      }
      t.add(p);
    }
  };
  if (spec_.mlp == MlpKind::kSwiGLU) {
    stack(Role::kExpertGateW, {F, C}, split_dim(0), Init::kNormal, std, true, Role::kExpertUpW);
  } else {
    stack(Role::kExpertUpW, {C, F}, split_dim(1), Init::kNormal, std, true);
    if (spec_.linear_bias) stack(Role::kExpertUpB, {F}, split_dim(0), Init::kZeros, 0.0f, false);
  }
  if (spec_.out_in) stack(Role::kExpertDownW, {C, F}, split_dim(1), Init::kNormal, proj_std, true);
  else stack(Role::kExpertDownW, {F, C}, split_dim(0), Init::kNormal, proj_std, true);
  if (spec_.linear_bias) stack(Role::kExpertDownB, {C}, no_split(), Init::kZeros, 0.0f, false);
}

void MoeBlock::bind(const Placement& t, const NameMap& names) {
  const int64_t l = layer_;
  router_ = t.at(names(Role::kRouterW, l)).offset;
  bias_ = spec_.moe.expert_bias ? t.at(names(Role::kRouterBias, l)).offset : -1;
  if (spec_.moe.shared_ffn > 0) {
    shared_.bind(t, shared_names(names), l);
    shared_gate_ = spec_.moe.shared_gate ? t.at(names(Role::kSharedExpertGateW, l)).offset : -1;
  }
  const int64_t e0 = static_cast<int64_t>(t.ep_rank()) * d_.El;
  // The local experts' tensors of one kind must lie at a constant stride.
  auto first = [&](Role r, int64_t stride) {
    const int64_t off = t.at(expert_name(names(r, l), e0)).offset;
    for (int64_t e = 1; e < d_.El; ++e)
      if (t.at(expert_name(names(r, l), e0 + e)).offset != off + e * stride)
        throw std::logic_error("moe: the experts' " + names(r, l) + " are not packed in the arena");
    return off;
  };
  up_stride_ = d_.up * d_.C;
  down_stride_ = d_.Fl * d_.C;
  up_w_ = first(spec_.mlp == MlpKind::kSwiGLU ? Role::kExpertGateW : Role::kExpertUpW, up_stride_);
  if (spec_.mlp == MlpKind::kSwiGLU &&
      t.at(expert_name(names(Role::kExpertUpW, l), e0)).offset != up_w_ + d_.Fl * d_.C)
    throw std::logic_error("moe: an expert's gate and up projections are not packed in the arena");
  down_w_ = first(Role::kExpertDownW, down_stride_);
  const bool bias = spec_.linear_bias && spec_.mlp != MlpKind::kSwiGLU;
  up_b_ = bias ? first(Role::kExpertUpB, d_.Fl) : -1;
  down_b_ = spec_.linear_bias ? first(Role::kExpertDownB, d_.C) : -1;
}

MoeBlock::Acts MoeBlock::take_acts(BufferPlan& p, const std::string& n, const Dims& md) {
  auto ints = [&](const std::string& name, int64_t count) { return reinterpret_cast<int32_t*>(p.take(name, count)); };
  MoeBlock::Acts m;
  const int64_t N = md.N, Nk = N * md.k;
  m.probs = p.take(n + ".router_probs", N * md.E);
  m.lse = p.take(n + ".router_lse", N);
  m.experts = ints(n + ".router_experts", Nk);
  m.weights = p.take(n + ".router_weights", Nk);
  m.kept = reinterpret_cast<uint8_t*>(p.take(n + ".router_kept", (Nk + 3) / 4));
  m.pos = ints(n + ".router_pos", Nk);
  m.counts = reinterpret_cast<int64_t*>(p.take(n + ".moe_counts", 2 * (md.E + md.ep * md.El + md.El + 1)));
  m.xperm = p.take(n + ".experts_x", md.R * md.C);
  m.h = p.take(n + ".experts_h", md.R * md.up);
  m.act = p.take(n + ".experts_act", md.R * md.Fl);
  m.ret = p.take(n + ".experts_out", md.S * md.C);
  if (md.allgather) {
    m.src = ints(n + ".experts_src", md.R);
    m.row_w = p.take(n + ".experts_gate_weight", md.R);
  }
  if (md.Fs > 0) {  // fp32 sizes (a bf16 MLP keeps half of them)
    m.shared_h = p.take(n + ".shared_expert_h", N * 2 * md.Fs);
    m.shared_act = p.take(n + ".shared_expert_act", N * md.Fs);
    m.shared_out = p.take(n + ".shared_expert_out", N * md.C);
    m.shared_score = p.take(n + ".shared_expert_gate", N);
  }
  return m;
}

MoeBlock::Scratch MoeBlock::take_scratch(BufferPlan& p, const Dims& md, int tp_size) {
  MoeBlock::Scratch m;
  const int64_t N = md.N, C = md.C;
  m.send = p.take("moe.send", md.S * md.C);
  m.recv = p.take("moe.recv", md.R * md.C);
  m.perm = p.take("moe.perm", md.R * md.C);
  m.dact = p.take("moe.dact", md.R * md.Fl);
  m.dh = p.take("moe.dh", md.R * md.up);
  m.dw = p.take("moe.dweights", N * md.k);
  m.dlogits = p.take("moe.dlogits", N * md.E);
  if (tp_size > 1) m.sum = p.take("moe.sum", N * C);
  if (md.allgather) {
    m.all = p.take("moe.gathered_rows", md.ep * N * C);
    m.all_experts = p.take("moe.gathered_experts", md.ep * N * md.k);
    m.all_weights = p.take("moe.gathered_weights", md.ep * N * md.k);
  }
  if (md.Fs > 0) {
    m.shared_dact = p.take("moe.shared_expert_dact", N * md.Fs);
    m.shared_dh = p.take("moe.shared_expert_dh", N * 2 * md.Fs);
    m.shared_dout = p.take("moe.shared_expert_dout", N * C);
    m.shared_dx = p.take("moe.shared_expert_dx", N * C);
    m.shared_dz = p.take("moe.shared_expert_dz", N);
  }
  if (md.lora_r > 0) m.lora = p.take("moe.lora", md.R * 2 * md.lora_r);
  return m;
}


ops::RouterShape MoeBlock::shape(const BlockEnv& e) const {
  ops::RouterShape s{e.B, e.T, d_.E, d_.k};
  if (e.context_parallel()) {  // each sequence's balancing loss over the context group's rows of it
    s.T_seq = e.seq_full();
    const ContextParallel* cp = e.cp;
    s.seq_sum = [cp](double* x, int64_t n) { cp->allreduce_sum(x, n); };
  }
  return s;
}

namespace {

// Rows of `from` in source-major order (source s, then local expert el: counts[s El + el] rows)
// copied to expert-major order (el, then s), or back when `to_source` is set.
void permute(float* to, const float* from, const int64_t* counts, int64_t ep, int64_t El, int64_t C,
             bool to_source) {
  std::vector<int64_t> src_off(static_cast<size_t>(ep * El)), exp_off(src_off.size());
  int64_t o = 0;
  for (int64_t s = 0; s < ep; ++s)
    for (int64_t el = 0; el < El; ++el) {
      src_off[static_cast<size_t>(s * El + el)] = o;
      o += counts[s * El + el];
    }
  o = 0;
  for (int64_t el = 0; el < El; ++el)
    for (int64_t s = 0; s < ep; ++s) {
      exp_off[static_cast<size_t>(s * El + el)] = o;
      o += counts[s * El + el];
    }
  for (int64_t i = 0; i < ep * El; ++i) {
    const size_t bytes = sizeof(float) * static_cast<size_t>(counts[i] * C);
    if (bytes == 0) continue;
    if (to_source) std::memcpy(to + src_off[static_cast<size_t>(i)] * C, from + exp_off[static_cast<size_t>(i)] * C, bytes);
    else std::memcpy(to + exp_off[static_cast<size_t>(i)] * C, from + src_off[static_cast<size_t>(i)] * C, bytes);
  }
}

// Rows to and from each rank of the expert group, and the local experts' row offsets
// (expert-major), from the rows sent per global expert and received per (source, local expert).
struct Exchange {
  std::vector<int64_t> send_rows, recv_rows, off;
};
Exchange exchange_of(const int64_t* sent, const int64_t* recvd, int64_t ep, int64_t El) {
  Exchange x{std::vector<int64_t>(static_cast<size_t>(ep), 0), std::vector<int64_t>(static_cast<size_t>(ep), 0),
             std::vector<int64_t>(static_cast<size_t>(El + 1), 0)};
  for (int64_t r = 0; r < ep; ++r)
    for (int64_t el = 0; el < El; ++el) {
      x.send_rows[static_cast<size_t>(r)] += sent[r * El + el];
      x.recv_rows[static_cast<size_t>(r)] += recvd[r * El + el];
      x.off[static_cast<size_t>(el + 1)] += recvd[r * El + el];
    }
  for (int64_t el = 0; el < El; ++el) x.off[static_cast<size_t>(el + 1)] += x.off[static_cast<size_t>(el)];
  return x;
}

}  // namespace

void MoeBlock::sum_choices(float* y, const float* rows_in_send_order, const Acts& a, int64_t rows, int64_t C,
                           bool weighted) const {
  const int64_t k = d_.k;
#pragma omp parallel for schedule(static) if (parallel_worth(rows * C * d_.k))
  for (int64_t t = 0; t < rows; ++t) {
    float* yt = y + t * C;
    std::fill(yt, yt + C, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t p = a.pos[t * k + j];
      if (p < 0) continue;
      const float* r = rows_in_send_order + static_cast<int64_t>(p) * C;
      if (weighted) {
        const float w = a.weights[t * k + j];
        for (int64_t c = 0; c < C; ++c) yt[c] += w * r[c];
      } else {
        for (int64_t c = 0; c < C; ++c) yt[c] += r[c];
      }
    }
  }
}

void MoeBlock::experts_fwd(const BlockEnv& e, float* y, const Acts& a, const Scratch& sc, const int64_t* off) const {
  const int64_t C = d_.C, Fl = d_.Fl, up = d_.up, El = d_.El;
  const bool out_in = spec_.out_in;
  const bool bias_here = down_b_ >= 0 && e.tp->rank() == 0;  // the row-parallel bias, once
  // The local experts' products as one grouped call per pass (core/ops/grouped_linear.h).
  ops::grouped_linear_fwd(a.h, a.xperm, e.wt(up_w_, out_in), up_stride_, up_b_ >= 0 ? e.w(up_b_) : nullptr, off, El,
                          C, up);
  const int64_t R = off[El];
  if (!adapters_.empty()) lora_up_fwd(e, a, sc.lora, off);
  if (spec_.mlp == MlpKind::kSwiGLU) ops::swiglu_fwd(a.act, a.h, a.h + Fl, R, Fl, up);
  else ops::activation_fwd(spec_.act, a.act, a.h, R * Fl);
  ops::grouped_linear_fwd(y, a.act, e.wt(down_w_, out_in), down_stride_, bias_here ? e.w(down_b_) : nullptr, off, El,
                          Fl, C);
  if (!adapters_.empty()) lora_down_fwd(e, y, a, sc.lora, off);
}

void MoeBlock::experts_bwd(const BlockEnv& e, float* dx, float* dy, const Acts& a, const Scratch& sc,
                           const int64_t* off) const {
  const int64_t C = d_.C, Fl = d_.Fl, up = d_.up, El = d_.El, R = off[El];
  const bool out_in = spec_.out_in;
  // The replicated down bias sees every row on every rank: under SP the gradient sync sums it
  // over the tensor group, so rank 0 alone adds it then.
  const bool down_bias_grad = down_b_ >= 0 && (!e.tp->sequence_parallel() || e.tp->rank() == 0);
  const Weight wd = e.wt(down_w_, out_in), wu = e.wt(up_w_, out_in);
  ops::grouped_linear_bwd_input(sc.dact, dy, wd, down_stride_, off, El, Fl, C);
  if (!e.frozen())  // LoRA: the experts are frozen, only the input gradient flows
    ops::grouped_linear_bwd_weight(e.g(down_w_), down_bias_grad ? e.g(down_b_) : nullptr, dy, a.act, wd, down_stride_,
                                   off, El, Fl, C);
  if (!adapters_.empty()) lora_down_bwd(e, dy, a, sc, off);
  constexpr bool kWrite = false;  // the activation's backward writes dh: no pass zeroes it first
  if (spec_.mlp == MlpKind::kSwiGLU) ops::swiglu_bwd(sc.dh, sc.dh + Fl, sc.dact, a.h, a.h + Fl, R, Fl, up, kWrite);
  else ops::activation_bwd(spec_.act, sc.dh, sc.dact, a.h, R * Fl, kWrite);
  ops::grouped_linear_bwd_input(dx, sc.dh, wu, up_stride_, off, El, C, up);
  if (!e.frozen())
    ops::grouped_linear_bwd_weight(e.g(up_w_), up_b_ >= 0 ? e.g(up_b_) : nullptr, sc.dh, a.xperm, wu, up_stride_, off,
                                   El, C, up);
  if (!adapters_.empty()) lora_up_bwd(e, dx, a, sc, off);
}

void MoeBlock::fwd(const BlockEnv& e, float* out, const float* xn, const Acts& a, const Scratch& sc) const {
  const TensorParallel& tp = *e.tp;
  const int64_t N = e.N, C = d_.C, E = d_.E, k = d_.k, El = d_.El, ep = d_.ep;
  const float* x = tp.gather_rows(xn, e.gather, C);  // [N, C] on every tensor-parallel rank
  // Router.
  const Weight wr = spec_.moe.router_low_precision ? e.wt(router_, true) : Weight(e.w(router_)).transposed_layout(true);
  ops::linear_fwd(a.probs, x, wr, nullptr, N, C, E);
  if (router_lora_.a >= 0) rows_lora_fwd(e, router_lora_, E, a.probs, 1.0f, x, N);
  if (spec_.moe.sigmoid) ops::router_sigmoid(a.probs, a.lse, a.probs, N, E);
  else ops::router_softmax(a.probs, a.lse, a.probs, N, E);
  ops::RouterOptions o;
  o.norm_topk = spec_.moe.norm_topk;
  o.capacity_factor = spec_.moe.capacity_factor;
  o.drop_by_probs = spec_.moe.drop_by_probs;
  o.bias = bias_ >= 0 ? e.w(bias_) : nullptr;
  o.groups = spec_.moe.groups;
  o.group_topk = spec_.moe.group_topk;
  o.group_score_k = spec_.moe.group_score_k;
  o.scale = spec_.moe.scale;
  std::vector<int64_t> tokens(static_cast<size_t>(E));
  const ops::RouteStats st = ops::router_route(a.experts, a.weights, a.kept, tokens.data(), a.probs, a.lse, shape(e), o);
  a.stats[0] = st.aux_sum;
  a.stats[1] = st.z_sum;
  a.stats[2] = static_cast<double>(st.dropped);
  for (int64_t i = 0; i < E; ++i) a.stats[3 + i] = static_cast<double>(tokens[static_cast<size_t>(i)]);
  a.stats[3 + 2 * E] = st.margin;
  if (d_.allgather) {
    int64_t* kept_rows = a.counts;
    std::fill(kept_rows, kept_rows + E, 0);
    for (int64_t i = 0; i < N * k; ++i)
      if (a.kept[i]) ++kept_rows[a.experts[i]];
    for (int64_t i = 0; i < E; ++i) a.stats[3 + E + i] = static_cast<double>(kept_rows[i]);
    float* y = tp.size() > 1 ? sc.sum : out;
    allgather_fwd(e, y, x, a, sc);
    if (tp.size() > 1) tp.reduce_rows(sc.sum, out, C);
    if (d_.Fs > 0) shared_fwd(e, out, xn, a);
    return;
  }
  // Send order: global expert, token, choice.
  int64_t* sent = a.counts;           // [E]
  int64_t* recvd = a.counts + E;      // [ep El]
  std::fill(sent, sent + E, 0);
  for (int64_t i = 0; i < N * k; ++i)
    if (a.kept[i]) ++sent[a.experts[i]];
  for (int64_t i = 0; i < E; ++i) a.stats[3 + E + i] = static_cast<double>(sent[i]);
  std::vector<int64_t> next(static_cast<size_t>(E));
  for (int64_t g = 0, o2 = 0; g < E; ++g) {
    next[static_cast<size_t>(g)] = o2;
    o2 += sent[g];
  }
  for (int64_t i = 0; i < N * k; ++i)
    a.pos[i] = a.kept[i] ? static_cast<int32_t>(next[static_cast<size_t>(a.experts[i])]++) : -1;
#pragma omp parallel for schedule(static) if (parallel_worth(N * k * C))
  for (int64_t i = 0; i < N * k; ++i)
    if (a.pos[i] >= 0) std::memcpy(sc.send + a.pos[i] * C, x + (i / k) * C, sizeof(float) * C);
  // Counts, then rows, to the ranks that hold the experts; expert-major on arrival.
  e.ep->exchange_counts(sent, recvd, El);
  const Exchange ex = exchange_of(sent, recvd, ep, El);
  const std::vector<int64_t>&send_rows = ex.send_rows, &recv_rows = ex.recv_rows, &off = ex.off;
  if (off[static_cast<size_t>(El)] > d_.R) throw std::logic_error("moe: more rows received than planned");
  e.ep->exchange_rows(sc.send, send_rows.data(), sc.recv, recv_rows.data(), C);
  permute(a.xperm, sc.recv, recvd, ep, El, C, false);
  experts_fwd(e, sc.perm, a, sc, off.data());
  permute(sc.recv, sc.perm, recvd, ep, El, C, true);
  e.ep->exchange_rows(sc.recv, recv_rows.data(), a.ret, send_rows.data(), C);
  // The weighted sum per token, choices in order (a partial sum over the tensor group).
  float* y = tp.size() > 1 ? sc.sum : out;
  sum_choices(y, a.ret, a, tp.size() > 1 ? N : e.Nl, C, true);
  if (tp.size() > 1) tp.reduce_rows(sc.sum, out, C);
  if (d_.Fs > 0) shared_fwd(e, out, xn, a);
}

void MoeBlock::bwd(const BlockEnv& e, float* dxn, const float* dout, const float* xn, const Acts& a,
                   const Scratch& sc) const {
  const TensorParallel& tp = *e.tp;
  const int64_t N = e.N, C = d_.C, E = d_.E, k = d_.k, El = d_.El, ep = d_.ep;
  const float* dy = tp.gather_rows(dout, e.gather, C);  // [N, C]
  if (d_.allgather) {
    allgather_bwd(e, tp.size() > 1 ? sc.sum : dxn, dy, a, sc);
    if (tp.size() > 1) {
      tp.allreduce_sum(sc.dw, N * k);
      tp.reduce_rows(sc.sum, dxn, C);
    }
    router_bwd_and_input(e, dxn, xn, a, sc);
    if (d_.Fs > 0) shared_bwd(e, dxn, dout, xn, a, sc);
    return;
  }
  const int64_t* sent = a.counts;
  const int64_t* recvd = a.counts + E;
  const Exchange ex = exchange_of(sent, recvd, ep, El);
  const std::vector<int64_t>&send_rows = ex.send_rows, &recv_rows = ex.recv_rows, &off = ex.off;
  // Gate weights: dw[t, j] = dy[t] . expert output (partial over the tensor group: summed), and
  // the experts' output gradients w[t, j] dy[t] in send order.
#pragma omp parallel for schedule(static) if (parallel_worth(N * k * C))
  for (int64_t i = 0; i < N * k; ++i) {
    const int32_t p = a.pos[i];
    if (p < 0) {
      sc.dw[i] = 0.0f;
      continue;
    }
    const float* g = dy + (i / k) * C;
    const float* r = a.ret + static_cast<int64_t>(p) * C;
    float* ds = sc.send + static_cast<int64_t>(p) * C;
    const float w = a.weights[i];
    float dot = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      dot += g[c] * r[c];
      ds[c] = w * g[c];
    }
    sc.dw[i] = dot;
  }
  if (tp.size() > 1) tp.allreduce_sum(sc.dw, N * k);
  e.ep->exchange_rows(sc.send, send_rows.data(), sc.recv, recv_rows.data(), C);
  permute(sc.perm, sc.recv, recvd, ep, El, C, false);
  float* dxperm = sc.recv;  // free again: the experts' input gradients, expert-major
  experts_bwd(e, dxperm, sc.perm, a, sc, off.data());
  permute(sc.perm, dxperm, recvd, ep, El, C, true);
  e.ep->exchange_rows(sc.perm, recv_rows.data(), sc.send, send_rows.data(), C);
  // The input gradient per token, choices in order (partial over the tensor group).
  float* dx = tp.size() > 1 ? sc.sum : dxn;
  sum_choices(dx, sc.send, a, tp.size() > 1 ? N : e.Nl, C, false);
  if (tp.size() > 1) tp.reduce_rows(sc.sum, dxn, C);
  router_bwd_and_input(e, dxn, xn, a, sc);
  if (d_.Fs > 0) shared_bwd(e, dxn, dout, xn, a, sc);
}

void MoeBlock::router_bwd_and_input(const BlockEnv& e, float* dxn, const float* xn, const Acts& a,
                                    const Scratch& sc) const {
  const TensorParallel& tp = *e.tp;
  const int64_t C = d_.C, E = d_.E;
  // Router: its losses' coefficients follow from the loss's gradient scale (causal_lm.h).
  const float aux_coef = e.grad_scale * spec_.moe.aux_factor * static_cast<float>(e.seq_full());
  const float z_coef = e.grad_scale * spec_.moe.z_factor;
  ops::router_bwd(sc.dlogits, sc.dw, a.probs, a.lse, a.experts, a.kept, shape(e), spec_.moe.norm_topk, aux_coef, z_coef,
                  spec_.moe.sigmoid, spec_.moe.scale);
  // This rank's rows of the router's input and weight gradients (all rows without SP; under SP
  // the replicated router's gradient is summed over the tensor group by the gradient sync).
  const float* dl = sc.dlogits + tp.row_begin() * E;
  const Weight wr = spec_.moe.router_low_precision ? e.wt(router_, true) : Weight(e.w(router_)).transposed_layout(true);
  ops::linear_bwd_input(dxn, dl, wr, e.Nl, C, E, 1.0f);
  if (!e.frozen()) ops::linear_bwd_weight(e.g(router_), nullptr, dl, xn, wr, e.Nl, C, E);  // LoRA: a frozen router
  if (router_lora_.a >= 0) rows_lora_bwd(e, router_lora_, E, dxn, dl, xn, e.Nl);
}

void MoeBlock::allgather_fwd(const BlockEnv& e, float* y, const float* x, const Acts& a, const Scratch& sc) const {
  const int64_t N = e.N, C = d_.C, k = d_.k, El = d_.El, ep = d_.ep, me = e.ep->rank(), Nk = N * k;
  // The group's rows and choices.
  parallel_copy(sc.all + me * N * C, x, N * C);
  for (int64_t i = 0; i < Nk; ++i) {
    sc.all_experts[me * Nk + i] = a.kept[i] ? static_cast<float>(a.experts[i]) : -1.0f;
    sc.all_weights[me * Nk + i] = a.weights[i];
  }
  e.ep->allgather(sc.all, ep * N * C);
  e.ep->allgather(sc.all_experts, ep * Nk);
  e.ep->allgather(sc.all_weights, ep * Nk);
  // This rank's experts' rows in the alltoall dispatcher's order: local expert, source rank, then
  // the source's send order (token, choice).
  int64_t* off = a.counts + d_.E + ep * El;
  int64_t R = 0;
  for (int64_t el = 0; el < El; ++el) {
    off[el] = R;
    const float g = static_cast<float>(me * El + el);
    for (int64_t i = 0; i < ep * Nk; ++i)
      if (sc.all_experts[i] == g) {
        if (R >= d_.R) throw std::logic_error("moe: more rows routed here than planned");
        a.src[R] = static_cast<int32_t>(i);
        a.row_w[R] = sc.all_weights[i];
        std::memcpy(a.xperm + R * C, sc.all + (i / k) * C, sizeof(float) * static_cast<size_t>(C));
        ++R;
      }
  }
  off[El] = R;
  experts_fwd(e, a.ret, a, sc, off);
  // Each token's weighted sum over its choices that ran here (in choice order), then over the group.
  std::vector<int32_t> row_of(static_cast<size_t>(ep * Nk), -1);
  for (int64_t r = 0; r < R; ++r) row_of[static_cast<size_t>(a.src[r])] = static_cast<int32_t>(r);
  parallel_zero(sc.all, ep * N * C);
  for (int64_t i = 0; i < ep * Nk; ++i) {
    const int32_t r = row_of[static_cast<size_t>(i)];
    if (r < 0) continue;
    float* yt = sc.all + (i / k) * C;
    const float* o = a.ret + static_cast<int64_t>(r) * C;
    const float w = a.row_w[r];
    for (int64_t c = 0; c < C; ++c) yt[c] += w * o[c];
  }
  e.ep->reduce_scatter(sc.all, ep * N * C);
  parallel_copy(y, sc.all + me * N * C, N * C);
}

void MoeBlock::allgather_bwd(const BlockEnv& e, float* dx, const float* dy, const Acts& a, const Scratch& sc) const {
  const int64_t N = e.N, C = d_.C, k = d_.k, El = d_.El, ep = d_.ep, me = e.ep->rank(), Nk = N * k;
  const int64_t* off = a.counts + d_.E + ep * El;
  const int64_t R = off[El];
  parallel_copy(sc.all + me * N * C, dy, N * C);
  e.ep->allgather(sc.all, ep * N * C);
  // The experts' output gradients and each gate weight's gradient (summed to its token's rank).
  float* dw_all = sc.all_weights;
  std::fill(dw_all, dw_all + ep * Nk, 0.0f);
  for (int64_t r = 0; r < R; ++r) {
    const float* g = sc.all + (a.src[r] / k) * C;
    const float* o = a.ret + r * C;
    float* d = sc.perm + r * C;
    float dot = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      dot += g[c] * o[c];
      d[c] = a.row_w[r] * g[c];
    }
    dw_all[a.src[r]] = dot;
  }
  e.ep->reduce_scatter(dw_all, ep * Nk);
  std::memcpy(sc.dw, dw_all + me * Nk, sizeof(float) * static_cast<size_t>(Nk));
  experts_bwd(e, sc.recv, sc.perm, a, sc, off);
  std::vector<int32_t> row_of(static_cast<size_t>(ep * Nk), -1);
  for (int64_t r = 0; r < R; ++r) row_of[static_cast<size_t>(a.src[r])] = static_cast<int32_t>(r);
  parallel_zero(sc.all, ep * N * C);
  for (int64_t i = 0; i < ep * Nk; ++i) {
    const int32_t r = row_of[static_cast<size_t>(i)];
    if (r < 0) continue;
    float* d = sc.all + (i / k) * C;
    const float* s = sc.recv + static_cast<int64_t>(r) * C;
    for (int64_t c = 0; c < C; ++c) d[c] += s[c];
  }
  e.ep->reduce_scatter(sc.all, ep * N * C);
  parallel_copy(dx, sc.all + me * N * C, N * C);
}

}  // namespace gf
