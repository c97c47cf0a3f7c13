// preprocess_data: tokenize a JSONL (or plain text) corpus into Megatron indexed datasets
// {output-prefix}_{key}_document.bin/.idx, byte for byte what Megatron-LM's
// tools/preprocess_data.py writes for the same tokens. See docs/data.md.
//
//   preprocess_data --input corpus.jsonl --output-prefix data/corpus --vocab-file gpt2-vocab.json
//                   --merge-file gpt2-merges.txt --append-eod --workers 2
//   preprocess_data --input corpus.jsonl --output-prefix data/bert --vocab-file vocab.txt
//                   --tokenizer-type BertWordPieceLowerCase --append-eod
//   preprocess_data --input corpus.jsonl --output-prefix data/llama --tokenizer-model tokenizer.model
//                   --tokenizer-type SentencePieceTokenizer --append-eod
//
// Tokenizer types (Megatron's names): GPT2BPETokenizer (vocab.json + merges.txt, eod
// <|endoftext|>), BertWordPieceLowerCase and BertWordPieceCase (BERT vocab.txt, no merges file;
// eod is Megatron's: [EOS], added to the vocabulary after [BOS] when absent), SentencePieceTokenizer
// (SentencePiece tokenizer.model via --tokenizer-model; Megatron's special tokens <CLS> <SEP> <EOD>
// <MASK> are added and cut out of the text, eod is <EOD>, not the model's eos) and
// GPTSentencePieceTokenizer (the same model, plain EncodeAsIds, eod = the model's eos) and
// Llama2Tokenizer (the model's bos, then EncodeAsIds; eod = the model's eos). core/data/text_tokenizer.h.
//
// Documents are read in batches, encoded by --workers threads and written in input order, so
// the output does not depend on the number of workers.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/chat_template.h"
#include "core/data/gpt_dataset.h"
#include "core/data/indexed_dataset.h"
#include "core/data/sentence_split.h"
#include "core/data/text_tokenizer.h"

namespace {

using gf::data::IndexedDatasetBuilder;

using Tokenizer = gf::data::TextTokenizer;

struct Options {
  std::string input, output_prefix, vocab_file, merge_file, tokenizer_model;
  int vocab_extra_ids = 0;
  std::string input_format = "auto";  // auto | jsonl | text
  std::vector<std::string> json_keys{"text"};
  std::string tokenizer_type = "GPT2BPETokenizer";
  std::string dump_ids;  // optional JSONL dump of the ids written (used by the Megatron check)
  bool append_eod = false;
  std::string sft;  // "" | alpaca | chat
  std::string chat_template;  // --sft chat, HuggingFaceTokenizer: a --chat-template name, not the file's template
  bool split_sentences = false, keep_newlines = false;  // Megatron's --split-sentences, --keep-newlines
  std::string lang = "english";                         // Megatron's --lang (punkt's language name)
  int workers = 1;
  int64_t log_interval = 1000;
};

// One input document: a JSONL line or a plain-text paragraph.
struct Record {
  int64_t line = 0;  // 1-based line where it starts (the 1-based element of a JSON array)
  std::string text;
  bool element = false;  // an element of a JSON array
  std::string where(const std::string& input) const {
    return input + (element ? " element " : ":") + std::to_string(line);
  }
};

// Token ids of one document for one key, split into sentences as Megatron's Encoder.encode does.
struct EncodedKey {
  std::vector<int32_t> ids;
  std::vector<int32_t> lengths;
  std::vector<int32_t> loss_mask;  // --sft: 1 for a token trained as a target, 0 for a prompt's
};

struct Encoded {
  std::vector<EncodedKey> keys;
  std::string error;  // non-empty: the record could not be processed
};

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
}

