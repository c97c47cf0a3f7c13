// The log line's interval arithmetic: step 1 alone, then means over the steps since the last
// report, evaluation time left out, and the rates derived from an interval.
#include <gtest/gtest.h>

#include "runner/report/interval_meter.h"

namespace gf {
namespace {

TEST(IntervalMeter, StepOneAloneThenIntervalsOfTheStepsSinceTheLastReport) {
  IntervalMeter m(100.0);
  m.step_done();  // step 1 ends at 102.5: 2.5 s of start-up
  const Interval first = m.close(102.5);
  EXPECT_TRUE(first.startup);
  EXPECT_EQ(first.first_step, 1);
  EXPECT_EQ(first.last_step, 1);
  EXPECT_DOUBLE_EQ(first.seconds, 2.5);
  EXPECT_DOUBLE_EQ(first.ms_per_step(), 2500.0);
  for (int i = 0; i < 4; ++i) m.step_done();  // steps 2-5 end at 106.5: 1 s each
  const Interval second = m.close(106.5);
  EXPECT_FALSE(second.startup);
  EXPECT_EQ(second.first_step, 2);
  EXPECT_EQ(second.last_step, 5);
  EXPECT_EQ(second.steps(), 4);
  EXPECT_DOUBLE_EQ(second.ms_per_step(), 1000.0);
  for (int i = 0; i < 5; ++i) m.step_done();  // steps 6-10 end at 116.5: 2 s each
  const Interval third = m.close(116.5);
  EXPECT_EQ(third.first_step, 6);
  EXPECT_EQ(third.last_step, 10);
  EXPECT_DOUBLE_EQ(third.ms_per_step(), 2000.0);
  // The steady mean is over steps 2-10 (4 + 10 s for 9 steps), not step 1.
  EXPECT_EQ(m.steady_steps(), 9);
  EXPECT_DOUBLE_EQ(m.steady_ms_per_step(), 14000.0 / 9);
  EXPECT_DOUBLE_EQ(m.startup().ms_per_step(), 2500.0);
}

TEST(IntervalMeter, TheMeanIsTheIntervalsWallClockNotTheLastStep) {
  // The reported bug: the printed step took 1227 ms while the interval's 10 steps took 22.1 s.
  IntervalMeter m(0.0);
  m.step_done();
  m.close(5.0);
  for (int i = 0; i < 10; ++i) m.step_done();
  const Interval iv = m.close(5.0 + 22.1);
  EXPECT_NEAR(iv.ms_per_step(), 2210.0, 1e-9);
}

TEST(IntervalMeter, EvaluationIsNotCounted) {
  IntervalMeter m(0.0);
  m.step_done();
  m.close(1.0);
  m.step_done();
  m.step_done();
  m.exclude(3.0);  // an evaluation inside the interval
  m.step_done();
  const Interval iv = m.close(1.0 + 3 * 0.5 + 3.0);
  EXPECT_DOUBLE_EQ(iv.seconds, 1.5);
  EXPECT_DOUBLE_EQ(iv.ms_per_step(), 500.0);
  // An evaluation right after a report belongs to the next interval and is taken out of it.
  m.exclude(4.0);
  m.step_done();
  const Interval next = m.close(5.5 + 4.0 + 0.5);
  EXPECT_DOUBLE_EQ(next.seconds, 0.5);
  EXPECT_EQ(m.steady_steps(), 4);
  EXPECT_DOUBLE_EQ(m.steady_ms_per_step(), 500.0);
}

TEST(IntervalMeter, BeforeAnySteadyIntervalTheStartUpStandsIn) {
  IntervalMeter m(10.0);
  m.step_done();
  m.close(10.25);
  EXPECT_EQ(m.steady_steps(), 0);
  EXPECT_DOUBLE_EQ(m.steady_ms_per_step(), 250.0);
}

TEST(IntervalRates, TokensSamplesFlopsAndMfuOverTheInterval) {
  Interval iv;
  iv.first_step = 6;
  iv.last_step = 10;
  iv.seconds = 2.0;  // 5 steps in 2 s
  // 8 samples x 256 tokens per step, 1e12 FLOPs per step over 2 ranks, peak 0.5 TFLOP/s per rank.
  const IntervalRates r = interval_rates(iv, 2048.0, 8.0, 1e12, 2, 0.5);
  EXPECT_DOUBLE_EQ(r.step_ms, 400.0);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 2048.0 * 5 / 2.0);
  EXPECT_DOUBLE_EQ(r.samples_per_s, 20.0);
  EXPECT_DOUBLE_EQ(r.tflops, 1.25);  // 5e12 FLOPs / 2 s / 2 ranks
  EXPECT_DOUBLE_EQ(r.mfu, 2.5);
  // Rates multiplied back by the interval's time give its totals.
  EXPECT_DOUBLE_EQ(r.step_ms * iv.steps() / 1000.0, iv.seconds);
}

TEST(IntervalRates, AnEmptyIntervalGivesZeros) {
  Interval iv;
  iv.first_step = 1;
  iv.last_step = 1;
  iv.seconds = 0.0;
  const IntervalRates r = interval_rates(iv, 100.0, 1.0, 1e9, 1, 1.0);
  EXPECT_EQ(r.tokens_per_s, 0.0);
  EXPECT_EQ(r.mfu, 0.0);
}

}  // namespace
}  // namespace gf
