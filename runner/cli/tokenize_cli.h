// `gridformer tokenize`: line-by-line encoding/decoding on streams, with Megatron's tokenizer types:
// GPT2BPETokenizer (vocab.json + merges.txt) or BertWordPieceLowerCase / BertWordPieceCase (vocab.txt).
#pragma once

#include <iosfwd>
#include <string>

namespace gf::data {

// Loads the tokenizer of `type` (GPT-2: the vocab/merges files; WordPiece: the vocab.txt), then reads `in` line by line (lines end at '\n'; a
// '\r' before it is kept as part of the text, so CRLF input round-trips).
//  * encode (decode == false): writes, for every input line, its ids separated by single
//    spaces on one output line (an empty input line gives an empty output line).
//  * decode (decode == true): every input line holds whitespace-separated ids; writes the
//    decoded bytes followed by '\n'.
// A final line without '\n' is processed like the others. Returns 0 on success; on a bad
// vocab/merges file, a malformed or out-of-range id, or an output error, prints a message
// naming the problem (and the line number) to std::cerr and returns 1.
int run_tokenize(const std::string& vocab, const std::string& merges, bool decode, std::istream& in,
                 std::ostream& out, const std::string& type = "GPT2BPETokenizer");

}  // namespace gf::data
