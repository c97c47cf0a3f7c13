// Each parallel axis's communicator, built once from the world and the grid and passed
// explicitly to the model and the trainer (Megatron's global parallel_state is what we avoid).
#pragma once
#include "parallel/communicator.h"
#include "parallel/process_grid.h"

namespace gf {

struct ParallelContext {
  ProcessGrid grid{1, 1, 1};
  GridCoord coord;
  int world_rank = 0;
  Communicator world;  // all ranks
  Communicator tp;     // same (dp, pp)
  Communicator dp;     // same (tp, pp)
  Communicator pp;     // same (tp, dp)
  Communicator ep;     // same (tp, pp, edp): the ranks that hold one MoE layer's experts between them
  Communicator edp;    // same (tp, pp, ep): the ranks that hold the same experts (expert-data-parallel)
  Communicator embed;  // pipeline: the first and last stage of one (tp, dp), which hold the tied embedding's
                       // two copies (a group of one on the other stages, and without pipelining)

  // One-rank context: every communicator is the trivial group; no MPI needed.
  static ParallelContext single();
  // Splits `world` into the axes of `grid` (world.size() must equal grid.world_size()).
  static ParallelContext build(Communicator world, const ProcessGrid& grid);
};

}  // namespace gf
