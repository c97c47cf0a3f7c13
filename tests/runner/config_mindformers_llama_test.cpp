// MindFormers' own Llama 2 and Mixtral files (r1.0-r1.3, unmodified, tests/data/mindformers) read
// as they are: warnings only, or a named refusal of what is not built and then a load with that key
// overridden; their LlamaConfig keys land in ModelConfig. Mixtral is a LlamaConfig with experts: its
// moe_config lands in ModelConfig::moe as written.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "runner/config/config.h"
#include "runner/config/layout_check.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::has_warning;

std::string data(const std::string& f) { return config_test::mindformers_data(f); }

using config_test::MindFormersFile;

const MindFormersFile kFiles[] = {
    {"r1.0/run_llama2_7b.yaml", "", {}},
    {"r1.3/pretrain_llama2_7b.yaml", "", {}},
    {"r1.3/finetune_llama2_7b.yaml", "`load_checkpoint: {path}/llama2_7b.ckpt`: no such file or directory",
     {"load_checkpoint=\"\""}},
    {"r1.2/pretrain_llama2_70b.yaml", "", {}},
    {"r1.3/pretrain_mixtral-8x7b.yaml", "", {}},
    {"r1.1/finetune_mixtral-8x7b.yaml", "", {}},
    {"r1.3/pretrain_yi_34b.yaml", "`optimizer.type: AdamWeightDecayX`: unknown type", {"optimizer.type=AdamWeightDecay"}},
};

TEST(MindFormersLlamaConfigs, LoadWithWarningsOnlyOrANamedRefusalThenWithTheOverride) {
  for (const auto& f : kFiles) {
    const Config c = config_test::load_mindformers_file(f);
    EXPECT_EQ(c.model.type, "LlamaConfig") << f.file;
    EXPECT_EQ(c.model.arch, "LlamaForCausalLM") << f.file;
  }
}

TEST(MindFormersLlamaConfigs, Llama2KeysReadAsMindFormersMeansThem) {
  const Config c = load_config(data("r1.3/pretrain_llama2_7b.yaml"), {"runner_config.gradient_accumulation_steps=1"});
  const ModelConfig& m = c.model;
  EXPECT_EQ(m.hidden_size, 4096);
  EXPECT_EQ(m.num_layers, 32);
  EXPECT_EQ(m.kv_heads(), 32);  // no n_kv_heads: multi-head
  EXPECT_EQ(m.ffn_hidden(), 11008);  // multiple_of 256
  EXPECT_EQ(m.seq_length, 4096);
  EXPECT_EQ(m.max_position_embeddings, 4096);  // None: seq_length
  EXPECT_EQ(m.vocab_size, 32000);
  EXPECT_DOUBLE_EQ(m.rope_theta, 10000.0);
  EXPECT_EQ(c.compute_dtype, ComputeDtype::kFloat16);
  EXPECT_TRUE(m.use_flash_attention);
  EXPECT_EQ(m.hidden_dropout_rate, 0.0f);
  EXPECT_TRUE(has_warning(c, "`model.model_config.rotary_dtype: float16`: RoPE's sin/cos tables"));
  EXPECT_TRUE(has_warning(c, "`model.model_config.checkpoint_name_or_path: llama2_7b` is not loaded for run_mode train"));
  EXPECT_EQ(c.generation.max_decode_length, 512);  // read for predict (runner/config/read_generation.cpp)
  EXPECT_EQ(c.model_name, "llama2_7b");

  const Config big = load_config(data("r1.2/pretrain_llama2_70b.yaml"), {"parallel_config.pipeline_stage=1"});
  EXPECT_EQ(big.model.kv_heads(), 8);
  EXPECT_EQ(big.model.num_heads, 64);
  EXPECT_EQ(big.model.ffn_hidden(), 28672);  // x 1.3, multiple_of 4096
  EXPECT_EQ(big.parallel.model_parallel, 4);
  EXPECT_TRUE(big.model.use_flash_attention);  // the file's True, with grouped-query heads: the fused core
  EXPECT_FALSE(has_warning(big, "`model.model_config.use_flash_attention: True` with `n_kv_heads: 8`"));
  EXPECT_TRUE(has_warning(big, "`model.model_config.fine_grain_interleave: 2`"));
  // 8 key/value heads split over model_parallel 4; over 16 they would not.
  const int64_t world = big.parallel.data_parallel * big.parallel.model_parallel;
  EXPECT_EQ(layout_error_message(big, static_cast<int>(world)), "");
  const Config mp16 = load_config(data("r1.2/pretrain_llama2_70b.yaml"),
                                  {"parallel_config.pipeline_stage=1", "parallel_config.model_parallel=16"});
  const std::string msg = layout_error_message(mp16, static_cast<int>(16 * mp16.parallel.data_parallel));
  EXPECT_NE(msg.find("`model.model_config.n_kv_heads` (8) is not divisible by `parallel_config.model_parallel` (16)"),
            std::string::npos) << msg;

  const Config ft = load_config(data("r1.3/finetune_llama2_7b.yaml"), {"load_checkpoint=\"\""});
  EXPECT_EQ(ft.run_mode, RunMode::kFinetune);
  EXPECT_EQ(ft.model.ffn_hidden(), 11008);
}

