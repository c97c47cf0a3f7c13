// Tests for the Hugging Face byte-level BPE tokenizer (core/data/hf_tokenizer.h).
//
// Golden data in tests/data/hf_tokenizer (see its README): corpus.jsonl (every script and
// whitespace class, contractions in upper case, digit runs, special tokens inside text) and four
// tokenizer.json layouts (gpt2, llama3, qwen2, features), each with ids.txt written by
// tools/hf_tokenizer_reference.py, a Python transcription of tokenizers' semantics.
#include <gtest/gtest.h>

#include <unicode/normalizer2.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "core/data/hf_tokenizer.h"
#include "core/data/tokenizer.h"
#include "tests/core/data/text_test_util.h"

namespace gf::data {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;
using nlohmann::json;

const fs::path kDir = fs::path(GF_SOURCE_DIR) / "tests" / "data" / "hf_tokenizer";
const fs::path kGpt2Dir = fs::path(GF_SOURCE_DIR) / "data" / "gpt2";

using test::ids_str;
using test::parse_ids;
using test::read_lines;

std::vector<std::string> corpus_texts() { return test::corpus_texts(kDir / "corpus.jsonl"); }

HFTokenizer load(const std::string& fixture) { return HFTokenizer::from_file((kDir / fixture / "tokenizer.json").string()); }

void check_golden(const std::string& fixture, const std::string& golden, bool with_specials) {
  const HFTokenizer tok = load(fixture);
  const std::vector<std::string> texts = corpus_texts();
  const std::vector<std::string> expected = read_lines(kDir / fixture / golden);
  ASSERT_EQ(texts.size(), expected.size()) << fixture << "/" << golden;
  for (size_t i = 0; i < texts.size(); ++i) {
    const Ids ids = with_specials ? tok.encode_with_special_tokens(texts[i]) : tok.encode(texts[i]);
    EXPECT_EQ(ids_str(ids), ids_str(parse_ids(expected[i])))
        << fixture << "/" << golden << " line " << i + 1 << ": " << json(texts[i]).dump();
  }
}

TEST(HFTokenizer, Gpt2LayoutMatchesReference) { check_golden("gpt2", "ids.txt", false); }
TEST(HFTokenizer, Llama3LayoutMatchesReference) { check_golden("llama3", "ids.txt", false); }
TEST(HFTokenizer, Llama3WithSpecialsMatchesReference) { check_golden("llama3", "ids_with_specials.txt", true); }
TEST(HFTokenizer, Qwen2LayoutMatchesReference) { check_golden("qwen2", "ids.txt", false); }
TEST(HFTokenizer, FeaturesLayoutMatchesReference) { check_golden("features", "ids.txt", false); }
TEST(HFTokenizer, FeaturesWithSpecialsMatchesReference) { check_golden("features", "ids_with_specials.txt", true); }

std::string nfc(const std::string& s) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, icu::StringPiece(s.data(), static_cast<int32_t>(s.size())), sink, nullptr, status);
  EXPECT_FALSE(U_FAILURE(status));
  return out;
}

// decode(encode(text)) gives the text back (NFC-normalized for Qwen2's NFC normalizer).
TEST(HFTokenizer, DecodeRoundTrip) {
  for (const std::string fixture : {"gpt2", "llama3", "qwen2"}) {
    const HFTokenizer tok = load(fixture);
    for (const std::string& text : corpus_texts()) {
      const std::string expected = fixture == "qwen2" ? nfc(text) : text;
      EXPECT_EQ(tok.decode(tok.encode(text)), expected) << fixture << ": " << json(text).dump();
    }
  }
}

