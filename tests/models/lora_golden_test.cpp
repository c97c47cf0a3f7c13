// LoRA against a PyTorch transcription of PEFT's LoRA layer (tools/torch_peft_lora.py, golden files by
// tools/make_lora_golden.py): the tiny Llama of tests/golden/families/llama.safetensors frozen, adapters on
//  * llama_lora: q, k, v, o, gate, up and down (PEFT's target list), r 4, alpha 8 (scale 2);
//  * llama_lora_qv_rslora: q and v (a regex on the whole name), r 4, alpha 8, use_rslora (scale 4);
//  * mixtral_lora: tests/golden/mixtral_tiny.safetensors' Mixtral, q, k, v and o, r 4, alpha 8 (tools/make_moe_lora_golden.py);
//  * mixtral_experts_lora: the same Mixtral, q and v and every expert's w1, w2, w3 (its --variant experts);
//  * mixtral_saved_lora: the same Mixtral, q and v, and PEFT's modules_to_save [lm_head, embed_tokens] (--variant saved);
//  * llama_saved_tied: the tied Llama, q and v, modules_to_save [lm_head, embed_tokens] (copies untied, as PEFT's);
//  * qwen2_moe_lora: tests/golden/families/qwen2_moe.safetensors' Qwen2-MoE, q, v, the routers, the shared experts' and
//    the routed experts' projections (tools/make_lora_golden.py);
//  * qwen2_moe_all_linear: the same Qwen2-MoE, target_modules 'all-linear' (the shared experts' gates among them);
//  * deepseek_v2_lite_lora, deepseek_v3_lora: DeepSeek's latent attention (q_proj, or q_a_proj and q_b_proj;
//    kv_a_proj_with_mqa, kv_b_proj, o_proj) over tests/golden/families/deepseek_* (tools/make_mla_lora_golden.py).
// Ten AdamW steps with clipping over the adapters alone: losses, learning rates and gradient norms within 1e-5,
// the final adapters within 1e-5, the final logits within 1e-5; the base untouched; no gradient memory for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/math/gemm.h"
#include "models/lora.h"
#include "runner/cli/convert.h"
#include "models/registry.h"
#include "parallel/parallel_context.h"
#include "runner/train/trainer.h"
#include "tests/models/golden_case.h"

