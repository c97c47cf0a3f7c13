// moe_config as MindFormers' MoEConfig spells it (r0.8-r1.3) plus our three keys: the built keys land
// in ModelConfig::moe for GPT-2 (GPT-2 MoE) and Llama (Mixtral-style) alike, with MindFormers'
// defaults; capacity_factor <= 0 is dropless; every value the loader cannot build is refused naming
// the key and a value that works; the keys that mean nothing here are warned about with their reason,
// the features not built refused with what to do. GPT-2's position_embedding_type, rope_theta and
// add_bias_linear (MindSpeed's GPT MoE), the MixtralForCausalLM alias, and configs/moe.
// (Every key's disposition is proved generically by config_keys_test.cpp; the layout rules of
// expert_parallel by layout_check_moe_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "runner/config/config.h"
#include "runner/config/layout_check.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::error_of;
using config_test::kMinimal;
using config_test::kMinimalLlama;

bool has_warning(const Config& c, const std::string& needle) {
  return std::any_of(c.warnings.begin(), c.warnings.end(),
                     [&](const std::string& w) { return w.find(needle) != std::string::npos; });
}

std::string all_warnings(const Config& c) {
  std::string r;
  for (const auto& w : c.warnings) r += "\n  " + w;
  return r;
}

TEST(MoeConfigKeys, DefaultsAreMindFormersAndTheModelIsDense) {
  for (const std::string& yaml : {kMinimal, kMinimalLlama}) {
    const Config c = load_config_string(yaml);
    const MoeConfig& e = c.model.moe;
    EXPECT_EQ(e, MoeConfig{});  // the struct's defaults are the schema's
    EXPECT_EQ(e.expert_num, 1);
    EXPECT_EQ(e.num_experts_chosen, 1);
    EXPECT_DOUBLE_EQ(e.capacity_factor, 1.1);
    EXPECT_DOUBLE_EQ(e.aux_loss_factor, 0.05);
    EXPECT_DOUBLE_EQ(e.z_loss_factor, 0.0);
    EXPECT_TRUE(e.norm_topk_prob);
    EXPECT_EQ(e.routing_policy, "TopkRouterV1");
    EXPECT_FALSE(e.router_bf16);
    EXPECT_EQ(e.token_drop_policy, TokenDropPolicy::kPosition);
    EXPECT_EQ(e.moe_layer_freq, 1);
    EXPECT_EQ(e.token_dispatcher, TokenDispatcher::kAllToAll);
    EXPECT_FALSE(e.enabled());
    EXPECT_FALSE(e.is_moe_layer(0));
    EXPECT_TRUE(c.warnings.empty()) << all_warnings(c);
  }
}

TEST(MoeConfigKeys, BuiltKeysLandInModelConfigForGptTwoAndLlama) {
  const std::string moe = R"(
moe_config:
  expert_num: 8
  num_experts_chosen: 2
  capacity_factor: 1.25
  aux_loss_factor: 0.01
  z_loss_factor: 0.001
  norm_topk_prob: False
  routing_policy: TopkRouterV1
  router_dense_type: bfloat16
  token_drop_policy: probs
  moe_layer_freq: 2
  token_dispatcher: allgather
)";
  for (const std::string& yaml : {kMinimal, kMinimalLlama}) {
    const Config c = load_config_string(yaml + moe);
    const MoeConfig& e = c.model.moe;
    EXPECT_EQ(e.expert_num, 8);
    EXPECT_EQ(e.num_experts_chosen, 2);
    EXPECT_DOUBLE_EQ(e.capacity_factor, 1.25);
    EXPECT_DOUBLE_EQ(e.aux_loss_factor, 0.01);
    EXPECT_DOUBLE_EQ(e.z_loss_factor, 0.001);
    EXPECT_FALSE(e.norm_topk_prob);
    EXPECT_TRUE(e.router_bf16);
    EXPECT_EQ(e.token_drop_policy, TokenDropPolicy::kProbs);
    EXPECT_EQ(e.moe_layer_freq, 2);
    EXPECT_EQ(e.token_dispatcher, TokenDispatcher::kAllGather);
    EXPECT_TRUE(e.enabled());
    EXPECT_TRUE(e.is_moe_layer(0));
    EXPECT_FALSE(e.is_moe_layer(1));
    EXPECT_TRUE(e.is_moe_layer(2));
    EXPECT_TRUE(c.warnings.empty()) << all_warnings(c);
    // The resolved config says the same: it loads back to the same settings.
    const Config again = load_config_string(dump_resolved(c));
    EXPECT_TRUE(static_cast<const Settings&>(again) == static_cast<const Settings&>(c));
  }
}

