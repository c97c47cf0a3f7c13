// Hugging Face tokenizer: a `tokenizer.json`, the files Megatron-LM's HuggingFaceTokenizer
// (--tokenizer-type HuggingFaceTokenizer) loads through transformers' AutoTokenizer. Byte-level BPE
// (Llama 3, Qwen2, GPT-2, Command R layouts) as described in 1-5 below; SentencePiece-style BPE
// (Llama 2, CodeLlama, Mistral v0.3, Gemma) and WordPiece (BERT) as "Models that are not
// byte-level" says.
//
// encode() computes what the Rust crate `tokenizers` computes for Tokenizer::encode(text,
// add_special_tokens = false), checked id for id against tools/hf_tokenizer_reference.py (a Python
// transcription of tokenizers' semantics) on tests/data/hf_tokenizer (GPT-2, Llama 3, Qwen2 and
// "features" layouts over one multi-script corpus), and, when those files were made, against
// tokenizers 0.23.2 itself (tests/data/hf_tokenizer/README.md says how far):
//  1. Added tokens (`added_tokens`, tokenizer/added_vocabulary.rs). Those with `normalized: false`
//     are cut out of the raw text first, leftmost-longest and non-overlapping (HF's aho-corasick
//     LeftmostLongest); every piece between them is normalized, then those with `normalized: true`
//     are cut out of it, matched by their normalized content. A match is skipped (and the search
//     goes on after it) when the token is `single_word` and a word character (Alphabetic, M, Nd,
//     Pc, Join_Control: Rust regex's \w) touches it; `lstrip` / `rstrip` widen it over the
//     White_Space run before / after it (lstrip never past the previous match). A matched token is
//     its id; special and non-special tokens are cut alike (transformers' split_special_tokens =
//     false). Token ids are assigned as tokenizers assigns them (a content already in the model
//     vocab keeps that id, others take the next free id from the model vocab's size); a file whose
//     `id` fields disagree is refused.
//  2. Normalizer: null, NFC (see "NFC tables" below), or a Sequence of those.
//  3. Pre-tokenizer: a Sequence (or one) of Split steps followed by one ByteLevel, applied piece by
//     piece as tokenizers does:
//     * Split {pattern: {Regex: R} or {String: S}, behavior, invert}: every behavior (Removed,
//       Isolated, MergedWithPrevious, MergedWithNext, Contiguous) and invert, transcribed from
//       NormalizedString::split. Matches are found as onig's find_iter finds them (an empty match
//       that ends where the previous match ended is skipped, one character on). R is written for
//       Oniguruma (its default syntax, as the onig crate compiles it) and translated to PCRE2
//       (UTF, UCP, JIT; S is matched literally): \s / \S become Unicode
//       White_Space / its complement (as in Oniguruma and Python's `regex`; PCRE2's own UCP \s
//       would add U+180E), every \p{X} / \P{X} gets the characters Unicode 15.0 added to X (by
//       ICU 72: Debian's PCRE2 10.42 has Unicode 14.0 tables, python3-regex 2022.10.31 has 15.0;
//       for \p{L} and \p{N} these are the ranges core/data/gpt2_pattern.cpp lists), \v is
//       U+000B, \uHHHH is \x{HHHH}, {,n} is {0,n}.
//       Refused with the construct named: \d \D \w \W \h \H \b \B \A \z \Z \G \R \X \K \k \g,
//       back references, octal escapes, ^ and $ (line anchors in Oniguruma), nested classes and
//       && in classes, \P{X} inside a class when Unicode 15.0 added characters to X, inline
//       options other than i, possessive {n,m}+. Everything else passes through and PCRE2
//       compiles it (a name PCRE2 does not know is refused with its error). The Unicode version
//       is where splits can differ from tokenizers, whose Oniguruma tables depend on the build:
//       tokenizers 0.23.2 (checked: its npm build) has Unicode 16.0, so the 5,004 letters and
//       digits of Unicode 15.1 and 16.0 (CJK Extension I U+2EBF0-2EE5D, Egyptian Hieroglyphs
//       Extended-A U+13460-143FA, Garay, Todhri, Tulu-Tigalari, Sunuwar, Gurung Khema, Kirat Rai,
//       Ol Onal, ...), and for patterns using \p{M}, \p{P} or \p{S} the 15.1/16.0 marks and
//       symbols, split differently here (here they are unassigned); builds with Oniguruma 6.9.8
//       (onig_sys 69.8) have Unicode 14.0 and differ instead on the Unicode 15.0 additions. On
//       every other code point the splits were found equal to tokenizers 0.23.2's for the
//       Llama 3, Qwen2/3, o200k, DeepSeek-V3 and GPT-2 patterns. Case-insensitive groups use
//       Unicode simple case folding in PCRE2 and Python's `regex`; Oniguruma also folds
//       multi-character sequences, which makes no difference to the contractions of the Llama 3 /
//       Qwen2 / o200k patterns ("'ſ" matches 's in all three).
//     * ByteLevel {add_prefix_space, use_regex}: " " is prepended to each piece that does not start
//       with a space; with use_regex the piece is split with GPT-2's pattern
//       (core/data/gpt2_pattern.h, the same White_Space and Unicode 15.0 classes). Each piece's
//       UTF-8 bytes then go to the model (the byte-to-character map is implied).
//     * Digits {individual_digits}: each N* character alone, or runs of them (Command R).
//     ByteLevel must be the last step; a file without one is not byte-level (below).
//  4. BPE model (a ByteLevel pre-tokenizer with model.type other than BPE is refused): with `ignore_merges`, a pre-token that is a vocab token is that token; otherwise
//     one symbol per byte, then the adjacent pair of lowest merge rank, leftmost first, is merged
//     until none is left (models/bpe/word.rs). Merges are "a b" strings (the legacy format, split at
//     the space; "#version" lines skipped) or [a, b] pairs; a pair listed twice keeps its last rank.
//     Refused: a model type other than BPE, dropout other than null/0, continuing_subword_prefix or
//     end_of_word_suffix other than null/"", a vocab lacking one of the 256 byte-level characters
//     (the message says that the file is then not byte-level BPE; tokenizers would drop that byte or
//     use unk_token; with all 256 present unk_token and byte_fallback never act and are accepted
//     whatever they hold), a merge naming a token not in the vocab, two tokens with one id. Ids may
//     leave gaps (o200k's added tokens do).
//  5. The decoder must be ByteLevel (others, or null, are refused); `truncation` and `padding` are
//     ignored (transformers switches them off for a plain call); "version" must be "1.0".
//  Invalid UTF-8 never throws: the text is cut into maximal valid runs and maximal runs of invalid
//  bytes; each valid run goes through 1-4 on its own, each invalid run is one pre-token of raw
//  bytes for the BPE. (Python cannot hold invalid UTF-8 in a str: Megatron stops with an error.)
//
// Models that are not byte-level (hf_tokenizer_sp.cpp, hf_tokenizer_sp_load.cpp), checked id for
// id and decode() for decode() against tokenizers 0.23.2 itself (tests/golden/tokenizer/hf_real,
// tests/integration/hf_tokenizer_real.sh: Llama 2, Gemma, Gemma 3, Metaspace and Digits variants,
// BERT layouts). Added tokens work as in 1. Then:
//  * Normalizer: a Sequence of NFC, Prepend (before a non-empty piece: Llama 2's "▁"), Replace with
//    a String pattern (Llama 2 and Gemma: ' ' -> "▁"), BertNormalizer (clean_text, handle_chinese_
//    chars, strip_accents with NFD, lowercase one character at a time; its category tests use the
//    Unicode 8.0 tables of the crate unicode_categories, as tokenizers does, found equal on every
//    code point below U+30000; lower-casing and Digits' N* use ICU 72's Unicode 15.0, where
//    tokenizers' Rust std has 16.0: the 16.0 letters with case, e.g. U+A7CB, differ). Each piece between
//    added tokens is normalized on its own (Prepend acts on each). Refused: NFKC, NFD, NFKD,
//    Lowercase, Strip, StripAccents, Precompiled, Replace with a Regex.
//  * Pre-tokenizer: none (the normalized piece is one pre-token), or a Sequence of Split (as in 3),
//    Metaspace {replacement, prepend_scheme always / first (only the piece at the input's start)
//    / never, split: cut before every replacement}, Digits, BertPreTokenizer (White_Space removed,
//    ASCII and P* punctuation each alone).
//  * BPE over characters: each character that is a vocab token is that token, else (byte_fallback)
//    the <0xNN> tokens of its UTF-8 bytes when all exist, else unk_token (consecutive ones fused
//    with fuse_unk), else it is dropped; then merges as in 4 (ignore_merges too). An unk_token
//    not in the vocab is refused. Invalid UTF-8 bytes are each such a character (<0xNN>).
//  * WordPiece: a pre-token of more than max_input_chars_per_word characters is unk_token; else
//    the longest vocab token from the left, later pieces with continuing_subword_prefix; a rest
//    no token starts makes the pre-token one unk_token.
//  * decode(): the tokens (added ones as in decode() below) through the decoder: a Sequence of
//    ByteFallback (<0xNN> runs to their bytes, U+FFFD per byte when not UTF-8), Fuse, Strip,
//    Replace (String), Metaspace, WordPiece (prefix, cleanup); null joins the tokens with ' '.
//    Refused: a ByteLevel decoder (its tokens are not byte-level), CTC, BPEDecoder.
//  Other models (Unigram: T5, ALBERT; WordLevel) are refused.
//
// NFC tables. tokenizers normalizes NFC with the crate unicode-normalization-alignments 0.1.12 (the
// only release; its src/tables.rs: UNICODE_VERSION = (9, 0, 0)), whose tables lack the characters
// Unicode 10.0 and later added: to it those have combining class 0, no decomposition and no
// composition, so it is wrong on 648 of the 19,074 lines of Unicode 15.0's NormalizationTest.txt
// (e.g. the Telugu nukta U+0C3C is not reordered before a virama, Quranic Arabic marks U+08D3...
// stay where they are, U+11938 is not composed). By default NFC here does the same (ICU's NFC over
// the characters of Unicode 9.0, each later character copied as it is, the text on each side
// normalized on its own), so ids equal transformers' there too. The environment variable
// GF_HF_NFC=unicode (read when a file is loaded; e.g. `GF_HF_NFC=unicode gridformer tokenize ...`
// or preprocess_data) selects Unicode's own NFC (ICU 72, Unicode 15.0) instead; GF_HF_NFC unset,
// empty or `tokenizers` is the default; another value is refused when the file has an NFC
// normalizer. Both checked on all 19,074 lines (tools/hf_nfc_check.py, Qwen2 layout and Qwen2.5's
// file): the default equals tokenizers 0.23.2's ids on every line, `unicode` equals the ids of the
// test file's NFC column. The NFC of added tokens with `normalized: true` follows the same choice.
//
// Special tokens around the text. Megatron's HuggingFaceTokenizer.tokenize(text) is transformers'
// tokenizer(text).input_ids, i.e. add_special_tokens = true: the post_processor's specials are
// included (Llama 3: <|begin_of_text|> first; Qwen2 and GPT-2: none), unless Megatron runs with
// --tokenizer-hf-no-include-special-tokens. encode() returns the ids WITHOUT them, as the other
// tokenizers here do; encode_with_special_tokens() returns special_prefix() + encode() +
// special_suffix(), what Megatron's tokenize() returns. The post_processor may be null, ByteLevel
// (adds nothing), TemplateProcessing (its `single` template: special tokens around one $A),
// RobertaProcessing / BertProcessing (cls $A sep) or a Sequence of these (applied in turn).
// Megatron's tools/preprocess_data.py appends eod itself with --append-eod.
//
// tokenizer_config.json, when it sits next to tokenizer.json, is read as transformers reads it:
//  * eos_token / bos_token (a string or an {"content": ...} object) name eos_id() / bos_id(); one
//    that is not a token of the file is refused (transformers would add it as a new token).
//  * add_bos_token / add_eos_token, when present, must agree with the post_processor (bos first /
//    eos last); add_prefix_space, when true, needs a top-level ByteLevel pre-tokenizer with
//    add_prefix_space; split_special_tokens must not be true. Otherwise the file is refused:
//    whether transformers rebuilds the post-processor or pre-tokenizer from these depends on the
//    tokenizer class and the transformers version.
// eod_id() is Megatron's eod, transformers' eos_token_id: eos_id(). When tokenizer_config.json is
// absent or names no eos_token, eos is the post-processor's one special token after the text (BERT's
// [SEP], RoBERTa's </s>), else the first of "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>",
// "<|im_end|>" that the file has (stderr says which was taken); none: refused (from_file throws).
// bos_id(): tokenizer_config's bos_token; without one, the post_processor's one special token
// before the text, if it has exactly one; else -1. adds_bos(): special_prefix() starts with
// bos_id().
//
// decode() is tokenizers' decode(ids, skip_special_tokens = false) with the ByteLevel decoder:
// each token's characters go back through the byte map (a token with a character outside the map,
// e.g. an added token holding "\n", is its own UTF-8), concatenated and returned as raw bytes, which
// may be invalid UTF-8 where ids split a character (tokenizers replaces those with U+FFFD;
// transformers' clean_up_tokenization_spaces is not applied). An added token with `normalized`
// decodes as its normalized content, as tokenizers does.
//
// vocab_size() is transformers' len(tokenizer) (Megatron's vocab_size), tokenizers'
// get_vocab_size(true): the model vocab plus the added tokens not in it. id_limit() is the largest
// id plus one: the same number unless the ids leave gaps. decode() of an id no token has throws
// std::out_of_range (tokenizers would drop it silently).
//
// Thread safety: all const member functions may be called concurrently. Each thread that encodes
// keeps its own cache of recently encoded pre-tokens (at most 65,536), emptied when the thread
// switches to a tokenizer loaded separately.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gf::data {

