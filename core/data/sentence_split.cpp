// Sentence splitting over ICU's sentence BreakIterator (see sentence_split.h for the rules).
#include "core/data/sentence_split.h"

#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/udata.h>
#include <unicode/ures.h>
#include <unicode/utext.h>
#include <unicode/utf16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gf::data {
namespace {

struct Language {
  const char* name;    // NLTK punkt's pickle name (Megatron's --lang)
  const char* locale;  // ICU locale: the break rules and CLDR's abbreviation list
};

// Sorted by name.
constexpr std::array<Language, 19> kLanguages{{
    {"czech", "cs"},      {"danish", "da"},    {"dutch", "nl"},
    {"english", "en"},    {"estonian", "et"},  {"finnish", "fi"},
    {"french", "fr"},     {"german", "de"},    {"greek", "el"},
    {"italian", "it"},    {"malayalam", "ml"}, {"norwegian", "nb"},
    {"polish", "pl"},     {"portuguese", "pt"}, {"russian", "ru"},
    {"slovene", "sl"},    {"spanish", "es"},   {"swedish", "sv"},
    {"turkish", "tr"},
}};

// Rule 3's additions to ICU's English list: titles before a name.
constexpr std::array<std::u16string_view, 20> kEnglishTitles{
    u"Dr.",   u"Drs.",  u"St.",     u"Gen.", u"Gov.",  u"Sen.", u"Adm.", u"Cmdr.", u"Cdr.",  u"Cpl.",
    u"Pres.", u"Supt.", u"Messrs.", u"Mme.", u"Mlle.", u"Hon.", u"Fr.",  u"Ft.",   u"Brig.", u"Rt.",
};
// Rule 3's removals from ICU's lists: words and acronyms that end sentences.
constexpr std::array<std::u16string_view, 31> kEnglishNotAbbreviations{
    u"By.",  u"Up.",  u"Job.", u"Ok.",   u"OK.",  u"In.",  u"To.",  u"Do.", u"Joe.", u"Is.", u"On.",
    u"Go.",  u"All.", u"As.",  u"Or.",   u"Long.", u"Hat.", u"Link.", u"Act.", u"Card.", u"Jam.", u"AD.",
    u"DC.",  u"PC.",  u"AA.",  u"AB.",   u"Pro.", u"Hz.",  u"Kb.",  u"Mb.", u"Gb.",
};
constexpr std::array<std::u16string_view, 2> kGermanNotAbbreviations{u"Test.", u"Art."};
constexpr std::array<std::u16string_view, 1> kGermanTitles{u"Prof."};

const Language* find_language(std::string_view name) {
  for (const Language& l : kLanguages)
    if (name == l.name) return &l;
  return nullptr;
}

[[noreturn]] void unknown_language(std::string_view lang) {
  std::string msg = "unknown sentence-splitting language \"";
  msg += lang;
  msg += "\" (--lang takes NLTK punkt's names:";
  for (const Language& l : kLanguages) {
    msg += ' ';
    msg += l.name;
  }
  msg += ')';
  throw std::invalid_argument(msg);
}

// Decodes the code point at p[i] (i < n) into cp and returns its length in bytes; an ill-formed
// subsequence (Unicode's maximal subpart: a bad lead byte alone, or a lead byte with the valid
// continuation bytes that follow it) is one U+FFFD.
inline size_t decode_at(const unsigned char* p, size_t n, size_t i, UChar32& cp) {
  const unsigned c = p[i];
  if (c < 0x80) {
    cp = static_cast<UChar32>(c);
    return 1;
  }
  size_t len;
  UChar32 v;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    v = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    v = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    cp = 0xFFFD;
    return 1;
  }
  size_t j = i + 1;
  for (size_t k = 1; k < len; ++k, ++j) {
    const unsigned b = j < n ? p[j] : 0;
    if (j >= n || b < (k == 1 ? lo : 0x80u) || b > (k == 1 ? hi : 0xBFu)) {
      cp = 0xFFFD;
      return j - i;
    }
    v = (v << 6) | static_cast<UChar32>(b & 0x3F);
  }
  cp = v;
  return len;
}

