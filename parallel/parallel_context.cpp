#include "parallel/parallel_context.h"

#include <stdexcept>
#include <string>

namespace gf {

ParallelContext ParallelContext::single() { return ParallelContext{}; }

ParallelContext ParallelContext::build(Communicator world, const ProcessGrid& grid) {
  if (world.size() != grid.world_size())
    throw std::invalid_argument("world size " + std::to_string(world.size()) +
                                " does not match the grid " + grid.describe());
  ParallelContext ctx;
  ctx.grid = grid;
  ctx.world_rank = world.rank();
  ctx.coord = grid.coord(world.rank());
  const GridCoord c = ctx.coord;
  ctx.tp = world.split(c.dp + grid.dp() * c.pp, c.tp);
  ctx.dp = world.split(c.tp + grid.tp() * c.pp, c.dp);
  ctx.pp = world.split(c.tp + grid.tp() * c.dp, c.pp);
  ctx.ep = world.split(c.tp + grid.tp() * (c.edp + (grid.dp() / grid.ep()) * c.pp), c.ep);
  ctx.edp = world.split(c.tp + grid.tp() * (c.ep + grid.ep() * c.pp), c.edp);
  // The first and last pipeline stages of one (tp, dp): each holds a copy of a tied embedding.
  const bool ends = grid.pp() > 1 && (c.pp == 0 || c.pp == grid.pp() - 1);
  ctx.embed = world.split(ends ? c.tp + grid.tp() * c.dp : grid.world_size() + world.rank(), c.pp);
  ctx.world = std::move(world);
  return ctx;
}

}  // namespace gf
