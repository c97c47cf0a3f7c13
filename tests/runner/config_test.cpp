// The config rules: unknown keys with suggestions, overrides, CPU-meaningless keys, registered
// type names, bad values, and MindFormers' own files loading as they are.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "runner/train/batch_source.h"
#include "runner/config/config.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::error_of;
using config_test::kMinimal;

bool has_warning(const Config& c, const std::string& needle) {
  return std::any_of(c.warnings.begin(), c.warnings.end(), [&](const std::string& w) { return w.find(needle) != std::string::npos; });
}

TEST(Config, MinimalFileGetsDefaults) {
  const Config c = load_config_string(kMinimal);
  EXPECT_EQ(c.model.hidden_size, 64);
  EXPECT_EQ(c.model.max_position_embeddings, 32);  // -1 resolves to seq_length
  EXPECT_EQ(c.parallel.data_parallel, 1);
  EXPECT_EQ(c.batch_size, 1);
  EXPECT_EQ(c.optimizer_type, OptimizerType::kAdamWeightDecay);
  EXPECT_EQ(c.per_print_times, 1);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Config, UnknownKeyNamesPathAndClosestKey) {
  const std::string e = error_of(kMinimal + "parallel_config:\n  model_paralel: 2\n");
  EXPECT_NE(e.find("`parallel_config.model_paralel`: unknown key; did you mean `model_parallel`?"), std::string::npos) << e;
}

TEST(Config, UnknownKeyFarFromAnyListsKnownKeys) {
  const std::string e = error_of(kMinimal + "runner_config:\n  zzzzzzzzzz: 1\n");
  EXPECT_NE(e.find("`runner_config.zzzzzzzzzz`: unknown key; known keys here: epochs, batch_size"), std::string::npos) << e;
}

TEST(Config, EveryProblemIsReportedAtOnce) {
  const std::string e = error_of(kMinimal + "seeed: 1\noptimizer:\n  betaa1: 0.9\n");
  EXPECT_NE(e.find("2 problem(s)"), std::string::npos) << e;
  EXPECT_NE(e.find("`seeed`"), std::string::npos) << e;
  EXPECT_NE(e.find("`optimizer.betaa1`: unknown key; did you mean `beta1`?"), std::string::npos) << e;
}

TEST(Config, UnknownKeyInsideAListItem) {
  const std::string e = error_of(kMinimal + "callbacks:\n  - type: MFLossMonitor\n    per_print_time: 3\n");
  EXPECT_NE(e.find("`callbacks.0.per_print_time`: unknown key; did you mean `per_print_times`?"), std::string::npos) << e;
}

TEST(Config, SetOverridesAnyKey) {
  const Config c = load_config_string(kMinimal, {"runner_config.train_steps=5", "model.model_config.num_layers=3",
                                                 "optimizer.weight_decay=0.25", "callbacks.0.per_print_times=7"});
  EXPECT_EQ(c.train_steps, 5);
  EXPECT_EQ(c.model.num_layers, 3);
  EXPECT_DOUBLE_EQ(c.adamw.weight_decay, 0.25);
  EXPECT_EQ(c.per_print_times, 7);
  EXPECT_EQ(c.resolved["runner_config"]["train_steps"].as<int>(), 5);
}

// A list item one past the end, or `+`, appends one; further past the end says how to append.
TEST(Config, SetAppendsAListItemOnePastTheEndOrWithPlus) {
  const Config c = load_config_string(kMinimal, {"callbacks.1.type=CheckpointMonitor", "callbacks.1.save_checkpoint_steps=7"});
  EXPECT_TRUE(c.checkpoint.enabled);
  EXPECT_EQ(c.checkpoint.save_steps, 7);
  EXPECT_EQ(c.resolved["callbacks"].size(), 2u);
  const Config d = load_config_string(kMinimal, {"callbacks.+={type: CheckpointMonitor, save_checkpoint_steps: 3}"});
  EXPECT_EQ(d.checkpoint.save_steps, 3);
  EXPECT_EQ(d.resolved["callbacks"].size(), 2u);
  const std::string e = error_of(kMinimal, {"callbacks.3.type=CheckpointMonitor"});
  EXPECT_NE(e.find("list index 3 is past the end (size 1; index 1 or `+` appends an item)"), std::string::npos) << e;
}

