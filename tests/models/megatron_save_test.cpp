// Which Megatron layout a model is written in, and what each refuses before anything is written
// (models/weights/megatron_save.h); the layouts' contents are tests/integration/megatron_out.sh's.
#include <gtest/gtest.h>

#include <string>

#include "models/weights/megatron_save.h"
#include "runner/config/config.h"

namespace gf {
namespace {

ModelConfig shipped_model(const std::string& file) { return load_config(std::string(GF_SOURCE_DIR) + "/configs/" + file).model; }

std::string problem_of(const ModelConfig& m, MegatronSaveOptions o) { return megatron_save_problem(m, o); }

TEST(MegatronSave, GptTwoIsMegatronModelsUnlessCoreIsAsked) {
  const ModelConfig gpt2 = shipped_model("gpt2/run_gpt2_tiny.yaml");
  MegatronSaveOptions o;
  EXPECT_FALSE(megatron_writes_core(gpt2, o));
  o.core = true;
  EXPECT_TRUE(megatron_writes_core(gpt2, o));
  EXPECT_EQ(problem_of(gpt2, o), "");
}

TEST(MegatronSave, LlamaAndMixtralAreCoresAndSplitByGroupsAndExperts) {
  const ModelConfig llama = shipped_model("llama/run_llama_tiny.yaml"), mixtral = shipped_model("moe/run_mixtral_tiny.yaml");
  MegatronSaveOptions o;
  EXPECT_TRUE(megatron_writes_core(llama, o));
  o.tp = 2;
  EXPECT_EQ(problem_of(llama, o), "");  // 2 query groups over 2 ranks
  o.tp = 4;
  EXPECT_NE(problem_of(llama, o).find("the 2 query groups (key/value heads) are not divisible by the tensor-parallel size 4"),
            std::string::npos);
  o.tp = 1;
  o.ep = 2;
  EXPECT_NE(problem_of(llama, o).find("needs experts"), std::string::npos);
  EXPECT_EQ(problem_of(mixtral, o), "");
  o.grouped_gemm = true;
  EXPECT_EQ(problem_of(mixtral, o), "");  // no biases: GroupedMLP holds them all
  o.ep = 3;
  EXPECT_NE(problem_of(mixtral, o).find("num_experts 4 is not divisible by the expert-parallel size 3"), std::string::npos);
}

TEST(MegatronSave, GroupedExpertsWithBiasesAreRefused) {
  // GPT-2 MoE's experts carry biases, which core_r0.6.0's GroupedMLP cannot hold; as local_experts they are written.
  const ModelConfig moe = shipped_model("moe/run_gpt2_moe_tiny.yaml");  // every layer MoE, as core_r0.6.0 makes them
  MegatronSaveOptions o;
  ASSERT_TRUE(megatron_writes_core(moe, o));
  EXPECT_EQ(problem_of(moe, o), "");
  o.grouped_gemm = true;
  EXPECT_NE(problem_of(moe, o).find("GroupedMLP's weight1 / weight2 hold no biases"), std::string::npos);
}

}  // namespace
}  // namespace gf
