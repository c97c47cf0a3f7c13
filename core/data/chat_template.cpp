#include "core/data/chat_template.h"

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace gf::data {
namespace {

constexpr std::string_view kQwen2System = "You are a helpful assistant.";
constexpr std::string_view kQwen25System = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr std::string_view kNames = "chatml, qwen2, qwen2.5, qwen3, llama3, llama3.1, gemma";
constexpr std::string_view kAccepted =
    "accepted: the chat templates of Qwen1.5/Qwen2, Qwen2.5 and Qwen3 (ChatML), Llama 3, Llama 3.1 and Gemma 1/2/3; "
    "--chat-template chatml|qwen2|qwen2.5|qwen3|llama3|llama3.1|gemma renders one of those instead";

ChatTemplate make(ChatTemplate::Kind kind, std::string name, std::string description, std::string system = "") {
  ChatTemplate t;
  t.kind = kind;
  t.name = std::move(name);
  t.description = std::move(description);
  t.default_system = std::move(system);
  return t;
}

// Real files write a newline inside a Jinja string either as itself or as the escape \n (both render a
// newline): the signatures are matched with the escapes turned into newlines.
std::string normalise(const std::string& jinja) {
  std::string out;
  out.reserve(jinja.size());
  for (size_t i = 0; i < jinja.size(); ++i) {
    if (jinja[i] == '\\' && i + 1 < jinja.size() && jinja[i + 1] == 'n') {
      out += '\n';
      ++i;
    } else {
      out += jinja[i];
    }
  }
  return out;
}

bool has(const std::string& t, std::string_view s) { return t.find(s) != std::string::npos; }
bool has_all(const std::string& t, std::initializer_list<std::string_view> all) {
  for (std::string_view s : all)
    if (!has(t, s)) return false;
  return true;
}

// The default system prompt of a ChatML template: the literal between `open` and `close`, the first
// occurrence of `open` not followed by a quote (an empty literal is a different statement).
std::string literal_after(const std::string& t, std::string_view open, std::string_view close) {
  for (size_t at = t.find(open); at != std::string::npos; at = t.find(open, at + 1)) {
    const size_t begin = at + open.size();
    if (begin < t.size() && t[begin] == '\'') continue;
    const size_t end = t.find(close, begin);
    if (end == std::string::npos) return "";
    std::string text = t.substr(begin, end - begin);
    return text.find('\'') == std::string::npos ? text : "";
  }
  return "";
}

// A template that is none of the known ones, named by its family where it has one.
std::string family_of(const std::string& t) {
  if (has(t, "Cutting Knowledge Date") && has(t, "strftime_now"))
    return "Llama 3.2's (its system header's Today Date is the day it is rendered, strftime_now: the data would "
           "change with the day; --chat-template llama3.1 renders it with Today Date 26 Jul 2024)";
  if (has(t, "[SYSTEM_PROMPT]")) return "Mistral's [SYSTEM_PROMPT] [INST] template";
  if (has(t, "[INST]")) return "a Llama 2 / Mistral [INST] template";
  if (has(t, "<|user|>") && has(t, "<|end|>")) return "Phi-3's template";
  if (has(t, "<|user|>")) return "a Zephyr / TinyLlama <|user|> template";
  if (has(t, "<\xEF\xBD\x9CUser\xEF\xBD\x9C>") || has(t, "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"))
    return "DeepSeek's template";
  if (has(t, "<|START_OF_TURN_TOKEN|>")) return "Command R's template";
  if (has(t, "<|im_sep|>")) return "Phi-4's template";
  if (has(t, "<|channel|>")) return "gpt-oss's (harmony) template";
  if (has(t, "### Instruction")) return "an Alpaca-style ### Instruction template";
  if (has(t, "<|im_start|>"))
    return "a ChatML template that is none of the known ones (a different default system prompt, bos, tools or "
           "reasoning handling; --chat-template chatml, qwen2, qwen2.5 or qwen3 if one of those renders the same)";
  if (has(t, "<|start_header_id|>")) return "a Llama 3 style template that is none of the known ones";
  if (has(t, "<start_of_turn>")) return "a Gemma style template that is none of the known ones";
  std::string head = t.substr(0, 60);
  for (char& c : head)
    if (c == '\n') c = ' ';
  return "an unrecognised template (\"" + head + (t.size() > 60 ? "...\")" : "\")");
}

// Python's str.isspace() for one code point.
bool py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t decode_at(const std::string& s, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[k])); };
  const char32_t c = b(i);
  size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (i + n > s.size()) n = 1;
  *len = n;
  if (n == 1) return c;
  char32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(i + k) & 0x3F);
  return cp;
}

