#include <gtest/gtest.h>

#include <cmath>

#include "core/optim/lr_schedule.h"

namespace gf {
namespace {

TEST(LrSchedule, WarmupIsLinearFromTheFirstStep) {
  LrScheduleConfig c{"cosine", 1e-3, 1e-4, 4, 0.0, 10, 1.0};
  LrSchedule s(c, 100);
  EXPECT_DOUBLE_EQ(s.at(1), 0.25e-3);
  EXPECT_DOUBLE_EQ(s.at(4), 1e-3);
}

TEST(LrSchedule, CosineEndsAtLrEnd) {
  LrScheduleConfig c{"cosine", 1e-3, 1e-4, 2, 0.0, 10, 1.0};
  LrSchedule s(c, 100);
  EXPECT_NEAR(s.at(6), 1e-4 + 0.5 * (1e-3 - 1e-4), 1e-15);  // halfway
  EXPECT_NEAR(s.at(10), 1e-4, 1e-15);
  EXPECT_NEAR(s.at(50), 1e-4, 1e-15);  // clamped past the end
}

TEST(LrSchedule, PolynomialAndConstant) {
  LrScheduleConfig p{"polynomial", 1.0, 0.0, 0, 0.0, -1, 2.0};
  LrSchedule s(p, 11);  // total from the run
  EXPECT_EQ(s.total(), 11);
  EXPECT_NEAR(s.at(1), std::pow(1.0 - 1.0 / 11, 2.0), 1e-12);
  LrScheduleConfig k{"constant", 0.5, 0.0, 0, 0.2, 10, 1.0};
  LrSchedule ks(k, 10);
  EXPECT_EQ(ks.warmup(), 2);  // warmup_ratio * total
  EXPECT_DOUBLE_EQ(ks.at(1), 0.25);
  EXPECT_DOUBLE_EQ(ks.at(7), 0.5);
}

TEST(LrSchedule, UnknownTypeListsRegistered) {
  EXPECT_THROW(LrSchedule(LrScheduleConfig{"linear"}, 10), std::invalid_argument);
}

}  // namespace
}  // namespace gf
