#include "runner/cli/serve_cli.h"

namespace gf {

CLI::App* add_serve(CLI::App& app, ServeCli& c) {
  auto* s = app.add_subcommand(
      "serve", "serve the model over an OpenAI-style HTTP API (/v1/completions, /v1/chat/completions, /v1/models; "
               "streaming, requests from every client decoded together); one rank; SIGTERM finishes the requests in "
               "flight, then exits");
  s->add_option("--config", c.config_path, "YAML config (MindFormers layout)")->required()->check(CLI::ExistingFile);
  s->add_option("--set", c.sets, "override a key (repeatable)");
  s->add_option("--load_checkpoint", c.load_ckpt,
                "the weights (as predict's: one of our checkpoints, Hugging Face safetensors, a MindSpore .ckpt, a "
                "--save-weights file; a LoRA run's checkpoint: its base, then the adapters)");
  s->add_option("--host", c.opt.host, "the address to listen on (default 127.0.0.1: this machine only)");
  s->add_option("--port", c.opt.port, "the port (default 8000; 0: any free one, which the log names)")
      ->check(CLI::Range(0, 65535));
  s->add_option("--slots", c.opt.slots, "sequences decoded together (default 8)")->check(CLI::PositiveNumber);
  s->add_option("--max-queue", c.opt.max_queue, "prompts that may wait for a slot; beyond them 429 (default 64)")
      ->check(CLI::PositiveNumber);
  s->add_option("--max-model-len", c.opt.max_model_len,
                "positions per sequence, prompt + generated (default: the model's max_position_embeddings, or "
                "seq_length for a rotary model)")->check(CLI::PositiveNumber);
  s->add_option("--max-rows", c.opt.max_rows, "token rows per model call (default: min(context, 512))")
      ->check(CLI::PositiveNumber);
  s->add_flag("--batch-invariant", c.opt.batch_invariant,
             "compute every request's rows alone, so its tokens and logprobs are bitwise the same whatever requests "
             "share its model calls (as sent alone; with a seed, repeatable); float32 compute only. It reads the "
             "weights once per row instead of once per call: slower with many requests at once");
  s->add_option("--served-model-name", c.opt.served_model_name,
                "the model's name in /v1/models and responses (default: --load_checkpoint, else the arch)");
  s->add_option("--chat-template", c.opt.chat_template,
                "the chat template for /v1/chat/completions when the tokenizer has none (or to replace its own): "
                "chatml, qwen2, qwen2.5, qwen3, llama3, llama3.1, gemma");
  return s;
}

}  // namespace gf