TEST(HFTokenizer, SpecialTokenIds) {
  const HFTokenizer llama = load("llama3");
  const int32_t bot = llama.token_to_id("<|begin_of_text|>"), eot = llama.token_to_id("<|end_of_text|>");
  ASSERT_GE(bot, 0);
  EXPECT_EQ(llama.bos_id(), bot);
  EXPECT_EQ(llama.eos_id(), eot);
  EXPECT_EQ(llama.eod_id(), eot);
  EXPECT_TRUE(llama.adds_bos());
  EXPECT_EQ(llama.special_prefix(), Ids{bot});
  EXPECT_TRUE(llama.special_suffix().empty());
  EXPECT_EQ(llama.vocab_size(), eot + 8);  // 9 specials after the model vocab
  EXPECT_EQ(llama.encode("<|begin_of_text|>"), Ids{bot});
  EXPECT_EQ(llama.encode_with_special_tokens(""), Ids{bot});
  EXPECT_EQ(llama.decode(Ids{bot}), "<|begin_of_text|>");

  const HFTokenizer qwen = load("qwen2");  // tokenizer_config: eos <|endoftext|>, bos null
  EXPECT_EQ(qwen.eod_id(), qwen.token_to_id("<|endoftext|>"));
  EXPECT_EQ(qwen.bos_id(), -1);
  EXPECT_FALSE(qwen.adds_bos());
  EXPECT_TRUE(qwen.special_prefix().empty());
  EXPECT_EQ(qwen.encode("<tool_call>x</tool_call>").front(), qwen.token_to_id("<tool_call>"));

  const HFTokenizer gpt2 = load("gpt2");  // no tokenizer_config: eos is the added <|endoftext|>
  EXPECT_EQ(gpt2.eod_id(), 12256);
  EXPECT_EQ(gpt2.vocab_size(), 12257);
  EXPECT_EQ(gpt2.bos_id(), -1);
  EXPECT_EQ(gpt2.encode("a<|endoftext|>b"), (Ids{64, 12256, 65}));

  const HFTokenizer features = load("features");  // RobertaProcessing; eos_token as an object
  EXPECT_EQ(features.eod_id(), features.token_to_id("</s>"));
  EXPECT_EQ(features.bos_id(), features.token_to_id("<s>"));
  EXPECT_TRUE(features.adds_bos());
  EXPECT_EQ(features.special_suffix(), Ids{features.eod_id()});
  EXPECT_EQ(features.token_to_id("the"), 1169);  // an added token already in the model vocab keeps its id
}

std::vector<std::string> texts_of(const std::vector<HFTokenizer::PreToken>& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(p.text);
  return out;
}

using Strings = std::vector<std::string>;

// Llama 3's pattern: case-insensitive contractions, digits in groups of at most three, one
// non-letter glued before letters, and \s as Unicode White_Space (U+180E is not space).
TEST(HFTokenizer, Llama3PreTokens) {
  const HFTokenizer tok = load("llama3");
  EXPECT_EQ(texts_of(tok.pre_tokenize("DON'T 1234567")), (Strings{"DON", "'T", " ", "123", "456", "7"}));
  EXPECT_EQ(texts_of(tok.pre_tokenize("it'ſ")), (Strings{"it", "'ſ"}));
  EXPECT_EQ(texts_of(tok.pre_tokenize("a\r\n\r\n  b")), (Strings{"a", "\r\n\r\n", " ", " b"}));
  EXPECT_EQ(texts_of(tok.pre_tokenize("x\u00a0y \u180ez")), (Strings{"x", "\u00a0y", " \u180e", "z"}));
  // PCRE2's own \s would take U+180E as space: "a", "\u180e", "\u180eb".
  EXPECT_EQ(texts_of(tok.pre_tokenize("a\u180e\u180eb")), (Strings{"a", "\u180e\u180e", "b"}));
  const auto pieces = tok.pre_tokenize("hi<|eot_id|>there");
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[1].added_token_id, tok.token_to_id("<|eot_id|>"));
  EXPECT_EQ(pieces[0].added_token_id, -1);
}

TEST(HFTokenizer, Qwen2NormalizesAndSplitsDigits) {
  const HFTokenizer tok = load("qwen2");
  EXPECT_EQ(texts_of(tok.pre_tokenize("cafe\u0301 123")), (Strings{"café", " ", "1", "2", "3"}));
}

