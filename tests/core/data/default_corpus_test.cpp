// The default corpus that scripts/setup.sh builds (data/fortunes/fortunes.jsonl through
// preprocess_data --append-eod) reads back document by document as the tokenizer encodes each
// JSONL text, followed by <|endoftext|>.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/data/indexed_dataset.h"
#include "core/data/tokenizer.h"

namespace gf::data {
namespace {

TEST(DefaultCorpus, ReadsBackDocumentByDocument) {
  const std::string root = GF_SOURCE_DIR;
  const std::string jsonl = root + "/data/fortunes/fortunes.jsonl";
  const std::string prefix = root + "/data/fortunes/fortunes_text_document";
  ASSERT_TRUE(std::filesystem::exists(jsonl) && std::filesystem::exists(prefix + ".idx"))
      << "the default corpus is missing: run scripts/setup.sh (it builds data/fortunes)";
  const GPT2Tokenizer tok = GPT2Tokenizer::from_files(root + "/data/gpt2/gpt2-vocab.json", root + "/data/gpt2/gpt2-merges.txt");
  const IndexedDataset ds(prefix);
  ds.check_token_ids(tok.vocab_size());
  std::ifstream in(jsonl);
  std::string line;
  int64_t doc = 0, tokens = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<int32_t> ids = tok.encode(nlohmann::json::parse(line).at("text").get<std::string>());
    ids.push_back(tok.eod_id());
    ASSERT_LT(doc, ds.num_documents());
    const int64_t s0 = ds.document_indices()[doc], s1 = ds.document_indices()[doc + 1];
    ASSERT_EQ(s1 - s0, 1) << "document " << doc << " should be one sequence";
    const TokenView seq = ds.sequence(s0);
    ASSERT_EQ(seq.size(), static_cast<int64_t>(ids.size())) << "document " << doc;
    for (int64_t i = 0; i < seq.size(); ++i) ASSERT_EQ(seq[i], ids[i]) << "document " << doc << " token " << i;
    tokens += seq.size();
    ++doc;
  }
  EXPECT_EQ(doc, ds.num_documents());
  EXPECT_EQ(tokens, ds.num_tokens());
  EXPECT_GT(doc, 10000) << "the fortunes corpus should hold over ten thousand documents";
  // Real English: the most common ids include " the" (262) and "." (13).
  std::vector<int64_t> count(static_cast<size_t>(tok.vocab_size()), 0);
  for (int64_t s = 0; s < ds.num_sequences(); ++s) {
    const TokenView v = ds.sequence(s);
    for (int64_t i = 0; i < v.size(); ++i) ++count[static_cast<size_t>(v[i])];
  }
  EXPECT_GT(count[262], tokens / 100);
  EXPECT_GT(count[13], tokens / 100);
}

}  // namespace
}  // namespace gf::data