std::string strip_newlines(std::string s, bool left, bool right) {  // Python's strip('\n') / lstrip / rstrip
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && s[b] == '\n') ++b;
  if (right)
    while (e > b && s[e - 1] == '\n') --e;
  return s.substr(b, e - b);
}
std::string before_first(const std::string& s, const std::string& sep) { return s.substr(0, s.find(sep)); }
std::string after_last(const std::string& s, const std::string& sep) {  // Python's s.split(sep)[-1]
  const size_t at = s.rfind(sep);
  return at == std::string::npos ? s : s.substr(at + sep.size());
}

struct Out {
  std::vector<ChatPiece> pieces;
  void text(std::string s, bool trained = false) {
    if (!s.empty()) pieces.push_back({std::move(s), trained, false});
  }
  void special(std::string s, bool trained = false) { pieces.push_back({std::move(s), trained, true}); }
};

void chatml_turn(Out& o, const std::string& role, const std::string& body, bool assistant) {
  o.special("<|im_start|>");
  o.text(role + "\n");
  o.text(body, assistant);
  o.special("<|im_end|>", assistant);
  o.text("\n");
}

// Qwen3: the assistant turns after the last user turn carry their reasoning, the others lose it.
void qwen3(Out& o, const std::vector<ChatMessage>& m) {
  size_t last_query = m.size() - 1;
  for (size_t k = m.size(); k-- > 0;) {
    const std::string& c = m[k].content;
    const bool tool_response = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (m[k].role == "user" && !tool_response) {
      last_query = k;
      break;
    }
  }
  if (m[0].role == "system") chatml_turn(o, "system", m[0].content, false);
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i].role == "user" || (m[i].role == "system" && i > 0)) {
      chatml_turn(o, m[i].role, m[i].content, false);
    } else if (m[i].role == "assistant") {
      std::string content = m[i].content, reasoning;
      if (m[i].reasoning_content) {
        reasoning = *m[i].reasoning_content;
      } else if (has(content, "</think>")) {
        const std::string before = strip_newlines(before_first(content, "</think>"), false, true);
        reasoning = strip_newlines(after_last(before, "<think>"), true, false);
        content = strip_newlines(after_last(content, "</think>"), true, false);
      }
      if (i > last_query && (i + 1 == m.size() || !reasoning.empty()))
        content = "<think>\n" + strip_newlines(reasoning, true, true) + "\n</think>\n\n" +
                  strip_newlines(content, true, false);
      chatml_turn(o, "assistant", content, true);
    }
  }
}

void llama_turn(Out& o, const std::string& role, const std::string& body, bool assistant) {
  o.special("<|start_header_id|>");
  o.text(role);
  o.special("<|end_header_id|>");
  o.text("\n\n");
  o.text(body, assistant);
  o.special("<|eot_id|>", assistant);
}

void gemma(Out& o, const ChatTemplate& t, const std::vector<ChatMessage>& m, const std::string& bos) {
  o.special(bos);
  size_t first = 0;
  std::string prefix;  // Gemma 3: the system turn, folded into the first user turn
  if (m[0].role == "system") {
    if (t.system_refused) throw std::runtime_error("the chat template refuses it: System role not supported");
    prefix = m[0].content + "\n\n";
    first = 1;
  }
  for (size_t k = first; k < m.size(); ++k) {
    const size_t index = k - first;
    if ((m[k].role == "user") != (index % 2 == 0))
      throw std::runtime_error(
          "the chat template refuses it: Conversation roles must alternate user/assistant/user/assistant/...");
    const bool assistant = m[k].role == "assistant";
    o.special("<start_of_turn>");
    o.text((assistant ? std::string("model") : m[k].role) + "\n" + (index == 0 ? prefix : ""));
    o.text(python_strip(m[k].content), assistant);
    o.special("<end_of_turn>", assistant);
    o.text("\n");
  }
}

}  // namespace

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names = {"chatml", "qwen2", "qwen2.5", "qwen3", "llama3", "llama3.1", "gemma"};
  return names;
}