// Added tokens: lstrip, rstrip, single_word, normalized contents, leftmost-longest.
TEST(HFTokenizer, FeaturesAddedTokens) {
  const HFTokenizer tok = load("features");
  const auto pieces = tok.pre_tokenize("x  <mask>RS>  [SW] a[SW] xyabcd cafe\u0301");
  std::vector<std::pair<std::string, int32_t>> added;
  for (const auto& p : pieces)
    if (p.added_token_id >= 0) added.emplace_back(p.text, p.added_token_id);
  ASSERT_EQ(added.size(), 5u);
  EXPECT_EQ(added[0], std::make_pair(std::string("  <mask>"), tok.token_to_id("<mask>")));
  EXPECT_EQ(added[1], std::make_pair(std::string("RS>  "), tok.token_to_id("RS>")));
  EXPECT_EQ(added[2], std::make_pair(std::string("[SW]"), tok.token_to_id("[SW]")));  // a[SW] is skipped
  EXPECT_EQ(added[3], std::make_pair(std::string("xyabc"), tok.token_to_id("xyabc")));
  EXPECT_EQ(added[4], std::make_pair(std::string("café"), tok.token_to_id("cafe\u0301")));
}

// Invalid UTF-8 never throws; each invalid run is one pre-token of its own bytes.
TEST(HFTokenizer, InvalidUtf8RoundTrips) {
  for (const std::string fixture : {"gpt2", "llama3"}) {
    const HFTokenizer tok = load(fixture);
    for (const std::string& text : {std::string("a\xff" "b"), std::string("\xe2\x82 x\xc3"), std::string("\xf0\x9f<|end_of_text|>\x80")}) {
      EXPECT_EQ(tok.decode(tok.encode(text)), text) << fixture;
    }
  }
  const HFTokenizer tok = load("llama3");
  EXPECT_EQ(texts_of(tok.pre_tokenize("ab\xff\xfe" "cd")), (Strings{"ab", "\xff\xfe", "cd"}));
  EXPECT_THROW(tok.decode(Ids{tok.vocab_size()}), std::out_of_range);
  EXPECT_THROW(tok.decode(Ids{-1}), std::out_of_range);
}

TEST(HFTokenizer, ConcurrentEncodeAgrees) {
  const HFTokenizer tok = load("llama3");
  const std::vector<std::string> texts = corpus_texts();
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      const HFTokenizer copy = tok;
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) mismatches[k] += copy.encode(texts[i]) != expected[i];
    });
  }
  for (auto& t : threads) t.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// The GPT-2 layout with GPT-2's full vocabulary gives what the GPT-2 tokenizer (core/data/tokenizer.h,
// itself checked against Python) gives, on text without "<|endoftext|>" (an added token for
// tokenizers, plain text for Megatron's GPT2BPETokenizer).
TEST(HFTokenizer, FullGpt2AgreesWithGpt2Tokenizer) {
  if (!fs::exists(kGpt2Dir / "gpt2-vocab.json") || !fs::exists(kGpt2Dir / "gpt2-merges.txt"))
    GTEST_SKIP() << "GPT-2 vocab files not found in " << kGpt2Dir << " (scripts/fetch_gpt2_vocab.sh)";
  char tmpl[] = "/tmp/gf_hf_gpt2_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  json vocab = json::parse(std::ifstream(kGpt2Dir / "gpt2-vocab.json"));
  json merges = json::array();
  for (const std::string& line : read_lines(kGpt2Dir / "gpt2-merges.txt"))
    if (!line.empty()) merges.push_back(line);  // the "#version" line is skipped by the loader
  json tok = json::parse(R"({"version": "1.0",
      "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
                        "rstrip": false, "normalized": true, "special": true}],
      "normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
      "post_processor": null, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE"}})");
  tok["model"]["vocab"] = vocab;
  tok["model"]["merges"] = merges;
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  const HFTokenizer hf = HFTokenizer::from_file((dir / "tokenizer.json").string());
  const GPT2Tokenizer gpt2 = GPT2Tokenizer::from_files((kGpt2Dir / "gpt2-vocab.json").string(), (kGpt2Dir / "gpt2-merges.txt").string());
  EXPECT_EQ(hf.vocab_size(), gpt2.vocab_size());
  EXPECT_EQ(hf.eod_id(), gpt2.eod_id());
  std::vector<std::string> texts = corpus_texts();
  const fs::path unicode_space = fs::path(GF_SOURCE_DIR) / "tests" / "golden" / "tokenizer" / "unicode_space.jsonl";
  if (fs::exists(unicode_space))
    for (const std::string& line : read_lines(unicode_space)) {
      const json text = json::parse(line).at("text");  // a string, or a list of sentences
      if (text.is_string()) texts.push_back(text.get<std::string>());
      else for (const json& sentence : text) texts.push_back(sentence.get<std::string>());
    }
  texts.push_back("bytes \xff\xfe and \xe2\x82 cut");
  size_t compared = 0;
  for (const std::string& text : texts) {
    if (text.find("<|endoftext|>") != std::string::npos) continue;
    EXPECT_EQ(ids_str(hf.encode(text)), ids_str(gpt2.encode(text))) << json(text).dump(-1, ' ', false, json::error_handler_t::replace);
    ++compared;
  }
  EXPECT_GT(compared, 40u);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// Refusals: a minimal valid file, then one field changed per case.

