// SentencePiece tokenizers: Megatron-LM's SentencePieceTokenizer and GPTSentencePieceTokenizer
// (megatron/training/tokenizer/tokenizer.py, _SentencePieceTokenizer and _GPTSentencePieceTokenizer)
// over a SentencePiece `tokenizer.model` (Llama 2, Mixtral), through Debian's libsentencepiece-dev.
//
// Megatron mode (SentencePieceTokenizer, megatron_specials = true), as _SentencePieceTokenizer:
//  * special tokens, in this order: "<CLS>", "<SEP>", "<EOD>", "<MASK>", the pad piece ("<PAD>"
//    when the model has no pad id), the bos piece ("<BOS>" when none), the eos piece ("<EOS>" when
//    none), then "<extra_id_0>".."<extra_id_{N-1}>" (--vocab-extra-ids). One that is not a piece of
//    the model is added to the vocabulary with the next id (piece count, piece count + 1, ...).
//  * eod is the id of "<EOD>" -- NOT the model's eos: for a model without an "<EOD>" piece it is
//    GetPieceSize() + 2 (after the added "<CLS>" and "<SEP>"). vocab_size() counts the added tokens.
//  * encode() cuts the text at the special tokens' literal strings (leftmost occurrence first; at
//    equal positions the one earlier in the list above), encodes each piece of text in between
//    with SentencePiece's EncodeAsIds and puts the special token's id in place of its string
//    (NeMo's tokenize, which Megatron copies).
// GPT mode (GPTSentencePieceTokenizer, megatron_specials = false): encode() is EncodeAsIds, eod is
//  the model's eos id, vocab_size() is GetPieceSize().
//
// Thread safety: all const member functions may be called concurrently. They only call const
// members of one loaded sentencepiece::SentencePieceProcessor (Encode, Decode, IdToPiece), which
// keep no per-call state in the processor (SentencePiece's own multi-threaded trainer and
// Python's encode(..., num_threads) call Encode concurrently on one processor).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gf::data {

class SentencePieceTokenizer {
 public:
  // Throws std::runtime_error naming the file when it cannot be loaded.
  static SentencePieceTokenizer from_file(const std::string& model_file, bool megatron_specials = true,
                                          int vocab_extra_ids = 0);

  std::vector<int32_t> encode(std::string_view utf8) const;
  void encode_append(std::string_view utf8, std::vector<int32_t>& out) const;
  // SentencePiece's DecodeIds; in Megatron mode each special id becomes " TOKEN " between decoded
  // runs, as Megatron's detokenize. Throws std::out_of_range for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;

  bool megatron_specials() const;
  int32_t eod_id() const;      // Megatron's eod: "<EOD>" (Megatron mode) or the model's eos (GPT mode)
  int32_t bos_id() const;      // the model's bos ("<BOS>" added when it has none, Megatron mode; else -1)
  int32_t eos_id() const;      // the model's eos ("<EOS>" added when it has none, Megatron mode; else -1)
  int32_t piece_size() const;  // GetPieceSize(): the model's pieces
  int32_t vocab_size() const;  // Megatron's vocab_size: pieces plus added special tokens

  struct Impl;

 private:
  explicit SentencePieceTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace gf::data
