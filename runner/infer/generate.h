// Text generation (`gridformer predict`, run_mode: predict): prompts from --predict_data,
// --predict_file (one a line) or --predict_ids, encoded with the GPT-2 BPE of
// processor.tokenizer.vocab_file / merge_file; the model's weights from load_checkpoint (one of our
// checkpoints, Hugging Face or MindSpore weights, a --save-weights file), else the seed's; batches of
// prompts of any lengths decoded together with the KV cache (models/generator.h; use_past: False
// recomputes the whole prefix for every token instead); each next token chosen by runner/infer/sampling.h
// from model_config's decoding keys (do_sample, top_k, top_p, temperature, repetition_penalty), until
// eos_token_id or max_decode_length (prompt + generated tokens; --max_new_tokens counts generated
// tokens instead).
//
// stdout carries the text only: each prompt, then its continuation as it is generated (the first
// unfinished prompt of a batch streams; the others follow in order), then a newline. The log (stderr,
// and the rank's log file) says what was loaded and the prompt and decode throughput; rank 0 appends
// a "predict" line to metrics.jsonl. Every rank of a tensor- or expert-parallel group computes its
// share of each step and samples the same token from the gathered logits.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "parallel/parallel_context.h"
#include "runner/config/config.h"
#include "runner/infer/lambada.h"

namespace gf {

struct PredictRequest {
  std::vector<std::string> texts;      // --predict_data
  std::string file;                    // --predict_file
  std::vector<std::string> ids;        // --predict_ids: space-separated token ids per prompt
  int64_t max_new_tokens = -1;         // > 0: generated tokens per prompt (else max_decode_length counts)
  int64_t batch = 0;                   // prompts decoded together (0: all)
  std::optional<double> temperature;   // --temperature (GPT2Config has no such key)
  std::string vocab_file, merge_file;  // override processor.tokenizer's
  std::string ids_out;                 // JSON lines {"prompt": [...], "generated": [...]}
  int64_t max_rows = 0;                // rows per forward call (0: the longest sequence, at least the batch)
};

// What one predict run measured (rank 0's figures; every rank has them).
struct PredictStats {
  int64_t prompts = 0, batch = 0, prompt_tokens = 0, decode_tokens = 0;
  double prompt_seconds = 0, decode_seconds = 0;
};

// Everything that can be refused is checked in the constructor (the prompts, the lengths, the
// tokenizer, the model and its weights, the generator's buffers), which runs no collective, so the
// ranks can agree on a problem before any work; run() then generates (collective over ctx).
// LAMBADA cloze accuracy (runner/infer/lambada.h, docs/evaluation.md) of a whole model (not a pipeline
// stage) as the trainer holds it: the passages of `path`, encoded with processor.tokenizer's GPT-2
// BPE, each run through the generator in chunks of 64 tokens (the KV cache carrying the earlier
// ones), its greedy predictions from the full vocabulary's logits. read_lambada_for checks the file
// and the tokenizer before any work; evaluate_lambada is collective over ctx (tensor and expert
// groups), logs `lambada: accuracy ...` and returns the count.
std::vector<ClozeItem> read_lambada_for(const Config& cfg, const std::string& path, bool strict);
// The model for generation and evaluation: the training layout's tensor and expert split, one token per row of
// training activations (the generator plans its own), load_checkpoint's weights (a LoRA run: its base, then the
// adapters). And processor.tokenizer's tokenizer (vocab_given / merges_given override the GPT-2 files; `what` names
// the use in messages).
std::unique_ptr<CausalLM> build_for_generation(const Config& cfg, const ParallelContext& ctx);
std::unique_ptr<data::TextTokenizer> text_tokenizer(const GenerationConfig& gc, const std::string& vocab_given,
                                                    const std::string& merges_given, const std::string& what);
ClozeResult evaluate_lambada(const CausalLM& model, const ParallelContext& ctx, const Config& cfg,
                             const std::vector<ClozeItem>& items, const std::string& path);

class Predictor {
 public:
  Predictor(const Config& cfg, const ParallelContext& ctx, const PredictRequest& req);
  ~Predictor();
  PredictStats run();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace gf
