// Hugging Face byte-level BPE tokenizer (tokenizer.json). Behaviour is documented in
// hf_tokenizer.h.
//
// Layout: from_file parses and checks tokenizer.json (and tokenizer_config.json) into an immutable
// Impl shared by all copies. Encoding walks the text in maximal valid-UTF-8 / invalid-byte runs;
// a valid run is cut at the non-normalized added tokens, each piece between is NFC-normalized
// (ICU) and cut at the normalized added tokens, and what is left runs through the pre-tokenizer
// steps (PCRE2) depth first, each final pre-token going to the byte-level BPE with a per-thread
// word cache. Per-thread state lives in a thread_local keyed by the Impl's serial.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/data/hf_tokenizer.h"

#include "core/data/byte_bpe.h"
#include "core/data/gpt2_pattern.h"

#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace gf::data {
using namespace byte_bpe;
namespace {

using nlohmann::json;

// The Unicode version whose new characters are added to every \p{...} of a Split pattern: PCRE2
// 10.42 has Unicode 14.0 tables, Oniguruma in tokenizers 0.23 (and python3-regex 2022.10.31)
// 15.0. For \p{L} and \p{N} these are the ranges core/data/gpt2_pattern.cpp lists.
constexpr const char* kAddedUnicodeAge = "15.0";
constexpr const char* kPcre2UnicodeAge = "14.0";

// ---------------------------------------------------------------------------------------
// UTF-8 helpers.

bool all_ascii(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size(), i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t block;
    std::memcpy(&block, s + i, 8);
    if (block & 0x8080808080808080ull) return false;
  }
  for (; i < n; ++i)
    if (s[i] & 0x80) return false;
  return true;
}

size_t lead_length(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

// Decodes the code point ending at s[i-1] of a valid UTF-8 string; moves i to its start.
char32_t prev_code_point(std::string_view s, size_t& i) {
  size_t start = i - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t j = start;
  char32_t cp = next_code_point(s, j);
  i = start;
  return cp;
}

// Rust regex's Unicode \w (added_vocabulary.rs's single_word test) and \s (lstrip / rstrip).
bool is_word_char(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  return u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) ||
         (U_GET_GC_MASK(cp) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
         u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL);
}
bool is_white_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

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

// Compiles; on failure returns null and sets `error`.
CodePtr compile_pcre2(const std::string& pattern, uint32_t options, std::string& error, bool& jit) {
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);  // `.` excludes \n only, as in Oniguruma
  int code_error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                                   &code_error, &offset, context);
  pcre2_compile_context_free(context);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(code_error, message, sizeof(message));
    error = "at offset " + std::to_string(offset) + " of '" + pattern + "': " + reinterpret_cast<char*>(message);
    return nullptr;
  }
  jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return CodePtr(code);
}

// The characters of property `name` (as \p{name} names it) assigned after Unicode
// kPcre2UnicodeAge up to kAddedUnicodeAge (ICU's Age=V means "assigned in V or before"), by ICU,
// as PCRE2 class ranges; "" when none or ICU does not know the name.
// lowest / highest: their extent (unchanged when none).
std::string added_in_unicode_age(const std::string& name, char32_t& lowest, char32_t& highest) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString pattern = icu::UnicodeString::fromUTF8(
      std::string("[[[\\p{") + name + "}]&[\\p{Age=" + kAddedUnicodeAge + "}]]-[\\p{Age=" + kPcre2UnicodeAge + "}]]");
  const icu::UnicodeSet set(pattern, status);
  if (U_FAILURE(status)) return "";
  std::string ranges;
  char buf[40];
  for (int32_t i = 0; i < set.getRangeCount(); ++i) {
    const auto start = static_cast<char32_t>(set.getRangeStart(i)), end = static_cast<char32_t>(set.getRangeEnd(i));
    if (start == end) std::snprintf(buf, sizeof(buf), "\\x{%X}", static_cast<unsigned>(start));
    else std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", static_cast<unsigned>(start), static_cast<unsigned>(end));
    ranges += buf;
    lowest = std::min(lowest, start);
    highest = std::max(highest, end);
  }
  return ranges;
}

