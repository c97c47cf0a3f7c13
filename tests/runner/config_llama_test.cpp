// MindFormers' LlamaConfig keys as they are: `model.model_config.type: LlamaConfig` picks Llama's
// model section; its built keys land in ModelConfig (None as MindFormers reads it), the others are
// warned about or refused naming the key; a GPT2Config file behaves as it always did; and
// configs/llama/run_llama_tiny.yaml loads as it is.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "runner/config/config.h"
#include "runner/config/layout_check.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::error_of;
using config_test::kMinimal;
using config_test::kMinimalLlama;

const std::string kModelConfig = "model.model_config.";

bool has_warning(const Config& c, const std::string& needle) {
  return std::any_of(c.warnings.begin(), c.warnings.end(), [&](const std::string& w) { return w.find(needle) != std::string::npos; });
}

std::vector<std::string> sets(std::initializer_list<std::string> keys_values) {
  std::vector<std::string> out;
  for (const auto& s : keys_values) out.push_back(kModelConfig + s);
  return out;
}

TEST(LlamaConfigKeys, BuiltKeysLandInModelConfig) {
  const Config c = load_config_string(
      kMinimalLlama, sets({"n_kv_heads=2", "theta=500000", "rms_norm_eps=1e-6", "intermediate_size=176",
                           "multiple_of=32", "ffn_dim_multiplier=1.3", "qkv_has_bias=True", "tie_word_embeddings=True",
                           "max_position_embedding=128", "initializer_range=0.01", "compute_dtype=bfloat16"}));
  const ModelConfig& m = c.model;
  EXPECT_EQ(m.type, "LlamaConfig");
  EXPECT_EQ(m.arch, "LlamaForCausalLM");
  EXPECT_TRUE((m.type == "LlamaConfig"));
  EXPECT_EQ(m.num_kv_heads, 2);
  EXPECT_EQ(m.kv_heads(), 2);
  EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
  EXPECT_FLOAT_EQ(m.rms_norm_eps, 1e-6f);
  EXPECT_EQ(m.intermediate_size, 176);
  EXPECT_EQ(m.ffn_hidden(), 176);  // intermediate_size wins over the derivation
  EXPECT_EQ(m.multiple_of, 32);
  EXPECT_DOUBLE_EQ(m.ffn_dim_multiplier, 1.3);
  EXPECT_TRUE(m.qkv_has_bias);
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_EQ(m.max_position_embeddings, 128);
  EXPECT_FLOAT_EQ(m.initializer_range, 0.01f);
  EXPECT_EQ(c.compute_dtype, ComputeDtype::kBFloat16);
  EXPECT_EQ(m.hidden_dropout_rate, 0.0f);  // MindFormers' Llama has no dropout
  EXPECT_EQ(m.attention_dropout_rate, 0.0f);
  EXPECT_EQ(m.seq_length, 32);
  EXPECT_EQ(m.hidden_size, 64);
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
}

TEST(LlamaConfigKeys, NoneIsWhatMindFormersMakesOfIt) {
  const Config c = load_config_string(kMinimalLlama);
  const ModelConfig& m = c.model;
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
  EXPECT_EQ(m.num_kv_heads, 0);  // n_kv_heads None: multi-head
  EXPECT_EQ(m.kv_heads(), 4);
  EXPECT_EQ(m.max_position_embeddings, 32);  // max_position_embedding None: seq_length
  EXPECT_NE(dump_resolved(c).find("max_position_embedding: 32"), std::string::npos);
  EXPECT_EQ(m.intermediate_size, 0);  // None: 2/3 of 4 h rounded up to multiple_of (256 by default)
  EXPECT_EQ(m.ffn_hidden(), 256);
  EXPECT_DOUBLE_EQ(m.rope_theta, 10000.0);
  EXPECT_FLOAT_EQ(m.rms_norm_eps, 1e-5f);
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_FALSE(m.qkv_has_bias);
  EXPECT_EQ(c.compute_dtype, ComputeDtype::kFloat32);
  EXPECT_EQ(c.model_name, "llama");
  // The SwiGLU width as MindFormers' LlamaFeedForward derives it: Llama 2 7B (hidden 4096,
  // multiple_of 256); Llama 2 70B as MindFormers' files write it (8192, x1.3, multiple_of 256: its
  // multiplier, plus 0.01, comes before the 2/3; Meta's order would give 28416) and as Meta's
  // params.json does (multiple_of 4096); Llama 3 8B (4096, x1.3, 1024).
  const auto width = [](std::initializer_list<std::string> s) { return load_config_string(kMinimalLlama, sets(s)).model.ffn_hidden(); };
  EXPECT_EQ(width({"hidden_size=4096", "num_heads=32"}), 11008);
  EXPECT_EQ(width({"hidden_size=8192", "num_heads=64", "ffn_dim_multiplier=1.3", "multiple_of=256"}), 28672);
  EXPECT_EQ(width({"hidden_size=8192", "num_heads=64", "ffn_dim_multiplier=1.3", "multiple_of=4096"}), 28672);
  EXPECT_EQ(width({"hidden_size=4096", "num_heads=32", "ffn_dim_multiplier=1.3", "multiple_of=1024"}), 14336);
  EXPECT_EQ(width({"hidden_size=256", "multiple_of=64"}), 704);
}

