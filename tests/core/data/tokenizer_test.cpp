// Tests for the GPT-2 byte-level BPE tokenizer (core/data/tokenizer.h) and the
// `gridformer tokenize` stream form (runner/cli/tokenize_cli.h).
//
// Two kinds of tests:
//  * Real-vocabulary tests compare against ids produced by gpt-3-encoder and js-tiktoken
//    (tests/golden/tokenizer, written by tools/make_tokenizer_golden.js) and, for the
//    characters where JavaScript's and PCRE2's `\s`, `\p{L}`, `\p{N}` differ from Python's
//    `regex` (Megatron's tokenizer), against tools/gpt2_encoder_reference.py
//    (tests/golden/tokenizer/unicode_space*, written by tools/make_tokenizer_golden_py.py).
//    They need data/gpt2/gpt2-{vocab.json,merges.txt} (scripts/fetch_gpt2_vocab.sh) and
//    skip with a message if those are absent.
//  * Toy-vocabulary tests write a tiny vocab/merges pair to a temp dir to check merge
//    order, pre-token boundaries (against `regex`'s classes for every code point) and file
//    errors without the real files.
#include <gtest/gtest.h>
#include "core/data/byte_bpe.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "runner/cli/tokenize_cli.h"
#include "core/data/tokenizer.h"
#include "tests/core/data/text_test_util.h"
#include "tests/test_util.h"

namespace gf::data {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const fs::path kGpt2Dir = fs::path(GF_SOURCE_DIR) / "data" / "gpt2";
const fs::path kGoldenDir = fs::path(GF_SOURCE_DIR) / "tests" / "golden" / "tokenizer";
const std::string kVocab = (kGpt2Dir / "gpt2-vocab.json").string();
const std::string kMerges = (kGpt2Dir / "gpt2-merges.txt").string();

using test::parse_ids;
using test::read_file;
using test::split_lines;

void write_file(const fs::path& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  ASSERT_TRUE(out) << "cannot write " << path;
}

// Splits on '\n'; a final '\n' does not start another line.
Ids concat(std::initializer_list<Ids> parts) {
  Ids all;
  for (const Ids& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

// The real GPT-2 tokenizer, loaded once; nullptr if the files have not been fetched.
const GPT2Tokenizer* gpt2() {
  static const std::unique_ptr<GPT2Tokenizer> tokenizer = []() -> std::unique_ptr<GPT2Tokenizer> {
    if (!fs::exists(kVocab) || !fs::exists(kMerges)) return nullptr;
    return std::make_unique<GPT2Tokenizer>(GPT2Tokenizer::from_files(kVocab, kMerges));
  }();
  return tokenizer.get();
}

#define REQUIRE_GPT2()                                                                     \
  if (gpt2() == nullptr) {                                                                 \
    GTEST_SKIP() << "GPT-2 vocab files not found in " << kGpt2Dir                          \
                 << "; run scripts/fetch_gpt2_vocab.sh to fetch them";                      \
  }                                                                                        \
  [[maybe_unused]] const GPT2Tokenizer& tok = *gpt2()

// ---------------------------------------------------------------------------------------
// Real vocabulary: reference ids.

TEST(GPT2Tokenizer, HandCheckedIds) {
  REQUIRE_GPT2();
  EXPECT_EQ(tok.encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(tok.encode("a b"), (Ids{64, 275}));
  EXPECT_EQ(tok.encode(""), Ids{});
  EXPECT_EQ(tok.encode("\n"), Ids{198});
  EXPECT_EQ(tok.decode(Ids{15496, 995}), "Hello world");
}

TEST(GPT2Tokenizer, EodAndVocabSize) {
  REQUIRE_GPT2();
  EXPECT_EQ(tok.eod_id(), 50256);
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.decode(Ids{50256}), "<|endoftext|>");
}

TEST(GPT2Tokenizer, EndOfTextInTextIsOrdinaryCharacters) {
  REQUIRE_GPT2();
  const Ids ids = tok.encode("<|endoftext|>");
  EXPECT_EQ(ids, (Ids{27, 91, 437, 1659, 5239, 91, 29}));  // as gpt-3-encoder encodes it
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eod_id()), 0);
}

TEST(GPT2Tokenizer, CorpusLinesMatchReference) {
  REQUIRE_GPT2();
  const auto lines = split_lines(read_file(kGoldenDir / "corpus.txt"));
  const auto golden = split_lines(read_file(kGoldenDir / "ids.txt"));
  ASSERT_GT(lines.size(), 200u);
  ASSERT_EQ(lines.size(), golden.size()) << "ids.txt is out of date; rerun the generator";
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(tok.encode(lines[i]), parse_ids(golden[i])) << "corpus line " << i + 1 << ": " << lines[i];
  }
}