// Translates an Oniguruma (Ruby syntax) pattern, as tokenizers' Split compiles it, to PCRE2
// (hf_tokenizer.h lists the rules). `full` gets, in every \p{...}, the characters Unicode 15.0
// added to it; `plain` not. lowest / highest: the extent of those characters (lowest > highest
// when none). Returns an empty string on success, else what is not supported.
std::string translate_oniguruma(const std::string& p, std::string& full, std::string& plain, char32_t& lowest,
                                char32_t& highest) {
  auto emit = [&](std::string_view f, std::string_view pl) {
    full.append(f);
    plain.append(pl);
  };
  auto both = [&](std::string_view s) { emit(s, s); };
  auto at = [&](size_t i) { return "at offset " + std::to_string(i); };
  bool in_class = false;
  size_t class_body_start = 0;  // offset of the first character that may close the class
  const size_t n = p.size();
  for (size_t i = 0; i < n;) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= n) return "a trailing backslash";
      const char d = p[i + 1];
      const std::string esc = p.substr(i, 2);
      switch (d) {
        case 's': both("\\p{White_Space}"); i += 2; continue;
        case 'S': both("\\P{White_Space}"); i += 2; continue;
        case 'v': both("\\x{0B}"); i += 2; continue;
        case 'r': case 'n': case 't': case 'f': case 'a': case 'e': both(esc); i += 2; continue;
        case 'u': {
          if (i + 6 > n || !std::all_of(p.begin() + i + 2, p.begin() + i + 6, [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); }))
            return "\\u without four hex digits " + at(i);
          both("\\x{" + p.substr(i + 2, 4) + "}");
          i += 6;
          continue;
        }
        case 'x': {
          size_t j = i + 2;
          if (j < n && p[j] == '{') {
            size_t close = p.find('}', j);
            if (close == std::string::npos) return "\\x{ without } " + at(i);
            j = close + 1;
          } else {
            while (j < n && j < i + 4 && std::isxdigit(static_cast<unsigned char>(p[j]))) ++j;
          }
          both(p.substr(i, j - i));
          i = j;
          continue;
        }
        case 'p': case 'P': {
          size_t j = i + 2;
          std::string name;
          if (j < n && p[j] == '{') {
            size_t close = p.find('}', j);
            if (close == std::string::npos) return "\\p{ without } " + at(i);
            name = p.substr(j + 1, close - j - 1);
            j = close + 1;
          } else if (j < n) {
            name = p.substr(j, 1);
            j += 1;
          }
          bool negated = d == 'P';
          std::string base = name;
          if (!base.empty() && base[0] == '^') {
            negated = !negated;
            base.erase(0, 1);
          }
          const std::string extra = added_in_unicode_age(base, lowest, highest);
          const std::string prop = "\\p{" + base + "}";
          if (extra.empty()) {
            both(std::string(negated ? "\\P{" : "\\p{") + base + "}");
          } else if (!negated) {
            if (in_class) emit(prop + extra, prop);
            else emit("[" + prop + extra + "]", prop);
          } else {
            if (in_class) return "\\P{" + base + "} inside a character class " + at(i);
            emit("[^" + prop + extra + "]", "\\P{" + base + "}");
          }
          i = j;
          continue;
        }
        default: break;
      }
      if (std::isalnum(static_cast<unsigned char>(d))) return "the escape " + esc + " " + at(i);
      // An escaped punctuation or non-ASCII character is that character.
      const size_t len = 1 + lead_length(static_cast<unsigned char>(d));
      both(p.substr(i, len));
      i += len;
      continue;
    }
    if (in_class) {
      if (c == '[') return "a nested character class or POSIX bracket " + at(i);
      if (c == '&' && i + 1 < n && p[i + 1] == '&') return "&& in a character class " + at(i);
      if (c == ']' && i >= class_body_start) in_class = false;
      both(std::string_view(&p[i], 1));
      ++i;
      continue;
    }
    switch (c) {
      case '[': {
        in_class = true;
        both("[");
        ++i;
        if (i < n && p[i] == '^') {
          both("^");
          ++i;
        }
        class_body_start = i + 1;  // a ']' right after '[' or '[^' is literal
        continue;
      }
      case '^': case '$': return std::string("the anchor ") + c + " " + at(i);
      case '(': {
        if (i + 1 < n && p[i + 1] == '?') {
          size_t j = i + 2;
          if (j < n && (p[j] == ':' || p[j] == '=' || p[j] == '!' || p[j] == '>')) break;
          if (j + 1 < n && p[j] == '<' && (p[j + 1] == '=' || p[j + 1] == '!')) break;
          if (j < n && p[j] == '<') break;  // (?<name>...)
          size_t k = j;
          while (k < n && (p[k] == 'i' || p[k] == '-')) ++k;
          if (k > j && k < n && (p[k] == ':' || p[k] == ')')) break;
          return "the group (?" + p.substr(j, std::min<size_t>(3, n - j)) + "... " + at(i);
        }
        break;
      }
      case '{': {
        size_t close = p.find('}', i);
        if (close != std::string::npos) {
          const std::string body = p.substr(i + 1, close - i - 1);
          const bool quantifier = !body.empty() && std::all_of(body.begin(), body.end(), [](char ch) {
            return std::isdigit(static_cast<unsigned char>(ch)) || ch == ',';
          }) && std::count(body.begin(), body.end(), ',') <= 1 && body != ",";
          if (quantifier) {
            if (close + 1 < n && p[close + 1] == '+') return "the quantifier {" + body + "}+ " + at(i);
            both(body[0] == ',' ? "{0" + body + "}" : "{" + body + "}");
            i = close + 1;
            continue;
          }
        }
        break;
      }
      default: break;
    }
    const size_t len = lead_length(static_cast<unsigned char>(c));
    both(p.substr(i, len));
    i += len;
  }
  if (in_class) return "an unterminated character class";
  return "";
}

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

struct PreStep {
  bool byte_level = false;
  // Split
  Regex regex;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = false;
};

struct Span {
  size_t begin, end;
  bool is_match;
};

// ---------------------------------------------------------------------------------------
// Per-thread state.

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
};

struct Candidate {
  int32_t rank;
  int32_t left;  // ties go to the leftmost pair, as word.rs's (rank, pos) min-heap
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

struct ThreadState {
  uint64_t owner = 0;
  WordCache cache;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match_data{pcre2_match_data_create(1, nullptr)};
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  std::vector<AddedMatch> raw_matches, normalized_matches;
  std::string normalized;
  std::vector<std::vector<Span>> spans;  // one per pre-tokenizer step (the steps recurse)
};

ThreadState& thread_state(uint64_t serial) {
  thread_local ThreadState state;
  if (state.owner != serial) {
    state.cache.clear();
    state.owner = serial;
  }
  return state;
}

std::atomic<uint64_t> next_serial{1};

}  // namespace

// ---------------------------------------------------------------------------------------