TEST(MoeConfigKeys, CapacityFactorAtOrBelowZeroIsDropless) {
  for (const char* cf : {"0", "0.0", "-1", "-1.0", "-0.5"}) {
    const Config c = load_config_string(kMinimal, {"moe_config.expert_num=4", std::string("moe_config.capacity_factor=") + cf});
    EXPECT_TRUE(c.model.moe.dropless()) << cf;
    EXPECT_TRUE(c.warnings.empty()) << cf << all_warnings(c);
  }
  for (const char* cf : {"0.5", "1", "1.1", "4.0"})
    EXPECT_FALSE(load_config_string(kMinimal, {"moe_config.expert_num=4", std::string("moe_config.capacity_factor=") + cf})
                     .model.moe.dropless()) << cf;
  // Written in a file, as MindFormers' r1.3 comment says it.
  const Config f = load_config_string(kMinimal + "moe_config:\n  expert_num: 4\n  capacity_factor: -1 # if capacity_factor <= 0 means dropless\n");
  EXPECT_TRUE(f.model.moe.dropless());
}

TEST(MoeConfigKeys, RoutingPolicyV1AndV2AreTheSameRouterAndV2SaysItsCapacityRuleOnce) {
  const Config v1 = load_config_string(kMinimal, {"moe_config.expert_num=4", "moe_config.routing_policy=TopkRouterV1"});
  EXPECT_TRUE(v1.warnings.empty()) << all_warnings(v1);
  const Config v2 = load_config_string(kMinimal, {"moe_config.expert_num=4", "moe_config.routing_policy=TopkRouterV2"});
  EXPECT_EQ(v2.model.moe.routing_policy, "TopkRouterV2");
  ASSERT_EQ(v2.warnings.size(), 1u) << all_warnings(v2);
  EXPECT_NE(v2.warnings[0].find("`moe_config.routing_policy: TopkRouterV2` with `capacity_factor: 1.1`: capacity here is "
                                "ceil(capacity_factor x seq_length x num_experts_chosen / expert_num) tokens per expert "
                                "and sequence"), std::string::npos) << v2.warnings[0];
  EXPECT_NE(v2.warnings[0].find("rounds it up to a multiple of model_parallel"), std::string::npos) << v2.warnings[0];
  // Dropless, or dense: capacity does not apply, nothing to say.
  EXPECT_TRUE(load_config_string(kMinimal, {"moe_config.expert_num=4", "moe_config.routing_policy=TopkRouterV2",
                                            "moe_config.capacity_factor=-1"}).warnings.empty());
  EXPECT_TRUE(load_config_string(kMinimal, {"moe_config.routing_policy=TopkRouterV2"}).warnings.empty());
  // Another router is refused with the accepted ones.
  const std::string e = error_of(kMinimal, {"moe_config.expert_num=4", "moe_config.routing_policy=SwitchRouter"});
  EXPECT_NE(e.find("--set moe_config.routing_policy=SwitchRouter: expects TopkRouterV1 or TopkRouterV2"), std::string::npos)
      << e;
}

