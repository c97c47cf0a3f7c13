// Schedules from a file (parallel/pipeline/schedule_file.h), without MPI: every built-in schedule written
// out in torch.distributed.pipelining's CSV form (with and without its messages) reads back as the very
// lists stage_actions gives; the parser's errors name file, line and cell; cells outside the shape are
// refused; and each refusal before any work (a deadlock, an unmatched send, a backward before its
// forward, a missing or repeated compute, a gradient sent after the scratch it lives in was reused, the
// live micro-batches over the bound) names the stage, the action and the cell it comes from.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "parallel/pipeline/schedule_file.h"

namespace gf::pipeline {
namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The parse error of `text` ("" when it parses).
std::string parse_error(const std::string& text) {
  try {
    parse_schedule_file(text, "s.csv");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// check_schedule_file's verdict on `text` for `shape`.
std::string verdict(const std::string& text, const Shape& shape, int max_live = 0) {
  return check_schedule_file(parse_schedule_file(text, "s.csv"), shape, max_live);
}

TEST(PipelineScheduleFile, EveryBuiltInScheduleReadsBackAsItsLists) {
  const Scheduler builtin[] = {Scheduler::kGPipe, Scheduler::k1F1B, Scheduler::kInterleaved, Scheduler::kZBH1};
  int checked = 0;
  for (Scheduler sched : builtin)
    for (int p = 2; p <= 4; ++p)
      for (int m = 1; m <= 8; ++m)
        for (int v : {1, 2}) {
          const Shape sh{p, m, v};
          if (!check_shape(sched, sh).empty()) continue;
          const StageLists want = all_stage_actions(sched, sh);
          for (bool messages : {false, true}) {
            const std::string csv = format_schedule_csv(want, sh, messages);
            const ScheduleFile f = parse_schedule_file(csv, "x.csv");
            EXPECT_EQ(f.messages, messages);
            StageLists got;
            // GPipe holds every micro-batch: its bound is m v, above the default (1F1B's).
            const int bound = sched == Scheduler::kGPipe ? m * v : 0;
            const std::string e = check_schedule_file(f, sh, bound, &got);
            ASSERT_EQ(e, "") << scheduler_name(sched) << " p" << p << " m" << m << " v" << v << "\n" << csv;
            EXPECT_EQ(got, want) << scheduler_name(sched) << " p" << p << " m" << m << " v" << v << "\n" << csv;
            ++checked;
          }
        }
  EXPECT_GT(checked, 150);
}

TEST(PipelineScheduleFile, OneFOneBAsTorchWritesIt) {
  // Schedule1F1B at pp2, 4 micro-batches, as torch's compute_only CSV (idle steps as empty cells).
  const std::string csv = "0F0,0F1,,0B0,0F2,0B1,0F3,0B2,,0B3\n,1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n";
  StageLists got;
  ASSERT_EQ(check_schedule_file(parse_schedule_file(csv, "s.csv"), {2, 4, 1}, 0, &got), "");
  EXPECT_EQ(got, all_stage_actions(Scheduler::k1F1B, {2, 4, 1}));
  // Our short form (no stage: the row's own), comments, blank lines, quotes, CRLF and spaces.
  const std::string short_form = "# 1F1B, pp2, m4\r\n\r\nF0, F1, B0, F2, B1, \"F3\", B2, B3\r\n  # stage 1\n"
                                 "F0,B0,F1,B1,F2,B2,F3,B3\n";
  ASSERT_EQ(check_schedule_file(parse_schedule_file(short_form, "s.csv"), {2, 4, 1}, 0, &got), "");
  EXPECT_EQ(got, all_stage_actions(Scheduler::k1F1B, {2, 4, 1}));
}

TEST(PipelineScheduleFile, SkippedAndOverlappedCells) {
  // torch's FSDP lowering adds UNSHARD / RESHARD / REDUCE_GRAD: nothing to run here. (a;b)OVERLAP_F_B runs a then b.
  const std::string csv = "0UNSHARD,0F0,0F1,(0B0;0F2)OVERLAP_F_B,0B1,0F3,0B2,0B3,0REDUCE_GRAD,0RESHARD\n"
                          "1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n";
  StageLists got;
  ASSERT_EQ(check_schedule_file(parse_schedule_file(csv, "s.csv"), {2, 4, 1}, 0, &got), "");
  EXPECT_EQ(got, all_stage_actions(Scheduler::k1F1B, {2, 4, 1}));
}

TEST(PipelineScheduleFile, ParseErrorsNameFileLineAndCell) {
  std::string e = parse_error("0F0,0X0\n");
  EXPECT_TRUE(has(e, "s.csv:1:2: '0X0': not an action; expected <stage><type><micro-batch>")) << e;
  e = parse_error("# comment\n\n0F0,,0F\n");
  EXPECT_TRUE(has(e, "s.csv:3:3: '0F': the micro-batch index is missing (e.g. 0F0)")) << e;
  e = parse_error("0F0x\n");
  EXPECT_TRUE(has(e, "s.csv:1:1: '0F0x': unexpected 'x' after the action")) << e;
  e = parse_error("0F12345678901\n");
  EXPECT_TRUE(has(e, "s.csv:1:1: '0F12345678901': index past 1000000000")) << e;
  e = parse_error("99999999999F0\n");
  EXPECT_TRUE(has(e, "index past")) << e;
  e = parse_error("0REDUCE_GRAD3\n");
  EXPECT_TRUE(has(e, "s.csv:1:1: '0REDUCE_GRAD3': REDUCE_GRAD takes no micro-batch")) << e;
  e = parse_error("(0F0;0B0)OVERLAP\n");
  EXPECT_TRUE(has(e, "s.csv:1:1: '(0F0;0B0)OVERLAP': an overlap cell is written (a;b)OVERLAP_F_B, e.g. (0F2;3B0)OVERLAP_F_B")) << e;
  e = parse_error("-1F0\n");
  EXPECT_TRUE(has(e, "s.csv:1:1: '-1F0': not an action")) << e;
  EXPECT_EQ(parse_error("0F0, 0I0 ,0W0,0SEND_F0,1RECV_F0,0SEND_B0,0RECV_B0,0B0\n"), "");
  EXPECT_THROW(read_schedule_file("/nonexistent/schedule.csv"), std::invalid_argument);
}

TEST(PipelineScheduleFile, CellsOutsideTheShapeAreRefused) {
  const std::string good1 = "1F0,1B0,1F1,1B1\n";
  std::string e = verdict("0F0,0F1,0B0,0B1\n", {2, 2, 1});
  EXPECT_TRUE(has(e, "s.csv: 1 rows of actions for 2 pipeline stages")) << e;
  e = verdict("0F0,0F1,0B0,0B1\n" + good1 + good1, {2, 2, 1});
  EXPECT_TRUE(has(e, "3 rows of actions for 2")) << e;
  e = verdict("0F0,2F1,0B0,0B1\n" + good1, {2, 2, 1});
  EXPECT_TRUE(has(e, "s.csv:1:2: '2F1': stage 2 is past the last virtual stage 1")) << e;
  e = verdict("0F0,1F1,0B0,0B1\n" + good1, {2, 2, 1});
  EXPECT_TRUE(has(e, "s.csv:1:2: '1F1': stage 1 runs on pipeline rank 1, not on this row's rank 0")) << e;
  e = verdict("0F0,0F2,0B0,0B1\n" + good1, {2, 2, 1});
  EXPECT_TRUE(has(e, "s.csv:1:2: '0F2': micro-batch 2 of 2 (parallel_config.micro_batch_num")) << e;
}

// Stage 0 waits for micro 0's gradient before it sends micro 1's activation; stage 1 runs micro 1 first.
TEST(PipelineScheduleFile, DeadlockIsRefusedNamingStagesAndActions) {
  const std::string e = verdict("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n", {2, 2, 1});
  EXPECT_TRUE(has(e, "s.csv: deadlock:")) << e;
  EXPECT_TRUE(has(e, "stage 0, action #3 Backward(micro 0, chunk 0) [s.csv:1:2 '0B0'] waits for the gradient from "
                     "stage 1")) << e;
  EXPECT_TRUE(has(e, "stage 1, action #1 Forward(micro 1, chunk 0) [s.csv:2:1 '1F1'] waits for the activation from "
                     "stage 0")) << e;
}

// Explicit messages (torch's compute_comms form): stage 0 sends micro 1's activation, stage 1 posts no
// receive for it.
TEST(PipelineScheduleFile, UnmatchedSendIsRefusedNamingStageAndAction) {
  const std::string stage0 = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n";
  const std::string good1 = "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n";
  ASSERT_EQ(verdict(stage0 + good1, {2, 2, 1}), "");
  const std::string e = verdict(stage0 + "1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n", {2, 2, 1});
  EXPECT_TRUE(has(e, "s.csv: unmatched send: stage 0, action #3 SendForward(micro 1, chunk 0) [s.csv:1:4 '0SEND_F1'] "
                     "is received by no RecvForward(micro 1, chunk 0) on stage 1")) << e;
  EXPECT_TRUE(has(e, "stage 1, action #4 Forward(micro 1, chunk 0) [s.csv:2:5 '1F1']: no RecvForward posted")) << e;
  // A receive after the compute that reads it.
  const std::string late = verdict(stage0 + "1RECV_F0,1F0,1B0,1SEND_B0,1F1,1RECV_F1,1B1,1SEND_B1\n", {2, 2, 1});
  EXPECT_TRUE(has(late, "stage 1, action #4 Forward(micro 1, chunk 0) [s.csv:2:5 '1F1']: its RecvForward(micro 1, "
                        "chunk 0) comes after it (action #5)")) << late;
  // A receive nobody sends: its compute waits forever.
  const std::string lost = verdict("0F0,0SEND_F0,0F1,0RECV_B0,0B0,0RECV_B1,0B1\n" + good1, {2, 2, 1});
  EXPECT_TRUE(has(lost, "deadlock") && has(lost, "stage 0's list has no SendForward(micro 1, chunk 0)")) << lost;
}

TEST(PipelineScheduleFile, OrderAndCompletenessAreRefused) {
  const std::string good1 = "1F0,1B0,1F1,1B1\n";
  std::string e = verdict("0F0,0B1,0F1,0B0\n" + good1, {2, 2, 1});
  EXPECT_TRUE(has(e, "Backward(micro 1, chunk 0) [s.csv:1:2 '0B1']: before its Forward")) << e;
  e = verdict("0F0,0F1,0B0\n" + good1, {2, 2, 1});
  EXPECT_TRUE(has(e, "stage 0: (micro 1, chunk 0) has no Backward")) << e;
  e = verdict("0F0,0F1,0B0,0B1,0B1\n" + good1, {2, 2, 1});
  EXPECT_TRUE(has(e, "'0B1'") && has(e, "repeated")) << e;
  e = verdict("0F0,0F1,0I0,0B1,0W0,0W0\n" + good1, {2, 2, 1});
  EXPECT_TRUE(has(e, "BackwardWeight(micro 0, chunk 0) [s.csv:1:6 '0W0']: repeated")) << e;
  e = verdict("0F0,0F1,0W0,0B0,0B1\n" + good1, {2, 2, 1});
  EXPECT_TRUE(has(e, "[s.csv:1:3 '0W0']: without a prior BackwardInput")) << e;
  // The gradient a SendBackward sends is the stage's backward scratch: no compute between.
  e = verdict("0F0,0F1,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1RECV_F1,1F0,1B0,1F1,1SEND_B0,1B1,1SEND_B1\n", {2, 2, 1});
  EXPECT_TRUE(has(e, "stage 1, action #5 SendBackward(micro 0, chunk 0) [s.csv:2:6 '1SEND_B0']: after action #4 "
                     "Forward(micro 1, chunk 0)")) << e;
}

// GPipe's order holds all 4 micro-batches on stage 0, over 1F1B's 2.
TEST(PipelineScheduleFile, PeakOverTheBoundIsRefused) {
  const Shape sh{2, 4, 1};
  const std::string gpipe = format_schedule_csv(all_stage_actions(Scheduler::kGPipe, sh), sh, false);
  std::string e = verdict(gpipe, sh);
  EXPECT_TRUE(has(e, "s.csv: stage 0, action #4 Forward(micro 2, chunk 0) [s.csv:1:3 '0F2']: holds 3 micro-batch "
                     "activations at once (peak 4), over the bound 2 (the built-in schedule's of this shape")) << e;
  EXPECT_TRUE(has(e, "pipeline_schedule_max_live: 4")) << e;
  e = verdict(gpipe, sh, 3);
  EXPECT_TRUE(has(e, "holds 4 micro-batch activations at once (peak 4), over the bound 3 "
                     "(parallel.pipeline_config.pipeline_schedule_max_live)")) << e;
  EXPECT_EQ(verdict(gpipe, sh, 4), "");
  EXPECT_EQ(default_live_bound({2, 4, 1}), 2);
  EXPECT_EQ(default_live_bound({4, 2, 1}), 2);
  EXPECT_EQ(default_live_bound({4, 8, 2}), 2 * 3 + 4 + 1);
  EXPECT_EQ(default_live_bound({2, 2, 2}), 4);
}

TEST(PipelineScheduleFile, ReadsAFile) {
  const std::string path = ::testing::TempDir() + "gf_schedule_file_test.csv";
  {
    std::ofstream out(path);
    out << format_schedule_csv(all_stage_actions(Scheduler::kZBH1, {2, 4, 1}), {2, 4, 1}, false);
  }
  StageLists got;
  EXPECT_EQ(check_schedule_file(read_schedule_file(path), {2, 4, 1}, 0, &got), "");
  EXPECT_EQ(got, all_stage_actions(Scheduler::kZBH1, {2, 4, 1}));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gf::pipeline