struct HFTokenizer::Impl {
  std::string path;
  // Model.
  std::unordered_map<std::string, int32_t> model_bytes_to_id;  // byte string -> id (byte-level tokens)
  std::array<int32_t, 256> byte_ids{};
  MergeTable merges;
  bool ignore_merges = false;
  // Every id's decoded bytes; the file's token strings -> id (added contents win).
  std::vector<std::string> id_to_bytes;  // indexed by id, up to the largest id
  std::vector<bool> has_id;               // false: no token has this id (a gap)
  int32_t vocab_size = 0;                 // tokens (model vocab plus added tokens not in it)
  std::unordered_map<std::string, int32_t> token_to_id;
  // Added tokens.
  std::vector<AddedToken> added;
  TokenTrie raw_trie, normalized_trie;  // values: index into `added`
  // Normalizer and pre-tokenizer.
  bool nfc = false;
  const icu::Normalizer2* nfc_instance = nullptr;
  std::vector<PreStep> steps;
  bool top_level_byte_level = false;  // pre_tokenizer is a ByteLevel itself
  // Specials.
  std::vector<int32_t> prefix, suffix;
  int32_t bos = -1, eos = -1;
  uint64_t serial = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("HF tokenizer file '" + path + "': " + what);
  }
  void load(const json& root);
  void load_model(const json& model);
  void load_added_tokens(const json& tokens, size_t model_size);
  void load_normalizer(const json& j, const std::string& where);
  void load_pre_tokenizer(const json& j, const std::string& where);
  void load_post_processor(const json& j, const std::string& where, std::vector<int32_t>& pre,
                           std::vector<int32_t>& post);
  void load_config();
  void normalize(std::string_view text, std::string& out) const;
};

namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string("HF ") + what + " '" + path + "': cannot open: " + std::strerror(errno));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "(not an object)";
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return "(no type)";
  return it->get<std::string>();
}

bool bool_field(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->is_boolean() ? it->get<bool>() : fallback;
}

std::string byte_level_string(std::string_view bytes) {
  const auto& map = byte_unicode_map();
  std::string s;
  for (unsigned char b : bytes) {
    char32_t cp = map.to_unicode[b];
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return s;
}

}  // namespace

void HFTokenizer::Impl::normalize(std::string_view text, std::string& out) const {
  out.clear();
  UErrorCode status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out);
  nfc_instance->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr, status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("HF tokenizer: ICU NFC failed: ") + u_errorName(status));
}

void HFTokenizer::Impl::load_normalizer(const json& j, const std::string& where) {
  if (j.is_null()) return;
  const std::string type = type_of(j);
  if (type == "NFC") {
    nfc = true;
  } else if (type == "Sequence") {
    const auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) fail(where + ": Sequence without a 'normalizers' list");
    for (size_t i = 0; i < it->size(); ++i) load_normalizer((*it)[i], where + ".normalizers[" + std::to_string(i) + "]");
  } else {
    fail(where + ": normalizer type '" + type + "' is not supported (supported: NFC, Sequence)");
  }
}

void HFTokenizer::Impl::load_pre_tokenizer(const json& j, const std::string& where) {
  const std::string type = j.is_null() ? std::string("null") : type_of(j);
  if (type == "Sequence") {
    const auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) fail(where + ": Sequence without a 'pretokenizers' list");
    for (size_t i = 0; i < it->size(); ++i) load_pre_tokenizer((*it)[i], where + ".pretokenizers[" + std::to_string(i) + "]");
    return;
  }
  if (!steps.empty() && steps.back().byte_level) {
    fail(where + ": pre-tokenizer '" + type + "' after ByteLevel is not supported (ByteLevel must be the last step)");
  }
  PreStep step;
  if (type == "ByteLevel") {
    step.byte_level = true;
    step.add_prefix_space = bool_field(j, "add_prefix_space", true);
    step.use_regex = bool_field(j, "use_regex", true);
    if (step.use_regex) {
      std::string error;
      bool jit_full = false, jit_plain = false;
      step.regex.full = compile_pcre2(gpt2_pretoken_pattern(true), PCRE2_UTF | PCRE2_UCP, error, jit_full);
      step.regex.plain = compile_pcre2(gpt2_pretoken_pattern(false), PCRE2_UTF | PCRE2_UCP, error, jit_plain);
      if (!step.regex.full || !step.regex.plain) fail(where + ": GPT-2 pattern: " + error);
      step.regex.jit = jit_full && jit_plain;
    }
  } else if (type == "Split") {
    const auto pattern = j.find("pattern");
    const auto behavior = j.find("behavior");
    const auto invert = j.find("invert");
    if (pattern == j.end() || behavior == j.end() || invert == j.end() || !behavior->is_string() || !invert->is_boolean())
      fail(where + ": Split needs 'pattern', 'behavior' (a string) and 'invert' (a boolean)");
    static const std::pair<const char*, Behavior> kBehaviors[] = {
        {"Removed", Behavior::kRemoved}, {"Isolated", Behavior::kIsolated},
        {"MergedWithPrevious", Behavior::kMergedWithPrevious}, {"MergedWithNext", Behavior::kMergedWithNext},
        {"Contiguous", Behavior::kContiguous}};
    const std::string b = behavior->get<std::string>();
    auto found = std::find_if(std::begin(kBehaviors), std::end(kBehaviors), [&](const auto& kv) { return b == kv.first; });
    if (found == std::end(kBehaviors)) fail(where + ".behavior: '" + b + "' is not a Split behavior");
    step.behavior = found->second;
    step.invert = invert->get<bool>();
    std::string error;
    bool jit_full = false, jit_plain = true;
    if (pattern->is_object() && pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
      const std::string source = (*pattern)["Regex"].get<std::string>();
      std::string full, plain;
      char32_t lowest = 0x110000, highest = 0;
      const std::string unsupported = translate_oniguruma(source, full, plain, lowest, highest);
      if (!unsupported.empty())
        fail(where + ".pattern.Regex '" + source + "': " + unsupported + " is not supported");
      // The plain pattern serves text without byte 0xF0, which holds none of the added characters
      // when they all lie in U+10000..U+3FFFF (true of the letters and digits, not of the marks:
      // Unicode 15.0 added U+0CF3 and U+0ECE).
      const bool use_plain = plain != full && lowest >= 0x10000 && highest <= 0x3FFFF;
      step.regex.full = compile_pcre2(full, PCRE2_UTF | PCRE2_UCP, error, jit_full);
      if (step.regex.full && use_plain) step.regex.plain = compile_pcre2(plain, PCRE2_UTF | PCRE2_UCP, error, jit_plain);
      if (!step.regex.full || (use_plain && !step.regex.plain))
        fail(where + ".pattern.Regex '" + source + "': PCRE2 cannot compile it " + error);
    } else if (pattern->is_object() && pattern->contains("String") && (*pattern)["String"].is_string()) {
      const std::string literal = (*pattern)["String"].get<std::string>();
      if (valid_utf8_prefix(literal) != literal.size()) fail(where + ".pattern.String is not valid UTF-8");
      step.regex.full = compile_pcre2(literal, PCRE2_UTF | PCRE2_LITERAL, error, jit_full);
      if (!step.regex.full) fail(where + ".pattern.String: " + error);
    } else {
      fail(where + ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
    }
    step.regex.jit = jit_full && jit_plain;
  } else {
    fail(where + ": pre-tokenizer type '" + type + "' is not supported (supported: Split, ByteLevel, Sequence)");
  }
  steps.push_back(std::move(step));
}

