// Hugging Face tokenizer.json: the parts that are not byte-level (see hf_tokenizer.h, "Models that
// are not byte-level"). The normalizer steps (Prepend, Replace, BertNormalizer), the Metaspace,
// Digits and BertPreTokenizer pre-tokenizers, the first symbols of a character-level BPE
// (byte_fallback, unk_token, fuse_unk), WordPiece, and the decoder chain, each transcribed from the
// Rust crate `tokenizers` (normalizers/*.rs, pre_tokenizers/*.rs, models/bpe/model.rs merge_word,
// models/wordpiece/mod.rs tokenize, decoders/*.rs).
#include <unicode/bytestream.h>
#include "core/data/byte_bpe.h"
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <algorithm>
#include <stdexcept>

#include "core/data/hf_tokenizer_impl.h"

namespace gf::data {
using namespace byte_bpe;
using namespace hf;
namespace {


// The length of the character at s[i]: its UTF-8 length, or 1 for a byte that starts no valid
// sequence (bytes of an invalid run are each a character the vocabulary cannot hold).
size_t char_length(std::string_view s, size_t i) {
  const size_t len = utf8_sequence_length(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i);
  return len == 0 ? 1 : len;
}

// The crate `unicode_categories` (used by BertNormalizer and BertPreTokenizer for is_other,
// is_punctuation and is_mark_nonspacing) has Unicode 8.0 tables and no Cn: a character assigned
// later is in no category to it (clean_text keeps it; it is no punctuation and no mark), as is an
// unassigned one (checked against tokenizers 0.23.2: U+2E42 is punctuation, U+2E43 of Unicode 9.0
// is not; U+08E3 is Mn, U+1E944 of 9.0 is not; U+08E2, Cf of 9.0, is kept; U+0378 is kept).
uint32_t old_category_mask(char32_t c) {
  // The characters whose category changed since Unicode 8.0 (found by comparing every code point
  // below U+30000 with tokenizers 0.23.2).
  switch (c) {
    case 0x1734: return U_GC_MN_MASK;                 // Mc since 14.0
    case 0x1885: case 0x1886: return U_GC_LO_MASK;    // Mn since 9.0
    case 0xA9BD: return U_GC_MC_MASK;                 // Mn since 12.0
    case 0x111C9: case 0x166D: return U_GC_PO_MASK;   // Mn since 9.0, So since 12.0
    default: break;
  }
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(c), age);
  if (age[0] == 0 || age[0] > 8) return 0;
  return U_GET_GC_MASK(static_cast<UChar32>(c)) & ~U_GC_CN_MASK;
}

// Rust's char::is_whitespace: the White_Space property.
bool is_white_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

bool is_bert_punctuation(char32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return (old_category_mask(c) & U_GC_P_MASK) != 0;
}

// normalizers/bert.rs is_chinese_char (note 0x2B920, not BERT's 0x2B820).
bool is_chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Rust's char::to_lowercase, one character at a time (no final-sigma context): ICU's full
// lower-case mapping of the character alone.
void append_lower(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c));
    return;
  }
  UChar src[2], dst[8];
  int32_t n = 0;
  U16_APPEND_UNSAFE(src, n, static_cast<UChar32>(c));
  UErrorCode status = U_ZERO_ERROR;
  const int32_t len = u_strToLower(dst, 8, src, n, "", &status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("HF tokenizer: ICU u_strToLower: ") + u_errorName(status));
  for (int32_t i = 0; i < len;) {
    UChar32 cp;
    U16_NEXT(dst, i, len, cp);
    append_utf8(static_cast<char32_t>(cp), out);
  }
}

// NFD (ICU) of a valid UTF-8 string, as tokenizers' NFD tables (Unicode 8.0-era) have it: U+11938
// (Unicode 13.0, canonically U+11935 U+11930) stays whole. It has combining class 0, so the text on
// each side of it normalizes on its own.
void nfd(std::string_view text, std::string& out) {
  static const std::string_view kWhole = "\xF0\x91\xA4\xB8";  // U+11938
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFDInstance(status);
  out.clear();
  icu::StringByteSink<std::string> sink(&out);
  while (U_SUCCESS(status)) {
    const size_t cut = std::min(text.find(kWhole), text.size());
    n->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(cut)), sink, nullptr, status);
    if (cut == text.size()) break;
    out.append(kWhole);
    text.remove_prefix(cut + kWhole.size());
  }
  if (U_FAILURE(status)) throw std::runtime_error(std::string("HF tokenizer: ICU NFD failed: ") + u_errorName(status));
}

