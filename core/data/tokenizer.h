// GPT-2 byte-level BPE tokenizer.
//
// Reads the two files GPT-2 ships: `gpt2-vocab.json` (token string -> id, tokens written
// through GPT-2's byte-to-unicode map) and `gpt2-merges.txt` ("#version" line, then one
// merge "A B" per line, in rank order). scripts/fetch_gpt2_vocab.sh fetches them.
//
// Behaviour: what Megatron-LM's GPT2BPETokenizer (tools/preprocess_data.py), OpenAI's
// encoder.py and Hugging Face's GPT2Tokenizer compute in Python, matched id for id against
// tools/gpt2_encoder_reference.py (tests/golden/tokenizer/unicode_space_*, written by
// tools/make_tokenizer_golden_py.py with python3-regex) and, on text where JavaScript agrees
// with Python, against the npm packages gpt-3-encoder and js-tiktoken (corpus.txt, ids*.txt,
// special_cases.json, written by tools/make_tokenizer_golden.js):
//  * Pre-tokenisation uses GPT-2's pattern
//      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//    through PCRE2 (UTF + UCP, JIT when available), with the classes meaning what they mean
//    in Python's `regex` module: `\s` is the Unicode White_Space property (tab, LF, VT, FF,
//    CR, space, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F,
//    U+3000), so U+0085 is space and U+FEFF, U+180E, U+200B, U+2060 and U+001C-U+001F are
//    not (JavaScript counts U+FEFF, PCRE2 U+180E, Python's `re` U+001C-U+001F as space);
//    `\p{L}` and `\p{N}` follow Unicode 15.0, the tables of python3-regex 2022.10.31.
//  * Each pre-token's UTF-8 bytes are merged by rank (lowest first) with the merge table.
//  * "<|endoftext|>" in the text is NOT special: its 13 characters are encoded like any
//    other text (as Megatron's tokenize() and gpt-3-encoder do). The end-of-document id
//    (eod_id() = 50256) is appended by the preprocessing tool (--append-eod), never
//    produced by encode().
//  * Invalid UTF-8 never throws and is never replaced. The text is split into maximal
//    valid UTF-8 runs and maximal runs of invalid bytes; valid runs are pre-tokenised as
//    above, and each invalid run is one pre-token of its own whose bytes go through the
//    same byte-level BPE. So decode(encode(bytes)) == bytes for every byte string.
//    (The JavaScript references first turn invalid bytes into U+FFFD, which is lossy;
//    Python cannot read invalid UTF-8 into a str, so Megatron stops with an error.)
//  * decode() concatenates the tokens' bytes; the result is returned as raw bytes and may
//    be invalid UTF-8 when ids split a character (no U+FFFD replacement).
//
// Thread safety: all const member functions may be called concurrently. Each thread that
// encodes keeps its own cache of recently encoded pre-tokens (at most 65,536 of them, a few
// MB), emptied when the thread switches to a tokenizer loaded separately and freed when the
// thread ends.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gf::data {

class GPT2Tokenizer {
 public:
  // Throws std::runtime_error whose message names the file and what is wrong with it.
  static GPT2Tokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);

  std::vector<int32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  // The pre-tokens encode() merges, in order, as views into `text`: the pieces GPT-2's
  // pattern cuts each valid UTF-8 run into, and each run of invalid bytes whole. Their
  // concatenation is `text`. For tests and debugging.
  std::vector<std::string_view> pre_tokenize(std::string_view text) const;
  // Throws std::out_of_range for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const;

  int32_t eod_id() const;      // id of "<|endoftext|>" (50256 for GPT-2)
  int32_t vocab_size() const;  // 50257 for GPT-2

  // Copies share the same immutable tables.
  GPT2Tokenizer(const GPT2Tokenizer&);
  GPT2Tokenizer& operator=(const GPT2Tokenizer&);
  GPT2Tokenizer(GPT2Tokenizer&&) noexcept;
  GPT2Tokenizer& operator=(GPT2Tokenizer&&) noexcept;
  ~GPT2Tokenizer();

  struct Impl;

 private:
  explicit GPT2Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace gf::data
