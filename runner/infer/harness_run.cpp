// `gridformer eval --tasks ... --data DIR` (runner/infer/harness_run.h): lm-evaluation-harness's tasks
// (runner/infer/harness.h) scored by the generator (models/generator.h): each token request's input run through
// the model with a key/value cache, several requests side by side in one call (one cache slot each), and the
// log-softmax of the full vocabulary's logits at the continuation's positions.
#include "runner/infer/harness_run.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/generator.h"
#include "runner/infer/generate.h"
#include "runner/infer/harness.h"
#include "runner/infer/sampling.h"

namespace gf {

namespace {

using json = nlohmann::json;

// Row r's loglikelihood of `target` and whether it is the argmax (the first on a tie, as torch's argmax).
Scored score_row(const float* row, int64_t V, int32_t target) {
  const int64_t arg = std::max_element(row, row + V) - row;  // the first largest
  return {static_cast<double>(row[target]) - log_sum_exp({row, static_cast<size_t>(V)}), arg == target};
}

}  // namespace

std::vector<Scored> score_requests(Generator& gen, const std::vector<TokenRequest>& reqs, int64_t slots, int64_t max_rows) {
  std::vector<Scored> out(reqs.size());
  const int64_t V = gen.vocab();
  std::vector<int32_t> tokens;
  std::vector<int64_t> seq, pos, rows;
  std::vector<std::pair<size_t, int64_t>> owner;  // logits row -> (request, continuation index)
  size_t i = 0;
  while (i < reqs.size()) {
    tokens.clear(), seq.clear(), pos.clear(), rows.clear(), owner.clear();
    const int64_t n0 = static_cast<int64_t>(reqs[i].input.size());
    if (n0 > max_rows) {  // alone, in chunks of max_rows positions (the cache carries the earlier ones)
      const TokenRequest& r = reqs[i];
      const int64_t first_scored = n0 - static_cast<int64_t>(r.continuation.size());
      Scored acc{0, true};
      for (int64_t a = 0; a < n0; a += max_rows) {
        const int64_t m = std::min(max_rows, n0 - a);
        tokens.assign(r.input.begin() + a, r.input.begin() + a + m);
        seq.assign(static_cast<size_t>(m), 0);
        pos.resize(static_cast<size_t>(m));
        rows.clear();
        for (int64_t k = 0; k < m; ++k) {
          pos[static_cast<size_t>(k)] = a + k;
          if (a + k >= first_scored) rows.push_back(k);
        }
        const float* logits = gen.forward(tokens.data(), seq.data(), pos.data(), m, rows.data(), static_cast<int64_t>(rows.size()));
        if (logits == nullptr) continue;  // a pipeline stage before the last: the last one scores
        for (size_t k = 0; k < rows.size(); ++k) {
          const int64_t c = a + rows[k] - first_scored;
          const Scored s = score_row(logits + static_cast<int64_t>(k) * V, V, r.continuation[static_cast<size_t>(c)]);
          acc.loglikelihood += s.loglikelihood;
          acc.greedy = acc.greedy && s.greedy;
        }
      }
      out[i++] = acc;
      continue;
    }
    // Requests side by side: each in its own cache slot, all its positions in this call.
    size_t j = i;
    for (int64_t slot = 0; j < reqs.size() && slot < slots; ++slot, ++j) {
      const TokenRequest& r = reqs[j];
      const int64_t n = static_cast<int64_t>(r.input.size());
      if (n > max_rows || static_cast<int64_t>(tokens.size()) + n > max_rows) break;
      const int64_t first_scored = n - static_cast<int64_t>(r.continuation.size());
      for (int64_t k = 0; k < n; ++k) {
        if (k >= first_scored) {
          rows.push_back(static_cast<int64_t>(tokens.size()));
          owner.emplace_back(j, k - first_scored);
        }
        tokens.push_back(r.input[static_cast<size_t>(k)]);
        seq.push_back(slot);
        pos.push_back(k);
      }
    }
    const float* logits = gen.forward(tokens.data(), seq.data(), pos.data(), static_cast<int64_t>(tokens.size()), rows.data(),
                                      static_cast<int64_t>(rows.size()));
    for (size_t k = i; k < j; ++k) out[k] = {0, true};
    for (size_t k = 0; logits != nullptr && k < rows.size(); ++k) {
      const auto [req, c] = owner[k];
      const Scored s = score_row(logits + static_cast<int64_t>(k) * V, V, reqs[req].continuation[static_cast<size_t>(c)]);
      out[req].loglikelihood += s.loglikelihood;
      out[req].greedy = out[req].greedy && s.greedy;
    }
    i = j;
  }
  return out;
}

// Under data parallel the requests are dealt round-robin over the group's ranks (each tensor group, or pipeline,
// scores its share), then every rank holds every score: a sum over the pipeline group of the last stage's scores
// (zeros on the others, which have no logits) and over the data-parallel group of each rank's share.
std::vector<Scored> score_shared(Generator& gen, const std::vector<TokenRequest>& reqs, int64_t slots, int64_t max_rows,
                                 const Communicator& dp, const Communicator& pp) {
  if (dp.size() <= 1 && pp.size() <= 1) return score_requests(gen, reqs, slots, max_rows);
  std::vector<TokenRequest> mine;
  for (size_t i = static_cast<size_t>(dp.rank()); i < reqs.size(); i += static_cast<size_t>(dp.size())) mine.push_back(reqs[i]);
  const std::vector<Scored> part = score_requests(gen, mine, slots, max_rows);
  std::vector<double> all(2 * reqs.size(), 0.0);
  if (gen.last_stage())
    for (size_t k = 0; k < part.size(); ++k) {
      const size_t i = static_cast<size_t>(dp.rank()) + k * static_cast<size_t>(dp.size());
      all[2 * i] = part[k].loglikelihood;
      all[2 * i + 1] = part[k].greedy ? 1.0 : 0.0;
    }
  if (pp.size() > 1) pp.allreduce_sum(all.data(), static_cast<int64_t>(all.size()));
  if (dp.size() > 1) dp.allreduce_sum(all.data(), static_cast<int64_t>(all.size()));
  std::vector<Scored> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) out[i] = {all[2 * i], all[2 * i + 1] > 0.5};
  return out;
}

