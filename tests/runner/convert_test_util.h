// What tests/runner/convert_test.cpp and tests/runner/convert_options_test.cpp share: a fresh directory per
// test, a conversion (its progress kept or discarded), and Hugging Face weights read back and compared bit for bit.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/io/safetensors.h"
#include "models/causal_lm.h"
#include "models/weights/hf_checkpoint.h"
#include "runner/cli/convert.h"
#include "tests/test_util.h"

namespace gf::convert_test {

namespace fs = std::filesystem;

// A fresh directory per test (ctest runs the tests of this binary as concurrent processes).
inline fs::path work_dir() { return test::fresh_dir(fs::path(GF_BINARY_DIR) / "test_output" / "convert" / test::test_name()); }

// Converts `from` into `to` with o's other options; the progress lines in *progress when given, else discarded.
inline ConvertSummary convert(const fs::path& from, const fs::path& to, ConvertOptions o = {},
                              std::string* progress = nullptr) {
  o.from = from.string();
  o.to = to.string();
  std::ostringstream lines;
  ConvertSummary summary = convert_weights(o, lines);
  if (progress) *progress = lines.str();
  return summary;
}

// Every tensor of `f` (a .safetensors file or a Hugging Face directory / index) by name, as floats.
inline std::map<std::string, std::vector<float>> read_hf(const fs::path& path) {
  std::map<std::string, std::vector<float>> r;
  std::set<std::string> files;
  for (const auto& [name, file] : hf_checkpoint_tensors(resolve_checkpoint_path(path.string()))) files.insert(file);
  for (const std::string& file : files) {
    const SafeTensorsFile f = SafeTensorsFile::open(file);
    for (const auto& [name, t] : f.tensors()) r[name] = f.floats(name);
  }
  return r;
}

inline void expect_bitwise_equal(const std::map<std::string, std::vector<float>>& got,
                                 const std::map<std::string, std::vector<float>>& want, const std::string& what) {
  std::set<std::string> got_names, want_names;
  for (const auto& [n, v] : got) got_names.insert(n);
  for (const auto& [n, v] : want) want_names.insert(n);
  ASSERT_EQ(got_names, want_names) << what << ": the tensors written are not the ones read";
  for (const auto& [n, v] : want) {
    const std::vector<float>& g = got.at(n);
    ASSERT_EQ(g.size(), v.size()) << what << ": " << n;
    EXPECT_EQ(std::memcmp(g.data(), v.data(), v.size() * sizeof(float)), 0) << what << ": " << n << " differs";
  }
}

}  // namespace gf::convert_test