// Values that would spin, climb the loss or overflow are refused with their range (the Journeys issue's mutations).
TEST(Config, OutOfRangeValuesAreRefusedWithTheirRange) {
  EXPECT_NE(error_of(kMinimal, {"model.model_config.num_layers=2147483648"}).find("at most 1024"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"model.model_config.vocab_size=1073741824"}).find("at most 1073741823"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"lr_schedule.lr_end=-1e12"}).find("must be a finite number >= 0"), std::string::npos);
  // NaN passes every `v <= 0` bound, so the schema check refuses it for every number key first.
  EXPECT_NE(error_of(kMinimal, {"lr_schedule.learning_rate=.nan"}).find("not a number"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"runner_wrapper.max_grad_norm=.nan"}).find("not a number"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"optimizer.weight_decay=.NaN"}).find("not a number"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"moe_config.capacity_factor=.nan"}).find("not a number"), std::string::npos);
  // The special values are -1 (and 0 for keys that say so); below them is refused, not read as them.
  EXPECT_NE(error_of(kMinimal, {"lr_schedule.total_steps=-1000000000000"}).find("or -1 (or 0): the run's steps"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"model.model_config.eos_token_id=-2"}).find("or -1: none"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"model.model_config.max_position_embeddings=-2"}).find("or -1: seq_length"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"callbacks.0.type=CheckpointMonitor", "callbacks.0.keep_checkpoint_max=-1"})
                .find("must be >= 0"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"lr_schedule.warmup_ratio=1.5"}).find("must be in [0, 1]"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"model.model_config.initializer_range=-1"}).find("must be in (0, 1]"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"runner_wrapper.scale_sense=1e308"}).find("a fixed scale above it overflows every step"),
            std::string::npos);
  // A dynamic scale above float32's range comes down by scale_factor at each overflow: said, with the steps it costs.
  const Config c = load_config_string(kMinimal, {"runner_wrapper.scale_sense={type: DynamicLossScaleUpdateCell, "
                                                 "loss_scale_value: 1.36e39, scale_factor: 2, scale_window: 3}"});
  EXPECT_TRUE(has_warning(c, "the first 2 step(s) will overflow and be skipped")) << c.warnings.front();
  EXPECT_NE(error_of(kMinimal, {"lr_schedule.override_opt_param_scheduler=True",
                                "lr_schedule.use_checkpoint_opt_param_scheduler=True"}).find("not both"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"log_format=json"}).find("expects mindformers"), std::string::npos);
}

TEST(Config, SetWithUnknownKeyOrBadValueFails) {
  EXPECT_NE(error_of(kMinimal, {"runner_config.train_step=5"}).find("did you mean `train_steps`?"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"runner_config.batch_size=abc"}).find("--set runner_config.batch_size=abc: expects an integer"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"runner_config.batch_size"}).find("expects key.path=value"), std::string::npos);
}

TEST(Config, AscendKeysWarnOnceEach) {
  const Config c = load_config_string(kMinimal + "context:\n  device_target: Ascend\n  graph_kernel_flags: \"--opt\"\n");
  EXPECT_TRUE(has_warning(c, "`context.device_target: Ascend` has no meaning on a CPU"));
  EXPECT_TRUE(has_warning(c, "`context.graph_kernel_flags"));
  EXPECT_EQ(std::count_if(c.warnings.begin(), c.warnings.end(), [](const std::string& w) { return w.find("device_target") != std::string::npos; }), 1);
  const Config cpu = load_config_string(kMinimal + "context:\n  device_target: CPU\nprofile: False\n");
  EXPECT_TRUE(cpu.warnings.empty());
}

TEST(Config, UnknownTypeNamesListRegisteredOnes) {
  std::string e = error_of(kMinimal, {"optimizer.type=Adam"});
  EXPECT_NE(e.find("--set optimizer.type=Adam: unknown type; registered: AdamWeightDecay, FusedAdamWeightDecay, "
                   "FP32StateAdamWeightDecay, AdamW"), std::string::npos) << e;
  e = error_of(kMinimal, {"lr_schedule.type=linear"});
  EXPECT_NE(e.find("registered: constant, cosine, polynomial"), std::string::npos) << e;
  e = error_of(kMinimal, {"model.arch.type=BloomForCausalLM"});
  EXPECT_NE(e.find("model.arch.type: unknown type 'BloomForCausalLM'; registered: GPT2LMHeadModel, LlamaForCausalLM, "
                   "MixtralForCausalLM"),
            std::string::npos) << e;
  e = error_of(kMinimal, {"model.arch.type=LlamaForCausalLM"});
  EXPECT_NE(e.find("model.model_config.type: 'GPT2Config' does not go with arch LlamaForCausalLM; use LlamaConfig"),
            std::string::npos) << e;
  e = error_of(kMinimal, {"callbacks.0.type=Foo"});
  EXPECT_NE(e.find("registered: MFLossMonitor"), std::string::npos) << e;
  e = error_of(kMinimal, {"model.model_config.hidden_act=relu"});
  EXPECT_NE(e.find("known: gelu, gelu_new, fast_gelu"), std::string::npos) << e;
}

