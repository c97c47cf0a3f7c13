// Tests for the BERT WordPiece tokenizer (core/data/wordpiece.h): Megatron's
// BertWordPieceLowerCase / BertWordPieceCase.
//
// Golden data in tests/data/wordpiece (see its README): corpus.jsonl covers ASCII, accented Latin
// (precomposed and NFD input), CJK ideographs (BMP, extension planes, compatibility), kana,
// Hangul, Cyrillic, Greek (final sigma), Arabic with harakat, Devanagari, Thai, Hebrew, emoji
// (ZWJ sequences, skin tones, variation selectors), ASCII and Unicode punctuation, control and
// format characters, every whitespace class (tab, LF, CR, VT, FF, NBSP, ideographic space,
// U+2028/2029, U+1680, U+202F, U+205F, U+001C-001F, U+0085), words of 100, more than 100 and up to 200
// characters and unknown words. ids_lower.txt / ids_cased.txt are what
// tools/bert_tokenization_reference.py (a transcription of Google BERT's tokenization.py) writes.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "core/data/wordpiece.h"
#include "tests/core/data/text_test_util.h"

namespace gf::data {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const fs::path kDir = fs::path(GF_SOURCE_DIR) / "tests" / "data" / "wordpiece";

using test::ids_str;
using test::parse_ids;
using test::read_lines;

std::vector<std::string> corpus_texts() { return test::corpus_texts(kDir / "corpus.jsonl"); }

void check_golden(bool lower, const std::string& golden) {
  const auto tok = WordPieceTokenizer::from_file((kDir / "vocab.txt").string(), lower);
  const std::vector<std::string> texts = corpus_texts();
  const std::vector<std::string> expected = read_lines(kDir / golden);
  ASSERT_EQ(texts.size(), expected.size()) << golden;
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(ids_str(tok.encode(texts[i])), ids_str(parse_ids(expected[i])))
        << golden << " line " << i + 1 << ": " << nlohmann::json(texts[i]).dump();
}

TEST(WordPiece, LowerCaseMatchesReference) { check_golden(true, "ids_lower.txt"); }
TEST(WordPiece, CasedMatchesReference) { check_golden(false, "ids_cased.txt"); }

class WordPieceToy : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gf_wordpiece_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& contents) {
    const fs::path p = dir_ / "vocab.txt";
    std::ofstream(p, std::ios::binary) << contents;
    return p.string();
  }
  fs::path dir_;
};

// load_vocab: \n, \r\n and \r end lines; whitespace stripped; a repeated token keeps its last id;
// Megatron adds [BOS] then [EOS] after the distinct tokens.
TEST_F(WordPieceToy, VocabLinesAndMegatronSpecials) {
  const auto tok = WordPieceTokenizer::from_file(write("[UNK]\r\nun\r##aff\n  ##able \t\nun\nx\n"), true);
  EXPECT_EQ(tok.encode("unaffable"), (Ids{4, 2, 3}));
  EXPECT_EQ(tok.encode("UNAFFABLE y"), (Ids{4, 2, 3, 0}));
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.bos_id(), 5);  // 6 lines, 5 distinct tokens
  EXPECT_EQ(tok.eod_id(), 6);
  EXPECT_EQ(tok.vocab_size(), 7);
  EXPECT_EQ(tok.decode(Ids{4, 2, 3, 0}), "unaffable [UNK]");
  EXPECT_EQ(tok.decode(Ids{5}), "[BOS]");  // len(vocab) is also x's line: Megatron's inv_vocab names [BOS]
  EXPECT_THROW(tok.decode(Ids{1}), std::out_of_range);  // line 2's "un" was overridden by line 5
}

TEST_F(WordPieceToy, ExistingEosIsEod) {
  const auto tok = WordPieceTokenizer::from_file(write("[UNK]\n[EOS]\na\n"), false);
  EXPECT_EQ(tok.eod_id(), 1);
  EXPECT_EQ(tok.bos_id(), 3);
  EXPECT_EQ(tok.vocab_size(), 4);
}

TEST_F(WordPieceToy, InvalidUtf8IsDroppedAndMissingUnkThrows) {
  const auto tok = WordPieceTokenizer::from_file(write("[UNK]\nab\n"), false);
  EXPECT_EQ(tok.encode("a\xff" "b"), (Ids{1}));
  EXPECT_EQ(tok.encode("a\xe2\x82" "b \xc3"), (Ids{1}));
  const auto no_unk = WordPieceTokenizer::from_file(write("ab\n"), false);
  EXPECT_EQ(no_unk.unk_id(), -1);
  EXPECT_THROW(no_unk.encode("abc"), std::runtime_error);
  EXPECT_THROW(WordPieceTokenizer::from_file((dir_ / "missing.txt").string(), true), std::runtime_error);
}

// Megatron's bert_tokenization.py (Google BERT's tokenization.py since November 2018): words of up to
// 200 code points are split into pieces; only a longer word is one [UNK]. Hugging Face's WordPiece
// model defaults to 100, which is not what Megatron's BertWordPieceLowerCase / Case compute.
TEST_F(WordPieceToy, WordsUpTo200CodePointsAreSplitLongerOnesAreUnk) {
  const auto tok = WordPieceTokenizer::from_file(write("[UNK]\nab\n##ab\n##a\n##\xc3\xa9\n"), false);  // cased: the e-acute stays
  auto repeat = [](const std::string& s, int n) { std::string r; while (n-- > 0) r += s; return r; };
  auto pieces = [](int n_ab, bool tail_a) {
    Ids ids{1};
    ids.insert(ids.end(), n_ab - 1, 2);
    if (tail_a) ids.push_back(3);
    return ids;
  };
  EXPECT_EQ(tok.encode(repeat("ab", 51)), pieces(51, false));        // 102 characters (the case)
  EXPECT_EQ(tok.encode(repeat("ab", 75)), pieces(75, false));        // 150
  EXPECT_EQ(tok.encode(repeat("ab", 99) + "a"), pieces(99, true));  // 199
  EXPECT_EQ(tok.encode(repeat("ab", 100)), pieces(100, false));      // 200: the longest split
  EXPECT_EQ(tok.encode(repeat("ab", 100) + "a"), (Ids{0}));           // 201: [UNK]
  // Code points, not bytes: 148 ASCII + 52 two-byte e-acutes (252 bytes) are 200 characters.
  Ids mixed = pieces(74, false);
  mixed.insert(mixed.end(), 52, 4);
  EXPECT_EQ(tok.encode(repeat("ab", 74) + repeat("\xc3\xa9", 52)), mixed);
  EXPECT_EQ(tok.encode(repeat("ab", 74) + repeat("\xc3\xa9", 53)), (Ids{0}));
}

// Encode throughput over the corpus (logged; the target is >= 5 MB/s on one core).
TEST(WordPiece, Throughput) {
  const std::vector<std::string> texts = corpus_texts();
  for (bool lower : {true, false}) {
    const auto tok = WordPieceTokenizer::from_file((kDir / "vocab.txt").string(), lower);
    size_t bytes = 0, tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double s = 0;
    while (s < 0.5) {
      for (const std::string& t : texts) bytes += t.size(), tokens += tok.encode(t).size();
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    std::printf("[ wordpiece ] %s: %.2f MB/s, %.0f tokens/s (corpus.jsonl, one thread)\n", lower ? "lower" : "cased",
                bytes / s / 1e6, tokens / s);
    EXPECT_GT(bytes, 0u);
  }
}

}  // namespace
}  // namespace gf::data
