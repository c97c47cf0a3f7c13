// Hugging Face's RoPE variants (core/ops/rope_scaling.h) against tests/golden/rope/rope_cases.json,
// written by tools/make_rope_golden.py from tools/hf_rope_reference.py (a torch transcription of
// transformers' modeling_rope_utils.py, 5.x), on Debian's torch 1.13 (AVX2). Also: the old table
// bitwise, partial rotary, the 4.x/5.x config forms, export round trips and refusals.
//
// The bounds. inv_freq and attention_scaling: 1e-6 relative (a float32 ulp is 6e-8 relative).
// cos/sin at position p: both sides compute angle = fl(float32(p) * inv_freq[i]), one float32
// product, so equal inv_freq bits give equal angle bits, and cos/sin then differ only by the cos/sin
// evaluation (torch: SLEEF's float32 cos, within 1 ulp; here: double cos rounded to float) and the
// product with attention_scaling: a few 1e-8 for |cos| <= 1.35, so 1e-6 absolute holds with margin.
// inv_freq bits are NOT always equal: torch's AVX2 pow is SLEEF's powf (1-ulp), ours glibc's
// correctly rounded powf (the one make_rope_table(theta) has always used), and where the exact
// theta^(2i/d) lies near a midpoint of two floats they round apart by one ulp. Found (the test prints
// them): 6 of the 752 inverse frequencies here, each 1 ulp, each where torch's pow and glibc's differ
// (checked in Python with ctypes' powf): yarn_qwen3 i 37 (theta 1e6, d 128), yarn_untruncated i 6 and
// 10 (theta 1.5e5, d 64), dynamic_2_at_2x i 31 (its NTK base, d 128), longrope_phi3_* i 20 (theta 1e4,
// d 96). The other 746, llama3's wavelength arithmetic and yarn's ramp included, are bitwise equal
// (llama3_theta1e4 fails by up to 4 ulp if `2 pi / inv_freq` is one division instead of torch's two).
// One ulp of inv_freq moves the angle by p ulp(inv_freq) (6e-5 rad at p = 16384 for Phi-3's i 20),
// so for such a frequency the cos/sin bound is p |d inv_freq| attention_scaling + 1e-6; the table
// itself is checked at 1e-6 everywhere from the golden inv_freq.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/ops/rope.h"
#include "core/ops/rope_scaling.h"