std::string byte_level_char(int b) {
  auto printable = [](int x) { return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF); };
  int extra = 0;
  for (int x = 0; x < b; ++x) extra += !printable(x);
  const int cp = printable(b) ? b : 256 + extra;
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

json sequence(const json& first, const json& second) {
  json seq;
  seq["type"] = "Sequence";
  seq["pretokenizers"] = json::array();
  seq["pretokenizers"].push_back(first);
  seq["pretokenizers"].push_back(second);
  return seq;
}

json split_step(const json& pattern, const std::string& behavior) {
  json step;
  step["type"] = "Split";
  step["pattern"] = pattern;
  step["behavior"] = behavior;
  step["invert"] = false;
  return step;
}

class HFTokenizerToy : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gf_hf_tokenizer_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_level_char(b)] = b;
    vocab["ab"] = 256;
    vocab["abc"] = 257;
    base_ = {{"version", "1.0"},
             {"truncation", nullptr},
             {"padding", nullptr},
             {"added_tokens", json::array({{{"id", 258}, {"content", "</s>"}, {"single_word", false}, {"lstrip", false},
                                            {"rstrip", false}, {"normalized", false}, {"special", true}}})},
             {"normalizer", nullptr},
             {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
             {"post_processor", nullptr},
             {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
             {"model",
              {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
               {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
               {"vocab", vocab}, {"merges", json::array({"a b", json::array({"ab", "c"})})}}}};
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const json& j, const std::string& config = "") {
    std::ofstream(dir_ / "tokenizer.json", std::ios::binary) << j.dump();
    if (!config.empty()) std::ofstream(dir_ / "tokenizer_config.json", std::ios::binary) << config;
    return (dir_ / "tokenizer.json").string();
  }
  // Loading `j` throws a runtime_error whose message holds every one of `parts`.
  void expect_refused(const json& j, std::initializer_list<std::string> parts, const std::string& config = "") {
    const std::string path = write(j, config);
    try {
      HFTokenizer::from_file(path);
      ADD_FAILURE() << "loaded: " << j.dump().substr(0, 200);
    } catch (const std::runtime_error& e) {
      for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    fs::remove(dir_ / "tokenizer_config.json");
  }
  json base_;
  fs::path dir_;
};

TEST_F(HFTokenizerToy, MinimalFileLoads) {
  const HFTokenizer tok = HFTokenizer::from_file(write(base_));
  EXPECT_EQ(tok.encode("abc abd</s>"), (Ids{257, 32, 256, 100, 258}));  // "abc", " abd", "</s>"
  EXPECT_EQ(tok.eod_id(), 258);
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.id_limit(), 259);
}

// Every \p{X} of a Split pattern holds the characters Unicode 15.0 added to X (Debian's PCRE2
// 10.42 has Unicode 14.0 tables; tokenizers' Oniguruma and python3-regex have 15.0).
TEST_F(HFTokenizerToy, SplitPropertiesFollowUnicode15) {
  auto pieces = [&](const std::string& regex, const std::string& text) {
    json pattern;
    pattern["Regex"] = regex;
    json j = base_;
    j["pre_tokenizer"] = sequence(split_step(pattern, "Isolated"), json::parse(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})"));
    return texts_of(HFTokenizer::from_file(write(j)).pre_tokenize(text));
  };
  EXPECT_EQ(pieces(R"(\p{Lm}+)", "a\U0001E030\U0001E031b"), (Strings{"a", "\U0001E030\U0001E031", "b"}));
  EXPECT_EQ(pieces(R"(\p{M})", "x\u0CF3y"), (Strings{"x", "\u0CF3", "y"}));  // in the BMP: no 0xF0 byte
  EXPECT_EQ(pieces(R"([^\s\p{L}]+)", "a\U0001E030-b"), (Strings{"a\U0001E030", "-", "b"}));
  EXPECT_EQ(pieces(R"(\P{L}+)", "a\U0001E030-b"), (Strings{"a\U0001E030", "-", "b"}));
  EXPECT_EQ(pieces(R"(\p{N}+)", "x\U00011F50\U00011F51y"), (Strings{"x", "\U00011F50\U00011F51", "y"}));
}

TEST_F(HFTokenizerToy, IgnoreMerges) {
  json j = base_;
  j["model"]["merges"] = json::array();
  EXPECT_EQ(HFTokenizer::from_file(write(j)).encode("abc"), (Ids{97, 98, 99}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(HFTokenizer::from_file(write(j)).encode("abc"), (Ids{257}));
}

TEST_F(HFTokenizerToy, RefusesUnsupportedModels) {
  for (const std::string type : {"WordPiece", "Unigram", "WordLevel"}) {
    json j = base_;
    j["model"]["type"] = type;
    expect_refused(j, {"model.type", "'" + type + "'", "only BPE"});
  }
  json j = base_;
  j["model"]["dropout"] = 0.1;
  expect_refused(j, {"model.dropout", "0.1"});
  j = base_;
  j["model"]["continuing_subword_prefix"] = "##";
  expect_refused(j, {"model.continuing_subword_prefix", "##"});
  j = base_;
  j["model"]["end_of_word_suffix"] = "</w>";
  expect_refused(j, {"model.end_of_word_suffix", "</w>"});
  j = base_;
  j["model"]["vocab"].erase("a");
  j["model"]["vocab"]["zz"] = 97;
  expect_refused(j, {"lacks the byte-level token of byte 97"});
  j = base_;
  j["model"]["merges"].push_back("x yz");
  expect_refused(j, {"model.merges", "'yz'", "not in model.vocab"});
  j = base_;
  j["model"]["merges"].push_back("a b c");
  expect_refused(j, {"model.merges[2]", "'a b c'"});
  j = base_;
  j["model"]["vocab"]["dup"] = 5;
  expect_refused(j, {"id 5", "'dup'"});
}

// Ids may leave gaps: vocab_size() counts tokens, id_limit() is the largest id + 1.
TEST_F(HFTokenizerToy, IdsWithGaps) {
  json j = base_;
  j["added_tokens"][0]["id"] = 259;  // numbered from the model vocab's size (259 with "gap")
  j["model"]["vocab"]["gap"] = 400;
  const HFTokenizer tok = HFTokenizer::from_file(write(j));
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_EQ(tok.id_limit(), 401);
  EXPECT_EQ(tok.eod_id(), 259);
  EXPECT_EQ(tok.decode(Ids{400, 259}), "gap</s>");
  EXPECT_THROW(tok.decode(Ids{300}), std::out_of_range);
  j["added_tokens"][0]["id"] = 258;
  expect_refused(j, {"added_tokens[0]", "258", "259"});
}

TEST_F(HFTokenizerToy, RefusesUnsupportedPipelineParts) {
  json j = base_;
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_refused(j, {"normalizer", "'Lowercase'", "NFC"});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}, {{"type", "NFKC"}}})}};
  expect_refused(j, {"normalizer.normalizers[1]", "'NFKC'"});
  j = base_;
  j["pre_tokenizer"] = sequence(json::parse(R"({"type": "Digits", "individual_digits": true})"), base_["pre_tokenizer"]);
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_refused(j, {"pre_tokenizer", "'Metaspace'"});
  j["pre_tokenizer"] = nullptr;
  expect_refused(j, {"pre_tokenizer", "'null'"});
  j["pre_tokenizer"] = sequence(base_["pre_tokenizer"], split_step(json::parse(R"({"String": " "})"), "Isolated"));
  expect_refused(j, {"after ByteLevel"});
  auto split = [&](const std::string& regex) {
    json s = base_;
    json pattern;
    pattern["Regex"] = regex;
    s["pre_tokenizer"] = sequence(split_step(pattern, "Isolated"), base_["pre_tokenizer"]);
    return s;
  };
  expect_refused(split(R"(\d+)"), {"pre_tokenizer.pretokenizers[0].pattern.Regex", "\\d", "not supported"});
  expect_refused(split(R"(\w+|\s)"), {"\\w"});
  expect_refused(split(R"(^a)"), {"anchor ^"});
  expect_refused(split(R"([a[b]])"), {"nested"});
  expect_refused(split(R"((?m:a.))"), {"(?m"});
  expect_refused(split(R"([\P{L}x])"), {"\\P{L} inside a character class"});
  expect_refused(split(R"(a{1,2}+)"), {"{1,2}+"});
  expect_refused(split(R"(\p{NoSuchProperty})"), {"PCRE2 cannot compile"});
  j = split("x");
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Shuffled";
  expect_refused(j, {"behavior", "'Shuffled'"});
  j = base_;
  j["decoder"] = {{"type", "WordPiece"}};
  expect_refused(j, {"decoder", "'WordPiece'"});
  j["decoder"] = nullptr;
  expect_refused(j, {"decoder", "'null'"});
  j = base_;
  j["post_processor"] = {{"type", "Fancy"}};
  expect_refused(j, {"post_processor", "'Fancy'"});
  j = base_;
  j["version"] = "2.0";
  expect_refused(j, {"version", "2.0"});
}

