// Hugging Face byte-level BPE tokenizer (tokenizer.json): encoding and the public interface.
// Behaviour is documented in hf_tokenizer.h.
//
// Layout: from_file (hf_tokenizer_load.cpp) parses and checks tokenizer.json (and
// tokenizer_config.json) into an immutable Impl (hf_tokenizer_impl.h) shared by all copies. Encoding
// walks the text in maximal valid-UTF-8 / invalid-byte runs; a valid run is cut at the non-normalized
// added tokens, each piece between is NFC-normalized (ICU) and cut at the normalized added tokens, and
// what is left runs through the pre-tokenizer steps (PCRE2) depth first, each final pre-token going to
// the byte-level BPE with a per-thread word cache. Per-thread state lives in a thread_local keyed by
// the Impl's serial.
#include "core/data/hf_tokenizer_impl.h"

#include <unicode/bytestream.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

namespace gf::data {
using namespace byte_bpe;
using namespace hf;
namespace {

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
  std::vector<int32_t> first_ids;  // kBpe: a pre-token's symbols before merging
  std::vector<AddedMatch> raw_matches, normalized_matches;
  std::string normalized, scratch;
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

}  // namespace

void HFTokenizer::Impl::normalize(std::string_view text, std::string& out) const {
  out.clear();
  UErrorCode status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out);
  nfc_instance->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr, status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("HF tokenizer: ICU NFC failed: ") + u_errorName(status));
}

// ---------------------------------------------------------------------------------------
// Encoding.

