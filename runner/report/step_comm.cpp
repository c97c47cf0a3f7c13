#include "runner/report/step_comm.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/math/mixed_precision.h"
#include "models/registry.h"
#include "models/transformer_lm.h"
#include "parallel/communicator.h"
#include "parallel/grad_sync.h"
#include "parallel/zero.h"
#include "runner/config/config.h"

namespace gf {

namespace {

// What the count below does not follow yet: each names the config that leaves it.
std::string unmodelled(const Config& cfg, const TransformerSpec& spec) {
  const ParallelConfig& p = cfg.parallel;
  std::vector<std::string> out;
  if (p.context_parallel > 1 && p.context_parallel_algo == "hybrid_cp") out.push_back("context_parallel_algo hybrid_cp");
  if (p.context_parallel > 1 && cfg.compute_dtype != ComputeDtype::kFloat32) out.push_back("context parallel in 16 bits");
  // MoE layers on one expert-parallel rank, without tensor or context parallelism or ZeRO, are counted: every rank runs
  // all its experts on its own rows; their gradients are summed over the expert-data group, their statistics below.
  if (spec.mla.on()) out.push_back("multi-head latent attention");
  if (spec.lora.on) out.push_back("LoRA");
  if (p.mpi_collectives) out.push_back("collectives: mpi (MPI's own messages are not counted)");
  std::string s;
  for (const std::string& x : out) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// What a rank sends: bytes, and messages (a ring step, a point-to-point send, an all-to-all's send to each other rank).
struct Sent {
  double bytes = 0, messages = 0;
  Sent& operator+=(const Sent& o) {
    bytes += o.bytes;
    messages += o.messages;
    return *this;
  }
  friend Sent operator+(Sent a, const Sent& b) { return a += b; }
  friend Sent operator*(double k, Sent a) {
    a.bytes *= k;
    a.messages *= k;
    return a;
  }
};

// The rings of parallel/communicator.h: k elements of `size` bytes over n ranks, from position pos; a message a step.
Sent ring_ar(int64_t k, int n, int pos, double size) {
  if (n <= 1) return {};
  return {size * static_cast<double>(ring_allreduce_sent(k, n, pos)), 2.0 * (n - 1)};
}
Sent ring_rs(int64_t k, int n, int pos, double size) {
  if (n <= 1) return {};
  return {size * static_cast<double>(ring_reduce_scatter_sent(k, n, pos)), 1.0 * (n - 1)};
}
Sent ring_ag(int64_t k, int n, int pos, double size) {
  if (n <= 1) return {};
  return {size * static_cast<double>(ring_allgather_sent(k, n, pos)), 1.0 * (n - 1)};
}
// An all-to-all over n ranks that sends `bytes` to the others in all.
Sent alltoall(double bytes, int n) { return n > 1 ? Sent{bytes, 1.0 * (n - 1)} : Sent{}; }

}  // namespace

StepComm step_comm(const Config& cfg, const Placement& params, const std::vector<StageOptions>& chunks, int stage,
                   int tp_pos, int dp_pos, bool loss_mask) {
  const ModelConfig& m = cfg.model;
  const ModelEntry& entry = find_model(m.arch, m.type);
  const TransformerSpec spec = entry.spec(m);
  StepComm c;
  c.not_modelled = unmodelled(cfg, spec);
  if (!c.not_modelled.empty()) return c;
  const ParallelConfig& p = cfg.parallel;
  const int t = static_cast<int>(p.model_parallel), d = static_cast<int>(p.data_parallel),
            pp = static_cast<int>(p.pipeline_stage);
  // This stage's layers; the embedding is on the chunk with the first layer, the head on the one with the last (the
  // first and last stages; both on stage 0 under ZB-V's V).
  int64_t layers = 0;
  auto end_of = [&](const StageOptions& o) { return o.layer_end < 0 ? spec.layers : o.layer_end; };
  bool first = false, last = false;
  // Of them, those whose forward runs again in the backward: all of it (full recompute: the first
  // recompute_num_layers, or all), or the attention's core alone (selective, or a per-stage list).
  const ModelLayout L = model_layout(cfg);
  int64_t full = 0, selective = 0;
  for (const StageOptions& o : chunks) {
    layers += end_of(o) - o.layer_begin;
    first = first || o.layer_begin == 0;
    last = last || end_of(o) == spec.layers;
    for (int64_t l = o.layer_begin; l < end_of(o); ++l)
      if (L.recomputes(l)) ++(L.recompute == RecomputePolicy::kFull ? full : selective);
  }
  // Micro-batches a step: micro_batch_num through a pipeline, gradient_accumulation_steps without one.
  const int64_t micro_batches = pp > 1 ? p.micro_batch_num : cfg.gradient_accumulation_steps;
  const bool sp = p.use_seq_parallel && t > 1, vocab_split = !p.vocab_emb_dp && t > 1;
  // One micro-batch's rows on this rank (its share of each sample's positions under context parallel), as every
  // tensor-parallel collective of a layer moves them: [b * s / cp, hidden].
  const int cp = static_cast<int>(p.context_parallel);
  const int64_t rows = cfg.batch_size * m.seq_length / cp, n = rows * spec.hidden;
  const double f32 = 4, f64 = 8;
  // Under bf16 compute a column-parallel layer's input is gathered as its bf16 copy (fp16's, emulated, in fp32).
  const double column_in = cfg.compute_dtype == ComputeDtype::kBFloat16 ? 2 : f32;
  // ZeRO's units over this rank's arena (ShardLayout's: one without ZeRO and under ZeRO-1; under ZeRO-2 the
  // embedding, each layer's two halves, the head and its vocabulary chunks), and the slices this rank owns.
  const int64_t total = params.total_floats();
  const int dc = d * cp;  // the data-like group: data x context
  const int zero = dc > 1 ? p.zero_stage : 0;
  // Hybrid sharding: the state sharded over groups of H consecutive ranks of it (the shard group: this rank at
  // dp_pos % H), replicated across them (the replica group of the ranks at the same place in each).
  const int H = shard_group_size(p.shard_degree, dc);
  const int sh_pos = dp_pos % H, rep = dc / H, rep_pos = dp_pos / H;
  // The experts' gradients and state over the ranks holding the same experts: the expert-data x context group
  // (dc / ep ranks; this rank at its data coordinate / ep, parallel/grid.cpp), sharded the same way.
  const int ep = static_cast<int>(p.expert_parallel), edc = dc / ep;
  const int edc_pos = (dp_pos / cp / ep) * cp + dp_pos % cp;
  const int He = shard_group_size(p.shard_degree, edc);
  const int esh_pos = edc_pos % He, erep = edc / He, erep_pos = edc_pos / He;
  std::vector<int64_t> cuts;
  if (zero >= 2) cuts = TransformerLM::unit_starts(spec, entry.names, params, t, ep, chunks);
  // The experts' region (from expert_begin) is a unit of its own at ZeRO-1, its units over the experts' groups.
  const int64_t dense = std::min(params.expert_begin(), total);
  std::vector<int64_t> at{0};
  if (zero >= 1 && dense < total) at.push_back(dense);
  for (int64_t o : cuts)
    if (o > 0 && o < total) at.push_back(o);
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  at.push_back(total);
  std::vector<std::pair<int64_t, int64_t>> owned;
  for (size_t i = 0; i + 1 < at.size(); ++i) {
    const int64_t k = at[i + 1] - at[i];
    const int n = at[i] >= dense ? He : H, pos = at[i] >= dense ? esh_pos : sh_pos;
    if (zero == 0) owned.emplace_back(at[i], at[i + 1]);
    else owned.emplace_back(at[i] + shard_begin(k, n, pos), at[i] + shard_begin(k, n, pos + 1));
  }
  // The MoE statistics a step sums over the data group, then the pipeline stages (Trainer::gather_moe_stats): per
  // layer of the model whether it is MoE here, the aux and z losses, the dropped count and the tokens per expert,
  // and the least routing margin (a max).
  auto moe_stats = [&](int n, int pos) {
    if (!m.moe.enabled() || n <= 1) return Sent{};
    const int64_t L = m.num_layers, E = m.moe.expert_num;
    return ring_ar(L * (4 + E), n, pos, f64) + ring_ar(L, n, pos, f64);
  };
  auto AR = [&](int64_t k, double bytes) { return ring_ar(k, t, tp_pos, bytes); };
  auto RS = [&](int64_t k, double bytes) { return ring_rs(k, t, tp_pos, bytes); };
  auto AG = [&](int64_t k, double bytes) { return ring_ag(k, t, tp_pos, bytes); };
  Sent tensor, data, data_shard, data_replica, pipeline, embedding, context, expert_data, expert;

  // ---- the tensor-parallel group ----
  if (t > 1) {
    // A layer's forward: attention and MLP each a column-parallel projection in and a row-parallel one out.
    // Without SP the row-parallel outputs are all-reduced; under SP the column inputs are gathered and the
    // row outputs reduce-scattered. Backward: without SP the column inputs' gradients are all-reduced; under
    // SP the row outputs' gradients are gathered, the column inputs gathered again (not kept), and their
    // gradients reduce-scattered. Full recompute runs each layer's forward again. A split backward (ZB-H1's and
    // ZB-V's deferred weight pass, a schedule file's W) gathers the column inputs once more under SP, in the weight
    // pass, in fp32 under bf16 compute too (the weight product's input): measured by plan_bytes.sh and
    // pipeline_zbv.sh.
    const Sent half_fwd = sp ? AG(n, column_in) + RS(n, f32) : AR(n, f32);
    const Sent half_bwd = sp ? AG(n, f32) + AG(n, column_in) + RS(n, f32) : AR(n, f32);
    // An MoE layer's MLP half (models/blocks/moe.cpp): its input gathered in fp32 (the router reads it), its output
    // reduced; backward, its output's gradient gathered, the gate weights' gradients [rows, top-k] summed and the
    // input gradient reduced. The experts keep their permuted inputs (nothing gathered again) and have no weight
    // pass apart.
    const Sent moe_fwd = sp ? AG(n, f32) + RS(n, f32) : AR(n, f32);
    // A shared expert (Qwen2-MoE) is a tensor-parallel MLP of its own on the layer's local rows: its input gathered
    // again (fp32), its output reduced; backward, as the dense MLP's whole backward.
    const bool shared = spec.moe.shared_ffn > 0;
    const Sent moe_fwd_all = moe_fwd + (shared ? (sp ? AG(n, f32) + RS(n, f32) : AR(n, f32)) : Sent{});
    const Sent moe_bwd = (sp ? AG(n, f32) + RS(n, f32) : AR(n, f32)) + AR(rows * spec.moe.topk, f32) +
                         (shared ? (sp ? 2.0 * AG(n, f32) + RS(n, f32) : AR(n, f32)) : Sent{});
    Sent micro;
    for (const StageOptions& o : chunks)
      for (int64_t l = o.layer_begin; l < end_of(o); ++l) {
        const bool moe = spec.moe.is_moe(l);
        const Sent f = half_fwd + (moe ? moe_fwd_all : half_fwd);
        micro += f + half_bwd + (moe ? moe_bwd : half_bwd);
        if (L.recompute == RecomputePolicy::kFull && L.recomputes(l)) micro += f;
        if (sp && o.defer_weight_grads) micro += (moe ? 1 : 2) * AG(n, f32);
      }
    if (vocab_split) {
      // The embedding's rows summed over the vocabulary shards (reduce-scattered to the sequence shards
      // under SP, whose gradient comes back gathered); the head reads the gathered final norm under SP and
      // its input gradient is summed; the cross entropy's row maxima and (sum of exponentials, target logit).
      if (first) micro += sp ? RS(n, f32) + AG(n, f32) : AR(n, f32);
      if (last) micro += (sp ? AG(n, f32) + RS(n, f32) : AR(n, f32)) + AR(rows, f32) + AR(2 * rows, f32);
    } else if (sp && last) {
      micro += AR(1, f64);  // each sequence shard's loss sum
    }
    tensor = static_cast<double>(micro_batches) * micro;
    // Once a step: the gradients of parameters every tensor-parallel rank holds whole but computed from its
    // rows alone (under SP all replicated ones; always those read by this rank's heads, Qwen3's q/k norms),
    // and the gradient norm's sum.
    // Under ZeRO, of this rank's own slices only.
    int64_t partial = 0;
    for (const TensorPlacement& x : params.tensors())
      if (x.replicated && (sp || x.spec->grad_partial_over_tp))
        for (const auto& [lo, hi] : owned) partial += std::max<int64_t>(0, std::min(hi, x.offset + x.numel()) - std::max(lo, x.offset));
    if (partial > 0) tensor += AR(partial, f32);
    tensor += (dense < total ? 2.0 : 1.0) * AR(1, f64);  // the experts' part of the norm summed apart
  }

  // ---- the expert-parallel group ----
  if (ep > 1) {
    const int ep_pos = (dp_pos / cp) % ep;  // the data coordinate's place in its expert group (parallel/grid.cpp)
    const int64_t C = spec.hidden, k = spec.moe.topk, El = spec.moe.experts / ep;
    Sent fwd, bwd;  // an MoE layer's, a micro-batch
    if (spec.moe.allgather_dispatch) {
      // Every rank's rows, choices and gate weights gathered; the outputs' sums reduce-scattered back. Backward: the
      // output gradients gathered, the input gradients and the gate weights' reduce-scattered.
      const auto ag = [&](int64_t x) { return ring_ag(ep * x, ep, ep_pos, f32); };
      const auto rs = [&](int64_t x) { return ring_rs(ep * x, ep, ep_pos, f32); };
      fwd = ag(rows * C) + 2.0 * ag(rows * k) + rs(rows * C);
      bwd = ag(rows * C) + rs(rows * C) + rs(rows * k);
    } else {
      // The all-to-all: the counts of each expert's rows, then the rows to the experts' ranks and the outputs back;
      // backward the output gradients there and the input gradients back. Under balanced routing a rank's rows * k
      // choices go (ep - 1) / ep to other ranks.
      c.expert_expected = true;
      const double away = 4.0 * static_cast<double>(rows * k) * C * (ep - 1) / ep;
      fwd = alltoall(8.0 * static_cast<double>(El * (ep - 1)), ep) + 2.0 * alltoall(away, ep);
      bwd = 2.0 * alltoall(away, ep);
    }
    Sent micro;
    for (const StageOptions& o : chunks)
      for (int64_t l = o.layer_begin; l < end_of(o); ++l)
        if (spec.moe.is_moe(l)) micro += fwd + bwd + (L.recompute == RecomputePolicy::kFull && L.recomputes(l) ? fwd : Sent{});
    expert = static_cast<double>(micro_batches) * micro;
    if (dense < total) expert += ring_ar(1, ep, ep_pos, f64);  // the experts' norm
  }

  // ---- the pipeline group ----
  if (pp > 1) {
    // Each micro-batch's activations forward out of every chunk but the model's last, and its gradient
    // backward out of every chunk but the first: this rank's rows (its sequence shard under SP) of hidden floats.
    // A chunk whose neighbour chunk is on this stage too (ZB-V's turn of the V, at the last stage) hands over in
    // memory, no message.
    auto starts_here = [&](int64_t layer) {
      return std::any_of(chunks.begin(), chunks.end(), [&](const StageOptions& o) { return o.layer_begin == layer; });
    };
    auto ends_here = [&](int64_t layer) {
      return std::any_of(chunks.begin(), chunks.end(), [&](const StageOptions& o) { return end_of(o) == layer; });
    };
    int64_t per_micro = 0;
    for (const StageOptions& o : chunks) {
      if (end_of(o) != spec.layers && !starts_here(end_of(o))) ++per_micro;  // the activation out
      if (o.layer_begin != 0 && !ends_here(o.layer_begin)) ++per_micro;      // the gradient back
    }
    const int64_t sends = micro_batches * per_micro;
    pipeline = {f32 * static_cast<double>(sends * (sp ? rows / t : rows) * spec.hidden), static_cast<double>(sends)};
    // The step's scalars: the loss, the schedule's makespan and bubble (sum and max), the gradient norm.
    pipeline += 5.0 * ring_ar(1, pp, stage, f64);
    pipeline += moe_stats(pp, stage);
    // A tied embedding's two copies (the first stage's lookup, the last stage's head) summed into both; one tensor
    // when both are on this stage (ZB-V).
    if (spec.tied_head && (first != last))
      if (const TensorPlacement* x = params.find(entry.names(Role::kEmbed, -1)))
        embedding += ring_ar(x->numel(), 2, first ? 0 : 1, f32);
  }

  // ---- the context-parallel group (its Ulysses and ring subgroups) ----
  if (cp > 1) {
    const int64_t D = spec.head_dim(), q = spec.heads / t * D, kv = spec.kv_heads / t * D;
    Sent fwd, bwd;
    if (p.context_parallel_algo == "ulysses_cp") {
      // All-to-all to whole heads: q|k|v in and the output back; backward the output and its gradient in, and
      // the q|k|v gradient back; each sends the other ranks' share of this rank's rows.
      auto a2a = [&](int64_t width) { return alltoall(f32 * static_cast<double>((cp - 1) * rows * (width / cp)), cp); };
      fwd = a2a(q + 2 * kv) + a2a(q);
      bwd = 2.0 * a2a(q) + a2a(q + 2 * kv);
    } else {
      // Ring attention: the keys and values go round (cp - 1 sends forward, again backward), and backward each
      // block's key/value gradient is summed along the ring (cp sends).
      const Sent block{f32 * static_cast<double>(rows * 2 * kv), 1};  // one send
      fwd = (cp - 1.0) * block;
      bwd = (cp - 1.0) * block + static_cast<double>(cp) * block;
    }
    // An MoE layer's router sums each sequence's expert counts and probabilities over the context group for its
    // balancing loss (2 B E doubles), and the counts again in its backward (B E).
    Sent moe;
    if (spec.moe.experts > 1) {
      const int64_t BE = cfg.batch_size * spec.moe.experts;
      const int cpos = dp_pos % cp;
      const Sent route = ring_ar(2 * BE, cp, cpos, f64), back = ring_ar(BE, cp, cpos, f64);
      for (const StageOptions& o : chunks)
        for (int64_t l = o.layer_begin; l < end_of(o); ++l)
          if (spec.moe.is_moe(l))
            moe += route + back + (L.recompute == RecomputePolicy::kFull && L.recomputes(l) ? route : Sent{});
    }
    context = static_cast<double>(micro_batches) *
              (static_cast<double>(layers) * (fwd + bwd) + static_cast<double>(full) * fwd + moe);
  }

  // ---- the data-parallel group (data x context under context parallel) ----
  if (d * cp > 1) {
    auto dAR = [&](int64_t k, double bytes) { return ring_ar(k, dc, dp_pos, bytes); };
    if (zero >= 1) {
      // ZeRO-1 and 2: each unit's gradients reduce-scattered to their owners in the shard group (ZeRO-2: as its
      // backward ends), each owned slice summed over the replicas (hybrid sharding), the updated weights gathered
      // back, and the gradient norm summed over the shards. ZeRO-3 gathers no weights after the update: each unit
      // is gathered whenever a pass reads it, the times gather_ranges gives a micro-batch.
      std::vector<TransformerLM::GatherRange> reads;
      if (zero >= 3) reads = TransformerLM::gather_ranges(spec, entry.names, params, t, ep, chunks);
      for (size_t i = 0; i + 1 < at.size(); ++i) {
        const int64_t k = at[i + 1] - at[i];
        int64_t gathers = 1;
        if (zero >= 3) {
          gathers = 0;
          for (const TransformerLM::GatherRange& r : reads)
            if (r.begin < at[i + 1] && at[i] < r.end) gathers += r.times;
          gathers *= micro_batches;
        }
        const bool x = at[i] >= dense;  // the experts' units: over the ranks holding the same experts
        const int n = x ? He : H, pos = x ? esh_pos : sh_pos, r = x ? erep : rep, r_pos = x ? erep_pos : rep_pos;
        const Sent sent = ring_rs(k, n, pos, f32) + static_cast<double>(gathers) * ring_ag(k, n, pos, f32);
        const Sent summed = ring_ar(owned[i].second - owned[i].first, r, r_pos, f32);
        if (x) {
          expert_data += sent + summed;
        } else {
          data_shard += sent;
          data_replica += summed;
        }
      }
      data_shard += ring_ar(1, H, sh_pos, f64);
      if (dense < total) expert_data += ring_ar(1, He, esh_pos, f64);
      // ZeRO-2 and 3 with a tied embedding whose head is cut into vocabulary chunks, the lookup and the head in one
      // model chunk: the head's chunks are reduce-scattered before the lookup's backward, whose gradient rows
      // (id, values) are then all-gathered to their owners, after a max of the row counts, in blocks of 2^20 floats
      // a rank (GradientSync::add_rows), once a step (its last micro-batch).
      const TensorPlacement* wte = spec.tied_head ? params.find(entry.names(Role::kEmbed, -1)) : nullptr;
      const bool both = std::any_of(chunks.begin(), chunks.end(),
                                    [&](const StageOptions& o) { return o.layer_begin == 0 && end_of(o) == spec.layers; });
      if (zero >= 2 && wte != nullptr && both &&
          std::any_of(cuts.begin(), cuts.end(), [&](int64_t o) { return o > wte->offset && o < wte->offset + wte->numel(); })) {
        const int64_t n_rows = vocab_split || !sp ? rows : rows / t, stride = spec.hidden + 1;
        const int64_t per = std::max<int64_t>(1, std::min<int64_t>(n_rows, (int64_t{1} << 20) / stride));
        data_shard += ring_ar(1, H, sh_pos, f64);
        data_shard += static_cast<double>((n_rows + per - 1) / per) * ring_ag(H * per * stride, H, sh_pos, f32);
      }
      data += data_shard + data_replica;
      if (rep == 1) data_shard = {};  // no hybrid sharding: the shard group is the data group
    } else {
      // The dense parameters' buckets; the experts' gradients (the arena from expert_begin) are summed at once over
      // the ranks holding the same experts.
      for (const GradientSync::Bucket& b : gradient_buckets(params, dense, p.gradient_aggregation_group))
        data += dAR(b.end - b.begin, f32);
      if (dense < total) expert_data = ring_ar(total - dense, edc, edc_pos, f32);
    }
    data += dAR(1, f64);  // the loss
    data += moe_stats(dc, dp_pos);
    // The trained targets counted over the data-parallel group (under context parallel a group of its own).
    if ((loss_mask || m.documents.eod_mask_loss) && cp == 1) data += dAR(1, f64);
  }
  c.tensor = tensor.bytes;
  c.data = data.bytes;
  c.data_shard = data_shard.bytes;
  c.data_replica = data_replica.bytes;
  c.pipeline = pipeline.bytes;
  c.embedding = embedding.bytes;
  c.context = context.bytes;
  c.expert_data = expert_data.bytes;
  c.expert = expert.bytes;
  for (const Sent* x : {&tensor, &data, &pipeline, &embedding, &context, &expert_data, &expert}) c.messages += x->messages;
  c.group_messages = {tensor.messages,   data.messages,    data_shard.messages,  data_replica.messages, pipeline.messages,
                      embedding.messages, context.messages, expert_data.messages, expert.messages};
  return c;
}

}  // namespace gf
