#include "parallel/parallel_context.h"

#include <stdexcept>
#include <string>

namespace gf {

ParallelContext ParallelContext::single() { return ParallelContext{}; }

ParallelContext ParallelContext::build(Communicator world, const ProcessGrid& grid, int ulysses_in_cp) {
  if (world.size() != grid.world_size())
    throw std::invalid_argument("world size " + std::to_string(world.size()) +
                                " does not match the grid " + grid.describe());
  ParallelContext ctx;
  ctx.grid_ = grid;
  ctx.world_rank_ = world.rank();
  ctx.coord_ = grid.coord(world.rank());
  const int rank = world.rank();
  for (int i = 0; i < kAxisCount; ++i) {
    const ProcessGrid::Split s = grid.split(rank, {static_cast<GridAxis>(i)});
    ctx.groups_[i] = world.split(s.color, s.key);
    ctx.groups_[i].set_name(kAxisNames[i]);
  }
  if (grid.size(GridAxis::kCp) > 1) {
    const ProcessGrid::Split d = grid.split(rank, {GridAxis::kDp, GridAxis::kCp});
    ctx.data_like_ = world.split(d.color, d.key);
    ctx.data_like_.set_name("dp-cp");
    const ProcessGrid::Split x = grid.split(rank, {GridAxis::kEdp, GridAxis::kCp});
    ctx.expert_data_like_ = world.split(x.color, x.key);
    ctx.expert_data_like_.set_name("edp-cp");
  }
  const int cp = grid.size(GridAxis::kCp), U = ulysses_in_cp;
  if (U > 1 && U < cp) {
    if (cp % U != 0)
      throw std::invalid_argument("ulysses_in_cp " + std::to_string(U) + " does not divide the context axis " +
                                  std::to_string(cp));
    const int c = ctx.coord_[GridAxis::kCp];
    const Communicator& g = ctx.groups_[static_cast<int>(GridAxis::kCp)];
    ctx.cp_ulysses_ = g.split(c / U, c % U);
    ctx.cp_ulysses_.set_name("cp-ulysses");
    ctx.cp_ring_ = g.split(c % U, c / U);
    ctx.cp_ring_.set_name("cp-ring");
  }
  // The first and last pipeline stages of one (tp, cp, dp): each holds a copy of a tied embedding.
  const int pp = ctx.coord_[GridAxis::kPp], stages = grid.size(GridAxis::kPp);
  const bool ends = stages > 1 && (pp == 0 || pp == stages - 1);
  const ProcessGrid::Split e = grid.split(rank, {GridAxis::kPp});
  ctx.embed_ = world.split(ends ? e.color : grid.world_size() + rank, pp);
  ctx.embed_.set_name("embed");
  ctx.world_ = std::move(world);
  ctx.world_.set_name("world");
  return ctx;
}

}  // namespace gf
