// `gridformer serve` (runner/infer/serve.h): the HTTP side. Each request is checked and turned into jobs on the
// server's thread for it; the model loop (runner/infer/serve_engine.h) runs on the main thread; a watcher thread
// turns SIGTERM into a drain.
#include "runner/infer/serve.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "core/data/chat_template.h"
#include "models/registry.h"
#include "runner/infer/generate.h"
#include "runner/infer/serve_engine.h"
#include "runner/train/stop_signals.h"

namespace gf {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A request answered with an error: OpenAI's shape {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status;
  std::string message, param;
};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "") {
  const char* type = status == 429 ? "rate_limit_error" : status == 503 ? "service_unavailable" : status == 404
                                                                                                       ? "not_found_error"
                                                                                                       : "invalid_request_error";
  res.status = status;
  res.set_content(dump({{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)},
                                   {"code", json()}}}}),
                  "application/json");
}

// What a completions or chat request asks of each of its prompts.
struct Params {
  int64_t max_tokens = 16;
  SamplingOptions so;
  std::vector<std::string> stop;
  int64_t logprobs = -1;
  bool echo = false, stream = false;
};

double number(const json& v, const char* key) {
  if (!v.is_number()) throw ApiError{400, std::string(key) + " must be a number", key};
  return v.get<double>();
}
int64_t integer(const json& v, const char* key) {
  if (!v.is_number_integer()) throw ApiError{400, std::string(key) + " must be an integer", key};
  return v.get<int64_t>();
}
bool boolean(const json& v, const char* key) {
  if (!v.is_boolean()) throw ApiError{400, std::string(key) + " must be true or false", key};
  return v.get<bool>();
}

// The keys both APIs share; `keys` the endpoint's whole set (any other is refused by name).
Params read_params(const json& body, const std::set<std::string>& keys, const GenerationConfig& gc, uint64_t seed,
                   const std::string& model_name) {
  for (const auto& [k, v] : body.items())
    if (!keys.count(k)) throw ApiError{400, "unrecognised request argument: " + k, k};
  Params p;
  // The config's decoding keys where the request says nothing (vLLM's generation config defaults).
  p.so.do_sample = gc.do_sample;
  p.so.temperature = gc.temperature;
  p.so.top_k = gc.do_sample ? gc.top_k : 0;
  p.so.top_p = gc.top_p;
  p.so.repetition_penalty = gc.repetition_penalty;
  p.so.seed = seed;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) throw ApiError{400, "model must be a string", "model"};
    if (body["model"].get<std::string>() != model_name)
      throw ApiError{404, "the model `" + body["model"].get<std::string>() + "` does not exist; this server has `" +
                              model_name + "` (GET /v1/models)", "model"};
  }
  for (const char* k : {"max_tokens", "max_completion_tokens"})
    if (body.contains(k) && !body[k].is_null()) {
      p.max_tokens = integer(body[k], k);
      if (p.max_tokens < 0) throw ApiError{400, std::string(k) + " must be >= 0", k};
    }
  if (body.contains("temperature") && !body["temperature"].is_null()) {
    const double t = number(body["temperature"], "temperature");
    if (t < 0 || t > 2) throw ApiError{400, "temperature must be in [0, 2]", "temperature"};
    p.so.do_sample = t > 0;
    if (t > 0) p.so.temperature = t;
    if (t > 0 && !body.contains("top_k")) p.so.top_k = 0;  // OpenAI has no top-k: all tokens
  }
  if (body.contains("top_p") && !body["top_p"].is_null()) {
    p.so.top_p = number(body["top_p"], "top_p");
    if (!(p.so.top_p > 0 && p.so.top_p <= 1)) throw ApiError{400, "top_p must be in (0, 1]", "top_p"};
  }
  if (body.contains("top_k") && !body["top_k"].is_null()) {
    const int64_t k = integer(body["top_k"], "top_k");
    if (k < -1) throw ApiError{400, "top_k must be -1 (all), 0 (all) or positive", "top_k"};
    p.so.top_k = std::max<int64_t>(k, 0);
  }
  if (body.contains("repetition_penalty") && !body["repetition_penalty"].is_null()) {
    p.so.repetition_penalty = number(body["repetition_penalty"], "repetition_penalty");
    if (!(p.so.repetition_penalty > 0)) throw ApiError{400, "repetition_penalty must be > 0", "repetition_penalty"};
  }
  if (body.contains("seed") && !body["seed"].is_null()) p.so.seed = static_cast<uint64_t>(integer(body["seed"], "seed"));
  if (body.contains("n") && !body["n"].is_null() && integer(body["n"], "n") != 1)
    throw ApiError{400, "n other than 1 is not built: send the request again for another choice", "n"};
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (body.contains(k) && !body[k].is_null() && number(body[k], k) != 0)
      throw ApiError{400, std::string(k) + " is not built (repetition_penalty is)", k};
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& s = body["stop"];
    if (s.is_string()) {
      p.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (const json& x : s) {
        if (!x.is_string()) throw ApiError{400, "stop must be a string or a list of up to 4 strings", "stop"};
        p.stop.push_back(x.get<std::string>());
      }
    } else {
      throw ApiError{400, "stop must be a string or a list of up to 4 strings", "stop"};
    }
    for (const std::string& x : p.stop)
      if (x.empty()) throw ApiError{400, "a stop string is empty", "stop"};
  }
  if (body.contains("stream") && !body["stream"].is_null()) p.stream = boolean(body["stream"], "stream");
  if (body.contains("stream_options") && !body["stream_options"].is_null() && !body["stream_options"].is_object())
    throw ApiError{400, "stream_options must be an object", "stream_options"};
  return p;
}