void HFTokenizer::Impl::load_model(const json& model) {
  const std::string type = type_of(model);
  if (type != "BPE") fail("model.type '" + type + "' is not supported (only BPE)");
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0))
    fail("model.dropout " + it->dump() + " is not supported (only null or 0)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto it = model.find(key); it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      fail(std::string("model.") + key + " " + it->dump() + " is not supported (only null or \"\")");
  }
  ignore_merges = bool_field(model, "ignore_merges", false);
  const auto vocab = model.find("vocab");
  const auto merge_list = model.find("merges");
  if (vocab == model.end() || !vocab->is_object()) fail("model.vocab: expected an object (token -> id)");
  if (merge_list == model.end() || !merge_list->is_array()) fail("model.merges: expected a list");

  std::unordered_map<std::string, int32_t> vocab_ids;  // as written (byte-level characters)
  vocab_ids.reserve(vocab->size());
  std::unordered_map<int32_t, std::string> seen_ids;
  std::string bytes;
  for (const auto& [token, value] : vocab->items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > std::numeric_limits<int32_t>::max())
      fail("model.vocab: id of '" + token + "' is not a non-negative 32-bit integer");
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    if (auto [it, inserted] = seen_ids.emplace(id, token); !inserted)
      fail("model.vocab: id " + std::to_string(id) + " is used by '" + it->second + "' and '" + token + "'");
    vocab_ids.emplace(token, id);
    token_to_id[token] = id;
    if (token_to_bytes(token, bytes) && !bytes.empty()) model_bytes_to_id.emplace(bytes, id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = model_bytes_to_id.find(std::string(1, static_cast<char>(b)));
    if (it == model_bytes_to_id.end()) {
      fail("model.vocab lacks the byte-level token of byte " + std::to_string(b) + " ('" +
           byte_level_string(std::string(1, static_cast<char>(b))) +
           "'): not supported (tokenizers would drop the byte or use unk_token/byte_fallback)");
    }
    byte_ids[b] = it->second;
  }

  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(merge_list->size());
  for (size_t i = 0; i < merge_list->size(); ++i) {
    const json& m = (*merge_list)[i];
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        fail("model.merges[" + std::to_string(i) + "] '" + line + "': expected two tokens separated by one space");
      pairs.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      pairs.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("model.merges[" + std::to_string(i) + "]: expected \"a b\" or [\"a\", \"b\"], got " + m.dump());
    }
  }
  merges.reserve(pairs.size());
  std::string left_bytes, right_bytes;
  for (size_t rank = 0; rank < pairs.size(); ++rank) {
    const auto& [a, b] = pairs[rank];
    for (const std::string* t : {&a, &b}) {
      if (!vocab_ids.count(*t)) fail("model.merges: '" + *t + "' (merge " + std::to_string(rank) + ") is not in model.vocab");
    }
    auto merged = vocab_ids.find(a + b);
    if (merged == vocab_ids.end()) fail("model.merges: '" + a + b + "' (merge " + std::to_string(rank) + ") is not in model.vocab");
    // A merge of tokens outside the byte-level alphabet can never apply to byte-level symbols.
    if (!token_to_bytes(a, left_bytes) || !token_to_bytes(b, right_bytes)) continue;
    merges.insert(vocab_ids[a], vocab_ids[b], Merge{static_cast<int32_t>(rank), merged->second});
  }
}

void HFTokenizer::Impl::load_added_tokens(const json& tokens, size_t model_size) {
  if (tokens.is_null()) return;
  if (!tokens.is_array()) fail("added_tokens: expected a list");
  // AddedVocabulary::add_tokens: a content already known keeps its id, others get the next id
  // counted from the model vocab's size.
  int64_t next_id = static_cast<int64_t>(model_size);
  std::unordered_map<std::string, size_t> by_content;  // content -> index in `added`
  for (size_t i = 0; i < tokens.size(); ++i) {
    const json& t = tokens[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id") ||
        !t["id"].is_number_integer())
      fail(where + ": expected an object with 'id' and 'content'");
    AddedToken token;
    token.content = t["content"].get<std::string>();
    if (token.content.empty()) continue;
    if (valid_utf8_prefix(token.content) != token.content.size()) fail(where + ": content is not valid UTF-8");
    token.single_word = bool_field(t, "single_word", false);
    token.lstrip = bool_field(t, "lstrip", false);
    token.rstrip = bool_field(t, "rstrip", false);
    token.normalized = bool_field(t, "normalized", true);
    token.special = bool_field(t, "special", false);
    int64_t id;
    if (auto it = by_content.find(token.content); it != by_content.end()) {
      id = added[it->second].id;
    } else if (auto m = token_to_id.find(token.content); m != token_to_id.end()) {
      id = m->second;
    } else {
      id = next_id++;
    }
    if (id != t["id"].get<int64_t>()) {
      fail(where + " '" + token.content + "': its id is " + t["id"].dump() + " but tokenizers gives it " + std::to_string(id) +
           " (a content in model.vocab keeps that id, others are numbered from the model vocab's size)");
    }
    token.id = static_cast<int32_t>(id);
    token.pattern = token.content;
    if (token.normalized && nfc) normalize(token.content, token.pattern);
    if (auto it = by_content.find(token.content); it != by_content.end()) {
      added[it->second] = token;  // the later entry's flags win
    } else {
      by_content.emplace(token.content, added.size());
      added.push_back(token);
    }
  }
  for (size_t i = 0; i < added.size(); ++i) {
    token_to_id[added[i].content] = added[i].id;
    if (added[i].pattern.empty()) continue;
    (added[i].normalized ? normalized_trie : raw_trie).insert(added[i].pattern, static_cast<int32_t>(i));
  }
}

