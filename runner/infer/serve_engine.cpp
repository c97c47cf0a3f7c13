#include "runner/infer/serve_engine.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace gf {

namespace {

// The log-softmax of `row` at `token` (sampling.h's log_sum_exp, as eval scores) and, when top >
// 0, the `top` largest entries (ties to the lower id, as torch.topk of a sorted search gives them).
TokenLogprob logprob_of(const float* row, int64_t V, int32_t token, int64_t top) {
  const double lse = log_sum_exp({row, static_cast<size_t>(V)});
  TokenLogprob r;
  r.token = token;
  r.logprob = static_cast<double>(row[token]) - lse;
  if (top > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(V));
    std::iota(ids.begin(), ids.end(), 0);
    const int64_t n = std::min(top, V);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (int64_t i = 0; i < n; ++i) r.top.emplace_back(ids[static_cast<size_t>(i)], static_cast<double>(row[ids[static_cast<size_t>(i)]]) - lse);
  }
  return r;
}

}  // namespace

ServeEngine::ServeEngine(const TransformerLM& model, const ParallelContext& ctx, const data::TextTokenizer* tok,
                         const Options& o)
    : o_(o), tok_(tok) {
  if (o_.slots < 1 || o_.capacity < 2 || o_.max_queue < 0) throw std::invalid_argument("serve: slots, capacity, queue");
  if (o_.max_rows <= 0) o_.max_rows = std::max(o_.slots, std::min<int64_t>(o_.capacity, 512));
  Generator::Options go;
  go.slots = o_.slots;
  go.capacity = o_.capacity;
  go.max_rows = o_.max_rows;
  go.max_logit_rows = o_.max_rows;  // a prompt scored (echo with logprobs) has every row's logits
  go.batch_invariant = o_.batch_invariant;
  gen_ = std::make_unique<Generator>(model, ctx, go);
  V_ = gen_->vocab();
}

ServeEngine::Submitted ServeEngine::submit(const std::vector<std::shared_ptr<ServeJob>>& jobs) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return Submitted::kStopping;
    if (static_cast<int64_t>(waiting_.size() + jobs.size()) > o_.max_queue) return Submitted::kQueueFull;
    for (const auto& j : jobs) waiting_.push_back(j);
  }
  cv_.notify_all();
  return Submitted::kOk;
}

void ServeEngine::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void ServeEngine::run() {
  std::vector<std::shared_ptr<ServeJob>> active;
  std::vector<int64_t> free_slots(static_cast<size_t>(o_.slots));
  std::iota(free_slots.rbegin(), free_slots.rend(), 0);  // slot 0 taken first
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return !waiting_.empty() || !active.empty() || stopping_; });
      while (!free_slots.empty() && !waiting_.empty()) {
        std::shared_ptr<ServeJob> j = waiting_.front();
        waiting_.pop_front();
        j->slot = free_slots.back();
        free_slots.pop_back();
        j->fed = 0;
        j->prompt_text = tok_->decode(j->prompt);
        active.push_back(std::move(j));
      }
      if (active.empty() && waiting_.empty() && stopping_) return;
    }
    if (active.empty()) continue;
    call(active);
    for (auto it = active.begin(); it != active.end();) {
      bool done;
      {
        std::lock_guard<std::mutex> l((*it)->mu);
        done = (*it)->done;
      }
      if (done) {
        free_slots.push_back((*it)->slot);
        it = active.erase(it);
      } else {
        ++it;
      }
    }
  }
}

