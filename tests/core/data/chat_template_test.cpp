// Chat templates for --sft chat (core/data/chat_template.h): which real templates are recognised and
// which refused, what each renders, and the ids and loss masks over small tokenizers.
//
// tests/golden/chat/templates/*: real tokenizer_config.json files (their added_tokens_decoder left
// out) and Qwen3's later revision as a chat_template.jinja (tests/golden/chat/README.md says where
// each comes from). tests/golden/chat/expected/*.jsonl: per line of tests/golden/chat/conversations.jsonl
// the ids and mask tools/chat_template_reference.py computes (the real template rendered by jinja2,
// the Rust crate `tokenizers` tokenizing it) over tests/data/hf_tokenizer's Qwen2 and Llama 3 layouts
// and tests/golden/chat/gemma_turns; tests/integration/chat_templates.sh checks them and the full
// real tokenizers.
#include "core/data/chat_template.h"
#include "tests/core/data/text_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace gf::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSrc = fs::path(GF_SOURCE_DIR);
const fs::path kGolden = kSrc / "tests" / "golden" / "chat";

using test::read_file;

// The template of a fixture folder, as ChatEncoder::load finds it.
std::string template_of(const std::string& name) {
  const fs::path dir = kGolden / "templates" / name;
  if (fs::exists(dir / "chat_template.jinja")) return read_file(dir / "chat_template.jinja");
  return json::parse(read_file(dir / "tokenizer_config.json"))["chat_template"].get<std::string>();
}

