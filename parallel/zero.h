// The sharded data-parallel state (parallel.zero_stage, DeepSpeed's ZeRO stages and SMP's hybrid
// sharding): how the flat arena is cut into units and which part of each unit a rank owns, and, at
// stage 3, the weights streamed unit by unit around the blocks that read them.
//
// Units. At stage 1 the dense region [0, expert_begin) is one unit and the experts' region
// [expert_begin, total) another: a rank owns a 1/N slice of each (ZeRO-1 as it always was). At
// stages 2 and 3 the arena is cut where the model's blocks start (the embedding, each layer, the
// head; an MoE layer's experts; a tied embedding's tensor), so a unit is what one block reads, and a
// rank owns a 1/N slice of every unit: each unit's gradient is reduce-scattered as soon as the
// backward has finished it, and (stage 3) each unit's weights are all-gathered just before a block
// reads them, with every rank sending its equal part.
//
// Groups. N is the shard group's size: the data-parallel (x context) group, or with hybrid
// sharding (shard_degree H) groups of H consecutive ranks of it, the state replicated across the
// groups. The experts' units use the experts' data-parallel group the same way.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/optim/adamw.h"
#include "core/params/placement.h"
#include "core/params/weight_gate.h"
#include "parallel/communicator.h"
#include "parallel/parallel_context.h"

namespace gf {

struct ShardUnit {
  int64_t begin = 0, end = 0;          // arena floats
  int64_t own_begin = 0, own_end = 0;  // this rank's slice
  bool expert = false;                 // over the experts' shard group
};

// The shard and replica groups of one region (dense or experts) and the units.
// The shard group's size for a group of n ranks: hybrid sharding's shard_degree H when 0 < H < n, else all n.
inline int shard_group_size(int64_t shard_degree, int n) {
  return shard_degree > 0 && shard_degree < n ? static_cast<int>(shard_degree) : n;
}

class ShardLayout {
 public:
  // `cuts`: arena offsets where units start (stages 2 and 3; ignored at stage 1). shard_degree 0: the
  // whole group. Collective over the data-parallel group (it splits the hybrid groups).
  ShardLayout(const Placement& params, const ParallelContext& ctx, int stage, int64_t shard_degree,
              std::vector<int64_t> cuts);
  ShardLayout(const ShardLayout&) = delete;
  ShardLayout& operator=(const ShardLayout&) = delete;

  int stage() const { return stage_; }
  const std::vector<ShardUnit>& units() const { return units_; }
  // The shard group and the replica group of a unit's region.
  const Communicator& shard_group(bool expert) const;
  const Communicator& replica_group(bool expert) const;
  bool replicated(bool expert) const { return replica_group(expert).size() > 1; }
  // This rank's slices, in arena order.
  std::vector<ArenaRange> owned() const;
  // The index of the unit that starts at `offset` (-1: none), and of the one holding it.
  int unit_at(int64_t offset) const;
  int unit_holding(int64_t offset) const;

 private:
  const ParallelContext& ctx_;
  int stage_;
  std::vector<ShardUnit> units_;
  Communicator dense_shard_, dense_replica_, expert_shard_, expert_replica_;
  bool dense_split_ = false, expert_split_ = false;
};

// Stage 3: the weights (and their low-precision copy) of a unit are present only between need() and
// done(): need() all-gathers them from the owners' slices (each rank keeps its own slice for good:
// the optimizer updates it there), done() gives the other slices' pages back. The next block's
// units are prefetched in the background while the current block computes.
class WeightStream : public WeightGate {
 public:
  // `on_gathered(begin, end)`: called when a unit's fp32 weights are whole (the model converts
  // them to its low-precision copy there); `release_low(begin, end)`: when they are given back.
  // prefetch (parallel.zero_prefetch): need()'s `next` units are started at once (false: ignored).
  WeightStream(const ShardLayout& layout, float* weights, std::function<void(int64_t, int64_t)> on_gathered,
               std::function<void(int64_t, int64_t)> release_low, bool prefetch = true);
  // Units named by any offset inside them (ShardLayout::unit_holding); -1 entries are skipped.
  void need(const std::vector<int64_t>& now, const std::vector<int64_t>& next) override;
  void done(const std::vector<int64_t>& units) override;
  // Every unit whole (save_weights), and every unit's other slices given back (after gather_all, or
  // after a load wrote the whole arena).
  void gather_all();
  void release_all();
  // Advances the prefetches in flight (between layers).
  void progress() override;
  // Bytes of the units gathered now, and the most at once so far.
  int64_t live_floats() const { return live_; }
  int64_t peak_floats() const { return peak_; }

 private:
  void start(int u);
  void finish(int u);
  void release(int u);
  const ShardLayout& layout_;
  float* w_;
  std::function<void(int64_t, int64_t)> on_gathered_, release_low_;
  enum class State { kAway, kComing, kHere };
  std::vector<State> state_;
  std::vector<int> users_;  // need() minus done() per unit
  std::vector<PendingAllreduce> pending_;
  int64_t live_ = 0, peak_ = 0;
  bool prefetch_ = true;
};

}  // namespace gf