// BertNormalizer: clean_text (drop U+0000, U+FFFD and the Cc/Cf/Co characters other than
// \t \n \r; White_Space and \t \n \r become ' '), handle_chinese_chars (' ' around each),
// strip_accents (NFD, then drop Mn), lowercase; in that order.
void bert_normalize(const NormStep& s, std::string& text, std::string& scratch) {
  scratch.clear();
  for (size_t i = 0; i < text.size();) {
    const char32_t c = next_code_point(text, i);
    char32_t out = c;
    if (s.clean_text) {
      const bool space = c == '\t' || c == '\n' || c == '\r';
      if (!space && (c == 0 || c == 0xFFFD || (old_category_mask(c) & U_GC_C_MASK) != 0)) continue;
      if (space || is_white_space(c)) out = ' ';
    }
    if (s.chinese_chars && is_chinese(out)) {
      scratch.push_back(' ');
      append_utf8(out, scratch);
      scratch.push_back(' ');
    } else {
      append_utf8(out, scratch);
    }
  }
  text.swap(scratch);
  if (s.strip_accents) {
    nfd(text, scratch);
    text.clear();
    for (size_t i = 0; i < scratch.size();) {
      const size_t start = i;
      const char32_t c = next_code_point(scratch, i);
      if (c >= 0x80 && (old_category_mask(c) & U_GC_MN_MASK) != 0) continue;
      text.append(scratch, start, i - start);
    }
  }
  if (s.lowercase) {
    scratch.clear();
    for (size_t i = 0; i < text.size();) append_lower(next_code_point(text, i), scratch);
    text.swap(scratch);
  }
}

// Every non-overlapping occurrence of `pattern` (leftmost first) becomes `content`.
void replace_all(std::string& text, const std::string& pattern, const std::string& content, std::string& scratch) {
  size_t pos = text.find(pattern);
  if (pos == std::string::npos) return;
  scratch.clear();
  size_t from = 0;
  for (; pos != std::string::npos; pos = text.find(pattern, from)) {
    scratch.append(text, from, pos - from);
    scratch.append(content);
    from = pos + pattern.size();
  }
  scratch.append(text, from, std::string::npos);
  text.swap(scratch);
}

// decoders/byte_fallback.rs: a run of <0xNN> tokens becomes its bytes when they are valid UTF-8,
// else one U+FFFD per byte.
void byte_fallback_decode(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string bytes;
  auto flush = [&]() {
    if (bytes.empty()) return;
    if (valid_utf8_prefix(bytes) == bytes.size()) {
      out.push_back(bytes);
    } else {
      for (size_t k = 0; k < bytes.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
    }
    bytes.clear();
  };
  auto hex = [](char h) {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
  };
  for (std::string& t : tokens) {
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) >= 0 && hex(t[4]) >= 0) {
      bytes.push_back(static_cast<char>(hex(t[3]) * 16 + hex(t[4])));
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  tokens.swap(out);
}

// decoders/wordpiece.rs cleanup.
std::string wordpiece_cleanup(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},   {" ,", ","},     {" ' ", "'"},  {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string scratch;
  for (const auto& [from, to] : kRules) replace_all(s, from, to, scratch);
  return s;
}

}  // namespace

void HFTokenizer::Impl::normalize_steps(std::string_view text, std::string& out, std::string& scratch) const {
  out.assign(text);
  for (const NormStep& s : norm_steps) {
    switch (s.kind) {
      case NormKind::kNfc:
        normalize(out, scratch);
        out.swap(scratch);
        break;
      case NormKind::kPrepend:
        if (!out.empty()) out.insert(0, s.text);
        break;
      case NormKind::kReplace:
        replace_all(out, s.text, s.content, scratch);
        break;
      case NormKind::kBert:
        bert_normalize(s, out, scratch);
        break;
    }
  }
}

// models/bpe/model.rs merge_word, before merge_all: each character that is a vocab token is that
// token; otherwise (byte_fallback) its bytes' <0xNN> tokens when all exist, added without
// flushing a pending unk (as merge_word does); otherwise unk_token, consecutive ones fused into
// one with fuse_unk; otherwise (no unk_token) the character is dropped.
void HFTokenizer::Impl::char_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  ids.clear();
  bool pending_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t len = char_length(word, i);
    const std::string_view c = word.substr(i, len);
    i += len;
    if (auto it = vocab.find(c); it != vocab.end()) {
      if (pending_unk) ids.push_back(unk_id), pending_unk = false;
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (unsigned char b : c) all = all && fallback_ids[b] >= 0;
      if (all) {
        for (unsigned char b : c) ids.push_back(fallback_ids[b]);
        continue;
      }
    }
    if (unk_id < 0) continue;
    if (pending_unk && !fuse_unk) ids.push_back(unk_id);
    pending_unk = true;
  }
  if (pending_unk) ids.push_back(unk_id);
}