TEST(Config, RegisteredNamesAreAccepted) {
  for (const char* opt : {"AdamWeightDecay", "FusedAdamWeightDecay", "FP32StateAdamWeightDecay", "AdamW"})
    EXPECT_EQ(error_of(kMinimal, {std::string("optimizer.type=") + opt}), "") << opt;
  for (const char* lr : {"polynomial", "cosine", "constant", "CosineWithWarmUpLR"})
    EXPECT_EQ(error_of(kMinimal, {std::string("lr_schedule.type=") + lr}), "") << lr;
}

TEST(Config, BadValuesAreRefused) {
  EXPECT_NE(error_of(kMinimal, {"runner_config.batch_size=-2"}).find("--set runner_config.batch_size=-2: must be > 0"), std::string::npos);
  EXPECT_NE(error_of(kMinimal + "runner_config: {batch_size: -2}\n").find("`runner_config.batch_size: -2`: must be > 0"),
            std::string::npos);
  const std::string e = error_of(kMinimal, {"model.model_config.max_position_embeddings=16"});
  EXPECT_NE(e.find("`model.model_config.seq_length: 32` is larger than the position table `max_position_embeddings: 16`"),
            std::string::npos) << e;
  EXPECT_NE(error_of(kMinimal, {"model.model_config.num_heads=3"}).find("not divisible by `num_heads: 3`"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"model.model_config.hidden_dropout_rate=1.5"}).find("must be in [0, 1)"), std::string::npos);
  EXPECT_NE(error_of("a: [1,\n").find("YAML syntax error at line"), std::string::npos);
}

TEST(Config, ScaleSenseTakesANumberOrAnUpdateCell) {
  Config c = load_config_string(kMinimal + "runner_wrapper:\n  scale_sense: 1024\n");
  EXPECT_FALSE(c.loss_scale.dynamic);
  EXPECT_DOUBLE_EQ(c.loss_scale.value, 1024.0);
  c = load_config_string(kMinimal + "runner_wrapper:\n  scale_sense:\n    type: DynamicLossScaleUpdateCell\n    loss_scale_value: 65536\n    scale_factor: 2\n    scale_window: 10\n");
  EXPECT_TRUE(c.loss_scale.dynamic);
  EXPECT_EQ(c.loss_scale.window, 10);
  EXPECT_NE(error_of(kMinimal + "runner_wrapper:\n  scale_sense:\n    type: Dynamic\n").find("DynamicLossScaleUpdateCell"), std::string::npos);
}

TEST(Config, MindFormersReferenceFilesLoad) {
  for (const char* f : {"run_gpt2.yaml", "run_gpt2_13b.yaml"}) {
    const Config c = load_config(std::string(GF_SOURCE_DIR) + "/tests/data/mindformers/" + f);
    EXPECT_TRUE(has_warning(c, "`context.device_target: Ascend`")) << f;
    EXPECT_EQ(c.optimizer_type, OptimizerType::kFusedAdamWeightDecay) << f;
    EXPECT_TRUE(c.loss_scale.dynamic) << f;
  }
  const Config big = load_config(std::string(GF_SOURCE_DIR) + "/tests/data/mindformers/run_gpt2_13b.yaml");
  EXPECT_EQ(big.model.hidden_size, 5120);
  EXPECT_EQ(big.parallel.data_parallel, 4);
  EXPECT_EQ(big.parallel.model_parallel, 8);
  EXPECT_TRUE(big.parallel.optimizer_shard());
  EXPECT_EQ(big.model.hidden_act, "fast_gelu");
}

TEST(Config, ResolvedConfigLoadsBackToTheSameValues) {
  const Config a = load_config(std::string(GF_SOURCE_DIR) + "/tests/data/mindformers/run_gpt2.yaml", {"runner_config.train_steps=9"});
  const std::string text = dump_resolved(a);
  EXPECT_NE(text.find("expert_parallel: 1"), std::string::npos);  // a default filled in
  const Config b = load_config_string(text);
  EXPECT_EQ(b.train_steps, 9);
  EXPECT_EQ(b.model.num_layers, a.model.num_layers);
  EXPECT_EQ(dump_resolved(b), text);
}

