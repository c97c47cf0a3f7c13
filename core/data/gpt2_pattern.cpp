#include "core/data/gpt2_pattern.h"

#include <string>

namespace gf::data {
namespace {

// The GPT-2 pre-tokenisation pattern, with `\s`, `\p{L}` and `\p{N}` spelled out so that
// PCRE2 matches exactly the characters Python's `regex` module matches. Megatron-LM's
// GPT2BPETokenizer, OpenAI's encoder.py and Hugging Face's GPT2Tokenizer all compile the
// pattern with `regex`; tools/gpt2_encoder_reference.py is our transcription of them.
//
// kSpace is `regex`'s `\s`: the Unicode White_Space property, read off python3-regex
// 2022.10.31 (Debian 12) by testing every code point 0..0x10FFFF
// (tools/make_tokenizer_golden_py.py, tests/golden/tokenizer/python_regex_classes.json).
// It includes U+0085 (NEL). It does not include U+180E (PCRE2's UCP `\s` does, for Perl
// compatibility), U+FEFF (JavaScript's `\s` does), U+200B, U+2060 or U+001C-U+001F (Python's
// `re` and str.isspace() count the last four as space; `regex` does not).
constexpr const char* kSpace =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// `\p{L}` and `\p{N}` are general categories, so they follow the Unicode version of the
// tables: Debian 12's PCRE2 10.42 has Unicode 14.0, python3-regex 2022.10.31 has 15.0. The
// letters and digits Unicode 15.0 added are listed here (4,348 letters, among them CJK
// Extension H, and 40 digits), so that PCRE2 classifies them as `regex` does instead of as
// unassigned (which would put them in [^\s\p{L}\p{N}]). With a PCRE2 on Unicode 15.0 or
// later these ranges are redundant; python_regex_classes.json and the test that walks every
// code point catch a PCRE2 whose tables have moved past `regex`'s.
// The ranges cost about 10% of PCRE2's matching speed even on ASCII text. They all lie in
// U+11000..U+323AF, whose UTF-8 starts with byte 0xF0, so a run of text without a 0xF0 byte
// is split with a second pattern that has plain \p{L} and \p{N}: on such text the two
// patterns match the same pieces.
constexpr const char* kLetter =
    R"(\p{L}\x{1123F}-\x{11240}\x{11F02}\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F})"
    R"(\x{13441}-\x{13446}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A}\x{1E030}-\x{1E06D})"
    R"(\x{1E4D0}-\x{1E4EB}\x{2B739}\x{31350}-\x{323AF})";
constexpr const char* kNumber = R"(\p{N}\x{11F50}-\x{11F59}\x{1D2C0}-\x{1D2D3}\x{1E4F0}-\x{1E4F9})";

//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \s = [kSpace], \S = [^kSpace], \p{L} = [letter], \p{N} = [number].
std::string pattern_with(const std::string& letter, const std::string& number) {
  const std::string ws = kSpace;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?[" + letter + "]+| ?[" + number + "]+| ?[^" + ws + letter +
         number + "]+|[" + ws + "]+(?![^" + ws + "])|[" + ws + "]+";
}

}  // namespace

std::string gpt2_pretoken_pattern(bool unicode15_ranges) {
  return unicode15_ranges ? pattern_with(kLetter, kNumber) : pattern_with(R"(\p{L})", R"(\p{N})");
}

}  // namespace gf::data
