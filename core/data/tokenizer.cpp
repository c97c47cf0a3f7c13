// GPT-2 byte-level BPE tokenizer. Behaviour is documented in tokenizer.h.
//
// Layout: file loading (vocab JSON, merges text) builds an immutable Impl shared by all
// copies. Encoding walks the text in maximal valid-UTF-8 / invalid-byte runs, splits valid
// runs with the PCRE2 pattern and BPE-merges each pre-token. Per-thread state (word cache,
// PCRE2 match data, scratch buffers) lives in a thread_local keyed by the Impl's serial.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/data/tokenizer.h"

#include "core/data/byte_bpe.h"
#include "core/data/gpt2_pattern.h"

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
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

constexpr const char* kEndOfText = "<|endoftext|>";

// ---------------------------------------------------------------------------------------
// PCRE2 for the pre-tokenisation pattern (core/data/gpt2_pattern.h).

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

std::unique_ptr<pcre2_code, CodeDeleter> compile_pattern(const std::string& pattern, bool& jit) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw std::runtime_error("GPT-2 tokenizer: cannot compile pre-tokenisation pattern: " +
                             std::string(reinterpret_cast<char*>(message)));
  }
  jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<pcre2_code, CodeDeleter>(code);
}

// ---------------------------------------------------------------------------------------
// File loading.

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(std::string("GPT-2 ") + what + " file '" + path +
                             "': cannot open: " + std::strerror(errno));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

[[noreturn]] void file_error(const char* what, const std::string& path, const std::string& msg) {
  throw std::runtime_error(std::string("GPT-2 ") + what + " file '" + path + "': " + msg);
}

}  // namespace

// ---------------------------------------------------------------------------------------

struct GPT2Tokenizer::Impl {
  std::vector<std::string> id_to_bytes;
  std::unordered_map<std::string, int32_t> bytes_to_id;
  std::array<int32_t, 256> byte_ids{};
  MergeTable merges;
  std::unique_ptr<pcre2_code, CodeDeleter> pattern;       // with the Unicode 15.0 ranges: any text
  std::unique_ptr<pcre2_code, CodeDeleter> pattern_no_f0;  // \p{L}, \p{N}: text without 0xF0
  bool jit = false;                                         // both are JIT-compiled
  int32_t eod = -1;
  uint64_t serial = 0;  // identifies this table set for the per-thread word caches

  void load_vocab(const std::string& path);
  void load_merges(const std::string& path);
  int32_t id_of(const std::string& bytes) const {
    auto it = bytes_to_id.find(bytes);
    return it == bytes_to_id.end() ? -1 : it->second;
  }
};

void GPT2Tokenizer::Impl::load_vocab(const std::string& path) {
  const char* what = "vocab";
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_file(path, what));
  } catch (const nlohmann::json::exception& e) {
    file_error(what, path, std::string("not valid JSON: ") + e.what());
  }
  if (!json.is_object() || json.empty()) file_error(what, path, "expected a non-empty JSON object");
  id_to_bytes.assign(json.size(), std::string());
  std::vector<bool> seen(json.size(), false);
  std::string bytes;
  for (const auto& [token, value] : json.items()) {
    if (!value.is_number_integer()) file_error(what, path, "id of '" + token + "' is not an integer");
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(json.size())) {
      file_error(what, path, "id " + std::to_string(id) + " of '" + token + "' is outside [0, " +
                                 std::to_string(json.size()) + ")");
    }
    if (seen[id]) file_error(what, path, "id " + std::to_string(id) + " is used twice");
    if (!token_to_bytes(token, bytes) || bytes.empty()) {
      file_error(what, path, "token '" + token + "' is empty or not in GPT-2's byte encoding");
    }
    seen[id] = true;
    id_to_bytes[id] = bytes;
    if (!bytes_to_id.emplace(bytes, static_cast<int32_t>(id)).second) {
      file_error(what, path, "token '" + token + "' appears twice");
    }
  }
  for (int b = 0; b < 256; ++b) {
    byte_ids[b] = id_of(std::string(1, static_cast<char>(b)));
    if (byte_ids[b] < 0) file_error(what, path, "no token for byte " + std::to_string(b));
  }
  eod = id_of(kEndOfText);
  if (eod < 0) file_error(what, path, std::string("no '") + kEndOfText + "' token");
}