// Python's str.isspace(): category Zs or bidirectional class WS, B or S.
inline bool is_space(UChar32 c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  if (u_charType(c) == U_SPACE_SEPARATOR) return true;
  const UCharDirection d = u_charDirection(c);
  return d == U_WHITE_SPACE_NEUTRAL || d == U_BLOCK_SEPARATOR || d == U_SEGMENT_SEPARATOR;
}

inline int sentence_break(UChar32 c) { return u_getIntPropertyValue(c, UCHAR_SENTENCE_BREAK); }
inline bool is_close(UChar32 c) { return sentence_break(c) == U_SB_CLOSE; }
inline bool is_punkt_closer(UChar32 c) { return c == '"' || c == '\'' || c == ')' || c == ']' || c == '}'; }

// Rule 3's abbreviations of one language: ICU's CLDR list (brkitr/<locale>, exceptions/SentenceBreak,
// the locale's own data only), less the removals, plus the English titles. Entries without
// whitespace are looked up in a set; the few with whitespace ("v. Chr.") are compared one by one.
struct Abbreviations {
  std::unordered_set<std::u16string_view> words;
  std::vector<std::u16string_view> phrases;
  std::vector<std::unique_ptr<std::u16string>> storage;
  size_t longest = 2;  // UTF-16 units of the longest entry (a letter and '.' at least)

  void add(std::u16string s) {
    storage.push_back(std::make_unique<std::u16string>(std::move(s)));
    const std::u16string_view v = *storage.back();
    longest = std::max(longest, v.size() + 1);  // + 1: a surrogate pair's letter
    bool has_space = false;
    for (const char16_t u : v) has_space |= is_space(u);
    if (has_space) phrases.push_back(v);
    else words.insert(v);
  }
};

std::vector<std::u16string> icu_abbreviations(const char* locale) {
  std::vector<std::u16string> out;
  UErrorCode err = U_ZERO_ERROR;
  UResourceBundle* bundle = ures_openDirect(U_ICUDATA_NAME U_TREE_SEPARATOR_STRING "brkitr", locale, &err);
  if (U_FAILURE(err)) return out;  // no data for this locale: no list
  UResourceBundle* exceptions = ures_getByKey(bundle, "exceptions", nullptr, &err);
  UResourceBundle* list = ures_getByKey(exceptions, "SentenceBreak", nullptr, &err);
  if (U_SUCCESS(err)) {
    while (ures_hasNext(list)) {
      int32_t len = 0;
      const UChar* s = ures_getNextString(list, &len, nullptr, &err);
      if (U_FAILURE(err)) break;
      out.emplace_back(reinterpret_cast<const char16_t*>(s), static_cast<size_t>(len));
    }
  }
  ures_close(list);
  ures_close(exceptions);
  ures_close(bundle);
  return out;
}

const Abbreviations& abbreviations_for(const Language& lang) {
  static const std::unordered_map<const Language*, Abbreviations> all = [] {
    std::unordered_map<const Language*, Abbreviations> m;
    for (const Language& l : kLanguages) {
      const std::string_view name(l.name);
      std::span<const std::u16string_view> removed;
      if (name == "english") removed = kEnglishNotAbbreviations;
      if (name == "german") removed = kGermanNotAbbreviations;
      Abbreviations& a = m[&l];
      for (std::u16string& s : icu_abbreviations(l.locale))
        if (std::find(removed.begin(), removed.end(), s) == removed.end()) a.add(std::move(s));
      std::span<const std::u16string_view> added;
      if (name == "english") added = kEnglishTitles;
      if (name == "german") added = kGermanTitles;
      for (const std::u16string_view t : added) a.add(std::u16string(t));
    }
    return m;
  }();
  return all.at(&lang);
}

// A thread's sentence iterator for an ICU locale, made on first use.
icu::BreakIterator& iterator_for(const char* locale) {
  thread_local std::unordered_map<const char*, std::unique_ptr<icu::BreakIterator>> cache;
  auto& slot = cache[locale];
  if (!slot) {
    UErrorCode err = U_ZERO_ERROR;
    slot.reset(icu::BreakIterator::createSentenceInstance(icu::Locale(locale), err));
    if (U_FAILURE(err) || !slot) {
      slot.reset();
      throw std::runtime_error(std::string("ICU createSentenceInstance(") + locale + "): " + u_errorName(err));
    }
  }
  return *slot;
}

