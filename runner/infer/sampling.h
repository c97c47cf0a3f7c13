// The next token from a row of logits, as Hugging Face's generate() and MindFormers' text
// generator choose it: the repetition penalty over the tokens so far (CTRL's: a positive logit
// divided by the penalty, a negative one multiplied), then greedy (the first largest logit, as
// torch.argmax), or sampling from the softmax of the logits divided by the temperature, kept to the
// top_k largest (ties with the k-th kept, as TopKLogitsWarper) and then to the smallest set of the
// most probable whose probability reaches top_p (TopPLogitsWarper; the most probable always kept).
//
// The draw is a pure function of (seed, prompt index, token index) (core/math/rng.h), so a sequence's
// tokens do not depend on the batch it is decoded in, the layout, or the rank.
#pragma once
#include <cstdint>
#include <span>

namespace gf {

struct SamplingOptions {
  bool do_sample = false;
  int64_t top_k = 0;  // 0: no top-k filter
  double top_p = 1.0, temperature = 1.0, repetition_penalty = 1.0;
  uint64_t seed = 0;
};

// The draw among candidates in next_token's order (descending logit, index order among equals): their
// softmax, cut by top_p, then the counter draw. next_token's last part (its test selects candidates
// another way and draws with it).
int32_t draw_candidates(std::span<const int32_t> order, std::span<const float> logits, const SamplingOptions& o,
                        uint64_t stream, uint64_t index);

// log(sum exp(row)): the largest entry taken out, the exponentials summed in double. The log-softmax of entry t is
// row[t] - log_sum_exp(row), as eval scores a loglikelihood and serve reports a logprob.
double log_sum_exp(std::span<const float> row);

// logits: [vocab], changed in place. history: the sequence's tokens so far (prompt and generated).
// stream, index: the draw's counter (the prompt's index, the generated token's index).
int32_t next_token(std::span<float> logits, std::span<const int32_t> history, const SamplingOptions& o,
                   uint64_t stream, uint64_t index);

}  // namespace gf