// models/wordpiece/mod.rs tokenize: a word of more than max_input_chars_per_word characters is
// unk; otherwise the longest vocab token from the left, the pieces after the first prefixed with
// continuing_subword_prefix, each search shortening by one character; a rest that no token
// starts makes the whole word one unk.
void HFTokenizer::Impl::wordpiece(std::string_view word, std::vector<int32_t>& out) const {
  size_t chars = 0;
  for (size_t i = 0; i < word.size(); i += char_length(word, i)) ++chars;
  if (chars > wp_max_chars) {
    out.push_back(unk_id);
    return;
  }
  const size_t before = out.size();
  std::string key;
  for (size_t start = 0; start < word.size();) {
    size_t end = word.size();
    int32_t found = -1;
    while (start < end) {
      key.assign(start > 0 ? wp_prefix : std::string());
      key.append(word.substr(start, end - start));
      if (auto it = vocab.find(key); it != vocab.end()) {
        found = it->second;
        break;
      }
      size_t last = end - 1;  // back over the last character of word[start, end)
      while (last > start && (static_cast<unsigned char>(word[last]) & 0xC0) == 0x80 && end - last < 4) --last;
      if (char_length(word, last) != end - last) last = end - 1;  // an invalid byte is one character
      end = last;
    }
    if (found < 0) {
      out.resize(before);
      out.push_back(unk_id);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

void HFTokenizer::Impl::metaspace(const PreStep& step, std::string_view piece, bool at_start, std::string& out) const {
  out.clear();
  for (char c : piece) {
    if (c == ' ') out.append(step.replacement);
    else out.push_back(c);
  }
  const bool prepend = step.prepend == Prepend::kAlways || (step.prepend == Prepend::kFirst && at_start);
  if (prepend && out.compare(0, step.replacement.size(), step.replacement) != 0) out.insert(0, step.replacement);
}

void HFTokenizer::Impl::char_split(const PreStep& step, std::string_view piece, std::vector<Span>& out) const {
  out.clear();
  if (step.kind == PreKind::kMetaspace) {
    // split(replacement, MergedWithNext): a piece starts at every replacement character.
    size_t from = 0;
    const std::string_view r = step.replacement;
    for (size_t pos = piece.find(r, 1); pos != std::string_view::npos; pos = piece.find(r, pos + 1)) {
      out.push_back(Span{from, pos, false});
      from = pos;
    }
    out.push_back(Span{from, piece.size(), false});
    return;
  }
  // Digits: char::is_numeric (N*) characters, each alone (individual_digits: Isolated) or in runs
  // (Contiguous). BertPreTokenizer: White_Space removed, punctuation each alone.
  size_t run = 0;
  int run_class = -1;  // 0: other, 1: numeric
  for (size_t i = 0; i < piece.size();) {
    const size_t start = i;
    const char32_t c = next_code_point(piece, i);
    if (step.kind == PreKind::kDigits) {
      const int cls = (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0 ? 1 : 0;
      if (cls != run_class || (cls == 1 && step.individual_digits)) {
        if (start > run) out.push_back(Span{run, start, run_class == 1});
        run = start;
        run_class = cls;
      }
      continue;
    }
    const bool space = is_white_space(c), punct = !space && is_bert_punctuation(c);
    if (space || punct) {
      if (start > run) out.push_back(Span{run, start, false});
      if (punct) out.push_back(Span{start, i, true});
      run = i;
    }
  }
  if (piece.size() > run) out.push_back(Span{run, piece.size(), run_class == 1});
}

std::string HFTokenizer::Impl::decode_tokens(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(id_to_bytes.size()) || !has_id[id])
      throw std::out_of_range("HF tokenizer: no token has id " + std::to_string(id) + " (ids lie in [0, " +
                              std::to_string(id_to_bytes.size()) + "))");
    tokens.push_back(id_to_bytes[id]);
  }
  std::string scratch;
  for (const DecStep& d : decoders) {
    switch (d.kind) {
      case DecKind::kByteFallback:
        byte_fallback_decode(tokens);
        break;
      case DecKind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecKind::kReplace:
        for (std::string& t : tokens) replace_all(t, d.text, d.content, scratch);
        break;
      case DecKind::kStrip:
        // Up to `start` leading and `stop` trailing characters that are d.text.
        for (std::string& t : tokens) {
          const size_t c = d.text.size();
          size_t b = 0, e = t.size();
          for (size_t k = 0; k < d.start && b < e && t.compare(b, c, d.text) == 0; ++k) b += c;
          for (size_t k = 0; k < d.stop && e >= b + c && t.compare(e - c, c, d.text) == 0; ++k) e -= c;
          t = t.substr(b, e - b);
        }
        break;
      case DecKind::kMetaspace:
        // Each replacement character is ' ', except in the first token (all of its, when the
        // scheme prepends), where it is removed.
        for (size_t i = 0; i < tokens.size(); ++i)
          replace_all(tokens[i], d.text, i == 0 && d.flag ? std::string() : std::string(" "), scratch);
        break;
      case DecKind::kWordPiece:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string& t = tokens[i];
          if (i != 0) t = t.compare(0, d.text.size(), d.text) == 0 ? t.substr(d.text.size()) : " " + t;
          if (d.flag) t = wordpiece_cleanup(std::move(t));
        }
        break;
    }
  }
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (null_decoder && i > 0) text.push_back(' ');
    text += tokens[i];
  }
  return text;
}

}  // namespace gf::data
