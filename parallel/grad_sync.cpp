#include "parallel/grad_sync.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/math/aligned_buffer.h"
#include "core/trace/trace.h"
#include "core/trace/fault.h"

namespace gf {

// Cut from the end of the arena (where backward starts) at parameter boundaries into about `buckets`
// buckets of equal size. A parameter larger than total/buckets (GPT-2's tied wte, whose gradient is
// complete only at the very end) gets a bucket of its own, and the target size is taken over the rest,
// so that the layers' gradients still go out during backward.
std::vector<GradientSync::Bucket> gradient_buckets(const Placement& params, int64_t dense, int64_t buckets) {
  std::vector<GradientSync::Bucket> out;
  std::vector<TensorPlacement> tensors;  // the dense ones
  for (const TensorPlacement& t : params.tensors())
    if (t.offset < dense) tensors.push_back(t);
  const int64_t groups = std::max<int64_t>(1, buckets);
  auto span = [&](size_t i) { return (i + 1 < tensors.size() ? tensors[i + 1].offset : dense) - tensors[i].offset; };
  auto big = [&](size_t i) { return span(i) > dense / groups; };
  int64_t rest = dense;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (big(i)) rest -= span(i);
  const int64_t target = std::max<int64_t>(1, rest / groups);
  int64_t end = dense;
  for (size_t i = tensors.size(); i-- > 0;) {
    const int64_t b = i == 0 ? 0 : tensors[i].offset;
    if (i == 0 || big(i) || big(i - 1) || end - b >= target) {
      out.push_back({b, end});
      end = b;
    }
  }
  return out;
}

GradientSync::GradientSync(const Placement& params, const ParallelContext& ctx, int64_t buckets, ShardOptions shard,
                           bool sequence_parallel)
    : ctx_(ctx), layout_(std::make_unique<ShardLayout>(params, ctx, shard.stage, shard.degree, std::move(shard.cuts))),
      sharded_(layout_->stage() >= 1),
      sequence_parallel_(sequence_parallel && ctx.group(GridAxis::kTp).size() > 1), total_(params.total_floats()),
      expert_begin_(params.expert_begin()) {
  // Dense parameters: [0, expert_begin_); without experts expert_begin_ is the arena's end.
  const bool experts = expert_begin_ < total_;
  if (!experts) expert_begin_ = total_;
  const int64_t dense = expert_begin_;
  // ZeRO-1: the dense unit's slice and the experts'; ZeRO-2 and 3 use shards().
  shard_begin_ = 0;
  shard_end_ = total_;
  if (sharded_) {
    for (const ShardUnit& u : layout_->units())
      if (u.begin == 0) {
        shard_begin_ = u.own_begin;
        shard_end_ = u.own_end;
      } else if (u.begin == expert_begin_) {
        expert_shard_begin_ = u.own_begin;
        expert_shard_end_ = u.own_end;
      }
  }
  unit_pending_.resize(layout_->units().size());
  unit_released_.assign(layout_->units().size(), false);
  if (!sharded_ && ctx.data_like().size() > 1) buckets_ = gradient_buckets(params, dense, buckets);
  // What this rank adds to the gradient norm: its shard of every parameter, replicated ones on
  // tensor-parallel rank 0 only.
  for (const TensorPlacement& p : params.tensors()) {
    if (p.replicated && ctx.group(GridAxis::kTp).rank() != 0) continue;
    for (const ArenaRange& s : shards()) {
      const int64_t lo = std::max(p.offset, s.begin), hi = std::min(p.offset + p.numel(), s.end);
      if (lo < hi) (p.spec->is_expert() ? expert_norm_ranges_ : norm_ranges_).push_back({lo, hi});
    }
  }
  // Partial over the tensor group: under sequence parallel every replicated parameter (it saw this rank's
  // rows), and always those read by this rank's heads alone (Qwen3's q_norm and k_norm).
  if (ctx.group(GridAxis::kTp).size() > 1) {
    int64_t n = 0;
    for (const TensorPlacement& p : params.tensors())
      if (p.replicated && (sequence_parallel_ || p.spec->grad_partial_over_tp)) {
        tp_partial_.push_back({p.offset, p.offset + p.numel()});
        n += p.numel();
      }
    staging_.resize(static_cast<size_t>(n));
  }
}

std::vector<ArenaRange> GradientSync::shards() const {
  if (layout_->stage() >= 2) return layout_->owned();
  std::vector<ArenaRange> r{{shard_begin_, shard_end_}};
  if (expert_shard_end_ > expert_shard_begin_) r.push_back({expert_shard_begin_, expert_shard_end_});
  return r;
}

void GradientSync::set_pipeline(const Communicator* pp, ArenaRange tied, bool first_stage) {
  pp_ = pp;
  tied_ = tied;
  const std::vector<ArenaRange> duplicate =
      first_stage || tied.end <= tied.begin ? std::vector<ArenaRange>{} : std::vector<ArenaRange>{tied};
  for (const ArenaRange& d : duplicate) {
    std::vector<ArenaRange> kept;
    for (const ArenaRange& r : norm_ranges_) {
      if (r.begin < d.begin) kept.push_back({r.begin, std::min(r.end, d.begin)});
      if (r.end > d.end) kept.push_back({std::max(r.begin, d.end), r.end});
    }
    norm_ranges_ = std::move(kept);
  }
}

void GradientSync::begin_step(float* grads) {
  grads_ = grads;
  pending_.clear();
  started_ = 0;
  const std::vector<ShardUnit>& units = layout_->units();
  for (auto& p : unit_pending_) p = PendingAllreduce();
  unit_released_.assign(units.size(), false);
  unit_started_.assign(units.size(), false);
  in_flight_.clear();
  next_unit_ = static_cast<int>(units.size()) - 1;
  while (next_unit_ >= 0 && units[static_cast<size_t>(next_unit_)].expert) --next_unit_;  // experts: in finish()
}

// A unit's reduce-scatter has finished: the other slices' gradient pages given back (they are scratch
// now). Hybrid sharding's sums over the replicas follow in finish(), in unit order on every rank
// (a blocking collective here would start in the order each rank's reduce-scatters happen to finish).
void GradientSync::unit_reduced(size_t u) {
  if (unit_released_[u]) return;
  unit_released_[u] = true;
  const ShardUnit& s = layout_->units()[u];
  if (u == 0 && injected_fault("zero-unit-dropped"))  // the suite's injected bug (core/trace/fault.h)
    std::fill(grads_ + s.own_begin, grads_ + s.own_end, 0.0f);
  if (layout_->shard_group(s.expert).size() > 1) {
    release_pages(grads_ + s.begin, grads_ + s.own_begin);
    release_pages(grads_ + s.own_end, grads_ + s.end);
  }
}

void GradientSync::grads_ready_from(int64_t offset) {
  while (started_ < buckets_.size() && buckets_[started_].begin >= offset) {
    const Bucket& b = buckets_[started_];
    pending_.push_back(ctx_.data_like().start_allreduce_sum(grads_ + b.begin, b.end - b.begin, static_cast<int>(started_)));
    ++started_;
  }
  for (auto& p : pending_) p.test();
  if (layout_->stage() < 2) return;
  const std::vector<ShardUnit>& units = layout_->units();
  while (next_unit_ >= 0 && units[static_cast<size_t>(next_unit_)].begin >= offset) {
    start_unit(static_cast<size_t>(next_unit_));
    --next_unit_;
  }
  advance_units();
}

void GradientSync::unit_ready(int64_t offset) {
  if (layout_->stage() < 2) return;
  const int u = layout_->unit_at(offset);
  if (u < 0 || layout_->units()[static_cast<size_t>(u)].expert)
    throw std::logic_error("GradientSync::unit_ready: no dense unit starts at arena offset " + std::to_string(offset));
  start_unit(static_cast<size_t>(u));
  advance_units();
}

void GradientSync::start_unit(size_t u) {
  if (unit_started_[u]) return;
  unit_started_[u] = true;
  const ShardUnit& s = layout_->units()[u];
  unit_pending_[u] =
      layout_->shard_group(false).start_reduce_scatter_sum(grads_ + s.begin, s.end - s.begin, static_cast<int>(u));
  in_flight_.push_back(u);
}

void GradientSync::advance_units() {
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (unit_pending_[*it].test()) {
      unit_reduced(*it);
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
  // At most kUnitsInFlight units' whole gradients wait for their reduce-scatter: the oldest is finished
  // here otherwise. A ring advances only while its ranks are inside MPI, so on busy cores every unit
  // could stay whole until finish(), and ZeRO-2's gradients would peak at the whole arena. One: with
  // the unit being computed that is two layers' gradients whole (2 x 27 MiB for gpt2-124M); a second
  // waiting unit bought no overlap on these CPUs (bench/zero.py) and cost 27 MiB more.
  constexpr size_t kUnitsInFlight = 1;
  while (in_flight_.size() > kUnitsInFlight) {
    trace::Span wait("wait", "wait unit reduce-scatter");
    unit_pending_[in_flight_.front()].wait();
    unit_reduced(in_flight_.front());
    in_flight_.pop_front();
  }
}

void GradientSync::add_rows(int64_t base, int64_t width, const int32_t* ids, const float* rows, int64_t n) {
  if (layout_->stage() < 2) throw std::logic_error("GradientSync::add_rows: only ZeRO-2 and 3 reduce a unit early");
  // The units the rows go to are reduced before anything is added to their slices.
  while (!in_flight_.empty()) {
    trace::Span wait("wait", "wait unit reduce-scatter");
    unit_pending_[in_flight_.front()].wait();
    unit_reduced(in_flight_.front());
    in_flight_.pop_front();
  }
  const Communicator& g = layout_->shard_group(false);
  const int64_t N = g.size(), stride = width + 1;  // a row: its id (exact in a float below 2^24), its values
  double most = static_cast<double>(n);
  g.allreduce_max(&most, 1);
  const int64_t total = static_cast<int64_t>(most);
  const int64_t per = std::max<int64_t>(1, std::min<int64_t>(total, (int64_t{1} << 20) / stride));
  std::vector<float> buf(static_cast<size_t>(N * per * stride));
  const std::vector<ShardUnit>& units = layout_->units();
  for (int64_t r0 = 0; r0 < total; r0 += per) {
    float* mine = buf.data() + g.rank() * per * stride;
    for (int64_t i = 0; i < per; ++i) {
      const int64_t k = r0 + i;
      float* row = mine + i * stride;
      if (k < n && ids[k] >= 0) {
        if (ids[k] >= (1 << 24)) throw std::logic_error("GradientSync::add_rows: row id past 2^24");
        row[0] = static_cast<float>(ids[k]);
        std::memcpy(row + 1, rows + k * width, sizeof(float) * static_cast<size_t>(width));
      } else {
        row[0] = -1.0f;
      }
    }
    g.allgather(buf.data(), static_cast<int64_t>(buf.size()));
    for (int64_t i = 0; i < N * per; ++i) {
      const float* row = buf.data() + i * stride;
      if (row[0] < 0.0f) continue;
      const int64_t at = base + static_cast<int64_t>(row[0]) * width;
      for (int u = layout_->unit_holding(at); u >= 0 && static_cast<size_t>(u) < units.size() &&
                                              units[static_cast<size_t>(u)].begin < at + width;
           ++u) {
        const ShardUnit& s = units[static_cast<size_t>(u)];
        const int64_t lo = std::max(at, s.own_begin), hi = std::min(at + width, s.own_end);
        for (int64_t j = lo; j < hi; ++j) grads_[j] += row[1 + (j - at)];
      }
    }
  }
}

void GradientSync::finish() {
  // A tied embedding's two copies (lookup on the first stage, head on the last) summed into both.
  if (tied_.end > tied_.begin) ctx_.embed().allreduce_sum(grads_ + tied_.begin, tied_.end - tied_.begin);
  grads_ready_from(0);
  for (auto& p : pending_) {
    if (p.done()) continue;
    // The step timeline's MPI wait: what of the buckets' all-reduces the backward did not hide.
    trace::Span wait("wait", "wait bucket all-reduce");
    p.wait();
  }
  const std::vector<ShardUnit>& units = layout_->units();
  if (layout_->stage() >= 2) {
    for (size_t u = 0; u < units.size(); ++u) {
      if (units[u].expert) continue;
      if (!unit_pending_[u].done()) {
        trace::Span wait("wait", "wait unit reduce-scatter");
        unit_pending_[u].wait();
      }
      unit_reduced(u);
    }
    in_flight_.clear();
    for (size_t u = 0; u < units.size(); ++u) {  // the experts', over the ranks that hold the same experts
      if (!units[u].expert) continue;
      layout_->shard_group(true).reduce_scatter_sum(grads_ + units[u].begin, units[u].end - units[u].begin);
      unit_reduced(u);
    }
    for (size_t u = 0; u < units.size(); ++u) {  // hybrid sharding: each slice summed over its replicas
      const Communicator& replicas = layout_->replica_group(units[u].expert);
      if (replicas.size() > 1)
        replicas.allreduce_sum(grads_ + units[u].own_begin, units[u].own_end - units[u].own_begin);
    }
  } else {
    if (sharded_) layout_->shard_group(false).reduce_scatter_sum(grads_, expert_begin_);
    if (expert_begin_ < total_) {  // the experts' gradients, over the ranks that hold the same experts
      if (sharded_) layout_->shard_group(true).reduce_scatter_sum(grads_ + expert_begin_, total_ - expert_begin_);
      else ctx_.expert_data_like().allreduce_sum(grads_ + expert_begin_, total_ - expert_begin_);
    }
    if (sharded_)  // hybrid sharding: each slice summed over its replicas
      for (size_t u = 0; u < units.size(); ++u) {
        const Communicator& replicas = layout_->replica_group(units[u].expert);
        if (replicas.size() > 1)
          replicas.allreduce_sum(grads_ + units[u].own_begin, units[u].own_end - units[u].own_begin);
      }
  }
  if (!tp_partial_.empty()) {
    // Pack the partial gradients of this shard, sum them over the tensor group, unpack.
    const std::vector<ArenaRange> shards = this->shards();
    auto each_range = [&](auto&& copy) {
      int64_t n = 0;
      for (const Range& r : tp_partial_)
        for (const ArenaRange& s : shards) {
          const int64_t lo = std::max(r.begin, s.begin), hi = std::min(r.end, s.end);
          if (lo < hi) { copy(lo, hi, staging_.data() + n); n += hi - lo; }
        }
      return n;
    };
    const int64_t n = each_range([&](int64_t lo, int64_t hi, float* st) {
      std::memcpy(st, grads_ + lo, sizeof(float) * (hi - lo));
    });
    ctx_.group(GridAxis::kTp).allreduce_sum(staging_.data(), n);
    each_range([&](int64_t lo, int64_t hi, const float* st) {
      std::memcpy(grads_ + lo, st, sizeof(float) * (hi - lo));
    });
  }
}

double GradientSync::global_sq_norm(const float* grads) const {
  double local = grad_sq_sum(grads, norm_ranges_);
  ctx_.group(GridAxis::kTp).allreduce_sum(&local, 1);
  if (sharded_) layout_->shard_group(false).allreduce_sum(&local, 1);
  if (expert_begin_ < total_) {  // each expert counted once: over the experts' holders and shards
    double x = grad_sq_sum(grads, expert_norm_ranges_);
    ctx_.group(GridAxis::kTp).allreduce_sum(&x, 1);
    ctx_.group(GridAxis::kEp).allreduce_sum(&x, 1);
    if (sharded_) layout_->shard_group(true).allreduce_sum(&x, 1);
    local += x;
  }
  if (pp_ != nullptr) pp_->allreduce_sum(&local, 1);
  return local;
}

void GradientSync::allgather_params(float* weights) const {
  if (!sharded_ || layout_->stage() >= 3) return;
  if (layout_->stage() == 1) {
    layout_->shard_group(false).allgather(weights, expert_begin_);
    if (expert_begin_ < total_) layout_->shard_group(true).allgather(weights + expert_begin_, total_ - expert_begin_);
    return;
  }
  // ZeRO-2: every unit's slices, all in flight at once.
  const std::vector<ShardUnit>& units = layout_->units();
  std::vector<PendingAllreduce> p;
  p.reserve(units.size());
  for (size_t u = 0; u < units.size(); ++u)
    p.push_back(layout_->shard_group(units[u].expert)
                    .start_allgather(weights + units[u].begin, units[u].end - units[u].begin, static_cast<int>(u)));
  for (auto& x : p) x.wait();
}

}  // namespace gf
