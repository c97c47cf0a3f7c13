// Reading a Hugging Face tokenizer's added tokens (tokenizer.json's added_tokens) and the bos / eos of the
// tokenizer_config.json beside it into HFTokenizer::Impl (the rest of the file: hf_tokenizer_load.cpp). What is not
// supported is refused with its JSON path.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "core/data/hf_tokenizer_impl.h"

namespace gf::data {
using namespace byte_bpe;
using namespace hf;

void HFTokenizer::Impl::load_added_tokens(const json& tokens, size_t model_size) {
  if (tokens.is_null()) return;
  if (!tokens.is_array()) fail("added_tokens: expected a list");
  // AddedVocabulary::add_tokens: a content already known keeps its id, others get the next id
  // counted from the model vocab's size.
  int64_t next_id = static_cast<int64_t>(model_size);
  std::unordered_map<std::string, size_t> by_content;  // content -> index in `added`
  std::string scratch;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const json& t = tokens[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id") ||
        !t["id"].is_number_integer())
      fail(where + ": expected an object with 'id' and 'content'");
    AddedToken token;
    token.content = t["content"].get<std::string>();
    if (token.content.empty()) continue;
    if (valid_utf8_prefix(token.content) != token.content.size()) fail(where + ": content is not valid UTF-8");
    token.single_word = json_bool(t, "single_word", false);
    token.lstrip = json_bool(t, "lstrip", false);
    token.rstrip = json_bool(t, "rstrip", false);
    token.normalized = json_bool(t, "normalized", true);
    token.special = json_bool(t, "special", false);
    int64_t id;
    if (auto it = by_content.find(token.content); it != by_content.end()) {
      id = added[it->second].id;
    } else if (auto m = token_to_id.find(token.content); m != token_to_id.end()) {
      id = m->second;
    } else {
      id = next_id++;
    }
    if (id != t["id"].get<int64_t>()) {
      fail(where + " '" + token.content + "': its id is " + t["id"].dump() + " but tokenizers gives it " + std::to_string(id) +
           " (a content in model.vocab keeps that id, others are numbered from the model vocab's size)");
    }
    token.id = static_cast<int32_t>(id);
    token.pattern = token.content;
    if (token.normalized && nfc) normalize(token.content, token.pattern);
    if (token.normalized && !norm_steps.empty()) normalize_steps(token.content, token.pattern, scratch);
    if (auto it = by_content.find(token.content); it != by_content.end()) {
      added[it->second] = token;  // the later entry's flags win
    } else {
      by_content.emplace(token.content, added.size());
      added.push_back(token);
    }
  }
  for (size_t i = 0; i < added.size(); ++i) {
    token_to_id[added[i].content] = added[i].id;
    if (added[i].pattern.empty()) continue;
    (added[i].normalized ? normalized_trie : raw_trie).insert(added[i].pattern, static_cast<int32_t>(i));
  }
}

void HFTokenizer::Impl::load_post_processor(const json& j, const std::string& where, std::vector<int32_t>& pre,
                                            std::vector<int32_t>& post) {
  if (j.is_null()) return;
  const std::string type = json_type(j);
  auto id_of_pair = [&](const char* key) -> int32_t {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer())
      fail(where + "." + key + ": expected [token, id]");
    return static_cast<int32_t>((*it)[1].get<int64_t>());
  };
  if (type == "ByteLevel") return;
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    pre.insert(pre.begin(), id_of_pair("cls"));
    post.push_back(id_of_pair("sep"));
  } else if (type == "TemplateProcessing") {
    const auto single = j.find("single");
    const auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array() || specials == j.end() || !specials->is_object())
      fail(where + ": TemplateProcessing needs a 'single' list and a 'special_tokens' object");
    std::vector<int32_t> before, after;
    bool seen_a = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const json& piece = (*single)[i];
      const std::string piece_where = where + ".single[" + std::to_string(i) + "]";
      if (piece.is_object() && piece.contains("Sequence")) {
        if (seen_a || piece["Sequence"].value("id", std::string()) != "A")
          fail(piece_where + ": the single template must hold sequence A once");
        seen_a = true;
      } else if (piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].contains("id")) {
        const std::string name = piece["SpecialToken"]["id"].get<std::string>();
        const auto special = specials->find(name);
        if (special == specials->end() || !special->contains("ids") || !(*special)["ids"].is_array())
          fail(piece_where + ": special token '" + name + "' is not in special_tokens");
        for (const json& id : (*special)["ids"]) (seen_a ? after : before).push_back(id.get<int32_t>());
      } else {
        fail(piece_where + ": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got " + piece.dump());
      }
    }
    if (!seen_a) fail(where + ".single: no sequence A");
    pre.insert(pre.begin(), before.begin(), before.end());
    post.insert(post.end(), after.begin(), after.end());
  } else if (type == "Sequence") {
    const auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) fail(where + ": Sequence without a 'processors' list");
    for (size_t i = 0; i < it->size(); ++i)
      load_post_processor((*it)[i], where + ".processors[" + std::to_string(i) + "]", pre, post);
  } else {
    fail(where + ": post-processor type '" + type +
         "' is not supported (supported: TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, Sequence)");
  }
}

