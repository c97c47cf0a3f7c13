// Hugging Face tokenizers compile a Split pre-tokenizer's `{"Regex": ...}` with Oniguruma (Ruby
// syntax); gridformer matches with PCRE2. translate_oniguruma rewrites a pattern into PCRE2 syntax
// (hf_tokenizer.h lists the rules it keeps and the constructs it refuses) and closes the gap between
// the two libraries' Unicode tables: PCRE2 10.42 knows Unicode 14.0, Oniguruma in tokenizers 0.23
// 15.0, so every \p{...} gets the characters 15.0 added to it (from ICU).
#pragma once
#include <string>

namespace gf::data {

// `full`: the pattern in PCRE2 syntax, each \p{...} with the characters Unicode 15.0 added to it;
// `plain`: the same without them (enough for text in which none of them can occur). lowest / highest:
// the extent of those characters (lowest > highest when none; both only widened, so the caller starts
// them at an empty range). Returns an empty string on success, else what is not supported, with its
// offset in p.
std::string translate_oniguruma(const std::string& p, std::string& full, std::string& plain, char32_t& lowest,
                                char32_t& highest);

}  // namespace gf::data