void HFTokenizer::Impl::load_post_processor(const json& j, const std::string& where, std::vector<int32_t>& pre,
                                            std::vector<int32_t>& post) {
  if (j.is_null()) return;
  const std::string type = type_of(j);
  auto id_of_pair = [&](const char* key) -> int32_t {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer())
      fail(where + "." + key + ": expected [token, id]");
    return static_cast<int32_t>((*it)[1].get<int64_t>());
  };
  if (type == "ByteLevel") return;
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    pre.insert(pre.begin(), id_of_pair("cls"));
    post.push_back(id_of_pair("sep"));
  } else if (type == "TemplateProcessing") {
    const auto single = j.find("single");
    const auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array() || specials == j.end() || !specials->is_object())
      fail(where + ": TemplateProcessing needs a 'single' list and a 'special_tokens' object");
    std::vector<int32_t> before, after;
    bool seen_a = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const json& piece = (*single)[i];
      const std::string piece_where = where + ".single[" + std::to_string(i) + "]";
      if (piece.is_object() && piece.contains("Sequence")) {
        if (seen_a || piece["Sequence"].value("id", std::string()) != "A")
          fail(piece_where + ": the single template must hold sequence A once");
        seen_a = true;
      } else if (piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].contains("id")) {
        const std::string name = piece["SpecialToken"]["id"].get<std::string>();
        const auto special = specials->find(name);
        if (special == specials->end() || !special->contains("ids") || !(*special)["ids"].is_array())
          fail(piece_where + ": special token '" + name + "' is not in special_tokens");
        for (const json& id : (*special)["ids"]) (seen_a ? after : before).push_back(id.get<int32_t>());
      } else {
        fail(piece_where + ": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got " + piece.dump());
      }
    }
    if (!seen_a) fail(where + ".single: no sequence A");
    pre.insert(pre.begin(), before.begin(), before.end());
    post.insert(post.end(), after.begin(), after.end());
  } else if (type == "Sequence") {
    const auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) fail(where + ": Sequence without a 'processors' list");
    for (size_t i = 0; i < it->size(); ++i)
      load_post_processor((*it)[i], where + ".processors[" + std::to_string(i) + "]", pre, post);
  } else {
    fail(where + ": post-processor type '" + type +
         "' is not supported (supported: TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, Sequence)");
  }
}

