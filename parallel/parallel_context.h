// Each parallel group's communicator, built once from the world and the grid and passed explicitly
// to the model and the trainer (Megatron's global parallel_state is what we avoid). Groups are asked
// for by axis (group(GridAxis::kTp)) or by role: data_like() for the loss and the dense gradients (the
// data x context ranks, which see different samples or parts of them), embed() for a tied
// embedding's two copies.
#pragma once
#include <array>

#include "parallel/communicator.h"
#include "parallel/grid.h"

namespace gf {

class ParallelContext {
 public:
  // One-rank context: every communicator is the trivial group; no MPI needed.
  static ParallelContext single();
  // Splits `world` into the groups of `grid` (world.size() must equal grid.world_size()).
  // `ulysses_in_cp` strictly between 1 and the context axis's size (hybrid_cp) also splits each
  // context group into Ulysses groups of that many consecutive context ranks and ring groups across them.
  static ParallelContext build(Communicator world, const ProcessGrid& grid, int ulysses_in_cp = 1);

  const ProcessGrid& grid() const { return grid_; }
  int world_rank() const { return world_rank_; }
  // This rank's place on an axis, and the axis's size.
  int index(GridAxis a) const { return coord_[a]; }
  int size(GridAxis a) const { return grid_.size(a); }
  const GridCoord& coord() const { return coord_; }

  // The ranks that differ from this one only on axis `a` (kEp: the ranks that hold one MoE layer's
  // experts between them; kEdp: the ranks that hold the same experts).
  const Communicator& group(GridAxis a) const { return groups_[static_cast<int>(a)]; }
  Communicator& group(GridAxis a) { return groups_[static_cast<int>(a)]; }
  // The data-like group (dp x cp): the loss and the dense gradients are summed over it. With a
  // context axis of size 1 it is the dp group itself (one communicator, one byte count).
  const Communicator& data_like() const { return size(GridAxis::kCp) > 1 ? data_like_ : group(GridAxis::kDp); }
  // The expert-data-like group (edp x cp): the ranks that hold the same experts and see different
  // tokens, over which the experts' gradients are summed; the expert-data group itself at cp 1.
  const Communicator& expert_data_like() const {
    return size(GridAxis::kCp) > 1 ? expert_data_like_ : group(GridAxis::kEdp);
  }
  // Pipeline: the first and last stage of one (tp, cp, dp), which hold the tied embedding's two copies
  // (a group of one on the other stages, and without pipelining).
  const Communicator& embed() const { return embed_; }
  // hybrid_cp: context rank c = u + U r (U = ulysses_in_cp) is rank u of Ulysses group r and rank r
  // of ring group u (MindSpeed's arrangement: the all-to-all between neighbours). Otherwise
  // groups of one.
  const Communicator& context_ulysses() const { return cp_ulysses_; }
  const Communicator& context_ring() const { return cp_ring_; }
  const Communicator& world() const { return world_; }

 private:
  ProcessGrid grid_;
  GridCoord coord_;
  int world_rank_ = 0;
  Communicator world_;
  std::array<Communicator, kAxisCount> groups_;
  Communicator data_like_;
  Communicator expert_data_like_;
  Communicator embed_;
  Communicator cp_ulysses_, cp_ring_;
};

}  // namespace gf
