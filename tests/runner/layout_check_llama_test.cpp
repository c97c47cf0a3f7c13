// The layout check on a Llama: key/value heads must split over model_parallel, and the FFN width's
// message names LlamaConfig's keys (intermediate_size, or the derivation from multiple_of).
#include <gtest/gtest.h>

#include <string>

#include "runner/config/layout_check.h"
#include "tests/runner/config_test_util.h"

namespace gf {
namespace {

using config_test::kMinimalLlama;

const std::string kModelConfig = "model.model_config.";

std::string problems(const std::string& yaml, int world, const std::vector<std::string>& s) {
  const Config c = load_config_string(yaml, s);
  std::string all;
  for (const auto& p : layout_problems(c, world)) all += p + "\n";
  return all;
}

TEST(LlamaLayoutCheck, KeyValueHeadsAndTheSwigluWidthMustSplit) {
  const std::string llama = kMinimalLlama;  // 4 heads, hidden 64
  // n_kv_heads 2 on model_parallel 4: the query heads split, the key/value heads do not.
  std::string p = problems(llama, 4, {"parallel_config.model_parallel=4", kModelConfig + "n_kv_heads=2",
                                      kModelConfig + "intermediate_size=128"});
  EXPECT_EQ(p, "`model.model_config.n_kv_heads` (2) is not divisible by `parallel_config.model_parallel` (4): each rank "
               "holds whole key/value heads; use a model_parallel that divides n_kv_heads\n");
  EXPECT_EQ(problems(llama, 2, {"parallel_config.model_parallel=2", kModelConfig + "n_kv_heads=2"}), "");
  const Config c = load_config_string(llama, {"parallel_config.model_parallel=4", kModelConfig + "n_kv_heads=2",
                                              kModelConfig + "intermediate_size=128"});
  const std::string msg = layout_error_message(c, 4);
  EXPECT_NE(msg.find("a layout that fits 4 rank(s): parallel_config: {data_parallel: 2, model_parallel: 2"),
            std::string::npos) << msg;
  // The FFN width in Llama's keys: intermediate_size when set, else its derivation.
  p = problems(llama, 3, {"parallel_config.model_parallel=3", kModelConfig + "num_heads=6", kModelConfig + "hidden_size=96",
                          kModelConfig + "intermediate_size=100"});
  EXPECT_NE(p.find("the FFN width `model.model_config.intermediate_size` (100) is not divisible by "
                   "`parallel_config.model_parallel` (3)"), std::string::npos) << p;
  EXPECT_EQ(p.find("expand_ratio"), std::string::npos) << p;
  p = problems(llama, 3, {"parallel_config.model_parallel=3", kModelConfig + "num_heads=6", kModelConfig + "hidden_size=96",
                          kModelConfig + "multiple_of=64"});
  EXPECT_NE(p.find("the FFN width (256, derived from `hidden_size` 96 rounded up to `multiple_of` 64, as "
                   "`intermediate_size` is unset) is not divisible by `parallel_config.model_parallel` (3); set "
                   "`model.model_config.intermediate_size` to a multiple of it"), std::string::npos) << p;
  EXPECT_EQ(problems(llama, 3, {"parallel_config.model_parallel=3", kModelConfig + "num_heads=6",
                                kModelConfig + "hidden_size=96", kModelConfig + "intermediate_size=258"}), "");
}

}  // namespace
}  // namespace gf
