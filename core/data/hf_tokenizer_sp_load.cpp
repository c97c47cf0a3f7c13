// Reading the tokenizer.json parts that are not byte-level into HFTokenizer::Impl: a BPE over
// characters (unk_token, fuse_unk, byte_fallback), WordPiece, the Prepend / Replace /
// BertNormalizer normalizers, the Metaspace / Digits / BertPreTokenizer pre-tokenizers, the decoder
// chain, and the end-of-document token of a file that has no tokenizer_config.json to name it.
// What is not supported is refused with its JSON path.
#include <cstdio>
#include <iostream>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>

#include "core/data/hf_tokenizer_impl.h"

namespace gf::data {
using namespace byte_bpe;
using namespace hf;
namespace {

// A string field that must hold exactly one character (Rust's `char`), as UTF-8.
std::string char_field(const HFTokenizer::Impl& impl, const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    impl.fail(where + ": '" + json_type(j) + "' needs '" + key + "', a one-character string");
  const std::string s = it->get<std::string>();
  size_t i = 0;
  if (s.empty() || valid_utf8_prefix(s) != s.size() || (next_code_point(s, i), i != s.size()))
    impl.fail(where + "." + key + " '" + s + "': expected one character");
  return s;
}

// Metaspace's prepend_scheme, with the legacy add_prefix_space (false means never; false with
// another scheme is an error in tokenizers too).
Prepend prepend_scheme(const HFTokenizer::Impl& impl, const json& j, const std::string& where) {
  Prepend scheme = Prepend::kAlways;
  if (auto it = j.find("prepend_scheme"); it != j.end() && !it->is_null()) {
    const std::string s = it->is_string() ? it->get<std::string>() : it->dump();
    if (s == "first") scheme = Prepend::kFirst;
    else if (s == "never") scheme = Prepend::kNever;
    else if (s != "always") impl.fail(where + ".prepend_scheme '" + s + "': expected first, always or never");
  }
  if (auto it = j.find("add_prefix_space"); it != j.end() && it->is_boolean() && !it->get<bool>()) {
    if (scheme != Prepend::kNever) impl.fail(where + ": add_prefix_space false disagrees with prepend_scheme");
  }
  return scheme;
}

// {"String": s} as s; a Regex pattern is refused.
std::string string_pattern(const HFTokenizer::Impl& impl, const json& j, const std::string& where) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) impl.fail(where + ": expected a 'pattern' object");
  if (it->contains("String") && (*it)["String"].is_string()) {
    std::string s = (*it)["String"].get<std::string>();
    if (s.empty()) impl.fail(where + ".pattern.String is empty (not supported)");
    return s;
  }
  impl.fail(where + ".pattern " + it->dump() + ": only a {\"String\": ...} pattern is supported here");
}

std::string string_field(const json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace

void HFTokenizer::Impl::load_char_bpe(const json& model) {
  fuse_unk = json_bool(model, "fuse_unk", false);
  byte_fallback = json_bool(model, "byte_fallback", false);
  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    if (!it->is_string()) fail("model.unk_token: expected a string or null");
    auto found = vocab.find(it->get<std::string>());
    if (found == vocab.end())
      fail("model.unk_token '" + it->get<std::string>() +
           "' is not in model.vocab (tokenizers fails on the first unknown character; not supported)");
    unk_id = found->second;
  }
  fallback_ids.fill(-1);
  for (int b = 0; byte_fallback && b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto found = vocab.find(std::string_view(name)); found != vocab.end()) fallback_ids[b] = found->second;
  }
}

void HFTokenizer::Impl::load_wordpiece(const json& model) {
  const auto v = model.find("vocab");
  if (v == model.end() || !v->is_object()) fail("model.vocab: expected an object (token -> id)");
  std::unordered_map<int32_t, std::string> seen_ids;
  for (const auto& [token, value] : v->items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > std::numeric_limits<int32_t>::max())
      fail("model.vocab: id of '" + token + "' is not a non-negative 32-bit integer");
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    if (auto [it, inserted] = seen_ids.emplace(id, token); !inserted)
      fail("model.vocab: id " + std::to_string(id) + " is used by '" + it->second + "' and '" + token + "'");
    vocab.emplace(token, id);
    token_to_id[token] = id;
  }
  const std::string unk = string_field(model, "unk_token", "[UNK]");
  auto found = vocab.find(unk);
  if (found == vocab.end()) fail("model.unk_token '" + unk + "' is not in model.vocab (not supported)");
  unk_id = found->second;
  wp_prefix = string_field(model, "continuing_subword_prefix", "##");
  if (auto it = model.find("max_input_chars_per_word"); it != model.end() && !it->is_null()) {
    if (!it->is_number_unsigned()) fail("model.max_input_chars_per_word: expected a non-negative integer");
    wp_max_chars = it->get<size_t>();
  }
}

