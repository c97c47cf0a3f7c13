// A Placement: a ParamTable (the layout-free description, core/params/param_table.h) laid out on one rank.
// Built from the table, the layout (tensor-parallel size, whether the vocabulary is split, the
// padded vocabulary) and the rank's tensor-parallel coordinate, it gives for every parameter
//  * its local shape (the split dim divided by the tensor-parallel size; vocabulary rows padded),
//  * its offset in the flat arena (16-float aligned, except right after a packed_with_next one),
//  * where the local elements lie in the global tensor, as boxes (offset, extent per dim): one
//    box, or one per part when the dim is cut into parts first (GPT-2's fused q|k|v: one box per
//    projection), none for vocabulary padding rows,
//  * whether it is replicated (every tensor-parallel rank holds the whole tensor).
// Gradients and optimizer moments use the same arena layout, so gradient buckets and optimizer
// sharding are plain slices of one buffer.
//
// A Placement is what a model holds (CausalLM::params()): the blocks bind their parameters' arena
// offsets, AdamW reads the arena ranges, the gradient sync the replicated tensors (summed over the
// tensor group under sequence parallel, counted once in the norm), initialisation each local
// element's global index, Hugging Face loading scatters full tensors into the slices and
// --save-weights gathers them back. The table is shared (immutable) between the placements made
// from it, so the placements of every rank of every layout describe the same parameters.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/params/param_table.h"

namespace gf {

// How a run lays the parameters out (the same on every rank).
struct ParamLayout {
  int tp_size = 1;           // model_parallel
  bool vocab_split = true;   // Axis::kVocab dims split over the tensor group (vocab_emb_dp: False)
  int64_t vocab_padded = 0;  // the padded vocabulary (0: no padding)
  int ep_size = 1;           // expert_parallel: the experts of each MoE layer divided over ep ranks
};

struct Box {
  std::vector<int64_t> offset, extent;  // per dim
  int64_t numel() const;
};

// One rectangular piece of a local slice: the global box it holds and where it starts in the local
// tensor (per dim).
struct SlicePiece {
  Box global;
  std::vector<int64_t> local_offset;
};

// One parameter on this rank.
struct TensorPlacement {
  const ParamSpec* spec = nullptr;   // the description: name, global shape, split, init
  std::vector<int64_t> local_shape;  // this rank's storage (vocabulary rows padded)
  int64_t offset = 0;                // into the arena, in floats
  std::vector<SlicePiece> pieces;    // local elements in no piece are padding (zero)
  bool replicated = false;           // every tensor-parallel rank holds the whole tensor
  int64_t numel() const;             // of local_shape
};

class Placement {
 public:
  Placement() : Placement(ParamTable{}) {}
  explicit Placement(std::shared_ptr<const ParamTable> table, const ParamLayout& layout = {}, int tp_rank = 0,
                     int ep_rank = 0);
  explicit Placement(ParamTable table, const ParamLayout& layout = {}, int tp_rank = 0, int ep_rank = 0)
      : Placement(std::make_shared<const ParamTable>(std::move(table)), layout, tp_rank, ep_rank) {}

  const ParamTable& table() const { return *table_; }
  const std::shared_ptr<const ParamTable>& shared_table() const { return table_; }
  const ParamLayout& layout() const { return layout_; }
  int tp_rank() const { return tp_rank_; }
  int ep_rank() const { return ep_rank_; }
  // Whether this rank holds p (every parameter but the experts of other expert-parallel ranks).
  bool holds(const ParamSpec& p) const;

  // The parameters this rank holds, in arena order: the dense ones in the table's order, then
  // the experts' (the expert region [expert_begin(), total_floats()), whose gradients are
  // reduced over the expert-data-parallel group rather than the data-parallel one).
  const std::vector<TensorPlacement>& tensors() const { return tensors_; }
  int64_t expert_begin() const { return expert_begin_; }
  // Throws / returns null for a name this rank does not hold.
  const TensorPlacement& at(const std::string& name) const;
  const TensorPlacement* find(const std::string& name) const;
  int64_t total_floats() const { return total_; }

  // Fills this rank's slice of every parameter with its initial values (InitialValues: the same
  // full tensors under any layout); padding is zero.
  void initialize(float* arena, uint64_t seed) const;
  // The same values, written only inside the arena ranges [first, second) of `only` (ZeRO-3: a rank
  // generates only its slices).
  void initialize(float* arena, uint64_t seed, const std::vector<std::pair<int64_t, int64_t>>& only) const;
  // The local slice of `t` from the whole global tensor `full` (row-major, global shape); local
  // elements in no piece (vocabulary padding) are set to zero.
  static void scatter(const TensorPlacement& t, const float* full, float* local);
  // The local slice's pieces written into their places in the whole tensor `full`.
  static void gather(const TensorPlacement& t, const float* local, float* full);

 private:
  std::shared_ptr<const ParamTable> table_;
  ParamLayout layout_;
  int tp_rank_ = 0, ep_rank_ = 0;
  std::vector<TensorPlacement> tensors_;
  std::vector<int64_t> index_;  // table index -> tensors_ index (-1: not held here)
  int64_t total_ = 0, expert_begin_ = 0;
};

}  // namespace gf
