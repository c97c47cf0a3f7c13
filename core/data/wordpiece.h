// BERT WordPiece tokenizer: Megatron-LM's BertWordPieceLowerCase / BertWordPieceCase.
//
// Reads a BERT `vocab.txt` (one token per line, id = line number; lines end in \n, \r\n or \r
// and are stripped of Python-whitespace at both ends, as bert_tokenization.load_vocab does; a
// token listed twice keeps its last line's id). encode() computes what Google BERT's
// tokenization.py FullTokenizer computes (Megatron's megatron/training/tokenizer/bert_tokenization.py
// is a copy of it), checked id for id against tools/bert_tokenization_reference.py:
//  * BasicTokenizer: drop U+0000, U+FFFD and control characters (category Cc or Cf, except
//    \t \n \r); ' ', \t, \n, \r and category Zs become ' '; ' ' around every CJK ideograph
//    (BERT's ranges: U+4E00-9FFF, 3400-4DBF, 20000-2A6DF, 2A700-2B73F, 2B740-2B81F,
//    2B820-2CEAF, F900-FAFF, 2F800-2FA1F); split on Python's str.split() whitespace (what is
//    left of it after cleaning: ' ', U+2028, U+2029). Lower-case mode lower-cases each word
//    (full Unicode case mapping, like Python's str.lower(), İ -> i + U+0307 and final sigma
//    included), NFD-normalises it and drops category Mn. Then each word is split around
//    punctuation (ASCII 33-47, 58-64, 91-96, 123-126 or category P*), one character each.
//  * WordpieceTokenizer: a word of more than 200 code points is [UNK]; otherwise greedy
//    longest-match-first from the left, pieces after the first prefixed with "##"; a word with
//    an unmatchable rest is one [UNK].
//  Unicode data (categories, case mapping, NFD) come from ICU (libicu-dev). Invalid UTF-8 bytes
//  are dropped (Python's decode(errors="ignore"), what convert_to_unicode does with bytes).
//
// Megatron's _BertWordPieceTokenizer adds "[BOS]" and then "[EOS]" to the vocabulary when they
// are absent (ids len(vocab) and len(vocab)+1) and uses [EOS] as its end-of-document token
// (eod == eos); eod_id() and vocab_size() follow it.
//
// Thread safety: all const member functions may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gf::data {

class WordPieceTokenizer {
 public:
  // Throws std::runtime_error naming the file when it cannot be read or is not UTF-8.
  static WordPieceTokenizer from_file(const std::string& vocab_txt, bool lower_case);

  // Throws std::runtime_error when a word is unknown and the vocabulary has no "[UNK]".
  std::vector<int32_t> encode(std::string_view utf8) const;
  void encode_append(std::string_view utf8, std::vector<int32_t>& out) const;
  // The BasicTokenizer's words (before WordPiece), UTF-8. For tests and debugging.
  std::vector<std::string> basic_tokenize(std::string_view utf8) const;
  // Megatron's decode(): tokens joined with ' ', " ##" removed. Throws std::out_of_range.
  std::string decode(std::span<const int32_t> ids) const;

  bool lower_case() const;
  int32_t unk_id() const;      // -1 when the vocabulary has no [UNK]
  int32_t eod_id() const;      // [EOS] (Megatron's eod), added after [BOS] when absent
  int32_t bos_id() const;
  int32_t vocab_size() const;  // Megatron's vocab_size: distinct tokens of the file plus added [BOS]/[EOS]

  struct Impl;

 private:
  explicit WordPieceTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace gf::data