ChatTemplate chat_template_named(const std::string& name) {
  using K = ChatTemplate::Kind;
  if (name == "chatml") return make(K::kChatML, name, "ChatML (no default system prompt)");
  if (name == "qwen2") return make(K::kChatML, name, "Qwen2 ChatML (default system prompt)", std::string(kQwen2System));
  if (name == "qwen2.5")
    return make(K::kChatML, name, "Qwen2.5 ChatML (default system prompt)", std::string(kQwen25System));
  if (name == "qwen3") return make(K::kQwen3, name, "Qwen3 ChatML with <think> blocks");
  if (name == "llama3") return make(K::kLlama3, name, "Llama 3");
  if (name == "llama3.1") return make(K::kLlama31, name, "Llama 3.1 (Today Date 26 Jul 2024)");
  if (name == "gemma") return make(K::kGemma, name, "Gemma (a system turn folded into the first user turn)");
  throw std::invalid_argument("chat template \"" + name + "\" is not known; known: " + std::string(kNames));
}

ChatTemplate recognise_chat_template(const std::string& jinja) {
  const std::string t = normalise(jinja);
  const std::string_view llama_turn_expr =
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>'";
  if (!has(t, "strftime_now") &&
      has_all(t, {"{{- bos_token }}", "{%- set date_string = \"26 Jul 2024\" %}",
                  "{%- set system_message = messages[0]['content']|trim %}", "{%- set messages = messages[1:] %}",
                  "{%- set system_message = \"\" %}", "{{- \"<|start_header_id|>system<|end_header_id|>\n\n\" }}",
                  "{{- \"Cutting Knowledge Date: December 2023\n\" }}",
                  "{{- \"Today Date: \" + date_string + \"\n\n\" }}",
                  "{{- system_message }}", "{{- \"<|eot_id|>\" }}",
                  "{%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}",
                  llama_turn_expr}))
    return chat_template_named("llama3.1");
  if (!has(t, "Cutting Knowledge") &&
      has_all(t, {"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = ",
                  llama_turn_expr,
                  "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
                  "{{ content }}{% endfor %}"})) {
    const std::string_view prompt = "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}";
    ChatTemplate c = chat_template_named("llama3");
    if (has(t, std::string("{% endfor %}{% if add_generation_prompt %}") + std::string(prompt) + "{% endif %}"))
      return c;
    if (has(t, std::string("{% endfor %}") + std::string(prompt))) {
      c.generation_prompt_always = true;
      c.description = "Llama 3 (Meta-Llama-3's first template: always ends with the assistant header)";
      return c;
    }
  }
  const std::string_view gemma_alternate = "(message['role'] == 'user') != (loop.index0 % 2 == 0)";
  if (has_all(t, {"{{ bos_token }}", "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}",
                  "{%- set loop_messages = messages[1:] -%}", "{%- set first_user_prefix = \"\" -%}", gemma_alternate,
                  "{{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}",
                  "{%- set role = \"model\" -%}",
                  "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}",
                  "{{ message['content'] | trim }}", "{{ '<end_of_turn>\n' }}"})) {
    ChatTemplate c = chat_template_named("gemma");
    c.description = "Gemma 3 (a system turn folded into the first user turn)";
    return c;
  }
  if (has_all(t, {"{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
                  "{{ raise_exception('System role not supported') }}{% endif %}",
                  gemma_alternate,
                  "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}",
                  "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}"
                  "{% set role = message['role'] %}{% endif %}",
                  "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"})) {
    ChatTemplate c = chat_template_named("gemma");
    c.system_refused = true;
    c.description = "Gemma 1/2 (no system turn)";
    return c;
  }
  const std::string_view qwen_turn = "'<|im_start|>' + message.role + '\n' + ";
  if (has_all(t, {"{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}",
                  "namespace(multi_step_tool=true, last_query_index=messages|length - 1)",
                  "message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')",
                  "(message.role == \"user\") or (message.role == \"system\" and not loop.first)",
                  ".split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')",
                  ".split('</think>')[-1].lstrip('\n')", "{%- if loop.index0 > ns.last_query_index %}",
                  "{%- if loop.last or (not loop.last and reasoning_content) %}",
                  "'<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + "
                  "content.lstrip('\n')",
                  "{{- '<|im_start|>' + message.role + '\n' + content }}", "{{- '<|im_end|>\n' }}"}) &&
      // the first revision reads message.content and reasoning_content when not none, the later one strings only
      (has(t, std::string(qwen_turn) + "message.content + '<|im_end|>' + '\n'") ||
       has(t, std::string(qwen_turn) + "content + '<|im_end|>' + '\n'")) &&
      (has(t, "{%- if message.reasoning_content is defined and message.reasoning_content is not none %}") ||
       has(t, "{%- if message.reasoning_content is string %}")))
    return chat_template_named("qwen3");
  if (!has(t, "<think>") && !has(t, "bos_token") &&
      has_all(t, {"{%- if messages[0]['role'] == 'system' %}",
                  "{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}",
                  "(message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
                  "(message.role == \"assistant\" and not message.tool_calls)",
                  std::string("{{- ") + std::string(qwen_turn) + "message.content + '<|im_end|>' + '\n' }}"})) {
    const std::string system = literal_after(t, "{{- '<|im_start|>system\n", "<|im_end|>\n' }}");
    if (!system.empty()) {
      ChatTemplate c = chat_template_named("qwen2.5");
      c.default_system = system;
      c.description = "Qwen2.5 ChatML (default system prompt \"" + system + "\")";
      return c;
    }
  }
  const std::string_view qwen2_open =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n";
  if (!has(t, "bos_token") &&
      has_all(t, {qwen2_open, "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
                              "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"})) {
    const std::string system = literal_after(t, qwen2_open, "<|im_end|>\n' }}{% endif %}");
    if (!system.empty()) {
      ChatTemplate c = chat_template_named("qwen2");
      c.default_system = system;
      c.description = "Qwen1.5/Qwen2 ChatML (default system prompt \"" + system + "\")";
      return c;
    }
  }
  throw std::runtime_error("chat_template is " + family_of(t) + ": not supported; " + std::string(kAccepted));
}

