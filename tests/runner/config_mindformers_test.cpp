// MindFormers r0.8-r1.3 configs load as MindFormers means them: the files in tests/data/mindformers
// resolve with warnings only, or with a named refusal of what is not built (then the override of
// that key loads); and the keys whose meaning was read from MindFormers' source behave that way.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "runner/config/config.h"
#include "tests/runner/config_test_util.h"
#include "runner/config/layout_check.h"

namespace gf {
namespace {

using config_test::error_of;
using config_test::kMinimal;

using config_test::has_warning;

std::string data(const std::string& f) { return config_test::mindformers_data(f); }

int count_warnings(const Config& c, const std::string& needle) {
  return static_cast<int>(std::count_if(c.warnings.begin(), c.warnings.end(),
                                        [&](const std::string& w) { return w.find(needle) != std::string::npos; }));
}

// The file, what it refuses as it is (empty: nothing), and the overrides that make it load.
using config_test::MindFormersFile;

const MindFormersFile kFiles[] = {
    {"run_gpt2.yaml", "", {}},
    {"run_gpt2_13b.yaml", "", {}},
    {"r1.1/run_gpt2_xl.yaml", "", {}},
    {"r1.2/run_gpt2_52b.yaml", "", {}},
    {"r1.3/pretrain_gpt2_13b_fp16.yaml", "", {}},
    {"r1.3/finetune_gpt2_small_fp16.yaml", "", {}},
    {"r1.3/pretrain_llama2_7b_common.yaml", "", {}},
    {"r1.3/pretrain_mixtral-8x7b_common.yaml", "", {}},
    {"r1.1/finetune_mixtral-8x7b_common.yaml", "", {}},
};

TEST(MindFormersConfigs, LoadWithWarningsOnlyOrANamedRefusalThenWithTheOverride) {
  for (const auto& f : kFiles) config_test::load_mindformers_file(f);
}

TEST(MindFormersConfigs, R13FilesReadAsMindFormersMeansThem) {
  const Config big = load_config(data("r1.3/pretrain_gpt2_13b_fp16.yaml"));
  EXPECT_EQ(big.model.hidden_size, 5120);
  EXPECT_EQ(big.parallel.data_parallel, 4);
  EXPECT_EQ(big.parallel.model_parallel, 8);
  EXPECT_EQ(big.compute_dtype, ComputeDtype::kFloat16);
  EXPECT_TRUE(big.loss_scale.dynamic);
  EXPECT_TRUE(has_warning(big, "`context.jit_config.jit_level: O2`"));
  EXPECT_TRUE(big.checkpoint.enabled);  // its CheckpointMonitor saves every 500 steps
  EXPECT_EQ(big.checkpoint.prefix, "gpt2-13b");
  EXPECT_EQ(big.checkpoint.save_steps, 500);
  EXPECT_EQ(count_warnings(big, "integrated_save: False`: ignored"), 1);
  // The dataset's batch_size is replaced by runner_config.batch_size, as MindFormers does.
  EXPECT_EQ(big.batch_size, 2);
  EXPECT_TRUE(has_warning(big, "`train_dataset.batch_size: 8` is replaced by runner_config.batch_size (2)"));

  const Config small = load_config(data("r1.3/finetune_gpt2_small_fp16.yaml"));
  EXPECT_EQ(small.lr.type, "cosine");  // CosineWithWarmUpLR
  EXPECT_EQ(small.optimizer_type, OptimizerType::kFP32StateAdamWeightDecay);

  // Its moe_config on GPT-2 blocks: a GPT-2 MoE of 8 experts, top-2, over expert_parallel 8 of data_parallel 8.
  const Config mixtral = load_config(data("r1.3/pretrain_mixtral-8x7b_common.yaml"), {"parallel_config.pipeline_stage=1"});
  EXPECT_EQ(mixtral.optimizer_type, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(mixtral.adamw.beta1, 0.9);  // betas: [0.9, 0.95]
  EXPECT_DOUBLE_EQ(mixtral.adamw.beta2, 0.95);
  EXPECT_EQ(mixtral.model.moe.expert_num, 8);
  EXPECT_EQ(mixtral.model.moe.num_experts_chosen, 2);
  EXPECT_EQ(mixtral.parallel.expert_parallel, 8);
  EXPECT_EQ(layout_error_message(mixtral, 8), "");
  EXPECT_TRUE(has_warning(mixtral, "`moe_config.enable_sdrop: True`"));
  EXPECT_TRUE(has_warning(mixtral, "`parallel_config.micro_batch_num: 16` with `pipeline_stage: 1`"));
  EXPECT_EQ(mixtral.model_name, "mixtral-8x7b");

  // r1.1's Mixtral finetune gives the optimizer 3e-4 and the lr_schedule 1e-5: MindFormers trains with the latter.
  const Config ft = load_config(data("r1.1/finetune_mixtral-8x7b_common.yaml"), {"parallel_config.pipeline_stage=1"});
  EXPECT_DOUBLE_EQ(ft.lr.learning_rate, 1e-5);
  EXPECT_TRUE(has_warning(ft, "`optimizer.learning_rate: 3.e-4` is not used: lr_schedule sets the learning rate"));
}

TEST(MindFormersKeys, OptimizerLearningRateIsTheRateOnlyWithoutAnLrSchedule) {
  Config c = load_config_string(kMinimal + "optimizer: {type: AdamW, learning_rate: 0.002}\n");
  EXPECT_EQ(c.lr.type, "constant");
  EXPECT_DOUBLE_EQ(c.lr.learning_rate, 0.002);
  EXPECT_TRUE(c.warnings.empty());
  const Config again = load_config_string(dump_resolved(c));  // the resolved config says what runs
  EXPECT_TRUE(static_cast<const Settings&>(again) == static_cast<const Settings&>(c));
  EXPECT_TRUE(again.warnings.empty());
  c = load_config_string(kMinimal + "optimizer: {learning_rate: 0.002}\nlr_schedule: {type: cosine, learning_rate: 0.001}\n");
  EXPECT_DOUBLE_EQ(c.lr.learning_rate, 0.001);
  EXPECT_TRUE(has_warning(c, "`optimizer.learning_rate: 0.002` is not used"));
  c = load_config_string(kMinimal + "optimizer: {learning_rate: 0.001}\nlr_schedule: {type: cosine, learning_rate: 0.001}\n");
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_NE(error_of(kMinimal, {"optimizer.learning_rate=fast"}).find("expects a number"), std::string::npos);
}

TEST(MindFormersKeys, BetasAreBeta1AndBeta2) {
  Config c = load_config_string(kMinimal, {"optimizer.type=AdamW", "optimizer.betas=[0.8, 0.95]"});
  EXPECT_DOUBLE_EQ(c.adamw.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.adamw.beta2, 0.95);
  std::string e = error_of(kMinimal, {"optimizer.betas=[0.8, 0.95]", "optimizer.beta1=0.7"});
  EXPECT_NE(e.find("and `optimizer.beta1: 0.7` disagree; give one of them"), std::string::npos) << e;
  EXPECT_EQ(error_of(kMinimal, {"optimizer.betas=[0.8, 0.95]", "optimizer.beta1=0.8"}), "");
  EXPECT_NE(error_of(kMinimal, {"optimizer.betas=[0.8]"}).find("expects [beta1, beta2]"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"optimizer.betas=[0.8, 1.5]"}).find("must be in (0, 1)"), std::string::npos);
}

TEST(MindFormersKeys, GradientAccumulationStepsAccumulatesMicroBatches) {
  const Config c = load_config_string(kMinimal, {"runner_config.gradient_accumulation_steps=4", "runner_config.batch_size=2",
                                                 "parallel_config.data_parallel=2"});
  EXPECT_EQ(c.gradient_accumulation_steps, 4);
  EXPECT_EQ(micro_batches_per_step(c), 4);
  EXPECT_EQ(global_batch_size(c), 2 * 2 * 4);
  EXPECT_TRUE(c.warnings.empty());
  const std::string e = error_of(kMinimal, {"runner_config.gradient_accumulation_steps=0"});
  EXPECT_NE(e.find("--set runner_config.gradient_accumulation_steps=0: must be >= 1"), std::string::npos) << e;
}

TEST(MindFormersKeys, PipelineRulesAndExpertParallelismAreCheckedWhateverTheRankCount) {
  const Config c = load_config_string(kMinimal, {"parallel_config.expert_parallel=2", "parallel_config.pipeline_stage=2"});
  const auto u = config_layout_problems(c);
  ASSERT_EQ(u.size(), 2u);
  EXPECT_NE(u[0].find("`parallel_config.micro_batch_num` (1) is less than `parallel_config.pipeline_stage` (2)"),
            std::string::npos) << u[0];
  EXPECT_EQ(pipeline_problems(c).size(), 1u);
  EXPECT_NE(u[1].find("`parallel_config.expert_parallel: 2` with `moe_config.expert_num: 1`: expert parallelism splits "
                      "the experts of MoE layers, and this model has none"), std::string::npos) << u[1];
  const auto all = layout_problems(c, 4);
  EXPECT_NE(std::find(all.begin(), all.end(), u[1]), all.end());
  // micro_batch_num only splits the batch for a pipeline: MindFormers ignores it with one stage, and says so here.
  const Config m = load_config_string(kMinimal, {"parallel_config.micro_batch_num=4"});
  EXPECT_TRUE(has_warning(m, "`parallel_config.micro_batch_num: 4` with `pipeline_stage: 1`"));
}

TEST(MindFormersKeys, UseParallelFalseWithSeveralRanksIsSaid) {
  const Config c = load_config_string(kMinimal, {"use_parallel=False"});
  EXPECT_FALSE(c.use_parallel);
  EXPECT_TRUE(layout_warnings(c, 1).empty());
  const auto w = layout_warnings(c, 2);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("`use_parallel: False`, but 2 ranks are running: they train together"), std::string::npos) << w[0];
  EXPECT_TRUE(layout_warnings(load_config_string(kMinimal), 2).empty());
}

TEST(MindFormersKeys, CheckpointMonitorReadsItsKeys) {
  for (const char* type : {"CheckpointMonitor", "CheckpointMointor"}) {
    const Config c = load_config_string(
        kMinimal, {std::string("callbacks=[{type: MFLossMonitor}, {type: ") + type +
                   ", prefix: gpt2, save_checkpoint_steps: 500, keep_checkpoint_max: 3, integrated_save: False, "
                   "async_save: True, save_network_params: True, save_trainable_params: False}, {type: ObsMonitor}]"});
    EXPECT_TRUE(c.checkpoint.enabled) << type;
    EXPECT_EQ(c.checkpoint.prefix, "gpt2");
    EXPECT_EQ(c.checkpoint.save_steps, 500);
    EXPECT_EQ(c.checkpoint.keep_max, 3);
    EXPECT_TRUE(c.checkpoint.async_save);
    // The three keys that change nothing here (a checkpoint's boxes load under any layout) are said so, one each.
    EXPECT_EQ(c.warnings.size(), 3u) << type;
    for (const char* key : {"integrated_save: False", "save_network_params: True", "save_trainable_params: False"})
      EXPECT_TRUE(has_warning(c, std::string(key) + "`: ignored: a checkpoint holds every tensor's slices")) << key;
  }
  EXPECT_NE(error_of(kMinimal, {"callbacks=[{type: CheckpointMonitor, save_checkpoint_steps: 0}]"})
                .find("`callbacks.0.save_checkpoint_steps: 0`: must be > 0"),
            std::string::npos);
  const std::string e = error_of(kMinimal, {"callbacks=[{type: MFLossMonitor, prefix: x}]"});
  EXPECT_NE(e.find("`callbacks.0.prefix`: MFLossMonitor takes no key prefix (its keys: per_print_times)"), std::string::npos) << e;
}

// A weights file that exists (its content is read only when training starts).
std::string weights(const std::string& name) {
  const std::string p = std::string(GF_BINARY_DIR) + "/" + name;
  std::ofstream(p) << "";
  return p;
}

TEST(MindFormersKeys, WeightsAreCheckedAtLoadTime) {
  EXPECT_EQ(error_of(kMinimal, {"load_checkpoint=/x/y"}), "1 problem(s) in the --set overrides:\n  --set load_checkpoint=/x/y: no such file or directory");
  std::string e = error_of(kMinimal + "load_checkpoint: /x/y.safetensors\n");
  EXPECT_NE(e.find("`load_checkpoint: /x/y.safetensors`: no such file or directory"), std::string::npos) << e;
  e = error_of(kMinimal + "load_checkpoint: gpt2\n");
  EXPECT_NE(e.find("`load_checkpoint: gpt2`: no hub at run time: convert/download weights"), std::string::npos) << e;
  const std::string ckpt = weights("probe_model.ckpt");  // MindSpore's format, read when training starts
  EXPECT_EQ(load_config_string(kMinimal, {"load_checkpoint=" + ckpt}).load_checkpoint, ckpt);
  const std::string w = weights("probe_model.safetensors");
  EXPECT_EQ(load_config_string(kMinimal, {"load_checkpoint=" + w}).load_checkpoint, w);
}

TEST(MindFormersKeys, CheckpointNameOrPathIsNotLoadedForTrainingAsInMindFormers) {
  const std::string w = weights("probe_named.safetensors"), other = weights("probe_other.safetensors");
  const std::string k = "model.model_config.checkpoint_name_or_path=";
  // train/finetune: run_mindformer.py drops it; the warning says to use load_checkpoint.
  Config c = load_config_string(kMinimal, {k + "gpt2"});
  EXPECT_EQ(c.load_checkpoint, "");
  EXPECT_TRUE(has_warning(c, "`model.model_config.checkpoint_name_or_path: gpt2` is not loaded for run_mode train"));
  c = load_config_string(kMinimal, {"run_mode=finetune", k + w});
  EXPECT_EQ(c.load_checkpoint, "");
  // eval: a path loads like load_checkpoint; a hub name is refused; a given load_checkpoint wins, said.
  c = load_config_string(kMinimal, {"run_mode=eval", k + w});
  EXPECT_EQ(c.load_checkpoint, w);
  EXPECT_TRUE(c.warnings.empty());
  std::string e = error_of(kMinimal, {"run_mode=eval", k + "gpt2"});
  EXPECT_NE(e.find("no hub at run time: convert/download weights (a Hugging Face GPT-2 .safetensors or its directory) and "
                   "give a path in load_checkpoint"), std::string::npos) << e;
  c = load_config_string(kMinimal, {"run_mode=eval", k + w, "load_checkpoint=" + other});
  EXPECT_EQ(c.load_checkpoint, other);
  EXPECT_TRUE(has_warning(c, "`model.model_config.checkpoint_name_or_path: " + w + "` is not loaded: `load_checkpoint: " +
                                 other + "` gives the weights (MindFormers lets load_checkpoint win)"));
  // MindFormers' predict files name a hub model (`gpt2`): with load_checkpoint given it is not looked up.
  c = load_config_string(kMinimal, {"run_mode=eval", k + "gpt2", "load_checkpoint=" + other});
  EXPECT_EQ(c.load_checkpoint, other);
  EXPECT_TRUE(has_warning(c, "`model.model_config.checkpoint_name_or_path: gpt2` is not loaded"));
  EXPECT_EQ(load_config_string(kMinimal, {"run_mode=eval", k + w, "load_checkpoint=" + w}).load_checkpoint, w);
  EXPECT_EQ(error_of(kMinimal, {"run_mode=eval", k + "\"\""}), "");  // empty: nothing
}

TEST(MindFormersKeys, DatasetCopiesAndBatchSizesFollowMindFormers) {
  // train_dataset_task.dataset_config is the alias *train_dataset in MindFormers' files: silent; if it differs, said.
  const std::string aliased = kMinimal + "train_dataset: &td\n  data_loader: {type: RandomTokens}\n  batch_size: 1\n"
                              "train_dataset_task: {type: CausalLanguageModelDataset, dataset_config: *td}\n";
  Config c = load_config_string(aliased, {"train_dataset.data_loader.num_samples=8"});
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_TRUE(load_config_string(dump_resolved(c)).warnings.empty());
  c = load_config_string(kMinimal, {"train_dataset_task.dataset_config={data_loader: {type: RandomTokens}}"});
  EXPECT_TRUE(has_warning(c, "`train_dataset_task.dataset_config` differs from `train_dataset`"));
  c = load_config_string(kMinimal, {"runner_config.batch_size=4", "train_dataset.batch_size=6"});
  EXPECT_EQ(c.batch_size, 4);
  EXPECT_TRUE(has_warning(c, "`train_dataset.batch_size: 6` is replaced by runner_config.batch_size (4)"));
  EXPECT_NE(error_of(kMinimal, {"train_dataset_task.type=TextClassificationDataset"}).find("CausalLanguageModelDataset"),
            std::string::npos);
}

TEST(MindFormersKeys, UnbuiltFeaturesAreRefusedWithWhatToDo) {
  const std::pair<const char*, const char*> cases[] = {
      {"micro_batch_interleave_num=2", "set runner_config.batch_size to that product"},
      {"layer_scale=True", "layer-wise learning-rate decay (layer_decay) is not built yet"},
      {"lr_scale=True", "lr_scale_factor yourself"},
      {"parallel.auto_pipeline=True", "automatic search for pipeline stages is not built; set parallel_config.pipeline_stage"},
      {"model.model_config.pet_config={pet_type: lora, lora_rank: 8, lora_dropout: 0.0, target_modules: '.*wq'}",
       "MindFormers' names are the layers' own (wq, wk, wv, wo, w1, w2, w3; Llama family only)"},
      {"recompute_config.select_recompute=[4, x]", "a list holds a number of layers (>= 0) per pipeline stage"},
      {"trainer.type=TextClassificationTrainer", "causal language models only"},
      {"runner_wrapper.type=MFPipelineWithLossScaleCell", "registered: MFTrainOneStepCell"},
  };
  for (auto [set, fix] : cases) {
    const std::vector<std::string> sets = {set, "parallel.enable_parallel_optimizer=True", "parallel_config.data_parallel=4"};
    const std::string e = error_of(kMinimal, sets);
    EXPECT_NE(e.find(fix), std::string::npos) << set << ": " << e;
    EXPECT_NE(e.find(std::string("--set ") + set), std::string::npos) << set << ": " << e;
  }
  EXPECT_EQ(error_of(kMinimal, {"parallel.parallel_optimizer_config.optimizer_weight_shard_size=4",
                                "parallel.enable_parallel_optimizer=True", "parallel_config.data_parallel=4"}), "");
}

// Sharding: parallel.zero_stage (ours) beside MindFormers' enable_parallel_optimizer, and the shard group's
// size under MindSpore's name (optimizer_weight_shard_size) and SMP's (hybrid_shard_degree).
TEST(MindFormersKeys, ZeroStageAndShardGroupKeys) {
  EXPECT_EQ(load_config_string(kMinimal).parallel.zero_stage, 0);
  EXPECT_EQ(load_config_string(kMinimal, {"parallel.enable_parallel_optimizer=True"}).parallel.zero_stage, 1);
  EXPECT_EQ(load_config_string(kMinimal, {"parallel_config.optimizer_shard=True"}).parallel.zero_stage, 1);
  EXPECT_EQ(load_config_string(kMinimal, {"parallel.zero_stage=3"}).parallel.zero_stage, 3);
  EXPECT_EQ(load_config_string(kMinimal, {"parallel.zero_stage=2", "parallel.enable_parallel_optimizer=True"})
                .parallel.zero_stage, 2);
  EXPECT_NE(error_of(kMinimal, {"parallel.zero_stage=4"}).find("expects 0 (nothing sharded)"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"parallel.zero_stage=0", "parallel.enable_parallel_optimizer=True"}).find("drop one"),
            std::string::npos);
  const std::vector<std::string> dp4 = {"parallel_config.data_parallel=4", "parallel.zero_stage=3"};
  auto with = [&](std::string set) {
    std::vector<std::string> v = dp4;
    v.push_back(std::move(set));
    return v;
  };
  EXPECT_EQ(load_config_string(kMinimal, with("parallel_config.hybrid_shard_degree=2")).parallel.shard_degree, 2);
  EXPECT_EQ(load_config_string(kMinimal, with("parallel.parallel_optimizer_config.optimizer_weight_shard_size=2"))
                .parallel.shard_degree, 2);
  EXPECT_EQ(load_config_string(kMinimal, dp4).parallel.shard_degree, 0);
  std::vector<std::string> both = with("parallel_config.hybrid_shard_degree=2");
  both.push_back("parallel.parallel_optimizer_config.optimizer_weight_shard_size=4");
  EXPECT_NE(error_of(kMinimal, both).find("set one"), std::string::npos);
  // A size that does not divide the data-parallel group: refused with one that does.
  const std::vector<std::string> p = config_layout_problems(load_config_string(kMinimal, with("parallel_config.hybrid_shard_degree=3")));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("does not divide the data-parallel group"), std::string::npos) << p[0];
  EXPECT_NE(p[0].find("use 2"), std::string::npos) << p[0];
}