TEST(GPT2Tokenizer, FullTextMatchesReference) {
  REQUIRE_GPT2();
  const std::string text = read_file(kGoldenDir / "corpus.txt");
  const Ids golden = parse_ids(read_file(kGoldenDir / "ids_fulltext.txt"));
  ASSERT_GT(golden.size(), 1000u);
  const Ids ids = tok.encode(text);
  ASSERT_EQ(ids.size(), golden.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(ids[i], golden[i]) << "first difference at id " << i << ", text around it: '"
                                 << tok.decode(std::span(golden).subspan(i > 5 ? i - 5 : 0, 10)) << "'";
  }
}

TEST(GPT2Tokenizer, SpecialCasesMatchReference) {
  REQUIRE_GPT2();
  const auto golden = nlohmann::json::parse(read_file(kGoldenDir / "special_cases.json"));
  ASSERT_GT(golden.at("cases").size(), 25u);
  for (const auto& c : golden.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(tok.encode(text), c.at("ids").get<Ids>()) << "text: " << c.at("text").dump();
  }
}

// Megatron documents ({"text": string or list of sentences}) full of the characters where
// the `\s` of JavaScript, PCRE2 and Python's `regex` differ (U+0085, U+180E, U+FEFF), of
// look-alikes that are not `\s` (U+200B, U+2060, U+001C-U+001F), of every other `\s`
// character and of letters and digits new in Unicode 15.0, in many contexts; ids written by
// the Python reference. A document's ids are its sentences' ids, concatenated.
TEST(GPT2Tokenizer, PythonRegexCorpusMatchesReference) {
  REQUIRE_GPT2();
  const auto docs = split_lines(read_file(kGoldenDir / "unicode_space.jsonl"));
  const auto golden = split_lines(read_file(kGoldenDir / "unicode_space_ids.txt"));
  ASSERT_GT(docs.size(), 1000u);
  ASSERT_EQ(docs.size(), golden.size()) << "unicode_space_ids.txt is out of date; rerun the generator";
  size_t mismatches = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const auto doc = nlohmann::json::parse(docs[i]).at("text");
    Ids ids;
    std::string text;
    for (const auto& sentence : doc.is_array() ? doc : nlohmann::json::array({doc})) {
      tok.encode_append(sentence.get<std::string>(), ids);
      text += sentence.get<std::string>();
    }
    const Ids expected = parse_ids(golden[i]);
    EXPECT_EQ(ids, expected) << "unicode_space.jsonl line " << i + 1 << ": " << docs[i];
    EXPECT_EQ(tok.decode(expected), text) << "line " << i + 1;
    mismatches += ids != expected;
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(GPT2Tokenizer, EncodeAppendAppends) {
  REQUIRE_GPT2();
  Ids ids{7};
  tok.encode_append("Hello world", ids);
  EXPECT_EQ(ids, (Ids{7, 15496, 995}));
}

// ---------------------------------------------------------------------------------------
// Real vocabulary: round trips and invalid UTF-8.

TEST(GPT2Tokenizer, DecodeRoundTripsCorpus) {
  REQUIRE_GPT2();
  const std::string text = read_file(kGoldenDir / "corpus.txt");
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  const auto golden = split_lines(read_file(kGoldenDir / "ids.txt"));
  const auto lines = split_lines(text);
  ASSERT_EQ(lines.size(), golden.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(tok.decode(parse_ids(golden[i])), lines[i]) << "corpus line " << i + 1;
  }
}

using gf::data::byte_bpe::append_utf8;

// A random code point, mostly from ranges real text uses, never a surrogate.
char32_t random_code_point(std::mt19937& rng) {
  static const char32_t kRanges[][2] = {
      {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x17F}, {0x370, 0x4FF}, {0x600, 0x6FF}, {0x900, 0x97F},
      {0x2000, 0x206F}, {0x3000, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1FAFF},
      {0x0, 0xD7FF}, {0xE000, 0x10FFFF}};
  const auto& range = kRanges[std::uniform_int_distribution<size_t>(0, std::size(kRanges) - 1)(rng)];
  return std::uniform_int_distribution<char32_t>(range[0], range[1])(rng);
}

TEST(GPT2Tokenizer, RoundTripsRandomValidUtf8) {
  REQUIRE_GPT2();
  std::mt19937 rng(20240229);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int length = std::uniform_int_distribution<int>(0, 40)(rng);
    for (int i = 0; i < length; ++i) append_utf8(random_code_point(rng), text);
    ASSERT_EQ(tok.decode(tok.encode(text)), text) << "trial " << trial;
  }
}

