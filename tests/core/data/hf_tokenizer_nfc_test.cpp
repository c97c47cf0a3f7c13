// NFC in the HuggingFaceTokenizer (core/data/hf_tokenizer.h, "NFC tables"): by default as the Rust
// crate `tokenizers` computes it (its normalization crate has Unicode 9.0 tables), with
// GF_HF_NFC=unicode as Unicode defines it (ICU).
//
// tests/golden/tokenizer/nfc/normalization_test_qwen2.tsv (tools/hf_nfc_check.py --write-fixture):
// the 648 lines of Unicode 15.0's NormalizationTest.txt where tokenizers 0.23.2's NFC differs from
// Unicode's; per line the source column as hex code points, tokenizers' ids for it with the Qwen2
// layout of tests/data/hf_tokenizer (NFC normalizer), and tokenizers' ids for the NFC column with the
// normalizer removed (Unicode's NFC, tokenized the same way). On the other 18,426 lines both agree,
// and tools/hf_nfc_check.py checks all 19,074 lines in both modes against the Rust library itself.
#include <gtest/gtest.h>
#include "core/data/byte_bpe.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/data/hf_tokenizer.h"
#include "tests/core/data/text_test_util.h"

namespace gf::data {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const fs::path kSrc = fs::path(GF_SOURCE_DIR);
const fs::path kQwen2 = kSrc / "tests" / "data" / "hf_tokenizer" / "qwen2" / "tokenizer.json";
const fs::path kFixture = kSrc / "tests" / "golden" / "tokenizer" / "nfc" / "normalization_test_qwen2.tsv";

// Sets (or, with nullopt, removes) GF_HF_NFC for its lifetime; restores the previous value after.
class NfcEnv {
 public:
  explicit NfcEnv(std::optional<std::string> value) {
    if (const char* old = std::getenv("GF_HF_NFC")) old_ = old;
    if (value) setenv("GF_HF_NFC", value->c_str(), 1);
    else unsetenv("GF_HF_NFC");
  }
  ~NfcEnv() {
    if (old_) setenv("GF_HF_NFC", old_->c_str(), 1);
    else unsetenv("GF_HF_NFC");
  }
  NfcEnv(const NfcEnv&) = delete;
  NfcEnv& operator=(const NfcEnv&) = delete;

 private:
  std::optional<std::string> old_;
};

using gf::data::byte_bpe::append_utf8;

std::string from_hex(const std::string& hex) {
  std::istringstream in(hex);
  std::string out;
  for (std::string cp; in >> cp;) append_utf8(static_cast<char32_t>(std::stoul(cp, nullptr, 16)), out);
  return out;
}

using test::parse_ids;

struct Row {
  std::string hex, text;
  Ids tokenizers, unicode;
};

std::vector<Row> read_fixture() {
  std::ifstream in(kFixture, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << kFixture;
  std::vector<Row> rows;
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find('\t'), b = line.find('\t', a + 1);
    if (a == std::string::npos || b == std::string::npos) {
      ADD_FAILURE() << "malformed line: " << line;
      continue;
    }
    Row r;
    r.hex = line.substr(0, a);
    r.text = from_hex(r.hex);
    r.tokenizers = parse_ids(line.substr(a + 1, b - a - 1));
    r.unicode = parse_ids(line.substr(b + 1));
    rows.push_back(std::move(r));
  }
  return rows;
}

// The normalized text encode() hands on: its pre-tokens joined (the Qwen2 layout adds no prefix space).
std::string normalized(const HFTokenizer& tok, const std::string& text) {
  std::string out;
  for (const auto& p : tok.pre_tokenize(text)) out += p.text;
  return out;
}

TEST(HFTokenizerNfc, FixtureIsWhereTheTablesDiffer) {
  const auto rows = read_fixture();
  ASSERT_EQ(rows.size(), 648u);
  for (const Row& r : rows) EXPECT_NE(r.tokenizers, r.unicode) << r.hex;
}

TEST(HFTokenizerNfc, DefaultMatchesTokenizers) {
  const NfcEnv env(std::nullopt);
  const HFTokenizer tok = HFTokenizer::from_file(kQwen2.string());
  for (const Row& r : read_fixture()) EXPECT_EQ(tok.encode(r.text), r.tokenizers) << r.hex;
}

TEST(HFTokenizerNfc, TokenizersValueIsTheDefault) {
  const NfcEnv env(std::string("tokenizers"));
  const HFTokenizer tok = HFTokenizer::from_file(kQwen2.string());
  for (const Row& r : read_fixture()) EXPECT_EQ(tok.encode(r.text), r.tokenizers) << r.hex;
}

TEST(HFTokenizerNfc, UnicodeMatchesUnicodesNfc) {
  const NfcEnv env(std::string("unicode"));
  const HFTokenizer tok = HFTokenizer::from_file(kQwen2.string());
  for (const Row& r : read_fixture()) EXPECT_EQ(tok.encode(r.text), r.unicode) << r.hex;
}

// The Telugu nukta U+0C3C (Unicode 14.0, combining class 7) after the virama U+0C4D (class 9):
// Unicode's NFC puts the nukta first; tokenizers' tables lack it (class 0), so the order stays.
// U+00E9 (e + U+0301, Unicode 1.1) composes in both.
TEST(HFTokenizerNfc, TeluguNukta) {
  const std::string ka_virama_nukta = "\u0C15\u0C4D\u0C3C", ka_nukta_virama = "\u0C15\u0C3C\u0C4D";
  {
    const NfcEnv env(std::nullopt);
    const HFTokenizer tok = HFTokenizer::from_file(kQwen2.string());
    EXPECT_EQ(normalized(tok, ka_virama_nukta), ka_virama_nukta);
    EXPECT_EQ(normalized(tok, "e\u0301"), "\u00E9");
    EXPECT_EQ(normalized(tok, "e\u0301\u0C3C"), "\u00E9\u0C3C");
  }
  {
    const NfcEnv env(std::string("unicode"));
    const HFTokenizer tok = HFTokenizer::from_file(kQwen2.string());
    EXPECT_EQ(normalized(tok, ka_virama_nukta), ka_nukta_virama);
    EXPECT_EQ(normalized(tok, "e\u0301"), "\u00E9");
  }
}

// The tables are chosen when the file is loaded: a tokenizer keeps them after GF_HF_NFC changes.
TEST(HFTokenizerNfc, ChosenAtLoad) {
  std::optional<HFTokenizer> tok;
  {
    const NfcEnv env(std::string("unicode"));
    tok.emplace(HFTokenizer::from_file(kQwen2.string()));
  }
  const NfcEnv env(std::nullopt);
  EXPECT_EQ(normalized(*tok, "\u0C15\u0C4D\u0C3C"), "\u0C15\u0C3C\u0C4D");
}

TEST(HFTokenizerNfc, UnknownValueIsRefused) {
  const NfcEnv env(std::string("icu"));
  try {
    HFTokenizer::from_file(kQwen2.string());
    FAIL() << "expected a refusal";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("GF_HF_NFC='icu'"), std::string::npos) << what;
    EXPECT_NE(what.find("unicode"), std::string::npos) << what;
  }
  // A file without an NFC normalizer does not read the variable.
  EXPECT_NO_THROW(HFTokenizer::from_file((kSrc / "tests" / "data" / "hf_tokenizer" / "gpt2" / "tokenizer.json").string()));
}

}  // namespace
}  // namespace gf::data
