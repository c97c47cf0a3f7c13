// Megatron-LM / MindSpeed arguments into our YAML (runner/config/megatron_args.h): the four reference job
// scripts of tests/data/megatron/ (the users' own, unmodified) translated key by key, the vocabulary padding, the derived
// gradient accumulation, the schedule against Megatron's own (transcribed below), and the refusals.
// The YAML is parsed back with yaml-cpp here; loading it through gf::load_config_string needs the runner
// library and is another test's.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/optim/lr_schedule.h"
#include "runner/config/megatron_args.h"

namespace gf {
namespace {

// An argument list as the shell splits it.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string w; in >> w;) v.push_back(w);
  return v;
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The arguments the notes are about: the first word between the first pair of backticks.
std::set<std::string> noted(const MegatronTranslation& t) {
  std::set<std::string> s;
  for (const std::string& n : t.notes) {
    const size_t b = n.find('`'), e = n.find_first_of(" `=", b + 1);
    s.insert(n.substr(b + 1, e - b - 1));
  }
  return s;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "\n";
  return s;
}

bool any_contains(const std::vector<std::string>& v, const std::string& part) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& x) { return x.find(part) != std::string::npos; });
}

// pretrain_gpt_distributed.sh (DATA_PATH, CHECKPOINT_PATH substituted); WORLD_SIZE 8.
const std::vector<std::string> kDistributed = words(R"(
       --num-layers 8 --hidden-size 12288 --num-attention-heads 96 --micro-batch-size 4 --global-batch-size 96
       --seq-length 1024 --max-position-embeddings 1024 --train-iters 500000 --lr-decay-iters 320000
       --save ./checkpoint_dist --load ./checkpoint_dist --data-path ../dataset/enwiki/my-t5_text_sentence
       --tensor-model-parallel-size 8 --use-distributed-optimizer --pipeline-model-parallel-size 8
       --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt --data-impl mmap --split 949,50,1
       --distributed-backend nccl --lr 0.375e-5 --lr-decay-style cosine --min-lr 0.375e-6 --weight-decay 0.1
       --clip-grad 1.0 --lr-warmup-fraction .01 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006
       --recompute-granularity full --recompute-method uniform --no-gradient-accumulation-fusion --log-interval 1
       --save-interval 10000 --eval-interval 1000 --eval-iters 10 --fp16)");

// pretrain_gpt_distributed_bf16.sh with --pre-tockens=2048 --next-tockens=0 --shape-order=SBH given to it.
const std::vector<std::string> kDistributedBf16 = words(R"(
       --num-layers 8 --hidden-size 5120 --num-attention-heads 40 --micro-batch-size 2 --global-batch-size 2
       --seq-length 8192 --max-position-embeddings 8192 --train-iters 500000 --lr-decay-iters 320000
       --save ./checkpoint_dist --load ./checkpoint_dist --data-path ../dataset/enwiki/my-t5_text_sentence
       --tensor-model-parallel-size 8 --use-distributed-optimizer --pipeline-model-parallel-size 8
       --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt --data-impl mmap --split 949,50,1
       --distributed-backend nccl --lr 0.375e-5 --lr-decay-style cosine --min-lr 0.375e-6 --weight-decay 0.1
       --clip-grad 1.0 --lr-warmup-fraction .01 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006
       --no-gradient-accumulation-fusion --use-flash-attn --pre-tockens 2048 --next-tockens 0 --shape-order SBH
       --sequence-parallel --log-interval 1 --save-interval 10000 --eval-interval 1000 --eval-iters 10 --bf16)");

// pretrain_gpt_megatron_moe_8k.sh: GPT_ARGS, MOE_ARGS, RECOMPUTE_ARGS, DATA_ARGS, OUTPUT_ARGS and the rest,
// in the order torchrun passes them; TP=2 PP=1 EP=2, WORLD_SIZE 8, CUDA_DEVICE_MAX_CONNECTIONS=1.
const std::vector<std::string> kMoe = words(R"(
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 --disable-bias-linear --reuse-fp32-param
    --use-mcore-models --use-distributed-optimizer --overlap-grad-reduce --use-fused-rotary-pos-emb
    --sequence-parallel --num-layers 2 --hidden-size 12288 --num-attention-heads 96 --seq-length 8192
    --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 4 --train-iters 1000 --lr 5.0e-7
    --lr-decay-iters 320000 --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9
    --adam-beta2 0.95 --init-method-std 0.006 --no-gradient-accumulation-fusion --use-flash-attn
    --position-embedding-type rope --no-bias-gelu-fusion --no-bias-dropout-fusion --attention-dropout 0.0
    --hidden-dropout 0.0 --bf16
    --expert-model-parallel-size 2 --moe-model-type megatron_moe --num-experts 4 --moe-permutation-async-comm
    --moe-grouped-gemm --moe-token-dispatcher-type alltoall --moe-router-topk 2
    --recompute-activation-function --swap-attention --recompute-num-layers 1
    --data-path /home/dataset/enwiki/my-t5_text_sentence --vocab-file /home/dataset/enwiki/gpt2-vocab.json
    --merge-file /home/dataset/enwiki/gpt2-merges.txt --vocab-size 50257 --num-workers 4 --split 949,50,1
    --log-interval 1 --save-interval 10000 --eval-interval 10000 --eval-iters 10 --log-throughput
    --timing-log-option max --no-barrier-with-level-1-timing --timing-log-level 0
    --distributed-backend nccl --distributed-timeout-minutes 10 --seed 1234)");

// test_gpt_distributed.sh: tasks/main.py's LAMBADA with COMMON_TASK_ARGS; WORLD_SIZE 8.
const std::vector<std::string> kLambada = words(R"(
       --task LAMBADA
       --num-layers 8 --hidden-size 12288 --num-attention-heads 96 --seq-length 1024 --max-position-embeddings 1024
       --tensor-model-parallel-size 8 --use-distributed-optimizer --pipeline-model-parallel-size 8
       --distributed-backend nccl --recompute-granularity full --recompute-method uniform
       --no-gradient-accumulation-fusion --vocab-file gpt2-vocab.json --fp16
       --valid-data lambada_test.json --tokenizer-type GPT2BPETokenizer --merge-file gpt2-merges.txt
       --load ./checkpoint_dist --micro-batch-size 8 --log-interval 10 --no-load-optim --no-load-rng)");

const std::map<std::string, std::string> kNoEnv;

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
            (std::set<std::string>{"--reuse-fp32-param", "--use-mcore-models", "--overlap-grad-reduce",
                                   "--use-fused-rotary-pos-emb", "--no-gradient-accumulation-fusion",
                                   "--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--moe-permutation-async-comm",
                                   "--moe-grouped-gemm", "--recompute-activation-function", "--swap-attention",
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
