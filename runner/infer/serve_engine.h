// The server's model loop (`gridformer serve`, runner/infer/serve.h): requests from any number of HTTP threads,
// decoded together by one thread with the key/value cache (models/generator.h), as continuous batching does it.
//
// Each prompt is a Job. submit() puts jobs in a bounded queue (full: refused, the HTTP side answers 429). The
// loop gives each waiting job a free cache slot as soon as one is free, and every model call carries, within
// max_rows rows: one row for each job that is decoding (its newest token) and then the prompt rows of jobs that
// are starting (a long prompt in chunks over several calls, the cache carrying the earlier ones). A job's next
// token is chosen from its last row's logits by runner/infer/sampling.h (the draw a function of the job's seed
// and stream and the token's index). Its logits are the model's for its rows, rounded as the call's product
// kernels round them: OpenBLAS's differ by the call's row count, so with other jobs in the call a logit may
// differ in its last bits from the same job's alone (and a near-tied greedy or sampled token with it). With
// batch_invariant every row's products are computed alone (core/math/gemm.h, RowInvariance::kEveryRow) and a
// job's output does not depend on the others in its calls, bit for bit. It ends at
// the end-of-text token, at max_tokens, at the cache's capacity or at one of its stop strings, and its slot is
// free for the next job. Each new token wakes the job's waiter (the HTTP thread, which may stream it).
//
// Log-probabilities (the completions API's `logprobs`, and with `echo` the prompt's own): the log-softmax of the
// full vocabulary's float32 logits as the model gives them (before temperature, top-k, top-p or penalties), as
// `eval` scores a loglikelihood (runner/infer/harness_run.cpp), with the `top` most likely tokens.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/data/text_tokenizer.h"
#include "models/generator.h"
#include "runner/infer/sampling.h"

namespace gf {

struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;  // the most likely tokens, most likely first
};

struct ServeJob {
  // The request (set before submit()).
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;          // generated tokens at most (0: the prompt is only scored)
  SamplingOptions so;
  uint64_t stream = 0;              // the draw's stream (sampling.h)
  int64_t logprobs = -1;            // -1: none; else the logprob of each token and the `logprobs` most likely
  bool prompt_logprobs = false;     // echo with logprobs: the prompt's tokens' too (the first has none)
  std::vector<std::string> stop;    // stop strings (the text ends before the first one found)

  // The results, under mu; cv notified on each new token and at the end.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> generated;   // the end-of-text token not included
  std::vector<TokenLogprob> generated_lp, prompt_lp;  // prompt_lp[i]: of prompt[i + 1]
  std::string text;                 // the generated text so far (decoded), cut before a stop string
  bool done = false;
  std::string finish_reason;        // "stop" (end-of-text or a stop string) or "length"

  // The loop's own.
  int64_t slot = -1, fed = 0;
  std::string prompt_text;  // the prompt decoded, once
};

class ServeEngine {
 public:
  struct Options {
    int64_t slots = 8, capacity = 0, max_rows = 0, max_queue = 64;
    int32_t eos = -1;
    bool batch_invariant = false;  // Generator::Options::batch_invariant
  };
  // The generator is planned here for the slots, the capacity (positions per sequence) and max_rows.
  ServeEngine(const TransformerLM& model, const ParallelContext& ctx, const data::TextTokenizer* tok, const Options& o);

  enum class Submitted { kOk, kQueueFull, kStopping };
  // All of a request's jobs or none.
  Submitted submit(const std::vector<std::shared_ptr<ServeJob>>& jobs);
  // The model loop, on the calling thread, until stop() has been called and every job taken is done.
  void run();
  // New jobs are refused from now on; run() returns once the jobs it holds are done. Any thread.
  void stop();

  int64_t capacity() const { return o_.capacity; }
  int64_t slots() const { return o_.slots; }
  int64_t max_queue() const { return o_.max_queue; }
  int64_t cache_bytes() const { return gen_->cache_bytes(); }
  int64_t bytes() const { return gen_->bytes(); }

 private:
  void call(std::vector<std::shared_ptr<ServeJob>>& active);
  void finish_token(ServeJob& j, const float* row, int32_t next, int64_t len);

  Options o_;
  const data::TextTokenizer* tok_;
  std::unique_ptr<Generator> gen_;
  int64_t V_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<ServeJob>> waiting_;
  bool stopping_ = false;
  // One model call's rows and, per logits row, its job and position.
  std::vector<int32_t> tokens_;
  std::vector<int64_t> seq_, pos_, logit_rows_;
  std::vector<std::pair<ServeJob*, int64_t>> logit_of_;
  std::vector<float> row_;
};

}  // namespace gf