// Each rule of the loader: the message names the key, says a value that works, and (in a file) names
// the file; the config is refused (every rank reports it before any work: tests/integration/layout_errors.sh).
TEST(MoeConfigKeys, ValuesThatCannotBeBuiltAreRefusedNamingTheKeyAndAValueThatWorks) {
  const std::pair<std::vector<std::string>, const char*> cases[] = {
      {{"moe_config.expert_num=0"}, "`moe_config.expert_num: 0`: must be >= 1 (1: a dense model; Mixtral: 8)"},
      {{"moe_config.expert_num=-2"}, "`moe_config.expert_num: -2`: must be >= 1"},
      {{"moe_config.expert_num=4", "moe_config.num_experts_chosen=0"},
       "`moe_config.num_experts_chosen: 0`: must be >= 1 (the experts each token is sent to; Mixtral: 2)"},
      {{"moe_config.expert_num=4", "moe_config.num_experts_chosen=5"},
       "`moe_config.num_experts_chosen: 5` is larger than `moe_config.expert_num: 4`: each token picks "
       "num_experts_chosen different experts; use at most 4, or raise expert_num"},
      {{"moe_config.num_experts_chosen=2"},
       "`moe_config.num_experts_chosen: 2` is larger than `moe_config.expert_num: 1`: each token picks num_experts_chosen "
       "different experts; use at most 1 (a dense model)"},
      {{"moe_config.expert_num=4", "moe_config.moe_layer_freq=0"},
       "`moe_config.moe_layer_freq: 0`: must be >= 1 (layer i is MoE when i % moe_layer_freq == 0; 1: every layer, 2: "
       "every other layer)"},
      {{"moe_config.aux_loss_factor=-0.1"}, "`moe_config.aux_loss_factor: -0.1`: must be in [0, 1000] (0: no load-balancing loss"},
      {{"moe_config.aux_loss_factor=1e308"}, "`moe_config.aux_loss_factor: 1e308`: must be in [0, 1000]"},
      {{"moe_config.z_loss_factor=-1"}, "`moe_config.z_loss_factor: -1`: must be in [0, 1000] (0: no router z-loss"},
      // (NaN is refused for every number key by the schema check: Config.OutOfRangeValuesAreRefusedWithTheirRange.)
      {{"moe_config.capacity_factor=.inf"}, "`moe_config.capacity_factor: .inf`: expects a number (> 0: the capacity "
                                            "factor; <= 0: dropless)"},
      {{"moe_config.router_dense_type=float16"},
       "`moe_config.router_dense_type: float16`: expects float32 or bfloat16 (the dtype of the router's product); "
       "MindFormers computes a float16 router in float32 (its dtype_map), so use float32"},
      {{"moe_config.router_dense_type=int8"}, "`moe_config.router_dense_type: int8`: expects float32 or bfloat16"},
      {{"moe_config.token_drop_policy=random"}, "`moe_config.token_drop_policy: random`: expects position or probs"},
      {{"moe_config.token_dispatcher=alltoall_seq"},
       "`moe_config.token_dispatcher: alltoall_seq`: expects alltoall or allgather"},
  };
  for (const auto& [sets, msg] : cases) {
    // As --set overrides: the message is the override's (its text after the key and value).
    const std::string e = error_of(kMinimal, sets);
    const std::string m = msg, tail = m.substr(m.find('`', 1) + 1);
    EXPECT_NE(e.find("--set " + sets.back() + ":"), std::string::npos) << sets.back() << ": " << e;
    EXPECT_NE(e.find(tail), std::string::npos) << sets.back() << ": " << e;
    // Written in a file: the message is the file's, as written above.
    std::string yaml = kMinimal + "moe_config:\n";
    for (const auto& s : sets) yaml += "  " + s.substr(std::string("moe_config.").size(), s.find('=') - 11) + ": " +
                                       s.substr(s.find('=') + 1) + "\n";
    const std::string f = error_of(yaml);
    EXPECT_NE(f.find("<string>: "), std::string::npos) << f;
    EXPECT_NE(f.find(msg), std::string::npos) << yaml << "\n" << f;
  }
  // The Llama reads the same keys with the same rules.
  EXPECT_NE(error_of(kMinimalLlama, {"moe_config.expert_num=8", "moe_config.num_experts_chosen=9"})
                .find("is larger than `moe_config.expert_num: 8`"), std::string::npos);
}

