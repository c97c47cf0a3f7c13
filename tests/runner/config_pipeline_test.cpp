// The config side of pipeline parallelism: each pipeline key reaches its field (the key alone
// changes the Settings), the layers of each stage are resolved for every config, what means nothing
// is said once, and every config that cannot run is refused before any work with a message naming
// the keys and a value that works (which then passes). MindFormers' own pipeline files load.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/layout_check.h"
#include "runner/report/plan.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::error_of;
using config_test::kMinimal;
using config_test::kMinimalLlama;
using V = std::vector<int64_t>;

const std::string kMC = "model.model_config.";
const std::string kPC = "parallel_config.";
const std::string kSched = "parallel.pipeline_config.pipeline_scheduler=";
const std::string kInterleave = "parallel.pipeline_config.pipeline_interleave=True";

// The minimal GPT-2 and Llama with 8 layers.
const std::string kModels[] = {kMinimal, kMinimalLlama};
std::vector<std::string> with(std::vector<std::string> sets) {
  sets.insert(sets.begin(), kMC + "num_layers=8");
  return sets;
}

bool has_warning(const Config& c, const std::string& needle) {
  return std::any_of(c.warnings.begin(), c.warnings.end(), [&](const std::string& w) { return w.find(needle) != std::string::npos; });
}
int count_warnings(const Config& c, const std::string& needle) {
  return static_cast<int>(std::count_if(c.warnings.begin(), c.warnings.end(),
                                        [&](const std::string& w) { return w.find(needle) != std::string::npos; }));
}

// The config-level layout problems of a config that loads, one per line ("" when it can run).
std::string problems(const std::string& yaml, const std::vector<std::string>& sets) {
  std::string all;
  for (const auto& p : config_layout_problems(load_config_string(yaml, sets))) all += p + "\n";
  return all;
}

bool same(const Config& a, const Config& b) { return static_cast<const Settings&>(a) == static_cast<const Settings&>(b); }

TEST(ConfigPipeline, OneStageHoldsEveryLayer) {
  for (const auto& yaml : kModels) {
    const Config c = load_config_string(yaml, with({}));
    EXPECT_EQ(c.parallel.pipeline_stage, 1);
    EXPECT_EQ(c.parallel.pipeline_chunks, 1);
    EXPECT_EQ(pipeline::scheduler_name(c.parallel.pipeline_scheduler), "1f1b");
    EXPECT_EQ(c.parallel.stage_layers, V({8}));
    EXPECT_EQ(c.parallel.layer_offset, LayerOffset{});
    EXPECT_EQ(c.gradient_accumulation_steps, 1);
    EXPECT_TRUE(c.warnings.empty());
  }
  EXPECT_EQ(load_config_string(kMinimal).parallel.stage_layers, V({2}));
}