TEST(Config, MindSporeLoadersSayWhatToUseInstead) {
  const Config c = load_config(std::string(GF_SOURCE_DIR) + "/tests/data/mindformers/run_gpt2.yaml");
  try {
    make_batch_source(c.train_data, c.model, 0, 0, "train_dataset");
    FAIL() << "MindDataset was accepted";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("`train_dataset.data_loader.type: MindDataset`"), std::string::npos) << m;
    EXPECT_NE(m.find("type: MegatronDataset"), std::string::npos) << m;
  }
}

TEST(Config, FeaturesNotBuiltYetWarnInsteadOfSilentlyDoingNothing) {
  const Config c = load_config_string(kMinimal, {"recompute_config.recompute=True", "resume_training=True",
                                                 "model.model_config.compute_dtype=bfloat16",
                                                 "callbacks=[{type: CheckpointMointor, save_checkpoint_steps: 10}]"});
  EXPECT_FALSE(has_warning(c, "recompute"));  // built: recompute_config reaches the model
  EXPECT_TRUE(c.recompute);
  EXPECT_FALSE(has_warning(c, "resum"));  // built: resume_training reaches the trainer
  EXPECT_TRUE(c.resume_training);
  EXPECT_FALSE(has_warning(c, "compute_dtype"));  // built: bf16 products
  EXPECT_EQ(c.compute_dtype, ComputeDtype::kBFloat16);
  EXPECT_FALSE(has_warning(c, "checkpoint"));  // built: CheckpointMonitor saves
  EXPECT_TRUE(c.checkpoint.enabled);
  EXPECT_EQ(c.checkpoint.save_steps, 10);
}

TEST(Config, MixedPrecisionKeysSayWhatIsComputedInWhat) {
  // MindFormers' 13B file: fp16 products, fp16 parameters and softmax asked for. The products are
  // fp16 (emulated); parameters and softmax stay float32, and the warnings say so.
  const Config c = load_config_string(kMinimal, {"model.model_config.compute_dtype=float16",
                                                 "model.model_config.param_init_type=float16",
                                                 "model.model_config.softmax_compute_type=float16"});
  EXPECT_EQ(c.compute_dtype, ComputeDtype::kFloat16);
  EXPECT_TRUE(has_warning(c, "`model.model_config.param_init_type: float16`: master weights"));
  EXPECT_TRUE(has_warning(c, "`model.model_config.softmax_compute_type: float16`: softmax (attention and cross-entropy) "
                             "is computed in float32"));
  // fp16 without a loss scale: small gradients would flush to zero; the warning names the key.
  EXPECT_TRUE(has_warning(c, "runner_wrapper.scale_sense"));
  const Config scaled = load_config_string(
      kMinimal, {"model.model_config.compute_dtype=float16",
                 "runner_wrapper.scale_sense={type: DynamicLossScaleUpdateCell, loss_scale_value: 65536, "
                 "scale_factor: 2, scale_window: 1000}"});
  EXPECT_FALSE(has_warning(scaled, "scale_sense"));
  EXPECT_THROW(load_config_string(kMinimal, {"model.model_config.compute_dtype=int8"}), ConfigError);
}

TEST(Config, FlashAttentionIsAutoTrueOrFalse) {
  // auto (the default): fused from seq_length kFlashAttentionAutoMinSeq on, and the resolved
  // config says which; True/False as written, at any length, and no "not built" warning.
  const Config short_auto = load_config_string(kMinimal);
  EXPECT_FALSE(short_auto.model.use_flash_attention);
  EXPECT_NE(dump_resolved(short_auto).find("use_flash_attention: false"), std::string::npos);
  const std::string at = "model.model_config.seq_length=" + std::to_string(kFlashAttentionAutoMinSeq);
  const Config long_auto = load_config_string(kMinimal, {at, "model.model_config.max_position_embeddings=1024"});
  EXPECT_TRUE(long_auto.model.use_flash_attention);
  EXPECT_NE(dump_resolved(long_auto).find("use_flash_attention: true"), std::string::npos);
  const Config on = load_config_string(kMinimal, {"model.model_config.use_flash_attention=True"});
  EXPECT_TRUE(on.model.use_flash_attention);
  EXPECT_TRUE(on.warnings.empty());
  const Config off = load_config_string(kMinimal, {at, "model.model_config.use_flash_attention=False"});
  EXPECT_FALSE(off.model.use_flash_attention);
  const std::string e = error_of(kMinimal, {"model.model_config.use_flash_attention=sometimes"});
  EXPECT_NE(e.find("--set model.model_config.use_flash_attention=sometimes: expects True, False or auto"), std::string::npos) << e;
}

TEST(EditDistance, Basics) {
  EXPECT_EQ(edit_distance("model_paralel", "model_parallel"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", "abc"), 0u);
}

}  // namespace
}  // namespace gf