TEST(LlamaConfigKeys, TheResolvedConfigLoadsBackToTheSameSettings) {
  const Config a = load_config_string(kMinimalLlama, sets({"n_kv_heads=2", "multiple_of=32", "theta=1e6"}));
  const std::string text = dump_resolved(a);
  const Config b = load_config_string(text);
  EXPECT_TRUE(static_cast<const Settings&>(a) == static_cast<const Settings&>(b));
  EXPECT_EQ(dump_resolved(b), text);
  EXPECT_TRUE(b.warnings.empty());
}

TEST(LlamaConfigKeys, BadValuesAreRefusedNamingTheKey) {
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {sets({"n_kv_heads=3"}), "--set model.model_config.n_kv_heads=3: must divide `num_heads` (4)"},
      {sets({"n_kv_heads=0"}), "--set model.model_config.n_kv_heads=0: expects an integer > 0, or ~ (num_heads"},
      {sets({"n_kv_heads=None"}), "expects an integer > 0, or ~ (num_heads; YAML's null is MindFormers' None)"},
      {sets({"intermediate_size=-1"}), "--set model.model_config.intermediate_size=-1: expects an integer > 0"},
      {sets({"ffn_dim_multiplier=0"}), "--set model.model_config.ffn_dim_multiplier=0: expects a number > 0"},
      {sets({"multiple_of=0"}), "--set model.model_config.multiple_of=0: must be > 0"},
      {sets({"theta=0"}), "--set model.model_config.theta=0: must be > 0 (RoPE's base)"},
      {sets({"rms_norm_eps=0"}), "--set model.model_config.rms_norm_eps=0: must be > 0"},
      {sets({"max_position_embedding=16"}),
       "`model.model_config.seq_length: 32` is longer than the RoPE table `max_position_embedding: 16`; raise "
       "max_position_embedding (~: seq_length) or lower seq_length"},
      {sets({"hidden_size=60", "num_heads=4"}), "gives heads of 15 dimensions; RoPE rotates pairs of them"},
      {sets({"rotary_dtype=int8"}), "--set model.model_config.rotary_dtype=int8: expects float32, float16 or bfloat16"},
      {sets({"embedding_init_type=int8"}), "expects float32, float16 or bfloat16, or ~ (param_init_type's)"},
      {sets({"use_flash_attention=sometimes"}), "expects True, False or auto"},
  };
  for (const auto& [s, msg] : cases) {
    const std::string e = error_of(kMinimalLlama, s);
    EXPECT_NE(e.find(msg), std::string::npos) << s.back() << ": " << e;
  }
  EXPECT_EQ(error_of(kMinimalLlama, sets({"num_heads=32"})), "");  // heads of 2 dimensions: even
}

TEST(LlamaConfigKeys, UnbuiltFeaturesAreRefusedWithWhatToDo) {
  const std::pair<std::string, const char*> cases[] = {
      {"extend_method=PI", "MindFormers' names for RoPE scaling (PI, NTK, YaRN, LLAMA3) are not read; use extend_method: \"None\""},
      {"extend_method=NTK", "give Hugging Face's rope_scaling map"},
      {"quant=w8a16", "quantization is not built yet; use quant: \"\""},
      {"quant_config={weight_dtype: int8}", "quantization is not built yet; remove model.model_config.quant_config"},
      {"pet_config={pet_type: lora, lora_rank: 8, lora_dropout: 1.5, target_modules: '.*wq'}",
       "expects a rate in [0, 1)"},
      {"pet_config={pet_type: prefix_tuning}", "only LoRA is built (pet_type: lora)"},
  };
  for (const auto& [set, fix] : cases) {
    const std::string e = error_of(kMinimalLlama, {kModelConfig + set});
    EXPECT_NE(e.find("--set " + kModelConfig + set + ": "), std::string::npos) << set << ": " << e;
    EXPECT_NE(e.find(fix), std::string::npos) << set << ": " << e;
  }
  // A LlamaConfig with experts is Mixtral-style MoE, GPT2Config's GPT-2 MoE: the moe keys are read for both
  // (tests/runner/config_moe_test.cpp).
  const Config mixtral = load_config_string(kMinimalLlama, {"moe_config.expert_num=8", "moe_config.num_experts_chosen=2"});
  EXPECT_EQ(mixtral.model.moe.expert_num, 8);
  EXPECT_TRUE(mixtral.model.moe.enabled());
  EXPECT_TRUE(mixtral.warnings.empty()) << mixtral.warnings.front();
  EXPECT_EQ(load_config_string(kMinimal, {"moe_config.expert_num=8"}).model.moe.expert_num, 8);
}