TEST_F(HFTokenizerToy, RefusesBadAddedTokensAndSpecials) {
  json j = base_;
  j["added_tokens"][0]["id"] = 300;
  expect_refused(j, {"added_tokens[0]", "'</s>'", "300", "258"});
  j = base_;
  j["added_tokens"][0]["content"] = "<end>";
  expect_refused(j, {"no end-of-document token", "tokenizer_config.json"});
  expect_refused(base_, {"eos_token", "'<nope>'", "not a token"}, R"({"eos_token": "<nope>"})");
  expect_refused(base_, {"add_bos_token true", "post_processor"}, R"({"eos_token": "</s>", "add_bos_token": true})");
  expect_refused(base_, {"split_special_tokens"}, R"({"split_special_tokens": true})");
  expect_refused(base_, {"add_prefix_space true"}, R"({"add_prefix_space": true})");
  expect_refused(base_, {"tokenizer_config.json", "not valid JSON"}, "{nope");
  // eos named by the config wins over the fallback list; bos from the config.
  const HFTokenizer tok = HFTokenizer::from_file(write(base_, R"({"eos_token": "abc", "bos_token": {"content": "ab"}, "add_bos_token": false})"));
  EXPECT_EQ(tok.eod_id(), 257);
  EXPECT_EQ(tok.bos_id(), 256);
  EXPECT_FALSE(tok.adds_bos());
}

