// Megatron-LM / MindSpeed arguments into our YAML (runner/config/megatron_args.h), continued from
// tests/runner/megatron_args_test.cpp on a small GPT job varied argument by argument: the vocabulary padding, the
// derived gradient accumulation, the schedule against Megatron's own (transcribed below), Llama, experts,
// recompute, data and checkpoints, the GELU, the environment, the refusals and the table's consistency.
// The YAML is parsed back with yaml-cpp here; loading it through gf::load_config_string needs the runner
// library and is another test's.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/optim/lr_schedule.h"
#include "runner/config/megatron_args.h"
#include "tests/runner/megatron_args_test_util.h"

namespace gf {
namespace {

using namespace megatron_test;  // the helpers both halves share (megatron_args_test_util.h)

// A small GPT job to vary (--train-iters 100 unless `iters` is false).
std::vector<std::string> tiny(const std::string& more = "", bool iters = true) {
  return words("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256 --max-position-embeddings 256 "
               "--micro-batch-size 2 --lr 1e-3 --data-path ./data/fortunes/fortunes_text_document --vocab-file v.json "
               "--merge-file m.txt " + std::string(iters ? "--train-iters 100 " : "") + more);
}

MegatronTranslation ok(const std::vector<std::string>& args, int world) {
  MegatronTranslation t = translate_megatron_args(args, kNoEnv, world);
  EXPECT_TRUE(t.errors.empty()) << joined(t.errors);
  return t;
}

TEST(MegatronArgs, VocabularyPaddedAsMegatronPadsIt) {
  const MegatronTranslation one = ok(tiny(), 1);
  EXPECT_EQ(one.padded_vocab_size, 50304);
  EXPECT_TRUE(YAML::Load(one.yaml)["parallel_config"]["vocab_emb_dp"].as<bool>());
  const MegatronTranslation two = ok(tiny("--tensor-model-parallel-size 2"), 2);
  EXPECT_EQ(two.padded_vocab_size, 50432);  // 128 x 2: the vocabulary split over tensor parallel
  EXPECT_FALSE(YAML::Load(two.yaml)["parallel_config"]["vocab_emb_dp"].as<bool>());
  EXPECT_EQ(YAML::Load(two.yaml)["model"]["model_config"]["vocab_size"].as<int>(), 50257);
  EXPECT_EQ(ok(tiny("--make-vocab-size-divisible-by 64"), 1).padded_vocab_size, 50304);  // the same multiple
  const MegatronTranslation other = translate_megatron_args(tiny("--make-vocab-size-divisible-by 1"), kNoEnv, 1);
  ASSERT_EQ(other.errors.size(), 1u);
  EXPECT_NE(other.errors[0].find("Megatron pads the 50257-token vocabulary to 50257"), std::string::npos) << other.errors[0];
  EXPECT_TRUE(other.yaml.empty());
  // --vocab-size is the NullTokenizer's: N + 1 tokens, the last the end of document.
  const MegatronTranslation null = ok(tiny("--tokenizer-type NullTokenizer --vocab-size 1000"), 1);
  EXPECT_EQ(YAML::Load(null.yaml)["model"]["model_config"]["vocab_size"].as<int>(), 1001);
  EXPECT_EQ(YAML::Load(null.yaml)["model"]["model_config"]["eos_token_id"].as<int>(), 1000);
  EXPECT_EQ(null.padded_vocab_size, 1024);
}

TEST(MegatronArgs, GradientAccumulationIsDerived) {
  // World 8, TP 2: DP 4; 64 = 2 x 4 x 8.
  const YAML::Node a = YAML::Load(ok(tiny("--tensor-model-parallel-size 2 --global-batch-size 64"), 8).yaml);
  EXPECT_EQ(a["parallel_config"]["data_parallel"].as<int>(), 4);
  EXPECT_EQ(a["runner_config"]["gradient_accumulation_steps"].as<int>(), 8);
  EXPECT_EQ(a["parallel_config"]["micro_batch_num"].as<int>(), 1);
  // Under a pipeline the micro-batches are micro_batch_num: TP 2 x PP 2, DP 2; 64 = 2 x 2 x 16.
  const YAML::Node p =
      YAML::Load(ok(tiny("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --global-batch-size 64"), 8).yaml);
  EXPECT_EQ(p["parallel_config"]["micro_batch_num"].as<int>(), 16);
  EXPECT_FALSE(p["runner_config"]["gradient_accumulation_steps"]);
  // No --global-batch-size: micro x DP (one micro-batch).
  EXPECT_EQ(YAML::Load(ok(tiny(), 4).yaml)["runner_config"]["gradient_accumulation_steps"].as<int>(), 1);
  // Context parallel takes its share of the ranks: 8 / (2 x 2) = DP 2.
  EXPECT_EQ(YAML::Load(ok(tiny("--tensor-model-parallel-size 2 --context-parallel-size 2"), 8).yaml)["parallel_config"]
                ["data_parallel"].as<int>(), 2);
  const MegatronTranslation bad = translate_megatron_args(tiny("--global-batch-size 10"), kNoEnv, 4);
  ASSERT_FALSE(bad.errors.empty());
  EXPECT_NE(bad.errors[0].find("micro batch 2 x data parallel 4 = 8"), std::string::npos) << bad.errors[0];
  const MegatronTranslation world = translate_megatron_args(kDistributed, kNoEnv, 12);
  ASSERT_FALSE(world.errors.empty());
  EXPECT_NE(world.errors[0].find("world size 12 is not divisible"), std::string::npos) << world.errors[0];
}

// Megatron's OptimizerParamScheduler.get_lr (285068c and core_r0.6.0), transcribed: the rate iteration k
// (from 1) updates with, set from the samples consumed before it.
double megatron_lr(int64_t k, int64_t G, double lr, double min_lr, double warmup_samples, double decay_samples,
                   const std::string& style) {
  const double n = static_cast<double>((k - 1) * G);
  if (warmup_samples > 0 && n <= warmup_samples) return lr * n / warmup_samples;
  if (style == "constant") return lr;
  if (n > decay_samples) return min_lr;
  const double ratio = (n - warmup_samples) / (decay_samples - warmup_samples);
  const double coeff = style == "linear" ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr + coeff * (lr - min_lr);
}

LrSchedule schedule_of(const YAML::Node& y) {
  LrScheduleConfig c;
  const YAML::Node s = y["lr_schedule"];
  c.type = s["type"].as<std::string>();
  c.learning_rate = s["learning_rate"].as<double>();
  c.lr_end = s["lr_end"].as<double>();
  c.warmup_steps = s["warmup_steps"].as<int64_t>();
  c.total_steps = s["total_steps"].as<int64_t>();
  if (s["power"]) c.power = s["power"].as<double>();
  if (s["from_steps_done"]) c.from_steps_done = s["from_steps_done"].as<bool>();
  return LrSchedule(c, y["runner_config"]["train_steps"].as<int64_t>());
}

TEST(MegatronArgs, ScheduleIsMegatronsWarmupIncluded) {
  // A warmup fraction: .1 of 40 decay iterations = 4 warmup steps; the first update at rate 0, the peak at step 5,
  // as in Megatron (lr_schedule.from_steps_done).
  for (const std::string style : {"cosine", "linear", "constant"}) {
    const MegatronTranslation t = ok(tiny("--global-batch-size 8 --train-iters 50 --lr-decay-iters 40 --lr-warmup-fraction .1 "
                                          "--min-lr 1e-4 --lr-decay-style " + style), 4);
    const YAML::Node y = YAML::Load(t.yaml);
    EXPECT_EQ(y["lr_schedule"]["warmup_steps"].as<int>(), 4);
    EXPECT_EQ(y["lr_schedule"]["total_steps"].as<int>(), 40);
    const LrSchedule ours = schedule_of(y);
    for (int64_t k = 1; k <= 50; ++k)
      EXPECT_NEAR(ours.at(k), megatron_lr(k, 8, 1e-3, 1e-4, 0.1 * 40 * 8, 40 * 8, style), 1e-15) << style << " step " << k;
    EXPECT_EQ(ours.at(1), 0.0) << style;
    EXPECT_FALSE(any_contains(t.differences, "the warmup")) << joined(t.differences);
  }
}

TEST(MegatronArgs, ScheduleWithoutWarmupIsMegatronsExactly) {
  const YAML::Node y = YAML::Load(ok(tiny("--global-batch-size 8 --lr-decay-iters 60 --min-lr 1e-4 --lr-decay-style linear"), 4).yaml);
  EXPECT_EQ(y["lr_schedule"]["type"].as<std::string>(), "polynomial");
  EXPECT_DOUBLE_EQ(y["lr_schedule"]["power"].as<double>(), 1.0);
  const LrSchedule ours = schedule_of(y);
  for (int64_t k = 1; k <= 100; ++k) EXPECT_NEAR(ours.at(k), megatron_lr(k, 8, 1e-3, 1e-4, 0, 60 * 8, "linear"), 1e-15) << k;
}

TEST(MegatronArgs, ScheduleCountedInSamples) {
  // 1000 samples of 8 = 125 steps (Megatron's train_samples // global batch); warmup 80 samples = 10 steps.
  const MegatronTranslation t = ok(tiny("--global-batch-size 8 --train-samples 1000 --lr-decay-samples 800 "
                                        "--lr-warmup-samples 80 --lr-decay-style cosine --min-lr 1e-5", false), 4);
  const YAML::Node y = YAML::Load(t.yaml);
  EXPECT_EQ(y["runner_config"]["train_steps"].as<int>(), 125);
  EXPECT_EQ(y["lr_schedule"]["warmup_steps"].as<int>(), 10);
  EXPECT_EQ(y["lr_schedule"]["total_steps"].as<int>(), 100);
  const LrSchedule ours = schedule_of(y);
  for (int64_t k = 1; k <= 125; ++k) EXPECT_NEAR(ours.at(k), megatron_lr(k, 8, 1e-3, 1e-5, 80, 800, "cosine"), 1e-15) << k;
  // Not whole steps: refused rather than rounded.
  const MegatronTranslation w = translate_megatron_args(
      tiny("--global-batch-size 8 --train-samples 1000 --lr-decay-samples 800 --lr-warmup-samples 84", false), kNoEnv, 4);
  ASSERT_EQ(w.errors.size(), 1u) << joined(w.errors);
  EXPECT_NE(w.errors[0].find("`--lr-warmup-samples 84`: a warmup of 10.5 steps"), std::string::npos) << w.errors[0];
  const MegatronTranslation d =
      translate_megatron_args(tiny("--global-batch-size 8 --train-samples 1000 --lr-decay-samples 804", false), kNoEnv, 4);
  ASSERT_EQ(d.errors.size(), 1u) << joined(d.errors);
  EXPECT_NE(d.errors[0].find("100.5 global batches of 8: not a whole number of steps"), std::string::npos) << d.errors[0];
  const MegatronTranslation f = translate_megatron_args(tiny("--lr-decay-iters 45 --lr-warmup-fraction .01"), kNoEnv, 1);
  ASSERT_EQ(f.errors.size(), 1u) << joined(f.errors);
  EXPECT_NE(f.errors[0].find("a warmup of 0.45 steps"), std::string::npos) << f.errors[0];
  // Megatron's own rules on the schedule's arguments.
  EXPECT_FALSE(translate_megatron_args(tiny("--train-samples 1000"), kNoEnv, 1).errors.empty());
  EXPECT_FALSE(translate_megatron_args(tiny("", false), kNoEnv, 1).errors.empty());
  EXPECT_FALSE(translate_megatron_args(tiny("--lr-decay-style inverse-square-root"), kNoEnv, 1).errors.empty());
  EXPECT_FALSE(translate_megatron_args(tiny("--min-lr 1e-2"), kNoEnv, 1).errors.empty());
}

TEST(MegatronArgs, UnknownArgumentNamesTheNearestRealOne) {
  for (const auto& [word, nearest] : std::vector<std::pair<std::string, std::string>>{
           {"--num_layers", "--num-layers"}, {"--hiden-size", "--hidden-size"}, {"--pre-tokens", "--pre-tockens"},
           {"--tensor-parallel-size", "--tensor-model-parallel-size"}, {"--use-flash-attention", "--use-flash-attn"}}) {
    const MegatronTranslation t = translate_megatron_args(tiny(word + " 4"), kNoEnv, 1);
    ASSERT_EQ(t.errors.size(), 1u) << joined(t.errors);
    EXPECT_EQ(t.errors[0].find("`" + word + "`: not an argument of Megatron-LM"), 0u) << t.errors[0];
    EXPECT_NE(t.errors[0].find("did you mean `" + nearest + "`?"), std::string::npos) << t.errors[0];
    EXPECT_TRUE(t.yaml.empty());
  }
  // A real Megatron argument without a counterpart is refused as such, not as unknown.
  const MegatronTranslation r = translate_megatron_args(tiny("--vision-pretraining --rampup-batch-size 16 8 300"), kNoEnv, 1);
  ASSERT_EQ(r.errors.size(), 2u) << joined(r.errors);
  EXPECT_NE(r.errors[0].find("no counterpart in gridformer's config"), std::string::npos) << r.errors[0];
  EXPECT_NE(r.errors[1].find("`--rampup-batch-size`: a global batch that grows"), std::string::npos) << r.errors[1];
}

TEST(MegatronArgs, MissingOrMalformedValuesAreRefused) {
  auto errors = [](const std::vector<std::string>& args) { return translate_megatron_args(args, kNoEnv, 1).errors; };
  EXPECT_EQ(errors(tiny("--num-layers")), std::vector<std::string>{"`--num-layers`: expected one argument (an integer)"});
  EXPECT_EQ(errors(tiny("--hidden-size --fp16")), std::vector<std::string>{"`--hidden-size`: expected one argument (an integer)"});
  EXPECT_EQ(errors(tiny("--num-layers eight")), std::vector<std::string>{"`--num-layers eight`: invalid int value: 'eight'"});
  EXPECT_EQ(errors(tiny("--seq-length=1.5")), std::vector<std::string>{"`--seq-length 1.5`: invalid int value: '1.5'"});
  EXPECT_EQ(errors(tiny("--lr 1e-3x")), std::vector<std::string>{"`--lr 1e-3x`: invalid float value: '1e-3x'"});
  EXPECT_EQ(errors(tiny("--lr-decay-style exponential")),
            std::vector<std::string>{"`--lr-decay-style exponential`: invalid choice: 'exponential' (choose from constant,"
                                     "linear,cosine,inverse-square-root)"});
  EXPECT_EQ(errors(tiny("--fp16=yes")),
            std::vector<std::string>{"`--fp16=yes`: --fp16 is a flag and takes no value (argparse: ignored explicit argument)"});
  EXPECT_EQ(errors(tiny("stray")).size(), 1u);
  // Both spellings argparse accepts; =VALUE and a negative number as a value.
  const MegatronTranslation t = ok(tiny("--local_rank=3 --local-rank 2 --hidden-dropout=0.0 --lr-warmup-iters=0"), 1);
  EXPECT_TRUE(any_contains(t.notes, "`--local_rank`: set by the distributed launcher")) << joined(t.notes);
  EXPECT_EQ(t.notes.size(), 1u) << joined(t.notes);  // one note for one argument, whatever the spelling
  EXPECT_DOUBLE_EQ(YAML::Load(t.yaml)["model"]["model_config"]["hidden_dropout_rate"].as<double>(), 0.0);
  EXPECT_EQ(errors(tiny("--use-flash-attn --pre-tockens -1")),
            std::vector<std::string>{"`--pre-tockens -1`: a band that excludes the token itself is not built (>= 0)"});
  // Required by Megatron.
  EXPECT_EQ(errors(words("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 "
                         "--train-iters 1 --lr 1e-3 --data-path x --vocab-file v --merge-file m")),
            std::vector<std::string>{"`--micro-batch-size`: required (Megatron asserts it is given)"});
}

TEST(MegatronArgs, LlamaFromRmsNormAndSwiGlu) {
  const MegatronTranslation t = ok(tiny("--normalization RMSNorm --swiglu --position-embedding-type rope --rotary-base 500000 "
                                        "--disable-bias-linear --group-query-attention --num-query-groups 2 "
                                        "--attention-dropout 0 --hidden-dropout 0 --norm-epsilon 1e-6"), 1);
  const YAML::Node y = YAML::Load(t.yaml);
  const YAML::Node mc = y["model"]["model_config"];
  EXPECT_EQ(mc["type"].as<std::string>(), "LlamaConfig");
  EXPECT_EQ(y["model"]["arch"]["type"].as<std::string>(), "LlamaForCausalLM");
  EXPECT_EQ(mc["n_kv_heads"].as<int>(), 2);
  EXPECT_EQ(mc["intermediate_size"].as<int>(), 640);  // int(4 x 256 x 2/3 / 64) x 64
  EXPECT_EQ(mc["max_position_embedding"].as<int>(), 256);
  EXPECT_DOUBLE_EQ(mc["rms_norm_eps"].as<double>(), 1e-6);
  EXPECT_DOUBLE_EQ(mc["theta"].as<double>(), 500000.0);
  EXPECT_TRUE(mc["tie_word_embeddings"].as<bool>());  // Megatron ties unless --untie-embeddings-and-output-weights
  EXPECT_FALSE(mc["qkv_has_bias"].as<bool>());
  EXPECT_EQ(mc["eos_token_id"].as<int>(), 50256);
  for (const char* gpt2_only : {"expand_ratio", "hidden_act", "hidden_dropout_rate", "layernorm_epsilon", "rope_theta",
                                "max_position_embeddings", "add_bias_linear", "position_embedding_type"})
    EXPECT_FALSE(mc[gpt2_only]) << gpt2_only;
  EXPECT_EQ(y["trainer"]["model_name"].as<std::string>(), "megatron_llama");
}

TEST(MegatronArgs, CombinationsOurModelsCannotExpressAreRefused) {
  auto first_error = [](const std::string& more) {
    const MegatronTranslation t = translate_megatron_args(tiny(more), kNoEnv, 1);
    return t.errors.empty() ? std::string() : t.errors.front();
  };
  EXPECT_NE(first_error("--normalization RMSNorm").find("RMSNorm with a GELU MLP"), std::string::npos);
  EXPECT_NE(first_error("--swiglu").find("a SwiGLU MLP with LayerNorm"), std::string::npos);
  EXPECT_NE(first_error("--group-query-attention --num-query-groups 2").find("GPT2Config"), std::string::npos);
  EXPECT_NE(first_error("--untie-embeddings-and-output-weights").find("ties the LM head"), std::string::npos);
  EXPECT_NE(first_error("--ffn-hidden-size 1000").find("not a multiple of 256"), std::string::npos);
  EXPECT_NE(first_error("--normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear")
                .find("LlamaConfig trains without dropout"),
            std::string::npos);
  EXPECT_NE(first_error("--normalization RMSNorm --swiglu --disable-bias-linear --attention-dropout 0 --hidden-dropout 0")
                .find("learned_absolute positions"),
            std::string::npos);
  EXPECT_NE(first_error("--squared-relu").find("squared-ReLU"), std::string::npos);
}

TEST(MegatronArgs, ExpertsFollowMegatronCore) {
  const std::string moe = "--use-mcore-models --num-experts 8 --moe-router-topk 1 --moe-aux-loss-coeff 0.01 "
                          "--expert-model-parallel-size 2 ";
  const MegatronTranslation t = ok(tiny(moe), 4);
  const YAML::Node e = YAML::Load(t.yaml)["moe_config"];
  EXPECT_EQ(e["expert_num"].as<int>(), 8);
  EXPECT_EQ(e["num_experts_chosen"].as<int>(), 1);
  EXPECT_DOUBLE_EQ(e["aux_loss_factor"].as<double>(), 0.01);
  EXPECT_EQ(e["token_dispatcher"].as<std::string>(), "allgather");  // Megatron core_r0.6.0's default
  EXPECT_TRUE(any_contains(t.differences, "the load-balancing loss")) << joined(t.differences);
  // Megatron's own refusals: MoE under TP without SP, EP not dividing DP, the legacy SwitchMLP.
  EXPECT_FALSE(translate_megatron_args(tiny(moe + "--tensor-model-parallel-size 2"), kNoEnv, 4).errors.empty());
  EXPECT_FALSE(translate_megatron_args(tiny(moe), kNoEnv, 3).errors.empty());  // DP 3, EP 2
  EXPECT_FALSE(translate_megatron_args(tiny("--num-experts 8"), kNoEnv, 1).errors.empty());
  const MegatronTranslation none = ok(tiny("--moe-router-topk 4"), 1);
  EXPECT_TRUE(any_contains(none.notes, "`--moe-router-topk 4`: no effect without --num-experts")) << joined(none.notes);
}

TEST(MegatronArgs, RecomputeAsMegatronMeansIt) {
  const YAML::Node block =
      YAML::Load(ok(tiny("--recompute-granularity full --recompute-method block --recompute-num-layers 2"), 1).yaml);
  EXPECT_TRUE(block["recompute_config"]["recompute"].as<bool>());
  EXPECT_EQ(block["recompute_config"]["recompute_num_layers"].as<int>(), 2);
  const MegatronTranslation sel = ok(tiny("--recompute-activations"), 1);
  EXPECT_TRUE(YAML::Load(sel.yaml)["recompute_config"]["select_recompute"].as<bool>());
  EXPECT_FALSE(translate_megatron_args(tiny("--recompute-granularity full"), kNoEnv, 1).errors.empty());
  EXPECT_FALSE(translate_megatron_args(tiny("--recompute-granularity selective --recompute-method block"), kNoEnv, 1)
                   .errors.empty());
}

TEST(MegatronArgs, DataAndCheckpoints) {
  const MegatronTranslation t = ok(words("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 "
                                         "--max-position-embeddings 64 --micro-batch-size 2 --train-iters 10 --lr 1e-3 "
                                         "--vocab-file v --merge-file m --data-path 0.3 a_text_document 0.7 b_text_document "
                                         "--load ./pretrained --finetune --save ./ck --save-interval 5 --eval-iters 0 "
                                         "--reset-position-ids --exit-interval 8 --tensorboard-dir ./tb"),
                                   1);
  const YAML::Node y = YAML::Load(t.yaml);
  const YAML::Node path = y["train_dataset"]["data_loader"]["data_path"];
  ASSERT_EQ(path.size(), 4u);
  EXPECT_DOUBLE_EQ(path[0].as<double>(), 0.3);
  EXPECT_EQ(path[1].as<std::string>(), "a_text_document");
  EXPECT_DOUBLE_EQ(path[2].as<double>(), 0.7);
  EXPECT_EQ(y["train_dataset"]["data_loader"]["split"].as<std::string>(), "969,30,1");  // Megatron's default
  EXPECT_TRUE(y["train_dataset"]["data_loader"]["reset_position_ids"].as<bool>());
  EXPECT_FALSE(y["do_eval"].as<bool>());  // --eval-iters 0
  EXPECT_EQ(y["load_checkpoint"].as<std::string>(), "./pretrained");
  EXPECT_FALSE(y["resume_training"].as<bool>());  // --finetune: the weights, from step 1
  EXPECT_EQ(y["runner_config"]["exit_interval"].as<int>(), 8);
  EXPECT_EQ(y["tensorboard_dir"].as<std::string>(), "./tb");
  EXPECT_EQ(y["callbacks"][1]["directory"].as<std::string>(), "./ck");
  // Megatron's layout beside ours: Megatron-core's as the job's own flags build it (core_r0.6.0's default names).
  EXPECT_TRUE(y["callbacks"][1]["megatron_format"].as<bool>());
  EXPECT_EQ(y["callbacks"][1]["megatron_transformer_impl"].as<std::string>(), "transformer_engine");
  EXPECT_FALSE(y["callbacks"][1]["megatron_moe_grouped_gemm"].as<bool>());
  EXPECT_FALSE(y["callbacks"][1]["megatron_use_mcore_models"].as<bool>());
  const YAML::Node core = YAML::Load(ok(tiny("--save ./ck --save-interval 5 --transformer-impl local --use-mcore-models "
                                             "--moe-grouped-gemm"), 1).yaml)["callbacks"][1];
  EXPECT_EQ(core["megatron_transformer_impl"].as<std::string>(), "local");
  EXPECT_TRUE(core["megatron_moe_grouped_gemm"].as<bool>());
  EXPECT_TRUE(core["megatron_use_mcore_models"].as<bool>());
  EXPECT_FALSE(translate_megatron_args(tiny("--transformer-impl te"), kNoEnv, 1).errors.empty());
  EXPECT_FALSE(translate_megatron_args(tiny("--save ./ck"), kNoEnv, 1).errors.empty());  // Megatron asserts --save-interval
  EXPECT_FALSE(translate_megatron_args(tiny("--load ./ck --no-load-optim"), kNoEnv, 1).errors.empty());
  EXPECT_FALSE(translate_megatron_args(tiny("--data-impl cached"), kNoEnv, 1).errors.empty());
}

TEST(MegatronArgs, GeluIsTheOneMegatronComputes) {
  auto act = [](const std::string& more) {
    return YAML::Load(ok(tiny(more), 1).yaml)["model"]["model_config"]["hidden_act"].as<std::string>();
  };
  EXPECT_EQ(act(""), "gelu_new");                                     // biases: the fused tanh bias-GELU
  EXPECT_EQ(act("--no-bias-gelu-fusion"), "gelu");                    // unfused: F.gelu
  EXPECT_EQ(act("--no-bias-gelu-fusion --openai-gelu"), "gelu_new");  // the legacy model's openai_gelu
  EXPECT_EQ(act("--no-bias-gelu-fusion --openai-gelu --use-mcore-models"), "gelu");
  EXPECT_EQ(act("--disable-bias-linear"), "gelu");                    // no bias to fuse
}

TEST(MegatronArgs, EnvironmentIsNoted) {
  const MegatronTranslation t =
      translate_megatron_args(tiny(), {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}, {"MASTER_PORT", "6000"}}, 1);
  ASSERT_TRUE(t.errors.empty()) << joined(t.errors);
  EXPECT_EQ(noted(t), (std::set<std::string>{"CUDA_DEVICE_MAX_CONNECTIONS", "MASTER_PORT"})) << joined(t.notes);
  EXPECT_FALSE(translate_megatron_args(tiny(), {{"WORLD_SIZE", "8"}}, 1).errors.empty());
}

TEST(MegatronArgs, TableIsConsistent) {
  using namespace megatron_args;
  std::set<std::string> seen;
  for (const Spec& s : table()) {
    std::istringstream in(s.names);
    for (std::string n; in >> n;) {
      EXPECT_EQ(n.rfind("--", 0), 0u) << n;
      EXPECT_TRUE(seen.insert(n).second) << "declared twice: " << n;
    }
    ASSERT_NE(s.text, nullptr) << s.names;
    if (s.fallback == nullptr || s.type == Type::kFlag) continue;
    // A default is a value of its type and among its choices: the same check as a given value.
    const MegatronTranslation t = translate_megatron_args(
        words(std::string(s.names).substr(0, std::string(s.names).find(' ')) + " " + s.fallback), kNoEnv, 1);
    for (const std::string& e : t.errors)
      EXPECT_EQ(e.find("invalid"), std::string::npos) << s.names << ": " << e;
  }
  for (const std::string& w : other_arguments()) {
    std::string n = w;
    if (n.back() == '=' || n.back() == '*' || n.back() == '+') n.pop_back();
    EXPECT_TRUE(seen.insert(n).second) << "declared twice: " << n;
  }
  // Every argument of the four reference scripts has a kind of its own (none is refused or unknown).
  for (const auto* script : {&kDistributed, &kDistributedBf16, &kMoe, &kLambada})
    for (const std::string& w : *script)
      if (w.rfind("--", 0) == 0) {
        EXPECT_EQ(seen.count(w), 1u) << w;
      }
  EXPECT_EQ(edit_distance("--num_layers", "--num-layers"), 1);
}

}  // namespace
}  // namespace gf
