// Megatron-LM / MindSpeed arguments into our YAML (runner/config/megatron_args.h): the four reference job
// scripts of tests/data/megatron/ (the users' own, unmodified) translated key by key. The vocabulary padding, the
// derived gradient accumulation, the schedule against Megatron's own and the refusals:
// tests/runner/megatron_args_options_test.cpp.
// The YAML is parsed back with yaml-cpp here; loading it through gf::load_config_string needs the runner
// library and is another test's.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <vector>

#include "runner/config/megatron_args.h"
#include "tests/runner/megatron_args_test_util.h"

namespace gf {
namespace {

using namespace megatron_test;  // the helpers both halves share (megatron_args_test_util.h)

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(MegatronArgs, DistributedScriptTranslatesKeyByKey) {
  const MegatronTranslation t = translate_megatron_args(kDistributed, kNoEnv, 8);
  ASSERT_TRUE(t.errors.empty()) << joined(t.errors);
  EXPECT_EQ(noted(t), (std::set<std::string>{"--distributed-backend", "--no-gradient-accumulation-fusion",
                                             "--pipeline-model-parallel-size", "--data-impl"}))
      << joined(t.notes);
  EXPECT_TRUE(any_contains(t.notes, "min(8, world 8 / TP 8) = 1")) << joined(t.notes);
  const YAML::Node y = YAML::Load(t.yaml);
  EXPECT_EQ(y["seed"].as<int>(), 1234);
  EXPECT_EQ(y["run_mode"].as<std::string>(), "train");
  EXPECT_TRUE(y["resume_training"].as<bool>());  // --load = --save: resume from its own checkpoints
  EXPECT_FALSE(y["load_checkpoint"]);
  EXPECT_TRUE(y["do_eval"].as<bool>());
  EXPECT_EQ(y["eval_step_interval"].as<int>(), 1000);
  EXPECT_EQ(y["eval_dataset"]["eval_iters"].as<int>(), 10);
  // World 8: TP 8, PP lowered to 1 by Megatron, DP 1; 96 = 4 x 1 x 24.
  const YAML::Node pc = y["parallel_config"];
  EXPECT_EQ(pc["data_parallel"].as<int>(), 1);
  EXPECT_EQ(pc["model_parallel"].as<int>(), 8);
  EXPECT_EQ(pc["pipeline_stage"].as<int>(), 1);
  EXPECT_EQ(pc["context_parallel"].as<int>(), 1);
  EXPECT_EQ(pc["expert_parallel"].as<int>(), 1);
  EXPECT_FALSE(pc["vocab_emb_dp"].as<bool>());
  EXPECT_FALSE(pc["use_seq_parallel"].as<bool>());
  EXPECT_EQ(pc["micro_batch_num"].as<int>(), 1);
  EXPECT_EQ(y["runner_config"]["batch_size"].as<int>(), 4);
  EXPECT_EQ(y["runner_config"]["gradient_accumulation_steps"].as<int>(), 24);
  EXPECT_EQ(y["runner_config"]["train_steps"].as<int>(), 500000);
  EXPECT_TRUE(y["parallel"]["enable_parallel_optimizer"].as<bool>());
  EXPECT_TRUE(y["recompute_config"]["recompute"].as<bool>());
  EXPECT_FALSE(y["recompute_config"]["recompute_num_layers"]);  // every layer
  const YAML::Node rw = y["runner_wrapper"];
  EXPECT_TRUE(rw["use_clip_grad"].as<bool>());
  EXPECT_DOUBLE_EQ(rw["max_grad_norm"].as<double>(), 1.0);
  EXPECT_EQ(rw["scale_sense"]["type"].as<std::string>(), "DynamicLossScaleUpdateCell");
  EXPECT_DOUBLE_EQ(rw["scale_sense"]["loss_scale_value"].as<double>(), 4294967296.0);
  EXPECT_DOUBLE_EQ(rw["scale_sense"]["scale_factor"].as<double>(), 2.0);
  EXPECT_EQ(rw["scale_sense"]["scale_window"].as<int>(), 1000);
  const YAML::Node mc = y["model"]["model_config"];
  EXPECT_EQ(mc["type"].as<std::string>(), "GPT2Config");
  EXPECT_EQ(y["model"]["arch"]["type"].as<std::string>(), "GPT2LMHeadModel");
  EXPECT_EQ(mc["num_layers"].as<int>(), 8);
  EXPECT_EQ(mc["hidden_size"].as<int>(), 12288);
  EXPECT_EQ(mc["num_heads"].as<int>(), 96);
  EXPECT_EQ(mc["seq_length"].as<int>(), 1024);
  EXPECT_EQ(mc["max_position_embeddings"].as<int>(), 1024);
  EXPECT_EQ(mc["vocab_size"].as<int>(), 50257);
  EXPECT_EQ(mc["expand_ratio"].as<int>(), 4);
  EXPECT_EQ(mc["hidden_act"].as<std::string>(), "gelu_new");  // Megatron's fused bias-GELU: the tanh approximation
  EXPECT_DOUBLE_EQ(mc["hidden_dropout_rate"].as<double>(), 0.1);
  EXPECT_DOUBLE_EQ(mc["attention_dropout_rate"].as<double>(), 0.1);
  EXPECT_DOUBLE_EQ(mc["initializer_range"].as<double>(), 0.006);
  EXPECT_DOUBLE_EQ(mc["layernorm_epsilon"].as<double>(), 1e-5);
  EXPECT_EQ(mc["position_embedding_type"].as<std::string>(), "learned_absolute");
  EXPECT_TRUE(mc["add_bias_linear"].as<bool>());
  EXPECT_EQ(mc["compute_dtype"].as<std::string>(), "float16");
  EXPECT_FALSE(mc["use_flash_attention"]);
  EXPECT_EQ(t.padded_vocab_size, 51200);  // 128 x TP 8
  const YAML::Node lr = y["lr_schedule"];
  EXPECT_EQ(lr["type"].as<std::string>(), "cosine");
  EXPECT_DOUBLE_EQ(lr["learning_rate"].as<double>(), 0.375e-5);
  EXPECT_DOUBLE_EQ(lr["lr_end"].as<double>(), 0.375e-6);
  EXPECT_EQ(lr["warmup_steps"].as<int>(), 3200);  // .01 x 320000 iterations: the peak at step 3201
  EXPECT_EQ(lr["total_steps"].as<int>(), 320000);
  EXPECT_TRUE(lr["from_steps_done"].as<bool>());  // step k at the rate of k - 1 steps done, as Megatron's scheduler
  const YAML::Node o = y["optimizer"];
  EXPECT_EQ(o["type"].as<std::string>(), "AdamWeightDecay");
  EXPECT_DOUBLE_EQ(o["beta1"].as<double>(), 0.9);
  EXPECT_DOUBLE_EQ(o["beta2"].as<double>(), 0.95);
  EXPECT_DOUBLE_EQ(o["eps"].as<double>(), 1e-8);
  EXPECT_DOUBLE_EQ(o["weight_decay"].as<double>(), 0.1);
  const YAML::Node dl = y["train_dataset"]["data_loader"];
  EXPECT_EQ(dl["type"].as<std::string>(), "MegatronDataset");
  EXPECT_EQ(dl["data_path"].as<std::string>(), "../dataset/enwiki/my-t5_text_sentence");
  EXPECT_EQ(dl["split"].as<std::string>(), "949,50,1");
  EXPECT_TRUE(dl["shuffle"].as<bool>());
  EXPECT_EQ(dl["seed"].as<int>(), 1234);
  const YAML::Node cb = y["callbacks"];
  ASSERT_EQ(cb.size(), 2u);
  EXPECT_EQ(cb[0]["type"].as<std::string>(), "MFLossMonitor");
  EXPECT_EQ(cb[0]["per_print_times"].as<int>(), 1);
  EXPECT_EQ(cb[1]["type"].as<std::string>(), "CheckpointMonitor");
  EXPECT_EQ(cb[1]["directory"].as<std::string>(), "./checkpoint_dist");
  EXPECT_EQ(cb[1]["save_checkpoint_steps"].as<int>(), 10000);
  EXPECT_EQ(cb[1]["keep_checkpoint_max"].as<int>(), 0);  // Megatron keeps every checkpoint
  EXPECT_EQ(y["processor"]["tokenizer"]["type"].as<std::string>(), "GPT2Tokenizer");
  EXPECT_EQ(y["processor"]["tokenizer"]["vocab_file"].as<std::string>(), "gpt2-vocab.json");
  EXPECT_EQ(y["processor"]["tokenizer"]["merge_file"].as<std::string>(), "gpt2-merges.txt");
  EXPECT_EQ(y["trainer"]["model_name"].as<std::string>(), "megatron_gpt");
  // What stays approximate is said: fp16's hysteresis, the padding logits (the warm-up is Megatron's exactly).
  EXPECT_FALSE(any_contains(t.differences, "the warmup")) << joined(t.differences);
  EXPECT_TRUE(any_contains(t.differences, "--hysteresis 2")) << joined(t.differences);
  EXPECT_TRUE(any_contains(t.differences, "vocabulary padding (50257 -> 51200)")) << joined(t.differences);
}

TEST(MegatronArgs, DistributedScriptOnItsPipelineOf64Ranks) {
  // TP 8 x PP 8 needs 64 ranks for the pipeline to stay: 24 micro-batches of 4 per step through 8 stages.
  const MegatronTranslation t = translate_megatron_args(kDistributed, kNoEnv, 64);
  ASSERT_TRUE(t.errors.empty()) << joined(t.errors);
  EXPECT_EQ(noted(t).count("--pipeline-model-parallel-size"), 0u);
  const YAML::Node y = YAML::Load(t.yaml);
  EXPECT_EQ(y["parallel_config"]["pipeline_stage"].as<int>(), 8);
  EXPECT_EQ(y["parallel_config"]["data_parallel"].as<int>(), 1);
  EXPECT_EQ(y["parallel_config"]["micro_batch_num"].as<int>(), 24);
  EXPECT_FALSE(y["runner_config"]["gradient_accumulation_steps"]);  // the pipeline's micro-batches accumulate
}

TEST(MegatronArgs, Bf16ScriptWithAscendBand) {
  const MegatronTranslation t = translate_megatron_args(kDistributedBf16, kNoEnv, 8);
  ASSERT_TRUE(t.errors.empty()) << joined(t.errors);
  EXPECT_EQ(noted(t), (std::set<std::string>{"--distributed-backend", "--no-gradient-accumulation-fusion",
                                             "--pipeline-model-parallel-size", "--data-impl", "--shape-order"}))
      << joined(t.notes);
  const YAML::Node y = YAML::Load(t.yaml);
  const YAML::Node mc = y["model"]["model_config"];
  EXPECT_EQ(mc["hidden_size"].as<int>(), 5120);
  EXPECT_EQ(mc["num_heads"].as<int>(), 40);
  EXPECT_EQ(mc["seq_length"].as<int>(), 8192);
  EXPECT_EQ(mc["compute_dtype"].as<std::string>(), "bfloat16");
  EXPECT_EQ(mc["hidden_act"].as<std::string>(), "gelu_new");
  EXPECT_TRUE(mc["use_flash_attention"].as<bool>());
  EXPECT_EQ(mc["pre_tokens"].as<int>(), 2048);  // a band of 2049 tokens: itself and 2048 before
  EXPECT_FALSE(mc["next_tokens"]);
  EXPECT_TRUE(y["parallel_config"]["use_seq_parallel"].as<bool>());
  EXPECT_EQ(y["runner_config"]["gradient_accumulation_steps"].as<int>(), 1);
  EXPECT_FALSE(y["runner_wrapper"]["scale_sense"]);  // bf16: no loss scale
  // 65536 / 65536 (MindSpeed's default band, and next-tockens past the end): the whole causal prefix.
  std::vector<std::string> full = kDistributedBf16;
  for (size_t i = 0; i + 1 < full.size(); ++i)
    if (full[i] == "--pre-tockens" || full[i] == "--next-tockens") full[i + 1] = "65536";
  const MegatronTranslation f = translate_megatron_args(full, kNoEnv, 8);
  ASSERT_TRUE(f.errors.empty()) << joined(f.errors);
  EXPECT_FALSE(YAML::Load(f.yaml)["model"]["model_config"]["pre_tokens"]);
  EXPECT_TRUE(any_contains(f.notes, "`--next-tockens 65536`: GPT's causal mask")) << joined(f.notes);
}

TEST(MegatronArgs, MoeScriptMatchesTheHandWrittenConfig) {
  const MegatronTranslation t = translate_megatron_args(kMoe, {{"CUDA_DEVICE_MAX_CONNECTIONS", "1"}}, 8);
  ASSERT_TRUE(t.errors.empty()) << joined(t.errors);
  EXPECT_EQ(noted(t),
            (std::set<std::string>{"--reuse-fp32-param",
                                   "--use-fused-rotary-pos-emb", "--no-gradient-accumulation-fusion",
                                   "--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--moe-permutation-async-comm",
                                   "--recompute-activation-function", "--swap-attention",
                                   "--recompute-num-layers", "--vocab-size", "--num-workers", "--log-throughput",
                                   "--timing-log-option", "--no-barrier-with-level-1-timing", "--timing-log-level",
                                   "--distributed-backend", "--save-interval", "CUDA_DEVICE_MAX_CONNECTIONS"}))
      << joined(t.notes);
  // configs/moe/pretrain_mindspeed_gpt_moe.yaml, written by hand from the same script.
  const YAML::Node y = YAML::Load(t.yaml);
  const YAML::Node pc = y["parallel_config"];
  EXPECT_EQ(pc["data_parallel"].as<int>(), 4);
  EXPECT_EQ(pc["model_parallel"].as<int>(), 2);
  EXPECT_EQ(pc["expert_parallel"].as<int>(), 2);
  EXPECT_EQ(pc["pipeline_stage"].as<int>(), 1);
  EXPECT_TRUE(pc["use_seq_parallel"].as<bool>());
  EXPECT_EQ(y["runner_config"]["batch_size"].as<int>(), 1);  // 1 x DP 4 = global 4
  EXPECT_EQ(y["runner_config"]["gradient_accumulation_steps"].as<int>(), 1);
  EXPECT_EQ(y["runner_config"]["train_steps"].as<int>(), 1000);
  EXPECT_TRUE(y["parallel"]["enable_parallel_optimizer"].as<bool>());
  EXPECT_DOUBLE_EQ(y["parallel"]["hang_timeout"].as<double>(), 600.0);
  const YAML::Node e = y["moe_config"];
  EXPECT_EQ(e["expert_num"].as<int>(), 4);
  EXPECT_EQ(e["num_experts_chosen"].as<int>(), 2);
  EXPECT_LE(e["capacity_factor"].as<double>(), 0.0);  // dropless
  EXPECT_DOUBLE_EQ(e["aux_loss_factor"].as<double>(), 0.0);
  EXPECT_DOUBLE_EQ(e["z_loss_factor"].as<double>(), 0.0);
  EXPECT_TRUE(e["norm_topk_prob"].as<bool>());
  EXPECT_EQ(e["token_dispatcher"].as<std::string>(), "alltoall");
  EXPECT_EQ(e["moe_layer_freq"].as<int>(), 1);
  EXPECT_FALSE(y["recompute_config"]);
  const YAML::Node mc = y["model"]["model_config"];
  EXPECT_EQ(mc["type"].as<std::string>(), "GPT2Config");
  EXPECT_EQ(mc["num_layers"].as<int>(), 2);
  EXPECT_EQ(mc["hidden_size"].as<int>(), 12288);
  EXPECT_EQ(mc["num_heads"].as<int>(), 96);
  EXPECT_EQ(mc["seq_length"].as<int>(), 8192);
  EXPECT_EQ(mc["max_position_embeddings"].as<int>(), 8192);
  EXPECT_EQ(mc["expand_ratio"].as<int>(), 4);
  EXPECT_EQ(mc["hidden_act"].as<std::string>(), "gelu");  // no biases: no fused bias-GELU, erf
  EXPECT_DOUBLE_EQ(mc["hidden_dropout_rate"].as<double>(), 0.0);
  EXPECT_DOUBLE_EQ(mc["attention_dropout_rate"].as<double>(), 0.0);
  EXPECT_DOUBLE_EQ(mc["initializer_range"].as<double>(), 0.006);
  EXPECT_EQ(mc["compute_dtype"].as<std::string>(), "bfloat16");
  EXPECT_TRUE(mc["use_flash_attention"].as<bool>());
  EXPECT_EQ(mc["position_embedding_type"].as<std::string>(), "rope");
  EXPECT_DOUBLE_EQ(mc["rope_theta"].as<double>(), 10000.0);
  EXPECT_FALSE(mc["add_bias_linear"].as<bool>());
  EXPECT_EQ(t.padded_vocab_size, 50432);
  const YAML::Node lr = y["lr_schedule"];
  EXPECT_EQ(lr["type"].as<std::string>(), "cosine");
  EXPECT_DOUBLE_EQ(lr["learning_rate"].as<double>(), 5.0e-7);
  EXPECT_DOUBLE_EQ(lr["lr_end"].as<double>(), 0.0);
  EXPECT_EQ(lr["warmup_steps"].as<int>(), 0);  // no warmup: step 1 at the peak, as Megatron's first iteration
  EXPECT_EQ(lr["total_steps"].as<int>(), 320000);
  EXPECT_FALSE(any_contains(t.differences, "the warmup"));  // without warmup the schedule is Megatron's exactly
  EXPECT_EQ(y["optimizer"]["weight_decay"].as<double>(), 0.1);
  EXPECT_EQ(y["train_dataset"]["data_loader"]["data_path"].as<std::string>(), "/home/dataset/enwiki/my-t5_text_sentence");
  EXPECT_EQ(y["eval_step_interval"].as<int>(), 10000);
  EXPECT_EQ(y["callbacks"].size(), 1u);  // --save-interval without --save saves nothing
}

TEST(MegatronArgs, LambadaScriptIsAnEvaluation) {
  const MegatronTranslation t = translate_megatron_args(kLambada, kNoEnv, 8);
  ASSERT_TRUE(t.errors.empty()) << joined(t.errors);
  EXPECT_EQ(noted(t), (std::set<std::string>{"--distributed-backend", "--no-gradient-accumulation-fusion",
                                             "--pipeline-model-parallel-size", "--no-load-optim", "--no-load-rng",
                                             "--task"}))
      << joined(t.notes);
  EXPECT_EQ(t.cli_options, (std::vector<std::string>{"--lambada_data", "lambada_test.json"}));
  const YAML::Node y = YAML::Load(t.yaml);
  EXPECT_EQ(y["run_mode"].as<std::string>(), "eval");
  EXPECT_EQ(y["load_checkpoint"].as<std::string>(), "./checkpoint_dist");
  EXPECT_FALSE(y["resume_training"].as<bool>());
  EXPECT_EQ(y["parallel_config"]["pipeline_stage"].as<int>(), 1);  // LAMBADA runs the whole model on a rank
  EXPECT_EQ(y["parallel_config"]["model_parallel"].as<int>(), 8);
  EXPECT_EQ(y["runner_config"]["batch_size"].as<int>(), 8);
  EXPECT_EQ(y["model"]["model_config"]["compute_dtype"].as<std::string>(), "float16");
  EXPECT_EQ(y["processor"]["tokenizer"]["merge_file"].as<std::string>(), "gpt2-merges.txt");
  EXPECT_EQ(y["train_dataset"]["data_loader"]["type"].as<std::string>(), "RandomTokens");
  EXPECT_FALSE(y["lr_schedule"]);
  EXPECT_FALSE(any_contains(t.differences, "the warmup"));
  // --strict-lambada is gridformer's --strict_lambada.
  const MegatronTranslation s = translate_megatron_args(kLambada + words("--strict-lambada"), kNoEnv, 8);
  EXPECT_EQ(s.cli_options, (std::vector<std::string>{"--lambada_data", "lambada_test.json", "--strict_lambada"}));
}

}  // namespace
}  // namespace gf