// Reads records: one per non-blank line (jsonl), one per element of a JSON array (a file whose first
// non-blank character is `[`: Stanford's alpaca_data.json and MindFormers' alpaca_converter.py output),
// or one per paragraph of lines separated by blank lines (text; the paragraph's lines are joined with '\n').
class InputReader {
 public:
  InputReader(const std::string& path, bool text_mode) : in_(path, std::ios::binary), text_mode_(text_mode) {
    if (!in_) throw std::runtime_error(path + ": cannot open");
    total_bytes_ = std::filesystem::file_size(path);
    if (!text_mode_ && (in_ >> std::ws).peek() == '[') read_array(path);
    in_.clear();
    in_.seekg(0);
  }
  std::optional<Record> next() {
    if (array_) return next_element();
    return text_mode_ ? next_paragraph() : next_line();
  }
  bool is_array() const { return array_; }
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  bool getline(std::string* line) {
    if (!std::getline(in_, *line)) return false;
    bytes_read_ += line->size() + (in_.eof() ? 0 : 1);
    ++line_no_;
    return true;
  }
  std::optional<Record> next_line() {
    std::string line;
    while (getline(&line))
      if (!is_blank(line)) return Record{line_no_, std::move(line)};
    return std::nullopt;
  }
  std::optional<Record> next_paragraph() {
    std::string line;
    Record rec;
    while (getline(&line)) {
      if (is_blank(line)) {
        if (rec.line != 0) return rec;
        continue;
      }
      if (rec.line == 0) rec.line = line_no_;
      else rec.text += '\n';
      rec.text += line;
    }
    if (rec.line != 0) return rec;
    return std::nullopt;
  }

  void read_array(const std::string& path) {
    try {
      elements_ = nlohmann::json::parse(in_);
    } catch (const nlohmann::json::parse_error& e) {
      throw std::runtime_error(path + ": starts with `[` but is not one JSON array (" + e.what() +
                               "); give a JSON array of objects, or JSON Lines (one object per line)");
    }
    array_ = true;
  }
  std::optional<Record> next_element() {
    if (next_ >= elements_.size()) return std::nullopt;
    Record rec{static_cast<int64_t>(next_ + 1), elements_[next_].dump(), true};
    elements_[next_++] = nullptr;  // each element's text is all that is kept
    bytes_read_ = total_bytes_ * next_ / elements_.size();
    return rec;
  }

  std::ifstream in_;
  bool text_mode_;
  bool array_ = false;
  nlohmann::json elements_;
  size_t next_ = 0;
  uint64_t total_bytes_ = 0, bytes_read_ = 0;
  int64_t line_no_ = 0;
};

EncodedKey encode_sentences(const Tokenizer& tok, const std::vector<std::string>& sentences, bool append_eod) {
  EncodedKey out;
  for (const std::string& sentence : sentences) {
    const size_t before = out.ids.size();
    tok.encode_append(sentence, out.ids);
    if (out.ids.size() > before) out.lengths.push_back(static_cast<int32_t>(out.ids.size() - before));
  }
  if (!out.ids.empty() && append_eod) {
    out.ids.push_back(tok.eod_id());
    out.lengths.back() += 1;
  }
  return out;
}

// The sentences stored under `key`: a string is one sentence, a list of strings is several.
std::vector<std::string> sentences_of(const nlohmann::json& doc, const std::string& key, const std::string& where) {
  const auto it = doc.find(key);
  if (it == doc.end()) throw std::runtime_error(where + ": key \"" + key + "\" missing");
  if (it->is_string()) return {it->get<std::string>()};
  if (it->is_array() && std::all_of(it->begin(), it->end(), [](const auto& v) { return v.is_string(); }))
    return it->get<std::vector<std::string>>();
  throw std::runtime_error(where + ": key \"" + key + "\" is not a string or a list of strings");
}

// --sft: a JSON field that must be a string ("" when absent and `optional`).
std::string field(const nlohmann::json& doc, const std::string& key, const std::string& where, bool optional = false) {
  const auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) {
    if (optional) return "";
    throw std::runtime_error(where + ": key \"" + key + "\" missing");
  }
  if (!it->is_string()) throw std::runtime_error(where + ": key \"" + key + "\" is not a string");
  return it->get<std::string>();
}

void add_piece(const Tokenizer& tok, const std::string& text, int32_t trained, EncodedKey& out) {
  const size_t before = out.ids.size();
  tok.encode_append(text, out.ids);
  out.loss_mask.resize(out.ids.size(), 0);
  std::fill(out.loss_mask.begin() + static_cast<std::ptrdiff_t>(before), out.loss_mask.end(), trained);
}

// Stanford Alpaca's prompt (its train.py PROMPT_DICT, which MindFormers' alpaca data follows).
std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  if (input.empty())
    return std::string("Below is an instruction that describes a task. Write a response that appropriately completes the "
                       "request.\n\n### Instruction:\n") + instruction + "\n\n### Response:\n";
  return std::string("Below is an instruction that describes a task, paired with an input that provides further context. "
                     "Write a response that appropriately completes the request.\n\n### Instruction:\n") +
         instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n";
}

