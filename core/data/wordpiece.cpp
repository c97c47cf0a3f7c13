// BERT WordPiece tokenizer (see wordpiece.h). Unicode properties, lower-casing and NFD: ICU.
#include "core/data/wordpiece.h"
#include "core/data/byte_bpe.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace gf::data {
namespace {

// Megatron's bert_tokenization.py and Google BERT's tokenization.py (since November 2018): a word of up to
// 200 characters is split into pieces, a longer one is [UNK]. (Hugging Face's WordPiece model defaults
// to 100; hf_tokenizer reads its own max_input_chars_per_word from tokenizer.json.)
constexpr int kMaxInputCharsPerWord = 200;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Decodes UTF-8 into code points; each ill-formed subsequence (Unicode's maximal subpart) is
// dropped, which is what Python's bytes.decode("utf-8", "ignore") keeps.
void decode_utf8(std::string_view s, std::u32string& out) {
  out.clear();
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) { out.push_back(c); ++i; continue; }
    int len;
    char32_t cp;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else { ++i; continue; }  // invalid lead byte
    size_t j = i + 1;
    bool ok = true;
    for (int k = 1; k < len; ++k, ++j) {
      const unsigned b = j < n ? p[j] : 0;
      const unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (j >= n || b < l || b > h) { ok = false; break; }
      cp = (cp << 6) | (b & 0x3F);
    }
    if (ok) out.push_back(cp);
    i = j;  // ill-formed: skip the maximal subpart (lead plus the valid continuation bytes)
  }
}

using byte_bpe::append_utf8;

bool is_cjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool is_punctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126)) return true;
  if (cp < 0x80) return false;
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_P_MASK) != 0;
}

// Python's str.isspace(): category Zs or bidirectional class WS, B or S.
bool is_python_space(char32_t cp) {
  const auto c = static_cast<UChar32>(cp);
  if (u_charType(c) == U_SPACE_SEPARATOR) return true;
  const UCharDirection d = u_charDirection(c);
  return d == U_WHITE_SPACE_NEUTRAL || d == U_BLOCK_SEPARATOR || d == U_SEGMENT_SEPARATOR;
}