class HFTokenizer {
 public:
  // Reads tokenizer_json and, when present, tokenizer_config.json in the same directory. Throws
  // std::runtime_error whose message names the file, the field (e.g. "model.type",
  // "pre_tokenizer.pretokenizers[0]") and the value that is wrong or not supported.
  static HFTokenizer from_file(const std::string& tokenizer_json);

  std::vector<int32_t> encode(std::string_view utf8) const;
  void encode_append(std::string_view utf8, std::vector<int32_t>& out) const;
  // special_prefix() + encode(utf8) + special_suffix(): Megatron's HuggingFaceTokenizer.tokenize.
  std::vector<int32_t> encode_with_special_tokens(std::string_view utf8) const;

  // What encode() hands to the model, in order: each added-token match (its text as matched,
  // stripped spaces included, and its id) and each pre-token (normalized text, ByteLevel's prefix
  // space included, added_token_id -1). For tests and debugging.
  struct PreToken {
    std::string text;
    int32_t added_token_id = -1;
  };
  std::vector<PreToken> pre_tokenize(std::string_view utf8) const;

  // Throws std::out_of_range for an id that no token has.
  std::string decode(std::span<const int32_t> ids) const;

  int32_t eod_id() const;      // Megatron's eod: eos_id()
  int32_t eos_id() const;
  int32_t bos_id() const;      // -1 when none (see above)
  bool adds_bos() const;       // the post_processor puts bos_id() first
  const std::vector<int32_t>& special_prefix() const;  // the post_processor's ids before the text
  const std::vector<int32_t>& special_suffix() const;  // and after it
  int32_t vocab_size() const;  // transformers' len(tokenizer), Megatron's vocab_size
  int32_t id_limit() const;    // largest id + 1 (> vocab_size() only when ids leave gaps)
  int32_t token_to_id(std::string_view token) const;  // model vocab or added token content; -1 if none

  // Copies share the same immutable tables.
  HFTokenizer(const HFTokenizer&);
  HFTokenizer& operator=(const HFTokenizer&);
  HFTokenizer(HFTokenizer&&) noexcept;
  HFTokenizer& operator=(HFTokenizer&&) noexcept;
  ~HFTokenizer();

  struct Impl;

 private:
  explicit HFTokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace gf::data