TEST(ConfigPipeline, EachKeyReachesItsField) {
  for (const auto& yaml : kModels) {
    const Config base = load_config_string(yaml, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4"}));
    EXPECT_EQ(base.parallel.stage_layers, V({4, 4}));
    EXPECT_EQ(problems(yaml, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4"})), "");
    auto probe = [&](const std::string& set) {
      std::vector<std::string> sets = with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4"});
      sets.push_back(set);
      const Config c = load_config_string(yaml, sets);
      EXPECT_FALSE(same(c, base)) << set;
      EXPECT_TRUE(c.consumed.count(set.substr(0, set.find('=')))) << set;
      return c;
    };
    EXPECT_EQ(probe(kPC + "pipeline_stage=4").parallel.stage_layers, V({2, 2, 2, 2}));
    const Config m = probe(kPC + "micro_batch_num=8");
    EXPECT_EQ(m.parallel.micro_batch_num, 8);
    EXPECT_EQ(micro_batches_per_step(m), 8);
    EXPECT_EQ(probe("runner_config.gradient_accumulation_steps=3").gradient_accumulation_steps, 3);
    EXPECT_EQ(pipeline::scheduler_name(probe(kSched + "gpipe").parallel.pipeline_scheduler), "gpipe");
    EXPECT_EQ(pipeline::scheduler_name(probe(kSched + "zero_bubble_h1").parallel.pipeline_scheduler), "zero_bubble_h1");
    const Config off = probe(kMC + "offset=[1, -1]");
    EXPECT_EQ(off.parallel.layer_offset, LayerOffset::per_stage({1, -1}));
    EXPECT_EQ(off.parallel.stage_layers, V({5, 3}));
    EXPECT_EQ(probe(kMC + "offset=1").parallel.stage_layers, V({3, 5}));  // pp_dis = 9 // 2 = 4: layer i on (i + 1) // 4
    // The chunks take pipeline_interleave and pp_interleave_num together (next test; each alone is warned about).
  }
}

TEST(ConfigPipeline, InterleavingTakesBothKeysAndOneFOneBBecomesInterleaved) {
  for (const auto& yaml : kModels) {
    const Config c = load_config_string(yaml, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4", kInterleave,
                                                    kMC + "pp_interleave_num=2"}));
    EXPECT_EQ(c.parallel.pipeline_chunks, 2);
    EXPECT_EQ(pipeline::scheduler_name(c.parallel.pipeline_scheduler), "interleaved");
    EXPECT_EQ(c.parallel.stage_layers, V({2, 2, 2, 2}));  // virtual stage k = chunk x 2 + stage
    EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
    EXPECT_EQ(problems(yaml, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4", kInterleave,
                                  kMC + "pp_interleave_num=2"})), "");
    // The resolved config says what runs, and reads back to the same settings.
    const std::string dump = dump_resolved(c);
    EXPECT_NE(dump.find("pipeline_scheduler: interleaved"), std::string::npos);
    EXPECT_TRUE(same(load_config_string(dump), c));
    // Naming it interleaved says the same; a [chunk][stage] offset splits the virtual stages.
    const Config named = load_config_string(yaml, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4", kInterleave,
                                                        kMC + "pp_interleave_num=2", kSched + "Interleaved",
                                                        kMC + "offset=[[1, 0], [0, -1]]"}));
    EXPECT_EQ(pipeline::scheduler_name(named.parallel.pipeline_scheduler), "interleaved");
    EXPECT_EQ(named.parallel.stage_layers, V({3, 2, 2, 1}));
    EXPECT_EQ(named.parallel.layer_offset, LayerOffset::per_chunk_stage({{1, 0}, {0, -1}}));
  }
}

// ZB-V as MindFormers sets MindSpore's zero_bubble_v (pipeline_interleave, pp_interleave_num 2), or under torchtitan's
// name: the resolved config names it zero_bubble_v, and the layers are split by virtual stage, as interleaving's.
TEST(ConfigPipeline, ZeroBubbleVRunsTwoChunksPerStage) {
  for (const char* given : {"zero_bubble_v", "ZBVZeroBubble", "zbv"}) {
    const std::vector<std::string> sets = with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4", kInterleave,
                                                kMC + "pp_interleave_num=2", kSched + given});
    const Config c = load_config_string(kMinimalLlama, sets);
    EXPECT_EQ(pipeline::scheduler_name(c.parallel.pipeline_scheduler), "zero_bubble_v") << given;
    EXPECT_EQ(c.parallel.pipeline_chunks, 2) << given;
    EXPECT_EQ(static_cast<int64_t>(c.parallel.stage_layers.size()), 4) << given;
    EXPECT_TRUE(c.warnings.empty()) << given;
    EXPECT_EQ(problems(kMinimalLlama, sets), "") << given;
    EXPECT_NE(dump_resolved(c).find("pipeline_scheduler: zero_bubble_v"), std::string::npos) << given;
  }
}

