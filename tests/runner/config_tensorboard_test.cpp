// Where the config sends TensorBoard event files (runner/config/read_tensorboard.cpp): MindFormers'
// SummaryMonitor and tensorboard section, Megatron's tensorboard_dir, and which one wins.
#include <gtest/gtest.h>

#include "runner/config/config.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::error_of;
using config_test::kMinimal;

Config load(const std::vector<std::string>& sets) { return load_config_string(kMinimal, sets); }

bool warns(const Config& c, const std::string& what) {
  for (const auto& w : c.warnings)
    if (w.find(what) != std::string::npos) return true;
  return false;
}

TEST(ConfigTensorBoard, NoneByDefault) {
  const Config c = load({});
  EXPECT_EQ(c.tensorboard_dir, "");
}

TEST(ConfigTensorBoard, SummaryMonitorDefaultsUnderOutputDirAsMindFormers) {
  const Config c = load({"output_dir=./run7", "callbacks=[{type: MFLossMonitor, per_print_times: 3}, {type: SummaryMonitor}]"});
  EXPECT_EQ(c.tensorboard_dir, "./run7/summary/rank_0");
  EXPECT_EQ(c.per_print_times, 3);
  EXPECT_FALSE(warns(c, "SummaryMonitor")) << "a built callback is not warned about";
}

TEST(ConfigTensorBoard, SummaryDirAsWritten) {
  const Config c = load({"callbacks=[{type: SummaryMonitor, summary_dir: ./tb/a}]"});
  EXPECT_EQ(c.tensorboard_dir, "./tb/a");
  EXPECT_EQ(c.tensorboard_dir_from, "callbacks.0.summary_dir");
}

TEST(ConfigTensorBoard, SummaryCollectorKeysAreWarned) {
  const Config c = load({"callbacks=[{type: SummaryMonitor, summary_dir: tb, collect_freq: 5, max_file_size: 1000}]"});
  EXPECT_EQ(c.tensorboard_dir, "tb");
  EXPECT_TRUE(warns(c, "`callbacks.0.collect_freq: 5`"));
  EXPECT_TRUE(warns(c, "`callbacks.0.max_file_size: 1000`"));
}

TEST(ConfigTensorBoard, MindFormersSectionAddsRank0) {
  const Config c = load({"tensorboard.tensorboard_dir=/tmp/tbm"});
  EXPECT_EQ(c.tensorboard_dir, "/tmp/tbm/rank_0");
  EXPECT_EQ(c.tensorboard_dir_from, "tensorboard.tensorboard_dir");
  EXPECT_TRUE(warns(load({"tensorboard.tensorboard_queue_size=4"}), "tensorboard.tensorboard_queue_size"));
  EXPECT_TRUE(warns(load({"tensorboard.log_loss_scale_to_tensorboard=True"}), "log_loss_scale_to_tensorboard"));
}

TEST(ConfigTensorBoard, MegatronsTensorboardDirWinsAndTheOthersAreWarned) {
  const Config c = load({"tensorboard_dir=tb_top", "callbacks=[{type: SummaryMonitor, summary_dir: tb_cb}]",
                         "tensorboard.tensorboard_dir=tb_mf"});
  EXPECT_EQ(c.tensorboard_dir, "tb_top");
  EXPECT_EQ(c.tensorboard_dir_from, "tensorboard_dir");
  EXPECT_TRUE(warns(c, "`callbacks.0.summary_dir` asks for TensorBoard events in tb_cb"));
  EXPECT_TRUE(warns(c, "`tensorboard.tensorboard_dir` asks for TensorBoard events in tb_mf/rank_0"));
  // The same directory twice is no conflict.
  const Config same = load({"tensorboard_dir=tb", "callbacks=[{type: SummaryMonitor, summary_dir: tb}]"});
  EXPECT_FALSE(warns(same, "asks for TensorBoard events"));
}

TEST(ConfigTensorBoard, TwoSummaryMonitorsAreRefused) {
  const std::string e = error_of(kMinimal, {"callbacks=[{type: SummaryMonitor}, {type: SummaryMonitor, summary_dir: b}]"});
  EXPECT_NE(e.find("callbacks.1.type: SummaryMonitor"), std::string::npos) << e;
  EXPECT_NE(e.find("keep one"), std::string::npos) << e;
}

TEST(ConfigTensorBoard, OtherCallbacksStillRefuseSummaryKeys) {
  const std::string e = error_of(kMinimal, {"callbacks=[{type: MFLossMonitor, summary_dir: x}]"});
  EXPECT_NE(e.find("MFLossMonitor takes no key summary_dir"), std::string::npos) << e;
}

}  // namespace
}  // namespace gf