namespace gf {
namespace {

using namespace golden_case;

struct Variant {
  const char* file;
  const char* pet_config;  // the YAML map
};

const Variant kVariants[] = {
    {"lora/llama_lora.safetensors",
     "{peft_type: LORA, r: 4, lora_alpha: 8, lora_dropout: 0.0, "
     "target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}"},
    {"lora/llama_lora_qv_rslora.safetensors",
     "{peft_type: LORA, r: 4, lora_alpha: 8, use_rslora: True, target_modules: '.*\\.(q_proj|v_proj)'}"},
    // tools/make_moe_lora_golden.py: a Mixtral (tests/golden/mixtral_tiny.safetensors) with the attention adapted,
    // the router and experts frozen; its balancing loss's gradient reaches the adapters through the frozen router.
    {"lora/mixtral_lora.safetensors", "{peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, k_proj, v_proj, o_proj]}"},
    // The same Mixtral with every expert's w1, w2 and w3 adapted beside the attention's q and v (--variant experts).
    {"lora/mixtral_experts_lora.safetensors",
     "{peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj, w1, w2, w3]}"},
    // tools/make_lora_golden.py's tied Llama with modules_to_save: the head's copy (of the embedding it shares) and the
    // embedding's copy train apart.
    {"lora/llama_saved_tied.safetensors",
     "{peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj], modules_to_save: [lm_head, embed_tokens]}"},
    // tools/make_lora_golden.py's Qwen2-MoE (tests/golden/families/qwen2_moe.safetensors): q and v, every router
    // (mlp.gate), every shared expert's and every routed expert's gate_proj, up_proj and down_proj.
    {"lora/qwen2_moe_lora.safetensors",
     "{peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj, gate, gate_proj, up_proj, down_proj]}"},
    // tools/make_mla_lora_golden.py: DeepSeek's latent attention (tests/golden/families/deepseek_v2_lite and v3).
    {"lora/deepseek_v2_lite_lora.safetensors",
     "{peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj]}"},
    {"lora/deepseek_v3_lora.safetensors",
     "{peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj]}"},
    // The Qwen2-MoE with PEFT's 'all-linear': every projection but the head, the shared experts' sigmoid gates too.
    {"lora/qwen2_moe_all_linear.safetensors", "{peft_type: LORA, r: 4, lora_alpha: 8, target_modules: all-linear}"},
    // The same Mixtral with q and v adapted and PEFT's modules_to_save: the untied head and the token embedding
    // trained whole, each from a copy of the base's (--variant saved).
    {"lora/mixtral_saved_lora.safetensors",
     "{peft_type: LORA, r: 4, lora_alpha: 8, target_modules: [q_proj, v_proj], modules_to_save: [lm_head, embed_tokens]}"},
};

std::string variant_name(const ::testing::TestParamInfo<Variant>& i) {
  std::string f = i.param.file;
  f = f.substr(f.find('/') + 1);
  return f.substr(0, f.find('.'));
}

class LoraGolden : public ::testing::TestWithParam<Variant> {
 protected:
  GoldenCase make(std::vector<std::string> more = {}) const {
    more.push_back(std::string("model.model_config.pet_config=") + GetParam().pet_config);
    // Each variant its own output (ctest may run them at once): the checkpoint the export reads.
    more.push_back(std::string("output_dir=") + GF_BINARY_DIR + "/test_output/lora_golden_" + variant_name({GetParam(), 0}));
    return GoldenCase(GetParam().file, more);
  }
  // The golden's base into every frozen base, its initial adapters into the arena that trains.
  static void load(const GoldenCase& g, CausalLM& model) {
    for (CausalLM* base : model.frozen_bases())
      for (const TensorPlacement& p : base->params().tensors()) {
        // (DeepSeek-V3's expert bias is a buffer in Hugging Face's model, a parameter of ours)
        const std::string key = (g.f.has("weights." + p.spec->name) ? "weights." : "buffers.") + p.spec->name;
        const std::vector<float> w = g.f.floats(key);
        Placement::scatter(p, w.data(), base->weights() + p.offset);
      }
    for (const TensorPlacement& p : model.params().tensors()) {
      const std::vector<float> w = g.f.floats("adapter." + p.spec->name);
      Placement::scatter(p, w.data(), model.weights() + p.offset);
    }
  }
};

TEST_P(LoraGolden, AdaptersArePeftsTensorsAndTheBaseIsFrozenWhole) {
  GoldenCase g = make();
  ParallelContext ctx = ParallelContext::single();
  const std::unique_ptr<CausalLM> model = g.build(ctx);
  const std::set<std::string> in_file = g.names_under({"adapter."});
  std::set<std::string> in_model;
  for (const ParamSpec& p : model->params().table().specs()) {
    in_model.insert(p.name);
    ASSERT_TRUE(g.f.has("adapter." + p.name)) << p.name;
    EXPECT_EQ(p.shape, g.f.get("adapter." + p.name).shape) << p.name;
  }
  EXPECT_EQ(in_model, in_file) << "the adapters are not PEFT's";
  // The trainable arena holds the adapters alone; the base (every Llama weight) is the frozen one's.
  ASSERT_EQ(model->frozen_bases().size(), 1u);
  std::set<std::string> base;
  for (const ParamSpec& p : model->frozen_bases()[0]->params().table().specs()) base.insert(p.name);
  const std::set<std::string> weights = g.names_under({"weights.", "buffers."});
  EXPECT_EQ(base, weights);
  int64_t adapters = 0, frozen = 0;
  for (const ParamSpec& p : model->params().table().specs())
    if (p.name.find(".lora_") != std::string::npos) adapters += p.global_numel();  // (modules_to_save's train whole)
  for (const ParamSpec& p : model->frozen_bases()[0]->params().table().specs()) frozen += p.global_numel();
  EXPECT_EQ(model->params().total_floats() >= adapters, true);
  EXPECT_LT(adapters * 5, frozen) << "LoRA trains a small share of the weights";
}

TEST_P(LoraGolden, TenAdamWStepsOfTheAdaptersMatchPeft) {
  GoldenCase g = make();
  ParallelContext ctx = ParallelContext::single();
  Trainer trainer(g.cfg, ctx, g.batch());
  load(g, trainer.model());
  CausalLM* base = trainer.model().frozen_bases().at(0);
  const std::vector<float> base_before(base->weight_values(), base->weight_values() + base->params().total_floats());
  g.expect_steps_match(trainer);
  // The final adapters, each tensor within 1e-5 of PEFT's in L2 norm, relative to max(|ref|, sqrt(n) B), B the sum
  // of the ten steps' lr: compare_runs.py's criterion, which derives it (AdamW's update of an element is lr times a
  // scale-free ratio, so its rounding error is bounded by the distance AdamW could move it, not by its final value).
  // Not element by element: AdamW divides each element's update by its own gradient's running magnitude, so the
  // absolute rounding of a gradient (about 1e-7 of the largest terms it sums) becomes a relative change of the update
  // of an element whose gradient is a thousand times smaller than its tensor's typical one.
  // A floor, as compare_runs.py's --floor: the same ten steps with every fp32 product on another GEMM backend (only
  // the order of float sums inside each product changes) is ours against ourselves; a tensor is held to the larger of
  // 1e-5 and twice that (two independent reorderings: ours and PyTorch's), and a probe past 1e-4 is not rounding (a
  // bug on its path) and fails. rsLoRA's layer-1 q_proj B is the one that needs it: against PyTorch 3.7e-6 (oneDNN),
  // 9.9e-6 (OpenBLAS's Zen kernels), 4.1e-6 (Eigen) on an AVX2-only EPYC, every other tensor under 1.3e-6. One wrong
  // update of one element (the last step's lr) is still 8e-4 of sqrt(n) B for a B of 4 x 128.
  double budget = 0;
  for (float lr : g.f.floats("train.lr")) budget += lr;
  const GemmBackend ours = gemm_backend();
  const GemmBackend other = ours == GemmBackend::kEigen ? GemmBackend::kBlas : GemmBackend::kEigen;
  std::vector<float> probe;
  {
    gemm_set_backend(other);
    Trainer again(g.cfg, ctx, g.batch());
    load(g, again.model());
    for (int64_t s = 1; s <= again.total_steps(); ++s) (void)again.train_step(s);
    probe.assign(again.model().weights(), again.model().weights() + again.model().params().total_floats());
    gemm_set_backend(ours);
  }
  int checked = 0;
  for (const TensorPlacement& p : trainer.model().params().tensors()) {
    const std::vector<float> ref = g.f.floats("train.final." + p.spec->name);
    const float* w = trainer.model().weights() + p.offset;
    double d2 = 0, f2 = 0, r2 = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double d = static_cast<double>(w[i]) - ref[i], f = static_cast<double>(w[i]) - probe[p.offset + i];
      d2 += d * d;
      f2 += f * f;
      r2 += static_cast<double>(ref[i]) * ref[i];
    }
    const double scale = std::max(std::sqrt(r2), std::sqrt(static_cast<double>(ref.size())) * budget);
    const double floor = std::sqrt(f2) / scale;
    EXPECT_LE(floor, 1e-4) << p.spec->name << ": ours on " << gemm_backend_name(other) << " moved it by " << floor
                           << ", not rounding";
    EXPECT_LE(std::sqrt(d2) / scale, std::max(1e-5, 2 * floor))
        << "after 10 steps: " << p.spec->name << " (|ours - ref| / |ref| " << std::sqrt(d2 / r2) << "; ours on "
        << gemm_backend_name(other) << " against ours " << floor << ")";
    ++checked;
  }
  EXPECT_GE(checked, 4);
  const std::vector<float> base_after(base->weight_values(), base->weight_values() + base->params().total_floats());
  EXPECT_TRUE(base_before == base_after) << "the frozen base changed";
  // The adapted model's logits at the final adapters.
  std::vector<int32_t> tokens = g.f.ints("tokens");
  trainer.model().forward(tokens.data(), StepInfo{11, 0, false});
  EXPECT_LE(rel_err(trainer.model().logits(), g.f.floats("logits.final"), g.B * g.T, g.V, trainer.model().logits_ld()),
            1e-5);

