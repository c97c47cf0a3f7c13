// The process grid: pure arithmetic between a global rank and its (tp, dp, pp) coordinates, in
// Megatron's default order with tp varying fastest: rank = tp + TP * (dp + DP * pp).
// Expert parallel is carved from data parallel (ep divides dp). No MPI here, so it is testable.
#pragma once
#include <string>

namespace gf {

struct GridCoord {
  int tp = 0, dp = 0, pp = 0;
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
