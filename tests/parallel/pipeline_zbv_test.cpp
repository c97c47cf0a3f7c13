// ZB-V (parallel/pipeline/schedule.h, kZBV) without MPI: the V placement of the chunks; each stage's order
// against PyTorch's ScheduleZBVZeroBubble, transcribed by hand below for p = 2, m = 4 (not from our code);
// for pp 2..8 and m 1..32 every stage's list simulated (messages matched, no deadlock, every micro-batch's
// forward, input and weight pass once) with its peak live activations equal to live_bound; the bubble at
// equal costs ((p - 1) f per stage for m >= 2p, half of ZB-H1's at the same stage costs) and at unequal
// ones with W <= F <= B (never longer than ZB-H1 or 1F1B with the same work per stage); the shape's errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_file.h"

namespace gf::pipeline {
namespace {

Shape zbv(int p, int m) { return schedule_shape(Scheduler::kZBV, p, m, 2); }

// The computes of a list as PyTorch writes its actions: F, I (input pass), W, each with the local chunk and
// the micro-batch, e.g. "F0.2" is chunk 0's forward of micro-batch 2.
std::string computes(const std::vector<Action>& list) {
  std::string out;
  for (const Action& a : list) {
    const char* c = a.op == Op::kForward ? "F" : a.op == Op::kBackwardInput ? "I" : a.op == Op::kBackwardWeight ? "W"
                                                                                                             : nullptr;
    if (a.op == Op::kBackward) return "a fused Backward";
    if (c == nullptr) continue;
    if (!out.empty()) out += ' ';
    out += c;
    out += std::to_string(a.chunk);
    out += '.';
    out += std::to_string(a.micro);
  }
  return out;
}

TEST(PipelineZbv, TheVPlacesTheHeadOnStageZero) {
  for (int p = 2; p <= 8; ++p) {
    const Shape sh = zbv(p, 4);
    for (int s = 0; s < p; ++s) {
      EXPECT_EQ(vstage_of(sh, s, 0), s);
      EXPECT_EQ(vstage_of(sh, s, 1), 2 * p - 1 - s);
      for (int c = 0; c < 2; ++c) {
        EXPECT_EQ(stage_of(sh, vstage_of(sh, s, c)), s);
        EXPECT_EQ(chunk_of(sh, vstage_of(sh, s, c)), c);
      }
    }
    EXPECT_EQ(stage_of(sh, 2 * p - 1), 0);  // the last virtual stage: the head and the loss
    EXPECT_EQ(stage_of(sh, p - 1), p - 1);  // the turn of the V: virtual stages p - 1 and p on one stage
    EXPECT_EQ(stage_of(sh, p), p - 1);
    // Megatron's interleaving is unchanged: virtual stage k on stage k % p as chunk k / p.
    const Shape il{p, 4, 2};
    for (int k = 0; k < 2 * p; ++k) {
      EXPECT_EQ(stage_of(il, k), k % p);
      EXPECT_EQ(chunk_of(il, k), k / p);
    }
  }
}

// PyTorch's _calculate_single_rank_operations for pp_group_size 2, 4 micro-batches (n_micro = max(2p - 1, m) = 4),
// followed by hand. Rank 0: warm-up 2(2 - 0) - 1 = 3 forwards of chunk 0, no pairs, then 2 rounds of chunk 1's
// F, I, W; the steady loop runs twice (its second round without a chunk-0 forward: f0 has reached 4); the
// cool-down's 2 rounds of chunk 0's I and W. Rank 1: 1 forward of chunk 0, 1 pair (F1, F0), 1 round of chunk 1's
// F, I, W; two steady rounds; cool-down: 1 pair of inputs (I0, I1), 1 round of I0 W0, then W1, then W0.
TEST(PipelineZbv, TheOrderIsPyTorchs) {
  const Shape sh = zbv(2, 4);
  EXPECT_EQ(computes(stage_actions(Scheduler::kZBV, sh, 0)),
            "F0.0 F0.1 F0.2 F1.0 I1.0 W1.0 F1.1 I1.1 W1.1 F0.3 I0.0 W0.0 F1.2 I1.2 W1.2 I0.1 W0.1 F1.3 I1.3 W1.3 "
            "I0.2 W0.2 I0.3 W0.3");
  EXPECT_EQ(computes(stage_actions(Scheduler::kZBV, sh, 1)),
            "F0.0 F1.0 F0.1 F1.1 I1.0 W1.0 F0.2 I0.0 W0.0 F1.2 I1.1 W1.1 F0.3 I0.1 W0.1 F1.3 I1.2 W1.2 I0.2 I1.3 "
            "I0.3 W0.2 W1.3 W0.3");
  // Stage 1 is the turn of the V: its chunk 0 hands its output to its chunk 1 through the same receive and send
  // rule as any other neighbour (the engine copies it in memory), and stage 0's chunk 1 sends no activation.
  const std::vector<Action> last = stage_actions(Scheduler::kZBV, sh, 1);
  EXPECT_NE(std::find(last.begin(), last.end(), Action{Op::kSendForward, 0, 0}), last.end());
  EXPECT_NE(std::find(last.begin(), last.end(), Action{Op::kRecvForward, 0, 1}), last.end());
  const std::vector<Action> first = stage_actions(Scheduler::kZBV, sh, 0);
  EXPECT_EQ(std::find(first.begin(), first.end(), Action{Op::kSendForward, 0, 1}), first.end());
  EXPECT_EQ(std::find(first.begin(), first.end(), Action{Op::kRecvBackward, 0, 1}), first.end());
}

TEST(PipelineZbv, EveryShapeSimulatesWithinItsLiveBound) {
  for (int p = 2; p <= 8; ++p)
    for (int m = 1; m <= 32; ++m) {
      const Shape sh = zbv(p, m);
      const std::string at = "p" + std::to_string(p) + " m" + std::to_string(m);
      const Simulation sim = simulate(Scheduler::kZBV, sh);
      ASSERT_TRUE(sim.ok) << at << ": " << sim.error;
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(sim.peak_live[s], live_bound(Scheduler::kZBV, sh, s)) << at << " stage " << s;
        // At most p whole stages' activations (2p chunks of half a stage): 1F1B's first stage's.
        EXPECT_LE(sim.peak_live[s], 2 * std::min(p, m)) << at << " stage " << s;
        for (const Action& a : stage_actions(Scheduler::kZBV, sh, s)) EXPECT_NE(a.op, Op::kBackward) << at;
      }
    }
}

// At f = b = w (per chunk, half a stage) the V leaves (p - 1) f idle on every stage once m >= 2p; ZB-H1 with the
// same work per stage (2f, 2b, 2w) leaves (p - 1)(2f + 2b - 2w): twice that. analytic_bubble is the simulation's.
TEST(PipelineZbv, TheBubbleAtEqualCostsIsHalfZeroBubbleH1s) {
  for (int p = 2; p <= 8; ++p)
    for (int m = 2 * p; m <= 32; ++m) {
      const std::string at = "p" + std::to_string(p) + " m" + std::to_string(m);
      const Simulation v = simulate(Scheduler::kZBV, zbv(p, m));
      ASSERT_TRUE(v.ok) << at;
      for (double idle : v.idle) EXPECT_DOUBLE_EQ(idle, p - 1) << at;
      const Simulation h = simulate(Scheduler::kZBH1, {p, m, 1}, {2, 2, 2});
      for (double idle : h.idle) EXPECT_DOUBLE_EQ(idle, 2.0 * (p - 1)) << at;
      EXPECT_DOUBLE_EQ(analytic_bubble(Scheduler::kZBV, zbv(p, m)), v.bubble_fraction) << at;
      EXPECT_LT(v.bubble_fraction, h.bubble_fraction) << at;
    }
}

// Unequal passes in the paper's regime (T_W <= T_F <= T_B): with the same work per stage the V's step is never
// longer than ZB-H1's nor 1F1B's. Outside it the fixed order loses: with a weight pass three times a forward
// ({1, 1, 3}) PyTorch's ZB-V order is up to 3.05% longer than ZB-H1 (p 8, m 15; its docstring: "zero bubble"
// only at equal passes, a greedy scheduler being the alternative), which docs/distributed.md says.
TEST(PipelineZbv, UnequalCostsNeverLongerThanZeroBubbleH1Or1F1B) {
  for (const Costs c : {Costs{1, 1.5, 0.7}, Costs{1, 2, 0.5}, Costs{1, 1, 1}}) {
    const Costs stage{2 * c.f, 2 * c.b, 2 * c.w};
    for (int p = 2; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m) {
        const std::string at = "p" + std::to_string(p) + " m" + std::to_string(m) + " w " + std::to_string(c.w);
        const double v = simulate(Scheduler::kZBV, zbv(p, m), c).makespan;
        EXPECT_LE(v, simulate(Scheduler::kZBH1, {p, m, 1}, stage).makespan + 1e-9) << at;
        EXPECT_LE(v, simulate(Scheduler::k1F1B, {p, m, 1}, stage).makespan + 1e-9) << at;
      }
  }
}

TEST(PipelineZbv, ShapesItCannotRunAreNamed) {
  EXPECT_NE(check_shape(Scheduler::kZBV, schedule_shape(Scheduler::kZBV, 4, 8, 1)).find("pp_interleave_num: 2"),
            std::string::npos);
  EXPECT_NE(check_shape(Scheduler::kZBV, schedule_shape(Scheduler::kZBV, 4, 8, 3)).find("two model chunks per stage"),
            std::string::npos);
  // The V is ZB-V's alone: interleaving's lists over a V, or ZB-V's over Megatron's placement, are refused.
  EXPECT_NE(check_shape(Scheduler::kZBV, Shape{4, 8, 2}).find("schedule_shape"), std::string::npos);
  EXPECT_NE(check_shape(Scheduler::kInterleaved, Shape{4, 8, 2, true}).find("schedule_shape"), std::string::npos);
  EXPECT_EQ(check_shape(Scheduler::kZBV, zbv(4, 1)), "");
  EXPECT_THROW(stage_actions(Scheduler::kZBV, Shape{4, 8, 2}, 0), std::invalid_argument);
  EXPECT_TRUE(bubble_is_simulated(Scheduler::kZBV));
  EXPECT_FALSE(bubble_is_simulated(Scheduler::kZBH1));
}

// A schedule file in torch's "v" style (rank r's cells name stages r and 2P - 1 - r) is placed in the V: ZB-V's own
// lists written as a file (computes only, or with every message) read back as the same lists; an interleaved file
// keeps Megatron's placement; a V cell on another rank is refused naming the V.
TEST(PipelineZbv, AFileInTheVIsPlacedInTheV) {
  for (int p : {2, 3, 4})
    for (bool messages : {false, true}) {
      const Shape v = zbv(p, 2 * p);
      const StageLists lists = all_stage_actions(Scheduler::kZBV, v);
      const ScheduleFile f = parse_schedule_file(format_schedule_csv(lists, v, messages), "zbv.csv");
      const Shape placed = file_shape(f, {p, 2 * p, 2});
      EXPECT_TRUE(placed.v_shape) << p;
      EXPECT_EQ(file_lists(f, placed).lists, lists) << p << " messages " << messages;
      EXPECT_EQ(check_schedule_file(f, placed, 0), "") << p;
      const Shape il{p, 2 * p, 2};
      const ScheduleFile g = parse_schedule_file(format_schedule_csv(all_stage_actions(Scheduler::kInterleaved, il), il,
                                                                     false), "il.csv");
      EXPECT_FALSE(file_shape(g, il).v_shape) << p;
    }
  // Rank 0 of 2 holds stages 0 and 3 in the V; stage 2 is rank 1's.
  const ScheduleFile bad = parse_schedule_file("0F0,3F0,2F0\n1F0,2F0\n", "bad.csv");
  try {
    file_lists(bad, {2, 1, 2, true});
    FAIL() << "stage 2 on rank 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the file's V"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gf::pipeline