  // Exported as PEFT's adapter directory (gridformer convert): PEFT's keys, shapes and float32 values (the trained
  // adapters, bit for bit), and adapter_config.json's fields as PEFT writes them for this adapter. With
  // GF_LORA_EXPORT set the directory goes there (tests/integration/lora_peft.sh applies it with PyTorch).
  trainer.save_checkpoint(10);
  trainer.finish_checkpoint(true);
  const char* env = std::getenv("GF_LORA_EXPORT");
  const std::string dir = env ? std::string(env) + "/" + variant_name({GetParam(), 0})
                              : std::string(GF_BINARY_DIR) + "/test_output/lora_peft/" + variant_name({GetParam(), 0});
  std::filesystem::remove_all(dir);
  ConvertOptions opt;
  opt.from = g.cfg.output_dir + "/checkpoint";
  opt.to = dir;
  std::ostringstream log;
  convert_weights(opt, log);
  const SafeTensorsFile peft = SafeTensorsFile::open(dir + "/adapter_model.safetensors");
  EXPECT_EQ(peft.metadata().at("format"), "pt");
  EXPECT_EQ(peft.tensors().size(), trainer.model().params().tensors().size());
  for (const TensorPlacement& p : trainer.model().params().tensors()) {
    const std::string key = "base_model.model." + p.spec->name;
    ASSERT_TRUE(peft.has(key)) << key;
    EXPECT_EQ(peft.get(key).shape, p.spec->shape) << key;
    EXPECT_EQ(peft.get(key).dtype, StDtype::kF32) << key;
    const std::vector<float> v = peft.floats(key);
    EXPECT_TRUE(std::equal(v.begin(), v.end(), trainer.model().weights() + p.offset)) << key;
  }
  std::ifstream cin(dir + "/adapter_config.json");
  const nlohmann::json c = nlohmann::json::parse(cin);
  const nlohmann::json want = nlohmann::json::parse(g.f.metadata().at("lora_config"));
  for (const char* k : {"peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "use_rslora", "bias",
                        "fan_in_fan_out", "init_lora_weights", "inference_mode", "use_dora", "modules_to_save"})
    EXPECT_EQ(c.at(k), want.at(k)) << k;
  // target_modules as PEFT saves what it was given: the regex, or the list (a set: compared as one).
  const nlohmann::json& t = c.at("target_modules");
  if (want.at("target_modules").is_string()) EXPECT_EQ(t, want.at("target_modules"));
  else EXPECT_EQ(t.get<std::set<std::string>>(), want.at("target_modules").get<std::set<std::string>>());
}

INSTANTIATE_TEST_SUITE_P(Peft, LoraGolden, ::testing::ValuesIn(kVariants), variant_name);

// Targets that name nothing, or a layer that carries no adapter here, are refused with the key.
TEST(LoraConfig, TargetsThatNameNothingOrAnEmbeddingAreRefused) {
  const std::string base = golden("families/llama.safetensors");
  for (const std::string& pet : {std::string("{r: 4, target_modules: [nothing_here]}"),
                                 std::string("{r: 4, target_modules: [embed_tokens]}"),
                                 std::string("{lora_rank: 4, lora_dropout: 0.0, target_modules: '.*embed'}")}) {
    try {
      GoldenCase g("families/llama.safetensors", {"model.model_config.pet_config=" + pet});
      ADD_FAILURE() << pet << " was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("target_modules"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gf
