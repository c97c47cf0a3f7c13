#include "core/data/text_tokenizer.h"

#include <filesystem>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "core/data/hf_tokenizer.h"
#include "core/data/sentencepiece_tokenizer.h"
#include "core/data/tokenizer.h"
#include "core/data/wordpiece.h"

namespace gf::data {
namespace {

// Wraps one of the concrete tokenizers; `Bos` puts the bos id in front of every encoding
// (Megatron's _Llama2Tokenizer.tokenize(s, bos=True)).
template <typename Tok>
class Wrapped final : public TextTokenizer {
 public:
  Wrapped(std::string type, Tok tok, int32_t bos = -1) : TextTokenizer(std::move(type)), tok_(std::move(tok)), bos_(bos) {}
  void encode_append(std::string_view utf8, std::vector<int32_t>& out) const override {
    if (bos_ >= 0) out.push_back(bos_);
    tok_.encode_append(utf8, out);
  }
  std::string decode(std::span<const int32_t> ids) const override { return tok_.decode(ids); }
  int32_t eod_id() const override { return tok_.eod_id(); }
  int32_t vocab_size() const override {
    if constexpr (std::is_same_v<Tok, SentencePieceTokenizer>) return bos_ >= 0 ? tok_.piece_size() : tok_.vocab_size();
    return tok_.vocab_size();
  }

 private:
  Tok tok_;
  int32_t bos_;
};

// Megatron's HuggingFaceTokenizer: tokenize(text) is transformers' tokenizer(text).input_ids, the
// post-processor's special tokens (Llama 3's <|begin_of_text|>) included; eod = eos_token_id.
class HuggingFace final : public TextTokenizer {
 public:
  HuggingFace(std::string type, HFTokenizer tok) : TextTokenizer(std::move(type)), tok_(std::move(tok)) {}
  void encode_append(std::string_view utf8, std::vector<int32_t>& out) const override {
    const auto& pre = tok_.special_prefix();
    out.insert(out.end(), pre.begin(), pre.end());
    tok_.encode_append(utf8, out);
    const auto& post = tok_.special_suffix();
    out.insert(out.end(), post.begin(), post.end());
  }
  std::string decode(std::span<const int32_t> ids) const override { return tok_.decode(ids); }
  int32_t eod_id() const override { return tok_.eod_id(); }
  int32_t vocab_size() const override { return tok_.vocab_size(); }

 private:
  HFTokenizer tok_;
};

void need(const std::string& value, const std::string& option, const std::string& type, const std::string& what) {
  if (value.empty()) throw std::runtime_error("--tokenizer-type " + type + " needs " + option + " (" + what + ")");
}

}  // namespace

const std::vector<std::string>& tokenizer_types() {
  static const std::vector<std::string> types = {"GPT2BPETokenizer",       "BertWordPieceLowerCase",    "BertWordPieceCase",
                                                 "SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer",
                                                 "HuggingFaceTokenizer"};
  return types;
}

std::unique_ptr<TextTokenizer> make_tokenizer(const TokenizerFiles& f) {
  const std::string& t = f.type;
  if (f.vocab_extra_ids != 0 && t != "SentencePieceTokenizer")
    throw std::runtime_error("--vocab-extra-ids is only supported with --tokenizer-type SentencePieceTokenizer");
  if (t == "GPT2BPETokenizer") {
    need(f.vocab_file, "--vocab-file", t, "gpt2-vocab.json");
    need(f.merge_file, "--merge-file", t, "gpt2-merges.txt");
    return std::make_unique<Wrapped<GPT2Tokenizer>>(t, GPT2Tokenizer::from_files(f.vocab_file, f.merge_file));
  }
  if (t == "BertWordPieceLowerCase" || t == "BertWordPieceCase") {
    need(f.vocab_file, "--vocab-file", t, "a BERT vocab.txt");
    return std::make_unique<Wrapped<WordPieceTokenizer>>(
        t, WordPieceTokenizer::from_file(f.vocab_file, t == "BertWordPieceLowerCase"));
  }
  if (t == "SentencePieceTokenizer" || t == "GPTSentencePieceTokenizer" || t == "Llama2Tokenizer") {
    need(f.tokenizer_model, "--tokenizer-model", t, "a SentencePiece tokenizer.model");
    auto sp = SentencePieceTokenizer::from_file(f.tokenizer_model, t == "SentencePieceTokenizer", f.vocab_extra_ids);
    int32_t bos = -1;
    if (t == "Llama2Tokenizer") {
      bos = sp.bos_id();
      if (bos < 0) throw std::runtime_error(f.tokenizer_model + ": Llama2Tokenizer needs a model with a bos piece");
    }
    return std::make_unique<Wrapped<SentencePieceTokenizer>>(t, std::move(sp), bos);
  }
  if (t == "HuggingFaceTokenizer") {
    need(f.tokenizer_model, "--tokenizer-model", t, "a Hugging Face tokenizer.json or its directory");
    std::string path = f.tokenizer_model;
    if (std::filesystem::is_directory(path)) path = (std::filesystem::path(path) / "tokenizer.json").string();
    return std::make_unique<HuggingFace>(t, HFTokenizer::from_file(path));
  }
  std::string list;
  for (const std::string& n : tokenizer_types()) {
    if (!list.empty()) list += ", ";
    list += n;
  }
  throw std::runtime_error("--tokenizer-type " + t + " is not supported; supported: " + list);
}

std::string tokenizer_type_from_mindformers(const std::string& type) {
  if (type == "GPT2Tokenizer" || type == "GPT2TokenizerFast") return "GPT2BPETokenizer";
  if (type == "LlamaTokenizer" || type == "LlamaTokenizerFast") return "Llama2Tokenizer";
  if (type == "BertTokenizer" || type == "BertTokenizerFast") return "BertWordPieceLowerCase";
  for (const std::string& n : tokenizer_types())
    if (n == type) return n;
  return "";
}

}  // namespace gf::data