std::string python_strip(const std::string& s) {
  size_t b = 0, e = s.size(), len = 0;
  while (b < e && py_space(decode_at(s, b, &len))) b += len;
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (!py_space(decode_at(s, start, &len)) || start + len != e) break;
    e = start;
  }
  return s.substr(b, e - b);
}

std::vector<ChatPiece> render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& m, const std::string& bos) {
  using K = ChatTemplate::Kind;
  if (m.empty()) throw std::runtime_error("the conversation has no turns");
  Out o;
  switch (t.kind) {
    case K::kChatML:
      if (!t.default_system.empty() && m[0].role != "system") chatml_turn(o, "system", t.default_system, false);
      for (const ChatMessage& x : m) chatml_turn(o, x.role, x.content, x.role == "assistant");
      break;
    case K::kQwen3:
      qwen3(o, m);
      break;
    case K::kLlama3:
      o.special(bos);
      for (const ChatMessage& x : m) llama_turn(o, x.role, python_strip(x.content), x.role == "assistant");
      if (t.generation_prompt_always) {
        o.special("<|start_header_id|>");
        o.text("assistant");
        o.special("<|end_header_id|>");
        o.text("\n\n");
      }
      break;
    case K::kLlama31: {
      // transformers passes no date_string: the template's own default is the date.
      o.special(bos);
      const bool system = m[0].role == "system";
      o.special("<|start_header_id|>");
      o.text("system");
      o.special("<|end_header_id|>");
      o.text("\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" +
             (system ? python_strip(m[0].content) : std::string()));
      o.special("<|eot_id|>");
      for (size_t i = system ? 1 : 0; i < m.size(); ++i)
        llama_turn(o, m[i].role, python_strip(m[i].content), m[i].role == "assistant");
      break;
    }
    case K::kGemma:
      gemma(o, t, m, bos);
      break;
  }
  return o.pieces;
}

