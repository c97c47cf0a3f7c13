// `gridformer plan`'s compute line and its --memory-per-rank verdict (runner/report/plan.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "runner/config/config.h"
#include "runner/report/plan.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::kMinimal;

double tflop_of(const std::string& plan, const char* what) {
  const std::regex line(std::string("compute: ([0-9.eE+-]+) TFLOP a step .* ([0-9.eE+-]+) TFLOP a rank") );
  std::smatch m;
  EXPECT_TRUE(std::regex_search(plan, m, line)) << plan;
  return std::stod(m[std::string(what) == "step" ? 1 : 2].str());
}

// The step's FLOPs are Megatron's for GPT-2, 72 B T L h^2 (1 + T / (6 h) + V / (12 L h)) (Narayanan et al. 2021;
// V the config's vocabulary, as the MFU the log prints counts it, not the padded rows), for the trainer's global
// batch: batch_size x dp x the micro-batches; each rank's share is 1/ranks. The printed figure has 4 digits.
TEST(PlanCompute, MegatronsModelFlopsOfTheGlobalBatch) {
  auto megatron = [](double B, double T, double L, double h, double V) {
    return 72.0 * B * T * L * h * h * (1.0 + T / (6.0 * h) + V / (12.0 * L * h));
  };
  const double V = 1000;
  const std::string one = plan_report(load_config_string(kMinimal, {"runner_config.batch_size=4"}), 1);
  EXPECT_NEAR(tflop_of(one, "step"), megatron(4, 32, 2, 64, V) / 1e12, 1e-3 * megatron(4, 32, 2, 64, V) / 1e12);
  const std::string dp2 = plan_report(
      load_config_string(kMinimal, {"runner_config.batch_size=4", "parallel_config.data_parallel=2",
                                    "runner_config.gradient_accumulation_steps=3"}), 2);
  const double want = megatron(4 * 2 * 3, 32, 2, 64, V) / 1e12;
  EXPECT_NEAR(tflop_of(dp2, "step"), want, 1e-3 * want);
  EXPECT_NEAR(tflop_of(dp2, "rank"), want / 2, 1e-3 * want / 2);
}

TEST(PlanCompute, MemoryPerRankSaysWhetherTheLargestRankFits) {
  const Config c = load_config_string(kMinimal);
  bool fits = false;
  const std::string roomy = plan_report(c, 1, 64e9, &fits);
  EXPECT_TRUE(fits);
  EXPECT_NE(roomy.find("fits: the largest rank needs "), std::string::npos) << roomy;
  const std::string tight = plan_report(c, 1, 1024.0, &fits);
  EXPECT_FALSE(fits);
  EXPECT_NE(tight.find("does not fit: the largest rank needs "), std::string::npos) << tight;
  EXPECT_NE(tight.find("than the 1.0 KiB a rank has"), std::string::npos) << tight;
  fits = false;
  EXPECT_EQ(plan_report(c, 1).find("fits"), std::string::npos);  // no bound, no verdict
}

// --json: the text's figures as an object, one entry per pipeline stage and tensor-parallel rank.
TEST(PlanCompute, JsonHoldsTheTextsFigures) {
  const Config c = load_config_string(kMinimal, {"parallel_config.model_parallel=2", "parallel_config.pipeline_stage=2",
                                                 "parallel_config.micro_batch_num=2"});
  nlohmann::json j;
  bool fits = true;
  const std::string text = plan_report(c, 4, 1024.0, &fits, &j);
  ASSERT_EQ(j.at("ranks").size(), 4u);  // 2 stages x 2 tensor-parallel ranks
  double largest = 0;
  for (const auto& r : j.at("ranks")) {
    const double parts = r.at("parameters").get<double>() + r.at("gradients").get<double>() +
                         r.at("optimizer_state").get<double>() + r.at("weight_copy").get<double>() +
                         r.at("activations").get<double>() + r.at("checkpoint_snapshot").get<double>() +
                         r.at("frozen_base").get<double>();
    EXPECT_DOUBLE_EQ(parts, r.at("total").get<double>());
    largest = std::max(largest, r.at("total").get<double>());
  }
  EXPECT_EQ(j.at("largest_rank_bytes").get<double>(), largest);
  EXPECT_NEAR(j.at("flops_per_step").get<double>() / 1e12, tflop_of(text, "step"), 1e-3 * tflop_of(text, "step"));
  EXPECT_EQ(j.at("fits").get<bool>(), fits);
  EXPECT_FALSE(fits);
  EXPECT_EQ(j.at("world_size").get<int>(), 4);
  EXPECT_EQ(j.at("layout").at("pipeline_stage").get<int>(), 2);
}

}  // namespace
}  // namespace gf
