// Chat templates for supervised fine-tuning data (preprocess_data --sft chat with a Hugging Face
// tokenizer): a conversation rendered as transformers' apply_chat_template(messages, tokenize=False)
// renders it with the model's own `chat_template`, its tokens, and a loss mask over them.
//
// transformers runs the template (a Jinja program) from tokenizer_config.json; here the known
// templates are recognised by signature strings taken from the real files, and each is transcribed:
//   chatml    plain ChatML turns "<|im_start|>ROLE\nCONTENT<|im_end|>\n" (no default system prompt)
//   qwen2     Qwen1.5 / Qwen2 Instruct: ChatML, a default system turn when the first is not a system
//             one ("You are a helpful assistant.", whatever the template's literal says)
//   qwen2.5   Qwen2.5: the same with "You are Qwen, created by Alibaba Cloud. You are a helpful
//             assistant." (the template's literal)
//   qwen3     Qwen3 (both published revisions): ChatML with reasoning. An assistant turn after the
//             last user turn gets "<think>\nREASONING\n</think>\n\n" before its content (the last
//             turn always, empty reasoning included; earlier ones only with reasoning); assistant
//             turns before it lose their reasoning. REASONING is the turn's `reasoning_content`,
//             else what a content holding "</think>" has before it (after "<think>").
//   llama3    Llama 3 Instruct: "<|begin_of_text|>" then "<|start_header_id|>ROLE<|end_header_id|>\n\n"
//             + trimmed content + "<|eot_id|>" per turn; Meta-Llama-3's first template also ends with
//             the assistant header (it does not test add_generation_prompt), and so does its rendering
//   llama3.1  Llama 3.1: a system header first, always: "Cutting Knowledge Date: December 2023\n" and
//             "Today Date: 26 Jul 2024\n\n" (the template's default date_string, which transformers
//             leaves to it) + the trimmed system content
//   gemma     Gemma: "<bos>", then "<start_of_turn>user\n" / "<start_of_turn>model\n" + trimmed content
//             + "<end_of_turn>\n"; users and the model must alternate, starting with a user. Gemma 3
//             folds a system turn into the first user turn (CONTENT + "\n\n" before it); Gemma 1 and 2
//             refuse one ("System role not supported"), as their templates raise.
// Any other template is refused, named by its family where it has a known one (Llama 3.2, whose
// Today Date is the day it runs; Llama 2 / Mistral [INST]; Phi-3; ...); --chat-template NAME renders
// one of the above instead of the file's template.
//
// Loss mask (as TRL's assistant-only loss with its Llama 3 training template's {% generation %}
// block): the tokens of each assistant turn's content (Qwen3: its think block too) and of its
// end-of-turn token are trained; the role headers, the other turns and the newline after an
// end-of-turn token are not. A token that holds characters of both a header and the content is
// trained (transformers' return_assistant_tokens_mask maps the span's characters to tokens).
// After the conversation the eod (eos) token, trained, unless the rendering already ends with it
// (Megatron-LM's SFTDataset: "Add EOD, unless it's already present").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/data/hf_tokenizer.h"

namespace gf::data {

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
  std::optional<std::string> reasoning_content;  // Qwen3's reasoning of an assistant turn (others ignore it)
};

struct ChatTemplate {
  enum class Kind { kChatML, kQwen3, kLlama3, kLlama31, kGemma };
  Kind kind = Kind::kChatML;
  std::string name;            // the --chat-template name that renders the same
  std::string description;     // for the log and messages
  std::string default_system;  // ChatML: the system turn put first when the conversation has none ("": none)
  bool generation_prompt_always = false;  // Llama 3's first template: ends with the assistant header
  bool system_refused = false;            // Gemma 1 / 2: a system turn is an error
};

// --chat-template's names, in the order --help lists them.
const std::vector<std::string>& chat_template_names();
// The template --chat-template NAME renders. Throws std::invalid_argument listing the names.
ChatTemplate chat_template_named(const std::string& name);
// Recognises a tokenizer_config.json chat_template. Throws std::runtime_error naming the template's
// family (or "an unrecognised template" and its first characters) and what is accepted.
ChatTemplate recognise_chat_template(const std::string& jinja);

// The rendering as pieces whose concatenation is apply_chat_template's text. A special piece is a
// special token the template writes (bos, turn markers), tokenized alone; `trained` marks the loss mask.
struct ChatPiece {
  std::string text;
  bool trained = false;
  bool special = false;
};
// Throws std::runtime_error for a conversation the template refuses (its raise_exception message).
std::vector<ChatPiece> render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                                   const std::string& bos_token);
std::string rendered_text(const std::vector<ChatPiece>& pieces);
// apply_chat_template(add_generation_prompt=True)'s ending: the assistant's header after the conversation
// (ChatML and Qwen3 "<|im_start|>assistant\n", Llama 3 "<|start_header_id|>assistant<|end_header_id|>\n\n"
// unless the template always writes it, Gemma "<start_of_turn>model\n").
void append_generation_prompt(const ChatTemplate& t, std::vector<ChatPiece>& pieces);

// Python's str.strip() (Jinja's `trim`): removes leading and trailing Unicode White_Space as Python's
// str.isspace() knows it (U+0009-000D, U+001C-001F, U+0020, U+0085, U+00A0, U+1680, U+2000-200A,
// U+2028, U+2029, U+202F, U+205F, U+3000).
std::string python_strip(const std::string& utf8);

// A template with the tokenizer that tokenizes its renderings. Thread safe (const).
class ChatEncoder {
 public:
  // tokenizer: a tokenizer.json or its directory; tokenizer_config.json (and chat_template.jinja, which
  // transformers prefers when present) beside it. chat_template: a --chat-template name, or "" to
  // recognise the file's template. Throws std::runtime_error naming the file and what is wrong.
  static ChatEncoder load(const std::string& tokenizer, const std::string& chat_template);
  // Checks that each special token the template writes is one token of `tok` that the text around it
  // never joins (so each stretch of text between them tokenizes alone, as in the whole rendering).
  ChatEncoder(HFTokenizer tok, ChatTemplate t, std::string bos_token, std::string source);

  // Replaces ids and mask with the conversation's tokens and loss mask (1 = trained), eod included.
  void encode(const std::vector<ChatMessage>& messages, std::vector<int32_t>& ids, std::vector<int32_t>& mask) const;

  // The tokens of the conversation and the generation prompt, for the model to continue (no eod): what
  // apply_chat_template(messages, add_generation_prompt=True, tokenize=True) gives.
  std::vector<int32_t> prompt(const std::vector<ChatMessage>& messages) const;

  const ChatTemplate& chat_template() const { return t_; }
  const std::string& source() const { return source_; }  // where the template came from, for the log
  int32_t eod_id() const { return tok_.eod_id(); }

 private:
  int32_t special_id(const std::string& text) const;

  HFTokenizer tok_;
  ChatTemplate t_;
  std::string bos_, source_;
  std::vector<std::pair<std::string, int32_t>> specials_;
};

}  // namespace gf::data
