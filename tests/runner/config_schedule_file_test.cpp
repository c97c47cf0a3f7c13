// The config side of schedules from a file (parallel.pipeline_config.pipeline_schedule_file and
// pipeline_schedule_max_live): the file is read and parsed by the loader, which makes the scheduler
// `file`; the layout check places it on the stages and simulates it, so `config`, `plan` and every rank
// refuse a file that cannot run, naming the stage, the action and the cell; what means nothing is warned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/layout_check.h"
#include "runner/report/plan.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::error_of;
using config_test::kMinimalLlama;

const std::string kFile = "parallel.pipeline_config.pipeline_schedule_file=";
const std::string kMaxLive = "parallel.pipeline_config.pipeline_schedule_max_live=";
const std::vector<std::string> kPp2 = {"model.model_config.num_layers=8", "parallel_config.pipeline_stage=2",
                                       "parallel_config.micro_batch_num=4"};

// Writes `text` to a file of the test's temporary directory; its path.
std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "gf_config_schedule_" + name;
  std::ofstream(path) << text;
  return path;
}

std::vector<std::string> sets(std::vector<std::string> extra) {
  std::vector<std::string> s = kPp2;
  s.insert(s.end(), extra.begin(), extra.end());
  return s;
}

std::string problems(const std::string& yaml, const std::vector<std::string>& s) {
  std::string all;
  for (const auto& p : config_layout_problems(load_config_string(yaml, s))) all += p + "\n";
  return all;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const char* const k1F1B = "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n";

TEST(ConfigScheduleFile, TheFileIsTheSchedule) {
  const std::string path = write("1f1b.csv", k1F1B);
  const Config c = load_config_string(kMinimalLlama, sets({kFile + path}));
  EXPECT_EQ(c.parallel.pipeline_scheduler, pipeline::Scheduler::kFile);
  EXPECT_EQ(c.parallel.pipeline_file.path, path);
  ASSERT_EQ(c.parallel.pipeline_file.rows.size(), 2u);
  EXPECT_EQ(c.parallel.pipeline_file.rows[1].size(), 8u);
  EXPECT_EQ(problems(kMinimalLlama, sets({kFile + path})), "");
  // The resolved config says what runs, and `plan` gives the file's simulated bubble.
  EXPECT_TRUE(has(dump_resolved(c), "pipeline_scheduler: file")) << dump_resolved(c);
  const std::string plan = plan_report(c, 2);
  EXPECT_TRUE(has(plan, "schedule file " + path + ": simulated bubble 20.0%")) << plan;
  // pipeline_scheduler: file with it is the same.
  const Config f = load_config_string(kMinimalLlama, sets({kFile + path, "parallel.pipeline_config.pipeline_scheduler=file"}));
  EXPECT_EQ(f.parallel.pipeline_file, c.parallel.pipeline_file);
  std::remove(path.c_str());
}

TEST(ConfigScheduleFile, WhatCannotBeReadIsRefusedByTheLoader) {
  std::string e = error_of(kMinimalLlama, sets({kFile + "/nonexistent/s.csv"}));
  EXPECT_TRUE(has(e, "pipeline_schedule_file") && has(e, "/nonexistent/s.csv: no such schedule file")) << e;
  const std::string bad = write("bad.csv", "0F0,0X0\n");
  e = error_of(kMinimalLlama, sets({kFile + bad}));
  EXPECT_TRUE(has(e, bad + ":1:2: '0X0': not an action")) << e;
  std::remove(bad.c_str());
  e = error_of(kMinimalLlama, sets({"parallel.pipeline_config.pipeline_scheduler=file"}));
  EXPECT_TRUE(has(e, "needs `parallel.pipeline_config.pipeline_schedule_file: PATH`")) << e;
  e = error_of(kMinimalLlama, sets({kMaxLive + "-1"}));
  EXPECT_TRUE(has(e, "pipeline_schedule_max_live") && has(e, "must be >= 0")) << e;
  // A scheduler written in the file beside a schedule file: which one is meant?
  const std::string path = write("1f1b_b.csv", k1F1B);
  const std::string yaml = kMinimalLlama + "parallel:\n  pipeline_config: {pipeline_scheduler: gpipe}\n";
  e = error_of(yaml, sets({kFile + path}));
  EXPECT_TRUE(has(e, "the file is the schedule; set pipeline_scheduler: file (or leave it out)")) << e;
  // Nothing to schedule at one stage: warned.
  const Config one = load_config_string(kMinimalLlama, {kFile + path});
  EXPECT_TRUE(std::any_of(one.warnings.begin(), one.warnings.end(),
                          [](const std::string& w) { return has(w, "there is no pipeline to schedule; ignored"); }));
  std::remove(path.c_str());
}

TEST(ConfigScheduleFile, WhatCannotRunIsRefusedByTheLayoutCheck) {
  const std::string deadlock = write("deadlock.csv", "0F0,0B0,0F1,0B1,0F2,0B2,0F3,0B3\n1F1,1B1,1F0,1B0,1F2,1B2,1F3,1B3\n");
  std::string e = problems(kMinimalLlama, sets({kFile + deadlock}));
  EXPECT_TRUE(has(e, "`parallel.pipeline_config.pipeline_schedule_file: " + deadlock + "`: " + deadlock +
                         ": deadlock: stage 0, action #3 Backward(micro 0, chunk 0) [" + deadlock + ":1:2 '0B0']")) << e;
  // Three forwards ahead on stage 0: over 1F1B's 2 by default; pipeline_schedule_max_live: 3 takes it.
  const std::string ahead = write("ahead.csv", "0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n");
  e = problems(kMinimalLlama, sets({kFile + ahead}));
  EXPECT_TRUE(has(e, "holds 3 micro-batch activations at once (peak 3), over the bound 2")) << e;
  EXPECT_EQ(problems(kMinimalLlama, sets({kFile + ahead, kMaxLive + "3"})), "");
  // The micro-batches the file must hold: more than its rows can is refused before the simulator.
  e = problems(kMinimalLlama, {"model.model_config.num_layers=8", "parallel_config.pipeline_stage=2",
                               "parallel_config.micro_batch_num=1000000000000", kFile + ahead});
  EXPECT_TRUE(has(e, "its longest row has 8 actions, fewer than the forward and backward of each of "
                     "`parallel_config.micro_batch_num` (1000000000000) x 1 model chunks")) << e;
  // The split backward under recompute, as ZB-H1.
  const std::string split = write("split.csv", "0F0,0F1,0I0,0W0,0F2,0I1,0W1,0F3,0I2,0W2,0I3,0W3\n"
                                               "1F0,1I0,1W0,1F1,1I1,1W1,1F2,1I2,1W2,1F3,1I3,1W3\n");
  EXPECT_EQ(problems(kMinimalLlama, sets({kFile + split})), "");
  e = problems(kMinimalLlama, sets({kFile + split, "recompute_config.recompute=True"}));
  EXPECT_TRUE(has(e, "its backward-weight cells (W) with `recompute_config.recompute: True`")) << e;
  // Two chunks a stage: the interleaved placement (virtual stage k on rank k % 2).
  const std::string two = write("two.csv", "0F0,0F1,2F0,2F1,2B0,2B1,0B0,0B1\n1F0,1F1,3F0,3B0,3F1,3B1,1B0,1B1\n");
  const std::vector<std::string> v2 = {"parallel.pipeline_config.pipeline_interleave=True",
                                       "model.model_config.pp_interleave_num=2", "parallel_config.micro_batch_num=2"};
  std::vector<std::string> s = sets({kFile + two});
  s.insert(s.end(), v2.begin(), v2.end());
  EXPECT_EQ(problems(kMinimalLlama, s), "");
  for (const auto& p : {deadlock, ahead, split, two}) std::remove(p.c_str());
}

}  // namespace
}  // namespace gf