bool HFTokenizer::Impl::load_other_normalizer(const json& j, const std::string& type, const std::string& where) {
  NormStep step;
  if (type == "Prepend") {
    step.kind = NormKind::kPrepend;
    step.text = string_field(j, "prepend", "");
  } else if (type == "Replace") {
    step.kind = NormKind::kReplace;
    step.text = string_pattern(*this, j, where);
    step.content = string_field(j, "content", "");
  } else if (type == "BertNormalizer") {
    step.kind = NormKind::kBert;
    step.clean_text = json_bool(j, "clean_text", true);
    step.chinese_chars = json_bool(j, "handle_chinese_chars", true);
    step.lowercase = json_bool(j, "lowercase", true);
    step.strip_accents = json_bool(j, "strip_accents", step.lowercase);  // null: as lowercase
  } else {
    return false;
  }
  norm_steps.push_back(std::move(step));
  return true;
}

bool HFTokenizer::Impl::load_other_pre_tokenizer(const json& j, const std::string& type, const std::string& where,
                                                 PreStep& step) {
  if (type == "Metaspace") {
    step.kind = PreKind::kMetaspace;
    step.replacement = char_field(*this, j, "replacement", where);
    step.prepend = prepend_scheme(*this, j, where);
    step.split = json_bool(j, "split", true);
  } else if (type == "Digits") {
    step.kind = PreKind::kDigits;
    step.individual_digits = json_bool(j, "individual_digits", false);
  } else if (type == "BertPreTokenizer") {
    step.kind = PreKind::kBert;
  } else {
    return false;
  }
  return true;
}

void HFTokenizer::Impl::load_decoder(const json& j, const std::string& where) {
  if (j.is_null()) {
    null_decoder = true;  // tokenizers joins the tokens with ' '
    return;
  }
  const std::string type = json_type(j);
  DecStep step;
  if (type == "Sequence") {
    const auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) fail(where + ": Sequence without a 'decoders' list");
    for (size_t i = 0; i < it->size(); ++i) {
      if ((*it)[i].is_null()) fail(where + ".decoders[" + std::to_string(i) + "]: null");
      load_decoder((*it)[i], where + ".decoders[" + std::to_string(i) + "]");
    }
    return;
  } else if (type == "ByteFallback") {
    step.kind = DecKind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecKind::kFuse;
  } else if (type == "Strip") {
    step.kind = DecKind::kStrip;
    step.text = char_field(*this, j, "content", where);
    for (const char* key : {"start", "stop"}) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_number_unsigned()) fail(where + "." + key + ": expected a non-negative integer");
      (std::string(key) == "start" ? step.start : step.stop) = it->get<size_t>();
    }
  } else if (type == "Replace") {
    step.kind = DecKind::kReplace;
    step.text = string_pattern(*this, j, where);
    step.content = string_field(j, "content", "");
  } else if (type == "Metaspace") {
    step.kind = DecKind::kMetaspace;
    step.text = char_field(*this, j, "replacement", where);
    step.flag = prepend_scheme(*this, j, where) != Prepend::kNever;
  } else if (type == "WordPiece") {
    step.kind = DecKind::kWordPiece;
    step.text = string_field(j, "prefix", "##");
    step.flag = json_bool(j, "cleanup", true);
  } else {
    fail(where + ": decoder type '" + type +
         "' is not supported (supported: ByteFallback, Fuse, Strip, Replace with a String pattern, Metaspace, WordPiece, "
         "Sequence, null; ByteLevel with a ByteLevel pre-tokenizer)");
  }
  decoders.push_back(std::move(step));
}

// Without a tokenizer_config.json naming eos_token: the post-processor's one special token after
// the text (BERT's [SEP], RoBERTa's </s>), else the first token of a list of usual end-of-text
// names; which one was taken is said on stderr.
void HFTokenizer::Impl::choose_eos() {
  static const char* const kNames[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>"};
  std::string name, why;
  if (suffix.size() == 1) {
    eos = suffix.front();
    for (const auto& [token, id] : token_to_id)
      if (id == eos) name = token;
    why = "the post-processor's special token after the text";
  } else {
    for (const char* candidate : kNames) {
      if (auto it = token_to_id.find(candidate); it != token_to_id.end()) {
        eos = it->second;
        name = candidate;
        why = "the first of <|endoftext|>, <|end_of_text|>, </s>, <eos>, <|im_end|> that the file has";
        break;
      }
    }
  }
  if (eos < 0)
    fail("no end-of-document token: tokenizer_config.json next to it names no eos_token, the post-processor adds " +
         std::string(suffix.empty() ? "no" : "more than one") +
         " special token after the text, and no token is '<|endoftext|>', '<|end_of_text|>', '</s>', '<eos>' or '<|im_end|>'");
  eos_source = "'" + name + "' (id " + std::to_string(eos) + "), " + why;
  // Said once per file and process (tests and data workers load the same file many times).
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(path).second)
    std::cerr << "note: HF tokenizer '" << path << "': no tokenizer_config.json eos_token; end of document is " << eos_source
              << '\n';
}

}  // namespace gf::data
