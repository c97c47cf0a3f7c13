// The process grid: pure arithmetic between a global rank and its (tp, dp, pp) coordinates, in
// Megatron's default order with tp varying fastest: rank = tp + TP * (dp + DP * pp).
// Expert parallel is carved from data parallel (ep divides dp). No MPI here, so it is testable.
#pragma once
#include <string>

namespace gf {

// ep: the rank's place in its expert-parallel group (consecutive data-parallel ranks dp / ep * ep
// .. + ep - 1 hold different experts); edp: which of the dp / ep such groups it is in (the ranks
// with the same ep index hold the same experts and sum their gradients).
struct GridCoord {
  int tp = 0, dp = 0, pp = 0;
  int ep = 0, edp = 0;
};

class ProcessGrid {
 public:
  ProcessGrid(int tp, int dp, int pp, int ep = 1);
  int world_size() const { return tp_ * dp_ * pp_; }
  int tp() const { return tp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int ep() const { return ep_; }
  GridCoord coord(int rank) const;
  int rank(GridCoord c) const;
  std::string describe() const;

 private:
  int tp_, dp_, pp_, ep_;
};

}  // namespace gf
