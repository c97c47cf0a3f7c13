// LAMBADA cloze accuracy (runner/infer/lambada.h): the split of each passage into context and last word
// by Megatron-LM's get_tokens (tasks/zeroshot_gpt/datasets.py), strict and not; the score by its
// evaluate.py (a passage is right only if every token of the last word is); the refusals.
//
//  * Byte-vocabulary tests: a GPT-2 vocabulary of the 256 byte tokens and no merges, written to a
//    temp dir, so that ids are the text's UTF-8 bytes and every expected split is worked out by
//    hand, including Python's str.split()/strip() whitespace (U+001C, U+00A0, U+3000 are
//    whitespace to Python, U+200B is not).
//  * Real-vocabulary tests on tests/data/lambada_tiny.jsonl, against ids from the Python reference.
//    They need data/gpt2/gpt2-{vocab.json,merges.txt} (scripts/setup.sh fetches them) and skip
//    with a message if those are absent.
//  * Scoring tests with GreedyFn whose predictions are known, the counts worked out by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "runner/infer/lambada.h"
#include "tests/test_util.h"

namespace gf {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const fs::path kGpt2Dir = fs::path(GF_SOURCE_DIR) / "data" / "gpt2";
const std::string kTiny = std::string(GF_SOURCE_DIR) + "/tests/data/lambada_tiny.jsonl";

void write_file(const fs::path& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  ASSERT_TRUE(out) << "cannot write " << path;
}

// GPT-2's byte -> unicode map (bytes that print in Latin-1 keep their code point, the other 68 get
// U+0100.. in byte order), as UTF-8.
std::string byte_token(int b) {
  auto printable = [](int c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE; };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int c = 0; c < b; ++c) cp += !printable(c);
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

class LambadaTest : public test::TempDirTest {
 protected:
  LambadaTest() : TempDirTest("lambada_test") {}

  // The 256 byte tokens (id = byte) and no merges: encode(text) is text's bytes.
  std::unique_ptr<data::TextTokenizer> byte_tokenizer() {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_token(b)] = b;
    vocab["<|endoftext|>"] = 256;
    write_file(dir_ / "vocab.json", vocab.dump());
    write_file(dir_ / "merges.txt", "#version: 0.2\n");
    data::TokenizerFiles f;
    f.vocab_file = (dir_ / "vocab.json").string();
    f.merge_file = (dir_ / "merges.txt").string();
    return data::make_tokenizer(f);
  }

  std::string file(const std::string& name, const std::string& contents) {
    write_file(dir_ / name, contents);
    return (dir_ / name).string();
  }

};

bool have_gpt2_vocab() { return fs::exists(kGpt2Dir / "gpt2-vocab.json") && fs::exists(kGpt2Dir / "gpt2-merges.txt"); }

std::unique_ptr<data::TextTokenizer> gpt2_tokenizer() {
  data::TokenizerFiles f;
  f.vocab_file = (kGpt2Dir / "gpt2-vocab.json").string();
  f.merge_file = (kGpt2Dir / "gpt2-merges.txt").string();
  return data::make_tokenizer(f);
}