// --sft chat: the turns of one conversation, ShareGPT's {"conversations": [{"from": "system"|"human"|"gpt",
// "value"}]} (what MindFormers' alpaca_converter writes) or {"messages": [{"role": "system"|"user"|"assistant",
// "content", "reasoning_content" (optional: Qwen3's templates render it)}]}. Tool calls are not supported.
std::vector<gf::data::ChatMessage> chat_messages(const nlohmann::json& doc, const std::string& where) {
  const bool sharegpt = doc.contains("conversations");
  const auto it = doc.find(sharegpt ? "conversations" : "messages");
  if (it == doc.end() || !it->is_array())
    throw std::runtime_error(where +
                             ": --sft chat expects \"conversations\" (ShareGPT) or \"messages\" as a list of turns");
  std::vector<gf::data::ChatMessage> turns;
  bool answered = false;
  for (size_t t = 0; t < it->size(); ++t) {
    const nlohmann::json& turn = (*it)[t];
    const std::string at = where + ": turn " + std::to_string(t + 1);
    if (!turn.is_object()) throw std::runtime_error(at + " is not an object");
    gf::data::ChatMessage m;
    m.role = field(turn, sharegpt ? "from" : "role", at);
    m.content = field(turn, sharegpt ? "value" : "content", at);
    if (m.role == "human") m.role = "user";
    if (m.role == "gpt") m.role = "assistant";
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      throw std::runtime_error(at + ": role \"" + m.role + "\" is not system, user/human or assistant/gpt");
    if (turn.contains("tool_calls")) throw std::runtime_error(at + ": tool calls are not supported");
    if (const auto r = turn.find("reasoning_content"); r != turn.end() && !r->is_null()) {
      if (!r->is_string()) throw std::runtime_error(at + ": key \"reasoning_content\" is not a string");
      m.reasoning_content = r->get<std::string>();
    }
    answered = answered || m.role == "assistant";
    turns.push_back(std::move(m));
  }
  if (!answered) throw std::runtime_error(where + ": no assistant turn: nothing to train");
  return turns;
}

// One fine-tuning example as one document.
//  alpaca: {"instruction", "input" (optional), "output"} through alpaca_prompt: the prompt's tokens (not
//          trained), the answer's tokens and the end-of-document token (trained). Prompt and answer are
//          encoded apart, so no token spans both.
//  chat with HuggingFaceTokenizer: the model's chat template (core/data/chat_template.h): the tokens of
//          apply_chat_template's text, the assistant turns' content and end-of-turn tokens trained, then
//          the end-of-document token (trained) unless the rendering ends with it.
//  chat with the other tokenizers: each turn in gridformer's ChatML, "<|im_start|>ROLE\n" (not trained) +
//          CONTENT + "<|im_end|>\n" (trained for the assistant's turns only), encoded apart, then the
//          end-of-document token (trained).
EncodedKey encode_sft(const Options& opt, const Tokenizer& tok, const gf::data::ChatEncoder* chat,
                      const nlohmann::json& doc, const std::string& where) {
  EncodedKey out;
  if (opt.sft == "alpaca") {
    add_piece(tok, alpaca_prompt(field(doc, "instruction", where), field(doc, "input", where, true)), 0, out);
    add_piece(tok, field(doc, "output", where), 1, out);
  } else if (chat) {
    const std::vector<gf::data::ChatMessage> turns = chat_messages(doc, where);
    try {
      chat->encode(turns, out.ids, out.loss_mask);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(where + ": " + e.what());
    }
    out.lengths.push_back(static_cast<int32_t>(out.ids.size()));
    return out;
  } else {
    for (const gf::data::ChatMessage& turn : chat_messages(doc, where)) {
      add_piece(tok, std::string("<|im_start|>") + turn.role + "\n", 0, out);
      add_piece(tok, turn.content + "<|im_end|>\n", turn.role == "assistant" ? 1 : 0, out);
    }
  }
  out.ids.push_back(tok.eod_id());
  out.loss_mask.push_back(1);
  out.lengths.push_back(static_cast<int32_t>(out.ids.size()));
  return out;
}

// --split-sentences: the one text's sentences (core/data/sentence_split.h: ICU's sentence breaks kept
// to punkt's rules); otherwise the text as one sentence.
std::vector<std::string> split_if_asked(const Options& opt, std::vector<std::string> texts) {
  if (!opt.split_sentences || texts.size() != 1) return texts;
  gf::data::SentenceSplitOptions so;
  so.lang = opt.lang;
  so.keep_newlines = opt.keep_newlines;
  return gf::data::split_sentences(texts.front(), so);
}