void GPT2Tokenizer::Impl::load_merges(const std::string& path) {
  const char* what = "merges";
  std::istringstream in(read_file(path, what));
  std::string line;
  if (!std::getline(in, line) || line.rfind("#version", 0) != 0) {
    file_error(what, path, "first line is not a '#version' header");
  }
  std::vector<std::array<int32_t, 3>> entries;  // left, right, merged
  std::string left_bytes, right_bytes;
  for (size_t line_no = 2; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string left, right, extra;
    auto where = "line " + std::to_string(line_no) + " '" + line + "': ";
    if (!(fields >> left >> right) || (fields >> extra)) {
      file_error(what, path, where + "expected two space-separated tokens");
    }
    if (!token_to_bytes(left, left_bytes) || !token_to_bytes(right, right_bytes) || left_bytes.empty() ||
        right_bytes.empty()) {
      file_error(what, path, where + "token not in GPT-2's byte encoding");
    }
    int32_t l = id_of(left_bytes), r = id_of(right_bytes), m = id_of(left_bytes + right_bytes);
    if (l < 0 || r < 0 || m < 0) {
      file_error(what, path, where + "'" + (l < 0 ? left : r < 0 ? right : left + right) +
                                 "' is not in the vocabulary");
    }
    entries.push_back({l, r, m});
  }
  merges.reserve(entries.size());
  for (size_t rank = 0; rank < entries.size(); ++rank) {
    const auto& [l, r, m] = entries[rank];
    merges.insert(l, r, Merge{static_cast<int32_t>(rank), m});
  }
}

// ---------------------------------------------------------------------------------------
// Per-thread encoding state (the word cache: core/data/byte_bpe.h).

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;  // index of the previous live symbol, -1 at the start
  int32_t next;  // index of the next live symbol, -1 at the end
};