// One piece of text in UTF-16, with helpers over code points.
struct Piece {
  const UChar* s = nullptr;
  int32_t n = 0;
  UChar32 before(int32_t i, int32_t* start) const {
    UChar32 c;
    U16_PREV(s, 0, i, c);
    *start = i;
    return c;
  }
  UChar32 at(int32_t i, int32_t* next) const {
    UChar32 c;
    U16_NEXT(s, i, n, c);
    *next = i;
    return c;
  }
};

std::u16string_view view(const Piece& t, int32_t begin, int32_t end) {
  return {reinterpret_cast<const char16_t*>(t.s) + begin, static_cast<size_t>(end - begin)};
}

// Rule 3: does [cur, e) end with an abbreviation (a letter plus '.', or a listed one) that starts
// the sentence or follows whitespace or a Close character?
bool ends_with_abbreviation(const Piece& t, int32_t cur, int32_t e, const Abbreviations& abbr) {
  int32_t p;
  const auto starts_token = [&](int32_t at) {
    if (at == cur) return true;
    const UChar32 c = t.before(at, &p);
    return is_space(c) || is_close(c);
  };
  // The word before e: the suffixes that start it or follow a Close character inside it.
  int32_t w = e;
  while (w > cur && !is_space(t.before(w, &p))) w = p;
  int32_t dot;
  t.before(e, &dot);
  for (int32_t s = w; s < dot; s = p) {
    if (static_cast<size_t>(e - s) <= abbr.longest && (s == w || is_close(t.before(s, &p)))) {
      int32_t after;
      if (u_isalpha(t.at(s, &after)) && after == dot) return true;
      if (abbr.words.contains(view(t, s, e))) return true;
    }
    t.at(s, &p);
  }
  for (const std::u16string_view phrase : abbr.phrases) {
    const int32_t len = static_cast<int32_t>(phrase.size());
    if (e - cur >= len && view(t, e - len, e) == phrase && starts_token(e - len)) return true;
  }
  return false;
}

// Appends the sentences of one piece as UTF-16 ranges [begin, end).
void split_piece(const Piece& t, icu::BreakIterator& bi, const Abbreviations& abbr, bool keep_newlines,
                 std::vector<std::pair<int32_t, int32_t>>& out) {
  int32_t cur = 0;  // start of the current sentence
  bi.first();
  for (int32_t b = bi.next(); b != icu::BreakIterator::DONE && b < t.n; b = bi.next()) {
    if (b <= cur) continue;
    int32_t e = b, c, p;
    // 1. Terminator before the closers before the whitespace.
    while (e > cur && is_space(t.before(e, &p))) e = p;
    c = e;
    while (c > cur && is_close(t.before(c, &p))) c = p;
    if (c == cur) continue;
    int32_t term_start;
    const UChar32 term = t.before(c, &term_start);
    const int sb = sentence_break(term);
    if (sb != U_SB_ATERM && sb != U_SB_STERM) continue;
    // 2. punkt's . ? !: punkt's closers only, then whitespace. Other terminators: an opening
    // bracket or quote that ICU counted as a closer starts the next sentence.
    const bool punkt_term = term == '.' || term == '?' || term == '!';
    if (punkt_term) {
      int32_t q = e;
      if (e >= t.n || !is_space(t.at(e, &q))) continue;
      bool ok = true;
      for (int32_t i = c; i < e && ok;) ok = is_punkt_closer(t.at(i, &i));
      if (!ok) continue;
    } else {
      for (int32_t i = c; i < e;) {
        const int32_t at = i;
        const int8_t type = u_charType(t.at(i, &i));
        if (type == U_START_PUNCTUATION || type == U_INITIAL_PUNCTUATION) {
          e = at;
          break;
        }
      }
    }
    // 3. Abbreviations and initials.
    if (c == e && term == '.' && ends_with_abbreviation(t, cur, e, abbr)) continue;
    // 4. Whitespace.
    int32_t next = e;
    while (next < t.n && is_space(t.at(next, &p))) next = p;
    if (next >= t.n) break;  // only whitespace follows: the last sentence, below
    const bool realigned = is_punkt_closer(t.before(e, &p));
    out.emplace_back(cur, keep_newlines && !realigned ? next : e);
    cur = next;
  }
  int32_t e = t.n, p;
  while (e > cur && is_space(t.before(e, &p))) e = p;
  if (e > cur) out.emplace_back(cur, e);
}

}  // namespace

