// `gridformer serve`: the model behind an OpenAI-style HTTP API (cpp-httplib), on loopback unless --host says
// otherwise. Endpoints:
//   GET  /v1/models             the one model, named --served-model-name (default: load_checkpoint, else the arch)
//   GET  /health                200 while serving
//   POST /v1/completions        prompt (a string, a list of strings, a list of token ids or a list of such lists),
//                               max_tokens (16), temperature, top_p, stop (a string or up to 4), logprobs (0-20),
//                               echo, stream, seed; top_k and repetition_penalty as vLLM takes them. With echo and
//                               logprobs the prompt's tokens are scored too (the first one has none), as
//                               lm-evaluation-harness's local-completions model reads them for a loglikelihood.
//   POST /v1/chat/completions   messages (role, content: a string or text parts), rendered with the model's chat
//                               template (a Hugging Face tokenizer's tokenizer_config.json, or --chat-template
//                               NAME) and the assistant's header; max_tokens / max_completion_tokens, temperature,
//                               top_p, stop, stream, seed.
// A key the request leaves out takes the config's decoding key (model_config.do_sample, temperature, top_k, top_p,
// repetition_penalty), as vLLM takes the model's generation config; temperature 0 is greedy. stream: true answers
// with server-sent events ("data: {chunk}" ... "data: [DONE]").
// Requests from every client are decoded together (runner/infer/serve_engine.h: continuous batching over the
// key/value cache, --slots sequences at once); beyond --max-queue waiting prompts a request is answered 429. A
// request that is not JSON, has a key of the wrong type or one not built, or a prompt that with max_tokens does
// not fit the context (--max-model-len) is answered 400 with the reason, in OpenAI's error shape; the server goes
// on serving. SIGTERM or SIGINT: new requests are answered 503, the ones in flight finish, and it exits 0.
#pragma once
#include <cstdint>
#include <string>

#include "parallel/parallel_context.h"
#include "runner/config/config.h"

namespace gf {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                  // 0: any free port (the log says which)
  int64_t slots = 8;                // sequences decoded together
  int64_t max_queue = 64;           // prompts waiting for a slot before 429
  int64_t max_rows = 0;             // rows per model call (0: min(context, 512), at least the slots)
  int64_t max_model_len = 0;        // positions per sequence, prompt + generated (0: the model's)
  bool batch_invariant = false;     // a request's tokens bitwise the same whatever requests share its calls
  std::string served_model_name, chat_template;
};

// Collective-free: one rank. Returns the process's exit status.
int run_serve(const Config& cfg, const ParallelContext& ctx, const ServeOptions& opt);

}  // namespace gf
