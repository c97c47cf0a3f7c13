// Oniguruma (tokenizers' Split patterns) to PCRE2: see oniguruma.h.
#include "core/data/oniguruma.h"

#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/data/byte_bpe.h"

namespace gf::data {
using byte_bpe::lead_length;
namespace {

// The Unicode version whose new characters are added to every \p{...} of a Split pattern: PCRE2
// 10.42 has Unicode 14.0 tables, Oniguruma in tokenizers 0.23 (and python3-regex 2022.10.31)
// 15.0. For \p{L} and \p{N} these are the ranges core/data/gpt2_pattern.cpp lists.
constexpr const char* kAddedUnicodeAge = "15.0";
constexpr const char* kPcre2UnicodeAge = "14.0";

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

}  // namespace

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

}  // namespace gf::data