TEST(GPT2Tokenizer, RoundTripsRandomBytes) {
  REQUIRE_GPT2();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes;
    const int length = std::uniform_int_distribution<int>(0, 64)(rng);
    const int high_bias = trial % 3;  // 0: any byte, 1: mostly >= 0x80, 2: mostly ASCII
    for (int i = 0; i < length; ++i) {
      int b = std::uniform_int_distribution<int>(0, 255)(rng);
      if (high_bias == 1 && b < 0x80 && rng() % 4 != 0) b |= 0x80;
      if (high_bias == 2 && rng() % 4 != 0) b &= 0x7F;
      bytes += static_cast<char>(b);
    }
    const Ids ids = tok.encode(bytes);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    ASSERT_EQ(tok.decode(ids), bytes) << "trial " << trial;
  }
}

TEST(GPT2Tokenizer, InvalidUtf8RunsArePreTokensOfTheirOwn) {
  REQUIRE_GPT2();
  EXPECT_EQ(tok.encode("\xff"), Ids{187});  // byte 0xFF is vocab token "ÿ"
  EXPECT_EQ(tok.encode("a\xff" "b"), (Ids{64, 187, 65}));
  // Malformed sequences (lone continuation, truncated, overlong, surrogate, > U+10FFFF)
  // split the text exactly where they start and end.
  for (const std::string bad : {"\x80", "\xc3", "\xe6\x97", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    const std::string text = "Hello" + bad + " world";
    EXPECT_EQ(tok.encode(text), concat({tok.encode("Hello"), tok.encode(bad), tok.encode(" world")}))
        << "bytes of length " << bad.size();
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
  // A truncated character at the end of an otherwise valid text.
  EXPECT_EQ(tok.encode("caf\xc3"), concat({tok.encode("caf"), Ids{127}}));  // 0xC3 is "Ã"
}

TEST(GPT2Tokenizer, LongPreTokensStayFast) {
  REQUIRE_GPT2();
  // Pre-tokens of a million bytes: quadratic merging would not finish.
  const std::string letters(1 << 20, 'a'), digits(1 << 20, '7'), spaces(1 << 20, ' ');
  const std::string invalid(1 << 20, '\x80');
  const Ids letter_ids = tok.encode(letters);
  EXPECT_EQ(letter_ids, Ids(letters.size() / 4, 24794));  // "aaaa", the longest a-run token
  const Ids digit_ids = tok.encode(digits);
  EXPECT_EQ(digit_ids, Ids(digits.size() / 2, 3324));  // "77"
  EXPECT_EQ(tok.encode(spaces), Ids(spaces.size(), 220));  // GPT-2 has no multi-space tokens
  const Ids invalid_ids = tok.encode(invalid);
  EXPECT_EQ(invalid_ids, Ids(invalid.size(), tok.encode("\x80").at(0)));
  EXPECT_EQ(tok.decode(invalid_ids), invalid);
}

TEST(GPT2Tokenizer, DecodeRejectsOutOfRangeIds) {
  REQUIRE_GPT2();
  EXPECT_THROW(tok.decode(Ids{15496, -1}), std::out_of_range);
  EXPECT_THROW(tok.decode(Ids{50257}), std::out_of_range);
  EXPECT_NO_THROW(tok.decode(Ids{0, 50256}));
}

TEST(GPT2Tokenizer, ConcurrentEncodeMatchesSequential) {
  REQUIRE_GPT2();
  const auto lines = split_lines(read_file(kGoldenDir / "corpus.txt"));
  std::vector<Ids> expected;
  for (const auto& line : lines) expected.push_back(tok.encode(line));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const GPT2Tokenizer copy = tok;  // copies share tables; encode from both
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < lines.size(); ++i) {
          const size_t k = (i * 7 + t * 13 + round) % lines.size();
          const GPT2Tokenizer& which = (i + t) % 2 == 0 ? tok : copy;
          mismatches[t] += which.encode(lines[k]) != expected[k];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// ---------------------------------------------------------------------------------------
// Toy vocabularies written to a temp dir.

std::string byte_token(int b) {  // GPT-2's byte -> unicode map, written out independently
  const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  int extra = 0;
  for (int c = 0; c < b; ++c) extra += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
  std::string out;
  append_utf8(printable ? b : 256 + extra, out);
  return out;
}

class GPT2TokenizerToyVocab : public test::TempDirTest {
 protected:
  GPT2TokenizerToyVocab() : TempDirTest("tokenizer_test") {}

  // 256 byte tokens, then `extra` tokens, then "<|endoftext|>".
  nlohmann::json vocab_json(const std::vector<std::string>& extra) const {
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_token(b)] = b;
    for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + i;
    vocab["<|endoftext|>"] = 256 + extra.size();
    return vocab;
  }
  GPT2Tokenizer load(const std::string& vocab, const std::string& merges) {
    write_file(vocab_path(), vocab);
    write_file(merges_path(), merges);
    return GPT2Tokenizer::from_files(vocab_path(), merges_path());
  }
  // Expects from_files to throw a runtime_error whose message contains every fragment.
  void expect_load_error(const std::string& vocab, const std::string& merges,
                         const std::vector<std::string>& fragments) {
    try {
      load(vocab, merges);
      ADD_FAILURE() << "no error; expected one mentioning '" << fragments.front() << "'";
    } catch (const std::runtime_error& e) {
      for (const auto& fragment : fragments) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
            << "message '" << e.what() << "' lacks '" << fragment << "'";
      }
    }
  }
  std::string vocab_path() const { return (dir_ / "vocab.json").string(); }
  std::string merges_path() const { return (dir_ / "merges.txt").string(); }

};

// Merges: rank 0 "b c", rank 1 "a b", rank 2 "a bc", rank 3 "a a", rank 4 "aa aa",
// rank 5 "c Ġ" (c followed by a space).
const std::vector<std::string> kToyTokens = {"bc", "ab", "abc", "aa", "aaaa", "cĠ"};
const std::string kToyMerges = "#version: 0.2\nb c\na b\na bc\na a\naa aa\nc Ġ\n";

TEST_F(GPT2TokenizerToyVocab, MergesLowestRankFirst) {
  const auto tok = load(vocab_json(kToyTokens).dump(), kToyMerges);
  EXPECT_EQ(tok.vocab_size(), 256 + 6 + 1);
  EXPECT_EQ(tok.eod_id(), 262);
  EXPECT_EQ(tok.encode("abc"), Ids{258});       // (b,c) before (a,b), then (a,bc)
  EXPECT_EQ(tok.encode("ab"), Ids{257});
  EXPECT_EQ(tok.encode("aaaa"), Ids{260});      // (a,a) twice, then (aa,aa)
  EXPECT_EQ(tok.encode("aaa"), (Ids{259, 'a'}));  // leftmost pair first
  EXPECT_EQ(tok.encode("aaaaa"), (Ids{260, 'a'}));
  EXPECT_EQ(tok.encode("cab"), (Ids{'c', 257}));
}

TEST_F(GPT2TokenizerToyVocab, MergesDoNotCrossPreTokens) {
  const auto tok = load(vocab_json(kToyTokens).dump(), kToyMerges);
  // Toy ids equal byte values. "c a" is "c" + " a", so the (c, space) merge cannot apply.
  EXPECT_EQ(tok.encode("c a"), (Ids{'c', ' ', 'a'}));
  EXPECT_EQ(tok.encode("c  a"), (Ids{'c', ' ', ' ', 'a'}));
  EXPECT_EQ(tok.encode("c\xff"), (Ids{'c', 0xFF}));  // invalid byte: its own pre-token
  EXPECT_EQ(tok.decode(tok.encode("c  a")), "c  a");
}

std::vector<std::string> pieces(const GPT2Tokenizer& tok, std::string_view text) {
  const auto views = tok.pre_tokenize(text);
  return std::vector<std::string>(views.begin(), views.end());
}
using Pieces = std::vector<std::string>;

TEST_F(GPT2TokenizerToyVocab, PreTokenizeFollowsPythonRegex) {
  const auto tok = load(vocab_json(kToyTokens).dump(), kToyMerges);
  EXPECT_EQ(pieces(tok, "Hello world's 42!"), (Pieces{"Hello", " world", "'s", " 42", "!"}));
  EXPECT_EQ(pieces(tok, ""), Pieces{});
  // U+0085 is space in `regex`: it joins a whitespace run, and "\u0085 b" is space + " b".
  EXPECT_EQ(pieces(tok, "a\u0085 b"), (Pieces{"a", "\u0085", " b"}));
  EXPECT_EQ(pieces(tok, "a \u0085\u0085b"), (Pieces{"a", " \u0085", "\u0085", "b"}));
  // U+FEFF and U+180E are not: they stick to a leading space like punctuation does.
  EXPECT_EQ(pieces(tok, "a \ufeffb"), (Pieces{"a", " \ufeff", "b"}));
  EXPECT_EQ(pieces(tok, "a \u180e\u200b\u2060b"), (Pieces{"a", " \u180e\u200b\u2060", "b"}));
  EXPECT_EQ(pieces(tok, "x\x1c\x1d\x1e\x1f y"), (Pieces{"x", "\x1c\x1d\x1e\x1f", " y"}));
  // Letters and digits new in Unicode 15.0 (CJK Extension H, Kaktovik numerals).
  EXPECT_EQ(pieces(tok, "a \U00031350\U00031351 \U0001D2C0\U0001D2C1"),
            (Pieces{"a", " \U00031350\U00031351", " \U0001D2C0\U0001D2C1"}));
  // Invalid bytes: a pre-token of their own; the pieces always concatenate to the text.
  EXPECT_EQ(pieces(tok, "ab\xff\xfe cd"), (Pieces{"ab", "\xff\xfe", " cd"}));
}

// Every Unicode scalar value is classified as `regex` classifies it: White_Space (`\s`),
// letter (`\p{L}`), number (`\p{N}`) or other, per tests/golden/tokenizer/python_regex_classes.json
// (all of 0..0x10FFFF tested with python3-regex by tools/make_tokenizer_golden_py.py). The class
// of c shows in which of "a"+c, "1"+c, "!"+c, "\t"+c the pattern leaves as one pre-token; the
// generator checks that this probe recovers `regex`'s classes in `regex` itself.
// The tokenizer splits text that has no 0xF0 byte with a faster pattern, so each code point is
// probed twice: alone, and after a prefix with U+1F600 (two pieces of its own), which selects
// the full pattern for code points below U+10000 too.
TEST_F(GPT2TokenizerToyVocab, EveryCodePointClassifiedAsPythonRegexDoes) {
  const auto tok = load(vocab_json(kToyTokens).dump(), kToyMerges);
  const auto golden = nlohmann::json::parse(read_file(kGoldenDir / "python_regex_classes.json"));
  enum Class : uint8_t { kOther, kLetter, kNumber, kSpace };
  std::vector<uint8_t> expected(0x110000, kOther);
  const std::pair<const char*, Class> kKeys[] = {{"space", kSpace}, {"letter", kLetter}, {"number", kNumber}};
  for (const auto& [key, cls] : kKeys) {
    for (const auto& range : golden.at(key)) {
      const auto first = range.at(0).get<uint32_t>(), last = range.at(1).get<uint32_t>();
      ASSERT_TRUE(first <= last && last < expected.size()) << range.dump();
      for (uint32_t cp = first; cp <= last; ++cp) expected[cp] = cls;
    }
  }
  static const char* const kNames[] = {"other", "letter", "number", "space"};
  static const char* const kProbes[] = {"!", "a", "1", "\t"};  // indexed by Class
  // Prefixes ending in a class other than the probe's first character's.
  static const char* const kPrefixes[] = {"\U0001F600a", "\U0001F600" "1", "\U0001F600a", "\U0001F600a"};
  for (const bool with_prefix : {false, true}) {
    std::array<size_t, 4> counts{};
    size_t mismatches = 0;
    std::string text, piece;
    for (char32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      int single = 0, found = -1;
      for (int cls = 0; cls < 4; ++cls) {
        piece = kProbes[cls];
        append_utf8(cp, piece);
        text = with_prefix ? kPrefixes[cls] + piece : piece;
        const auto pieces = tok.pre_tokenize(text);
        if (pieces.size() == (with_prefix ? 3u : 1u) && pieces.back() == piece) {
          ++single;
          found = cls;
        }
      }
      if (single != 1 || found != expected[cp]) {
        if (++mismatches <= 20) {
          ADD_FAILURE() << "U+" << std::hex << std::uppercase << static_cast<uint32_t>(cp)
                        << (with_prefix ? " (after U+1F600)" : "") << ": `regex` says "
                        << kNames[expected[cp]] << ", the tokenizer's pattern says "
                        << (single == 1 ? kNames[found] : "several classes");
        }
        continue;
      }
      ++counts[found];
    }
    EXPECT_EQ(mismatches, 0u) << (with_prefix ? "after U+1F600" : "alone");
    // python3-regex 2022.10.31 (Unicode 15.0): 25 White_Space characters.
    EXPECT_EQ(counts[kSpace], 25u);
    EXPECT_EQ(counts[kLetter] + counts[kNumber] + counts[kSpace] + counts[kOther], 0x110000u - 0x800u);
  }
}

TEST_F(GPT2TokenizerToyVocab, CachesAreNotSharedBetweenVocabularies) {
  const auto with_merges = load(vocab_json(kToyTokens).dump(), kToyMerges);
  const auto without = load(vocab_json(kToyTokens).dump(), "#version: 0.2\n");
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(with_merges.encode("abc"), Ids{258});
    EXPECT_EQ(without.encode("abc"), (Ids{'a', 'b', 'c'}));
  }
}

