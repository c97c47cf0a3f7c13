// `gridformer tokenize`: line-by-line encoding/decoding on streams, with Megatron's tokenizer types
// (core/data/text_tokenizer.h: GPT-2 BPE, BERT WordPiece, SentencePiece).
#pragma once

#include <iosfwd>
#include <string>

#include "core/data/text_tokenizer.h"

namespace CLI {
class App;
}

namespace gf::data {

// Loads the tokenizer `files` names (make_tokenizer), then reads `in` line by line (lines end at '\n'; a
// '\r' before it is kept as part of the text, so CRLF input round-trips).
//  * encode (decode == false): writes, for every input line, its ids separated by single
//    spaces on one output line (an empty input line gives an empty output line).
//  * decode (decode == true): every input line holds whitespace-separated ids; writes the
//    decoded bytes followed by '\n'.
// A final line without '\n' is processed like the others. Returns 0 on success; on a bad
// tokenizer file or option, a malformed or out-of-range id, or an output error, prints a message
// naming the problem (and the line number) to std::cerr and returns 1.
int run_tokenize(const TokenizerFiles& files, bool decode, std::istream& in, std::ostream& out);
// GPT2BPETokenizer from its two files.
int run_tokenize(const std::string& vocab, const std::string& merges, bool decode, std::istream& in, std::ostream& out);

// `gridformer tokenize`'s options, filling `files` and `decode` (runner/cli/tokenize_cli.cpp).
CLI::App* add_tokenize_command(CLI::App& app, TokenizerFiles& files, bool& decode);

}  // namespace gf::data
