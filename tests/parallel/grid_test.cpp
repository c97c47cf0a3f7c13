// The grid of named axes against the layout it replaced, written out by hand: rank = tp + TP * (dp +
// DP * pp), ep = dp % EP, edp = dp / EP, and each group the ranks that agree on every other axis,
// ordered by the axis's index. The communicators (and so every number) depend on exactly this.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "parallel/grid.h"

namespace gf {
namespace {

struct Old {
  int tp, dp, pp, ep, edp;
};

Old old_coord(int rank, int TP, int DP, int EP) {
  Old c{};
  c.tp = rank % TP;
  c.dp = (rank / TP) % DP;
  c.pp = rank / (TP * DP);
  c.ep = c.dp % EP;
  c.edp = c.dp / EP;
  return c;
}

// The members of `rank`'s group in key order, by colour and key as the grid gives them.
std::vector<int> members(const ProcessGrid& g, int rank, AxisSet axes) {
  const ProcessGrid::Split mine = g.split(rank, axes);
  std::map<int, int> by_key;
  for (int r = 0; r < g.world_size(); ++r) {
    const ProcessGrid::Split s = g.split(r, axes);
    if (s.color == mine.color) {
      EXPECT_FALSE(by_key.count(s.key)) << "two ranks with one key";
      by_key[s.key] = r;
    }
  }
  std::vector<int> out;
  for (auto [k, r] : by_key) out.push_back(r);
  EXPECT_EQ(out.at(static_cast<size_t>(mine.key)), rank);
  return out;
}

TEST(ProcessGrid, CoordinatesAndGroupsAreTheOldLayout) {
  for (int TP : {1, 2, 3})
    for (int DP : {1, 2, 4, 6})
      for (int PP : {1, 2, 3})
        for (int EP : {1, 2, 3}) {
          if (DP % EP) continue;
          const ProcessGrid g({{GridAxis::kTp, TP}, {GridAxis::kDp, DP}, {GridAxis::kPp, PP}, {GridAxis::kEp, EP}});
          ASSERT_EQ(g.world_size(), TP * DP * PP);
          EXPECT_EQ(g.size(GridAxis::kEdp), DP / EP);
          EXPECT_EQ(g.size(GridAxis::kCp), 1);
          for (int r = 0; r < g.world_size(); ++r) {
            const Old o = old_coord(r, TP, DP, EP);
            const GridCoord c = g.coord(r);
            EXPECT_EQ(c[GridAxis::kTp], o.tp);
            EXPECT_EQ(c[GridAxis::kDp], o.dp);
            EXPECT_EQ(c[GridAxis::kPp], o.pp);
            EXPECT_EQ(c[GridAxis::kEp], o.ep);
            EXPECT_EQ(c[GridAxis::kEdp], o.edp);
            EXPECT_EQ(c[GridAxis::kCp], 0);
            EXPECT_EQ(g.rank(c), r);
            // Each group: the ranks equal on the other axes, in the order of the axis's index.
            std::vector<int> tp, dp, pp, ep, edp;
            for (int q = 0; q < g.world_size(); ++q) {
              const Old x = old_coord(q, TP, DP, EP);
              if (x.dp == o.dp && x.pp == o.pp) tp.push_back(q);
              if (x.tp == o.tp && x.pp == o.pp) dp.push_back(q);
              if (x.tp == o.tp && x.dp == o.dp) pp.push_back(q);
              if (x.tp == o.tp && x.pp == o.pp && x.edp == o.edp) ep.push_back(q);
              if (x.tp == o.tp && x.pp == o.pp && x.ep == o.ep) edp.push_back(q);
            }
            EXPECT_EQ(members(g, r, {GridAxis::kTp}), tp);
            EXPECT_EQ(members(g, r, {GridAxis::kDp}), dp);
            EXPECT_EQ(members(g, r, {GridAxis::kPp}), pp);
            EXPECT_EQ(members(g, r, {GridAxis::kEp}), ep);
            EXPECT_EQ(members(g, r, {GridAxis::kEdp}), edp);
            EXPECT_EQ(members(g, r, {GridAxis::kDp, GridAxis::kCp}), dp);  // the data-like group at cp 1
          }
        }
}

TEST(ProcessGrid, ContextAxisSitsBetweenTensorAndData) {
  const ProcessGrid g({{GridAxis::kTp, 2}, {GridAxis::kCp, 2}, {GridAxis::kDp, 2}, {GridAxis::kPp, 2}});
  ASSERT_EQ(g.world_size(), 16);
  const GridCoord c = g.coord(2 + 4 * 1 + 8 * 1);  // tp 0, cp 1, dp 1, pp 1: rank = tp + 2 (cp + 2 (dp + 2 pp))
  EXPECT_EQ(c[GridAxis::kTp], 0);
  EXPECT_EQ(c[GridAxis::kCp], 1);
  EXPECT_EQ(c[GridAxis::kDp], 1);
  EXPECT_EQ(c[GridAxis::kPp], 1);
  // The data-like group of rank 0: cp and dp vary, tp and pp fixed; cp counts fastest.
  EXPECT_EQ(members(g, 0, {GridAxis::kDp, GridAxis::kCp}), (std::vector<int>{0, 2, 4, 6}));
}

TEST(ProcessGrid, OrderStringLaysOutTheRanks) {
  // Data parallel fastest: rank = dp + DP * (tp + TP * pp).
  const ProcessGrid g({{GridAxis::kTp, 2}, {GridAxis::kDp, 3}}, "dp-tp-cp-pp");
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(g.coord(r)[GridAxis::kDp], r % 3);
    EXPECT_EQ(g.coord(r)[GridAxis::kTp], r / 3);
  }
}

TEST(ProcessGrid, RefusesBadSizesAndOrders) {
  EXPECT_THROW(ProcessGrid({{GridAxis::kDp, 3}, {GridAxis::kEp, 2}}), std::invalid_argument);
  EXPECT_THROW(ProcessGrid({{GridAxis::kTp, 0}}), std::invalid_argument);
  EXPECT_THROW(ProcessGrid({}, "tp-dp-pp"), std::invalid_argument);        // cp missing
  EXPECT_THROW(ProcessGrid({}, "tp-cp-dp-pp-tp"), std::invalid_argument);  // tp twice
  EXPECT_THROW(ProcessGrid({}, "tp-cp-xx-pp"), std::invalid_argument);
}

}  // namespace
}  // namespace gf