// What BasicTokenizer._clean_text + _tokenize_chinese_chars leave, with Python's split() whitespace
// that can survive cleaning (' ', U+2028, U+2029) all written as ' '.
void clean(const std::u32string& in, std::u32string& out) {
  out.clear();
  out.reserve(in.size() + 8);
  for (const char32_t c : in) {
    if (c < 0x80) {
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') out.push_back(' ');
      else if (c < 0x20 || c == 0x7F) continue;  // Cc (includes U+0000)
      else out.push_back(c);
      continue;
    }
    if (c == 0xFFFD) continue;
    const int8_t type = u_charType(static_cast<UChar32>(c));
    if (type == U_CONTROL_CHAR || type == U_FORMAT_CHAR) continue;
    if (type == U_SPACE_SEPARATOR || c == 0x2028 || c == 0x2029) {
      out.push_back(' ');
    } else if (is_cjk(c)) {
      out.push_back(' ');
      out.push_back(c);
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
}

// Python's token.lower() followed by _run_strip_accents (NFD, drop Mn), for a non-ASCII word.
void lower_strip_accents(std::u32string& word) {
  std::u16string src;
  src.reserve(word.size() + 4);
  for (const char32_t c : word) {
    if (c < 0x10000) {
      src.push_back(static_cast<char16_t>(c));
    } else {
      src.push_back(static_cast<char16_t>(U16_LEAD(c)));
      src.push_back(static_cast<char16_t>(U16_TRAIL(c)));
    }
  }
  UErrorCode err = U_ZERO_ERROR;
  std::u16string lower(src.size() * 3 + 8, u'\0');
  int32_t len = u_strToLower(reinterpret_cast<UChar*>(lower.data()), static_cast<int32_t>(lower.size()),
                             reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()), "", &err);
  if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU u_strToLower: ") + u_errorName(err));
  lower.resize(len);
  const UNormalizer2* nfd = unorm2_getNFDInstance(&err);
  std::u16string norm(lower.size() * 4 + 8, u'\0');
  len = unorm2_normalize(nfd, reinterpret_cast<const UChar*>(lower.data()), static_cast<int32_t>(lower.size()),
                         reinterpret_cast<UChar*>(norm.data()), static_cast<int32_t>(norm.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    norm.assign(len, u'\0');
    len = unorm2_normalize(nfd, reinterpret_cast<const UChar*>(lower.data()), static_cast<int32_t>(lower.size()),
                           reinterpret_cast<UChar*>(norm.data()), static_cast<int32_t>(norm.size()), &err);
  }
  if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU NFD: ") + u_errorName(err));
  word.clear();
  for (int32_t i = 0; i < len;) {
    UChar32 c;
    U16_NEXT(norm.data(), i, len, c);
    if (u_charType(c) == U_NON_SPACING_MARK) continue;
    word.push_back(static_cast<char32_t>(c));
  }
}

}  // namespace

struct WordPieceTokenizer::Impl {
  Vocab vocab;
  std::vector<std::string> inv;     // id -> token ("" and !has[id] when no token maps to it)
  std::vector<char> has;
  bool lower_case = true;
  int32_t unk = -1, bos = -1, eos = -1, size = 0;
  int max_token_chars = 0;          // longest vocabulary entry in code points, "##" included

  // Calls emit(word) for each of BasicTokenizer's output words.
  template <class Emit>
  void basic(std::string_view text, Emit&& emit) const {
    thread_local std::u32string decoded, cleaned, word;
    decode_utf8(text, decoded);
    clean(decoded, cleaned);
    const size_t n = cleaned.size();
    size_t i = 0;
    while (i < n) {
      while (i < n && cleaned[i] == ' ') ++i;
      if (i == n) break;
      size_t j = i;
      bool ascii = true;
      while (j < n && cleaned[j] != ' ') ascii &= cleaned[j] < 0x80, ++j;
      word.assign(cleaned, i, j - i);
      i = j;
      if (lower_case) {
        if (ascii) {
          for (char32_t& c : word)
            if (c >= 'A' && c <= 'Z') c += 'a' - 'A';
        } else {
          lower_strip_accents(word);
        }
      }
      // _run_split_on_punc: each punctuation character alone, the runs between them.
      size_t start = 0;
      for (size_t k = 0; k < word.size(); ++k) {
        if (is_punctuation(word[k])) {
          if (k > start) emit(std::u32string_view(word).substr(start, k - start));
          emit(std::u32string_view(word).substr(k, 1));
          start = k + 1;
        }
      }
      if (word.size() > start) emit(std::u32string_view(word).substr(start));
    }
  }

  void wordpiece(std::u32string_view word, std::vector<int32_t>& out) const {
    if (word.size() > static_cast<size_t>(kMaxInputCharsPerWord)) {
      push_unk(out);
      return;
    }
    thread_local std::string utf8, key;
    thread_local std::vector<size_t> off;
    utf8.clear();
    off.clear();
    for (const char32_t c : word) {
      off.push_back(utf8.size());
      append_utf8(c, utf8);
    }
    off.push_back(utf8.size());
    const size_t n = word.size(), before = out.size();
    size_t start = 0;
    while (start < n) {
      const size_t prefix = start > 0 ? 2 : 0;
      size_t end = std::min(n, start + static_cast<size_t>(std::max(0, max_token_chars - static_cast<int>(prefix))));
      int32_t found = -1;
      for (; end > start; --end) {
        const std::string_view sub(utf8.data() + off[start], off[end] - off[start]);
        Vocab::const_iterator it;
        if (prefix) {
          key.assign("##");
          key.append(sub);
          it = vocab.find(std::string_view(key));
        } else {
          it = vocab.find(sub);
        }
        if (it != vocab.end()) { found = it->second; break; }
      }
      if (found < 0) {
        out.resize(before);
        push_unk(out);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }

  void push_unk(std::vector<int32_t>& out) const {
    if (unk < 0) throw std::runtime_error("WordPiece: an unknown word and the vocabulary has no [UNK]");
    out.push_back(unk);
  }
};

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& vocab_txt, bool lower_case) {
  std::ifstream in(vocab_txt, std::ios::binary);
  if (!in) throw std::runtime_error(vocab_txt + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  auto impl = std::make_shared<Impl>();
  impl->lower_case = lower_case;
  // Python's readline() in text mode: lines end in \n, \r\n or \r.
  std::vector<std::string> lines;
  size_t i = 0;
  while (i < data.size()) {
    size_t j = i;
    while (j < data.size() && data[j] != '\n' && data[j] != '\r') ++j;
    lines.push_back(data.substr(i, j - i));
    if (j < data.size() && data[j] == '\r' && j + 1 < data.size() && data[j + 1] == '\n') ++j;
    i = j + 1;
  }
  std::u32string cps, check;
  for (size_t id = 0; id < lines.size(); ++id) {
    decode_utf8(lines[id], cps);
    std::string round;
    for (char32_t c : cps) append_utf8(c, round);
    if (round != lines[id]) throw std::runtime_error(vocab_txt + ":" + std::to_string(id + 1) + ": not valid UTF-8");
    size_t b = 0, e = cps.size();
    while (b < e && is_python_space(cps[b])) ++b;
    while (e > b && is_python_space(cps[e - 1])) --e;
    std::string token;
    for (size_t k = b; k < e; ++k) append_utf8(cps[k], token);
    impl->max_token_chars = std::max(impl->max_token_chars, static_cast<int>(e - b));
    impl->vocab[token] = static_cast<int32_t>(id);  // a repeated token keeps its last id
  }
  impl->size = static_cast<int32_t>(impl->vocab.size());
  impl->inv.assign(std::max<size_t>(lines.size(), 1) + 2, std::string());
  impl->has.assign(impl->inv.size(), 0);
  for (const auto& [t, id] : impl->vocab) impl->inv[id] = t, impl->has[id] = 1;
  // Megatron's add_token("[BOS]"), add_token("[EOS]"): id len(vocab) when absent (with repeated
  // lines that id can be a file token's too; inv_vocab then names the added token, as in Megatron).
  auto add = [&](const std::string& t) {
    auto it = impl->vocab.find(t);
    if (it != impl->vocab.end()) return it->second;
    const int32_t id = impl->size++;
    impl->vocab.emplace(t, id);
    impl->inv[id] = t, impl->has[id] = 1;
    return id;
  };
  impl->bos = add("[BOS]");
  impl->eos = add("[EOS]");
  if (auto it = impl->vocab.find(std::string_view("[UNK]")); it != impl->vocab.end()) impl->unk = it->second;
  return WordPieceTokenizer(std::move(impl));
}

void WordPieceTokenizer::encode_append(std::string_view utf8, std::vector<int32_t>& out) const {
  const Impl& im = *impl_;
  im.basic(utf8, [&](std::u32string_view word) { im.wordpiece(word, out); });
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view utf8) const {
  std::vector<int32_t> out;
  encode_append(utf8, out);
  return out;
}

std::vector<std::string> WordPieceTokenizer::basic_tokenize(std::string_view utf8) const {
  std::vector<std::string> words;
  impl_->basic(utf8, [&](std::u32string_view word) {
    std::string s;
    for (char32_t c : word) append_utf8(c, s);
    words.push_back(std::move(s));
  });
  return words;
}

std::string WordPieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::string joined;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int32_t id = ids[k];
    if (id < 0 || static_cast<size_t>(id) >= impl_->inv.size() || !impl_->has[id])
      throw std::out_of_range("WordPiece decode: id " + std::to_string(id) + " is not in the vocabulary");
    if (k) joined += ' ';
    joined += impl_->inv[id];
  }
  std::string out;  // " ".join(tokens).replace(" ##", "").strip()
  for (size_t k = 0; k < joined.size();) {
    if (joined.compare(k, 3, " ##") == 0) { k += 3; continue; }
    out += joined[k++];
  }
  const size_t b = out.find_first_not_of(' '), e = out.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : out.substr(b, e - b + 1);
}

bool WordPieceTokenizer::lower_case() const { return impl_->lower_case; }
int32_t WordPieceTokenizer::unk_id() const { return impl_->unk; }
int32_t WordPieceTokenizer::eod_id() const { return impl_->eos; }
int32_t WordPieceTokenizer::bos_id() const { return impl_->bos; }
int32_t WordPieceTokenizer::vocab_size() const { return impl_->size; }

}  // namespace gf::data