TEST(MoeConfigKeys, KeysThatMeanNothingHereAreWarnedWithTheirReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"enable_sdrop=True", "here an expert over its capacity drops assignments by moe_config.token_drop_policy"},
      {"use_fused_ops_topkrouter=True", "an Ascend fused kernel for TopkRouterV2's dispatch (the same routing)"},
      {"group_wise_a2a=True", "MindSpore's all-to-all in intra- and inter-node steps on Ascend"},
      {"expert_group_size=8", "capacity here is counted per sequence"},
      {"comp_comm_parallel=True", "MindSpore's overlap of the expert FFN with its all-to-all"},
      {"comp_comm_parallel_degree=4", "MindSpore's overlap of the expert FFN with its all-to-all"},
      {"save_token_distribution=True", "each MoE layer's expert load is written to metrics.jsonl"},
      {"max_router_load=65536", "nothing here has such a bound"},
      {"cur_layer=3", "MindFormers sets it for each layer inside the model"},
      {"moe_module_name=feed_forward", "MindFormers sets it for each layer inside the model"},
      {"noisy_policy=jitter", "jitter on the router's input is not built"},
      {"noisy_epsilon=0.01", "jitter on the router's input is not built"},
      {"first_k_dense_replace=1", "here moe_config.moe_layer_freq picks the MoE layers"},
      {"first_k_dense_replace=True", "MindFormers reads it in DeepSeek-V2 only"},
      {"moe_intermediate_size=1536", "the experts here have the model's own FFN width"},
      {"update_step=500", "used only with enable_cold_hot_expert: True (not built)"},
      {"hot_expert_num=2", "used only with enable_cold_hot_expert: True (not built)"},
      {"cold_token_percent=0.5", "used only with enable_cold_hot_expert: True (not built)"},
  };
  for (auto [set, why] : cases) {
    const std::string s = set, key = "moe_config." + s.substr(0, s.find('='));
    const Config c = load_config_string(kMinimal, {"moe_config.expert_num=4", "moe_config." + s});
    EXPECT_TRUE(has_warning(c, "`" + key + ": " + s.substr(s.find('=') + 1) + "`")) << set << all_warnings(c);
    EXPECT_TRUE(has_warning(c, why)) << set << all_warnings(c);
    EXPECT_EQ(c.model.moe, load_config_string(kMinimal, {"moe_config.expert_num=4"}).model.moe) << set;  // read by nobody
  }
  // At their defaults (as MindFormers' r1.3 Mixtral writes use_fused_ops_topkrouter: False), or None: nothing to say.
  const Config quiet = load_config_string(kMinimal + R"(
moe_config: {expert_num: 4, enable_sdrop: False, use_fused_ops_topkrouter: False, noisy_policy: ~, noisy_epsilon: ~,
             expert_group_size: ~, moe_intermediate_size: 1407, max_router_load: 131072, aux_loss_types: [],
             aux_loss_factors: ~, topk_group: ~, n_group: ~, topk_method: greedy, routed_scaling_factor: 1,
             shared_expert_num: 0, enable_cold_hot_expert: False}
)");
  EXPECT_TRUE(quiet.warnings.empty()) << all_warnings(quiet);
}

TEST(MoeConfigKeys, FeaturesNotBuiltAreRefusedWithWhatToDo) {
  const std::pair<const char*, const char*> cases[] = {
      {"shared_expert_num=2", "a shared expert is given by its width, moe_config.moe_shared_expert_intermediate_size "
                              "(Qwen2-MoE's); use shared_expert_num: 0"},
      {"routed_scaling_factor=16.0", "is not built; use routed_scaling_factor: 1.0"},
      {"topk_method=group_limited_greedy", "use topk_method: greedy (plain top-k)"},
      {"topk_group=3", "group-limited routing"},
      {"n_group=8", "remove the key (None)"},
      {"aux_loss_types=[expert, device, comm]", "there is one load-balancing loss weighted by moe_config.aux_loss_factor"},
      {"aux_loss_factors=[0.003, 0.005, 0.002]", "remove the key (None, or [])"},
      {"enable_cold_hot_expert=True", "cold/hot expert placement"},
  };
  for (auto [set, fix] : cases) {
    const std::string e = error_of(kMinimal, {"moe_config.expert_num=4", std::string("moe_config.") + set});
    EXPECT_NE(e.find(std::string("--set moe_config.") + set + ": "), std::string::npos) << set << ": " << e;
    EXPECT_NE(e.find(fix), std::string::npos) << set << ": " << e;
  }
}

