// The step-time model's pipeline (runner/report/step_time.h): each virtual stage's work in Megatron's FLOPs, split
// into forward, input-gradient and weight-gradient passes, and the schedule's bubble simulated with it.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "models/registry.h"
#include "models/transformer_lm.h"
#include "runner/config/config.h"
#include "runner/report/step_time.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::kMinimal;
using config_test::kMinimalLlama;

Config load(const std::string& yaml, std::vector<std::string> sets) { return load_config_string(yaml, sets); }

// The stages' passes add up to the whole model's FLOPs of one micro-batch (TransformerLM::model_flops), for GPT-2,
// Llama and a Mixtral whose first layer is dense, whatever the split.
TEST(PricedBubble, TheStagesWorkIsTheModelsFlops) {
  const std::string moe = std::string(kMinimalLlama) +
                          "moe_config: {expert_num: 4, num_experts_chosen: 2, first_k_dense_replace: 1}\n";
  for (const std::string& yaml : {std::string(kMinimal), std::string(kMinimalLlama), moe})
    for (const std::vector<int64_t>& split : {std::vector<int64_t>{8}, {3, 5}, {2, 2, 2, 2}, {1, 2, 1, 1, 1, 2}}) {
      const Config c = load(yaml, {"model.model_config.num_layers=8", "runner_config.batch_size=3"});
      const std::vector<pipeline::Costs> costs = pipeline_stage_costs(c, split);
      ASSERT_EQ(costs.size(), split.size());
      double sum = 0;
      for (const pipeline::Costs& k : costs) {
        sum += k.f + k.b + k.w;
        EXPECT_GT(k.b, k.f);  // the input gradient runs the attention's products twice
        EXPECT_LT(k.w, k.f);  // the weight gradient has none of them
      }
      const TransformerSpec spec = find_model(c.model.arch, c.model.type).spec(c.model);
      EXPECT_DOUBLE_EQ(sum, TransformerLM::model_flops(spec, 3)) << yaml;
      // The head is on the last virtual stage alone: equal layers, a dearer last stage.
      if (split.size() == 4) {
        EXPECT_DOUBLE_EQ(costs[0].f, costs[1].f);
        EXPECT_GT(costs[3].w, costs[2].w);
      }
    }
}

// A head dearer than a layer leaves the first stages idle: the priced bubble is above the closed form's for equal
// stages, for every built-in schedule; the bubble is the simulator's over these very costs.
TEST(PricedBubble, AHeavyHeadIdlesTheOtherStages) {
  // GPT-2 of width 64 with a 50257-token vocabulary: the head's products are about 16 layers'.
  for (const char* sched : {"1f1b", "gpipe", "zero_bubble_h1", "zero_bubble_v"}) {
    std::vector<std::string> sets = {"model.model_config.num_layers=8", "model.model_config.vocab_size=50257",
                                     "parallel_config.pipeline_stage=2", "parallel_config.micro_batch_num=4",
                                     std::string("parallel.pipeline_config.pipeline_scheduler=") + sched};
    const bool v = std::string(sched) == "zero_bubble_v";
    if (v) {
      sets.push_back("parallel.pipeline_config.pipeline_interleave=True");
      sets.push_back("model.model_config.pp_interleave_num=2");
    }
    const Config c = load(kMinimal, sets);
    const pipeline::Scheduler s = c.parallel.pipeline_scheduler;
    const pipeline::Shape shape = pipeline::schedule_shape(s, 2, 4, v ? 2 : 1);
    const pipeline::StageLists lists = pipeline::all_stage_actions(s, shape);
    const double priced = priced_bubble(c, lists, shape);
    EXPECT_GT(priced, pipeline::analytic_bubble(s, shape)) << sched;
    const pipeline::Simulation sim = pipeline::simulate(lists, shape, pipeline_stage_costs(c, c.parallel.stage_layers));
    ASSERT_TRUE(sim.ok) << sim.error;
    EXPECT_DOUBLE_EQ(priced, sim.bubble_fraction) << sched;
  }
}

}  // namespace
}  // namespace gf
