// Reading a Hugging Face tokenizer.json (and the tokenizer_config.json beside it) into
// HFTokenizer::Impl: the model's vocabulary and merges, the normalizer, the pre-tokenizer steps (Split patterns
// translated to PCRE2, core/data/oniguruma.h) and the post-processor's special tokens; the added tokens and the
// config's bos / eos are hf_tokenizer_added.cpp. What is not supported is refused with its JSON path.
#include <atomic>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "core/data/hf_tokenizer_impl.h"
#include "core/data/oniguruma.h"

namespace gf::data {
using namespace byte_bpe;
using namespace hf;

namespace hf {

// Compiles; on failure returns null and sets `error`.
CodePtr compile_pcre2(const std::string& pattern, uint32_t options, std::string& error, bool& jit) {
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);  // `.` excludes \n only, as in Oniguruma
  int code_error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                                   &code_error, &offset, context);
  pcre2_compile_context_free(context);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(code_error, message, sizeof(message));
    error = "at offset " + std::to_string(offset) + " of '" + pattern + "': " + reinterpret_cast<char*>(message);
    return nullptr;
  }
  jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return CodePtr(code);
}

std::string read_whole_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string("HF ") + what + " '" + path + "': cannot open: " + std::strerror(errno));
  // A regular file is read in one piece into a string of its size; anything else through a stream.
  std::error_code ec;
  const auto size = std::filesystem::is_regular_file(path, ec) ? std::filesystem::file_size(path, ec) : 0;
  if (!ec && size > 0) {
    std::string contents(size, '\0');
    in.read(contents.data(), static_cast<std::streamsize>(size));
    contents.resize(static_cast<size_t>(in.gcount()));
    if (in.gcount() == static_cast<std::streamsize>(size) && in.peek() == std::char_traits<char>::eof()) return contents;
    in.clear();
    in.seekg(0);
    if (!in) throw std::runtime_error(std::string("HF ") + what + " '" + path + "': cannot read it again");
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string json_type(const json& j) {
  if (!j.is_object()) return "(not an object)";
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return "(no type)";
  return it->get<std::string>();
}

bool json_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace hf

namespace {

std::atomic<uint64_t> next_serial{1};

std::string byte_level_string(std::string_view bytes) {
  const auto& map = byte_unicode_map();
  std::string s;
  for (unsigned char b : bytes) {
    char32_t cp = map.to_unicode[b];
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return s;
}

}  // namespace

void HFTokenizer::Impl::load_normalizer(const json& j, const std::string& where) {
  if (j.is_null()) return;
  const std::string type = json_type(j);
  if (type == "NFC") {
    norm_steps.push_back(NormStep{});
  } else if (type == "Sequence") {
    const auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) fail(where + ": Sequence without a 'normalizers' list");
    for (size_t i = 0; i < it->size(); ++i) load_normalizer((*it)[i], where + ".normalizers[" + std::to_string(i) + "]");
  } else if (!load_other_normalizer(j, type, where)) {
    fail(where + ": normalizer type '" + type +
         "' is not supported (supported: NFC, Prepend, Replace with a String pattern, BertNormalizer, Sequence)");
  }
}

void HFTokenizer::Impl::load_pre_tokenizer(const json& j, const std::string& where) {
  if (j.is_null()) return;  // the whole normalized piece is one pre-token
  const std::string type = json_type(j);
  if (type == "Sequence") {
    const auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) fail(where + ": Sequence without a 'pretokenizers' list");
    for (size_t i = 0; i < it->size(); ++i) load_pre_tokenizer((*it)[i], where + ".pretokenizers[" + std::to_string(i) + "]");
    return;
  }
  if (!steps.empty() && steps.back().kind == PreKind::kByteLevel) {
    fail(where + ": pre-tokenizer '" + type + "' after ByteLevel is not supported (ByteLevel must be the last step)");
  }
  PreStep step;
  if (type == "ByteLevel") {
    step.kind = PreKind::kByteLevel;
    step.add_prefix_space = json_bool(j, "add_prefix_space", true);
    step.use_regex = json_bool(j, "use_regex", true);
    if (step.use_regex) {
      std::string error;
      bool jit_full = false, jit_plain = false;
      step.regex.full = compile_pcre2(gpt2_pretoken_pattern(true), PCRE2_UTF | PCRE2_UCP, error, jit_full);
      step.regex.plain = compile_pcre2(gpt2_pretoken_pattern(false), PCRE2_UTF | PCRE2_UCP, error, jit_plain);
      if (!step.regex.full || !step.regex.plain) fail(where + ": GPT-2 pattern: " + error);
      step.regex.jit = jit_full && jit_plain;
    }
  } else if (type == "Split") {
    const auto pattern = j.find("pattern");
    const auto behavior = j.find("behavior");
    const auto invert = j.find("invert");
    if (pattern == j.end() || behavior == j.end() || invert == j.end() || !behavior->is_string() || !invert->is_boolean())
      fail(where + ": Split needs 'pattern', 'behavior' (a string) and 'invert' (a boolean)");
    static const std::pair<const char*, Behavior> kBehaviors[] = {
        {"Removed", Behavior::kRemoved}, {"Isolated", Behavior::kIsolated},
        {"MergedWithPrevious", Behavior::kMergedWithPrevious}, {"MergedWithNext", Behavior::kMergedWithNext},
        {"Contiguous", Behavior::kContiguous}};
    const std::string b = behavior->get<std::string>();
    auto found = std::find_if(std::begin(kBehaviors), std::end(kBehaviors), [&](const auto& kv) { return b == kv.first; });
    if (found == std::end(kBehaviors)) fail(where + ".behavior: '" + b + "' is not a Split behavior");
    step.behavior = found->second;
    step.invert = invert->get<bool>();
    std::string error;
    bool jit_full = false, jit_plain = true;
    if (pattern->is_object() && pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
      const std::string source = (*pattern)["Regex"].get<std::string>();
      std::string full, plain;
      char32_t lowest = 0x110000, highest = 0;
      const std::string unsupported = translate_oniguruma(source, full, plain, lowest, highest);
      if (!unsupported.empty())
        fail(where + ".pattern.Regex '" + source + "': " + unsupported + " is not supported");
      // The plain pattern serves text without byte 0xF0, which holds none of the added characters
      // when they all lie in U+10000..U+3FFFF (true of the letters and digits, not of the marks:
      // Unicode 15.0 added U+0CF3 and U+0ECE).
      const bool use_plain = plain != full && lowest >= 0x10000 && highest <= 0x3FFFF;
      step.regex.full = compile_pcre2(full, PCRE2_UTF | PCRE2_UCP, error, jit_full);
      if (step.regex.full && use_plain) step.regex.plain = compile_pcre2(plain, PCRE2_UTF | PCRE2_UCP, error, jit_plain);
      if (!step.regex.full || (use_plain && !step.regex.plain))
        fail(where + ".pattern.Regex '" + source + "': PCRE2 cannot compile it " + error);
    } else if (pattern->is_object() && pattern->contains("String") && (*pattern)["String"].is_string()) {
      const std::string literal = (*pattern)["String"].get<std::string>();
      if (valid_utf8_prefix(literal) != literal.size()) fail(where + ".pattern.String is not valid UTF-8");
      step.regex.full = compile_pcre2(literal, PCRE2_UTF | PCRE2_LITERAL, error, jit_full);
      if (!step.regex.full) fail(where + ".pattern.String: " + error);
    } else {
      fail(where + ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
    }
    step.regex.jit = jit_full && jit_plain;
  } else if (!load_other_pre_tokenizer(j, type, where, step)) {
    fail(where + ": pre-tokenizer type '" + type +
         "' is not supported (supported: Split, ByteLevel, Metaspace, Digits, BertPreTokenizer, Sequence)");
  }
  steps.push_back(std::move(step));
}

void HFTokenizer::Impl::load_model(const json& model) {
  const std::string type = json_type(model);
  const bool byte_level = model_kind == ModelKind::kByteLevelBpe;
  if (type == "WordPiece" && !byte_level) {
    model_kind = ModelKind::kWordPiece;
    load_wordpiece(model);
    return;
  }
  if (type != "BPE") {
    fail("model.type '" + type + "' is not supported" +
         (byte_level ? std::string(" with a ByteLevel pre-tokenizer (only BPE)") : " (only BPE and WordPiece)"));
  }
  if (auto it = model.find("dropout"); it != model.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0))
    fail("model.dropout " + it->dump() + " is not supported (only null or 0)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto it = model.find(key); it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      fail(std::string("model.") + key + " " + it->dump() + " is not supported (only null or \"\")");
  }
  ignore_merges = json_bool(model, "ignore_merges", false);
  const auto vocab = model.find("vocab");
  const auto merge_list = model.find("merges");
  if (vocab == model.end() || !vocab->is_object()) fail("model.vocab: expected an object (token -> id)");
  if (merge_list == model.end() || !merge_list->is_array()) fail("model.merges: expected a list");

  // token_to_id is the model vocab as written (byte-level characters) until the added tokens join it.
  // Ids up to a bound (dense vocabularies) are checked for duplicates and remember whether their
  // token is byte-level in vectors; larger ones in a map.
  const size_t vocab_count = vocab->size();
  token_to_id.reserve(vocab_count);
  if (byte_level) model_bytes_to_id.reserve(vocab_count);
  const size_t dense_limit = 4 * vocab_count + 1024;
  std::vector<const std::string*> dense_tokens;
  std::vector<int8_t> dense_byte_token;  // -1: no such id; 0 / 1: token_to_bytes fails / succeeds
  std::unordered_map<int32_t, const std::string*> sparse_tokens;
  std::string bytes;
  for (auto entry = vocab->begin(); entry != vocab->end(); ++entry) {
    const std::string& token = entry.key();
    const json& value = entry.value();
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > std::numeric_limits<int32_t>::max())
      fail("model.vocab: id of '" + token + "' is not a non-negative 32-bit integer");
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    const std::string** seen;
    if (static_cast<size_t>(id) < dense_limit) {
      if (static_cast<size_t>(id) >= dense_tokens.size()) {
        const size_t size = std::min(dense_limit, std::max<size_t>(static_cast<size_t>(id) + 1, vocab_count));
        dense_tokens.resize(size, nullptr);
        dense_byte_token.resize(size, -1);
      }
      seen = &dense_tokens[id];
    } else {
      seen = &sparse_tokens.try_emplace(id, nullptr).first->second;
    }
    if (*seen != nullptr) fail("model.vocab: id " + std::to_string(id) + " is used by '" + **seen + "' and '" + token + "'");
    *seen = &token;
    token_to_id.emplace(token, id);
    if (byte_level) {
      const bool is_bytes = token_to_bytes(token, bytes);
      if (static_cast<size_t>(id) < dense_limit) dense_byte_token[id] = is_bytes ? 1 : 0;
      if (is_bytes && !bytes.empty()) model_bytes_to_id.emplace(bytes, id);
    }
  }
  decltype(sparse_tokens)().swap(sparse_tokens);
  if (!byte_level) {
    this->vocab = token_to_id;
    load_char_bpe(model);
  }
  for (int b = 0; byte_level && b < 256; ++b) {
    auto it = model_bytes_to_id.find(std::string(1, static_cast<char>(b)));
    if (it == model_bytes_to_id.end()) {
      // The ByteLevel pre-tokenizer hands the model one GPT-2 character per byte; without that
      // character tokenizers would fall back to unk_token or drop the byte.
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", b);
      const bool fallback = json_bool(model, "byte_fallback", false);
      fail("model.vocab lacks the byte-level token of byte " + std::to_string(b) + " ('" +
           byte_level_string(std::string(1, static_cast<char>(b))) + "'): the vocabulary has no token for byte " + hex +
           (fallback ? " and byte_fallback does not apply to the characters a ByteLevel pre-tokenizer makes"
                     : " and the model has no byte_fallback") +
           ": it is not a byte-level BPE file, yet its pre-tokenizer is ByteLevel (not supported)");
    }
    byte_ids[b] = it->second;
  }

  // The merges as views of the JSON's strings, which outlive this function.
  std::vector<std::pair<std::string_view, std::string_view>> pairs;
  pairs.reserve(merge_list->size());
  for (size_t i = 0; i < merge_list->size(); ++i) {
    const json& m = (*merge_list)[i];
    if (m.is_string()) {
      const std::string_view line = m.get_ref<const std::string&>();
      if (line.starts_with("#version")) continue;
      const size_t space = line.find(' ');
      if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
        fail("model.merges[" + std::to_string(i) + "] '" + std::string(line) + "': expected two tokens separated by one space");
      pairs.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      pairs.emplace_back(m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>());
    } else {
      fail("model.merges[" + std::to_string(i) + "]: expected \"a b\" or [\"a\", \"b\"], got " + m.dump());
    }
  }
  merges.reserve(pairs.size());
  // Whether a vocab token is written in the byte-level alphabet (token_to_bytes succeeds).
  auto byte_token = [&](int32_t id, std::string_view token) {
    if (static_cast<size_t>(id) < dense_byte_token.size() && dense_byte_token[id] >= 0) return dense_byte_token[id] == 1;
    return token_to_bytes(token, bytes);
  };
  std::string joined;
  for (size_t rank = 0; rank < pairs.size(); ++rank) {
    const auto [a, b] = pairs[rank];
    const auto left = token_to_id.find(a);
    if (left == token_to_id.end()) fail("model.merges: '" + std::string(a) + "' (merge " + std::to_string(rank) + ") is not in model.vocab");
    const auto right = token_to_id.find(b);
    if (right == token_to_id.end()) fail("model.merges: '" + std::string(b) + "' (merge " + std::to_string(rank) + ") is not in model.vocab");
    joined.assign(a).append(b);
    const auto merged = token_to_id.find(std::string_view(joined));
    if (merged == token_to_id.end()) fail("model.merges: '" + joined + "' (merge " + std::to_string(rank) + ") is not in model.vocab");
    // A merge of tokens outside the byte-level alphabet can never apply to byte-level symbols.
    if (byte_level && (!byte_token(left->second, a) || !byte_token(right->second, b))) continue;
    merges.insert(left->second, right->second, Merge{static_cast<int32_t>(rank), merged->second});
  }
}