std::string rendered_text(const std::vector<ChatPiece>& pieces) {
  std::string s;
  for (const ChatPiece& p : pieces) s += p.text;
  return s;
}

void append_generation_prompt(const ChatTemplate& t, std::vector<ChatPiece>& pieces) {
  using K = ChatTemplate::Kind;
  const auto special = [&](const char* x) { pieces.push_back({x, false, true}); };
  const auto text = [&](const char* x) { pieces.push_back({x, false, false}); };
  switch (t.kind) {
    case K::kChatML:
    case K::kQwen3:
      special("<|im_start|>");
      text("assistant\n");
      break;
    case K::kLlama3:
    case K::kLlama31:
      if (t.generation_prompt_always) break;
      special("<|start_header_id|>");
      text("assistant");
      special("<|end_header_id|>");
      text("\n\n");
      break;
    case K::kGemma:
      special("<start_of_turn>");
      text("model\n");
      break;
  }
}

ChatEncoder ChatEncoder::load(const std::string& tokenizer, const std::string& chat_template) {
  namespace fs = std::filesystem;
  const bool dir = fs::is_directory(tokenizer);
  const fs::path json = dir ? fs::path(tokenizer) / "tokenizer.json" : fs::path(tokenizer);
  const fs::path folder = json.parent_path();
  HFTokenizer tok = HFTokenizer::from_file(json.string());
  nlohmann::json config = nlohmann::json::object();
  const fs::path config_path = folder / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    std::ifstream in(config_path);
    config = nlohmann::json::parse(in, nullptr, false);
    if (!config.is_object()) throw std::runtime_error(config_path.string() + ": not a JSON object");
  }
  std::string jinja, source;
  const fs::path jinja_path = folder / "chat_template.jinja";
  if (fs::exists(jinja_path)) {  // transformers' own file for the template, preferred to tokenizer_config's
    std::ifstream in(jinja_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    jinja = text.str();
    source = jinja_path.string();
  } else if (const auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
    source = config_path.string();
    if (it->is_string()) {
      jinja = it->get<std::string>();
    } else if (it->is_array()) {  // named templates: transformers takes "default"
      for (const auto& named : *it)
        if (named.is_object() && named.value("name", "") == "default" && named.contains("template"))
          jinja = named["template"].get<std::string>();
      if (jinja.empty())
        throw std::runtime_error(source + ": chat_template lists named templates but none named \"default\"");
    } else {
      throw std::runtime_error(source + ": chat_template is not a string");
    }
  }
  ChatTemplate t;
  if (!chat_template.empty()) {
    t = chat_template_named(chat_template);
    source = "--chat-template " + chat_template;
  } else if (jinja.empty()) {
    throw std::runtime_error(config_path.string() + " has no chat_template: --sft chat with HuggingFaceTokenizer "
                             "renders the model's own template; give --chat-template " + std::string(kNames));
  } else {
    try {
      t = recognise_chat_template(jinja);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(source + ": " + e.what());
    }
  }
  std::string bos;  // transformers hands the template tokenizer_config's bos_token
  if (const auto it = config.find("bos_token"); it != config.end() && it->is_string()) bos = it->get<std::string>();
  else if (it != config.end() && it->is_object()) bos = it->value("content", std::string());
  const bool needs_bos = t.kind == ChatTemplate::Kind::kLlama3 || t.kind == ChatTemplate::Kind::kLlama31 ||
                         t.kind == ChatTemplate::Kind::kGemma;
  if (needs_bos && bos.empty())
    throw std::runtime_error(config_path.string() + " names no bos_token, which the " + t.name +
                             " template writes first");
  return ChatEncoder(std::move(tok), std::move(t), std::move(bos), json.string() + ", " + source);
}