void HFTokenizer::Impl::load_config() {
  const std::filesystem::path config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  bool named_eos = false, named_bos = false;
  if (std::filesystem::exists(config_path, ec)) {
    const std::string cpath = config_path.string();
    json config;
    try {
      config = json::parse(read_whole_file(cpath, "tokenizer config"));
    } catch (const json::exception& e) {
      throw std::runtime_error("HF tokenizer config '" + cpath + "': not valid JSON: " + e.what());
    }
    auto config_fail = [&](const std::string& what) {
      throw std::runtime_error("HF tokenizer config '" + cpath + "': " + what);
    };
    if (!config.is_object()) config_fail("expected a JSON object");
    auto token_id = [&](const char* key, bool& named) -> int32_t {
      auto it = config.find(key);
      if (it == config.end() || it->is_null()) return -1;
      std::string content;
      if (it->is_string()) content = it->get<std::string>();
      else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) content = (*it)["content"].get<std::string>();
      else config_fail(std::string(key) + ": expected a string or an object with 'content'");
      auto found = token_to_id.find(content);
      if (found == token_to_id.end())
        config_fail(std::string(key) + " '" + content + "' is not a token of " + path +
                    " (transformers would add it as a new token; not supported)");
      named = true;
      return found->second;
    };
    eos = token_id("eos_token", named_eos);
    bos = token_id("bos_token", named_bos);
    auto flag = [&](const char* key) -> int {
      auto it = config.find(key);
      return it == config.end() || !it->is_boolean() ? -1 : it->get<bool>() ? 1 : 0;
    };
    if (int add_bos = flag("add_bos_token"); add_bos >= 0) {
      const bool template_bos = !prefix.empty() && bos >= 0 && prefix.front() == bos;
      if (add_bos != static_cast<int>(template_bos))
        config_fail(std::string("add_bos_token ") + (add_bos ? "true" : "false") + " disagrees with " + path +
                    "'s post_processor, which " + (template_bos ? "adds" : "does not add") +
                    " bos_token first (which one transformers uses depends on its version and tokenizer class; not supported)");
    }
    if (int add_eos = flag("add_eos_token"); add_eos >= 0) {
      const bool template_eos = !suffix.empty() && eos >= 0 && suffix.back() == eos;
      if (add_eos != static_cast<int>(template_eos))
        config_fail(std::string("add_eos_token ") + (add_eos ? "true" : "false") + " disagrees with " + path +
                    "'s post_processor, which " + (template_eos ? "adds" : "does not add") +
                    " eos_token last (not supported)");
    }
    if (flag("add_prefix_space") == 1 && !(top_level_byte_level && steps.back().add_prefix_space))
      config_fail("add_prefix_space true, but " + path +
                  "'s pre_tokenizer is not a ByteLevel with add_prefix_space (transformers may rebuild it; not supported)");
    if (flag("split_special_tokens") == 1) config_fail("split_special_tokens true is not supported");
  }
  if (!named_eos) choose_eos();
  if (!named_bos && prefix.size() == 1) bos = prefix.front();
}

}  // namespace gf::data