TEST(MoeConfigKeys, MindFormersR13MoeConfigArgumentsAllLoad) {
  // Every MoEConfig argument of MindFormers r1.3 at its default, and r0.8's jitter at None: no warning, no error.
  const Config c = load_config_string(kMinimal + R"(
moe_config:
  expert_num: 1
  capacity_factor: 1.1
  aux_loss_factor: 0.05
  num_experts_chosen: 1
  expert_group_size: ~
  group_wise_a2a: False
  comp_comm_parallel: False
  comp_comm_parallel_degree: 2
  save_token_distribution: False
  cur_layer: 0
  enable_cold_hot_expert: False
  update_step: 10000
  hot_expert_num: 0
  cold_token_percent: 1.0
  moe_module_name: ""
  routing_policy: "TopkRouterV1"
  norm_topk_prob: True
  enable_sdrop: False
  use_fused_ops_topkrouter: False
  router_dense_type: "float32"
  shared_expert_num: 0
  use_shared_expert_gating: False
  max_router_load: 131072
  topk_method: "greedy"
  topk_group: ~
  n_group: ~
  moe_intermediate_size: 1407
  routed_scaling_factor: 1.0
  aux_loss_types: ~
  aux_loss_factors: ~
  z_loss_factor: 0.
  noisy_policy: ~
  noisy_epsilon: ~
)");
  EXPECT_TRUE(c.warnings.empty()) << all_warnings(c);
  EXPECT_EQ(c.model.moe, MoeConfig{});
}

TEST(MoeModelKeys, GptTwoPositionsAndLinearBiasesAreRead) {
  const std::string k = "model.model_config.";
  Config c = load_config_string(kMinimal);
  EXPECT_EQ(c.model.position_embedding_type, "learned_absolute");
  EXPECT_TRUE(c.model.add_bias_linear);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 10000.0);
  c = load_config_string(kMinimal, {k + "position_embedding_type=rope", k + "add_bias_linear=False", k + "rope_theta=500000"});
  EXPECT_EQ(c.model.position_embedding_type, "rope");
  EXPECT_FALSE(c.model.add_bias_linear);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 500000.0);
  EXPECT_TRUE(c.warnings.empty()) << all_warnings(c);
  // rope_theta without rope does nothing: said.
  c = load_config_string(kMinimal, {k + "rope_theta=500000"});
  EXPECT_TRUE(has_warning(c, "`model.model_config.rope_theta: 500000` has no effect with `position_embedding_type: "
                             "learned_absolute`")) << all_warnings(c);
  std::string e = error_of(kMinimal, {k + "position_embedding_type=alibi"});
  EXPECT_NE(e.find("--set model.model_config.position_embedding_type=alibi: expects learned_absolute (GPT-2's learned "
                   "position table) or rope"), std::string::npos) << e;
  e = error_of(kMinimal, {k + "position_embedding_type=rope", k + "rope_theta=0"});
  EXPECT_NE(e.find("rope_theta=0: must be > 0 (RoPE's base"), std::string::npos) << e;
  // RoPE rotates pairs: odd heads are refused (hidden 60 / 4 heads = 15).
  e = error_of(kMinimal, {k + "position_embedding_type=rope", k + "hidden_size=60"});
  EXPECT_NE(e.find("gives heads of 15 dimensions; `position_embedding_type: rope` rotates pairs of them"), std::string::npos)
      << e;
  EXPECT_EQ(error_of(kMinimal, {k + "hidden_size=60"}), "");  // learned positions: any head size
}

TEST(MoeModelKeys, ALlamaIsRopeWithoutLinearBiasesAndSaysSoForOtherValues) {
  const std::string k = "model.model_config.";
  const Config c = load_config_string(kMinimalLlama, {k + "position_embedding_type=rope", k + "add_bias_linear=False"});
  EXPECT_EQ(c.model.position_embedding_type, "rope");
  EXPECT_FALSE(c.model.add_bias_linear);
  EXPECT_TRUE(c.warnings.empty()) << all_warnings(c);
  EXPECT_EQ(load_config_string(kMinimalLlama).model.position_embedding_type, "rope");
  std::string e = error_of(kMinimalLlama, {k + "position_embedding_type=learned_absolute"});
  EXPECT_NE(e.find("--set model.model_config.position_embedding_type=learned_absolute: a Llama's positions are RoPE's "
                   "(base `theta`); use rope"), std::string::npos) << e;
  e = error_of(kMinimalLlama, {k + "add_bias_linear=True"});
  EXPECT_NE(e.find("--set model.model_config.add_bias_linear=True: a Llama's linear layers have no biases (qkv_has_bias: "
                   "True adds them to q, k and v); use False"), std::string::npos) << e;
  e = error_of(kMinimalLlama, {k + "rope_theta=500000"});
  EXPECT_NE(e.find("not a LlamaConfig key: LlamaConfig spells RoPE's base `theta`"), std::string::npos) << e;
}