namespace gf {
namespace {

using nlohmann::json;
using ops::RopeConfig;
using ops::RopeFrequencies;
using ops::RopeScaling;
using ops::RopeTable;

const json& golden() {
  static const json doc = [] {
    std::ifstream in(std::string(GF_SOURCE_DIR) + "/tests/golden/rope/rope_cases.json");
    EXPECT_TRUE(in.good()) << "tests/golden/rope/rope_cases.json (tools/make_rope_golden.py)";
    return json::parse(in);
  }();
  return doc;
}

int64_t max_pos(const json& c) { return c["config_4x"]["max_position_embeddings"].get<int64_t>(); }
int64_t seq_len(const json& c) { return c["seq_len"].is_null() ? 0 : c["seq_len"].get<int64_t>(); }

std::string error_of(const json& config) {
  try {
    ops::read_rope_config(config, 10000.0);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(RopeScalingGolden, FrequenciesAndTablesMatchTransformers) {
  ASSERT_GE(golden()["cases"].size(), 12u);
  int64_t bitwise = 0, total = 0;
  for (const json& c : golden()["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const RopeConfig rc = ops::read_rope_config(c["config_4x"], 10000.0);
    ASSERT_EQ(rc, ops::read_rope_config(c["config_5x"], 10000.0)) << "4.x and 5.x forms of one config";
    const int64_t head_dim = c["head_dim"];
    const RopeFrequencies f = ops::rope_frequencies(head_dim, rc.theta, rc.scaling, max_pos(c), seq_len(c));
    const auto bits = c["inv_freq_bits"].get<std::vector<uint32_t>>();
    ASSERT_EQ(f.rotary_dim, c["rotary_dim"].get<int64_t>());
    ASSERT_EQ(f.inv_freq.size(), bits.size());
    std::vector<float> want(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      want[i] = std::bit_cast<float>(bits[i]);
      EXPECT_EQ(want[i], c["inv_freq"][i].get<float>());
      EXPECT_NEAR(f.inv_freq[i], want[i], 1e-6 * std::abs(want[i])) << "inv_freq[" << i << "]";
      const int64_t ulps = std::abs(static_cast<int64_t>(std::bit_cast<uint32_t>(f.inv_freq[i])) - bits[i]);
      EXPECT_LE(ulps, 1) << "inv_freq[" << i << "]";
      if (ulps == 0) ++bitwise;
      else std::cout << "  " << name << ": inv_freq[" << i << "] " << ulps << " ulp from torch's\n";
      ++total;
    }
    const double scaling = c["attention_scaling"];
    EXPECT_NEAR(f.attention_scaling, scaling, 1e-6 * scaling);

    const auto positions = c["positions"].get<std::vector<int64_t>>();
    const int64_t rows = *std::max_element(positions.begin(), positions.end()) + 1;
    const RopeTable<float> ours = ops::make_rope_table<float>(rows, head_dim, f);
    // The table alone, from torch's inv_freq and factor.
    const RopeFrequencies theirs_f{want, static_cast<float>(scaling), f.rotary_dim};
    const RopeTable<float> theirs = ops::make_rope_table<float>(rows, head_dim, theirs_f);
    ASSERT_EQ(ours.half, static_cast<int64_t>(want.size()));
    ASSERT_EQ(ours.head_dim, head_dim);
    for (size_t k = 0; k < positions.size(); ++k) {
      const int64_t p = positions[k];
      for (int64_t i = 0; i < ours.half; ++i) {
        const size_t at = static_cast<size_t>(p * ours.half + i);
        const double cos_ref = c["cos"][k][i], sin_ref = c["sin"][k][i];
        EXPECT_NEAR(theirs.cos[at], cos_ref, 1e-6) << "p " << p << " i " << i;
        EXPECT_NEAR(theirs.sin[at], sin_ref, 1e-6) << "p " << p << " i " << i;
        const size_t fi = static_cast<size_t>(i);
        const double dinv = std::abs(static_cast<double>(f.inv_freq[fi]) - want[fi]);
        const double bound = 1e-6 + static_cast<double>(p) * dinv * scaling;  // dinv 0: 1e-6
        EXPECT_NEAR(ours.cos[at], cos_ref, bound) << "p " << p << " i " << i;
        EXPECT_NEAR(ours.sin[at], sin_ref, bound) << "p " << p << " i " << i;
      }
    }
  }
  std::cout << "  inv_freq bitwise equal to torch's: " << bitwise << " of " << total << "\n";
  EXPECT_GE(bitwise, total - 6);  // the six pow roundings listed at the top
}

TEST(RopeScaling, DefaultTableIsBitwiseTheOldOne) {
  for (const auto& [head_dim, theta] : {std::pair{64, 10000.0}, {128, 500000.0}, {96, 10000.0}, {16, 1e6}, {80, 1e4}}) {
    const RopeTable<float> old = ops::make_rope_table<float>(4096, head_dim, theta);
    const RopeFrequencies f = ops::rope_frequencies(head_dim, theta, RopeScaling{}, 4096, 4096);
    const RopeTable<float> now = ops::make_rope_table<float>(4096, head_dim, f);
    EXPECT_EQ(f.attention_scaling, 1.0f);
    EXPECT_EQ(old.half, now.half);
    EXPECT_EQ(old.head_dim, now.head_dim);
    EXPECT_TRUE(old.cos == now.cos && old.sin == now.sin) << "head_dim " << head_dim << " theta " << theta;
    // dynamic within max_position_embeddings is the default RoPE, bit for bit.
    RopeScaling dyn;
    dyn.rope_type = "dynamic", dyn.factor = 2.0;
    EXPECT_EQ(ops::rope_frequencies(head_dim, theta, dyn, 4096, 1000).inv_freq, f.inv_freq);
  }
}

// rope_fwd with a partial-rotary table: the first rotary_dim of each head as a full-rotary table of
// that width rotates them, the rest passes through; rope_bwd is the transpose.
TEST(RopeScaling, PartialRotaryRotatesTheFirstRotaryDim) {
  constexpr int64_t head_dim = 80, heads = 3, T = 5, B = 2, rows = B * T, pos0 = 7;
  RopeScaling s;
  s.partial_rotary_factor = 0.4;  // Phi-2: 32 of 80
  const RopeFrequencies f = ops::rope_frequencies(head_dim, 10000.0, s, 2048, 2048);
  ASSERT_EQ(f.rotary_dim, 32);
  const RopeTable<float> part = ops::make_rope_table<float>(64, head_dim, f);
  const RopeTable<float> full32 = ops::make_rope_table<float>(64, 32, 10000.0);  // HF: dim = rotary_dim
  EXPECT_TRUE(part.cos == full32.cos && part.sin == full32.sin);

  std::mt19937 gen(5);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(rows * heads * head_dim));
  for (float& v : x) v = nd(gen);
  std::vector<float> y(x.size(), -99.f), inplace = x;
  ops::rope_fwd<float>(y.data(), x.data(), part, rows, T, heads, pos0);
  ops::rope_fwd<float>(inplace.data(), inplace.data(), part, rows, T, heads, pos0);
  EXPECT_EQ(y, inplace);
  // The reference: each head's first 32 as a 32-wide row through the full table.
  std::vector<float> xr(static_cast<size_t>(rows * heads * 32)), yr(xr.size());
  for (int64_t r = 0; r < rows * heads; ++r)
    for (int64_t i = 0; i < 32; ++i) xr[static_cast<size_t>(r * 32 + i)] = x[static_cast<size_t>(r * head_dim + i)];
  ops::rope_fwd<float>(yr.data(), xr.data(), full32, rows, T, heads, pos0);
  for (int64_t r = 0; r < rows * heads; ++r) {
    for (int64_t i = 0; i < 32; ++i)
      ASSERT_EQ(y[static_cast<size_t>(r * head_dim + i)], yr[static_cast<size_t>(r * 32 + i)]) << r << " " << i;
    for (int64_t i = 32; i < head_dim; ++i)
      ASSERT_EQ(y[static_cast<size_t>(r * head_dim + i)], x[static_cast<size_t>(r * head_dim + i)]) << r << " " << i;
  }
  // rope_fwd_at with the same positions, and a packed row (ld) leaves what follows alone.
  std::vector<int32_t> positions(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) positions[static_cast<size_t>(r)] = static_cast<int32_t>(pos0 + r % T);
  std::vector<float> y_at(x.size());
  ops::rope_fwd_at<float>(y_at.data(), x.data(), part, rows, heads, positions.data());
  EXPECT_EQ(y_at, y);
  const int64_t ld = heads * head_dim + 11;
  std::vector<float> packed(static_cast<size_t>(rows * ld));
  for (float& v : packed) v = nd(gen);
  std::vector<float> packed_y = packed;
  ops::rope_fwd<float>(packed_y.data(), packed_y.data(), part, rows, T, heads, pos0, ld);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = heads * head_dim; j < ld; ++j)
      ASSERT_EQ(packed_y[static_cast<size_t>(r * ld + j)], packed[static_cast<size_t>(r * ld + j)]);

  // <R x, v> = <x, R^T v> in double, with a yarn-scaled (attention_scaling != 1) partial table.
  RopeScaling yarn;
  yarn.rope_type = "yarn", yarn.factor = 4.0, yarn.original_max_position_embeddings = 16;
  yarn.partial_rotary_factor = 0.5;
  const RopeFrequencies fy = ops::rope_frequencies(head_dim, 10000.0, yarn, 64, 64);
  ASSERT_NE(fy.attention_scaling, 1.0f);
  const RopeTable<double> td = ops::make_rope_table<double>(64, head_dim, fy);
  std::normal_distribution<double> ndd;
  std::vector<double> xd(x.size()), vd(x.size()), rx(x.size()), rtv(x.size());
  for (double& v : xd) v = ndd(gen);
  for (double& v : vd) v = ndd(gen);
  ops::rope_fwd<double>(rx.data(), xd.data(), td, rows, T, heads, pos0);
  ops::rope_bwd<double>(rtv.data(), vd.data(), td, rows, T, heads, pos0);
  double lhs = 0, rhs = 0, norm = 0;
  for (size_t i = 0; i < xd.size(); ++i) lhs += rx[i] * vd[i], rhs += xd[i] * rtv[i], norm += std::abs(xd[i] * vd[i]);
  EXPECT_NEAR(lhs, rhs, 1e-12 * norm);
  for (int64_t r = 0; r < rows * heads; ++r)  // the transpose passes the rest through too
    for (int64_t i = 40; i < head_dim; ++i)
      ASSERT_EQ(rtv[static_cast<size_t>(r * head_dim + i)], vd[static_cast<size_t>(r * head_dim + i)]);
}

TEST(RopeScalingConfig, BothFormsAndDefaults) {
  // Llama 3.1 8B's config.json (4.x) and what transformers 5 writes for it.
  const json v4 = json::parse(R"({"max_position_embeddings": 131072, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  const json v5 = json::parse(R"({"max_position_embeddings": 131072, "rope_parameters": {"rope_type": "llama3",
    "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192}})");
  const RopeConfig a = ops::read_rope_config(v4, 10000.0), b = ops::read_rope_config(v5, 10000.0);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.theta, 500000.0);
  EXPECT_EQ(a.scaling.rope_type, "llama3");
  EXPECT_EQ(a.scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(a.scaling.describe(),
            "rope llama3 factor 8.0 original_max_position_embeddings 8192 low_freq_factor 1.0 high_freq_factor 4.0");
  // Both in one file, agreeing: fine; rope_scaling null or absent is the default, theta the model's.
  json both = v4;
  both["rope_parameters"] = v5["rope_parameters"];
  EXPECT_EQ(ops::read_rope_config(both, 10000.0), a);
  const RopeConfig d = ops::read_rope_config(json::parse(R"({"rope_scaling": null})"), 1e6);
  EXPECT_EQ(d.theta, 1e6);
  EXPECT_EQ(d.scaling, RopeScaling{});
  EXPECT_EQ(d.scaling.describe(), "rope default");
  EXPECT_EQ(ops::read_rope_scaling(json::object()), RopeScaling{});
  // "type" (older 4.x) for "rope_type"; partial_rotary_factor at the top or inside.
  const RopeScaling lin = ops::read_rope_scaling(json::parse(R"({"rope_scaling": {"type": "linear", "factor": 2}})"));
  EXPECT_EQ(lin.rope_type, "linear");
  EXPECT_EQ(lin.factor, 2.0);
  EXPECT_EQ(ops::read_rope_scaling(json::parse(R"({"partial_rotary_factor": 0.5})")).partial_rotary_factor, 0.5);
  EXPECT_EQ(ops::read_rope_scaling(json::parse(R"({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
    "partial_rotary_factor": 0.25}})")).partial_rotary_factor, 0.25);
  // Phi-3's longrope: original_max_position_embeddings at the top level; factor from the ratio (HF's).
  json phi3 = json::parse(R"({"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
    "head_dim": 8, "rope_scaling": {"type": "longrope", "short_factor": [1, 1.1, 1.2, 1.3],
    "long_factor": [1, 2, 4, 8]}})");
  const RopeScaling lr = ops::read_rope_scaling(phi3);
  EXPECT_EQ(lr.original_max_position_embeddings, 4096);
  EXPECT_EQ(lr.factor, 0.0);  // unset: rope_frequencies takes 131072 / 4096
  const RopeFrequencies lf = ops::rope_frequencies(8, 10000.0, lr, 131072, 4096);
  EXPECT_NEAR(lf.attention_scaling, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-7);
}

TEST(RopeScalingConfig, ExportRoundTrips) {
  EXPECT_TRUE(ops::rope_scaling_json(RopeScaling{}).is_null());
  for (const json& c : golden()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const RopeConfig rc = ops::read_rope_config(c["config_4x"], 10000.0);
    // rope_scaling_json beside rope_theta (and partial_rotary_factor, a top-level key in 4.x).
    json plain{{"rope_theta", rc.theta}, {"rope_scaling", ops::rope_scaling_json(rc.scaling)}};
    if (rc.scaling.partial_rotary_factor != 1.0) plain["partial_rotary_factor"] = rc.scaling.partial_rotary_factor;
    EXPECT_EQ(ops::read_rope_config(plain, 10000.0), rc) << plain.dump();
    // write_rope_config into the model's config.json, replacing the RoPE keys it had (5.x ones too).
    json cfg = c["config_5x"];
    ops::write_rope_config(cfg, rc);
    EXPECT_FALSE(cfg.contains("rope_parameters"));
    EXPECT_EQ(ops::read_rope_config(cfg, 10000.0), rc) << cfg.dump();
    EXPECT_EQ(ops::rope_frequencies(c["head_dim"], rc.theta, ops::read_rope_config(cfg, 10000.0).scaling, max_pos(c),
                                    seq_len(c)).inv_freq,
              ops::rope_frequencies(c["head_dim"], rc.theta, rc.scaling, max_pos(c), seq_len(c)).inv_freq);
  }
  RopeScaling y;
  y.rope_type = "yarn", y.factor = 32, y.original_max_position_embeddings = 4096, y.truncate = false;
  y.attention_factor = 1.2, y.beta_fast = 16, y.mscale = 0.5, y.mscale_all_dim = 0.25, y.partial_rotary_factor = 0.75;
  json cfg;
  ops::write_rope_config(cfg, RopeConfig{2e5, y});
  EXPECT_EQ(ops::read_rope_config(cfg, 10000.0), (RopeConfig{2e5, y})) << cfg.dump();
}

TEST(RopeScalingConfig, RefusalsNameTheKey) {
  const auto expect_refused = [](const char* text, const std::vector<std::string>& parts) {
    const std::string e = error_of(json::parse(text));
    for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << text << "\n  -> " << e;
  };
  expect_refused(R"({"rope_scaling": {"rope_type": "ntk-by-parts", "factor": 2}})",
                 {"rope_scaling.rope_type", "ntk-by-parts",
                  "accepts default, linear, dynamic, yarn, llama3, longrope"});
  expect_refused(R"({"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e4}})",
                 {"rope_parameters.rope_type", "proportional"});
  expect_refused(R"({"rope_scaling": {"type": 3}})", {"rope_scaling.type", "expects a string"});
  expect_refused(R"({"rope_scaling": {"rope_type": "linear", "factor": 0.5}})", {"rope_scaling.factor 0.5", ">= 1"});
  expect_refused(R"({"rope_scaling": {"rope_type": "dynamic"}})", {"rope_scaling.factor is missing", "dynamic"});
  expect_refused(R"({"rope_scaling": {"rope_type": "yarn", "factor": "4"}})", {"rope_scaling.factor \"4\"", "number"});
  expect_refused(R"({"rope_scaling": {"rope_type": "llama3", "factor": 8, "high_freq_factor": 4,
                 "original_max_position_embeddings": 8192}})", {"rope_scaling.low_freq_factor is missing"});
  expect_refused(R"({"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                 "high_freq_factor": 4}})", {"rope_scaling.original_max_position_embeddings is missing"});
  expect_refused(R"({"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 0, "high_freq_factor": 4,
                 "original_max_position_embeddings": 8192}})", {"rope_scaling.low_freq_factor 0", "must be > 0"});
  expect_refused(R"({"rope_scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4096.5}})",
                 {"rope_scaling.original_max_position_embeddings 4096.5", "positive integer"});
  expect_refused(R"({"rope_scaling": {"rope_type": "yarn", "factor": 4, "truncate": "no"}})",
                 {"rope_scaling.truncate", "true or false"});
  expect_refused(R"({"rope_scaling": {"rope_type": "yarn", "factor": 4, "attention_factor": -1}})",
                 {"rope_scaling.attention_factor -1", ">= 0"});
  expect_refused(R"({"head_dim": 8, "rope_scaling": {"rope_type": "longrope", "short_factor": [1, 1, 1],
                 "long_factor": [1, 2, 3, 4]}})", {"rope_scaling.short_factor has 3 numbers", "rotary_dim / 2 = 4"});
  expect_refused(R"({"rope_scaling": {"rope_type": "longrope", "long_factor": [1, 2]}})",
                 {"rope_scaling.short_factor is missing"});
  expect_refused(R"({"rope_scaling": {"rope_type": "longrope", "short_factor": [1, "x"], "long_factor": [1, 2]}})",
                 {"rope_scaling.short_factor", "list of positive numbers"});
  expect_refused(R"({"rope_scaling": [1, 2]})", {"rope_scaling [1,2]", "expects a map"});
  expect_refused(R"({"rope_theta": "1e4"})", {"rope_theta \"1e4\"", "number"});
  expect_refused(R"({"partial_rotary_factor": 1.5})", {"partial_rotary_factor 1.5", "(0, 1]"});
  expect_refused(R"({"partial_rotary_factor": 0.5, "rope_parameters": {"rope_type": "default",
                 "partial_rotary_factor": 0.25}})", {"partial_rotary_factor 0.5", "disagree"});
  expect_refused(R"({"rope_theta": 10000, "rope_parameters": {"rope_type": "default", "rope_theta": 500000}})",
                 {"rope_parameters.rope_theta 500000", "disagree"});
  expect_refused(R"({"rope_scaling": {"rope_type": "linear", "factor": 2},
                 "rope_parameters": {"rope_type": "default"}})",
                 {"rope_scaling (rope linear factor 2.0, rope_theta 10000.0) and rope_parameters (rope default",
                  "disagree"});
  expect_refused(R"({"rope_parameters": {"full_attention": {"rope_type": "default"},
                 "sliding_attention": {"rope_type": "default"}}})", {"rope_parameters", "per layer type"});
  // rope_frequencies refuses what HF could not run.
  RopeScaling odd;
  odd.partial_rotary_factor = 0.3;  // int(64 * 0.3) = 19
  EXPECT_THROW(ops::rope_frequencies(64, 1e4, odd, 4096, 4096), std::invalid_argument);
  RopeScaling lin;
  lin.rope_type = "linear";  // factor unset
  EXPECT_THROW(ops::rope_frequencies(64, 1e4, lin, 4096, 4096), std::invalid_argument);
  RopeFrequencies bad{{1.0f, 0.5f}, 1.0f, 4};
  EXPECT_THROW(ops::make_rope_table<float>(8, 2, bad), std::invalid_argument);  // head_dim < rotary_dim
}

}  // namespace
}  // namespace gf
