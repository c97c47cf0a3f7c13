#include "runner/cli/tokenize_cli.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>


namespace gf::data {
namespace {

void write_ids(const std::vector<int32_t>& ids, std::string& buffer) {
  char number[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) buffer.push_back(' ');
    auto [end, ec] = std::to_chars(number, number + sizeof(number), ids[i]);
    buffer.append(number, end);
  }
  buffer.push_back('\n');
}

// Parses whitespace-separated decimal ids; throws std::invalid_argument on anything else.
std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  const char* p = line.data();
  const char* end = p + line.size();
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  while (p < end) {
    if (is_space(*p)) {
      ++p;
      continue;
    }
    int32_t id = 0;
    auto [next, ec] = std::from_chars(p, end, id);
    if (ec != std::errc() || (next < end && !is_space(*next))) {
      const char* word_end = p;
      while (word_end < end && !is_space(*word_end)) ++word_end;
      throw std::invalid_argument("'" + std::string(p, word_end) + "' is not a token id");
    }
    ids.push_back(id);
    p = next;
  }
  return ids;
}

void process_lines(const TextTokenizer& tokenizer, bool decode, std::istream& in, std::ostream& out) {
  std::string line, buffer;
  std::vector<int32_t> ids;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    try {
      if (decode) {
        buffer += tokenizer.decode(parse_ids(line));
        buffer.push_back('\n');
      } else {
        ids.clear();
        tokenizer.encode_append(line, ids);
        write_ids(ids, buffer);
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("input line " + std::to_string(line_no) + ": " + e.what());
    }
    if (buffer.size() >= (1u << 16)) {
      out << buffer;
      buffer.clear();
    }
  }
  out << buffer;
  out.flush();
  if (!out) throw std::runtime_error("cannot write the output");
}

}  // namespace

int run_tokenize(const TokenizerFiles& files, bool decode, std::istream& in, std::ostream& out) {
  try {
    process_lines(*make_tokenizer(files), decode, in, out);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gridformer tokenize: " << e.what() << '\n';
    return 2;  // a problem with the input or the tokenizer files (README "Exit status")
  }
}

int run_tokenize(const std::string& vocab, const std::string& merges, bool decode, std::istream& in, std::ostream& out) {
  TokenizerFiles files;
  files.vocab_file = vocab;
  files.merge_file = merges;
  return run_tokenize(files, decode, in, out);
}

// `gridformer tokenize`'s options.
CLI::App* add_tokenize_command(CLI::App& app, TokenizerFiles& files, bool& decode) {
  auto* tok = app.add_subcommand("tokenize", "each stdin line -> its ids space-separated (or back with --decode), with "
                                             "GPT-2 BPE, BERT WordPiece or SentencePiece (--tokenizer-type)");
  tok->add_option("--vocab-file", files.vocab_file,
                  "gpt2-vocab.json (encoder.json), or a BERT vocab.txt for the WordPiece types")->check(CLI::ExistingFile);
  tok->add_option("--merge-file", files.merge_file, "gpt2-merges.txt (vocab.bpe); GPT2BPETokenizer only")
      ->check(CLI::ExistingFile);
  tok->add_option("--tokenizer-model", files.tokenizer_model,
                  "SentencePiece tokenizer.model (SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer), or a "
                  "Hugging Face tokenizer.json or its directory (HuggingFaceTokenizer)")->check(CLI::ExistingPath);
  tok->add_option("--tokenizer-type", files.type,
                  "Megatron's name: GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, SentencePieceTokenizer, "
                  "GPTSentencePieceTokenizer, Llama2Tokenizer or HuggingFaceTokenizer (--tokenizer-model tokenizer.json)")->capture_default_str();
  tok->add_flag("--decode", decode, "read ids, print text");
  return tok;
}

}  // namespace gf::data
