// `gridformer tokenize`: line-by-line GPT-2 BPE encoding/decoding on streams.
#pragma once

#include <iosfwd>
#include <string>

namespace gf::data {

// Loads the GPT-2 vocab/merges files, then reads `in` line by line (lines end at '\n'; a
// '\r' before it is kept as part of the text, so CRLF input round-trips).
//  * encode (decode == false): writes, for every input line, its ids separated by single
//    spaces on one output line (an empty input line gives an empty output line).
//  * decode (decode == true): every input line holds whitespace-separated ids; writes the
//    decoded bytes followed by '\n'.
// A final line without '\n' is processed like the others. Returns 0 on success; on a bad
// vocab/merges file, a malformed or out-of-range id, or an output error, prints a message
// naming the problem (and the line number) to std::cerr and returns 1.
int run_tokenize(const std::string& vocab, const std::string& merges, bool decode, std::istream& in,
                 std::ostream& out);

}  // namespace gf::data