namespace {

using Impl = HFTokenizer::Impl;

// BPE of one pre-token (word.rs merge_all) from its first symbols: one per byte (kByteLevelBpe,
// `word` given) or ts.first_ids (kBpe, `word` empty). Appends ids.
void bpe(const Impl& impl, std::string_view word, ThreadState& ts, std::vector<int32_t>& out) {
  const size_t size = word.empty() ? ts.first_ids.size() : word.size();
  if (size > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::length_error("HF tokenizer: pre-token longer than 2 GiB");
  auto& syms = ts.symbols;
  auto& heap = ts.heap;
  const auto n = static_cast<int32_t>(size);
  syms.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    const int32_t id = word.empty() ? ts.first_ids[i] : impl.byte_ids[static_cast<unsigned char>(word[i])];
    syms[i] = Symbol{id, i - 1, i + 1 < n ? i + 1 : -1};
  }
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
  if (impl.model_kind != ModelKind::kByteLevelBpe) {
    const uint64_t hash = hash_bytes(word);
    if (ts.cache.lookup(word, hash, out)) return;
    const size_t start = out.size();
    if (impl.model_kind == ModelKind::kWordPiece) {
      impl.wordpiece(word, out);
    } else if (auto it = impl.ignore_merges ? impl.vocab.find(word) : impl.vocab.end(); it != impl.vocab.end()) {
      out.push_back(it->second);
    } else {
      impl.char_symbols(word, ts.first_ids);
      if (!ts.first_ids.empty()) bpe(impl, std::string_view(), ts, out);
    }
    ts.cache.store(word, hash, out.data() + start, out.size() - start);
    return;
  }
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
// each final pre-token. `at_start`: the piece starts at offset 0 of the input (Metaspace's
// prepend_scheme "first" prepends only there).
template <typename OnWord>
void pre_tokenize_piece(const Impl& impl, std::string_view piece, size_t step, bool at_start, ThreadState& ts,
                        OnWord& on_word) {
  if (step == impl.steps.size()) {
    on_word(piece);
    return;
  }
  const PreStep& s = impl.steps[step];
  std::string prefixed;
  if (s.kind == PreKind::kMetaspace) {
    impl.metaspace(s, piece, at_start, prefixed);
    piece = prefixed;
    if (!s.split) {
      pre_tokenize_piece(impl, piece, step + 1, at_start, ts, on_word);
      return;
    }
  }
  if (s.kind == PreKind::kMetaspace || s.kind == PreKind::kDigits || s.kind == PreKind::kBert) {
    std::vector<Span>& spans = ts.spans[step];
    impl.char_split(s, piece, spans);
    for (size_t i = 0; i < spans.size(); ++i) {
      const Span span = spans[i];
      if (span.end > span.begin)
        pre_tokenize_piece(impl, piece.substr(span.begin, span.end - span.begin), step + 1, at_start && span.begin == 0, ts,
                           on_word);
    }
    return;
  }
  if (s.kind == PreKind::kByteLevel) {
    if (s.add_prefix_space && piece.front() != ' ') {
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    if (!s.use_regex) {
      pre_tokenize_piece(impl, piece, step + 1, at_start, ts, on_word);
      return;
    }
  }
  std::vector<Span>& spans = ts.spans[step];  // sized in encode_text: deeper steps never resize it
  find_matches(s.regex, piece, s.invert, ts, spans);
  if (s.kind != PreKind::kByteLevel) apply_behavior(s.behavior, spans);
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span span = spans[i];
    if (span.end > span.begin)
      pre_tokenize_piece(impl, piece.substr(span.begin, span.end - span.begin), step + 1, at_start && span.begin == 0, ts,
                         on_word);
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
// `run_at_start`: the run starts the input.
template <typename OnAdded, typename OnWord>
void encode_valid_run(const Impl& impl, std::string_view run, bool run_at_start, ThreadState& ts, OnAdded& on_added,
                      OnWord& on_word) {
  // Normalizes one piece between raw matches and cuts it at the normalized added tokens. Not
  // reentrant: it owns ts.normalized and ts.normalized_matches.
  auto normalized_piece = [&](std::string_view piece, bool at_start) {
    std::string_view text = piece;
    if (!impl.norm_steps.empty()) {
      impl.normalize_steps(piece, ts.normalized, ts.scratch);
      text = ts.normalized;
    } else if (impl.nfc && !all_ascii(piece)) {
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
      if (m.begin > offset)
        pre_tokenize_piece(impl, text.substr(offset, m.begin - offset), 0, at_start && offset == 0, ts, on_word);
      on_added(m.id, text.substr(m.begin, m.end - m.begin));
      offset = m.end;
    }
    if (offset < text.size()) pre_tokenize_piece(impl, text.substr(offset), 0, at_start && offset == 0, ts, on_word);
  };
  std::vector<AddedMatch>& raw = ts.raw_matches;
  find_added(impl, impl.raw_trie, run, raw);
  if (raw.empty()) {
    normalized_piece(run, run_at_start);
    return;
  }
  size_t offset = 0;
  for (const AddedMatch& m : raw) {  // normalized_piece does not touch ts.raw_matches
    if (m.begin > offset) normalized_piece(run.substr(offset, m.begin - offset), run_at_start && offset == 0);
    on_added(m.id, run.substr(m.begin, m.end - m.begin));
    offset = m.end;
  }
  if (offset < run.size()) normalized_piece(run.substr(offset), run_at_start && offset == 0);
}

template <typename OnAdded, typename OnWord>
void encode_text(const Impl& impl, std::string_view text, ThreadState& ts, OnAdded&& on_added, OnWord&& on_word) {
  if (ts.spans.size() < impl.steps.size()) ts.spans.resize(impl.steps.size());
  const char* const begin = text.data();
  while (!text.empty()) {
    const size_t valid = valid_utf8_prefix(text);
    if (valid > 0) encode_valid_run(impl, text.substr(0, valid), text.data() == begin, ts, on_added, on_word);
    text.remove_prefix(valid);
    const size_t invalid = invalid_utf8_prefix(text);
    if (invalid > 0) on_word(text.substr(0, invalid));
    text.remove_prefix(invalid);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Public interface.

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
  if (impl_->model_kind != ModelKind::kByteLevelBpe) return impl_->decode_tokens(ids);
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
