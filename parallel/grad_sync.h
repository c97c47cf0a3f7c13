// Gradient synchronisation over the flat arena, after (and during) the backward pass:
//
//  * data parallel, plain: the arena is cut at parameter boundaries into about `buckets`
//    contiguous buckets (parallel_config.gradient_aggregation_group; a parameter larger than a
//    bucket, such as the tied embedding, gets one of its own on top). Backward finishes
//    parameters from the end of the arena towards the front; as soon as a bucket is complete its
//    ring all-reduce starts in the background and is advanced between layers.
//  * data parallel with the sharded optimizer (ZeRO-1): the arena is reduce-scattered so each
//    data-parallel rank holds the summed gradient of its 1/dp shard, updates only that shard, and
//    the parameters are all-gathered afterwards. ZeRO-2 and 3 (parallel/zero.h): the arena is cut
//    into units at the blocks' starts and each unit is reduce-scattered as soon as backward has
//    finished it, the other ranks' slices of its gradient given back; hybrid sharding reduce-scatters
//    in the shard group and then all-reduces each slice over the replicas.
//  * sequence parallel: replicated parameters (LayerNorms, row-parallel biases, position
//    embedding) see only this rank's rows, so their gradients are summed over the tensor group;
//    so are, under any tensor parallel, those read by this rank's heads alone (q_norm, k_norm).
//
//  * experts (MoE): the expert region of the arena [expert_begin, total) holds this rank's experts,
//    which differ across the expert-parallel group; their gradients are summed over the
//    expert-data-parallel group (the ranks holding the same experts) after backward, and ZeRO
//    shards that region over the same group.
//
// The gradient norm is the true global norm under every layout: split parameters count on every
// tensor-parallel rank, replicated ones once, and shards are summed over the data group; the
// experts' over the expert-parallel group too (each holds others).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/optim/adamw.h"
#include "core/params/placement.h"
#include "parallel/communicator.h"
#include "parallel/parallel_context.h"
#include "parallel/zero.h"

namespace gf {

// Sharding (parallel.zero_stage) beyond the default all-reduce: the stage, the shard group's size
// (0: the whole data-parallel group) and, for stages 2 and 3, where the model's blocks start
// (CausalLM::weight_unit_starts), which cut the arena into the units reduce-scattered one by one.
struct ShardOptions {
  int stage = 0;
  int64_t degree = 0;
  std::vector<int64_t> cuts;
};

class GradientSync {
 public:
  struct Bucket {
    int64_t begin, end;  // arena floats
  };

  GradientSync(const Placement& params, const ParallelContext& ctx, int64_t buckets, bool shard_optimizer,
               bool sequence_parallel)
      : GradientSync(params, ctx, buckets, ShardOptions{shard_optimizer ? 1 : 0, 0, {}}, sequence_parallel) {}
  GradientSync(const Placement& params, const ParallelContext& ctx, int64_t buckets, ShardOptions shard,
               bool sequence_parallel);
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // This rank's shard of the arena: what it reduces, clips and updates (everything without ZeRO;
  // under ZeRO-1 its share of the dense parameters, and its share of the experts' as a second range;
  // under ZeRO-2 and 3 its slice of every unit: shards()).
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  int64_t expert_shard_begin() const { return expert_shard_begin_; }
  int64_t expert_shard_end() const { return expert_shard_end_; }
  std::vector<ArenaRange> shards() const;
  const std::vector<Bucket>& buckets() const { return buckets_; }
  bool sharded() const { return sharded_; }
  int stage() const { return layout_->stage(); }
  const ShardLayout& layout() const { return *layout_; }

  // Pipeline parallelism: each stage holds its own layers, so the norm also sums over `pp`.
  // `tied`: this stage's copy of a tied embedding (empty on a stage without one). The first stage's
  // copy (the lookup) and the last's (the head) sum their gradients over the context's embed group
  // in finish(); the norm counts the first stage's only. Call before the first step.
  void set_pipeline(const Communicator* pp, ArenaRange tied, bool first_stage);

  // `grads` zeroed for the step's accumulation (ZeRO-2 and 3: the pages given back, reading as zeros).
  void begin_step(float* grads);
  // Backward has finished every gradient at arena offsets >= `offset` on this rank.
  void grads_ready_from(int64_t offset);
  // ZeRO-2 and 3: the unit starting at `offset` has its final gradient now, out of the arena's order
  // (the head's vocabulary chunks, CausalLM::set_fine_units): its reduce-scatter starts.
  void unit_ready(int64_t offset);
  // After those units' reductions: n rows of `width` floats added to rows ids[i] (-1: none) of the
  // gradient of the matrix at arena offset `base` (a tied embedding's lookup gradient). Every rank of
  // the shard group sends its rows to all (all-gathered in rounds of at most 4 MiB a rank) and adds
  // those that fall in its own slices, in rank order.
  void add_rows(int64_t base, int64_t width, const int32_t* ids, const float* rows, int64_t n);
  // Completes every reduction; afterwards [shard_begin, shard_end) of grads holds the global sum.
  void finish();
  // Sum of squares of the global gradient (the same on every rank).
  double global_sq_norm(const float* grads) const;
  // ZeRO-1 and 2: every data-parallel rank's updated shard to all (no-op otherwise; ZeRO-3 gathers
  // each unit when a block reads it).
  void allgather_params(float* weights) const;

 private:
  struct Range {
    int64_t begin, end;
  };
  void unit_reduced(size_t u);
  void start_unit(size_t u);
  void advance_units();
  const ParallelContext& ctx_;
  std::unique_ptr<ShardLayout> layout_;
  bool sharded_, sequence_parallel_;
  int64_t total_, shard_begin_, shard_end_;
  int64_t expert_begin_, expert_shard_begin_ = 0, expert_shard_end_ = 0;  // the expert region [expert_begin_, total_)
  std::vector<Bucket> buckets_;           // in the order backward completes them
  std::vector<PendingAllreduce> pending_;
  size_t started_ = 0;
  // ZeRO-2 and 3: the dense units' reduce-scatters, started from the last unit as backward finishes them.
  std::vector<PendingAllreduce> unit_pending_;
  std::vector<bool> unit_released_, unit_started_;
  std::deque<size_t> in_flight_;  // started, not yet reduced, oldest first
  int next_unit_ = -1;
  float* grads_ = nullptr;
  std::vector<Range> tp_partial_;         // replicated parameters whose gradients are partial (SP, q/k norms)
  std::vector<ArenaRange> norm_ranges_;   // what this rank adds to the gradient norm (dense)
  std::vector<ArenaRange> expert_norm_ranges_;
  const Communicator* pp_ = nullptr;
  ArenaRange tied_{0, 0};
  std::vector<float> staging_;
};

// The data-parallel all-reduce's buckets (without ZeRO) over the dense floats [0, dense) of `params`, from the
// arena's end: about `buckets` (parallel_config.gradient_aggregation_group) of equal size, a parameter larger
// than dense / buckets in one of its own. GradientSync's, and what plan counts a step's bytes by.
std::vector<GradientSync::Bucket> gradient_buckets(const Placement& params, int64_t dense, int64_t buckets);

}  // namespace gf
