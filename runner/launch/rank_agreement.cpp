#include "runner/launch/rank_agreement.h"

#include <cstdint>
#include <fmt/format.h>

namespace gf {

std::string first_problem(const Communicator& world, const std::string& mine) {
  // max over (size - rank) of the failing ranks = the lowest failing rank; -1 when none failed.
  double key = mine.empty() ? -1.0 : static_cast<double>(world.size() - world.rank());
  world.allreduce_max(&key, 1);
  if (key < 0) return "";
  const int first_bad = world.size() - static_cast<int>(key);
  std::string problem = mine;
  int64_t length = static_cast<int64_t>(problem.size());
  world.broadcast(&length, sizeof length, first_bad);
  problem.resize(static_cast<size_t>(length));
  world.broadcast(problem.data(), length, first_bad);
  return first_bad == 0 ? problem : fmt::format("on rank {}: {}", first_bad, problem);
}

}  // namespace gf
