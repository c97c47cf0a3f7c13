// Megatron-LM checkpoints (models/weights/megatron_checkpoint.h) of tests/golden/megatron, which
// tools/make_megatron_golden.py wrote with torch.save from Megatron's own layouts (legacy checkpoint
// versions 0, 1.0, 2.0 and 3.0; Megatron-core with local and Transformer Engine names; Llama-style GQA
// and SwiGLU; MoE per expert and grouped; TP, PP, virtual PP and EP shards): each loads through the
// normal path (the config's load_checkpoint, CausalLM::load_hf_checkpoint) into weights equal bit for bit
// to the same model's Hugging Face safetensors; a pipeline stage takes its share; args that differ from
// the configured model, a pickle naming os.system, a missing shard, a tensor no rule maps and a
// parameter no tensor gives are refused naming what is wrong.
#include "models/weights/megatron_checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "models/arch/gpt2.h"
#include "models/pipeline_stage.h"
#include "models/registry.h"
#include "runner/config/config.h"
#include "tests/test_util.h"

namespace gf {
namespace {

namespace fs = std::filesystem;

// A file under tests/golden/megatron/ (named apart from golden_case::golden, which other files of its unity batch use).
std::string megatron_golden(const std::string& n) {
  return std::string(GF_SOURCE_DIR) + "/tests/golden/megatron/" + n;
}

// A fresh directory per test (ctest runs the tests of this binary as concurrent processes).
fs::path work_dir() { return test::fresh_dir(fs::path(GF_BINARY_DIR) / "test_output" / "megatron" / test::test_name()); }

using test::message_of;

// The model of `yaml` (tests/golden/megatron/*.yaml) with load_checkpoint set, as the trainer reads it.
struct Loaded {
  Config cfg;
  ParallelContext ctx = ParallelContext::single();
  std::unique_ptr<CausalLM> model;
  std::string note;