struct Candidate {
  int32_t rank;
  int32_t left;  // index of the left symbol; ties go to the leftmost pair
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

struct ThreadState {
  uint64_t owner = 0;  // serial of the Impl the cache belongs to
  WordCache cache;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match_data{pcre2_match_data_create(1, nullptr)};
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
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

// Byte-level BPE of one pre-token: starting from one symbol per byte, repeatedly merges
// the adjacent pair with the lowest rank (leftmost on ties) until no pair has a rank.
// This is tiktoken's loop; it equals GPT-2's bpe() (merge every occurrence of the best
// pair, repeat) when merges only use tokens made by earlier merges, as GPT-2's do.
// A min-heap of candidate pairs keeps this O(n log n) for long pre-tokens. Appends ids.
void bpe(const GPT2Tokenizer::Impl& impl, std::string_view word, ThreadState& ts,
         std::vector<int32_t>& out) {
  if (word.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw std::length_error("GPT-2 tokenizer: pre-token longer than 2 GiB");
  }
  auto& syms = ts.symbols;
  auto& heap = ts.heap;
  const int32_t n = static_cast<int32_t>(word.size());
  syms.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    syms[i] = Symbol{impl.byte_ids[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
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
    if (left.id < 0 || left.next < 0) continue;  // merged away since it was pushed
    const Merge* m = impl.merges.find(left.id, syms[left.next].id);
    if (m == nullptr || m->rank != c.rank) continue;  // the pair has changed
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

void encode_word(const GPT2Tokenizer::Impl& impl, std::string_view word, ThreadState& ts,
                 std::vector<int32_t>& out) {
  if (word.size() == 1) {
    out.push_back(impl.byte_ids[static_cast<unsigned char>(word[0])]);
    return;
  }
  const uint64_t hash = hash_bytes(word);
  if (ts.cache.lookup(word, hash, out)) return;
  const size_t start = out.size();
  bpe(impl, word, ts, out);
  ts.cache.store(word, hash, out.data() + start, out.size() - start);
}

// Splits a valid UTF-8 run into pre-tokens with the GPT-2 pattern; calls on_word(piece) for
// each, in order.
template <typename OnWord>
void split_valid_run(const GPT2Tokenizer::Impl& impl, std::string_view run, ThreadState& ts,
                     OnWord&& on_word) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(run.data());
  const pcre2_code* code = std::memchr(run.data(), kLeadByteOfUnicode15Ranges, run.size()) != nullptr
                               ? impl.pattern.get()
                               : impl.pattern_no_f0.get();
  pcre2_match_data* md = ts.match_data.get();
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
  size_t offset = 0;
  while (offset < run.size()) {
    int rc = impl.jit ? pcre2_jit_match(code, subject, run.size(), offset, 0, md, nullptr)
                      : pcre2_match(code, subject, run.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;  // cannot happen: every character matches
    if (rc < 0) throw std::runtime_error("GPT-2 tokenizer: PCRE2 match error " + std::to_string(rc));
    const size_t begin = ovector[0], end = ovector[1];
    if (begin > offset) on_word(run.substr(offset, begin - offset));
    if (end <= begin) throw std::logic_error("GPT-2 tokenizer: empty pre-token match");
    on_word(run.substr(begin, end - begin));
    offset = end;
  }
  if (offset < run.size()) on_word(run.substr(offset));
}

// Splits text into maximal valid-UTF-8 and invalid-byte runs; valid runs go through
// split_valid_run, each invalid run is one pre-token. Calls on_word(piece) in order.
template <typename OnWord>
void split_text(const GPT2Tokenizer::Impl& impl, std::string_view text, ThreadState& ts,
                OnWord&& on_word) {
  while (!text.empty()) {
    const size_t valid = valid_utf8_prefix(text);
    if (valid > 0) split_valid_run(impl, text.substr(0, valid), ts, on_word);
    text.remove_prefix(valid);
    const size_t invalid = invalid_utf8_prefix(text);
    if (invalid > 0) on_word(text.substr(0, invalid));
    text.remove_prefix(invalid);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Public interface.

GPT2Tokenizer GPT2Tokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt) {
  auto impl = std::make_shared<Impl>();
  impl->load_vocab(vocab_json);
  impl->load_merges(merges_txt);
  bool jit = false, jit_no_f0 = false;
  impl->pattern = compile_pattern(gpt2_pretoken_pattern(true), jit);
  impl->pattern_no_f0 = compile_pattern(gpt2_pretoken_pattern(false), jit_no_f0);
  impl->jit = jit && jit_no_f0;
  impl->serial = next_serial.fetch_add(1);
  return GPT2Tokenizer(std::move(impl));
}

GPT2Tokenizer::GPT2Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
GPT2Tokenizer::GPT2Tokenizer(const GPT2Tokenizer&) = default;
GPT2Tokenizer& GPT2Tokenizer::operator=(const GPT2Tokenizer&) = default;
GPT2Tokenizer::GPT2Tokenizer(GPT2Tokenizer&&) noexcept = default;
GPT2Tokenizer& GPT2Tokenizer::operator=(GPT2Tokenizer&&) noexcept = default;
GPT2Tokenizer::~GPT2Tokenizer() = default;

std::vector<int32_t> GPT2Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_append(text, ids);
  return ids;
}

void GPT2Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  ThreadState& ts = thread_state(impl_->serial);
  split_text(*impl_, text, ts, [&](std::string_view word) { encode_word(*impl_, word, ts, out); });
}

std::vector<std::string_view> GPT2Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string_view> words;
  split_text(*impl_, text, thread_state(impl_->serial),
             [&](std::string_view word) { words.push_back(word); });
  return words;
}

std::string GPT2Tokenizer::decode(std::span<const int32_t> ids) const {
  const auto& table = impl_->id_to_bytes;
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(table.size())) {
      throw std::out_of_range("GPT-2 tokenizer: id " + std::to_string(id) + " is outside [0, " +
                              std::to_string(table.size()) + ")");
    }
    text += table[id];
  }
  return text;
}

int32_t GPT2Tokenizer::eod_id() const { return impl_->eod; }
int32_t GPT2Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_bytes.size()); }

}  // namespace gf::data
