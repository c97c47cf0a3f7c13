// GPT-2's pre-tokenisation pattern as Python's `regex` module reads it (Megatron-LM, OpenAI's
// encoder.py and Hugging Face's GPT2Tokenizer all compile it with `regex`), spelled for PCRE2:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with `\s`, `\p{L}` and `\p{N}` written out as the classes `regex` has (gpt2_pattern.cpp says
// which characters and how they were found).
#pragma once
#include <string>

namespace gf::data {

// The pattern for PCRE2 (PCRE2_UTF | PCRE2_UCP). unicode15_ranges: add the letters and digits of
// Unicode 15.0 that Debian's PCRE2 (Unicode 14.0) lacks; without them the pattern splits the same
// way on text that holds no byte kLeadByteOfUnicode15Ranges, and matches about 10% faster.
std::string gpt2_pretoken_pattern(bool unicode15_ranges);

// Every code point of those ranges (U+11000..U+323AF) starts with this byte in UTF-8.
constexpr char kLeadByteOfUnicode15Ranges = '\xF0';

}  // namespace gf::data