// The byte vocabulary's ids of `s`: its bytes, 0..255.
Ids bytes_of(const std::string& s) {
  Ids ids;
  for (char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

// ---------------------------------------------------------------------------------------------
// The split, by hand on byte ids.

TEST_F(LambadaTest, SplitFollowsMegatronOnBytes) {
  const auto tok_ptr = byte_tokenizer();
  const data::TextTokenizer& tok = *tok_ptr;
  struct Case {
    std::string text;
    Ids strict_context, strict_target, loose_context, loose_target;
  };
  const std::vector<Case> cases = {
      // Not strict: the last token (here the last byte); strict: ' ' + the last word, the rest stripped.
      {"ab cd", bytes_of("ab"), bytes_of(" cd"), bytes_of("ab c"), bytes_of("d")},
      // U+001C is whitespace to Python's split() (not to the tokenizer's \s): strict cuts there and
      // strip() drops it; not strict keeps its byte 0x1C in the context.
      {"ab\x1c" "cd", bytes_of("ab"), bytes_of(" cd"), bytes_of("ab\x1c" "c"), bytes_of("d")},
      // Leading spaces, U+00A0 (C2 A0) and a space before the last word, a tab and a newline after
      // it: strict strips them all; not strict takes the final newline as the "last word".
      {"  xy\xc2\xa0 z\t\n", bytes_of("xy"), bytes_of(" z"), bytes_of("  xy\xc2\xa0 z\t"), bytes_of("\n")},
      // U+3000 (E3 80 80), the ideographic space, separates words for Python.
      {"ab\xe3\x80\x80" "cd", bytes_of("ab"), bytes_of(" cd"), bytes_of("ab\xe3\x80\x80" "c"), bytes_of("d")},
      // rfind: the last word "b" also occurs earlier; the context keeps those.
      {"b ab b", bytes_of("b ab"), bytes_of(" b"), bytes_of("b ab "), bytes_of("b")},
  };
  for (const Case& c : cases) {
    const ClozeItem s = split_cloze_text(c.text, tok, true);
    EXPECT_EQ(s.context, c.strict_context) << "strict: " << c.text;
    EXPECT_EQ(s.target, c.strict_target) << "strict: " << c.text;
    const ClozeItem l = split_cloze_text(c.text, tok, false);
    EXPECT_EQ(l.context, c.loose_context) << "not strict: " << c.text;
    EXPECT_EQ(l.target, c.loose_target) << "not strict: " << c.text;
  }
}

TEST_F(LambadaTest, SplitRefusesEmptyAndOneWordTexts) {
  const auto tok_ptr = byte_tokenizer();
  const data::TextTokenizer& tok = *tok_ptr;
  for (bool strict : {false, true}) {
    for (const std::string text : {"", " \t\n", "\xc2\xa0"}) {
      try {
        split_cloze_text(text, tok, strict);
        ADD_FAILURE() << "no error for empty text '" << text << "'";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
      }
    }
    // U+200B (E2 80 8B), the zero-width space, is not whitespace to Python: one word.
    for (const std::string text : {"word", "  word  ", "ab\xe2\x80\x8b" "cd"}) {
      try {
        split_cloze_text(text, tok, strict);
        ADD_FAILURE() << "no error for the one-word text '" << text << "'";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("one word"), std::string::npos) << e.what();
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The split of the test file with GPT-2's vocabulary.

// Context and target of each line of tests/data/lambada_tiny.jsonl, from the Python reference:
//   /usr/bin/python3 tools/lambada_torch.py --dump-items [--strict] --data tests/data/lambada_tiny.jsonl
//       --vocab-file data/gpt2/gpt2-vocab.json --merge-file data/gpt2/gpt2-merges.txt   (one line)
// (Megatron's get_tokens written in Python over tools/gpt2_encoder_reference.py, python3-regex).
// Last words: lantern, kettle (1 token); quilt, spatula, hedgehog (2); marmalade, porcupine,
// wheelbarrow (3); line 7 has a newline before "lighthouse" and line 10 a U+00A0 before
// "umbrella", so their last word is split differently by the two modes (strict: " lighthouse",
// " umbrella", one token each; not strict: "ighthouse" after "l", "rella" after "umb").
struct Split {
  int64_t line;
  Ids context, target;
};

const std::vector<Split> kNotStrict = {
    {1, {464, 6388, 13642, 503, 262, 1176, 1973, 262, 19272, 11, 523, 40124, 19952, 284, 262, 46113, 290, 1625, 736,
         351, 262, 1468, 20422},
     {41207}},
    {2, {8421, 262, 10650, 5284, 11, 42884, 5901, 262, 1787, 351, 1660, 290, 900, 340, 319, 262, 27635, 13, 317, 5664,
         1568, 257, 16121, 1625, 422, 262},
     {40231}},
    {3, {9360, 18410, 550, 384, 675, 790, 6616, 416, 1021, 11, 290, 319, 4692, 12513, 262, 1751, 8350, 625, 508, 561,
         3993, 739, 262, 627},
     {2326}},
    {4, {1544, 4104, 9215, 319, 262, 5814, 27805, 290, 788, 4251, 329, 262, 17379, 286, 10912, 1667, 7617}, {671}},
    {5, {464, 22154, 539, 7819, 284, 262, 3425, 11, 523, 19632, 3111, 340, 9155, 351, 257, 7888, 6147, 15246}, {4712}},
    {6, {22210, 17000, 992, 739, 262, 19859, 13, 1649, 262, 3290, 21405, 276, 11, 257, 1402, 5044, 5017, 287, 890, 7786,
         627, 2171, 266, 2860, 992, 1497, 25, 257, 16964, 25244},
     {500}},
    {7, {464, 19558, 373, 523, 6546, 326, 262, 12478, 16659, 714, 407, 766, 262, 15191, 13, 3244, 257, 15584, 286, 1657,
         17676, 625, 262, 1660, 422, 262, 198, 75},
     {32303}},
    {8, {16501, 1648, 1359, 832, 262, 9292, 5667, 287, 2989, 286, 46716, 373, 257, 1402, 11, 599, 3541, 19859}, {31897}},
    {9, {2990, 9639, 262, 28902, 11, 262, 6450, 290, 262, 11668, 286, 20534, 656, 262, 7825, 5657}, {808}},
    {10, {464, 6290, 2540, 655, 355, 484, 1364, 262, 4429, 11, 290, 4389, 3972, 373, 9675, 673, 550, 11856, 607, 1849,
          2178},
     {20481}},
    {11, {3260, 262, 890, 2513, 510, 262, 12788, 484, 3332, 866, 379, 257, 1402, 3084, 2354, 262}, {40304}},
};

const std::vector<Split> kStrict = {
    {1, {464, 6388, 13642, 503, 262, 1176, 1973, 262, 19272, 11, 523, 40124, 19952, 284, 262, 46113, 290, 1625, 736,
         351, 262, 1468, 20422},
     {41207}},
    {2, {8421, 262, 10650, 5284, 11, 42884, 5901, 262, 1787, 351, 1660, 290, 900, 340, 319, 262, 27635, 13, 317, 5664,
         1568, 257, 16121, 1625, 422, 262},
     {40231}},
    {3, {9360, 18410, 550, 384, 675, 790, 6616, 416, 1021, 11, 290, 319, 4692, 12513, 262, 1751, 8350, 625, 508, 561,
         3993, 739, 262},
     {627, 2326}},
    {4, {1544, 4104, 9215, 319, 262, 5814, 27805, 290, 788, 4251, 329, 262, 17379, 286, 10912}, {1667, 7617, 671}},
    {5, {464, 22154, 539, 7819, 284, 262, 3425, 11, 523, 19632, 3111, 340, 9155, 351, 257, 7888, 6147}, {15246, 4712}},
    {6, {22210, 17000, 992, 739, 262, 19859, 13, 1649, 262, 3290, 21405, 276, 11, 257, 1402, 5044, 5017, 287, 890, 7786,
         627, 2171, 266, 2860, 992, 1497, 25, 257},
     {16964, 25244, 500}},
    {7, {464, 19558, 373, 523, 6546, 326, 262, 12478, 16659, 714, 407, 766, 262, 15191, 13, 3244, 257, 15584, 286, 1657,
         17676, 625, 262, 1660, 422, 262},
     {46371}},
    {8, {16501, 1648, 1359, 832, 262, 9292, 5667, 287, 2989, 286, 46716, 373, 257, 1402, 11, 599, 3541}, {19859, 31897}},
    {9, {2990, 9639, 262, 28902, 11, 262, 6450, 290, 262, 11668, 286, 20534, 656, 262}, {7825, 5657, 808}},
    {10, {464, 6290, 2540, 655, 355, 484, 1364, 262, 4429, 11, 290, 4389, 3972, 373, 9675, 673, 550, 11856, 607},
     {25510}},
    {11, {3260, 262, 890, 2513, 510, 262, 12788, 484, 3332, 866, 379, 257, 1402, 3084, 2354, 262}, {40304}},
};

TEST(Lambada, TestFileSplitsAsThePythonReference) {
  if (!have_gpt2_vocab()) GTEST_SKIP() << "no " << kGpt2Dir << " (scripts/setup.sh fetches the GPT-2 vocabulary)";
  const auto tok_ptr = gpt2_tokenizer();
  const data::TextTokenizer& tok = *tok_ptr;
  for (bool strict : {false, true}) {
    const std::vector<Split>& want = strict ? kStrict : kNotStrict;
    const std::vector<ClozeItem> got = read_lambada(kTiny, tok, strict);
    ASSERT_EQ(got.size(), want.size()) << "strict " << strict;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].line, want[i].line) << "strict " << strict << " item " << i;
      EXPECT_EQ(got[i].context, want[i].context) << "strict " << strict << " line " << want[i].line;
      EXPECT_EQ(got[i].target, want[i].target) << "strict " << strict << " line " << want[i].line;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The score.

// A GreedyFn that predicts from the current token only, by a fixed table: next(x) = x + 1, except
// next(7) = 9. It also checks the shape of what it is given.
struct BigramFn {
  int64_t max_len;
  std::vector<size_t>* call_sizes;
  void operator()(const std::vector<Ids>& batch, std::vector<Ids>& argmax) const {
    call_sizes->push_back(batch.size());
    argmax.assign(batch.size(), {});
    for (size_t i = 0; i < batch.size(); ++i) {
      EXPECT_LE(static_cast<int64_t>(batch[i].size()), max_len);
      for (int32_t x : batch[i]) argmax[i].push_back(x == 7 ? 9 : x + 1);
    }
  }
};

TEST(Lambada, ScoreWithAFixedNextTokenTable) {
  // Worked out by hand with next(x) = x + 1, next(7) = 9; the scored predictions are those after
  // the last context token and after each target token but the last:
  //   A ctx {1,2,3}   tgt {4}        after 3: 4                      right
  //   B ctx {5}       tgt {6,7,8}    after 5: 6, after 6: 7, after 7: 9 (not 8)   wrong
  //   C ctx {2,9}     tgt {10,11}    after 9: 10, after 10: 11       right
  //   D ctx {3,3,3}   tgt {5}        after 3: 4 (not 5)              wrong
  //   E ctx {20,7}    tgt {9}        after 7: 9                      right
  //   F ctx {1,7,30}  tgt {31}       after 30: 31 (the wrong 9 after 7 is in the context, not scored)  right
  // 4 of 6.
  const std::vector<ClozeItem> items = {{{1, 2, 3}, {4}, 1},   {{5}, {6, 7, 8}, 2},  {{2, 9}, {10, 11}, 3},
                                        {{3, 3, 3}, {5}, 4},   {{20, 7}, {9}, 5},    {{1, 7, 30}, {31}, 6}};
  for (int64_t batch : {1, 4, 6, 100}) {
    std::vector<size_t> sizes;
    const ClozeResult r = cloze_accuracy(items, BigramFn{3, &sizes}, 3, batch);
    EXPECT_EQ(r.items, 6) << "batch " << batch;
    EXPECT_EQ(r.correct, 4) << "batch " << batch;
    EXPECT_DOUBLE_EQ(r.accuracy(), 4.0 / 6.0);
    const std::vector<size_t> want = batch == 1 ? std::vector<size_t>(6, 1)
                                     : batch == 4 ? std::vector<size_t>{4, 2}
                                                  : std::vector<size_t>{6};
    EXPECT_EQ(sizes, want) << "batch " << batch;
  }
}

// A GreedyFn that is right everywhere except where told: it looks the batch up among the items
// (checking that each input is context + target[:-1]) and predicts the true next token, then
// spoils the predictions of items 2 and 5 (0-based, in file order) at their first and last target
// token, item 7's at its second target token if it has one, and item 0's at its first context
// position (never scored).
struct AlmostRightFn {
  const std::vector<ClozeItem>* items;
  size_t* next;  // the index of the item the next input must be
  void operator()(const std::vector<Ids>& batch, std::vector<Ids>& argmax) const {
    argmax.assign(batch.size(), {});
    for (size_t i = 0; i < batch.size(); ++i) {
      const size_t k = (*next)++;
      ASSERT_LT(k, items->size());
      const ClozeItem& it = (*items)[k];
      Ids full = it.context;
      full.insert(full.end(), it.target.begin(), it.target.end());
      ASSERT_EQ(batch[i], Ids(full.begin(), full.end() - 1)) << "input of item " << k;
      Ids& p = argmax[i];
      p.assign(full.begin() + 1, full.end());
      const size_t first_target = it.context.size() - 1;  // the prediction of target[0]
      if (k == 0) p[0] += 1;
      if (k == 2) p[first_target] += 1;
      if (k == 5) p[first_target + it.target.size() - 1] += 1;
      if (k == 7 && it.target.size() >= 2) p[first_target + 1] += 1;
    }
  }
};

TEST(Lambada, ScoreOfTheTestFileByHand) {
  if (!have_gpt2_vocab()) GTEST_SKIP() << "no " << kGpt2Dir << " (scripts/setup.sh fetches the GPT-2 vocabulary)";
  const auto tok_ptr = gpt2_tokenizer();
  const data::TextTokenizer& tok = *tok_ptr;
  // 11 items. Spoiled: items 2 and 5 in both modes; item 7 ("hedgehog") only when strict, where its
  // target is 2 tokens (" hedge", "hog"); not strict its target is the one token "hog". Item 0's
  // spoiled context prediction counts in neither. Strict: 11 - 3 = 8 right; not strict: 11 - 2 = 9.
  for (bool strict : {false, true}) {
    const std::vector<ClozeItem> items = read_lambada(kTiny, tok, strict);
    ASSERT_EQ(items.size(), 11u);
    ASSERT_EQ(items[7].target.size(), strict ? 2u : 1u);
    for (int64_t batch : {1, 3, 11, 64}) {
      size_t next = 0;
      const ClozeResult r = cloze_accuracy(items, AlmostRightFn{&items, &next}, 64, batch, kTiny);
      EXPECT_EQ(next, items.size());
      EXPECT_EQ(r.items, 11);
      EXPECT_EQ(r.correct, strict ? 8 : 9) << "strict " << strict << " batch " << batch;
    }
  }
}

TEST(Lambada, PassageLongerThanSeqLengthIsRefusedBeforeAnyCall) {
  // Input = context + target[:-1]: 4 + 3 - 1 = 6 tokens. max_len 6 takes it (Megatron's seq_length
  // 6: 7 tokens, padded to nothing); max_len 5 does not, and Megatron would not truncate it.
  const std::vector<ClozeItem> items = {{{1, 2}, {3}, 1}, {{1, 2, 3, 4}, {5, 6, 7}, 9}};
  std::vector<size_t> sizes;
  EXPECT_EQ(cloze_accuracy(items, BigramFn{6, &sizes}, 6, 1).correct, 2);
  sizes.clear();
  try {
    cloze_accuracy(items, BigramFn{5, &sizes}, 5, 1, "lambada.jsonl");
    ADD_FAILURE() << "no error for a 7-token passage with max_len 5";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("lambada.jsonl line 9"), std::string::npos) << m;
    EXPECT_NE(m.find("7 tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("seq_length 5"), std::string::npos) << m;
  }
  EXPECT_TRUE(sizes.empty()) << "the greedy function was called before the refusal";
}

TEST(Lambada, BadArgumentsAndBadGreedyOutputAreRefused) {
  const std::vector<ClozeItem> items = {{{1, 2}, {3}, 1}, {{4}, {5, 6}, 2}};
  std::vector<size_t> sizes;
  EXPECT_THROW(cloze_accuracy(items, BigramFn{8, &sizes}, 0, 1), std::invalid_argument);
  EXPECT_THROW(cloze_accuracy(items, BigramFn{8, &sizes}, 8, 0), std::invalid_argument);
  const GreedyFn too_few_rows = [](const std::vector<Ids>&, std::vector<Ids>& argmax) { argmax.assign(1, Ids{0, 0}); };
  EXPECT_THROW(cloze_accuracy(items, too_few_rows, 8, 2), std::logic_error);
  const GreedyFn short_rows = [](const std::vector<Ids>& batch, std::vector<Ids>& argmax) {
    argmax.assign(batch.size(), Ids{0});
  };
  EXPECT_THROW(cloze_accuracy(items, short_rows, 8, 2), std::logic_error);
  const ClozeResult none = cloze_accuracy({}, BigramFn{8, &sizes}, 8, 2);
  EXPECT_EQ(none.items, 0);
  EXPECT_EQ(none.accuracy(), 0.0);
}

// ---------------------------------------------------------------------------------------------
// The file's errors name the file and the line.

TEST_F(LambadaTest, FileErrorsNameFileAndLine) {
  const auto tok_ptr = byte_tokenizer();
  const data::TextTokenizer& tok = *tok_ptr;
  const std::string good = "{\"text\": \"the cat sat\"}\n";
  struct Case {
    std::string contents;
    std::string where, what;
  };
  const std::vector<Case> cases = {
      {good + "{\"text\": \"a b\"\n", "line 2", "not JSON"},
      {good + "\n" + good, "line 2", "blank line"},
      {good + good + "[\"text\", \"a b\"]\n", "line 3", "not an object"},
      {"{\"passage\": \"a b\"}\n", "line 1", "no \"text\""},
      {good + "{\"text\": 42}\n", "line 2", "\"text\" is a number"},
      {good + "{\"text\": \"\"}\n", "line 2", "empty"},
      {good + "{\"text\": \"  \\t \"}\n", "line 2", "empty"},
      {good + "{\"text\": \"lighthouse\"}\n", "line 2", "one word"},
      {"", "", "no lines"},
  };
  for (bool strict : {false, true}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::string path = file("case" + std::to_string(i) + ".jsonl", cases[i].contents);
      try {
        read_lambada(path, tok, strict);
        ADD_FAILURE() << "no error for case " << i << " (" << cases[i].what << ")";
      } catch (const std::runtime_error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(path + (cases[i].where.empty() ? "" : " " + cases[i].where)), std::string::npos) << m;
        EXPECT_NE(m.find(cases[i].what), std::string::npos) << m;
      }
    }
  }
  try {
    read_lambada((dir_ / "absent.jsonl").string(), tok, false);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.jsonl: cannot open"), std::string::npos) << e.what();
  }
  // The same lines well formed (CRLF endings too, and JSON escapes) are read, lines numbered from 1.
  const std::vector<ClozeItem> ok = read_lambada(file("ok.jsonl", good + "{\"text\": \"a\\u00a0b\"}\r\n"), tok, true);
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[1].line, 2);
  EXPECT_EQ(ok[1].context, bytes_of("a"));
  EXPECT_EQ(ok[1].target, bytes_of(" b"));
}

}  // namespace
}  // namespace gf
