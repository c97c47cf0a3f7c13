#include "runner/infer/harness.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <stdexcept>

#include <fmt/format.h>

namespace gf {

namespace {

using json = nlohmann::json;

bool py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && py_space(s[a])) ++a;
  while (b > a && py_space(s[b - 1])) --b;
  return s.substr(a, b - a);
}

// Python's str.replace: non-overlapping occurrences, left to right.
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  std::string out;
  size_t at = 0;
  for (size_t k; (k = s.find(from, at)) != std::string::npos; at = k + from.size()) out += s.substr(at, k - at) + to;
  return out + s.substr(at);
}

std::string re_sub(const std::string& s, const std::string& pattern, const std::string& fmt) {
  return std::regex_replace(s, std::regex(pattern, std::regex::ECMAScript), fmt);
}

// Python's str.capitalize on ASCII: the first character upper case, the rest lower case (other bytes kept).
std::string capitalize(std::string s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 128) s[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
  }
  return s;
}

// Code points of UTF-8 text (Python's len of a str).
double code_points(const std::string& s) {
  double n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t k; (k = s.find(sep, at)) != std::string::npos; at = k + 1) out.push_back(s.substr(at, k - at));
  out.push_back(s.substr(at));
  return out;
}

const json& field(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw std::runtime_error(where + ": no field \"" + key + "\"");
  return j.at(key);
}

std::string str(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_string()) throw std::runtime_error(where + ": \"" + key + "\" is not a string");
  return v.get<std::string>();
}

int64_t as_index(const json& v, const std::string& where) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    try {
      return std::stoll(v.get<std::string>());
    } catch (const std::exception&) {
    }
  }
  throw std::runtime_error(where + ": the label " + v.dump() + " is not an integer");
}

HarnessDoc multiple_choice(const std::string& context, const std::vector<std::string>& choices, int64_t gold,
                           const std::string& where) {
  if (gold < 0 || gold >= static_cast<int64_t>(choices.size()))
    throw std::runtime_error(where + ": the answer " + std::to_string(gold) + " is not one of the " +
                             std::to_string(choices.size()) + " choices");
  HarnessDoc d;
  d.gold = gold;
  for (const std::string& c : choices) {
    d.requests.push_back({context, " " + c});
    d.choice_chars.push_back(code_points(c));
  }
  return d;
}

HarnessDoc make_doc(const std::string& task, const json& j, const std::string& where) {
  if (task == "hellaswag") {
    const std::string ctx = str(j, "ctx_a", where) + " " + capitalize(str(j, "ctx_b", where));
    std::vector<std::string> choices;
    for (const json& e : field(j, "endings", where)) choices.push_back(hellaswag_preprocess(e.get<std::string>()));
    return multiple_choice(hellaswag_preprocess(str(j, "activity_label", where) + ": " + ctx), choices,
                           as_index(field(j, "label", where), where), where);
  }
  if (task == "arc_easy" || task == "arc_challenge") {
    const json& c = field(j, "choices", where);
    const std::vector<std::string> text = field(c, "text", where).get<std::vector<std::string>>();
    const std::vector<std::string> label = field(c, "label", where).get<std::vector<std::string>>();
    const std::string key = str(j, "answerKey", where);
    const auto at = std::find(label.begin(), label.end(), key);
    if (at == label.end()) throw std::runtime_error(where + ": answerKey " + key + " is not among the choices' labels");
    return multiple_choice("Question: " + str(j, "question", where) + "\nAnswer:", text, at - label.begin(), where);
  }
  if (task == "piqa")
    return multiple_choice("Question: " + str(j, "goal", where) + "\nAnswer:", {str(j, "sol1", where), str(j, "sol2", where)},
                           as_index(field(j, "label", where), where), where);
  if (task == "winogrande") {
    const std::string s = str(j, "sentence", where), answer = str(j, "answer", where);
    const size_t blank = s.find('_');
    if (blank == std::string::npos) throw std::runtime_error(where + ": the sentence has no _");
    if (answer != "1" && answer != "2") throw std::runtime_error(where + ": answer " + answer + " (1 or 2)");
    HarnessDoc d;
    d.gold = answer == "1" ? 0 : 1;
    const std::string target = " " + strip(s.substr(blank + 1));
    for (const char* o : {"option1", "option2"}) {
      const std::string ctx = s.substr(0, blank) + str(j, o, where);
      d.requests.push_back({ctx, target});
      d.choice_chars.push_back(code_points(ctx));
    }
    return d;
  }
  if (task == "lambada_openai") {
    const std::vector<std::string> words = split_on(str(j, "text", where), ' ');
    std::string ctx;
    for (size_t i = 0; i + 1 < words.size(); ++i) ctx += (i ? " " : "") + words[i];
    HarnessDoc d;
    d.requests.push_back({ctx, " " + words.back()});
    return d;
  }
  if (task == "wikitext") {
    const std::string page = str(j, "page", where);
    HarnessDoc d;
    d.requests.push_back({"", wikitext_detokenize(page)});
    d.words = split_whitespace_count(page);
    d.bytes = static_cast<int64_t>(page.size());
    return d;
  }
  throw std::logic_error("harness task " + task);
}