struct Server {
  const Config& cfg;
  const data::TextTokenizer& tok;
  std::optional<data::ChatEncoder> chat_encoder;   // a Hugging Face tokenizer's template
  std::optional<data::ChatTemplate> chat_named;    // --chat-template with another tokenizer: rendered as text
  ServeEngine& engine;
  std::string model_name;
  int64_t vocab = 0;
  std::atomic<int64_t> ids{0};
  std::atomic<int64_t> served{0};

  // A prompt's tokens: checked against the vocabulary and the context.
  void check_prompt(const std::vector<int32_t>& ids_, int64_t max_tokens, const char* param) const {
    if (ids_.empty()) throw ApiError{400, "a prompt is empty: it needs at least one token", param};
    for (const int32_t t : ids_)
      if (t < 0 || t >= vocab)
        throw ApiError{400, "token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(vocab) +
                                " tokens)", param};
    const int64_t n = static_cast<int64_t>(ids_.size());
    if (n + max_tokens > engine.capacity())
      throw ApiError{400, "This model's maximum context length is " + std::to_string(engine.capacity()) +
                              " tokens. However, you requested " + std::to_string(n + max_tokens) + " tokens (" +
                              std::to_string(n) + " in the prompt, " + std::to_string(max_tokens) +
                              " in the completion). Please reduce the prompt or max_tokens.", param};
  }

