// Runs build/bin/preprocess_data and reads its output back with IndexedDataset, comparing every
// document with GPT2Tokenizer::encode. Skipped when the binary or the GPT-2 vocabulary
// (scripts/fetch_gpt2_vocab.sh) is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/data/indexed_dataset.h"
#include "core/data/tokenizer.h"
#include "tests/test_util.h"

namespace gf::data {
namespace {

namespace fs = std::filesystem;

const std::string kBinary = std::string(GF_BINARY_DIR) + "/bin/preprocess_data";
const std::string kVocab = std::string(GF_SOURCE_DIR) + "/data/gpt2/gpt2-vocab.json";
const std::string kMerges = std::string(GF_SOURCE_DIR) + "/data/gpt2/gpt2-merges.txt";

class PreprocessDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kBinary)) GTEST_SKIP() << kBinary << " not built";
    if (!fs::exists(kVocab) || !fs::exists(kMerges)) GTEST_SKIP() << "GPT-2 vocabulary missing: run scripts/fetch_gpt2_vocab.sh";
    dir_ = test::temp_test_dir("preprocess_test");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs the tool; returns its exit status and puts its stderr in *err.
  int run(const std::string& input, const std::string& extra, std::string* err = nullptr) const {
    const std::string cmd = kBinary + " --input " + input + " --output-prefix " + path("out") + " --vocab-file " + kVocab +
                            " --merge-file " + kMerges + " " + extra + " >" + path("stdout") + " 2>" + path("stderr");
    const int status = std::system(cmd.c_str());
    if (err) {
      std::ifstream in(path("stderr"));
      *err = std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  void write(const std::string& name, const std::string& text) const { std::ofstream(path(name), std::ios::binary) << text; }

  fs::path dir_;
};

std::vector<int32_t> tokens_of(const IndexedDataset& ds, int64_t doc) {
  std::vector<int32_t> out;
  for (int64_t s = ds.document_indices()[doc]; s < ds.document_indices()[doc + 1]; ++s) {
    const TokenView v = ds.sequence(s);
    for (int64_t i = 0; i < v.size(); ++i) out.push_back(static_cast<int32_t>(v[i]));
  }
  return out;
}

TEST_F(PreprocessDataTest, JsonlReadsBackAsTheTokenizerEncodes) {
  const std::vector<std::string> texts{"Hello world!", "", "Line one.\nLine two\ttabbed  spaces",
                                       "caf\xc3\xa9 \xe2\x80\x94 na\xc3\xafve \xf0\x9f\x98\x80", "<|endoftext|> is plain text here",
                                       std::string(3000, 'a') + " end"};
  std::string jsonl;
  for (const auto& t : texts) jsonl += nlohmann::json{{"text", t}, {"id", 1}}.dump() + "\n";
  jsonl += "\n";  // blank lines are skipped
  jsonl += nlohmann::json{{"text", std::vector<std::string>{"First sentence.", "", " Second."}}}.dump() + "\n";
  write("in.jsonl", jsonl);
  ASSERT_EQ(run(path("in.jsonl"), "--append-eod --workers 2"), 0);

  const auto tok = GPT2Tokenizer::from_files(kVocab, kMerges);
  IndexedDataset ds(path("out_text_document"));
  EXPECT_EQ(ds.dtype(), DType::kUInt16);
  ASSERT_EQ(ds.num_documents(), static_cast<int64_t>(texts.size()) + 1);
  for (size_t d = 0; d < texts.size(); ++d) {
    std::vector<int32_t> expected = tok.encode(texts[d]);
    if (!expected.empty()) expected.push_back(tok.eod_id());  // Megatron appends EOD to non-empty documents
    EXPECT_EQ(tokens_of(ds, static_cast<int64_t>(d)), expected) << "document " << d;
  }
  // A list of sentences: one sequence per non-empty sentence, EOD on the last.
  const int64_t last = ds.num_documents() - 1;
  ASSERT_EQ(ds.document_indices()[last + 1] - ds.document_indices()[last], 2);
  std::vector<int32_t> first = tok.encode("First sentence."), second = tok.encode(" Second.");
  second.push_back(tok.eod_id());
  EXPECT_EQ(ds.sequence(ds.document_indices()[last]).size(), static_cast<int64_t>(first.size()));
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(tokens_of(ds, last), first);
  EXPECT_NO_THROW(ds.check_token_ids(tok.vocab_size()));
}

TEST_F(PreprocessDataTest, PlainTextIsOneDocumentPerParagraph) {
  write("in.txt", "First paragraph,\nsecond line.\n\n\n  \nSecond paragraph.\n\nThird, no newline at end");
  ASSERT_EQ(run(path("in.txt"), ""), 0);
  const auto tok = GPT2Tokenizer::from_files(kVocab, kMerges);
  IndexedDataset ds(path("out_text_document"));
  ASSERT_EQ(ds.num_documents(), 3);
  EXPECT_EQ(tokens_of(ds, 0), tok.encode("First paragraph,\nsecond line."));
  EXPECT_EQ(tokens_of(ds, 1), tok.encode("Second paragraph."));
  EXPECT_EQ(tokens_of(ds, 2), tok.encode("Third, no newline at end"));
}

TEST_F(PreprocessDataTest, SeveralKeysWriteOneDatasetEach) {
  write("in.jsonl", "{\"text\": \"a b\", \"title\": \"T\"}\n{\"text\": \"c\", \"title\": \"U V\"}\n");
  ASSERT_EQ(run(path("in.jsonl"), "--json-keys text title"), 0);
  const auto tok = GPT2Tokenizer::from_files(kVocab, kMerges);
  IndexedDataset text(path("out_text_document")), title(path("out_title_document"));
  EXPECT_EQ(tokens_of(text, 1), tok.encode("c"));
  EXPECT_EQ(tokens_of(title, 1), tok.encode("U V"));
}

TEST_F(PreprocessDataTest, BadInputIsNamedByLine) {
  std::string err;
  write("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"also ok\"}\n{\"text\": broken}\n");
  EXPECT_NE(run(path("bad.jsonl"), "", &err), 0);
  EXPECT_NE(err.find(path("bad.jsonl") + ":3: invalid JSON"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(path("out_text_document.idx")));

  write("nokey.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  EXPECT_NE(run(path("nokey.jsonl"), "", &err), 0);
  EXPECT_NE(err.find(path("nokey.jsonl") + ":2: key \"text\" missing"), std::string::npos) << err;

  write("type.jsonl", "{\"text\": 5}\n");
  EXPECT_NE(run(path("type.jsonl"), "", &err), 0);
  EXPECT_NE(err.find(":1: key \"text\" is not a string"), std::string::npos) << err;

  EXPECT_NE(run(path("type.jsonl"), "--tokenizer-type TikTokenizer", &err), 0);
  EXPECT_NE(err.find("is not supported; supported: GPT2BPETokenizer"), std::string::npos) << err;

  EXPECT_NE(run(path("type.jsonl"), "--tokenizer-type SentencePieceTokenizer", &err), 0);
  EXPECT_NE(err.find("needs --tokenizer-model"), std::string::npos) << err;
}

}  // namespace
}  // namespace gf::data
