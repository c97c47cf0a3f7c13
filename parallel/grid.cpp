#include "parallel/grid.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace gf {
namespace {

GridAxis parse_axis(const std::string& name, const std::string& order) {
  for (int i = 0; i < kAxisCount; ++i)
    if (name == kAxisNames[i]) return static_cast<GridAxis>(i);
  throw std::invalid_argument("process grid order '" + order + "': unknown axis '" + name + "'");
}

bool spans(AxisSet axes, GridAxis a) {
  for (GridAxis x : axes)
    if (x == a || (x == GridAxis::kDp && (a == GridAxis::kEp || a == GridAxis::kEdp))) return true;
  return false;
}

}  // namespace

ProcessGrid::ProcessGrid(std::initializer_list<std::pair<GridAxis, int>> sizes, const std::string& order) : order_(order) {
  size_.fill(1);
  for (auto [a, n] : sizes) {
    if (n < 1) throw std::invalid_argument(std::string("process grid: ") + axis_name(a) + " must be >= 1");
    size_[static_cast<int>(a)] = n;
  }
  if (size(GridAxis::kEdp) != 1) throw std::invalid_argument("process grid: edp is derived (dp / ep), not given");
  if (size(GridAxis::kDp) % size(GridAxis::kEp) != 0) throw std::invalid_argument("expert_parallel must divide data_parallel");
  size_[static_cast<int>(GridAxis::kEdp)] = size(GridAxis::kDp) / size(GridAxis::kEp);
  // The order names the four independent axes once each; dp is laid out as ep (fast) then edp.
  std::vector<GridAxis> seen;
  for (size_t at = 0; at <= order.size();) {
    const size_t dash = std::min(order.find('-', at), order.size());
    const GridAxis a = parse_axis(order.substr(at, dash - at), order);
    if (a == GridAxis::kEp || a == GridAxis::kEdp || std::count(seen.begin(), seen.end(), a))
      throw std::invalid_argument("process grid order '" + order + "': names each of tp, cp, dp, pp once");
    seen.push_back(a);
    at = dash + 1;
  }
  if (seen.size() != 4) throw std::invalid_argument("process grid order '" + order + "': names each of tp, cp, dp, pp once");
  size_t k = 0;
  for (GridAxis a : seen) {
    if (a == GridAxis::kDp) {
      layout_[k++] = GridAxis::kEp;
      layout_[k++] = GridAxis::kEdp;
    } else {
      layout_[k++] = a;
    }
  }
}

int ProcessGrid::world_size() const { return size(GridAxis::kTp) * size(GridAxis::kCp) * size(GridAxis::kDp) * size(GridAxis::kPp); }

GridCoord ProcessGrid::coord(int rank) const {
  GridCoord c;
  int r = rank;
  for (GridAxis a : layout_) {
    c[a] = r % size(a);
    r /= size(a);
  }
  c[GridAxis::kDp] = c[GridAxis::kEp] + size(GridAxis::kEp) * c[GridAxis::kEdp];
  return c;
}

int ProcessGrid::rank(const GridCoord& c) const {
  GridCoord full = c;
  full[GridAxis::kEp] = c[GridAxis::kDp] % size(GridAxis::kEp);
  full[GridAxis::kEdp] = c[GridAxis::kDp] / size(GridAxis::kEp);
  int r = 0;
  for (auto it = layout_.rbegin(); it != layout_.rend(); ++it) r = r * size(*it) + full[*it];
  return r;
}

ProcessGrid::Split ProcessGrid::split(int rank, AxisSet axes) const {
  const GridCoord c = coord(rank);
  Split s;
  int color_radix = 1, key_radix = 1;
  for (GridAxis a : layout_) {
    if (spans(axes, a)) {
      s.key += c[a] * key_radix;
      key_radix *= size(a);
    } else {
      s.color += c[a] * color_radix;
      color_radix *= size(a);
    }
  }
  return s;
}

std::string ProcessGrid::describe() const {
  std::string s = "data_parallel=" + std::to_string(size(GridAxis::kDp)) + " model_parallel=" + std::to_string(size(GridAxis::kTp)) +
                  " pipeline_stage=" + std::to_string(size(GridAxis::kPp)) + " expert_parallel=" + std::to_string(size(GridAxis::kEp));
  if (size(GridAxis::kCp) > 1) s += " context_parallel=" + std::to_string(size(GridAxis::kCp));
  return s;
}

}  // namespace gf