TEST(ConfigPipeline, SchedulerNamesAreCaseInsensitiveWithAliases) {
  const std::pair<const char*, const char*> names[] = {
      {"1f1b", "1f1b"}, {"1F1B", "1f1b"}, {"gpipe", "gpipe"}, {"GPipe", "gpipe"}, {"zero_bubble_h1", "zero_bubble_h1"},
      {"ZBH1", "zero_bubble_h1"}, {"zb-h1", "zero_bubble_h1"}, {"zero_bubble", "zero_bubble_h1"}};
  for (auto [given, name] : names) {
    const Config c = load_config_string(kMinimal, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=2", kSched + given}));
    EXPECT_EQ(pipeline::scheduler_name(c.parallel.pipeline_scheduler), name) << given;
    EXPECT_TRUE(c.warnings.empty()) << given;
    EXPECT_TRUE(same(load_config_string(dump_resolved(c)), c)) << given;
  }
}

TEST(ConfigPipeline, SchedulesThatCannotRunAreRefusedByTheLoader) {
  const std::vector<std::string> pp2 = with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4"});
  auto error = [&](std::vector<std::string> extra) {
    std::vector<std::string> sets = pp2;
    sets.insert(sets.end(), extra.begin(), extra.end());
    return error_of(kMinimalLlama, sets);
  };
  for (const char* ms : {"seqpipe", "seqvpp", "seqsmartvpp"}) {
    const std::string e = error({kSched + ms});
    EXPECT_NE(e.find(std::string("--set parallel.pipeline_config.pipeline_scheduler=") + ms + ": MindSpore's " + ms +
                     " schedule is not built; gridformer schedules 1f1b (the default), gpipe, interleaved, zero_bubble_h1 "
                     "(or zbh1, zb-h1, zero_bubble), zero_bubble_v (or zbv, zb-v, ZBVZeroBubble; two model chunks per "
                     "stage)"), std::string::npos) << e;
  }
  // MindSpore's zero_bubble_v as MindFormers configures it: pipeline_interleave with pp_interleave_num 2.
  for (const std::string& chunks : {std::string("1"), std::string("3")}) {
    const std::string e = error({kSched + "zero_bubble_v", "parallel.pipeline_config.pipeline_interleave=True",
                                 "model.model_config.pp_interleave_num=" + chunks});
    EXPECT_NE(e.find("`parallel.pipeline_config.pipeline_scheduler: zero_bubble_v` runs two model chunks per stage, in "
                     "a V: set `parallel.pipeline_config.pipeline_interleave: True` and "
                     "`model.model_config.pp_interleave_num: 2` (got " + chunks + " chunk(s) per stage)"),
              std::string::npos) << e;
  }
  std::string e = error({kSched + "pipedream"});
  EXPECT_NE(e.find("pipeline_scheduler=pipedream: unknown pipeline schedule; expects 1f1b (the default), gpipe"),
            std::string::npos) << e;
  e = error({kSched + "interleaved"});
  EXPECT_NE(e.find("needs several model chunks per stage: set `parallel.pipeline_config.pipeline_interleave: True` and "
                   "`model.model_config.pp_interleave_num: 2` (or more), or use pipeline_scheduler: 1f1b"),
            std::string::npos) << e;
  for (const char* one : {"gpipe", "zbh1"}) {
    e = error({kSched + one, kInterleave, kMC + "pp_interleave_num=2"});
    EXPECT_NE(e.find(std::string("`parallel.pipeline_config.pipeline_scheduler: ") + one + "` runs one model chunk per "
                     "stage, but `parallel.pipeline_config.pipeline_interleave: True` and "
                     "`model.model_config.pp_interleave_num: 2` ask for 2: use pipeline_scheduler: interleaved"),
              std::string::npos) << e;
  }
  e = error({kMC + "pp_interleave_num=0"});
  EXPECT_NE(e.find("pp_interleave_num=0: must be >= 1"), std::string::npos) << e;
  EXPECT_NE(error({kMC + "offset=1.5"}).find("offset=1.5: expects an integer"), std::string::npos);
  for (const char* bad : {"offset=[a, b]", "offset=[1.5]", "offset={x: 1}", "offset=[[1, 0], 2]", "offset=[[[0]]]"}) {
    e = error({kMC + bad});
    EXPECT_NE(e.find("expects an int (MindFormers' default 0), a list of ints (one per pipeline stage"), std::string::npos)
        << bad << ": " << e;
  }
  // GPT-2's schema has the keys too.
  EXPECT_NE(error_of(kMinimal, {kMC + "offset=[a]"}).find("expects an int"), std::string::npos);
}

TEST(ConfigPipeline, WhatMeansNothingIsSaidOnce) {
  // micro_batch_num and the scheduler at one stage: MindFormers does nothing with them there.
  Config c = load_config_string(kMinimal, with({kPC + "micro_batch_num=4", kSched + "gpipe"}));
  EXPECT_EQ(count_warnings(c, "`parallel_config.micro_batch_num: 4` with `pipeline_stage: 1`"), 1);
  EXPECT_EQ(micro_batches_per_step(c), 1);
  EXPECT_TRUE(has_warning(c, "`parallel.pipeline_config.pipeline_scheduler: gpipe` with `parallel_config.pipeline_stage: 1`: "
                             "there is no pipeline to schedule; ignored"));
  // pp_interleave_num without pipeline_interleave: one chunk.
  c = load_config_string(kMinimalLlama, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=2", kMC + "pp_interleave_num=2"}));
  EXPECT_EQ(c.parallel.pipeline_chunks, 1);
  EXPECT_EQ(pipeline::scheduler_name(c.parallel.pipeline_scheduler), "1f1b");
  EXPECT_TRUE(has_warning(c, "`model.model_config.pp_interleave_num: 2` without `parallel.pipeline_config.pipeline_interleave: "
                             "True` means nothing"));
  // pipeline_interleave at one stage, or with one chunk.
  c = load_config_string(kMinimalLlama, with({kInterleave, kMC + "pp_interleave_num=2"}));
  EXPECT_EQ(c.parallel.pipeline_chunks, 1);
  EXPECT_EQ(c.parallel.stage_layers, V({8}));
  EXPECT_TRUE(has_warning(c, "`parallel.pipeline_config.pipeline_interleave: True` with `parallel_config.pipeline_stage: 1`: "
                             "one stage holds the whole model"));
  EXPECT_EQ(config_layout_problems(c).size(), 0u);
  c = load_config_string(kMinimalLlama, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=2", kInterleave}));
  EXPECT_EQ(c.parallel.pipeline_chunks, 1);
  EXPECT_TRUE(has_warning(c, "with `model.model_config.pp_interleave_num: 1`: one model chunk per stage, nothing to interleave"));
  // An offset at one stage.
  c = load_config_string(kMinimal, with({kMC + "offset=2"}));
  EXPECT_EQ(c.parallel.stage_layers, V({8}));
  EXPECT_TRUE(has_warning(c, "`model.model_config.offset: 2` with `parallel_config.pipeline_stage: 1`: one stage holds all 8 "
                             "layers, so there is nothing to move; ignored"));
  EXPECT_EQ(c.warnings.size(), 1u);
}

// Applies the fix a message names ("use KEY: VALUE" -> --set) and checks that the config then runs.
void expect_fix_works(const std::string& yaml, std::vector<std::string> sets, const std::string& key,
                      const std::string& value) {
  for (auto& s : sets)
    if (s.rfind(key + "=", 0) == 0) s = key + "=" + value;
  if (std::none_of(sets.begin(), sets.end(), [&](const std::string& s) { return s.rfind(key + "=", 0) == 0; }))
    sets.push_back(key + "=" + value);
  EXPECT_EQ(problems(yaml, sets), "") << key << "=" << value;
}

TEST(ConfigPipeline, LayoutRulesNameTheKeysAndAValueThatWorks) {
  for (const auto& yaml : kModels) {
    // More stages than layers (8): the largest that works.
    std::vector<std::string> sets = with({kPC + "pipeline_stage=16", kPC + "micro_batch_num=16"});
    std::string p = problems(yaml, sets);
    EXPECT_NE(p.find("`model.model_config.num_layers` (8) is fewer than the `parallel_config.pipeline_stage` (16) stages: "
                     "every stage needs at least one layer; use pipeline_stage: 8 or fewer"), std::string::npos) << p;
    EXPECT_EQ(load_config_string(yaml, sets).parallel.stage_layers, V{});  // no split: refused before any work
    expect_fix_works(yaml, sets, kPC + "pipeline_stage", "8");
    sets = with({kPC + "pipeline_stage=4", kPC + "micro_batch_num=4", kInterleave, kMC + "pp_interleave_num=4"});
    p = problems(yaml, sets);
    EXPECT_NE(p.find("is fewer than the 16 virtual stages (`parallel_config.pipeline_stage` 4 x 4 model chunks, "
                     "`model.model_config.pp_interleave_num`): every stage needs at least one layer; use pipeline_stage: 2 "
                     "or fewer, or pp_interleave_num: 2 or fewer"), std::string::npos) << p;
    expect_fix_works(yaml, sets, kMC + "pp_interleave_num", "2");

    // Fewer micro-batches than stages: MindFormers' rule.
    sets = with({kPC + "pipeline_stage=4"});
    p = problems(yaml, sets);
    EXPECT_NE(p.find("`parallel_config.micro_batch_num` (1) is less than `parallel_config.pipeline_stage` (4): every stage "
                     "needs a micro-batch of its own in flight; use micro_batch_num: 4 or more (global batch = batch_size x "
                     "data_parallel x micro_batch_num)"), std::string::npos) << p;
    expect_fix_works(yaml, sets, kPC + "micro_batch_num", "4");

    // The interleaved schedule: a multiple of the stages (Megatron's rule), the nearest one.
    sets = with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=5", kInterleave, kMC + "pp_interleave_num=2"});
    p = problems(yaml, sets);
    EXPECT_NE(p.find("`parallel_config.micro_batch_num` (5) is not a multiple of `parallel_config.pipeline_stage` (2), which "
                     "the interleaved schedule (`parallel.pipeline_config.pipeline_scheduler`, 2 model chunks per stage) "
                     "needs, as Megatron's does; use micro_batch_num: 4"), std::string::npos) << p;
    expect_fix_works(yaml, sets, kPC + "micro_batch_num", "4");
    sets = with({kPC + "pipeline_stage=4", kPC + "micro_batch_num=7", kInterleave, kMC + "pp_interleave_num=2"});
    EXPECT_NE(problems(yaml, sets).find("use micro_batch_num: 8"), std::string::npos);
    EXPECT_EQ(problems(yaml, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=5"})), "");  // 1F1B takes any >= p

    // Accumulation: micro_batch_num accumulates under a pipeline.
    sets = with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4", "runner_config.gradient_accumulation_steps=2"});
    p = problems(yaml, sets);
    EXPECT_NE(p.find("`runner_config.gradient_accumulation_steps: 2` with `parallel_config.pipeline_stage: 2`: under pipeline "
                     "parallelism the micro-batches accumulate (parallel_config.micro_batch_num per step); set "
                     "gradient_accumulation_steps: 1 and micro_batch_num: 8 for the same global batch"),
              std::string::npos) << p;
    sets.push_back(kPC + "micro_batch_num=8");
    expect_fix_works(yaml, sets, "runner_config.gradient_accumulation_steps", "1");

    // Zero bubble defers the weight pass past what recompute keeps.
    for (const char* rc : {"recompute", "select_recompute"}) {
      sets = with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4", kSched + "zbh1",
                   std::string("recompute_config.") + rc + "=True"});
      p = problems(yaml, sets);
      EXPECT_NE(p.find(std::string("`parallel.pipeline_config.pipeline_scheduler: zero_bubble_h1` with `recompute_config.") +
                       rc + ": True`: the deferred weight pass reads activations that recompute overwrites; use "
                       "pipeline_scheduler: 1f1b with recompute, or turn recompute off"), std::string::npos) << p;
      expect_fix_works(yaml, sets, "parallel.pipeline_config.pipeline_scheduler", "1f1b");
      expect_fix_works(yaml, sets, std::string("recompute_config.") + rc, "False");
    }
    EXPECT_EQ(problems(yaml, with({kSched + "zbh1", "recompute_config.recompute=True"})), "");  // one stage: no pipeline

    // An offset that does not split: partition_layers' message (parallel/pipeline/partition.h).
    sets = with({kPC + "pipeline_stage=4", kPC + "micro_batch_num=4", kMC + "offset=[1, 1, 0]"});
    p = problems(yaml, sets);
    EXPECT_NE(p.find("`model.model_config.offset: [1, 1, 0]` has 3 entries, but `parallel_config.pipeline_stage` is 4: "
                     "one offset per stage; e.g. offset: [0, 0, 0, 0] (layers [2, 2, 2, 2]), or offset: 0"),
              std::string::npos) << p;
    EXPECT_EQ(load_config_string(yaml, sets).parallel.stage_layers, V{});
    expect_fix_works(yaml, sets, kMC + "offset", "[0, 0, 0, 0]");
    sets = with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4", kMC + "offset=[2, -1]"});
    p = problems(yaml, sets);
    EXPECT_NE(p.find("must sum to num_layers % 2 = 0 (they sum to 1)"), std::string::npos) << p;
    sets = with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4", kMC + "offset=-1"});
    EXPECT_NE(problems(yaml, sets).find("so an int offset must be >= 0"), std::string::npos);
    EXPECT_NE(problems(yaml, with({kPC + "pipeline_stage=0"})).find("`parallel_config.pipeline_stage: 0`: must be >= 1"),
              std::string::npos);
    // A broken offset at one stage is refused too: it cannot split the layers either.
    EXPECT_NE(problems(yaml, with({kMC + "offset=[1]"})).find("(they sum to 1)"), std::string::npos);
  }
}

TEST(ConfigPipeline, TheRanksSeeTheSameRulesAndASuggestionWithStages) {
  const Config c = load_config_string(kMinimal, with({kPC + "pipeline_stage=2", kPC + "data_parallel=2"}));
  const std::string msg = layout_error_message(c, 8);
  EXPECT_NE(msg.find("`parallel_config.data_parallel` (2) x `model_parallel` (1) x `pipeline_stage` (2) = 4, but 8 rank(s)"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("`parallel_config.micro_batch_num` (1) is less than `parallel_config.pipeline_stage` (2)"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("a layout that fits 8 rank(s): parallel_config: {data_parallel: 4, model_parallel: 1, pipeline_stage: 2}"),
            std::string::npos) << msg;
  EXPECT_EQ(layout_error_message(load_config_string(kMinimal, with({kPC + "pipeline_stage=2", kPC + "data_parallel=2",
                                                                    kPC + "micro_batch_num=2"})), 4), "");
}

TEST(ConfigPipeline, GlobalBatchIsCountedAsMindFormersCountsIt) {
  Config c = load_config_string(kMinimal, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=8", kPC + "data_parallel=2",
                                                "runner_config.batch_size=3"}));
  EXPECT_EQ(micro_batches_per_step(c), 8);
  EXPECT_EQ(global_batch_size(c), 3 * 2 * 8);
  c = load_config_string(kMinimal, with({"runner_config.gradient_accumulation_steps=4", kPC + "data_parallel=2",
                                         "runner_config.batch_size=3", kPC + "micro_batch_num=16"}));
  EXPECT_EQ(micro_batches_per_step(c), 4);
  EXPECT_EQ(global_batch_size(c), 3 * 2 * 4);
}

TEST(ConfigPipeline, PlanSaysThePipelineAndTheAccumulation) {
  const Config c = load_config_string(kMinimal, with({kPC + "pipeline_stage=2", kPC + "micro_batch_num=4",
                                                      kMC + "offset=[1, -1]"}));
  std::string plan = plan_report(c, 2);
  EXPECT_NE(plan.find("pipeline: 2 stages, layers per stage [5, 3], schedule 1f1b, 4 micro-batches per step (global batch "
                      "4 samples)"), std::string::npos) << plan;
  // Each stage is sized for its own layers: the first holds the embedding and layers [0, 5) in 2 slots (1F1B's
  // first stage keeps min(stages, micro-batches) micro-batches live), the second [5, 8) in 1.
  EXPECT_NE(plan.find("pipeline stage 0: layers [0, 5) x 2 slot(s)"), std::string::npos) << plan;
  EXPECT_NE(plan.find("pipeline stage 1: layers [5, 8) x 1 slot(s)"), std::string::npos) << plan;
  plan = plan_report(load_config_string(kMinimal, {"runner_config.gradient_accumulation_steps=3"}), 1);
  EXPECT_NE(plan.find("gradient accumulation: 3 micro-batches of 1 per step per data-parallel rank (global batch 3 samples)"),
            std::string::npos) << plan;
}

std::string data(const std::string& f) { return std::string(GF_SOURCE_DIR) + "/tests/data/mindformers/" + f; }

// MindFormers' own files with pipeline_stage > 1, as written.
TEST(ConfigPipeline, MindFormersPipelineFilesLoadAsWritten) {
  // GPT-2 52B (r1.2): 64 layers over 16 stages, 64 micro-batches of 2 over data_parallel 8; recompute with 1F1B.
  Config c = load_config(data("r1.2/run_gpt2_52b.yaml"));
  EXPECT_EQ(c.parallel.pipeline_stage, 16);
  EXPECT_EQ(c.parallel.stage_layers, V(16, 4));
  EXPECT_EQ(pipeline::scheduler_name(c.parallel.pipeline_scheduler), "1f1b");
  EXPECT_EQ(global_batch_size(c), 2 * 8 * 64);
  EXPECT_EQ(layout_error_message(c, 8 * 16), "");
  EXPECT_FALSE(has_warning(c, "micro_batch_num"));
  // Llama 2 70B (r1.2): 80 layers over 8 stages of 10, on 2 x 4 x 8 ranks.
  c = load_config(data("r1.2/pretrain_llama2_70b.yaml"));
  EXPECT_EQ(c.parallel.stage_layers, V(8, 10));
  EXPECT_EQ(c.parallel.micro_batch_num, 128);
  EXPECT_EQ(layout_error_message(c, 2 * 4 * 8), "");
  // Mixtral (r1.3, r1.1): 32 layers over 2 stages, 16 micro-batches, experts over data_parallel 8.
  for (const char* f : {"r1.3/pretrain_mixtral-8x7b.yaml", "r1.1/finetune_mixtral-8x7b.yaml"}) {
    c = load_config(data(f));
    EXPECT_EQ(c.parallel.stage_layers, V({16, 16})) << f;
    EXPECT_EQ(c.parallel.expert_parallel, 8) << f;
    EXPECT_EQ(layout_error_message(c, 16), "") << f;
  }
  // Llama 2 7B (r1.3): gradient_accumulation_steps 8 at one stage.
  c = load_config(data("r1.3/pretrain_llama2_7b.yaml"));
  EXPECT_EQ(c.gradient_accumulation_steps, 8);
  EXPECT_EQ(micro_batches_per_step(c), 8);
  EXPECT_EQ(global_batch_size(c), 1 * 8 * 8);
  // Yi 34B (r1.3 research/yi): a LlamaConfig with offset [-1, 1, 1, -1]: 60 // 4 = 15, so [14, 16, 16, 14].
  c = load_config(data("r1.3/pretrain_yi_34b.yaml"), {"optimizer.type=AdamWeightDecay"});
  EXPECT_EQ(c.parallel.layer_offset, LayerOffset::per_stage({-1, 1, 1, -1}));
  EXPECT_EQ(c.parallel.stage_layers, V({14, 16, 16, 14}));
  EXPECT_EQ(layout_error_message(c, 1 * 4 * 4), "");
}

}  // namespace
}  // namespace gf
