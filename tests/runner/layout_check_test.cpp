// Each layout rule refuses what it should, names the keys, and the suggested layout passes.
#include <gtest/gtest.h>

#include <string>

#include "runner/config/layout_check.h"

namespace gf {
namespace {

const std::string kModel = R"(
model:
  model_config: {type: GPT2Config, seq_length: 30, vocab_size: 1000, hidden_size: 48, num_layers: 2, num_heads: 6}
  arch: {type: GPT2LMHeadModel}
)";

std::string problems(int world, const std::vector<std::string>& sets) {
  const Config c = load_config_string(kModel, sets);
  std::string all;
  for (const auto& p : layout_problems(c, world)) all += p + "\n";
  return all;
}

TEST(LayoutCheck, AFittingLayoutPasses) {
  EXPECT_EQ(problems(1, {}), "");
  EXPECT_EQ(problems(4, {"parallel_config.data_parallel=2", "parallel_config.model_parallel=2"}), "");
  EXPECT_EQ(problems(3, {"parallel_config.model_parallel=3", "parallel_config.use_seq_parallel=True"}), "");
}

// Without a rank count (`gridformer config`, `plan`), a degree below 1 is refused by name; 0 and -1 do not
// mean "derive it" here.
TEST(LayoutCheck, DegreesBelowOneAreRefusedWithoutARankCount) {
  for (const char* set : {"parallel_config.data_parallel=0", "parallel_config.model_parallel=-1"}) {
    std::string all;
    for (const auto& p : config_layout_problems(load_config_string(kModel, {set}))) all += p + "\n";
    const std::string key = std::string(set).substr(0, std::string(set).find('='));
    const std::string value = std::string(set).substr(key.size() + 1);
    EXPECT_NE(all.find("`" + key + ": " + value + "`: must be >= 1"), std::string::npos) << all;
  }
}

TEST(LayoutCheck, GridMustCoverTheRanks) {
  const std::string p = problems(4, {"parallel_config.data_parallel=3"});
  EXPECT_NE(p.find("`parallel_config.data_parallel` (3) x `model_parallel` (1) x `pipeline_stage` (1) = 3, but 4 rank(s)"),
            std::string::npos) << p;
}

TEST(LayoutCheck, HeadsHiddenAndFfnMustSplit) {
  // 48 hidden, 6 heads: model_parallel 4 splits the hidden size but not the heads.
  std::string p = problems(4, {"parallel_config.model_parallel=4"});
  EXPECT_NE(p.find("`model.model_config.num_heads` (6) is not divisible by `parallel_config.model_parallel` (4)"),
            std::string::npos) << p;
  EXPECT_EQ(p.find("hidden_size` (48)"), std::string::npos) << p;
  p = problems(5, {"parallel_config.model_parallel=5"});
  EXPECT_NE(p.find("`model.model_config.hidden_size` (48) is not divisible"), std::string::npos) << p;
  EXPECT_NE(p.find("FFN width `hidden_size` x `expand_ratio` (48 x 4 = 192) is not divisible"), std::string::npos) << p;
}

TEST(LayoutCheck, SequenceParallelNeedsTheSequenceToSplit) {
  const std::string p = problems(4, {"parallel_config.model_parallel=2", "parallel_config.data_parallel=2",
                                     "parallel_config.use_seq_parallel=True", "model.model_config.seq_length=31"});
  EXPECT_NE(p.find("`model.model_config.seq_length` (31) is not divisible by `parallel_config.model_parallel` (2), which "
                   "`parallel_config.use_seq_parallel: True` needs"),
            std::string::npos) << p;
  EXPECT_EQ(problems(4, {"parallel_config.model_parallel=2", "parallel_config.data_parallel=2",
                         "model.model_config.seq_length=31"}), "");
}

TEST(LayoutCheck, PipelineStagesNeedMicroBatchesAndLayers) {
  EXPECT_EQ(problems(2, {"parallel_config.pipeline_stage=2", "parallel_config.micro_batch_num=2"}), "");
  std::string p = problems(2, {"parallel_config.pipeline_stage=2"});
  EXPECT_NE(p.find("`parallel_config.micro_batch_num` (1) is less than `parallel_config.pipeline_stage` (2)"),
            std::string::npos) << p;
  // kModel has 2 layers: 4 stages leave two without one.
  p = problems(4, {"parallel_config.pipeline_stage=4", "parallel_config.micro_batch_num=4"});
  EXPECT_NE(p.find("`model.model_config.num_layers` (2) is fewer than the `parallel_config.pipeline_stage` (4) stages: "
                   "every stage needs at least one layer; use pipeline_stage: 2 or fewer"),
            std::string::npos) << p;
}

TEST(LayoutCheck, TheSuggestionFits) {
  for (int world : {1, 2, 3, 4, 6, 8, 12}) {
    for (int mp : {1, 2, 3, 4, 6, 8}) {
      const Config c = load_config_string(kModel, {"parallel_config.model_parallel=" + std::to_string(mp)});
      const std::string s = suggest_layout(c, world);
      ASSERT_FALSE(s.empty()) << world << " " << mp;  // model_parallel 1 always fits
      const auto dp = s.substr(s.find("data_parallel: ") + 15, s.find(',') - s.find("data_parallel: ") - 15);
      const auto m = s.substr(s.find("model_parallel: ") + 16, s.find(", pipeline") - s.find("model_parallel: ") - 16);
      EXPECT_EQ(problems(world, {"parallel_config.data_parallel=" + dp, "parallel_config.model_parallel=" + m}), "")
          << world << ": " << s;
      EXPECT_LE(std::stoi(m), mp);
      EXPECT_NE(s.find("pipeline_stage: 1"), std::string::npos) << s;  // asked for 1
    }
  }
  // A config that asks for pipeline stages keeps them where they fit the ranks and the 2 layers, else fewer.
  for (int world : {1, 2, 3, 4, 6, 8}) {
    for (int pp : {1, 2, 4}) {
      const std::vector<std::string> base = {"parallel_config.pipeline_stage=" + std::to_string(pp),
                                             "parallel_config.micro_batch_num=4"};
      const std::string s = suggest_layout(load_config_string(kModel, base), world);
      ASSERT_FALSE(s.empty()) << world << " " << pp;
      const auto dp = s.substr(s.find("data_parallel: ") + 15, s.find(',') - s.find("data_parallel: ") - 15);
      const auto m = s.substr(s.find("model_parallel: ") + 16, s.find(", pipeline") - s.find("model_parallel: ") - 16);
      const int got = std::stoi(s.substr(s.find("pipeline_stage: ") + 16));
      EXPECT_EQ(problems(world, {"parallel_config.data_parallel=" + dp, "parallel_config.model_parallel=" + m,
                                 "parallel_config.pipeline_stage=" + std::to_string(got),
                                 "parallel_config.micro_batch_num=4"}), "")
          << world << ": " << s;
      const int fits = pp <= 2 && world % pp == 0 ? pp : (world % 2 == 0 ? 2 : 1);  // at most 2 stages of 2 layers
      EXPECT_EQ(got, std::min(pp, fits)) << world << " " << pp << ": " << s;
    }
  }
}

// The one message the ranks and `gridformer config --ranks N` print: empty when the layout fits,
// else a first line, one indented line per problem and a layout that fits.
TEST(LayoutCheck, OneMessageForEveryProblem) {
  EXPECT_EQ(layout_error_message(load_config_string(kModel, {"parallel_config.data_parallel=4"}), 4), "");
  const Config c = load_config_string(kModel, {"parallel_config.data_parallel=2", "parallel_config.model_parallel=4"});
  EXPECT_EQ(layout_error_message(c, 4),
            "the parallel layout does not fit 4 rank(s):\n"
            "  `parallel_config.data_parallel` (2) x `model_parallel` (4) x `pipeline_stage` (1) = 8, but 4 rank(s) are "
            "running\n"
            "  `model.model_config.num_heads` (6) is not divisible by `parallel_config.model_parallel` (4)\n"
            "  a layout that fits 4 rank(s): parallel_config: {data_parallel: 2, model_parallel: 2, pipeline_stage: 1}");
}

}  // namespace
}  // namespace gf