std::string refusal(const std::string& jinja) {
  try {
    recognise_chat_template(jinja);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ChatTemplate, RecognisesTheRealTemplates) {
  const ChatTemplate q25 = recognise_chat_template(template_of("qwen2_5"));
  EXPECT_EQ(q25.name, "qwen2.5");
  EXPECT_EQ(q25.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  const ChatTemplate q2 = recognise_chat_template(template_of("qwen2_instruct"));
  EXPECT_EQ(q2.name, "qwen2");
  EXPECT_EQ(q2.default_system, "You are a helpful assistant.");
  EXPECT_EQ(recognise_chat_template(template_of("qwen3")).name, "qwen3");
  EXPECT_EQ(recognise_chat_template(template_of("qwen3_revised")).name, "qwen3");
  const ChatTemplate first = recognise_chat_template(template_of("llama3"));
  EXPECT_EQ(first.name, "llama3");
  EXPECT_TRUE(first.generation_prompt_always);
  const ChatTemplate l3 = recognise_chat_template(template_of("llama3_instruct"));
  EXPECT_EQ(l3.name, "llama3");
  EXPECT_FALSE(l3.generation_prompt_always);
  EXPECT_EQ(recognise_chat_template(template_of("llama3_1")).name, "llama3.1");
  const ChatTemplate g3 = recognise_chat_template(template_of("gemma3"));
  EXPECT_EQ(g3.name, "gemma");
  EXPECT_FALSE(g3.system_refused);
  const ChatTemplate g = recognise_chat_template(template_of("gemma_it"));
  EXPECT_EQ(g.name, "gemma");
  EXPECT_TRUE(g.system_refused);
}

TEST(ChatTemplate, RefusesOtherTemplatesByName) {
  EXPECT_NE(refusal(template_of("llama3_2")).find("Llama 3.2's"), std::string::npos);
  EXPECT_NE(refusal(template_of("llama3_2")).find("--chat-template llama3.1"), std::string::npos);
  const std::string mistral =
      "{{ bos_token }}{% for message in messages %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endfor %}";
  EXPECT_NE(refusal(mistral).find("a Llama 2 / Mistral [INST] template: not supported; accepted:"), std::string::npos);
  // One changed literal makes a known template unknown: here Qwen2.5's turns without their newline.
  std::string changed = template_of("qwen2_5");
  const std::string turn = "message.content + '<|im_end|>' + '\\n'";
  ASSERT_NE(changed.find(turn), std::string::npos);
  changed.replace(changed.find(turn), turn.size(), "message.content + '<|im_end|>'");
  EXPECT_NE(refusal(changed).find("a ChatML template that is none of the known ones"), std::string::npos);
  EXPECT_NE(refusal("{{ messages }}").find("an unrecognised template (\"{{ messages }}\")"), std::string::npos);
  EXPECT_THROW(chat_template_named("vicuna"), std::invalid_argument);
}

std::vector<ChatMessage> conv(std::initializer_list<std::pair<const char*, const char*>> turns) {
  std::vector<ChatMessage> out;
  for (const auto& [role, content] : turns) out.push_back({role, content, std::nullopt});
  return out;
}

std::string trained_text(const std::vector<ChatPiece>& pieces) {
  std::string s;
  for (const ChatPiece& p : pieces)
    if (p.trained) s += p.text;
  return s;
}

TEST(ChatTemplate, RendersAsTransformers) {
  const auto hi = conv({{"user", "Hi"}, {"assistant", "Hello"}});
  // Qwen3's template puts an empty think block before the last answer (transformers' output for it).
  const auto q3 = render_chat(chat_template_named("qwen3"), hi, "");
  EXPECT_EQ(rendered_text(q3),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello<|im_end|>\n");
  EXPECT_EQ(trained_text(q3), "<think>\n\n</think>\n\nHello<|im_end|>");
  const auto q25 = render_chat(chat_template_named("qwen2.5"), hi, "");
  EXPECT_EQ(rendered_text(q25),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n");
  EXPECT_EQ(trained_text(q25), "Hello<|im_end|>");
  const auto sys = conv({{"system", " Be brief.\n"}, {"user", " Hi "}, {"assistant", "\u3000Hello\n"}});
  EXPECT_EQ(rendered_text(render_chat(chat_template_named("llama3.1"), sys, "<|begin_of_text|>")),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>");
  EXPECT_EQ(rendered_text(render_chat(chat_template_named("llama3"), sys, "<|begin_of_text|>")),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>");
  // Gemma 3 folds the system turn, untrimmed, into the first user turn.
  const auto g = render_chat(chat_template_named("gemma"), sys, "<bos>");
  EXPECT_EQ(rendered_text(g),
            "<bos><start_of_turn>user\n Be brief.\n\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n");
  EXPECT_EQ(trained_text(g), "Hello<end_of_turn>");
}

// apply_chat_template(add_generation_prompt=True): each template's `if add_generation_prompt` branch (Qwen3's with
// enable_thinking undefined), after the conversation.
TEST(ChatTemplate, GenerationPromptAsTheTemplatesWriteIt) {
  const auto hi = conv({{"user", "Hi"}});
  const auto with_prompt = [&](const char* name, const std::string& bos) {
    std::vector<ChatPiece> p = render_chat(chat_template_named(name), hi, bos);
    append_generation_prompt(chat_template_named(name), p);
    return rendered_text(p);
  };
  EXPECT_EQ(with_prompt("chatml", ""), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(with_prompt("qwen3", ""), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(with_prompt("llama3", "<|begin_of_text|>"),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n");
  EXPECT_EQ(with_prompt("gemma", "<bos>"), "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  // The header is written once, whether or not the template always writes it.
  ChatTemplate always = chat_template_named("llama3");
  always.generation_prompt_always = true;
  std::vector<ChatPiece> p = render_chat(always, hi, "<|begin_of_text|>");
  append_generation_prompt(always, p);
  EXPECT_EQ(rendered_text(p), with_prompt("llama3", "<|begin_of_text|>"));
}

TEST(ChatTemplate, Qwen3KeepsReasoningAfterTheLastQueryOnly) {
  std::vector<ChatMessage> m = conv({{"user", "q1"}, {"assistant", "<think>\nr1\n</think>\n\na1"}, {"user", "q2"},
                                     {"assistant", "a2"}, {"assistant", "a3"}});
  m[3].reasoning_content = "r2";
  EXPECT_EQ(rendered_text(render_chat(chat_template_named("qwen3"), m, "")),
            "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\na3<|im_end|>\n");
}

TEST(ChatTemplate, GemmaRefusesWhatItsTemplatesRaiseOn) {
  ChatTemplate gemma12 = recognise_chat_template(template_of("gemma_it"));
  const auto sys = conv({{"system", "S"}, {"user", "Hi"}, {"assistant", "Hello"}});
  EXPECT_THROW(
      {
        try {
          render_chat(gemma12, sys, "<bos>");
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("System role not supported"), std::string::npos);
          throw;
        }
      },
      std::runtime_error);
  EXPECT_THROW(render_chat(chat_template_named("gemma"), conv({{"assistant", "first"}}), "<bos>"), std::runtime_error);
  EXPECT_THROW(render_chat(chat_template_named("gemma"), conv({{"user", "a"}, {"user", "b"}}), "<bos>"),
               std::runtime_error);
}

TEST(ChatTemplate, PythonStrip) {
  EXPECT_EQ(python_strip("\u3000\u00a0\t x y \u2028\x1c\u0085\n"), "x y");
  EXPECT_EQ(python_strip("\u200bx\u180e"), "\u200bx\u180e");  // neither is Python whitespace
  EXPECT_EQ(python_strip(" \u2003 "), "");
}

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/gf_chat_template_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

// The turns as preprocess_data reads them (tools/preprocess_data.cpp chat_messages).
std::vector<ChatMessage> messages_of(const json& doc) {
  std::vector<ChatMessage> out;
  const bool sharegpt = doc.contains("conversations");
  for (const json& t : doc[sharegpt ? "conversations" : "messages"]) {
    ChatMessage m;
    m.role = t[sharegpt ? "from" : "role"].get<std::string>();
    m.content = t[sharegpt ? "value" : "content"].get<std::string>();
    if (m.role == "human") m.role = "user";
    if (m.role == "gpt") m.role = "assistant";
    if (t.contains("reasoning_content") && t["reasoning_content"].is_string())
      m.reasoning_content = t["reasoning_content"].get<std::string>();
    out.push_back(m);
  }
  return out;
}

void check_golden(const std::string& name, const fs::path& tokenizer, const std::string& expected_template) {
  SCOPED_TRACE(name);
  TempDir dir;
  fs::copy_file(tokenizer, dir.path / "tokenizer.json");
  for (const auto& f : fs::directory_iterator(kGolden / "templates" / name))
    fs::copy_file(f.path(), dir.path / f.path().filename());
  const ChatEncoder enc = ChatEncoder::load(dir.path.string(), "");
  EXPECT_EQ(enc.chat_template().name, expected_template);
  std::istringstream expected(read_file(kGolden / "expected" / (name + ".jsonl")));
  std::istringstream convs(read_file(kGolden / "conversations.jsonl"));
  std::string want_line, conv_line;
  int n = 0;
  while (std::getline(convs, conv_line)) {
    ASSERT_TRUE(std::getline(expected, want_line)) << "fewer goldens than conversations";
    const json want = json::parse(want_line);
    std::vector<int32_t> ids, mask;
    SCOPED_TRACE("conversation " + std::to_string(++n));
    if (want.contains("error")) {
      try {
        enc.encode(messages_of(json::parse(conv_line)), ids, mask);
        ADD_FAILURE() << "accepted; the template refuses it: " << want["error"];
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(want["error"].get<std::string>()), std::string::npos) << e.what();
      }
      continue;
    }
    enc.encode(messages_of(json::parse(conv_line)), ids, mask);
    EXPECT_EQ(ids, want["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(mask, want["mask"].get<std::vector<int32_t>>());
  }
  EXPECT_GT(n, 0);
}

TEST(ChatTemplate, GoldenIdsAndMasks) {
  const fs::path qwen = kSrc / "tests" / "data" / "hf_tokenizer" / "qwen2" / "tokenizer.json";
  const fs::path llama = kSrc / "tests" / "data" / "hf_tokenizer" / "llama3" / "tokenizer.json";
  const fs::path gemma = kGolden / "gemma_turns" / "tokenizer.json";
  check_golden("qwen2_5", qwen, "qwen2.5");
  check_golden("qwen2_instruct", qwen, "qwen2");
  check_golden("qwen3", qwen, "qwen3");
  check_golden("qwen3_revised", qwen, "qwen3");
  check_golden("llama3", llama, "llama3");
  check_golden("llama3_instruct", llama, "llama3");
  check_golden("llama3_1", llama, "llama3.1");
  check_golden("gemma3", gemma, "gemma");
  check_golden("gemma_it", gemma, "gemma");
}

TEST(ChatTemplate, RefusesATokenizerWithoutTheTurnTokens) {
  TempDir dir;
  fs::copy_file(kSrc / "tests" / "data" / "hf_tokenizer" / "gpt2" / "tokenizer.json", dir.path / "tokenizer.json");
  try {
    ChatEncoder::load(dir.path.string(), "chatml");
    ADD_FAILURE() << "accepted a tokenizer without <|im_start|>";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("writes <|im_start|>, which is not one token of this tokenizer"), std::string::npos) << what;
  }
  try {
    ChatEncoder::load(dir.path.string(), "");
    ADD_FAILURE() << "accepted a tokenizer without a chat template";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("has no chat_template"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gf::data