TEST(LlamaConfigKeys, WarningsNameTheKeyAndSayWhatHappens) {
  const std::pair<std::string, const char*> cases[] = {
      {"rotary_dtype=float16", "`model.model_config.rotary_dtype: float16`: RoPE's sin/cos tables and rotation are "
                               "computed in float32"},
      {"embedding_init_type=bfloat16", "`model.model_config.embedding_init_type: bfloat16`: the embedding, like every "
                                       "master weight"},
      {"layernorm_compute_type=float16", "`model.model_config.layernorm_compute_type: float16`: RMSNorm is computed in "
                                         "float32"},
      {"scaling_factor=2.0", "`model.model_config.scaling_factor: 2.0`: MindFormers' FreqsMgr reads scaling_factor only "
                             "for an extend_method"},
      {"scaling_factor={factor: 8.0, original_max_position_embeddings: 8192}", "`model.model_config.scaling_factor: "},
      {"qkv_concat=True", "`model.model_config.qkv_concat: True`: how MindSpore stores the q, k, v projections"},
      {"fine_grain_interleave=2", "`model.model_config.fine_grain_interleave: 2`: splits each layer on Ascend"},
      {"use_rope_slice=True", "`model.model_config.use_rope_slice: True`"},
      {"use_attn_mask_compression=True", "`model.model_config.use_attn_mask_compression: True`"},
      {"use_ring_attention=True", "each rank here attends over the whole sequence"},
      {"is_dynamic=True", "`model.model_config.is_dynamic: True`"},
      {"parallel_optimizer=True", "ZeRO-1 here is parallel.enable_parallel_optimizer"},
      {"num_blocks=1024", "`model.model_config.num_blocks: 1024`: a MindFormers generation setting that gridformer "
                          "predict does not use"},
      {"pad_token_id=50256", "`model.model_config.pad_token_id: 50256`: not used in training: every token is a target "
                             "and is attended to (MindFormers' Llama leaves input tokens equal to pad_token_id out"},
      {"ignore_token_id=0", "MindFormers masks labels equal to it only when a dataset gives a labels column"},
      {"pretrain_seqlen=4096", "`model.model_config.pretrain_seqlen: 4096`: deprecated by MindFormers r1.1"},
      {"checkpoint_name_or_path=llama2_7b", "`model.model_config.checkpoint_name_or_path: llama2_7b` is not loaded for "
                                            "run_mode train"},
  };
  for (const auto& [set, msg] : cases) {
    const Config c = load_config_string(kMinimalLlama, {kModelConfig + set});
    EXPECT_TRUE(has_warning(c, msg)) << set << ": " << (c.warnings.empty() ? "no warning" : c.warnings.front());
  }
  // A hub name in eval mode: refused, saying which weights to give.
  const std::string e = error_of(kMinimalLlama, {"run_mode=eval", kModelConfig + "checkpoint_name_or_path=llama2_7b"});
  EXPECT_NE(e.find("no hub at run time: convert/download weights (a Hugging Face Llama .safetensors or its directory)"),
            std::string::npos) << e;
}