// MindFormers' Mixtral files: a LlamaConfig with moe_config, read as written (r1.3: capacity 1.1, TopkRouterV2,
// enable_sdrop, use_fused_ops_topkrouter; r1.1 writes no use_fused_ops_topkrouter), on 8 ranks with
// expert_parallel 8 once pipeline_stage is 1.
TEST(MindFormersLlamaConfigs, MixtralIsALlamaWithExpertsReadAsWritten) {
  for (const char* f : {"r1.3/pretrain_mixtral-8x7b.yaml", "r1.1/finetune_mixtral-8x7b.yaml"}) {
    const Config c = load_config(data(f), {"parallel_config.pipeline_stage=1"});
    const MoeConfig& e = c.model.moe;
    EXPECT_TRUE(e.enabled()) << f;
    EXPECT_EQ(e.expert_num, 8) << f;
    EXPECT_EQ(e.num_experts_chosen, 2) << f;
    EXPECT_DOUBLE_EQ(e.capacity_factor, 1.1) << f;
    EXPECT_FALSE(e.dropless()) << f;
    EXPECT_DOUBLE_EQ(e.aux_loss_factor, 0.05) << f;
    EXPECT_DOUBLE_EQ(e.z_loss_factor, 0.0) << f;  // MindFormers' default
    EXPECT_TRUE(e.norm_topk_prob) << f;           // MindFormers' default
    EXPECT_EQ(e.routing_policy, "TopkRouterV2") << f;
    EXPECT_FALSE(e.router_bf16) << f;
    EXPECT_EQ(e.moe_layer_freq, 1) << f;  // every layer, as MindFormers' Llama builds MoE
    EXPECT_EQ(c.parallel.expert_parallel, 8) << f;
    EXPECT_EQ(c.parallel.data_parallel, 8) << f;
    EXPECT_EQ(layout_error_message(c, 8), "") << f;
    // enable_sdrop: True is MindFormers' drop order; here token_drop_policy's (one warning naming both).
    EXPECT_TRUE(has_warning(c, "`moe_config.enable_sdrop: True`: MindFormers' TopkRouterV2 drop order")) << f;
    EXPECT_TRUE(has_warning(c, "moe_config.token_drop_policy")) << f;
    // TopkRouterV2 sizes capacity over the data-parallel shard: said once.
    EXPECT_TRUE(has_warning(c, "`moe_config.routing_policy: TopkRouterV2` with `capacity_factor: 1.1`: capacity here is "
                               "ceil(capacity_factor x seq_length x num_experts_chosen / expert_num)")) << f;
    EXPECT_EQ(std::count_if(c.warnings.begin(), c.warnings.end(),
                            [](const std::string& w) { return w.find("TopkRouterV2` with") != std::string::npos; }), 1)
        << f;
    EXPECT_FALSE(has_warning(c, "use_fused_ops_topkrouter")) << f;  // False: nothing to say
    // The Llama keys as for a dense Llama.
    EXPECT_EQ(c.model.kv_heads(), 8) << f;
    EXPECT_EQ(c.model.intermediate_size, 14336) << f;
    EXPECT_EQ(c.model.ffn_hidden(), 14336) << f;
    EXPECT_DOUBLE_EQ(c.model.rope_theta, 1e6) << f;
    EXPECT_EQ(c.model.position_embedding_type, "rope") << f;
    EXPECT_FALSE(c.model.add_bias_linear) << f;
    // Expert parallel 8 needs data_parallel divisible by 8: 4 is refused naming the keys and a value that works.
    const Config dp4 = load_config(data(f), {"parallel_config.pipeline_stage=1", "parallel_config.data_parallel=4"});
    const std::string msg = layout_error_message(dp4, 4);
    EXPECT_NE(msg.find("`parallel_config.data_parallel` (4) is not divisible by `parallel_config.expert_parallel` (8): "
                       "expert parallelism is carved from data parallelism"), std::string::npos) << f << ": " << msg;
    EXPECT_NE(msg.find("use expert_parallel: 4"), std::string::npos) << f << ": " << msg;
    EXPECT_NE(msg.find("a layout that fits 4 rank(s): parallel_config: {data_parallel: 4, model_parallel: 1, "
                       "pipeline_stage: 1, expert_parallel: 4}"), std::string::npos) << f << ": " << msg;
  }
  const Config old = load_config(data("r1.1/finetune_mixtral-8x7b.yaml"), {"parallel_config.pipeline_stage=1"});
  EXPECT_TRUE(has_warning(old, "`model.model_config.pretrain_seqlen: 4096`"));
  EXPECT_TRUE(has_warning(old, "`model.model_config.compute_in_2d: False`"));
  EXPECT_TRUE(has_warning(old, "deprecated by MindFormers r1.1"));
}

}  // namespace
}  // namespace gf
