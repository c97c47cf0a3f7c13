// One interface over the tokenizers that Megatron-LM's --tokenizer-type names, so preprocess_data,
// `gridformer tokenize`, predict and LAMBADA take the same types with the same files:
//   GPT2BPETokenizer            --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt
//   BertWordPieceLowerCase      --vocab-file vocab.txt (BERT's uncased basic tokenizer + WordPiece)
//   BertWordPieceCase           --vocab-file vocab.txt (cased)
//   SentencePieceTokenizer      --tokenizer-model tokenizer.model (Megatron's added <CLS> <SEP> <EOD>
//                               <MASK> ...; eod = <EOD>)
//   GPTSentencePieceTokenizer   --tokenizer-model tokenizer.model (plain SentencePiece; eod = eos)
//   Llama2Tokenizer             --tokenizer-model tokenizer.model (Megatron's _Llama2Tokenizer:
//                               SentencePiece ids with the model's bos in front; eod = eos)
//   HuggingFaceTokenizer        --tokenizer-model tokenizer.json (or its directory): byte-level BPE
//                               (Llama 3, Qwen2, GPT-2 style; core/data/hf_tokenizer.h), the
//                               post-processor's special tokens included as transformers adds them;
//                               eod = eos_token_id
// MindFormers' processor.tokenizer types map onto them (tokenizer_type_from_mindformers).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gf::data {

struct TokenizerFiles {
  std::string type = "GPT2BPETokenizer";  // Megatron's --tokenizer-type
  std::string vocab_file, merge_file;     // GPT-2 BPE, BERT vocab.txt
  std::string tokenizer_model;            // SentencePiece tokenizer.model, or a Hugging Face tokenizer.json
  int vocab_extra_ids = 0;                // SentencePieceTokenizer only (Megatron's --vocab-extra-ids)
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  // Appends the ids of `utf8` as Megatron's tokenizer.tokenize(text) gives them.
  virtual void encode_append(std::string_view utf8, std::vector<int32_t>& out) const = 0;
  std::vector<int32_t> encode(std::string_view utf8) const {
    std::vector<int32_t> out;
    encode_append(utf8, out);
    return out;
  }
  // Megatron's detokenize. Throws std::out_of_range for an id outside the vocabulary.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int32_t eod_id() const = 0;      // Megatron's tokenizer.eod
  virtual int32_t vocab_size() const = 0;  // Megatron's tokenizer.vocab_size (before padding)
  const std::string& type() const { return type_; }

 protected:
  explicit TextTokenizer(std::string type) : type_(std::move(type)) {}

 private:
  std::string type_;
};

// The Megatron types make_tokenizer knows, in the order --help lists them.
const std::vector<std::string>& tokenizer_types();

// Loads the tokenizer `files.type` names. Throws std::runtime_error naming the option that is
// missing (--vocab-file, --merge-file, --tokenizer-model), the file that cannot be read, or the
// unknown type with the supported ones.
std::unique_ptr<TextTokenizer> make_tokenizer(const TokenizerFiles& files);

// MindFormers' processor.tokenizer.type as Megatron's type: GPT2Tokenizer -> GPT2BPETokenizer,
// LlamaTokenizer / LlamaTokenizerFast -> Llama2Tokenizer (tokenizer.model, bos added), BertTokenizer ->
// BertWordPieceLowerCase; a Megatron name is returned as it is; "" for a type it cannot map.
std::string tokenizer_type_from_mindformers(const std::string& type);

}  // namespace gf::data
