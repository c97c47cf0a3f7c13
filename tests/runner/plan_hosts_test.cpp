// runner/report/plan.h's group_spans_hosts: which groups of the grid's rank order (parallel/grid.h: tp fastest) have
// ranks on two hosts when each host runs ranks / hosts consecutive ranks.
#include <gtest/gtest.h>

#include "runner/report/plan.h"

namespace gf {

TEST(PlanHosts, GroupsInsideAHostDoNotSpan) {
  EXPECT_FALSE(group_spans_hosts(8, 4, 1, 2));  // tp2: {0,1} {2,3} ...
  EXPECT_FALSE(group_spans_hosts(8, 4, 1, 4));  // tp4: {0..3} {4..7}
  EXPECT_FALSE(group_spans_hosts(8, 4, 2, 2));  // tp2 x dp2: the data groups {0,2} {1,3} {4,6} {5,7}
  EXPECT_FALSE(group_spans_hosts(8, 8, 1, 8));  // one host
  EXPECT_FALSE(group_spans_hosts(8, 4, 4, 1));  // a group of one rank
}

TEST(PlanHosts, GroupsAcrossHostsSpan) {
  EXPECT_TRUE(group_spans_hosts(8, 4, 1, 8));   // tp8 over two hosts of 4
  EXPECT_TRUE(group_spans_hosts(8, 4, 2, 4));   // tp2 x dp4: {0,2,4,6}
  EXPECT_TRUE(group_spans_hosts(8, 4, 4, 2));   // pp2 of 4-rank stages: {0,4}
  EXPECT_TRUE(group_spans_hosts(6, 3, 1, 2));   // tp2 on hosts of 3: {2,3} straddles the first boundary
}

}  // namespace gf
