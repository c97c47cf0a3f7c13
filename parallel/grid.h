// The process grid: pure arithmetic between a global rank and its coordinates on named axes, laid
// out by one order string (Megatron-Core's RankGenerator idea). No MPI here, so it is testable.
//
// The order is "tp-cp-dp-pp": tp varies fastest, so rank = tp + TP * (cp + CP * (dp + DP * pp)).
// Expert parallel is carved from data parallel: the dp axis is read as "ep-edp" (ep fastest, so
// dp = ep + EP * edp): ranks with consecutive dp indices hold different experts (one expert-parallel
// group), and the ranks with the same ep index hold the same experts (expert-data-parallel).
// A new axis is a name in kAxisNames, a place in the order string and its primitive in parallel/.
#pragma once
#include <array>
#include <initializer_list>
#include <string>
#include <utility>

namespace gf {

// The order of the enumerators is the order of kAxisNames, not the rank layout (that is the order string).
enum class GridAxis : int {
  kTp,   // tensor parallel (model_parallel), with sequence parallel inside it
  kCp,   // context parallel (size 1 for now)
  kDp,   // data parallel
  kPp,   // pipeline stages
  kEp,   // expert parallel: the fast part of dp
  kEdp,  // expert-data parallel: the slow part of dp
};
inline constexpr int kAxisCount = 6;
inline constexpr std::array<const char*, kAxisCount> kAxisNames = {"tp", "cp", "dp", "pp", "ep", "edp"};
inline const char* axis_name(GridAxis a) { return kAxisNames[static_cast<int>(a)]; }
// The rank layout: axes from fastest to slowest.
inline constexpr const char* kGridOrder = "tp-cp-dp-pp";

// A rank's coordinate on every axis.
class GridCoord {
 public:
  int operator[](GridAxis a) const { return c_[static_cast<int>(a)]; }
  int& operator[](GridAxis a) { return c_[static_cast<int>(a)]; }

 private:
  std::array<int, kAxisCount> c_{};
};

// A set of axes: the axes a group spans (its ranks differ only there).
using AxisSet = std::initializer_list<GridAxis>;

class ProcessGrid {
 public:
  ProcessGrid() : ProcessGrid({}) {}
  // Sizes of the axes named (the others are 1); ep must divide dp. Throws std::invalid_argument.
  explicit ProcessGrid(std::initializer_list<std::pair<GridAxis, int>> sizes, const std::string& order = kGridOrder);
  int world_size() const;
  int size(GridAxis a) const { return size_[static_cast<int>(a)]; }
  const std::string& order() const { return order_; }
  GridCoord coord(int rank) const;
  int rank(const GridCoord& c) const;
  // The MPI split of `rank` into the group spanning `axes` (dp stands for ep and edp together):
  // `color` is the same for the ranks that agree on every other axis, `key` the rank's index in the
  // group, counted in the grid's order over `axes`.
  struct Split {
    int color = 0, key = 0;
  };
  Split split(int rank, AxisSet axes) const;
  std::string describe() const;

 private:
  std::array<int, kAxisCount> size_{};
  std::array<GridAxis, 5> layout_{};  // the independent axes from fastest to slowest, dp refined to ep, edp
  std::string order_;
};

}  // namespace gf
