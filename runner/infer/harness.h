// Evaluation as EleutherAI's lm-evaluation-harness scores it (`gridformer eval --tasks ... --data DIR`), zero-shot,
// on local JSONL files in the Hugging Face datasets' fields. Transcribed from lm-evaluation-harness (main, read
// 2026-12): lm_eval/tasks/{hellaswag/hellaswag.yaml + utils.py, arc/arc_easy.yaml (arc_challenge includes it),
// piqa/piqa.yaml, winogrande/default.yaml + preprocess_winogrande.py, lambada/lambada_openai.yaml,
// wikitext/wikitext.yaml + preprocess_wikitext.py}, lm_eval/api/model.py (TemplateLM._encode_pair, loglikelihood,
// loglikelihood_rolling), lm_eval/models/huggingface.py (_loglikelihood_tokens), lm_eval/utils.py
// (get_rolling_token_windows, make_disjoint_window), lm_eval/api/metrics.py (mean, mean_stderr,
// weighted_perplexity, bits_per_byte), lm_eval/api/task.py (multiple-choice process_results: acc, acc_norm).
//
//   hellaswag      context "{activity_label}: {ctx_a} {ctx_b.capitalize()}" preprocessed (strip, " [title]" -> ". ",
//                  [..] removed, double spaces single), choices the preprocessed endings, gold int(label)
//   arc_easy/_challenge  "Question: {question}\nAnswer:", choices choices.text, gold choices.label.index(answerKey)
//   piqa           "Question: {goal}\nAnswer:", choices [sol1, sol2], gold label
//   winogrande     one context per option, sentence[:index('_')] + option, the shared continuation
//                  sentence[index('_') + 1:].strip(); gold answer "1"/"2" -> 0/1; acc only
//   lambada_openai context text.split(' ')[:-1] joined by ' ', continuation ' ' + text.split(' ')[-1]; perplexity
//                  (exp of minus the mean loglikelihood) and acc (the continuation greedy)
//   wikitext       loglikelihood_rolling of wikitext_detokenizer(page); word_perplexity, byte_perplexity and
//                  bits_per_byte over the raw page's words (re.split(r"\s+")) and UTF-8 bytes
//
// Multiple-choice continuations are " " + choice (target_delimiter); acc is the argmax of the loglikelihoods (the
// first on a tie), acc_norm the argmax of loglikelihood / len(choice) in characters (UTF-8 code points).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/data/text_tokenizer.h"

namespace gf {

enum class HarnessKind { kMultipleChoice, kLoglikelihood, kRolling };

struct HarnessRequest {
  std::string context, continuation;  // kRolling: the whole text in continuation
};

struct HarnessDoc {
  std::vector<HarnessRequest> requests;  // one per choice (multiple choice), else one
  int64_t gold = -1;                     // multiple choice
  std::vector<double> choice_chars;      // acc_norm's lengths
  int64_t words = 0, bytes = 0;          // wikitext
};

struct HarnessTask {
  std::string name;
  HarnessKind kind = HarnessKind::kMultipleChoice;
  bool acc_norm = true;
  std::vector<HarnessDoc> docs;
};

// The tasks built here, in the order --tasks lists them by default.
const std::vector<std::string>& harness_task_names();
// Reads `path` (JSON lines) as task `name`. Throws std::runtime_error naming the file and line for a line that is
// not a JSON object or lacks a field, an unknown task naming the known ones.
HarnessTask read_harness_task(const std::string& name, const std::string& path);
// Pieces of the formatting, for tests: HellaSwag's preprocess and WikiText's detokenizer; the words of a page.
std::string hellaswag_preprocess(std::string text);
std::string wikitext_detokenize(std::string page);
int64_t split_whitespace_count(const std::string& s);

// A request in tokens: the model reads `input` and scores `continuation`, the last continuation.size() tokens of
// (context + continuation) predicted from the last continuation.size() positions of `input`.
struct TokenRequest {
  std::vector<int32_t> input, continuation;
};
struct Scored {
  double loglikelihood = 0;
  bool greedy = false;
};
using LoglikelihoodFn = std::function<std::vector<Scored>(const std::vector<TokenRequest>&)>;

// The token requests of a task's documents, in order (wikitext: each page's rolling windows), as the harness's HF
// model makes them for a model of max_length positions: _encode_pair (trailing spaces of the context moved to the
// continuation; the continuation's tokens those of context + continuation after the context's), an empty context's
// prefix `eot`, the input the last max_length + 1 tokens of context + continuation without the last.
// `of_doc[i]`: the document index of token request i.
std::vector<TokenRequest> encode_task(const HarnessTask& t, const data::TextTokenizer& tok, int64_t max_length, int32_t eot,
                                      std::vector<int64_t>& of_doc);

// The harness's results for one task ({"acc,none": ..., "acc_stderr,none": ...}) and its samples (one JSON object a
// document: doc_id, target, arguments, resps, and the per-document metrics), from the scores of encode_task's
// requests.
nlohmann::json harness_metrics(const HarnessTask& t, const std::vector<int64_t>& of_doc, const std::vector<Scored>& s,
                               std::vector<nlohmann::json>& samples);
// The harness's markdown table of a results object ({"results": {task: {...}}}).
std::string harness_table(const nlohmann::json& results);

}  // namespace gf