ChatEncoder::ChatEncoder(HFTokenizer tok, ChatTemplate t, std::string bos, std::string source)
    : tok_(std::move(tok)), t_(std::move(t)), bos_(std::move(bos)), source_(std::move(source)) {
  using K = ChatTemplate::Kind;
  std::vector<std::string> specials;
  if (t_.kind == K::kChatML || t_.kind == K::kQwen3) specials = {"<|im_start|>", "<|im_end|>"};
  if (t_.kind == K::kLlama3 || t_.kind == K::kLlama31)
    specials = {bos_, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  if (t_.kind == K::kGemma) specials = {bos_, "<start_of_turn>", "<end_of_turn>"};
  const auto joined = [&](const std::string& before, int32_t id, const std::string& after) {
    std::vector<int32_t> want = tok_.encode(before);
    want.push_back(id);
    tok_.encode_append(after, want);
    return want;
  };
  for (const std::string& s : specials) {
    const int32_t id = tok_.token_to_id(s);
    if (id < 0 || tok_.encode(s) != std::vector<int32_t>{id})
      throw std::runtime_error(source_ + ": the " + t_.name + " template writes " + s +
                               ", which is not one token of this tokenizer (it has no such added token)");
    for (const auto& [before, after] : {std::pair<std::string, std::string>{"a", "a"}, {" \n", "\n "}})
      if (tok_.encode(before + s + after) != joined(before, id, after))
        throw std::runtime_error(source_ + ": the text around " + s + " joins it (lstrip, rstrip or single_word, or a "
                                 "pre-tokenizer that sees the whole text): the turns cannot be tokenized apart");
    specials_.emplace_back(s, id);
  }
}

int32_t ChatEncoder::special_id(const std::string& text) const {
  for (const auto& [s, id] : specials_)
    if (s == text) return id;
  throw std::logic_error("chat template: special token " + text + " was not checked");
}

// Each stretch of text between two special tokens is tokenized on its own (the special tokens split
// the text first, so this is the whole rendering's tokenization). A stretch is a header (not trained)
// followed by trained text: the tokens that lie inside the header are found by decoding them.
void ChatEncoder::encode(const std::vector<ChatMessage>& messages, std::vector<int32_t>& ids,
                         std::vector<int32_t>& mask) const {
  const std::vector<ChatPiece> pieces = render_chat(t_, messages, bos_);
  ids.clear();
  mask.clear();
  std::vector<int32_t> chunk;
  for (size_t i = 0; i < pieces.size();) {
    if (pieces[i].special) {
      ids.push_back(special_id(pieces[i].text));
      mask.push_back(pieces[i].trained ? 1 : 0);
      ++i;
      continue;
    }
    std::string head, body;
    for (; i < pieces.size() && !pieces[i].special; ++i) {
      if (pieces[i].trained) body += pieces[i].text;
      else if (body.empty()) head += pieces[i].text;
      else throw std::logic_error("chat template: untrained text after trained text between two special tokens");
    }
    chunk.clear();
    tok_.encode_append(head + body, chunk);
    size_t untrained = body.empty() ? chunk.size() : 0;
    if (!head.empty() && !body.empty()) {
      for (; untrained < chunk.size(); ++untrained) {
        const std::string d = tok_.decode(std::span<const int32_t>(chunk.data(), untrained + 1));
        if (d.size() > head.size()) break;  // this token reaches into the trained text
        if (head.compare(0, d.size(), d) != 0)
          throw std::runtime_error(source_ + ": the tokens of \"" + head +
                                   "\" do not decode to it: cannot place the loss mask");
      }
    }
    ids.insert(ids.end(), chunk.begin(), chunk.end());
    for (size_t k = 0; k < chunk.size(); ++k) mask.push_back(k < untrained ? 0 : 1);
  }
  if (ids.empty() || ids.back() != tok_.eod_id()) {
    ids.push_back(tok_.eod_id());
    mask.push_back(1);
  }
}

std::vector<int32_t> ChatEncoder::prompt(const std::vector<ChatMessage>& messages) const {
  std::vector<ChatPiece> pieces = render_chat(t_, messages, bos_);
  append_generation_prompt(t_, pieces);
  std::vector<int32_t> ids;
  std::string run;  // the text between two special tokens, tokenized as one stretch
  for (const ChatPiece& p : pieces) {
    if (!p.special) {
      run += p.text;
      continue;
    }
    if (!run.empty()) tok_.encode_append(run, ids);
    run.clear();
    ids.push_back(special_id(p.text));
  }
  if (!run.empty()) tok_.encode_append(run, ids);
  return ids;
}

}  // namespace gf::data