Encoded encode_record(const Options& opt, bool text_mode, const Tokenizer& tok, const gf::data::ChatEncoder* chat,
                      const Record& rec) {
  Encoded out;
  const std::string where = rec.where(opt.input);
  try {
    if (text_mode) {
      out.keys.push_back(encode_sentences(tok, split_if_asked(opt, {rec.text}), opt.append_eod));
      return out;
    }
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(rec.text);
    } catch (const nlohmann::json::parse_error& e) {
      throw std::runtime_error(where + ": invalid JSON: " + e.what() +
                               (opt.input_format == "auto" && rec.line == 1
                                    ? " (a file not named .txt is read as JSON Lines; --input-format text for plain text)"
                                    : ""));
    }
    if (!doc.is_object()) throw std::runtime_error(where + ": " + (rec.element ? "element" : "line") + " is not a JSON object");
    if (!opt.sft.empty()) {
      out.keys.push_back(encode_sft(opt, tok, chat, doc, where));
      return out;
    }
    for (const std::string& key : opt.json_keys) {
      const auto it = doc.find(key);
      // --split-sentences cuts a string into sentences (Megatron's Encoder.split); a list is taken as
      // sentences already (Megatron would stop there: its splitter reads strings only).
      const bool whole = it != doc.end() && it->is_string();
      std::vector<std::string> sentences = sentences_of(doc, key, where);
      if (whole) sentences = split_if_asked(opt, sentences);
      out.keys.push_back(encode_sentences(tok, sentences, opt.append_eod));
    }
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

class Progress {
 public:
  Progress(int64_t interval, uint64_t total_bytes) : interval_(interval), total_bytes_(total_bytes) {}
  void add(int64_t docs, int64_t tokens, uint64_t bytes_read) {
    const int64_t before = docs_ / interval_;
    docs_ += docs, tokens_ += tokens, bytes_ = bytes_read;
    if (docs_ / interval_ != before) print();
  }
  void print() const {
    const double s = std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    const double frac = total_bytes_ ? static_cast<double>(bytes_) / static_cast<double>(total_bytes_) : 1.0;
    const long eta = frac > 0 ? static_cast<long>(s * (1.0 - frac) / frac + 0.5) : 0;
    std::fprintf(stderr, "Processed %lld documents (%.1f docs/s, %.0f tokens/s, %.2f MB/s), %.1f%% of input, ETA %ld:%02ld:%02ld\n",
                 static_cast<long long>(docs_), docs_ / s, tokens_ / s, bytes_ / s / 1048576.0, 100.0 * frac,
                 eta / 3600, eta / 60 % 60, eta % 60);
  }
  int64_t docs() const { return docs_; }
  int64_t tokens() const { return tokens_; }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t interval_;
  uint64_t total_bytes_;
  int64_t docs_ = 0, tokens_ = 0;
  uint64_t bytes_ = 0;
};

bool resolve_text_mode(const Options& opt) {
  if (opt.input_format == "text") return true;
  if (opt.input_format == "jsonl") return false;
  return std::filesystem::path(opt.input).extension() == ".txt";  // auto: .txt is text, anything else JSONL
}

void run(const Options& opt) {
  gf::data::TokenizerFiles files;
  files.type = opt.tokenizer_type;
  files.vocab_file = opt.vocab_file;
  files.merge_file = opt.merge_file;
  files.tokenizer_model = opt.tokenizer_model;
  files.vocab_extra_ids = opt.vocab_extra_ids;
  const std::unique_ptr<Tokenizer> tokenizer = gf::data::make_tokenizer(files);
  const Tokenizer& tok = *tokenizer;
  const bool text_mode = resolve_text_mode(opt);
  if (!opt.sft.empty() && text_mode)
    throw std::runtime_error("--sft reads JSON Lines (one example per line) or a JSON array of examples, not plain text");
  if (!opt.sft.empty() && opt.split_sentences) throw std::runtime_error("--sft writes one example a document: no --split-sentences");
  if (opt.keep_newlines && !opt.split_sentences) throw std::runtime_error("--keep-newlines needs --split-sentences");
  if (opt.split_sentences) (void)gf::data::sentence_split_locale(opt.lang);
  // --sft chat with a Hugging Face tokenizer renders the model's chat template (or --chat-template's).
  if (!opt.chat_template.empty() && opt.sft != "chat") throw std::runtime_error("--chat-template needs --sft chat");
  std::unique_ptr<gf::data::ChatEncoder> chat;
  if (opt.sft == "chat" && opt.tokenizer_type == "HuggingFaceTokenizer") {
    chat = std::make_unique<gf::data::ChatEncoder>(gf::data::ChatEncoder::load(opt.tokenizer_model, opt.chat_template));
    std::printf("chat template: %s (%s)\n", chat->chat_template().description.c_str(), chat->source().c_str());
  } else if (!opt.chat_template.empty()) {
    throw std::runtime_error("--chat-template needs --tokenizer-type HuggingFaceTokenizer (a template's special tokens "
                             "are added tokens of the model's tokenizer.json)");
  }  // an unknown --lang fails here, naming the known ones
  // Megatron's output name: {prefix}_{key}_sentence with --split-sentences, else _document.
  const std::string level = opt.split_sentences ? "_sentence" : "_document";
  const std::vector<std::string> keys = text_mode || !opt.sft.empty() ? std::vector<std::string>{"text"} : opt.json_keys;
  const auto dtype = gf::data::optimal_token_dtype(tok.vocab_size());

  InputReader reader(opt.input, text_mode);
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  for (const std::string& key : keys)
    builders.push_back(std::make_unique<IndexedDatasetBuilder>(opt.output_prefix + "_" + key + level, dtype));
  // --sft: the loss mask beside the ids (core/data/gpt_dataset.h loss_mask_prefix), uint8.
  std::unique_ptr<IndexedDatasetBuilder> mask;
  if (!opt.sft.empty())
    mask = std::make_unique<IndexedDatasetBuilder>(gf::data::loss_mask_prefix(opt.output_prefix + "_text_document"),
                                                   gf::data::DType::kUInt8);
  int64_t trained = 0;
  std::ofstream dump;
  if (!opt.dump_ids.empty()) dump.open(opt.dump_ids, std::ios::binary | std::ios::trunc);
  if (!opt.dump_ids.empty() && !dump) throw std::runtime_error(opt.dump_ids + ": cannot create");

  Progress progress(opt.log_interval, reader.total_bytes());
  const size_t batch_size = 256 * static_cast<size_t>(opt.workers);
  std::vector<Record> batch;
  std::vector<Encoded> encoded;
  for (bool more = true; more;) {
    batch.clear();
    while (batch.size() < batch_size) {
      auto rec = reader.next();
      if (!rec) { more = false; break; }
      batch.push_back(std::move(*rec));
    }
    encoded.assign(batch.size(), {});
    const int64_t n = static_cast<int64_t>(batch.size());
#pragma omp parallel for num_threads(opt.workers) schedule(dynamic, 8)
    for (int64_t i = 0; i < n; ++i) encoded[i] = encode_record(opt, text_mode, tok, chat.get(), batch[i]);
    int64_t tokens = 0;
    for (const Encoded& doc : encoded) {  // written in input order
      if (!doc.error.empty()) throw std::runtime_error(doc.error);
      for (size_t k = 0; k < keys.size(); ++k) {
        builders[k]->add_document(doc.keys[k].ids, doc.keys[k].lengths);
        tokens += static_cast<int64_t>(doc.keys[k].ids.size());
        if (mask) {
          mask->add_document(doc.keys[k].loss_mask, doc.keys[k].lengths);
          for (int32_t m : doc.keys[k].loss_mask) trained += m;
        }
        if (dump.is_open())
          dump << nlohmann::json{{"key", keys[k]}, {"ids", doc.keys[k].ids}, {"lengths", doc.keys[k].lengths}}.dump() << '\n';
      }
    }
    progress.add(n, tokens, reader.bytes_read());
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    builders[k]->finalize();
    std::printf("wrote %s_%s%s.{bin,idx}: %lld documents, %lld sequences, %lld tokens, dtype %s\n",
                opt.output_prefix.c_str(), keys[k].c_str(), level.c_str(), static_cast<long long>(builders[k]->num_documents()),
                static_cast<long long>(builders[k]->num_sequences()), static_cast<long long>(builders[k]->num_tokens()),
                gf::data::dtype_name(dtype));
  }
  if (mask) {
    mask->finalize();
    std::printf("wrote %s.{bin,idx}: the loss mask, %lld of %lld tokens trained as targets (the answers%s and each "
                "example's end-of-document token)\n",
                gf::data::loss_mask_prefix(opt.output_prefix + "_text_document").c_str(), static_cast<long long>(trained),
                static_cast<long long>(mask->num_tokens()), opt.sft == "chat" ? ", their end-of-turn tokens" : "");
  }
  if (dump.is_open() && !dump.flush()) throw std::runtime_error(opt.dump_ids + ": write failed");
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Tokenize a JSONL or text corpus into Megatron indexed datasets ({prefix}_{key}_document.bin/.idx)"};
  app.add_option("--input", opt.input, "input file: JSON Lines with one document per line, a JSON array of documents, or plain text")->required()->check(CLI::ExistingFile);
  app.add_option("--input-format", opt.input_format,
                 "jsonl (JSON Lines, or a JSON array when the file starts with `[`), text (one document per blank-line "
                 "separated paragraph) or auto (.txt is text, else jsonl)")
      ->check(CLI::IsMember({"auto", "jsonl", "text"}))->capture_default_str();
  app.add_option("--json-keys", opt.json_keys, "keys to extract from each JSON line")->capture_default_str();
  app.add_option("--output-prefix", opt.output_prefix, "output path without suffix")->required();
  app.add_option("--vocab-file", opt.vocab_file, "gpt2-vocab.json, or BERT vocab.txt for the BertWordPiece types")
      ->check(CLI::ExistingFile);
  app.add_option("--tokenizer-model", opt.tokenizer_model,
                 "SentencePiece tokenizer.model (SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer), or a Hugging Face tokenizer.json or its directory (HuggingFaceTokenizer)")->check(CLI::ExistingPath);
  app.add_option("--vocab-extra-ids", opt.vocab_extra_ids,
                 "SentencePieceTokenizer: add <extra_id_0>..<extra_id_{N-1}> special tokens, as Megatron")
      ->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_option("--merge-file", opt.merge_file, "gpt2-merges.txt (GPT2BPETokenizer only)")->check(CLI::ExistingFile);
  app.add_option("--tokenizer-type", opt.tokenizer_type, "GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer or HuggingFaceTokenizer (Megatron's names; Llama2Tokenizer puts the model's bos before each document; HuggingFaceTokenizer adds what its post-processor adds, as transformers does)")
      ->capture_default_str();
  app.add_flag("--append-eod", opt.append_eod,
               "append the end-of-document id to every non-empty document: <|endoftext|> (50256) for GPT-2, "
               "[EOS] for the BertWordPiece types, <EOD> for SentencePieceTokenizer, the model's eos for "
               "GPTSentencePieceTokenizer and Llama2Tokenizer, eos_token_id for HuggingFaceTokenizer (Megatron's eod)");
  app.add_flag("--split-sentences", opt.split_sentences,
               "one sequence per sentence (ICU's sentence breaks kept to NLTK punkt's rules, docs/sentence_split.md); "
               "writes {prefix}_{key}_sentence.bin/.idx, as Megatron");
  app.add_flag("--keep-newlines", opt.keep_newlines,
               "with --split-sentences: the whitespace between two sentences stays at the end of the first (Megatron's flag)");
  app.add_option("--lang", opt.lang, "the sentence splitter's language, punkt's names (english, german, french, ...)")
      ->capture_default_str();
  app.add_option("--sft", opt.sft,
                 "supervised fine-tuning data: alpaca ({instruction, input, output}, Stanford Alpaca's prompt) or chat "
                 "(ShareGPT conversations or messages: with HuggingFaceTokenizer in the model's chat template from "
                 "tokenizer_config.json, else in ChatML turns); writes {prefix}_text_document and its loss mask "
                 "{prefix}_text_document_loss_mask (only the answers, their end-of-turn tokens and each example's "
                 "end-of-document token are trained); each example is one document ending with the end-of-document "
                 "token")
      ->check(CLI::IsMember({"alpaca", "chat"}));
  app.add_option("--chat-template", opt.chat_template,
                 "--sft chat with HuggingFaceTokenizer: render this template instead of tokenizer_config.json's "
                 "chat_template (which must otherwise be a known one): chatml, qwen2, qwen2.5, qwen3, llama3, llama3.1 "
                 "or gemma (docs/data.md)")
      ->check(CLI::IsMember(gf::data::chat_template_names()));
  app.add_option("--workers", opt.workers, "encoding threads (output does not depend on it)")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--log-interval", opt.log_interval, "documents between progress lines")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--dump-ids", opt.dump_ids, "also write each document's ids as JSON lines {key, ids, lengths} (for checks)");
  // Exit status 2 for a problem with the command or its input (README "Exit status"), as gridformer's.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "preprocess_data: error: %s (preprocess_data --help)\n", e.what());
    return 2;
  }
  try {
    run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "preprocess_data: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