// The harness's mean_stderr: the sample standard deviation over sqrt(n); "N/A" below two samples.
json mean_stderr(const std::vector<double>& x) {
  if (x.size() < 2) return "N/A";
  double mu = 0;
  for (double v : x) mu += v;
  mu /= static_cast<double>(x.size());
  double ss = 0;
  for (double v : x) ss += (v - mu) * (v - mu);
  return std::sqrt(ss / static_cast<double>(x.size() - 1)) / std::sqrt(static_cast<double>(x.size()));
}

double mean(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return x.empty() ? 0.0 : s / static_cast<double>(x.size());
}

std::vector<int32_t> encode(const data::TextTokenizer& tok, const std::string& s) { return tok.encode(s); }

// TemplateLM._encode_pair, then _loglikelihood_tokens' input.
TokenRequest pair_request(const data::TextTokenizer& tok, std::string context, std::string continuation, int64_t max_length,
                          int32_t eot) {
  std::vector<int32_t> ctx, cont;
  if (context.empty()) {
    ctx = {eot};
    cont = encode(tok, continuation);
  } else {
    size_t n = context.size();
    while (n > 0 && py_space(context[n - 1])) --n;
    continuation = context.substr(n) + continuation;
    context.resize(n);
    const std::vector<int32_t> whole = encode(tok, context + continuation);
    ctx = encode(tok, context);
    cont.assign(whole.begin() + static_cast<int64_t>(std::min(ctx.size(), whole.size())), whole.end());
  }
  std::vector<int32_t> all = ctx;
  all.insert(all.end(), cont.begin(), cont.end());
  const int64_t keep = std::min<int64_t>(static_cast<int64_t>(all.size()), max_length + 1);
  TokenRequest r;
  r.input.assign(all.end() - keep, all.end() - 1);
  r.continuation = cont;
  if (cont.empty()) throw std::runtime_error("a continuation of no tokens");
  if (static_cast<int64_t>(cont.size()) > static_cast<int64_t>(r.input.size()))
    throw std::runtime_error("a continuation of " + std::to_string(cont.size()) + " tokens is longer than the model's " +
                             std::to_string(max_length) + " positions");
  return r;
}

}  // namespace

const std::vector<std::string>& harness_task_names() {
  static const std::vector<std::string> n = {"hellaswag", "arc_easy", "arc_challenge", "piqa",
                                             "winogrande", "lambada_openai", "wikitext"};
  return n;
}

std::string hellaswag_preprocess(std::string text) {
  text = strip(text);
  text = replace_all(text, " [title]", ". ");
  text = re_sub(text, "\\[[^\\n]*?\\]", "");  // Python's "\[.*?\]": '.' stops at a newline
  return replace_all(text, "  ", " ");
}

std::string wikitext_detokenize(std::string s) {
  s = replace_all(s, "s '", "s'");
  s = replace_all(s, "/' [0-9]/", "/'[0-9]/");  // the harness's pattern has no class metacharacters that match
  s = replace_all(s, " @-@ ", "-");
  s = replace_all(s, " @,@ ", ",");
  s = replace_all(s, " @.@ ", ".");
  s = replace_all(s, " : ", ": ");
  s = replace_all(s, " ; ", "; ");
  s = replace_all(s, " . ", ". ");
  s = replace_all(s, " ! ", "! ");
  s = replace_all(s, " ? ", "? ");
  s = replace_all(s, " , ", ", ");
  s = re_sub(s, "\\(\\s*([^\\)]*?)\\s*\\)", "($1)");
  s = re_sub(s, "\\[\\s*([^\\]]*?)\\s*\\]", "[$1]");
  s = re_sub(s, "\\{\\s*([^}]*?)\\s*\\}", "{$1}");
  s = re_sub(s, "\"\\s*([^\"]*?)\\s*\"", "\"$1\"");
  s = re_sub(s, "'\\s*([^']*?)\\s*'", "'$1'");
  s = replace_all(s, "= = = =", "====");
  s = replace_all(s, "= = =", "===");
  s = replace_all(s, "= =", "==");
  s = replace_all(s, " \xC2\xB0 ", "\xC2\xB0");
  s = replace_all(s, " \n", "\n");
  s = replace_all(s, "\n ", "\n");
  s = replace_all(s, " N ", " 1 ");
  return replace_all(s, " 's", "'s");
}