  Loaded(const std::string& yaml, const std::string& checkpoint, std::vector<std::string> overrides = {}) {
    overrides.push_back("load_checkpoint=" + checkpoint);
    cfg = load_config(megatron_golden(yaml), overrides);
    model = build_model(cfg.model, model_layout(cfg), 1, ctx);
    note = model->load_hf_checkpoint(cfg.load_checkpoint);
  }
};

// Every parameter of `a` equals `b`'s bit for bit (and so does the whole arena, padding included).
void expect_same_weights(CausalLM& a, CausalLM& b, const std::string& what) {
  ASSERT_EQ(a.params().total_floats(), b.params().total_floats()) << what;
  for (const TensorPlacement& t : a.params().tensors()) {
    const TensorPlacement& u = b.params().at(t.spec->name);
    ASSERT_EQ(t.numel(), u.numel()) << what << ": " << t.spec->name;
    EXPECT_EQ(std::memcmp(a.weights() + t.offset, b.weights() + u.offset, sizeof(float) * t.numel()), 0)
        << what << ": " << t.spec->name << " differs";
  }
  EXPECT_EQ(std::memcmp(a.weights(), b.weights(), sizeof(float) * a.params().total_floats()), 0) << what;
}

struct Case {
  const char* dir;
  const char* yaml;
  const char* safetensors;
  const char* note;  // what the load's note must say
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.dir;
}

class MegatronGolden : public ::testing::TestWithParam<Case> {};

TEST_P(MegatronGolden, LoadsTheWeightsOfTheHuggingFaceFile) {
  const Case& k = GetParam();
  Loaded megatron(k.yaml, megatron_golden(k.dir));
  Loaded hf(k.yaml, megatron_golden(k.safetensors));
  EXPECT_EQ(hf.note, "");
  expect_same_weights(*megatron.model, *hf.model, k.dir);
  EXPECT_NE(megatron.note.find(k.note), std::string::npos) << megatron.note;
}

INSTANTIATE_TEST_SUITE_P(
    Megatron, MegatronGolden,
    ::testing::Values(
        Case{"legacy_v0_tp1", "gpt2.yaml", "gpt2.safetensors",
             "iteration 500 (checkpoint_version 0), 1 shard file(s) of TP 1 x PP 1"},
        Case{"legacy_v1_tp2", "gpt2.yaml", "gpt2.safetensors", "(checkpoint_version 1), 2 shard file(s) of TP 2 x PP 1"},
        Case{"legacy_v2_tp2_pp2", "gpt2.yaml", "gpt2.safetensors",
             "iteration 2000 (checkpoint_version 2), 4 shard file(s) of TP 2 x PP 2; skipped 0 _extra_state entries, 2 tied "
             "output-layer copies"},
        Case{"legacy_v3_pp2_vp2", "gpt2.yaml", "gpt2.safetensors",
             "2 shard file(s) of TP 1 x PP 2 x VP 2; skipped 0 _extra_state entries, 1 tied"},
        Case{"legacy_v3_release_bf16", "gpt2.yaml", "gpt2.safetensors", "iteration release (checkpoint_version 3)"},
        Case{"core_gpt_local_tp2", "gpt2.yaml", "gpt2.safetensors", "TP 2 x PP 1; skipped 34 _extra_state entries"},
        Case{"core_gpt_te_tp2", "gpt2.yaml", "gpt2.safetensors", "TP 2 x PP 1; skipped 42 _extra_state entries"},
        Case{"core_llama_te_tp2", "llama.yaml", "llama.safetensors", "TP 2 x PP 1; skipped 22 _extra_state entries, 0 tied output-layer copies and 0 expert-parallel copies of dense tensors (and 2 rotary_pos_emb.inv_freq buffers)"},
        Case{
            "core_moe_ep2", "mixtral.yaml", "mixtral.safetensors",
            "TP 1 x PP 1 x EP 2; skipped 26 _extra_state entries, 0 tied output-layer copies and 13 expert-parallel copies"},
        Case{"core_moe_grouped_ep2", "mixtral.yaml", "mixtral.safetensors", "x EP 2; skipped 10 _extra_state entries"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.dir); });

TEST(MegatronCheckpoint, AnIterationDirectoryARankDirectoryOrAShardFileNamesTheSameCheckpoint) {
  const std::string root = megatron_golden("legacy_v2_tp2_pp2");
  EXPECT_TRUE(is_megatron_checkpoint(root));
  EXPECT_TRUE(is_megatron_checkpoint(root + "/"));
  EXPECT_TRUE(is_megatron_checkpoint(root + "/iter_0002000"));
  EXPECT_TRUE(is_megatron_checkpoint(root + "/iter_0002000/mp_rank_01_001"));
  EXPECT_TRUE(is_megatron_checkpoint(root + "/iter_0002000/mp_rank_01_001/model_optim_rng.pt"));
  EXPECT_TRUE(is_megatron_checkpoint(megatron_golden("legacy_v3_release_bf16/release")));
  EXPECT_FALSE(is_megatron_checkpoint(megatron_golden("gpt2.safetensors")));
  EXPECT_FALSE(is_megatron_checkpoint(megatron_golden("")));
  EXPECT_FALSE(is_megatron_checkpoint(megatron_golden("no_such_dir")));

  const MegatronCheckpointFiles f = find_megatron_shards(root + "/iter_0002000/mp_rank_01_001/model_optim_rng.pt");
  EXPECT_EQ(f.iteration, "2000");
  EXPECT_EQ(f.tp, 2);
  EXPECT_EQ(f.pp, 2);
  EXPECT_EQ(f.ep, 1);
  ASSERT_EQ(f.shards.size(), 4u);
  EXPECT_EQ(f.shards[1].file, root + "/iter_0002000/mp_rank_01_000/model_optim_rng.pt");
  EXPECT_EQ(f.shards[2].pp, 1);

  Loaded whole("gpt2.yaml", root);
  for (const std::string& other : {root + "/iter_0002000", root + "/iter_0002000/mp_rank_00_001/model_optim_rng.pt"}) {
    Loaded again("gpt2.yaml", other);
    expect_same_weights(*again.model, *whole.model, other);
  }
}

TEST(MegatronCheckpoint, APipelineStageTakesItsShare) {
  Loaded whole("gpt2.yaml", megatron_golden("core_gpt_te_tp2"));
  const ModelConfig& cfg = whole.cfg.model;
  ParallelContext ctx = ParallelContext::single();
  // The last two layers, the final norm and the tied head.
  PipelineStage stage(gpt2_spec(cfg), gpt2_name, cfg, ModelLayout{}, 1, ctx, {StageOptions{2, 4}});
  stage.load_hf_checkpoint(megatron_golden("legacy_v2_tp2_pp2"));
  for (const TensorPlacement& t : stage.params().tensors()) {
    const TensorPlacement& w = whole.model->params().at(t.spec->name);
    ASSERT_EQ(t.numel(), w.numel()) << t.spec->name;
    EXPECT_EQ(std::memcmp(stage.weights() + t.offset, whole.model->weights() + w.offset, sizeof(float) * t.numel()), 0)
        << t.spec->name;
  }
}

TEST(MegatronCheckpoint, ArgsThatDifferFromTheModelAreRefusedAllInOneMessage) {
  const std::string path = megatron_golden("legacy_v2_tp2_pp2");
  std::string m = message_of([&] { Loaded("gpt2.yaml", path, {"model.model_config.num_layers=3"}); });
  EXPECT_NE(m.find(path + "/iter_0002000/mp_rank_00_000/model_optim_rng.pt: the checkpoint's args describe another model"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("`num_layers`: the checkpoint's 4, the configured model's 3 (model_config.num_layers)"),
            std::string::npos)
      << m;

  m = message_of([&] {
    Loaded("gpt2.yaml", path,
           {"model.model_config.num_layers=2", "model.model_config.vocab_size=120",
            "model.model_config.max_position_embeddings=64"});
  });
  EXPECT_NE(m.find("`num_layers`: the checkpoint's 4, the configured model's 2"), std::string::npos) << m;
  EXPECT_NE(
      m.find("`padded_vocab_size`: the checkpoint's 112, the configured model's 128 (model_config.vocab_size 120 padded to "
             "a multiple of make_vocab_size_divisible_by 8 x tensor_model_parallel_size 2"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("`max_position_embeddings`: the checkpoint's 32, the configured model's 64"), std::string::npos) << m;
  EXPECT_NE(m.find("Set the config's keys to the checkpoint's values"), std::string::npos) << m;

  // A Llama checkpoint is not a GPT-2.
  m = message_of([&] { Loaded("gpt2.yaml", megatron_golden("core_llama_te_tp2"), {"model.model_config.num_layers=2"}); });
  for (const char* key : {"`normalization`: the checkpoint's RMSNorm, the configured model's LayerNorm",
                          "`swiglu`: the checkpoint's True", "`position_embedding_type`: the checkpoint's rope",
                          "`num_query_groups`: the checkpoint's 2, the configured model's 4", "`add_bias_linear`",
                          "`untie_embeddings_and_output_weights`"})
    EXPECT_NE(m.find(key), std::string::npos) << key << "\n" << m;

  // Mixtral's experts and top-k.
  m = message_of([&] { Loaded("mixtral.yaml", megatron_golden("core_moe_ep2"), {"moe_config.expert_num=8"}); });
  EXPECT_NE(m.find("`num_experts`: the checkpoint's 4, the configured model's 8 (moe_config.expert_num)"), std::string::npos)
      << m;
  m = message_of([&] { Loaded("mixtral.yaml", megatron_golden("core_moe_ep2"), {"moe_config.num_experts_chosen=1"}); });
  EXPECT_NE(m.find("`moe_router_topk`: the checkpoint's 2, the configured model's 1"), std::string::npos) << m;
}

TEST(MegatronCheckpoint, APickleNamingOsSystemIsRefusedNamingTheGlobal) {
  const fs::path cwd = fs::current_path();
  const std::string m = message_of([&] { Loaded("gpt2.yaml", megatron_golden("malicious")); });
  EXPECT_NE(m.find(megatron_golden("malicious/iter_0000001/mp_rank_00/model_optim_rng.pt")), std::string::npos) << m;
  EXPECT_NE(m.find("posix.system"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(cwd / "gf_megatron_MARKER"));
}

TEST(MegatronCheckpoint, AMissingShardIsRefusedNamingIt) {
  const fs::path dir = work_dir() / "ckpt";
  fs::copy(megatron_golden("core_gpt_local_tp2"), dir, fs::copy_options::recursive);
  fs::remove_all(dir / "iter_0001000" / "mp_rank_01");
  const std::string m = message_of([&] { Loaded("gpt2.yaml", dir.string()); });
  EXPECT_NE(m.find((dir / "iter_0001000").string() + ": 1 of the 2 shard files are missing: " +
                   (dir / "iter_0001000" / "mp_rank_01" / "model_optim_rng.pt").string()),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("tensor_model_parallel_size 2"), std::string::npos) << m;
}

TEST(MegatronCheckpoint, ATrackerNamingAnotherIterationIsRefusedNamingIt) {
  const fs::path dir = work_dir() / "ckpt";
  fs::copy(megatron_golden("legacy_v0_tp1"), dir, fs::copy_options::recursive);
  std::ofstream(dir / "latest_checkpointed_iteration.txt") << "600\n";
  std::string m = message_of([&] { Loaded("gpt2.yaml", dir.string()); });
  EXPECT_NE(m.find("the checkpoint's iteration directory " + (dir / "iter_0000600").string() + " is missing"),
            std::string::npos)
      << m;
  std::ofstream(dir / "latest_checkpointed_iteration.txt") << "latest";
  m = message_of([&] { Loaded("gpt2.yaml", dir.string()); });
  EXPECT_NE(m.find((dir / "latest_checkpointed_iteration.txt").string() + ": holds 'latest'"), std::string::npos) << m;
}

TEST(MegatronCheckpoint, ATensorThatMapsToNothingOrAParameterNothingGivesIsRefused) {
  std::string m = message_of([&] { Loaded("gpt2.yaml", megatron_golden("unmapped")); });
  EXPECT_NE(
      m.find(megatron_golden("unmapped/iter_0000001/mp_rank_00/model_optim_rng.pt") +
             ": tensor 'decoder.layers.0.self_attention.q_layernorm.weight' is not a tensor Megatron's GPT models have"),
      std::string::npos)
      << m;
  m = message_of([&] { Loaded("gpt2.yaml", megatron_golden("partial")); });
  EXPECT_NE(m.find(megatron_golden("partial/iter_0000001") +
                   ": no tensor of the checkpoint gives the configured GPT-2's wpe.weight [32, 16]"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace gf