TEST(MoeModelKeys, MixtralForCausalLMIsTheLlamaUnderItsHuggingFaceName) {
  const Config c = load_config_string(kMinimalLlama, {"model.arch.type=MixtralForCausalLM", "moe_config.expert_num=8",
                                                      "moe_config.num_experts_chosen=2"});
  EXPECT_EQ(c.model.arch, "MixtralForCausalLM");
  EXPECT_TRUE((c.model.type == "LlamaConfig"));
  EXPECT_EQ(c.model.moe.expert_num, 8);
  EXPECT_TRUE(c.warnings.empty()) << all_warnings(c);
  // The model is LlamaForCausalLM's otherwise: the same settings but for the arch name.
  Config llama = load_config_string(kMinimalLlama, {"moe_config.expert_num=8", "moe_config.num_experts_chosen=2"});
  llama.model.arch = "MixtralForCausalLM";
  EXPECT_TRUE(static_cast<const Settings&>(llama) == static_cast<const Settings&>(c));
  // Without experts it is a dense Llama: said.
  const Config dense = load_config_string(kMinimalLlama, {"model.arch.type=MixtralForCausalLM"});
  EXPECT_TRUE(has_warning(dense, "`model.arch.type: MixtralForCausalLM` with `moe_config.expert_num: 1`: a dense Llama"));
  // It takes a LlamaConfig only.
  const std::string e = error_of(kMinimal, {"model.arch.type=MixtralForCausalLM"});
  EXPECT_NE(e.find("model.model_config.type: 'GPT2Config' does not go with arch MixtralForCausalLM; use LlamaConfig"),
            std::string::npos) << e;
}

std::string moe_config(const std::string& name) { return std::string(GF_SOURCE_DIR) + "/configs/moe/" + name; }

// Every file in configs/moe loads through the loader and passes the layout check on the ranks it asks
// for; the tiny ones without a warning.
TEST(MoeConfigs, EveryFileLoadsAndFitsItsRanks) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(GF_SOURCE_DIR) + "/configs/moe")) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    const std::string name = entry.path().filename().string();
    Config c;
    ASSERT_NO_THROW(c = load_config(entry.path().string())) << name;
    const auto& p = c.parallel;
    const int ranks = static_cast<int>(p.data_parallel * p.model_parallel * p.pipeline_stage);
    EXPECT_EQ(layout_error_message(c, ranks), "") << name;
    EXPECT_TRUE(config_layout_problems(c).empty()) << name;
    EXPECT_TRUE(c.model.moe.enabled()) << name;
    if (name.rfind("run_", 0) == 0) {
      EXPECT_TRUE(c.warnings.empty()) << name << all_warnings(c);
    }
  }
  EXPECT_EQ(files, 5);
}