int64_t split_whitespace_count(const std::string& s) {  // len(re.split(r"\s+", s))
  int64_t n = 1;
  for (size_t i = 0; i < s.size();) {
    if (!py_space(s[i])) {
      ++i;
      continue;
    }
    ++n;
    while (i < s.size() && py_space(s[i])) ++i;
  }
  return n;
}

HarnessTask read_harness_task(const std::string& name, const std::string& path) {
  const auto& names = harness_task_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    throw std::runtime_error("--tasks: unknown task '" + name + "'; built: " + known);
  }
  std::ifstream in(path);
  if (!in) throw std::runtime_error(name + ": cannot read " + path + " (--data DIR holds <task>.jsonl)");
  HarnessTask t;
  t.name = name;
  t.kind = name == "lambada_openai" ? HarnessKind::kLoglikelihood
           : name == "wikitext"     ? HarnessKind::kRolling
                                    : HarnessKind::kMultipleChoice;
  t.acc_norm = t.kind == HarnessKind::kMultipleChoice && name != "winogrande";
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (strip(line).empty()) continue;
    const std::string where = path + " line " + std::to_string(n);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      throw std::runtime_error(where + ": not JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw std::runtime_error(where + ": not a JSON object");
    try {
      t.docs.push_back(make_doc(name, j, where));
    } catch (const json::exception& e) {
      throw std::runtime_error(where + ": " + e.what());
    }
  }
  if (t.docs.empty()) throw std::runtime_error(path + ": no documents");
  return t;
}

std::vector<TokenRequest> encode_task(const HarnessTask& t, const data::TextTokenizer& tok, int64_t max_length, int32_t eot,
                                      std::vector<int64_t>& of_doc) {
  std::vector<TokenRequest> out;
  of_doc.clear();
  for (size_t d = 0; d < t.docs.size(); ++d) {
    for (const HarnessRequest& r : t.docs[d].requests) {
      if (t.kind != HarnessKind::kRolling) {
        out.push_back(pair_request(tok, r.context, r.continuation, max_length, eot));
        of_doc.push_back(static_cast<int64_t>(d));
        continue;
      }
      // get_rolling_token_windows(tokens, eot, max_length, context_len 1) + make_disjoint_window: windows of up to
      // max_length predicted tokens, each reading the max_length tokens before its last.
      const std::vector<int32_t> tokens = encode(tok, r.continuation);
      const int64_t n = static_cast<int64_t>(tokens.size());
      int64_t predicted = 0;
      while (predicted < n) {
        const int64_t len = std::min(max_length, n - predicted), end = predicted + len;
        TokenRequest w;
        const int64_t first = std::max<int64_t>(0, end - max_length - 1);
        if (predicted == 0) w.input.push_back(eot);
        w.input.insert(w.input.end(), tokens.begin() + (predicted == 0 ? 0 : first), tokens.begin() + end - 1);
        w.continuation.assign(tokens.begin() + predicted, tokens.begin() + end);
        out.push_back(std::move(w));
        of_doc.push_back(static_cast<int64_t>(d));
        predicted = end;
      }
    }
  }
  return out;
}

