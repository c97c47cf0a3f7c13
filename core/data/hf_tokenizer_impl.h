// Private to core/data/hf_tokenizer.cpp (encoding, the public interface) and hf_tokenizer_load.cpp,
// hf_tokenizer_added.cpp and hf_tokenizer_sp*.cpp (reading tokenizer.json and tokenizer_config.json): the parsed tokenizer, HFTokenizer::Impl, and the
// types it holds. Not for other includes.
#pragma once
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <unicode/normalizer2.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/data/byte_bpe.h"
#include "core/data/gpt2_pattern.h"
#include "core/data/hf_tokenizer.h"

namespace gf::data {
namespace hf {

using nlohmann::json;

// Lets an unordered_map<std::string, ...> be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// ---------------------------------------------------------------------------------------
// PCRE2.

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
using CodePtr = std::unique_ptr<pcre2_code, CodeDeleter>;

// A compiled pre-tokenisation pattern: `full` for any text, `plain` (may be null: use full) for
// text without byte kLeadByteOfUnicode15Ranges.
struct Regex {
  CodePtr full, plain;
  bool jit = false;
  const pcre2_code* for_text(std::string_view text) const {
    if (!plain || std::memchr(text.data(), kLeadByteOfUnicode15Ranges, text.size()) != nullptr) return full.get();
    return plain.get();
  }
};

// Compiles; on failure returns null and sets `error` (hf_tokenizer_load.cpp).
CodePtr compile_pcre2(const std::string& pattern, uint32_t options, std::string& error, bool& jit);
// tokenizer.json's helpers (hf_tokenizer_load.cpp): a file's bytes (`what` names it in the error); an object's
// "type" string, or "(not an object)" / "(no type)"; a boolean field, `fallback` when absent, null or not a boolean.
std::string read_whole_file(const std::string& path, const char* what);
std::string json_type(const json& j);
bool json_bool(const json& j, const char* key, bool fallback);

// ---------------------------------------------------------------------------------------
// Added tokens: a byte trie for leftmost-longest matching.

struct AddedToken {
  std::string content;
  std::string pattern;  // what is matched: the normalized content when `normalized`
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

class TokenTrie {
 public:
  bool empty() const { return tokens_ == 0; }
  void insert(std::string_view s, int32_t token) {
    if (nodes_.empty()) nodes_.push_back(-1);
    int32_t node = 0;
    for (unsigned char b : s) {
      auto [it, inserted] = edges_.try_emplace(edge(node, b), static_cast<int32_t>(nodes_.size()));
      if (inserted) nodes_.push_back(-1);
      node = it->second;
    }
    first_[static_cast<unsigned char>(s[0])] = true;
    if (nodes_[node] < 0) ++tokens_;
    nodes_[node] = token;  // a content listed twice: the later entry wins
  }
  // The longest token starting at text[pos]: returns its length (0: none) and sets token.
  size_t longest_at(std::string_view text, size_t pos, int32_t& token) const {
    if (!first_[static_cast<unsigned char>(text[pos])]) return 0;
    int32_t node = 0;
    size_t best = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      auto it = edges_.find(edge(node, static_cast<unsigned char>(text[i])));
      if (it == edges_.end()) break;
      node = it->second;
      if (nodes_[node] >= 0) {
        best = i + 1 - pos;
        token = nodes_[node];
      }
    }
    return best;
  }
  bool may_start(unsigned char b) const { return first_[b]; }