// MindFormers' per-stage list (its pretrain_llama2_70b_bf16_32p.yaml: select_recompute: [8, 4, 4, 1, 1, 1, 1, 1]):
// the first n_s layers of pipeline stage s recompute selectively; the list must have one number per stage,
// none above its stage's layers.
TEST(MindFormersKeys, SelectRecomputePerStageListRecomputesTheFirstLayersOfEachStage) {
  const std::vector<std::string> pp2 = {"model.model_config.num_layers=6", "parallel_config.pipeline_stage=2",
                                        "parallel_config.micro_batch_num=2"};
  auto with = [&](std::vector<std::string> sets, const std::string& list) {
    sets.push_back("recompute_config.select_recompute=" + list);
    return sets;
  };
  Config c = load_config_string(kMinimal, with(pp2, "[2, 1]"));
  EXPECT_TRUE(config_layout_problems(c).empty());
  EXPECT_TRUE(c.select_recompute);
  ModelLayout l = model_layout(c);
  EXPECT_EQ(l.recompute, RecomputePolicy::kSelective);
  EXPECT_EQ(l.recompute_mask, (std::vector<bool>{true, true, false, true, false, false}));  // stages [0, 3) and [3, 6)
  EXPECT_EQ(l.recomputed_layers(6), 3);
  // All zeros: no recompute at all.
  c = load_config_string(kMinimal, with(pp2, "[0, 0]"));
  EXPECT_FALSE(c.select_recompute);
  EXPECT_EQ(model_layout(c).recomputed_layers(6), 0);
  // One stage: its first n layers.
  EXPECT_EQ(model_layout(load_config_string(kMinimal, {"recompute_config.select_recompute=[1]"})).recompute_mask,
            (std::vector<bool>{true, false}));
  auto problems = [](const Config& x) {
    std::string all;
    for (const std::string& p : config_layout_problems(x)) all += p + "\n";
    return all;
  };
  EXPECT_NE(problems(load_config_string(kMinimal, with(pp2, "[2, 1, 1]")))
                .find("`recompute_config.select_recompute: [2, 1, 1]`: 3 number(s) for `parallel_config.pipeline_stage: "
                      "2`; give one per stage"),
            std::string::npos);
  EXPECT_NE(problems(load_config_string(kMinimal, with(pp2, "[4, 1]"))).find("stage 0 holds 3 layers, fewer than the 4"),
            std::string::npos);
}