TEST(LlamaConfigKeys, FlashAttentionTakesGroupedQueryHeads) {
  const std::string longer = kModelConfig + "seq_length=" + std::to_string(kFlashAttentionAutoMinSeq);
  EXPECT_TRUE(load_config_string(kMinimalLlama, {longer}).model.use_flash_attention);  // auto, multi-head
  EXPECT_FALSE(load_config_string(kMinimalLlama).model.use_flash_attention);            // auto, short
  const Config gqa = load_config_string(kMinimalLlama, {longer, kModelConfig + "n_kv_heads=2"});
  EXPECT_TRUE(gqa.model.use_flash_attention);  // auto: the fused core reads grouped-query heads
  EXPECT_TRUE(gqa.warnings.empty());
  const Config asked = load_config_string(kMinimalLlama, {kModelConfig + "n_kv_heads=2", kModelConfig + "use_flash_attention=True"});
  EXPECT_TRUE(asked.model.use_flash_attention);
  EXPECT_TRUE(asked.warnings.empty());
  EXPECT_FALSE(load_config_string(kMinimalLlama, {longer, kModelConfig + "n_kv_heads=2",
                                                  kModelConfig + "use_flash_attention=False"}).model.use_flash_attention);
}

TEST(LlamaConfigKeys, TheModelTypePicksTheSchemaAndGptTwoStaysAsItWas) {
  // A GPT-2 file knows no Llama key, as before.
  std::string e = error_of(kMinimal, {kModelConfig + "n_kv_heads=2"});
  EXPECT_NE(e.find("--set model.model_config.n_kv_heads=2: unknown key; did you mean `num_heads`?"), std::string::npos) << e;
  e = error_of(kMinimal, {kModelConfig + "theta=10000"});
  EXPECT_NE(e.find("unknown key"), std::string::npos) << e;
  EXPECT_EQ(load_config_string(kMinimal).model_name, "gpt2");
  // An override can name the type: the Llama schema then applies, and the arch must go with it.
  e = error_of(kMinimal, {kModelConfig + "type=LlamaConfig"});
  EXPECT_NE(e.find("model.model_config.type: 'LlamaConfig' does not go with arch GPT2LMHeadModel; use GPT2Config"),
            std::string::npos) << e;
  EXPECT_EQ(error_of(kMinimal, {kModelConfig + "type=LlamaConfig", "model.arch.type=LlamaForCausalLM"}), "");
  const Config c = load_config_string(kMinimal, {kModelConfig + "type=LlamaConfig", "model.arch.type=LlamaForCausalLM",
                                                 kModelConfig + "n_kv_heads=2"});
  EXPECT_EQ(c.model.num_kv_heads, 2);
  // Without an arch, a LlamaConfig is a LlamaForCausalLM.
  const Config bare = load_config_string("model: {model_config: {type: LlamaConfig, num_layers: 2, hidden_size: 64, "
                                         "num_heads: 4, seq_length: 32, vocab_size: 100}}\n");
  EXPECT_EQ(bare.model.arch, "LlamaForCausalLM");
}

TEST(LlamaTinyConfig, LoadsAsItIsAndSplitsOverTwoRanks) {
  const Config c = load_config(std::string(GF_SOURCE_DIR) + "/configs/llama/run_llama_tiny.yaml");
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
  const ModelConfig& m = c.model;
  EXPECT_EQ(m.arch, "LlamaForCausalLM");
  EXPECT_EQ(m.num_layers, 4);
  EXPECT_EQ(m.hidden_size, 256);
  EXPECT_EQ(m.num_heads, 8);
  EXPECT_EQ(m.kv_heads(), 2);
  EXPECT_EQ(m.ffn_hidden(), 704);
  EXPECT_DOUBLE_EQ(m.rope_theta, 10000.0);
  EXPECT_EQ(m.seq_length, 256);
  EXPECT_GE(m.vocab_size, 50257);  // the default corpus's GPT-2 ids
  EXPECT_EQ(c.batch_size, 8);
  // The same data, optimizer, schedule and callbacks as the tiny GPT-2.
  const Config gpt2 = load_config(std::string(GF_SOURCE_DIR) + "/configs/gpt2/run_gpt2_tiny.yaml");
  EXPECT_TRUE(c.train_data == gpt2.train_data);
  EXPECT_TRUE(c.adamw == gpt2.adamw);
  EXPECT_TRUE(c.lr == gpt2.lr);
  EXPECT_EQ(c.optimizer_type, gpt2.optimizer_type);
  EXPECT_EQ(c.train_steps, gpt2.train_steps);
  EXPECT_EQ(c.per_print_times, gpt2.per_print_times);
  EXPECT_EQ(c.seed, gpt2.seed);
  EXPECT_EQ(layout_error_message(c, 1), "");
  EXPECT_EQ(layout_error_message(load_config(std::string(GF_SOURCE_DIR) + "/configs/llama/run_llama_tiny.yaml",
                                             {"parallel_config.model_parallel=2"}), 2), "");
}

}  // namespace
}  // namespace gf