const std::vector<std::string>& sentence_split_languages() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Language& l : kLanguages) v.emplace_back(l.name);
    return v;
  }();
  return names;
}

std::string sentence_split_locale(std::string_view lang) {
  const Language* l = find_language(lang);
  if (!l) unknown_language(lang);
  return l->locale;
}

std::vector<SentenceSpan> split_sentence_spans(std::string_view utf8, const SentenceSplitOptions& opt) {
  const Language* lang = find_language(opt.lang);
  if (!lang) unknown_language(opt.lang);
  const Abbreviations& abbr = abbreviations_for(*lang);
  icu::BreakIterator& bi = iterator_for(lang->locale);

  std::vector<SentenceSpan> spans;
  thread_local std::vector<UChar> buf;
  thread_local std::vector<std::pair<int32_t, int32_t>> ranges;
  const auto* p = reinterpret_cast<const unsigned char*>(utf8.data());
  const size_t n = utf8.size();
  const size_t max_chars = opt.max_chunk_chars == 0 ? SIZE_MAX : opt.max_chunk_chars;
  size_t i = 0;
  while (i < n) {
    // One piece: up to max_chars code points, decoded to UTF-16.
    const size_t begin = i;
    buf.clear();
    buf.reserve(std::min(n - i, max_chars) + 1);
    bool ascii = true;
    for (size_t chars = 0; i < n && chars < max_chars; ++chars) {
      if (p[i] < 0x80) {
        buf.push_back(p[i++]);
        continue;
      }
      ascii = false;
      UChar32 cp;
      i += decode_at(p, n, i, cp);
      if (cp < 0x10000) {
        buf.push_back(static_cast<UChar>(cp));
      } else {
        buf.push_back(U16_LEAD(cp));
        buf.push_back(U16_TRAIL(cp));
      }
    }
    if (buf.size() > static_cast<size_t>(INT32_MAX)) throw std::length_error("sentence splitting: piece too long for ICU");
    const Piece piece{buf.data(), static_cast<int32_t>(buf.size())};

    UErrorCode err = U_ZERO_ERROR;
    UText ut = UTEXT_INITIALIZER;
    utext_openUChars(&ut, piece.s, piece.n, &err);
    bi.setText(&ut, err);
    if (U_FAILURE(err)) {
      utext_close(&ut);
      throw std::runtime_error(std::string("ICU BreakIterator::setText: ") + u_errorName(err));
    }
    ranges.clear();
    split_piece(piece, bi, abbr, opt.keep_newlines, ranges);
    utext_close(&ut);

    // UTF-16 offsets -> byte offsets (ranges are increasing: one forward walk).
    if (ascii) {
      for (const auto& [a, b] : ranges) spans.push_back({begin + static_cast<size_t>(a), begin + static_cast<size_t>(b)});
    } else {
      size_t byte = begin;
      int32_t unit = 0;
      const auto to_byte = [&](int32_t target) {
        while (unit < target) {
          UChar32 cp;
          byte += decode_at(p, n, byte, cp);
          unit += cp < 0x10000 ? 1 : 2;
        }
        return byte;
      };
      for (const auto& [a, b] : ranges) {
        const size_t sa = to_byte(a);
        spans.push_back({sa, to_byte(b)});
      }
    }
  }
  return spans;
}

std::vector<std::string> split_sentences(std::string_view utf8, const SentenceSplitOptions& opt) {
  std::vector<std::string> out;
  for (const SentenceSpan& s : split_sentence_spans(utf8, opt)) out.emplace_back(utf8.substr(s.begin, s.end - s.begin));
  return out;
}

}  // namespace gf::data