int run_harness(const Config& cfg, const ParallelContext& ctx, const HarnessOptions& opt) {
  const bool lead = ctx.world_rank() == 0;
  std::vector<std::string> names;
  std::stringstream list(opt.tasks);
  for (std::string t; std::getline(list, t, ',');)
    if (!t.empty()) names.push_back(t);
  if (names.empty()) throw std::runtime_error("--tasks: give one or more of hellaswag, arc_easy, arc_challenge, piqa, "
                                              "winogrande, lambada_openai, wikitext (comma-separated)");
  std::vector<HarnessTask> tasks;
  for (const std::string& n : names)
    tasks.push_back(read_harness_task(n, (std::filesystem::path(opt.data) / (n + ".jsonl")).string()));
  const auto tok = text_tokenizer(cfg.generation, "", "", "the tasks' text is tokenized");
  std::unique_ptr<CausalLM> model = build_for_generation(cfg, ctx);
  const auto* lm = dynamic_cast<const TransformerLM*>(model.get());
  if (lm == nullptr) throw std::logic_error("eval: the model is not a TransformerLM");
  const int64_t max_length = cfg.model.seq_length;
  Generator::Options go;
  go.slots = std::max<int64_t>(1, opt.batch);
  go.capacity = max_length;
  go.max_rows = go.max_logit_rows = std::max<int64_t>(opt.max_rows, max_length);
  Generator gen(*lm, ctx, go);
  if (lead && ctx.size(GridAxis::kPp) > 1)
    spdlog::info("eval: {} pipeline stages, each running its layers with their cache; the last one scores",
                 ctx.size(GridAxis::kPp));
  json results = {{"results", json::object()}, {"versions", json::object()}, {"n-shot", json::object()},
                  {"config", {{"model", "gridformer"}, {"model_args", cfg.load_checkpoint}, {"max_length", max_length},
                              {"batch_size", go.slots}}}};
  if (lead && !opt.output.empty() && std::filesystem::path(opt.output).has_parent_path())
    std::filesystem::create_directories(std::filesystem::path(opt.output).parent_path());
  for (const HarnessTask& t : tasks) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int64_t> of_doc;
    const std::vector<TokenRequest> reqs = encode_task(t, *tok, max_length, tok->eod_id(), of_doc);
    for (const TokenRequest& r : reqs)
      for (int32_t id : r.input)
        if (id < 0 || id >= cfg.model.vocab_size)
          throw std::runtime_error(t.name + ": token id " + std::to_string(id) + " is outside the model's vocabulary");
    const std::vector<Scored> s = score_shared(gen, reqs, go.slots, go.max_rows, ctx.group(GridAxis::kDp), ctx.group(GridAxis::kPp));
    std::vector<json> samples;
    results["results"][t.name] = harness_metrics(t, of_doc, s, samples);
    results["versions"][t.name] = t.name == "wikitext" ? 2.0 : 1.0;
    results["n-shot"][t.name] = 0;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (lead) {
      spdlog::info("eval {}: {} documents, {} requests in {:.1f} s: {}", t.name, t.docs.size(), reqs.size(), secs,
                   results["results"][t.name].dump());
      if (!opt.output.empty()) {
        std::ofstream f(std::filesystem::path(opt.output).parent_path() / ("samples_" + t.name + ".jsonl"));
        for (const json& one : samples) f << one.dump() << "\n";
      }
    }
  }
  if (lead) {
    std::fputs(harness_table(results).c_str(), stdout);
    if (!opt.output.empty()) {
      std::ofstream(opt.output) << results.dump(2) << "\n";
      spdlog::info("eval: results in {}", opt.output);
    }
  }
  return 0;
}

}  // namespace gf
