#include "runner/infer/lambada.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace gf {

namespace {

// The code point at text[i] and its length in bytes; an invalid byte is returned as itself, one
// byte long (it is never whitespace). Texts from read_lambada are valid UTF-8: nlohmann::json
// refuses any other.
char32_t code_point_at(std::string_view text, size_t i, size_t& len) {
  const auto b = static_cast<unsigned char>(text[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) {
    len = 1;
    return b;
  }
  char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(text[i + k]);
    if ((c >> 6) != 0x2) {
      len = 1;
      return b;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  len = n;
  return cp;
}

// Python's str.isspace(), the set str.split() and str.strip() cut at (Megatron's get_tokens uses
// both): the characters of Unicode's bidirectional classes WS, B and S and general category Zs.
// Listed from CPython 3.11 (`[c for c in range(0x110000) if chr(c).isspace()]`); note that it holds
// U+001C..U+001F, which the tokenizer's regex `\s` does not.
bool python_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The words of text.split(), as [begin, end) byte ranges.
std::vector<std::pair<size_t, size_t>> python_split(std::string_view text) {
  std::vector<std::pair<size_t, size_t>> words;
  size_t i = 0, begin = 0;
  bool in_word = false;
  while (i < text.size()) {
    size_t len = 1;
    const bool space = python_isspace(code_point_at(text, i, len));
    if (space && in_word) words.emplace_back(begin, i);
    if (!space && !in_word) begin = i;
    in_word = !space;
    i += len;
  }
  if (in_word) words.emplace_back(begin, text.size());
  return words;
}

// text.strip(): without leading and trailing str.isspace() characters.
std::string_view python_strip(std::string_view text) {
  const auto words = python_split(text);
  if (words.empty()) return {};
  return text.substr(words.front().first, words.back().second - words.front().first);
}

}  // namespace

ClozeItem split_cloze_text(std::string_view text, const data::TextTokenizer& tok, bool strict) {
  const auto words = python_split(text);
  if (words.empty()) throw std::invalid_argument("\"text\" is empty (or only whitespace); give the passage");
  if (words.size() == 1)
    throw std::invalid_argument(
        "\"text\" is one word, so there is no context to predict it from (Megatron would count its first "
        "token correct without a prediction); give the passage with its last word");
  ClozeItem item;
  if (!strict) {
    std::vector<int32_t> tokens = tok.encode(text);
    item.target = {tokens.back()};
    tokens.pop_back();
    item.context = std::move(tokens);
    return item;
  }
  const std::string_view word = text.substr(words.back().first, words.back().second - words.back().first);
  const size_t start = text.rfind(word);
  item.context = tok.encode(python_strip(text.substr(0, start)));
  std::string spaced(1, ' ');  // built by append: GCC 12 -O3 warns (-Wrestrict, falsely) on " " + std::string(word)
  spaced.append(word);
  item.target = tok.encode(spaced);
  return item;
}

std::vector<ClozeItem> read_lambada(const std::string& jsonl_path, const data::TextTokenizer& tok, bool strict) {
  std::ifstream in(jsonl_path, std::ios::binary);
  if (!in)
    throw std::runtime_error(fmt::format("LAMBADA file {}: cannot open it (give a JSON-lines file with one "
                                         "{{\"text\": ...}} object a line)", jsonl_path));
  std::vector<ClozeItem> items;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    auto fail = [&](const std::string& what) {
      throw std::runtime_error(fmt::format("LAMBADA file {} line {}: {}", jsonl_path, n, what));
    };
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      const bool blank = std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
      fail(blank ? std::string("blank line; every line must be one JSON object such as {\"text\": \"...\"}")
                 : fmt::format("not JSON ({}); every line must be one JSON object such as {{\"text\": \"...\"}}",
                               e.what()));
    }
    if (!j.is_object()) fail(fmt::format("a JSON {}, not an object with a \"text\" string", j.type_name()));
    const auto it = j.find("text");
    if (it == j.end()) fail("no \"text\" key; every line needs {\"text\": \"the passage\"}");
    if (!it->is_string()) fail(fmt::format("\"text\" is a {}, not a string", it->type_name()));
    try {
      items.push_back(split_cloze_text(it->get_ref<const std::string&>(), tok, strict));
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    items.back().line = n;
  }
  if (in.bad()) throw std::runtime_error(fmt::format("LAMBADA file {}: read error", jsonl_path));
  if (items.empty())
    throw std::runtime_error(fmt::format("LAMBADA file {}: no lines; give one {{\"text\": ...}} object a line",
                                         jsonl_path));
  return items;
}

double ClozeResult::accuracy() const {
  return items > 0 ? static_cast<double>(correct) / static_cast<double>(items) : 0.0;
}

ClozeResult cloze_accuracy(const std::vector<ClozeItem>& items, const GreedyFn& greedy, int64_t max_len,
                           int64_t batch, const std::string& source) {
  if (max_len < 1) throw std::invalid_argument(fmt::format("cloze accuracy: max_len {} must be at least 1", max_len));
  if (batch < 1) throw std::invalid_argument(fmt::format("cloze accuracy: batch {} must be at least 1", batch));
  // Every item checked before the first call, so a long line stops the evaluation at once.
  for (const ClozeItem& it : items) {
    if (it.context.empty() || it.target.empty())
      throw std::invalid_argument(fmt::format("{} line {}: empty context or target", source, it.line));
    const auto input = static_cast<int64_t>(it.context.size() + it.target.size()) - 1;
    if (input > max_len)
      throw std::invalid_argument(fmt::format(
          "{} line {}: context and last word are {} tokens, {} more than the model's seq_length {} + 1; Megatron "
          "does not truncate a passage (it fails on it): shorten the passage or evaluate with a longer seq_length",
          source, it.line, input + 1, input - max_len, max_len));
  }
  ClozeResult r;
  std::vector<std::vector<int32_t>> inputs, argmax;
  for (size_t first = 0; first < items.size(); first += static_cast<size_t>(batch)) {
    const size_t last = std::min(items.size(), first + static_cast<size_t>(batch));
    inputs.resize(last - first);
    for (size_t i = first; i < last; ++i) {
      std::vector<int32_t>& x = inputs[i - first];
      x = items[i].context;
      x.insert(x.end(), items[i].target.begin(), items[i].target.end() - 1);
    }
    greedy(inputs, argmax);
    if (argmax.size() != inputs.size())
      throw std::logic_error(fmt::format("cloze accuracy: the greedy function returned {} rows for a batch of {}",
                                         argmax.size(), inputs.size()));
    for (size_t i = first; i < last; ++i) {
      const ClozeItem& it = items[i];
      const std::vector<int32_t>& pred = argmax[i - first];
      if (pred.size() != inputs[i - first].size())
        throw std::logic_error(fmt::format("cloze accuracy: the greedy function returned {} predictions for the "
                                           "{} tokens of {} line {}", pred.size(), inputs[i - first].size(),
                                           source, it.line));
      // The token after position ctx-1+j is target[j].
      const size_t at = it.context.size() - 1;
      bool ok = true;
      for (size_t j = 0; j < it.target.size(); ++j) ok = ok && pred[at + j] == it.target[j];
      r.correct += ok ? 1 : 0;
      ++r.items;
    }
  }
  return r;
}

}  // namespace gf