  std::vector<std::shared_ptr<ServeJob>> jobs_for(const std::vector<std::vector<int32_t>>& prompts, const Params& p,
                                                  bool prompt_logprobs) {
    std::vector<std::shared_ptr<ServeJob>> jobs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto j = std::make_shared<ServeJob>();
      j->prompt = prompts[i];
      j->max_tokens = p.max_tokens;
      j->so = p.so;
      j->stream = i;
      j->logprobs = p.logprobs;
      j->prompt_logprobs = prompt_logprobs;
      j->stop = p.stop;
      jobs.push_back(std::move(j));
    }
    return jobs;
  }

  // Submits; an error when the queue is full or the server stopping.
  void submit(const std::vector<std::shared_ptr<ServeJob>>& jobs) {
    switch (engine.submit(jobs)) {
      case ServeEngine::Submitted::kOk:
        return;
      case ServeEngine::Submitted::kQueueFull:
        throw ApiError{429, "the server is busy: " + std::to_string(engine.max_queue()) +
                                " prompts are already waiting (--max-queue); retry later", ""};
      case ServeEngine::Submitted::kStopping:
        throw ApiError{503, "the server is stopping (SIGTERM): it takes no new requests", ""};
    }
  }

  static void wait_done(ServeJob& j) {
    std::unique_lock<std::mutex> l(j.mu);
    j.cv.wait(l, [&] { return j.done; });
  }

  std::string token_text(int32_t t) const { return tok.decode(std::span<const int32_t>(&t, 1)); }

  json logprobs_json(const ServeJob& j, bool echo) const {
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    int64_t offset = 0;
    const auto add = [&](int32_t t, const TokenLogprob* lp) {
      const std::string s = token_text(t);
      tokens.push_back(s);
      offsets.push_back(offset);
      offset += static_cast<int64_t>(s.size());
      if (lp == nullptr) {
        lps.push_back(nullptr);
        tops.push_back(nullptr);
        return;
      }
      lps.push_back(lp->logprob);
      json top = json::object();
      for (const auto& [id, v] : lp->top) top[token_text(id)] = v;
      tops.push_back(top);
    };
    if (echo)
      for (size_t i = 0; i < j.prompt.size(); ++i) add(j.prompt[i], i == 0 ? nullptr : &j.prompt_lp[i - 1]);
    for (size_t i = 0; i < j.generated.size(); ++i) add(j.generated[i], &j.generated_lp[i]);
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  json usage(const std::vector<std::shared_ptr<ServeJob>>& jobs) const {
    int64_t p = 0, c = 0;
    for (const auto& j : jobs) p += static_cast<int64_t>(j->prompt.size()), c += static_cast<int64_t>(j->generated.size());
    return {{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
  }

  std::vector<std::vector<int32_t>> prompts_of(const json& body, int64_t max_tokens) const {
    if (!body.contains("prompt")) throw ApiError{400, "prompt is required", "prompt"};
    const json& p = body["prompt"];
    std::vector<std::vector<int32_t>> out;
    const auto ids_of = [&](const json& a) {
      std::vector<int32_t> v;
      for (const json& x : a) {
        if (!x.is_number_integer()) throw ApiError{400, "a token-id prompt must hold integers", "prompt"};
        v.push_back(static_cast<int32_t>(std::clamp<int64_t>(x.get<int64_t>(), -1, INT32_MAX)));
      }
      return v;
    };
    if (p.is_string()) {
      out.push_back(tok.encode(p.get<std::string>()));
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      out.push_back(ids_of(p));
    } else if (p.is_array() && !p.empty()) {
      for (const json& x : p) {
        if (x.is_string()) out.push_back(tok.encode(x.get<std::string>()));
        else if (x.is_array()) out.push_back(ids_of(x));
        else throw ApiError{400, "prompt must be a string, a list of strings, token ids or lists of token ids", "prompt"};
      }
    } else {
      throw ApiError{400, "prompt must be a string, a list of strings, token ids or lists of token ids (not empty)",
                     "prompt"};
    }
    if (static_cast<int64_t>(out.size()) > engine.max_queue())
      throw ApiError{400, std::to_string(out.size()) + " prompts in one request: more than --max-queue (" +
                              std::to_string(engine.max_queue()) + ") can ever hold", "prompt"};
    for (const auto& ids_ : out) check_prompt(ids_, max_tokens, "prompt");
    return out;
  }

  std::vector<int32_t> chat_prompt(const json& body) const {
    if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
      throw ApiError{400, "messages must be a non-empty list of {role, content}", "messages"};
    std::vector<data::ChatMessage> m;
    for (const json& x : body["messages"]) {
      if (!x.is_object() || !x.contains("role") || !x["role"].is_string() || !x.contains("content"))
        throw ApiError{400, "each message needs a role (string) and a content", "messages"};
      data::ChatMessage msg;
      msg.role = x["role"].get<std::string>();
      if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
        throw ApiError{400, "role `" + msg.role + "`: system, user or assistant", "messages"};
      const json& c = x["content"];
      if (c.is_string()) {
        msg.content = c.get<std::string>();
      } else if (c.is_array()) {  // text parts
        for (const json& part : c) {
          if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
            throw ApiError{400, "a content part must be {\"type\": \"text\", \"text\": ...} (no other kind is built)",
                           "messages"};
          msg.content += part["text"].get<std::string>();
        }
      } else {
        throw ApiError{400, "content must be a string or a list of text parts", "messages"};
      }
      m.push_back(std::move(msg));
    }
    try {
      if (chat_encoder) return chat_encoder->prompt(m);
      if (chat_named) {
        std::vector<data::ChatPiece> pieces = data::render_chat(*chat_named, m, "");
        data::append_generation_prompt(*chat_named, pieces);
        return tok.encode(data::rendered_text(pieces));
      }
    } catch (const std::runtime_error& e) {
      throw ApiError{400, std::string("the chat template refuses the conversation: ") + e.what(), "messages"};
    }
    throw ApiError{400, "this model has no chat template: start the server with --chat-template NAME, or use "
                        "/v1/completions", "messages"};
  }

  void completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    const auto t0 = Clock::now();
    const json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object())
      throw ApiError{400, "the request body is not a JSON object", ""};
    static const std::set<std::string> kCompletion = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k",
                                                      "n", "stream", "stream_options", "logprobs", "echo", "stop",
                                                      "seed", "presence_penalty", "frequency_penalty",
                                                      "repetition_penalty", "user"};
    static const std::set<std::string> kChat = {"model", "messages", "max_tokens", "max_completion_tokens",
                                                "temperature", "top_p", "top_k", "n", "stream", "stream_options",
                                                "stop", "seed", "presence_penalty", "frequency_penalty",
                                                "repetition_penalty", "user"};
    const uint64_t seed = static_cast<uint64_t>(cfg.seed) + static_cast<uint64_t>(ids.load());
    Params p = read_params(body, chat ? kChat : kCompletion, cfg.generation, seed, model_name);
    if (!chat) {
      if (body.contains("echo") && !body["echo"].is_null()) p.echo = boolean(body["echo"], "echo");
      if (body.contains("logprobs") && !body["logprobs"].is_null()) {
        p.logprobs = integer(body["logprobs"], "logprobs");
        if (p.logprobs < 0 || p.logprobs > 20) throw ApiError{400, "logprobs must be in [0, 20]", "logprobs"};
      }
      if (p.stream && (p.echo || p.logprobs >= 0))
        throw ApiError{400, "stream with echo or logprobs is not built: ask without stream", "stream"};
    }
    if (p.max_tokens == 0 && !p.echo) throw ApiError{400, "max_tokens 0 without echo asks for nothing", "max_tokens"};
    std::vector<std::vector<int32_t>> prompts;
    if (chat) {
      prompts.push_back(chat_prompt(body));
      check_prompt(prompts.back(), p.max_tokens, "messages");
    } else {
      prompts = prompts_of(body, p.max_tokens);
    }
    std::vector<std::shared_ptr<ServeJob>> jobs = jobs_for(prompts, p, p.echo && p.logprobs >= 0);
    submit(jobs);
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(ids++);
    const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch()).count();
    if (p.stream) {
      stream_response(res, jobs, id, created, chat, p);
      return;
    }
    json choices = json::array();
    for (size_t i = 0; i < jobs.size(); ++i) {
      ServeJob& j = *jobs[i];
      wait_done(j);
      std::lock_guard<std::mutex> l(j.mu);
      if (chat) {
        choices.push_back({{"index", i}, {"message", {{"role", "assistant"}, {"content", j.text}}},
                           {"logprobs", nullptr}, {"finish_reason", j.finish_reason}});
      } else {
        choices.push_back({{"index", i}, {"text", p.echo ? j.prompt_text + j.text : j.text},
                           {"logprobs", p.logprobs >= 0 ? logprobs_json(j, p.echo) : json()},
                           {"finish_reason", j.finish_reason}});
      }
    }
    const json u = usage(jobs);
    res.set_content(dump({{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                          {"model", model_name}, {"choices", choices}, {"usage", u}}),
                    "application/json");
    spdlog::info("serve: {}: {} prompt(s), {} prompt + {} generated tokens in {:.3f} s", id, jobs.size(),
                 u["prompt_tokens"].get<int64_t>(), u["completion_tokens"].get<int64_t>(),
                 std::chrono::duration<double>(Clock::now() - t0).count());
    ++served;
  }

  // Server-sent events: each job's text as it grows (held back while it could still turn into a stop string),
  // its finish reason, then [DONE].
  void stream_response(httplib::Response& res, std::vector<std::shared_ptr<ServeJob>> jobs, const std::string& id,
                       int64_t created, bool chat, const Params& p) {
    size_t hold = 0;
    for (const std::string& s : p.stop) hold = std::max(hold, s.size() - 1);
    const std::string model = model_name;
    const std::string object = chat ? "chat.completion.chunk" : "text_completion";
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [jobs, id, created, chat, hold, model, object](
                                                              size_t, httplib::DataSink& sink) {
      const auto event = [&](const json& choice) {
        const std::string s = "data: " + dump({{"id", id}, {"object", object}, {"created", created}, {"model", model},
                                               {"choices", json::array({choice})}}) + "\n\n";
        return sink.write(s.data(), s.size());
      };
      for (size_t i = 0; i < jobs.size(); ++i) {
        ServeJob& j = *jobs[i];
        if (chat && !event({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                            {"finish_reason", nullptr}}))
          return false;
        size_t sent = 0;
        for (;;) {
          std::string delta, reason;
          {
            std::unique_lock<std::mutex> l(j.mu);
            const size_t seen = j.generated.size();
            j.cv.wait(l, [&] { return j.done || j.generated.size() > seen || j.text.size() > sent + hold; });
            const size_t ready = j.done ? j.text.size() : (j.text.size() > hold ? j.text.size() - hold : 0);
            if (ready > sent) delta = j.text.substr(sent, ready - sent), sent = ready;
            if (j.done) reason = j.finish_reason;
          }
          // A multi-byte character split between tokens waits for its last byte (GPT-2's byte tokens).
          if (!delta.empty() &&
              !event(chat ? json{{"index", i}, {"delta", {{"content", delta}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}
                          : json{{"index", i}, {"text", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}}))
            return false;
          if (!reason.empty()) {
            if (!event(chat ? json{{"index", i}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", reason}}
                            : json{{"index", i}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", reason}}))
              return false;
            break;
          }
        }
      }
      const std::string done = "data: [DONE]\n\n";
      sink.write(done.data(), done.size());
      sink.done();
      return true;
    });
    ++served;
  }
};

// The chat template: a Hugging Face tokenizer's own (or --chat-template's, tokenized as that tokenizer does);
// with another tokenizer --chat-template's rendering as text.
void choose_chat_template(Server& s, const Config& cfg, const ServeOptions& opt) {
  const std::string type = cfg.generation.tokenizer_type.empty()
                               ? std::string()
                               : data::tokenizer_type_from_mindformers(cfg.generation.tokenizer_type);
  if (type == "HuggingFaceTokenizer") {
    try {
      s.chat_encoder.emplace(data::ChatEncoder::load(cfg.generation.vocab_file, opt.chat_template));
      spdlog::info("serve: chat template {} ({})", s.chat_encoder->chat_template().description, s.chat_encoder->source());
    } catch (const std::runtime_error& e) {
      if (!opt.chat_template.empty()) throw;
      spdlog::warn("serve: no chat template ({}): /v1/chat/completions answers 400; --chat-template NAME gives one",
                   e.what());
    }
    return;
  }
  if (!opt.chat_template.empty()) {
    s.chat_named = data::chat_template_named(opt.chat_template);
    spdlog::info("serve: chat template {} (--chat-template), rendered as text for the {} tokenizer",
                 s.chat_named->description, type.empty() ? std::string("GPT-2 BPE") : type);
  }
}

}  // namespace

int run_serve(const Config& cfg, const ParallelContext& ctx, const ServeOptions& opt) {
  if (ctx.world().size() != 1)
    throw std::runtime_error("serve runs on one rank (no mpirun, or -np 1): a model split over ranks is not served yet");
  if (opt.slots < 1 || opt.max_queue < 1) throw std::runtime_error("serve: --slots and --max-queue must be >= 1");
  std::unique_ptr<data::TextTokenizer> tok = text_tokenizer(cfg.generation, "", "", "serve encodes and decodes text");
  std::unique_ptr<CausalLM> model = build_for_generation(cfg, ctx);
  const auto* lm = dynamic_cast<const TransformerLM*>(model.get());
  if (lm == nullptr) throw std::logic_error("serve: the model is not a TransformerLM");
  const int64_t learned = find_model(cfg.model.arch, cfg.model.type).spec(cfg.model).positions;  // 0: rotary
  int64_t capacity = learned > 0 ? learned : cfg.model.seq_length;
  if (opt.max_model_len > 0) {
    if (learned > 0 && opt.max_model_len > learned)
      throw std::runtime_error("--max-model-len " + std::to_string(opt.max_model_len) + " is past the model's " +
                               std::to_string(learned) + " positions (max_position_embeddings)");
    capacity = opt.max_model_len;
  }
  ServeEngine::Options eo;
  eo.slots = opt.slots;
  eo.capacity = capacity;
  eo.max_rows = opt.max_rows;
  eo.max_queue = opt.max_queue;
  eo.eos = static_cast<int32_t>(cfg.generation.eos_token_id);
  eo.batch_invariant = opt.batch_invariant;
  ServeEngine engine(*lm, ctx, tok.get(), eo);
  std::string name = opt.served_model_name;
  if (name.empty()) name = cfg.load_checkpoint.empty() ? cfg.model.arch : cfg.load_checkpoint;
  Server s{cfg, *tok, std::nullopt, std::nullopt, engine, name, cfg.model.vocab_size};
  choose_chat_template(s, cfg, opt);

  httplib::Server http;
  const size_t threads = static_cast<size_t>(opt.slots + opt.max_queue + 8);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(16u << 20);  // 413 beyond
  http.set_keep_alive_timeout(2);
  const auto guarded = [&](bool chat) {
    return [&s, chat](const httplib::Request& req, httplib::Response& res) {
      try {
        s.completions(req, res, chat);
      } catch (const ApiError& e) {
        send_error(res, e.status, e.message, e.param);
      } catch (const std::exception& e) {
        send_error(res, 400, e.what());
      }
    };
  };
  http.Post("/v1/completions", guarded(false));
  http.Post("/v1/chat/completions", guarded(true));
  http.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump({{"object", "list"},
                          {"data", json::array({{{"id", name}, {"object", "model"}, {"created", 0},
                                                 {"owned_by", "gridformer"}, {"max_model_len", capacity}}})}}),
                    "application/json");
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("", "text/plain"); });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own error
    if (res.status == 404) send_error(res, 404, "no such endpoint: " + req.method + " " + req.path);
    else if (res.status == 413) send_error(res, 413, "the request body is over 16 MiB");
  });

  const int port = opt.port == 0 ? http.bind_to_any_port(opt.host) : (http.bind_to_port(opt.host, opt.port) ? opt.port : -1);
  if (port < 0) throw std::runtime_error("serve: cannot listen on " + opt.host + ":" + std::to_string(opt.port));
  spdlog::info("serve: {} on http://{}:{}/v1 ({} slots of {} positions, KV cache {:.1f} MiB, buffers {:.1f} MiB; "
               "queue {}{})",
               name, opt.host, port, engine.slots(), capacity, engine.cache_bytes() / 1048576.0,
               engine.bytes() / 1048576.0, engine.max_queue(), opt.batch_invariant ? "; batch-invariant" : "");
  spdlog::default_logger()->flush();
  install_stop_handlers();
  std::thread listener([&] { http.listen_after_bind(); });
  std::atomic<bool> finished{false};
  std::thread watcher([&] {
    while (!finished && g_stop_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (finished) return;
    spdlog::info("serve: signal {}: new requests get 503; finishing the ones in flight", g_stop_signal.load());
    engine.stop();
  });
  engine.run();  // until the stop signal, and every job taken done
  finished = true;
  watcher.join();
  // The handlers still writing their last bytes finish; then the listener ends.
  http.stop();
  listener.join();
  spdlog::info("serve: stopped after {} request(s)", s.served.load());
  return 0;
}

}  // namespace gf
