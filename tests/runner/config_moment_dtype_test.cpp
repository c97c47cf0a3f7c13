// optimizer.moment_dtype (ours; Megatron's --exp-avg-dtype/--exp-avg-sq-dtype): float32 | bfloat16,
// how AdamW stores its two moments. The key reads into AdamWConfig (so into every AdamW the trainer
// builds), a wrong value is refused naming the key and the allowed values, and `gridformer plan`
// counts 2 bytes per moment element under bfloat16.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>

#include "runner/config/config.h"
#include "runner/report/plan.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::error_of;
using config_test::kMinimal;

int count_warnings(const Config& c, const std::string& needle) {
  return static_cast<int>(std::count_if(c.warnings.begin(), c.warnings.end(),
                                        [&](const std::string& w) { return w.find(needle) != std::string::npos; }));
}

TEST(ConfigMomentDtype, DefaultsToFloat32AndReadsBfloat16) {
  const Config d = load_config_string(kMinimal);
  EXPECT_EQ(d.adamw.moment_dtype, MomentDtype::kFloat32);
  EXPECT_EQ(d.resolved["optimizer"]["moment_dtype"].as<std::string>(), "float32") << "in the resolved config";
  const Config f = load_config_string(kMinimal + "optimizer: {type: AdamW, beta2: 0.95, moment_dtype: bfloat16}\n");
  EXPECT_EQ(f.adamw.moment_dtype, MomentDtype::kBFloat16);
  EXPECT_EQ(f.adamw.beta2, 0.95);
  EXPECT_TRUE(f.warnings.empty()) << f.warnings.front();
  const Config s = load_config_string(kMinimal, {"optimizer.moment_dtype=bfloat16", "optimizer.beta2=0.95"});
  EXPECT_EQ(s.adamw.moment_dtype, MomentDtype::kBFloat16);
  EXPECT_EQ(load_config_string(kMinimal, {"optimizer.moment_dtype=float32"}).adamw.moment_dtype, MomentDtype::kFloat32);
  EXPECT_EQ(s.resolved["optimizer"]["moment_dtype"].as<std::string>(), "bfloat16");
}

TEST(ConfigMomentDtype, AnotherValueIsRefusedNamingTheKeyAndTheValues) {
  std::string e = error_of(kMinimal + "optimizer: {moment_dtype: float16}\n");
  EXPECT_NE(e.find("`optimizer.moment_dtype: float16`: must be float32 or bfloat16"), std::string::npos) << e;
  e = error_of(kMinimal, {"optimizer.moment_dtype=bf16"});
  EXPECT_NE(e.find("optimizer.moment_dtype"), std::string::npos) << e;
  EXPECT_NE(e.find("must be float32 or bfloat16"), std::string::npos) << e;
  // FP32StateAdamWeightDecay is named for float32 state.
  e = error_of(kMinimal, {"optimizer.type=FP32StateAdamWeightDecay", "optimizer.moment_dtype=bfloat16"});
  EXPECT_NE(e.find("FP32StateAdamWeightDecay` disagree"), std::string::npos) << e;
  EXPECT_EQ(error_of(kMinimal, {"optimizer.type=FP32StateAdamWeightDecay", "optimizer.moment_dtype=float32"}), "");
}

// 1 - beta below bf16's half spacing (2^-9 to 2^-8 of a value): the stored moment cannot follow.
TEST(ConfigMomentDtype, BetasTooCloseToOneForBf16AreWarnedAbout) {
  const Config w = load_config_string(kMinimal, {"optimizer.moment_dtype=bfloat16"});  // beta2 0.999 by default
  EXPECT_EQ(count_warnings(w, "`optimizer.moment_dtype: bfloat16` with beta2 0.999 (optimizer.beta2)"), 1);
  EXPECT_EQ(count_warnings(w, "never shrinks"), 1);
  EXPECT_EQ(count_warnings(w, "beta1"), 0) << "beta1 0.9 is fine";
  const Config p = load_config_string(kMinimal, {"optimizer.moment_dtype=bfloat16", "optimizer.betas=[0.9, 0.997]"});
  EXPECT_EQ(count_warnings(p, "with beta2 0.997 (optimizer.betas)"), 1);
  EXPECT_EQ(count_warnings(p, "never shrinks"), 0) << "1 - 0.997 > 2^-9: some values can still shrink";
  EXPECT_TRUE(load_config_string(kMinimal, {"optimizer.moment_dtype=bfloat16", "optimizer.beta2=0.996"}).warnings.empty());
  EXPECT_TRUE(load_config_string(kMinimal, {"optimizer.beta2=0.9999"}).warnings.empty()) << "float32 moments follow";
}

// `gridformer plan`'s optimizer state: 2 moments x 4 bytes per element, x 2 bytes under bfloat16.
TEST(ConfigMomentDtype, PlanCountsTwoBytesPerMomentElement) {
  const std::regex state(R"(optimizer state ([0-9.]+) (B|KiB|MiB|GiB) \(AdamW moments( in bfloat16)?)");
  auto bytes = [&](const std::string& plan, bool bf16) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(plan, m, state)) << plan;
    EXPECT_EQ(m[3].matched, bf16) << plan;
    const double unit = m[2] == "B" ? 1 : m[2] == "KiB" ? 1024.0 : m[2] == "MiB" ? 1048576.0 : 1073741824.0;
    return std::stod(m[1]) * unit;
  };
  const double f = bytes(plan_report(load_config_string(kMinimal), 1), false);
  const double h = bytes(plan_report(load_config_string(kMinimal, {"optimizer.moment_dtype=bfloat16"}), 1), true);
  EXPECT_NEAR(h, f / 2, 0.05 * 1048576.0) << "half, to the printed digit";
  EXPECT_GT(f, 1048576.0) << "MiB: the comparison above is to 0.1 of it";
}

}  // namespace
}  // namespace gf
