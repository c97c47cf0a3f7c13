// What the tokenizer and template tests share: reading a golden file whole or by lines, a JSON-lines corpus's
// texts, and token ids as the golden files write them (one line of ids separated by spaces).
#pragma once
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace gf::test {

using Ids = std::vector<int32_t>;

// The file's bytes; a file that cannot be opened fails the test (and reads as "").
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// The lines of `text`, without their '\n'.
inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The file's lines; a file that cannot be opened fails the test (and has none).
inline std::vector<std::string> read_lines(const std::filesystem::path& path) { return split_lines(read_file(path)); }

// The "text" field of every line of a JSON-lines file.
inline std::vector<std::string> corpus_texts(const std::filesystem::path& jsonl) {
  std::vector<std::string> texts;
  for (const std::string& line : read_lines(jsonl)) texts.push_back(nlohmann::json::parse(line).at("text"));
  return texts;
}

// "1 2 3" -> {1, 2, 3}, and back.
inline Ids parse_ids(const std::string& line) {
  Ids ids;
  std::istringstream in(line);
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

inline std::string ids_str(const Ids& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}

}  // namespace gf::test