json harness_metrics(const HarnessTask& t, const std::vector<int64_t>& of_doc, const std::vector<Scored>& s,
                     std::vector<json>& samples) {
  std::vector<std::vector<Scored>> per(t.docs.size());
  for (size_t i = 0; i < s.size(); ++i) per[static_cast<size_t>(of_doc[i])].push_back(s[i]);
  json r = {{"alias", t.name}, {"name", t.name}, {"sample_len", t.docs.size()}};
  samples.clear();
  if (t.kind == HarnessKind::kMultipleChoice) {
    std::vector<double> acc, norm;
    for (size_t d = 0; d < t.docs.size(); ++d) {
      const HarnessDoc& doc = t.docs[d];
      size_t pred = 0, pred_norm = 0;
      for (size_t c = 1; c < per[d].size(); ++c) {
        if (per[d][c].loglikelihood > per[d][pred].loglikelihood) pred = c;
        if (per[d][c].loglikelihood / doc.choice_chars[c] > per[d][pred_norm].loglikelihood / doc.choice_chars[pred_norm])
          pred_norm = c;
      }
      acc.push_back(static_cast<int64_t>(pred) == doc.gold ? 1.0 : 0.0);
      norm.push_back(static_cast<int64_t>(pred_norm) == doc.gold ? 1.0 : 0.0);
      json resps = json::array(), args = json::array();
      for (size_t c = 0; c < per[d].size(); ++c) {
        resps.push_back({per[d][c].loglikelihood, per[d][c].greedy});
        args.push_back({doc.requests[c].context, doc.requests[c].continuation});
      }
      json one = {{"doc_id", d}, {"target", doc.gold}, {"arguments", args}, {"resps", resps}, {"acc", acc.back()}};
      if (t.acc_norm) one["acc_norm"] = norm.back();
      samples.push_back(std::move(one));
    }
    r["acc,none"] = mean(acc);
    r["acc_stderr,none"] = mean_stderr(acc);
    if (t.acc_norm) {
      r["acc_norm,none"] = mean(norm);
      r["acc_norm_stderr,none"] = mean_stderr(norm);
    }
    return r;
  }
  if (t.kind == HarnessKind::kLoglikelihood) {
    std::vector<double> ll, acc;
    for (size_t d = 0; d < t.docs.size(); ++d) {
      ll.push_back(per[d][0].loglikelihood);
      acc.push_back(per[d][0].greedy ? 1.0 : 0.0);
      samples.push_back({{"doc_id", d},
                         {"arguments", {{t.docs[d].requests[0].context, t.docs[d].requests[0].continuation}}},
                         {"resps", {{per[d][0].loglikelihood, per[d][0].greedy}}},
                         {"perplexity", ll.back()},
                         {"acc", acc.back()}});
    }
    r["perplexity,none"] = std::exp(-mean(ll));
    r["perplexity_stderr,none"] = "N/A";  // the harness bootstraps it (random resamples): not reproduced
    r["acc,none"] = mean(acc);
    r["acc_stderr,none"] = mean_stderr(acc);
    return r;
  }
  double ll = 0, words = 0, bytes = 0;
  for (size_t d = 0; d < t.docs.size(); ++d) {
    double doc_ll = 0;
    for (const Scored& w : per[d]) doc_ll += w.loglikelihood;
    ll += doc_ll;
    words += static_cast<double>(t.docs[d].words);
    bytes += static_cast<double>(t.docs[d].bytes);
    samples.push_back({{"doc_id", d}, {"resps", {{doc_ll}}}, {"words", t.docs[d].words}, {"bytes", t.docs[d].bytes}});
  }
  r["word_perplexity,none"] = std::exp(-ll / words);
  r["byte_perplexity,none"] = std::exp(-ll / bytes);
  r["bits_per_byte,none"] = -ll / bytes / std::log(2.0);
  for (const char* k : {"word_perplexity_stderr,none", "byte_perplexity_stderr,none", "bits_per_byte_stderr,none"})
    r[k] = "N/A";
  return r;
}

std::string harness_table(const json& results) {
  std::string out = "|    Tasks     |Version|Filter|n-shot|    Metric     |   | Value  |   |Stderr|\n"
                    "|--------------|------:|------|-----:|---------------|---|-------:|---|------|\n";
  for (const auto& [task, m] : results.at("results").items()) {
    bool first = true;
    for (const auto& [key, v] : m.items()) {
      if (key == "alias" || key == "name" || key == "sample_len" || key.find("_stderr,") != std::string::npos) continue;
      const std::string metric = key.substr(0, key.find(','));
      const std::string se_key = metric + "_stderr,none";
      const std::string se = m.contains(se_key) && m[se_key].is_number() ? fmt::format("{:.4f}", m[se_key].get<double>()) : "N/A";
      const std::string version =
          results.contains("versions") && results["versions"].contains(task) ? fmt::format("{:g}", results["versions"][task].get<double>()) : "";
      out += fmt::format("|{:<14}|{:>7}|{:<6}|{:>6}|{:<15}|{:<3}|{:>8.4f}|{:<3}|{:>6}|\n", first ? task : "",
                         first ? version : "", first ? "none" : "", first ? "0" : "", metric, "", v.get<double>(), "±", se);
      first = false;
    }
  }
  return out;
}

}  // namespace gf