TEST_F(HFTokenizerToy, MissingOrMalformedFile) {
  try {
    HFTokenizer::from_file((dir_ / "missing.json").string());
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  std::ofstream(dir_ / "tokenizer.json") << "{\"model\": ";
  try {
    HFTokenizer::from_file((dir_ / "tokenizer.json").string());
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
  json j = base_;
  j.erase("model");
  expect_refused(j, {"no 'model'"});
  j = base_;
  j["model"]["vocab"] = json::array();
  expect_refused(j, {"model.vocab"});
}

// Encode throughput over the corpus (logged; bench/hf_tokenizer_speed.cpp measures the target).
TEST(HFTokenizer, Throughput) {
  const std::vector<std::string> texts = corpus_texts();
  for (const std::string fixture : {"llama3", "qwen2"}) {
    const HFTokenizer tok = load(fixture);
    size_t bytes = 0, tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double s = 0;
    while (s < 0.3) {
      for (const std::string& t : texts) bytes += t.size(), tokens += tok.encode(t).size();
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    std::printf("[ hf_tokenizer ] %s: %.2f MB/s, %.0f tokens/s (corpus.jsonl, one thread)\n", fixture.c_str(), bytes / s / 1e6,
                tokens / s);
    EXPECT_GT(bytes, 0u);
  }
}

}  // namespace
}  // namespace gf::data