void HFTokenizer::Impl::load(const json& root) {
  if (!root.is_object()) fail("expected a JSON object");
  if (auto v = root.find("version"); v != root.end() && !(v->is_string() && v->get<std::string>() == "1.0"))
    fail("version " + v->dump() + " is not supported (only \"1.0\")");
  const auto model = root.find("model");
  if (model == root.end()) fail("no 'model'");
  load_model(*model);
  const json null_json;
  auto field = [&](const char* key) -> const json& {
    auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  load_normalizer(field("normalizer"), "normalizer");
  if (nfc) {
    UErrorCode status = U_ZERO_ERROR;
    nfc_instance = icu::Normalizer2::getNFCInstance(status);
    if (U_FAILURE(status)) fail(std::string("ICU's NFC normalizer is unavailable: ") + u_errorName(status));
  }
  const json& pre_tokenizer = field("pre_tokenizer");
  load_pre_tokenizer(pre_tokenizer, "pre_tokenizer");
  if (steps.empty() || !steps.back().byte_level)
    fail("pre_tokenizer: no ByteLevel pre-tokenizer (only byte-level BPE is supported)");
  top_level_byte_level = type_of(pre_tokenizer) == "ByteLevel";
  const json& decoder = field("decoder");
  if (type_of(decoder) != "ByteLevel")
    fail("decoder type '" + (decoder.is_null() ? std::string("null") : type_of(decoder)) + "' is not supported (only ByteLevel)");

  const size_t model_size = token_to_id.size();
  load_added_tokens(field("added_tokens"), model_size);
  load_post_processor(field("post_processor"), "post_processor", prefix, suffix);

  // Every id's token: the model vocab and the added tokens (ids may leave gaps, as o200k's do).
  vocab_size = static_cast<int32_t>(token_to_id.size());
  int32_t max_id = -1;
  for (const auto& entry : token_to_id) max_id = std::max(max_id, entry.second);
  const size_t limit = static_cast<size_t>(max_id) + 1;
  std::vector<const std::string*> id_to_token(limit, nullptr);
  for (const auto& [token, id] : token_to_id) {
    if (id_to_token[id] != nullptr)
      fail("id " + std::to_string(id) + " is used by '" + *id_to_token[id] + "' and '" + token + "' (not supported)");
    id_to_token[id] = &token;
  }
  for (const AddedToken& t : added) id_to_token[t.id] = &t.pattern;  // decode: the normalized content
  id_to_bytes.assign(limit, std::string());
  has_id.assign(limit, false);
  std::string bytes;
  for (size_t id = 0; id < limit; ++id) {
    if (id_to_token[id] == nullptr) continue;
    has_id[id] = true;
    id_to_bytes[id] = token_to_bytes(*id_to_token[id], bytes) ? bytes : *id_to_token[id];
  }
  for (const std::vector<int32_t>* specials : {&prefix, &suffix})
    for (int32_t id : *specials)
      if (id < 0 || static_cast<size_t>(id) >= limit || !has_id[id])
        fail("post_processor: special id " + std::to_string(id) + " is not a token");
  load_config();
}

void HFTokenizer::Impl::load_config() {
  const std::filesystem::path config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  bool named_eos = false, named_bos = false;
  if (std::filesystem::exists(config_path, ec)) {
    const std::string cpath = config_path.string();
    json config;
    try {
      config = json::parse(read_file(cpath, "tokenizer config"));
    } catch (const json::exception& e) {
      throw std::runtime_error("HF tokenizer config '" + cpath + "': not valid JSON: " + e.what());
    }
    auto config_fail = [&](const std::string& what) {
      throw std::runtime_error("HF tokenizer config '" + cpath + "': " + what);
    };
    if (!config.is_object()) config_fail("expected a JSON object");
    auto token_id = [&](const char* key, bool& named) -> int32_t {
      auto it = config.find(key);
      if (it == config.end() || it->is_null()) return -1;
      std::string content;
      if (it->is_string()) content = it->get<std::string>();
      else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) content = (*it)["content"].get<std::string>();
      else config_fail(std::string(key) + ": expected a string or an object with 'content'");
      auto found = token_to_id.find(content);
      if (found == token_to_id.end())
        config_fail(std::string(key) + " '" + content + "' is not a token of " + path +
                    " (transformers would add it as a new token; not supported)");
      named = true;
      return found->second;
    };
    eos = token_id("eos_token", named_eos);
    bos = token_id("bos_token", named_bos);
    auto flag = [&](const char* key) -> int {
      auto it = config.find(key);
      return it == config.end() || !it->is_boolean() ? -1 : it->get<bool>() ? 1 : 0;
    };
    if (int add_bos = flag("add_bos_token"); add_bos >= 0) {
      const bool template_bos = !prefix.empty() && bos >= 0 && prefix.front() == bos;
      if (add_bos != static_cast<int>(template_bos))
        config_fail(std::string("add_bos_token ") + (add_bos ? "true" : "false") + " disagrees with " + path +
                    "'s post_processor, which " + (template_bos ? "adds" : "does not add") +
                    " bos_token first (which one transformers uses depends on its version and tokenizer class; not supported)");
    }
    if (int add_eos = flag("add_eos_token"); add_eos >= 0) {
      const bool template_eos = !suffix.empty() && eos >= 0 && suffix.back() == eos;
      if (add_eos != static_cast<int>(template_eos))
        config_fail(std::string("add_eos_token ") + (add_eos ? "true" : "false") + " disagrees with " + path +
                    "'s post_processor, which " + (template_eos ? "adds" : "does not add") +
                    " eos_token last (not supported)");
    }
    if (flag("add_prefix_space") == 1 && !(top_level_byte_level && steps.back().add_prefix_space))
      config_fail("add_prefix_space true, but " + path +
                  "'s pre_tokenizer is not a ByteLevel with add_prefix_space (transformers may rebuild it; not supported)");
    if (flag("split_special_tokens") == 1) config_fail("split_special_tokens true is not supported");
  }
  if (!named_eos) {
    std::vector<const AddedToken*> candidates;
    for (const AddedToken& t : added)
      if (t.content == "<|endoftext|>" || t.content == "<|end_of_text|>" || t.content == "</s>") candidates.push_back(&t);
    if (candidates.size() != 1) {
      std::string names;
      for (const AddedToken* t : candidates) names += (names.empty() ? "'" : ", '") + t->content + "'";
      fail(std::string("no end-of-document token: tokenizer_config.json next to it names no eos_token, and ") +
           (candidates.empty() ? std::string("no added token is '<|endoftext|>', '<|end_of_text|>' or '</s>'")
                               : "more than one added token could be it (" + names + ")"));
    }
    eos = candidates.front()->id;
  }
  if (!named_bos && prefix.size() == 1) bos = prefix.front();
}

// ---------------------------------------------------------------------------------------
// Encoding.