// MindFormers' dict form ({pattern: True | [layers per stage]}, its memory-optimization guide): patterns on the
// attention core's operations are our selective recompute; a pattern selecting anything else (the FFN's
// multiply, a norm) is refused naming it, and so is one that selects nothing.
TEST(MindFormersKeys, SelectRecomputePatternsMapOntoTheAttentionCore) {
  const std::vector<std::string> pp2 = {"model.model_config.num_layers=6", "parallel_config.pipeline_stage=2",
                                        "parallel_config.micro_batch_num=2"};
  auto with = [&](const std::string& dict) {
    std::vector<std::string> sets = pp2;
    sets.push_back("recompute_config.select_recompute=" + dict);
    return sets;
  };
  Config c = load_config_string(kMinimal, with("{'attention\\.softmax': [2, 1], 'attention\\.batch_matmul': [1, 2]}"));
  EXPECT_TRUE(config_layout_problems(c).empty());
  EXPECT_EQ(model_layout(c).recompute_mask, (std::vector<bool>{true, true, false, true, true, false}));  // max per stage
  c = load_config_string(kMinimal, with("{'attention\\.flash_attention': True}"));
  EXPECT_EQ(model_layout(c).recomputed_layers(6), 6);
  c = load_config_string(kMinimal, with("{'attention\\.softmax': False}"));
  EXPECT_FALSE(c.select_recompute);
  std::string e = error_of(kMinimal, with("{'feed_forward\\.mul': True, 'attention\\.softmax': True}"));
  EXPECT_NE(e.find("pattern 'feed_forward\\.mul' selects feed_forward.mul: recomputing those operations is not built"),
            std::string::npos) << e;
  e = error_of(kMinimal, with("{'.*\\.norm': True}"));
  EXPECT_NE(e.find("attention_norm.norm, ffn_norm.norm"), std::string::npos) << e;
  e = error_of(kMinimal, with("{'decoder\\.nothing': True}"));
  EXPECT_NE(e.find("selects no operation of a layer"), std::string::npos) << e;
  e = error_of(kMinimal, with("{'attention\\.softmax': [[1, 0], [0, 1]]}"));
  EXPECT_NE(e.find("a list per model chunk"), std::string::npos) << e;
}