 private:
  static uint64_t edge(int32_t node, unsigned char b) { return (static_cast<uint64_t>(node) << 8) | b; }
  std::unordered_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> nodes_;  // token index ending at this node, -1 if none
  std::array<bool, 256> first_{};
  size_t tokens_ = 0;
};

struct AddedMatch {
  size_t begin, end;
  int32_t id;  // -1: text between matches
};

// ---------------------------------------------------------------------------------------
// Pre-tokenizer steps.

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

enum class PreKind { kSplit, kByteLevel, kMetaspace, kDigits, kBert };
enum class Prepend { kAlways, kFirst, kNever };  // Metaspace's prepend_scheme

struct PreStep {
  PreKind kind = PreKind::kSplit;
  // Split
  Regex regex;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = false;
  // Metaspace: `replacement` (UTF-8 of one character) stands for ' ', prepended per `prepend`;
  // `split` cuts before every replacement character.
  std::string replacement;
  Prepend prepend = Prepend::kAlways;
  bool split = true;
  // Digits
  bool individual_digits = false;
};

// Which Unicode tables NFC uses (hf_tokenizer.h, "NFC tables"): kTokenizers, those of the crate
// unicode-normalization-alignments 0.1.12 that tokenizers uses (Unicode 9.0.0): ICU's NFC restricted
// to the code points assigned by Unicode 9.0, the others passed through as starters that neither
// decompose nor compose; kUnicode: ICU's own (Unicode 15.0).
enum class NfcTables { kTokenizers, kUnicode };
// From the environment variable GF_HF_NFC: unset, empty or "tokenizers": kTokenizers; "unicode":
// kUnicode; anything else throws std::runtime_error.
NfcTables nfc_tables_from_environment();
// The NFC normalizer for `tables` (lives as long as the process).
const icu::Normalizer2& nfc_normalizer(NfcTables tables);

// A normalizer step (NFC alone keeps the fast path of Impl::nfc instead).
enum class NormKind { kNfc, kPrepend, kReplace, kBert };
struct NormStep {
  NormKind kind = NormKind::kNfc;
  std::string text;     // Prepend: the prefix; Replace: the literal searched for
  std::string content;  // Replace: what each match becomes
  // BertNormalizer
  bool clean_text = true, chinese_chars = true, strip_accents = true, lowercase = true;
};

// A decoder step (decoders/*.rs), for the models that are not byte-level.
enum class DecKind { kByteFallback, kFuse, kStrip, kReplace, kMetaspace, kWordPiece };
struct DecStep {
  DecKind kind = DecKind::kFuse;
  std::string text;     // Replace: the literal; Strip / Metaspace: the character; WordPiece: the prefix
  std::string content;  // Replace: its replacement
  size_t start = 0, stop = 0;  // Strip: at most this many characters off each end
  bool flag = false;           // Metaspace: prepend_scheme is not never; WordPiece: cleanup
};

struct Span {
  size_t begin, end;
  bool is_match;
};

}  // namespace hf

// ---------------------------------------------------------------------------------------
// The parsed tokenizer, immutable once loaded and shared by all copies of an HFTokenizer.

enum class ModelKind {
  kByteLevelBpe,  // a ByteLevel pre-tokenizer feeds bytes (as GPT-2's characters) to a BPE
  kBpe,           // characters to a BPE with byte_fallback / unk_token (SentencePiece layouts)
  kWordPiece,     // BERT's WordPiece
};

struct HFTokenizer::Impl {
  std::string path;
  // Model.
  ModelKind model_kind = ModelKind::kByteLevelBpe;
  // kBpe and kWordPiece: the model vocab as written (token -> id), the unknown token's id (-1:
  // none), the <0xNN> token of each byte (-1: none or no byte_fallback).
  hf::Vocab vocab;
  int32_t unk_id = -1;
  bool fuse_unk = false, byte_fallback = false;
  std::array<int32_t, 256> fallback_ids{};
  std::string wp_prefix;      // WordPiece continuing_subword_prefix
  size_t wp_max_chars = 100;  // WordPiece max_input_chars_per_word
  std::vector<hf::DecStep> decoders;
  bool null_decoder = false;  // decode joins the tokens with ' '
  std::unordered_map<std::string, int32_t> model_bytes_to_id;  // byte string -> id (byte-level tokens)
  std::array<int32_t, 256> byte_ids{};
  byte_bpe::MergeTable merges;
  bool ignore_merges = false;
  // Every id's decoded bytes; the file's token strings -> id (added contents win).
  std::vector<std::string> id_to_bytes;  // indexed by id, up to the largest id
  std::vector<bool> has_id;               // false: no token has this id (a gap)
  int32_t vocab_size = 0;                 // tokens (model vocab plus added tokens not in it)
  hf::Vocab token_to_id;
  // Added tokens.
  std::vector<hf::AddedToken> added;
  hf::TokenTrie raw_trie, normalized_trie;  // values: index into `added`
  // Normalizer and pre-tokenizer. `nfc`: the normalizer is NFC alone; otherwise norm_steps.
  bool nfc = false;
  std::vector<hf::NormStep> norm_steps;
  const icu::Normalizer2* nfc_instance = nullptr;  // nfc_normalizer(nfc_tables), when any step is NFC
  hf::NfcTables nfc_tables = hf::NfcTables::kTokenizers;
  std::vector<hf::PreStep> steps;
  bool top_level_byte_level = false;  // pre_tokenizer is a ByteLevel itself
  // Specials.
  std::vector<int32_t> prefix, suffix;
  int32_t bos = -1, eos = -1;
  std::string eos_source;  // how eos was chosen, when no tokenizer_config.json named it
  uint64_t serial = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("HF tokenizer file '" + path + "': " + what);
  }
  void load(const hf::json& root);
  void load_model(const hf::json& model);
  // hf_tokenizer_sp_load.cpp: the models, normalizers and decoders that are not byte-level.
  void load_char_bpe(const hf::json& model);
  void load_wordpiece(const hf::json& model);
  bool load_other_normalizer(const hf::json& j, const std::string& type, const std::string& where);
  bool load_other_pre_tokenizer(const hf::json& j, const std::string& type, const std::string& where, hf::PreStep& step);
  void load_decoder(const hf::json& j, const std::string& where);
  void choose_eos();
  void load_added_tokens(const hf::json& tokens, size_t model_size);
  void load_normalizer(const hf::json& j, const std::string& where);
  void load_pre_tokenizer(const hf::json& j, const std::string& where);
  void load_post_processor(const hf::json& j, const std::string& where, std::vector<int32_t>& pre,
                           std::vector<int32_t>& post);
  void load_config();
  void normalize(std::string_view text, std::string& out) const;  // NFC
  // hf_tokenizer_sp.cpp. The normalizer steps over `text` into `out` (`scratch`: a buffer).
  void normalize_steps(std::string_view text, std::string& out, std::string& scratch) const;
  // The model's first symbols for one pre-token (kBpe): its characters, <0xNN> tokens, unk.
  void char_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void wordpiece(std::string_view word, std::vector<int32_t>& out) const;
  // The decoder steps over the ids' tokens (model kinds other than kByteLevelBpe).
  std::string decode_tokens(std::span<const int32_t> ids) const;
  // Metaspace: ' ' -> replacement, prepended as its scheme says; `at_start`: the piece starts the input.
  void metaspace(const hf::PreStep& step, std::string_view piece, bool at_start, std::string& out) const;
  // Metaspace (split), Digits and BertPreTokenizer: the pieces of `piece`, grouped.
  void char_split(const hf::PreStep& step, std::string_view piece, std::vector<hf::Span>& out) const;
};

}  // namespace gf::data