namespace {

using Impl = HFTokenizer::Impl;

// Byte-level BPE of one pre-token (word.rs merge_all); appends ids.
void bpe(const Impl& impl, std::string_view word, ThreadState& ts, std::vector<int32_t>& out) {
  if (word.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::length_error("HF tokenizer: pre-token longer than 2 GiB");
  auto& syms = ts.symbols;
  auto& heap = ts.heap;
  const auto n = static_cast<int32_t>(word.size());
  syms.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) syms[i] = Symbol{impl.byte_ids[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  auto push_pair = [&](int32_t left) {
    if (left < 0 || syms[left].next < 0) return;
    if (const Merge* m = impl.merges.find(syms[left].id, syms[syms[left].next].id)) {
      heap.push_back(Candidate{m->rank, left});
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = syms[c.left];
    if (left.id < 0 || left.next < 0) continue;
    const Merge* m = impl.merges.find(left.id, syms[left.next].id);
    // Same pair as when pushed (ranks are unique per pair; word.rs compares the merged id, which
    // for distinct vocab ids amounts to the same).
    if (m == nullptr || m->rank != c.rank) continue;
    Symbol& right = syms[left.next];
    left.id = m->merged_id;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = c.left;
    right.id = -1;
    push_pair(left.prev);
    push_pair(c.left);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = syms[i].next) out.push_back(syms[i].id);
}

void encode_word(const Impl& impl, std::string_view word, ThreadState& ts, std::vector<int32_t>& out) {
  if (word.size() == 1) {
    out.push_back(impl.byte_ids[static_cast<unsigned char>(word[0])]);
    return;
  }
  const uint64_t hash = hash_bytes(word);
  if (ts.cache.lookup(word, hash, out)) return;
  const size_t start = out.size();
  if (impl.ignore_merges) {
    if (auto it = impl.model_bytes_to_id.find(std::string(word)); it != impl.model_bytes_to_id.end()) {
      out.push_back(it->second);
      ts.cache.store(word, hash, out.data() + start, 1);
      return;
    }
  }
  bpe(impl, word, ts, out);
  ts.cache.store(word, hash, out.data() + start, out.size() - start);
}

// Pattern::find_matches for a regex searched as onig's find_iter searches: (span, is_match)
// pieces covering `text`, is_match flipped when `invert`.
void find_matches(const Regex& regex, std::string_view text, bool invert, ThreadState& ts, std::vector<Span>& out) {
  out.clear();
  if (text.empty()) {
    out.push_back(Span{0, 0, invert});
    return;
  }
  const pcre2_code* code = regex.for_text(text);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  pcre2_match_data* md = ts.match_data.get();
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
  const size_t n = text.size();
  size_t last_end = 0, prev = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (last_end <= n) {
    const int rc = regex.jit ? pcre2_jit_match(code, subject, n, last_end, 0, md, nullptr)
                             : pcre2_match(code, subject, n, last_end, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw std::runtime_error("HF tokenizer: PCRE2 match error " + std::to_string(rc));
    const size_t s = ovector[0], e = ovector[1];
    if (s == e && have_last && last_match_end == e) {
      // onig's find_iter: no empty match right after the previous match; one character on.
      last_end += last_end < n ? lead_length(static_cast<unsigned char>(text[last_end])) : 1;
      continue;
    }
    last_end = e;
    last_match_end = e;
    have_last = true;
    if (prev != s) out.push_back(Span{prev, s, invert});
    out.push_back(Span{s, e, !invert});
    prev = e;
  }
  if (prev != n) out.push_back(Span{prev, n, invert});
}

// NormalizedString::split: groups the pieces by behavior, in place (empty ones are dropped later).
void apply_behavior(Behavior behavior, std::vector<Span>& spans) {
  if (behavior == Behavior::kIsolated) return;
  std::vector<Span> out;
  out.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Span& s : spans)
        if (!s.is_match) out.push_back(s);
      break;
    case Behavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty()) out.back().end = s.end;
        else out.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) out.back().end = s.end;
        else out.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) out.back().begin = it->begin;
        else out.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case Behavior::kIsolated:
      break;
  }
  spans.swap(out);
}

// Runs pre-tokenizer steps [step, end) over one non-empty piece, depth first; calls on_word for
// each final pre-token.
template <typename OnWord>
void pre_tokenize_piece(const Impl& impl, std::string_view piece, size_t step, ThreadState& ts, OnWord& on_word) {
  if (step == impl.steps.size()) {
    on_word(piece);
    return;
  }
  const PreStep& s = impl.steps[step];
  std::string prefixed;
  if (s.byte_level) {
    if (s.add_prefix_space && piece.front() != ' ') {
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    if (!s.use_regex) {
      pre_tokenize_piece(impl, piece, step + 1, ts, on_word);
      return;
    }
  }
  std::vector<Span>& spans = ts.spans[step];  // sized in encode_text: deeper steps never resize it
  find_matches(s.regex, piece, s.invert, ts, spans);
  if (!s.byte_level) apply_behavior(s.behavior, spans);
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span span = spans[i];
    if (span.end > span.begin) pre_tokenize_piece(impl, piece.substr(span.begin, span.end - span.begin), step + 1, ts, on_word);
  }
}

// AddedVocabulary::find_matches: the accepted matches of `trie` in `sentence`, in order.
void find_added(const Impl& impl, const TokenTrie& trie, std::string_view sentence, std::vector<AddedMatch>& out) {
  out.clear();
  if (trie.empty()) return;
  const size_t n = sentence.size();
  size_t start_offset = 0;
  for (size_t pos = 0; pos < n;) {
    if (!trie.may_start(static_cast<unsigned char>(sentence[pos]))) {
      ++pos;
      continue;
    }
    int32_t index = -1;
    const size_t len = trie.longest_at(sentence, pos, index);
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // non-overlapping: the search goes on after this match, taken or not
    const AddedToken& token = impl.added[index];
    if (token.single_word) {
      size_t before = start, after = stop;
      const bool start_space = start == 0 || !is_word_char(prev_code_point(sentence, before));
      const bool stop_space = stop == n || !is_word_char(next_code_point(sentence, after));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t k = new_start;
        if (!is_white_space(prev_code_point(sentence, k))) break;
        new_start = k;
      }
      start = std::max(new_start, start_offset);
    }
    if (token.rstrip) {
      while (stop < n) {
        size_t k = stop;
        if (!is_white_space(next_code_point(sentence, k))) break;
        stop = k;
      }
    }
    out.push_back(AddedMatch{start, stop, token.id});
    start_offset = stop;
  }
}