TEST(ConfigErrors, AnEmptyFileIsRefused) {
  for (const char* text : {"", "# only a comment\n", "---\n", "{}\n"})
    EXPECT_EQ(error_of(text), "config <string> is empty") << text;
  const std::string path = std::string(GF_BINARY_DIR) + "/empty_config.yaml";
  std::ofstream(path) << "# nothing here\n";
  try {
    load_config(path);
    FAIL() << "an empty file loaded";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "config " + path + " is empty");
  }
}

TEST(ConfigErrors, AnOverrideProblemNamesTheOverrideAndTheFileItsOwn) {
  std::string e = error_of(kMinimal, {"runner_config.train_step=5"});
  EXPECT_EQ(e, "1 problem(s) in the --set overrides:\n  --set runner_config.train_step=5: unknown key; did you mean `train_steps`?");
  e = error_of(kMinimal + "runner_config: {epochs: 0}\n", {"runner_config.batch_size=0"});
  EXPECT_EQ(e, "<string>: 2 problem(s) in the config:\n  `runner_config.epochs: 0`: must be > 0\n"
               "  --set runner_config.batch_size=0: must be > 0");
  // A problem of the file that an override does not touch stays the file's; one an override fixes is gone.
  e = error_of(kMinimal + "runner_config: {batch_size: 0, epochs: 0}\n", {"runner_config.batch_size=2"});
  EXPECT_EQ(e, "<string>: 1 problem(s) in the config:\n  `runner_config.epochs: 0`: must be > 0");
}

}  // namespace
}  // namespace gf