TEST_F(GPT2TokenizerToyVocab, MissingFilesNameThePath) {
  const std::string vocab = vocab_json(kToyTokens).dump();
  write_file(merges_path(), kToyMerges);
  try {
    GPT2Tokenizer::from_files((dir_ / "nope.json").string(), merges_path());
    ADD_FAILURE() << "no error for a missing vocab file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  write_file(vocab_path(), vocab);
  EXPECT_THROW(GPT2Tokenizer::from_files(vocab_path(), (dir_ / "nope.txt").string()), std::runtime_error);
}

TEST_F(GPT2TokenizerToyVocab, CorruptVocabIsRejected) {
  const std::string merges = kToyMerges;
  auto vocab = vocab_json(kToyTokens);
  expect_load_error(vocab.dump().substr(0, 500), merges, {"vocab.json", "not valid JSON"});
  expect_load_error("[1, 2, 3]", merges, {"vocab.json", "JSON object"});
  auto bad = vocab;
  bad["ab"] = "257";
  expect_load_error(bad.dump(), merges, {"'ab'", "not an integer"});
  bad = vocab;
  bad["ab"] = 9999;
  expect_load_error(bad.dump(), merges, {"9999", "outside"});
  bad = vocab;
  bad["ab"] = 0;
  expect_load_error(bad.dump(), merges, {"id 0", "twice"});
  bad = vocab;
  bad.erase("<|endoftext|>");
  expect_load_error(bad.dump(), merges, {"<|endoftext|>"});
  bad = vocab;
  bad.erase(byte_token('q'));
  bad["qq"] = 'q';  // keep ids dense
  expect_load_error(bad.dump(), merges, {"no token for byte 113"});
  bad.erase("qq");
  bad["q q"] = 'q';  // " " is not in the byte encoding
  expect_load_error(bad.dump(), merges, {"'q q'", "byte encoding"});
}

TEST_F(GPT2TokenizerToyVocab, CorruptMergesAreRejected) {
  const std::string vocab = vocab_json(kToyTokens).dump();
  expect_load_error(vocab, "b c\na b\n", {"merges.txt", "#version"});
  expect_load_error(vocab, "#version: 0.2\nb c\na b c\n", {"merges.txt", "line 3", "two"});
  expect_load_error(vocab, "#version: 0.2\nb c\nx y\n", {"line 3", "'xy' is not in the vocabulary"});
  expect_load_error(vocab, "#version: 0.2\nb c\na z z\n", {"line 3"});
  expect_load_error(vocab, "#version: 0.2\n\xff\xfe q\n", {"line 2", "byte encoding"});
  EXPECT_NO_THROW(load(vocab, "#version: 0.2\r\nb c\r\n\r\n"));  // CRLF and blank lines
}

TEST_F(GPT2TokenizerToyVocab, RealVocabTruncatedIsRejected) {
  REQUIRE_GPT2();
  const std::string vocab = read_file(kVocab);
  const std::string merges = read_file(kMerges);
  expect_load_error(vocab.substr(0, vocab.size() / 2), merges, {"vocab.json", "not valid JSON"});
  // Merges referring to tokens the vocabulary lacks: a vocabulary without its last entries.
  const auto full = nlohmann::json::parse(vocab);
  auto json = full;
  for (const auto& [token, id] : full.items()) {
    if (id.get<int>() >= 50000 && id.get<int>() < 50256) json.erase(token);
  }
  json["<|endoftext|>"] = 50000;
  expect_load_error(json.dump(), merges, {"merges.txt", "is not in the vocabulary"});
}

// ---------------------------------------------------------------------------------------
// `gridformer tokenize`.

TEST(TokenizeCli, EncodesEachLineAndDecodesBack) {
  REQUIRE_GPT2();
  const std::string input = "Hello world\n\n  indented\ttab\r\nlast line without newline";
  std::istringstream in(input);
  std::ostringstream out;
  ASSERT_EQ(run_tokenize(kVocab, kMerges, false, in, out), 0);
  const auto lines = split_lines(out.str());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "15496 995");
  EXPECT_EQ(lines[1], "");
  EXPECT_EQ(parse_ids(lines[2]), tok.encode("  indented\ttab\r"));
  EXPECT_EQ(parse_ids(lines[3]), tok.encode("last line without newline"));

  std::istringstream ids_in(out.str());
  std::ostringstream text_out;
  ASSERT_EQ(run_tokenize(kVocab, kMerges, true, ids_in, text_out), 0);
  EXPECT_EQ(text_out.str(), input + "\n");
}

TEST(TokenizeCli, RejectsBadIdsAndFiles) {
  REQUIRE_GPT2();
  for (const std::string bad : {"15496 hello\n", "15496 50257\n", "1 -1\n", "12x\n", "99999999999\n"}) {
    std::istringstream in("995\n" + bad);
    std::ostringstream out;
    EXPECT_EQ(run_tokenize(kVocab, kMerges, true, in, out), 2) << bad;  // README "Exit status": bad input is 2
  }
  std::istringstream in("Hello\n");
  std::ostringstream out;
  EXPECT_EQ(run_tokenize(kVocab + ".missing", kMerges, false, in, out), 2);
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace gf::data