// The whole pipeline over one valid UTF-8 run. on_added(id, text), on_word(pre-token).
template <typename OnAdded, typename OnWord>
void encode_valid_run(const Impl& impl, std::string_view run, ThreadState& ts, OnAdded& on_added, OnWord& on_word) {
  // Normalizes one piece between raw matches and cuts it at the normalized added tokens. Not
  // reentrant: it owns ts.normalized and ts.normalized_matches.
  auto normalized_piece = [&](std::string_view piece) {
    std::string_view text = piece;
    if (impl.nfc && !all_ascii(piece)) {
      UErrorCode status = U_ZERO_ERROR;
      const icu::StringPiece sp(piece.data(), static_cast<int32_t>(piece.size()));
      if (!impl.nfc_instance->isNormalizedUTF8(sp, status) || U_FAILURE(status)) {
        impl.normalize(piece, ts.normalized);
        text = ts.normalized;
      }
    }
    std::vector<AddedMatch>& matches = ts.normalized_matches;
    find_added(impl, impl.normalized_trie, text, matches);
    size_t offset = 0;
    for (const AddedMatch& m : matches) {
      if (m.begin > offset) pre_tokenize_piece(impl, text.substr(offset, m.begin - offset), 0, ts, on_word);
      on_added(m.id, text.substr(m.begin, m.end - m.begin));
      offset = m.end;
    }
    if (offset < text.size()) pre_tokenize_piece(impl, text.substr(offset), 0, ts, on_word);
  };
  std::vector<AddedMatch>& raw = ts.raw_matches;
  find_added(impl, impl.raw_trie, run, raw);
  if (raw.empty()) {
    normalized_piece(run);
    return;
  }
  size_t offset = 0;
  for (const AddedMatch& m : raw) {  // normalized_piece does not touch ts.raw_matches
    if (m.begin > offset) normalized_piece(run.substr(offset, m.begin - offset));
    on_added(m.id, run.substr(m.begin, m.end - m.begin));
    offset = m.end;
  }
  if (offset < run.size()) normalized_piece(run.substr(offset));
}

template <typename OnAdded, typename OnWord>
void encode_text(const Impl& impl, std::string_view text, ThreadState& ts, OnAdded&& on_added, OnWord&& on_word) {
  if (ts.spans.size() < impl.steps.size()) ts.spans.resize(impl.steps.size());
  while (!text.empty()) {
    const size_t valid = valid_utf8_prefix(text);
    if (valid > 0) encode_valid_run(impl, text.substr(0, valid), ts, on_added, on_word);
    text.remove_prefix(valid);
    const size_t invalid = invalid_utf8_prefix(text);
    if (invalid > 0) on_word(text.substr(0, invalid));
    text.remove_prefix(invalid);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Public interface.

HFTokenizer HFTokenizer::from_file(const std::string& tokenizer_json) {
  auto impl = std::make_shared<Impl>();
  impl->path = tokenizer_json;
  json root;
  try {
    root = json::parse(read_file(tokenizer_json, "tokenizer file"));
  } catch (const json::exception& e) {
    impl->fail(std::string("not valid JSON: ") + e.what());
  }
  try {
    impl->load(root);
  } catch (const json::exception& e) {
    impl->fail(std::string("unexpected JSON structure: ") + e.what());
  }
  impl->serial = next_serial.fetch_add(1);
  return HFTokenizer(std::move(impl));
}

HFTokenizer::HFTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
HFTokenizer::HFTokenizer(const HFTokenizer&) = default;
HFTokenizer& HFTokenizer::operator=(const HFTokenizer&) = default;
HFTokenizer::HFTokenizer(HFTokenizer&&) noexcept = default;
HFTokenizer& HFTokenizer::operator=(HFTokenizer&&) noexcept = default;
HFTokenizer::~HFTokenizer() = default;

std::vector<int32_t> HFTokenizer::encode(std::string_view utf8) const {
  std::vector<int32_t> ids;
  ids.reserve(utf8.size() / 3 + 4);
  encode_append(utf8, ids);
  return ids;
}

void HFTokenizer::encode_append(std::string_view utf8, std::vector<int32_t>& out) const {
  const Impl& impl = *impl_;
  ThreadState& ts = thread_state(impl.serial);
  encode_text(
      impl, utf8, ts, [&](int32_t id, std::string_view) { out.push_back(id); },
      [&](std::string_view word) { encode_word(impl, word, ts, out); });
}

std::vector<int32_t> HFTokenizer::encode_with_special_tokens(std::string_view utf8) const {
  std::vector<int32_t> ids(impl_->prefix);
  encode_append(utf8, ids);
  ids.insert(ids.end(), impl_->suffix.begin(), impl_->suffix.end());
  return ids;
}

std::vector<HFTokenizer::PreToken> HFTokenizer::pre_tokenize(std::string_view utf8) const {
  std::vector<PreToken> out;
  encode_text(
      *impl_, utf8, thread_state(impl_->serial),
      [&](int32_t id, std::string_view text) { out.push_back(PreToken{std::string(text), id}); },
      [&](std::string_view word) { out.push_back(PreToken{std::string(word), -1}); });
  return out;
}

std::string HFTokenizer::decode(std::span<const int32_t> ids) const {
  const auto& table = impl_->id_to_bytes;
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(table.size()) || !impl_->has_id[id])
      throw std::out_of_range("HF tokenizer: no token has id " + std::to_string(id) + " (ids lie in [0, " +
                              std::to_string(table.size()) + "))");
    text += table[id];
  }
  return text;
}

int32_t HFTokenizer::eod_id() const { return impl_->eos; }
int32_t HFTokenizer::eos_id() const { return impl_->eos; }
int32_t HFTokenizer::bos_id() const { return impl_->bos; }
bool HFTokenizer::adds_bos() const { return impl_->bos >= 0 && !impl_->prefix.empty() && impl_->prefix.front() == impl_->bos; }
const std::vector<int32_t>& HFTokenizer::special_prefix() const { return impl_->prefix; }
const std::vector<int32_t>& HFTokenizer::special_suffix() const { return impl_->suffix; }
int32_t HFTokenizer::vocab_size() const { return impl_->vocab_size; }
int32_t HFTokenizer::id_limit() const { return static_cast<int32_t>(impl_->id_to_bytes.size()); }
int32_t HFTokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_to_id.find(std::string(token));
  return it == impl_->token_to_id.end() ? -1 : it->second;
}

}  // namespace gf::data