void HFTokenizer::Impl::load(const json& root) {
  if (!root.is_object()) fail("expected a JSON object");
  if (auto v = root.find("version"); v != root.end() && !(v->is_string() && v->get<std::string>() == "1.0"))
    fail("version " + v->dump() + " is not supported (only \"1.0\")");
  const auto model = root.find("model");
  if (model == root.end()) fail("no 'model'");
  const json null_json;
  auto field = [&](const char* key) -> const json& {
    auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  // The normalizer: NFC alone keeps the `nfc` fast path; anything else runs as norm_steps.
  load_normalizer(field("normalizer"), "normalizer");
  auto is_nfc = [](const NormStep& n) { return n.kind == NormKind::kNfc; };
  const bool any_nfc = std::any_of(norm_steps.begin(), norm_steps.end(), is_nfc);
  if (std::all_of(norm_steps.begin(), norm_steps.end(), is_nfc)) {
    nfc = !norm_steps.empty();
    norm_steps.clear();
  }
  if (any_nfc) {
    try {
      nfc_tables = nfc_tables_from_environment();
      nfc_instance = &nfc_normalizer(nfc_tables);
    } catch (const std::runtime_error& e) {
      fail(e.what());
    }
  }
  // A ByteLevel step makes the model byte-level; without one it sees characters.
  const json& pre_tokenizer = field("pre_tokenizer");
  load_pre_tokenizer(pre_tokenizer, "pre_tokenizer");
  const bool byte_level = !steps.empty() && steps.back().kind == PreKind::kByteLevel;
  model_kind = byte_level ? ModelKind::kByteLevelBpe : ModelKind::kBpe;
  top_level_byte_level = json_type(pre_tokenizer) == "ByteLevel";
  load_model(*model);
  const json& decoder = field("decoder");
  const std::string decoder_type = decoder.is_null() ? std::string("null") : json_type(decoder);
  if (byte_level && decoder_type != "ByteLevel")
    fail("decoder type '" + decoder_type + "' is not supported with a ByteLevel pre-tokenizer (only ByteLevel)");
  if (!byte_level && decoder_type == "ByteLevel")
    fail("pre_tokenizer '" + (pre_tokenizer.is_null() ? std::string("null") : json_type(pre_tokenizer)) +
         "' has no ByteLevel step, yet the decoder is ByteLevel (not supported: the model's tokens are not byte-level)");
  if (!byte_level) load_decoder(decoder, "decoder");

  const size_t model_size = token_to_id.size();
  load_added_tokens(field("added_tokens"), model_size);
  load_post_processor(field("post_processor"), "post_processor", prefix, suffix);

  // Every id's token: the model vocab and the added tokens (ids may leave gaps, as o200k's do).
  vocab_size = static_cast<int32_t>(token_to_id.size());
  int32_t max_id = -1;
  for (const auto& entry : token_to_id) max_id = std::max(max_id, entry.second);
  const size_t limit = static_cast<size_t>(max_id) + 1;
  std::vector<const std::string*> id_to_token(limit, nullptr);
  for (const auto& [token, id] : token_to_id) {
    if (id_to_token[id] != nullptr)
      fail("id " + std::to_string(id) + " is used by '" + *id_to_token[id] + "' and '" + token + "' (not supported)");
    id_to_token[id] = &token;
  }
  for (const AddedToken& t : added) id_to_token[t.id] = &t.pattern;  // decode: the normalized content
  id_to_bytes.assign(limit, std::string());
  has_id.assign(limit, false);
  std::string bytes;
  for (size_t id = 0; id < limit; ++id) {
    if (id_to_token[id] == nullptr) continue;
    has_id[id] = true;
    // Byte-level: the token's bytes; otherwise the token itself, for the decoder steps.
    id_to_bytes[id] = byte_level && token_to_bytes(*id_to_token[id], bytes) ? bytes : *id_to_token[id];
  }
  for (const std::vector<int32_t>* specials : {&prefix, &suffix})
    for (int32_t id : *specials)
      if (id < 0 || static_cast<size_t>(id) >= limit || !has_id[id])
        fail("post_processor: special id " + std::to_string(id) + " is not a token");
  load_config();
}

HFTokenizer HFTokenizer::from_file(const std::string& tokenizer_json) {
  auto impl = std::make_shared<Impl>();
  impl->path = tokenizer_json;
  json root;
  try {
    root = json::parse(read_whole_file(tokenizer_json, "tokenizer file"));
  } catch (const json::exception& e) {
    impl->fail(std::string("not valid JSON: ") + e.what());
  }
  try {
    impl->load(root);
  } catch (const json::exception& e) {
    impl->fail(std::string("unexpected JSON structure: ") + e.what());
  }
  impl->serial = next_serial.fetch_add(1);
  // The parsed file is freed here (about 0.04 s for Qwen2.5's): a detached thread could do it meanwhile, but
  // one still freeing when the process exits is not worth that.
  return HFTokenizer(std::move(impl));
}

}  // namespace gf::data
