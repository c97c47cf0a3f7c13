// Expert parallelism's layout rules, checked on every rank before any work and by `gridformer
// config` without a rank count: expert_parallel >= 1; > 1 only with experts (moe_config.expert_num >
// 1); expert_num and data_parallel divisible by it (experts are carved from data parallel). Each
// message names the keys and an expert_parallel that works, and the suggested layout passes.
#include <gtest/gtest.h>

#include <string>

#include "runner/config/layout_check.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::kMinimal;
using config_test::kMinimalLlama;

std::string problems(int world, const std::vector<std::string>& sets, const std::string& yaml = kMinimal) {
  const Config c = load_config_string(yaml, sets);
  std::string all;
  for (const auto& p : layout_problems(c, world)) all += p + "\n";
  return all;
}

std::string rank_free(const std::vector<std::string>& sets) {
  std::string all;
  for (const auto& p : config_layout_problems(load_config_string(kMinimal, sets))) all += p + "\n";
  return all;
}

TEST(ExpertParallelLayout, FittingLayoutsPass) {
  EXPECT_EQ(problems(1, {"moe_config.expert_num=4"}), "");
  EXPECT_EQ(problems(2, {"moe_config.expert_num=4", "parallel_config.data_parallel=2", "parallel_config.expert_parallel=2"}),
            "");
  // Expert parallel 2 inside data parallel 4, with tensor parallel 2: 8 ranks (MindSpeed's GPT MoE layout).
  EXPECT_EQ(problems(8, {"moe_config.expert_num=4", "parallel_config.data_parallel=4", "parallel_config.model_parallel=2",
                         "parallel_config.expert_parallel=2", "parallel_config.use_seq_parallel=True"}),
            "");
  // Every expert on its own rank, and a Llama's too.
  EXPECT_EQ(problems(8, {"moe_config.expert_num=8", "parallel_config.data_parallel=8", "parallel_config.expert_parallel=8"}),
            "");
  EXPECT_EQ(problems(4, {"moe_config.expert_num=8", "parallel_config.data_parallel=4", "parallel_config.expert_parallel=4"},
                     kMinimalLlama),
            "");
}

TEST(ExpertParallelLayout, ExpertParallelNeedsExperts) {
  const std::string p = problems(2, {"parallel_config.data_parallel=2", "parallel_config.expert_parallel=2"});
  EXPECT_EQ(p, "`parallel_config.expert_parallel: 2` with `moe_config.expert_num: 1`: expert parallelism splits the "
               "experts of MoE layers, and this model has none (expert_num 1 is dense); use expert_parallel: 1, or an "
               "expert_num that is a multiple of 2 for a Mixture-of-Experts model\n");
  EXPECT_EQ(rank_free({"parallel_config.data_parallel=2", "parallel_config.expert_parallel=2"}), p);
  EXPECT_EQ(rank_free({"parallel_config.expert_parallel=0"}),
            "`parallel_config.expert_parallel: 0`: must be >= 1 (1: every rank holds every expert)\n");
  EXPECT_EQ(rank_free({"parallel_config.expert_parallel=1"}), "");
}

TEST(ExpertParallelLayout, TheExpertsMustSplit) {
  // 6 experts over expert_parallel 4: 2 divides both 6 and data_parallel 4.
  const std::string p = problems(4, {"moe_config.expert_num=6", "parallel_config.data_parallel=4",
                                     "parallel_config.expert_parallel=4"});
  EXPECT_EQ(p, "`moe_config.expert_num` (6) is not divisible by `parallel_config.expert_parallel` (4): each rank of an "
               "expert-parallel group holds expert_num / expert_parallel whole experts; use expert_parallel: 2 (it "
               "divides expert_num and data_parallel)\n");
  EXPECT_EQ(problems(4, {"moe_config.expert_num=6", "parallel_config.data_parallel=4", "parallel_config.expert_parallel=2"}),
            "");
}

TEST(ExpertParallelLayout, ExpertParallelIsCarvedFromDataParallel) {
  const std::string p = problems(6, {"moe_config.expert_num=4", "parallel_config.data_parallel=3",
                                     "parallel_config.model_parallel=2", "parallel_config.expert_parallel=2"});
  EXPECT_EQ(p, "`parallel_config.data_parallel` (3) is not divisible by `parallel_config.expert_parallel` (2): expert "
               "parallelism is carved from data parallelism (each group of expert_parallel data-parallel ranks holds one "
               "copy of the experts); use expert_parallel: 1, or a data_parallel that is a multiple of 2\n");
  // Both rules at once: each said.
  const std::string both = problems(6, {"moe_config.expert_num=6", "parallel_config.data_parallel=6",
                                        "parallel_config.expert_parallel=4"});
  EXPECT_NE(both.find("`moe_config.expert_num` (6) is not divisible by `parallel_config.expert_parallel` (4)"),
            std::string::npos) << both;
  EXPECT_NE(both.find("`parallel_config.data_parallel` (6) is not divisible by `parallel_config.expert_parallel` (4)"),
            std::string::npos) << both;
  EXPECT_NE(both.find("use expert_parallel: 3"), std::string::npos) << both;  // divides 6 experts and 6 ranks
}

// The suggested layout keeps expert_parallel when it fits, lowers it when it does not, and passes.
TEST(ExpertParallelLayout, TheSuggestionFitsAndNamesExpertParallel) {
  const Config c = load_config_string(kMinimal, {"moe_config.expert_num=4", "parallel_config.data_parallel=2",
                                                 "parallel_config.expert_parallel=2"});
  EXPECT_EQ(layout_error_message(c, 4),
            "the parallel layout does not fit 4 rank(s):\n"
            "  `parallel_config.data_parallel` (2) x `model_parallel` (1) x `pipeline_stage` (1) = 2, but 4 rank(s) are "
            "running\n"
            "  a layout that fits 4 rank(s): parallel_config: {data_parallel: 4, model_parallel: 1, pipeline_stage: 1, "
            "expert_parallel: 2}");
  for (int world : {1, 2, 3, 4, 6, 8}) {
    for (int ep : {1, 2, 3, 4, 8}) {
      const std::vector<std::string> base = {"moe_config.expert_num=8", "parallel_config.expert_parallel=" + std::to_string(ep)};
      const std::string s = suggest_layout(load_config_string(kMinimal, base), world);
      ASSERT_FALSE(s.empty()) << world << " " << ep;
      const auto field = [&](const std::string& key) {
        const size_t b = s.find(key + ": ");
        if (b == std::string::npos) return std::string("1");
        const size_t v = b + key.size() + 2;
        return s.substr(v, s.find(',', v) == std::string::npos ? std::string::npos : s.find(',', v) - v);
      };
      std::vector<std::string> sets = base;
      sets.back() = "parallel_config.expert_parallel=" + field("expert_parallel");
      sets.push_back("parallel_config.data_parallel=" + field("data_parallel"));
      sets.push_back("parallel_config.model_parallel=" + field("model_parallel"));
      EXPECT_EQ(problems(world, sets), "") << world << " ranks, expert_parallel " << ep << ": " << s;
      EXPECT_LE(std::stoi(field("expert_parallel")), ep) << s;
      EXPECT_EQ(s.find("expert_parallel") != std::string::npos, ep != 1) << s;
    }
  }
}

}  // namespace
}  // namespace gf