TEST(MoeConfigs, TheTinyOnesAreTheTinyDenseConfigsWithExperts) {
  const Config gpt2 = load_config(std::string(GF_SOURCE_DIR) + "/configs/gpt2/run_gpt2_tiny.yaml");
  const Config moe = load_config(moe_config("run_gpt2_moe_tiny.yaml"));
  EXPECT_EQ(moe.model.arch, "GPT2LMHeadModel");
  EXPECT_EQ(moe.model.moe.expert_num, 4);
  EXPECT_EQ(moe.model.moe.num_experts_chosen, 2);
  EXPECT_DOUBLE_EQ(moe.model.moe.capacity_factor, 1.5);
  EXPECT_FALSE(moe.model.moe.dropless());
  ModelConfig dense = moe.model;
  dense.moe = MoeConfig{};
  EXPECT_TRUE(dense == gpt2.model);  // the tiny GPT-2 with experts
  EXPECT_TRUE(model_layout(moe) == model_layout(gpt2));  // laid out alike
  EXPECT_TRUE(moe.train_data == gpt2.train_data);
  EXPECT_TRUE(moe.lr == gpt2.lr);
  EXPECT_TRUE(moe.adamw == gpt2.adamw);
  EXPECT_EQ(moe.batch_size, gpt2.batch_size);
  EXPECT_EQ(moe.train_steps, gpt2.train_steps);
  // Its expert-parallel form on 2 ranks, as its header says.
  const Config ep2 = load_config(moe_config("run_gpt2_moe_tiny.yaml"),
                                 {"parallel_config.data_parallel=2", "parallel_config.expert_parallel=2"});
  EXPECT_EQ(layout_error_message(ep2, 2), "");

  const Config llama = load_config(std::string(GF_SOURCE_DIR) + "/configs/llama/run_llama_tiny.yaml");
  const Config mixtral = load_config(moe_config("run_mixtral_tiny.yaml"));
  EXPECT_EQ(mixtral.model.arch, "MixtralForCausalLM");
  EXPECT_EQ(mixtral.model.moe.expert_num, 4);
  EXPECT_EQ(mixtral.model.moe.num_experts_chosen, 2);
  EXPECT_TRUE(mixtral.model.moe.dropless());
  EXPECT_TRUE(mixtral.model.moe.norm_topk_prob);
  dense = mixtral.model;
  dense.moe = MoeConfig{};
  dense.arch = "LlamaForCausalLM";
  EXPECT_TRUE(dense == llama.model);
  EXPECT_TRUE(model_layout(mixtral) == model_layout(llama));
  EXPECT_TRUE(mixtral.train_data == llama.train_data);

  const Config ms = load_config(moe_config("run_mindspeed_gpt_moe_tiny.yaml"));
  EXPECT_EQ(ms.model.position_embedding_type, "rope");
  EXPECT_FALSE(ms.model.add_bias_linear);
  EXPECT_EQ(ms.model.moe.expert_num, 4);
  EXPECT_EQ(ms.model.moe.num_experts_chosen, 2);
  EXPECT_EQ(ms.parallel.model_parallel, 2);
  EXPECT_EQ(ms.parallel.expert_parallel, 2);
  EXPECT_TRUE(ms.parallel.use_seq_parallel);
  EXPECT_EQ(ms.batch_size * ms.parallel.data_parallel, gpt2.batch_size);  // the same global batch
  EXPECT_EQ(layout_error_message(ms, 4), "");
  // On one rank, as its header says.
  EXPECT_EQ(layout_error_message(load_config(moe_config("run_mindspeed_gpt_moe_tiny.yaml"),
                                             {"parallel_config.data_parallel=1", "parallel_config.model_parallel=1",
                                              "parallel_config.expert_parallel=1", "runner_config.batch_size=8"}),
                                 1),
            "");
}

TEST(MoeConfigs, TheReferenceShapesAreMindSpeedsAndMindFormers) {
  const Config ms = load_config(moe_config("pretrain_mindspeed_gpt_moe.yaml"));
  const ModelConfig& m = ms.model;
  EXPECT_EQ(m.num_layers, 2);
  EXPECT_EQ(m.hidden_size, 12288);
  EXPECT_EQ(m.num_heads, 96);
  EXPECT_EQ(m.seq_length, 8192);
  EXPECT_EQ(m.position_embedding_type, "rope");
  EXPECT_FALSE(m.add_bias_linear);
  EXPECT_EQ(m.moe.expert_num, 4);
  EXPECT_EQ(m.moe.num_experts_chosen, 2);
  EXPECT_EQ(ms.parallel.data_parallel, 4);
  EXPECT_EQ(ms.parallel.model_parallel, 2);
  EXPECT_EQ(ms.parallel.expert_parallel, 2);
  EXPECT_TRUE(ms.parallel.use_seq_parallel);
  EXPECT_EQ(layout_error_message(ms, 8), "");
  EXPECT_NE(layout_error_message(ms, 4), "");

  const Config mx = load_config(moe_config("pretrain_mixtral_8x7b.yaml"));
  // MindFormers' r1.3 file but for pipeline_stage: the same settings as the test copy loaded with that override.
  const Config mf = load_config(std::string(GF_SOURCE_DIR) + "/tests/data/mindformers/r1.3/pretrain_mixtral-8x7b.yaml",
                                {"parallel_config.pipeline_stage=1"});
  EXPECT_TRUE(static_cast<const Settings&>(mx) == static_cast<const Settings&>(mf));
  EXPECT_EQ(mx.parallel.data_parallel, 8);
  EXPECT_EQ(mx.parallel.expert_parallel, 8);
  EXPECT_EQ(mx.model.moe.expert_num, 8);
  EXPECT_EQ(layout_error_message(mx, 8), "");
}

}  // namespace
}  // namespace gf
