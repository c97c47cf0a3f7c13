#include "parallel/process_grid.h"

#include <stdexcept>

namespace gf {

ProcessGrid::ProcessGrid(int tp, int dp, int pp, int ep) : tp_(tp), dp_(dp), pp_(pp), ep_(ep) {
  if (tp < 1 || dp < 1 || pp < 1 || ep < 1) throw std::invalid_argument("process grid sizes must be >= 1");
  if (dp % ep != 0) throw std::invalid_argument("expert_parallel must divide data_parallel");
}

GridCoord ProcessGrid::coord(int rank) const {
  GridCoord c;
  c.tp = rank % tp_;
  c.dp = (rank / tp_) % dp_;
  c.pp = rank / (tp_ * dp_);
  c.ep = c.dp % ep_;
  c.edp = c.dp / ep_;
  return c;
}

int ProcessGrid::rank(GridCoord c) const { return c.tp + tp_ * (c.dp + dp_ * c.pp); }

std::string ProcessGrid::describe() const {
  return "data_parallel=" + std::to_string(dp_) + " model_parallel=" + std::to_string(tp_) +
         " pipeline_stage=" + std::to_string(pp_) + " expert_parallel=" + std::to_string(ep_);
}

}  // namespace gf