// One model call: the decoding jobs' newest tokens first, then the starting jobs' prompt rows, up to max_rows.
void ServeEngine::call(std::vector<std::shared_ptr<ServeJob>>& active) {
  tokens_.clear(), seq_.clear(), pos_.clear(), logit_rows_.clear(), logit_of_.clear();
  int64_t budget = o_.max_rows;
  for (const bool decoding : {true, false})
    for (const auto& jp : active) {
      ServeJob& j = *jp;
      const int64_t P = static_cast<int64_t>(j.prompt.size());
      if ((j.fed >= P) != decoding) continue;
      const int64_t len = P + static_cast<int64_t>(j.generated.size());  // generated: this thread alone appends
      while (j.fed < len && budget > 0) {
        const int64_t p = j.fed;
        tokens_.push_back(p < P ? j.prompt[static_cast<size_t>(p)] : j.generated[static_cast<size_t>(p - P)]);
        seq_.push_back(j.slot);
        pos_.push_back(p);
        if ((p == len - 1 && j.max_tokens > 0) || (j.prompt_logprobs && p + 1 < P)) {
          logit_rows_.push_back(static_cast<int64_t>(tokens_.size()) - 1);
          logit_of_.emplace_back(&j, p);
        }
        ++j.fed;
        --budget;
      }
    }
  if (tokens_.empty()) return;
  const float* logits = gen_->forward(tokens_.data(), seq_.data(), pos_.data(), static_cast<int64_t>(tokens_.size()),
                                      logit_rows_.data(), static_cast<int64_t>(logit_rows_.size()));
  for (size_t k = 0; k < logit_of_.size(); ++k) {
    ServeJob& j = *logit_of_[k].first;
    const int64_t p = logit_of_[k].second;
    const float* row = logits + static_cast<int64_t>(k) * V_;
    const int64_t P = static_cast<int64_t>(j.prompt.size());
    if (p + 1 < P) {  // a prompt token scored
      TokenLogprob lp = logprob_of(row, V_, j.prompt[static_cast<size_t>(p + 1)], j.logprobs);
      std::lock_guard<std::mutex> l(j.mu);
      j.prompt_lp.push_back(std::move(lp));
      continue;
    }
    row_.assign(row, row + V_);
    std::vector<int32_t> history(j.prompt);
    history.insert(history.end(), j.generated.begin(), j.generated.end());
    const int32_t next = next_token(row_, history, j.so, j.stream, static_cast<uint64_t>(j.generated.size()));
    finish_token(j, row, next, static_cast<int64_t>(history.size()));
  }
  // A job that only scores its prompt (max_tokens 0) ends when the prompt is in.
  for (const auto& jp : active) {
    ServeJob& j = *jp;
    if (j.max_tokens == 0 && j.fed >= static_cast<int64_t>(j.prompt.size())) {
      {
        std::lock_guard<std::mutex> l(j.mu);
        j.done = true;
        j.finish_reason = "length";
      }
      j.cv.notify_all();
    }
  }
}

void ServeEngine::finish_token(ServeJob& j, const float* row, int32_t next, int64_t len) {
  {
    std::lock_guard<std::mutex> l(j.mu);
    if (next == o_.eos) {
      j.done = true;
      j.finish_reason = "stop";
    } else {
      j.generated.push_back(next);
      if (j.logprobs >= 0) j.generated_lp.push_back(logprob_of(row, V_, next, j.logprobs));
      // The continuation's text: the whole sequence decoded, less the prompt's text (a SentencePiece piece
      // decodes with or without its leading space by what is before it).
      std::vector<int32_t> all(j.prompt);
      all.insert(all.end(), j.generated.begin(), j.generated.end());
      const std::string whole = tok_->decode(all);
      const std::string& prompt = j.prompt_text;
      j.text = whole.compare(0, prompt.size(), prompt) == 0 ? whole.substr(prompt.size()) : tok_->decode(j.generated);
      size_t cut = std::string::npos;
      for (const std::string& s : j.stop) cut = std::min(cut, j.text.find(s));
      if (cut != std::string::npos) {
        j.text.resize(cut);
        j.done = true;
        j.finish_reason = "stop";
      } else if (static_cast<int64_t>(j.generated.size()) >= j.max_tokens || len + 1 >= o_.capacity) {
        j.done = true;
        j.finish_reason = "length";
      }
    }
  }
  j.cv.notify_all();
}

}  // namespace gf
