#include "parallel/zero.h"

#include <algorithm>
#include <stdexcept>

#include "core/math/aligned_buffer.h"
#include "core/trace/trace.h"

namespace gf {

namespace {

// The all-gathers' tags, apart from the gradients' reduce-scatters (tags 0 .. units - 1) and the
// bucket all-reduces: several are in flight at once on the same group.
constexpr int kGatherTagBase = 8192;

}  // namespace

ShardLayout::ShardLayout(const Placement& params, const ParallelContext& ctx, int stage, int64_t shard_degree,
                         std::vector<int64_t> cuts)
    : ctx_(ctx), stage_(ctx.data_like().size() > 1 ? stage : 0) {
  const int64_t total = params.total_floats();
  int64_t expert_begin = params.expert_begin();
  if (expert_begin >= total) expert_begin = total;
  if (stage_ == 0) {
    units_.push_back({0, total, 0, total, false});
    return;
  }
  // Hybrid sharding: groups of H consecutive ranks of the data-parallel group shard the state, the
  // ranks at the same place in each group hold the same slice and sum their gradients.
  auto split = [](const Communicator& dp, int64_t H, Communicator& shard, Communicator& replica) {
    if (shard_group_size(H, dp.size()) == dp.size()) return false;
    if (dp.size() % H != 0)
      throw std::invalid_argument("the shard group's size " + std::to_string(H) + " does not divide the group of " +
                                  std::to_string(dp.size()) + " ranks");
    const int h = static_cast<int>(H);
    shard = dp.split(dp.rank() / h, dp.rank());
    replica = dp.split(dp.rank() % h, dp.rank());
    shard.set_name("shard");
    replica.set_name("replica");
    return true;
  };
  dense_split_ = split(ctx.data_like(), shard_degree, dense_shard_, dense_replica_);
  if (expert_begin < total) expert_split_ = split(ctx.expert_data_like(), shard_degree, expert_shard_, expert_replica_);
  std::vector<int64_t> at{0, expert_begin};
  if (stage_ >= 2)
    for (int64_t c : cuts)
      if (c > 0 && c < total) at.push_back(c);
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  at.push_back(total);
  for (size_t i = 0; i + 1 < at.size(); ++i) {
    if (at[i] >= at[i + 1]) continue;
    ShardUnit u;
    u.begin = at[i];
    u.end = at[i + 1];
    u.expert = u.begin >= expert_begin;
    const Communicator& g = shard_group(u.expert);
    u.own_begin = u.begin + shard_begin(u.end - u.begin, g.size(), g.rank());
    u.own_end = u.begin + shard_begin(u.end - u.begin, g.size(), g.rank() + 1);
    units_.push_back(u);
  }
}

const Communicator& ShardLayout::shard_group(bool expert) const {
  if (expert) return expert_split_ ? expert_shard_ : ctx_.expert_data_like();
  return dense_split_ ? dense_shard_ : ctx_.data_like();
}

const Communicator& ShardLayout::replica_group(bool expert) const {
  static const Communicator one;
  if (expert) return expert_split_ ? expert_replica_ : one;
  return dense_split_ ? dense_replica_ : one;
}

std::vector<ArenaRange> ShardLayout::owned() const {
  std::vector<ArenaRange> r;
  for (const ShardUnit& u : units_)
    if (u.own_begin < u.own_end) r.push_back({u.own_begin, u.own_end});
  return r;
}

int ShardLayout::unit_at(int64_t offset) const {
  const auto it = std::lower_bound(units_.begin(), units_.end(), offset,
                                   [](const ShardUnit& u, int64_t o) { return u.begin < o; });
  return it != units_.end() && it->begin == offset ? static_cast<int>(it - units_.begin()) : -1;
}

int ShardLayout::unit_holding(int64_t offset) const {
  const auto it = std::upper_bound(units_.begin(), units_.end(), offset,
                                   [](int64_t o, const ShardUnit& u) { return o < u.begin; });
  if (it == units_.begin()) return -1;
  const int i = static_cast<int>(it - units_.begin()) - 1;
  return offset < units_[static_cast<size_t>(i)].end ? i : -1;
}

WeightStream::WeightStream(const ShardLayout& layout, float* weights, std::function<void(int64_t, int64_t)> on_gathered,
                           std::function<void(int64_t, int64_t)> release_low, bool prefetch)
    : layout_(layout), w_(weights), on_gathered_(std::move(on_gathered)), release_low_(std::move(release_low)),
      state_(layout.units().size(), State::kAway), users_(layout.units().size(), 0), pending_(layout.units().size()),
      prefetch_(prefetch) {}

void WeightStream::start(int u) {
  if (state_[static_cast<size_t>(u)] != State::kAway) return;
  const ShardUnit& s = layout_.units()[static_cast<size_t>(u)];
  pending_[static_cast<size_t>(u)] =
      layout_.shard_group(s.expert).start_allgather(w_ + s.begin, s.end - s.begin, kGatherTagBase + u);
  state_[static_cast<size_t>(u)] = State::kComing;
  live_ += s.end - s.begin;
  peak_ = std::max(peak_, live_);
}

void WeightStream::finish(int u) {
  if (state_[static_cast<size_t>(u)] == State::kHere) return;
  start(u);
  {
    trace::Span wait("wait", "wait weight all-gather");
    pending_[static_cast<size_t>(u)].wait();
  }
  state_[static_cast<size_t>(u)] = State::kHere;
  const ShardUnit& s = layout_.units()[static_cast<size_t>(u)];
  if (on_gathered_) on_gathered_(s.begin, s.end);
}

void WeightStream::release(int u) {
  const ShardUnit& s = layout_.units()[static_cast<size_t>(u)];
  if (state_[static_cast<size_t>(u)] == State::kComing) pending_[static_cast<size_t>(u)].wait();
  if (state_[static_cast<size_t>(u)] == State::kAway) return;
  // The other ranks' slices only: this rank's stays (whole pages inside the ranges alone).
  release_pages(w_ + s.begin, w_ + s.own_begin);
  release_pages(w_ + s.own_end, w_ + s.end);
  if (release_low_) {
    release_low_(s.begin, s.own_begin);
    release_low_(s.own_end, s.end);
  }
  state_[static_cast<size_t>(u)] = State::kAway;
  live_ -= s.end - s.begin;
}

void WeightStream::need(const std::vector<int64_t>& now, const std::vector<int64_t>& next) {
  std::vector<int> here;
  for (int64_t o : now) {
    const int u = o < 0 ? -1 : layout_.unit_holding(o);
    if (u < 0 || std::find(here.begin(), here.end(), u) != here.end()) continue;
    start(u);
    ++users_[static_cast<size_t>(u)];
    here.push_back(u);
  }
  if (prefetch_)
    for (int64_t o : next) {  // prefetched while this block computes
      const int u = o < 0 ? -1 : layout_.unit_holding(o);
      if (u >= 0) start(u);
    }
  for (int u : here) finish(u);
}

void WeightStream::done(const std::vector<int64_t>& units) {
  std::vector<int> seen;
  for (int64_t o : units) {
    const int u = o < 0 ? -1 : layout_.unit_holding(o);
    if (u < 0 || std::find(seen.begin(), seen.end(), u) != seen.end()) continue;
    seen.push_back(u);
    if (--users_[static_cast<size_t>(u)] <= 0) {
      users_[static_cast<size_t>(u)] = 0;
      release(u);
    }
  }
}

void WeightStream::progress() {
  for (size_t u = 0; u < pending_.size(); ++u)
    if (state_[u] == State::kComing) pending_[u].test();
}

void WeightStream::gather_all() {
  for (size_t u = 0; u < state_.size(); ++u) start(static_cast<int>(u));
  for (size_t u = 0; u < state_.size(); ++u) finish(static_cast<int>(u));
}

void WeightStream::release_all() {
  for (size_t u = 0; u < state_.size(); ++u) {
    users_[u] = 0;
    if (state_[u] == State::kAway) {  // written by a load: give the other slices back all the same
      state_[u] = State::kHere;
      live_ += layout_.units()[u].end - layout_.units()[u].begin;
    }
    release(static_cast<int>(u));
  }
}

}  // namespace gf
