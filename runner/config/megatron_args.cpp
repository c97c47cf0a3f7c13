// Megatron-LM / MindSpeed arguments into our YAML (runner/config/megatron_args.h): the argparse-like
// parser over the table (runner/config/megatron_args_table.cpp), the layout and vocabulary sections, and
// the assembly of the YAML. The model sections are in megatron_args_model.cpp, the training ones in
// megatron_args_train.cpp.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "runner/config/megatron_args_job.h"

namespace gf {
namespace megatron_args {
namespace {

// What a spelling is: a table entry, or one of the other arguments (refused), and how many values it takes.
struct Entry {
  const Spec* spec = nullptr;  // nullptr: one of other_arguments()
  std::string canonical;       // the first spelling: the key values are kept by
  char arity = '0';            // '0' a flag, '1' one value, '*' / '+' a list
};

class Index {
 public:
  Index() {
    for (const Spec& s : table()) {
      std::istringstream in(s.names);
      std::string first, w;
      in >> first;
      add(first, {&s, first, arity_of(s.type)});
      while (in >> w) add(w, {&s, first, arity_of(s.type)});
    }
    for (std::string w : other_arguments()) {
      char arity = '0';
      if (w.back() == '=' || w.back() == '*' || w.back() == '+') {
        arity = w.back() == '=' ? '1' : w.back();
        w.pop_back();
      }
      add(w, {nullptr, w, arity});
    }
  }
  const Entry* find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &it->second;
  }
  std::string nearest(const std::string& name) const {
    std::string best;
    int best_d = 1 << 30;
    for (const std::string& n : names_)
      if (const int d = edit_distance(name, n); d < best_d) best_d = d, best = n;
    return best;
  }

 private:
  static char arity_of(Type t) {
    return t == Type::kFlag ? '0' : t == Type::kList ? '*' : t == Type::kListPlus ? '+' : '1';
  }
  void add(const std::string& name, Entry e) {
    if (by_name_.emplace(name, std::move(e)).second) names_.push_back(name);
  }
  std::map<std::string, Entry> by_name_;
  std::vector<std::string> names_;  // table order, then the others: the first nearest wins a tie
};

const Index& index() {
  static const Index i;
  return i;
}

// argparse's test for a word that is a value although it starts with '-' (its _negative_number_matcher;
// Megatron declares no option that looks like a negative number).
bool is_option(const std::string& w) {
  if (w.size() < 2 || w[0] != '-') return false;
  // ^-\d+$ or ^-\d*\.\d+$: a negative number, a value.
  const size_t dot = w.find('.');
  const auto digits = [&](size_t b, size_t e) {
    return std::all_of(w.begin() + static_cast<std::ptrdiff_t>(b), w.begin() + static_cast<std::ptrdiff_t>(e),
                       [](char c) { return c >= '0' && c <= '9'; });
  };
  const bool negative = dot == std::string::npos ? digits(1, w.size())
                                                 : digits(1, dot) && dot + 1 < w.size() && digits(dot + 1, w.size());
  return !negative;
}

const char* type_name(Type t) { return t == Type::kInt ? "an integer" : t == Type::kFloat ? "a number" : "a value"; }

// One value against its spec's type and choices; the problem, or "".
std::string check_value(const Spec& s, const std::string& v) {
  int64_t i = 0;
  double d = 0;
  if (s.type == Type::kInt && !parse_int(v, i)) return "invalid int value: '" + v + "'";
  if (s.type == Type::kFloat && !parse_float(v, d)) return "invalid float value: '" + v + "'";
  if (s.choices == nullptr) return "";
  std::string choice;
  for (std::istringstream in(s.choices); std::getline(in, choice, '|');)
    if (choice == v) return "";
  std::string shown = s.choices;
  std::replace(shown.begin(), shown.end(), '|', ',');
  return "invalid choice: '" + v + "' (choose from " + shown + ")";
}

// The words of `args` into `out`: refused and unknown arguments, missing and malformed values are errors,
// noted arguments notes. Returns false when a value is missing or malformed (nothing is translated then).
bool parse(const std::vector<std::string>& args, Args& out, MegatronTranslation& t) {
  bool values_ok = true;
  std::set<std::string> said;
  auto say = [&](std::vector<std::string>& to, const std::string& name, const std::string& line) {
    if (said.insert(name).second) to.push_back(line);
  };
  for (size_t k = 0; k < args.size(); ++k) {
    const std::string& w = args[k];
    if (!is_option(w)) {
      t.errors.push_back("`" + w + "`: not an option (pretrain_gpt.py takes no positional arguments; argparse: "
                         "unrecognized arguments)");
      continue;
    }
    const size_t eq = w.find('=');
    const std::string name = w.substr(0, eq);
    const bool inline_value = eq != std::string::npos;
    const Entry* e = index().find(name);
    if (e == nullptr) {
      t.errors.push_back("`" + name + "`: not an argument of Megatron-LM (285068c, core_r0.6.0), its tasks/main.py or "
                         "MindSpeed; did you mean `" + index().nearest(name) + "`?");
      while (k + 1 < args.size() && !is_option(args[k + 1])) ++k;  // its words, as argparse would reject them too
      continue;
    }
    std::vector<std::string> values;
    if (e->arity == '0') {
      if (inline_value) {
        t.errors.push_back("`" + w + "`: " + name + " is a flag and takes no value (argparse: ignored explicit argument)");
        values_ok = false;
        continue;
      }
    } else if (inline_value) {
      values.push_back(w.substr(eq + 1));
    } else if (e->arity == '1') {
      if (k + 1 >= args.size() || is_option(args[k + 1])) {
        t.errors.push_back("`" + name + "`: expected one argument" +
                           (e->spec ? std::string(" (") + type_name(e->spec->type) + ")" : std::string()));
        values_ok = false;
        continue;
      }
      values.push_back(args[++k]);
    } else {
      while (k + 1 < args.size() && !is_option(args[k + 1])) values.push_back(args[++k]);
      if (e->arity == '+' && values.empty()) {
        t.errors.push_back("`" + name + "`: expected at least one argument");
        values_ok = false;
        continue;
      }
    }
    if (e->spec == nullptr) {
      say(t.errors, name, "`" + name + "`: a Megatron argument with no counterpart in gridformer's config (not translated)");
      continue;
    }
    bool ok = true;
    for (const std::string& v : values)
      if (const std::string problem = check_value(*e->spec, v); !problem.empty()) {
        t.errors.push_back("`" + name + " " + v + "`: " + problem);
        ok = values_ok = false;
      }
    if (!ok) continue;
    if (e->spec->kind == Kind::kRefused) say(t.errors, e->canonical, "`" + name + "`: " + e->spec->text);
    if (e->spec->kind == Kind::kNoted) say(t.notes, e->canonical, "`" + name + "`: " + e->spec->text);
    out.set(e->canonical, std::move(values));
  }
  return values_ok;
}

const Spec* spec_of(const std::string& name) {
  const Entry* e = index().find(name);
  return e == nullptr ? nullptr : e->spec;
}

}  // namespace

// ---- values ----

namespace {

// The text between leading and trailing blanks (Python's int() and float() strip them).
std::string stripped(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

bool parse_int(const std::string& s, int64_t& out) {
  // [+-]?\d+(_\d+)*, as Python's int() reads a literal.
  const std::string t = stripped(s);
  std::string digits;
  size_t k = t.empty() || (t[0] != '+' && t[0] != '-') ? 0 : 1;
  if (k == 1 && t[0] == '-') digits = "-";
  bool after_digit = false;
  for (; k < t.size(); ++k) {
    if (is_digit(t[k])) {
      digits += t[k];
      after_digit = true;
    } else if (t[k] == '_' && after_digit && k + 1 < t.size() && is_digit(t[k + 1])) {
      after_digit = false;
    } else {
      return false;
    }
  }
  if (!after_digit) return false;
  const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  return ec == std::errc() && p == digits.data() + digits.size();
}

bool parse_float(const std::string& s, double& out) {
  // [+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?, or inf, infinity, nan in any case, as Python's float() reads them.
  const std::string t = stripped(s);
  size_t k = !t.empty() && (t[0] == '+' || t[0] == '-') ? 1 : 0;
  std::string word = t.substr(k);
  std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (word == "inf" || word == "infinity" || word == "nan") {
    out = std::strtod(t.c_str(), nullptr);
    return true;
  }
  size_t int_digits = 0, frac_digits = 0;
  while (k < t.size() && is_digit(t[k])) ++k, ++int_digits;
  if (k < t.size() && t[k] == '.') {
    ++k;
    while (k < t.size() && is_digit(t[k])) ++k, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return false;
  if (k < t.size() && (t[k] == 'e' || t[k] == 'E')) {
    ++k;
    if (k < t.size() && (t[k] == '+' || t[k] == '-')) ++k;
    size_t exp_digits = 0;
    while (k < t.size() && is_digit(t[k])) ++k, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  if (k != t.size()) return false;
  out = std::strtod(t.c_str(), nullptr);
  return true;
}

YAML::Node num(double v) {
  char buf[64];
  // Whole numbers below 2^53 in fixed notation (500000.0, not 5e+05); the rest as the shortest decimal.
  const bool fixed = std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 9007199254740992.0;
  const auto [p, ec] = fixed ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                             : std::to_chars(buf, buf + sizeof buf, v);
  std::string t(buf, ec == std::errc() ? p : buf);
  const size_t e = t.find('e');
  if (std::isfinite(v) && t.find('.') == std::string::npos) t.insert(e == std::string::npos ? t.size() : e, ".0");
  return YAML::Node(t);
}

std::optional<std::string> Args::text(const std::string& name) const {
  if (auto it = given_.find(name); it != given_.end()) return it->second.empty() ? std::string() : it->second.front();
  const Spec* s = spec_of(name);
  if (s == nullptr || s->fallback == nullptr) return std::nullopt;
  return std::string(s->fallback);
}

std::optional<int64_t> Args::opt_int(const std::string& name) const {
  int64_t v = 0;
  const auto t = text(name);
  return t && parse_int(*t, v) ? std::optional<int64_t>(v) : std::nullopt;
}

std::optional<double> Args::opt_float(const std::string& name) const {
  double v = 0;
  const auto t = text(name);
  return t && parse_float(*t, v) ? std::optional<double>(v) : std::nullopt;
}

const std::vector<std::string>& Args::list(const std::string& name) const {
  static const std::vector<std::string> none;
  auto it = given_.find(name);
  return it == given_.end() ? none : it->second;
}

std::string Job::given(const std::string& name) const {
  const auto v = a.text(name);
  return v && !v->empty() ? name + " " + *v : name;
}

// ---- the layout: tensor, pipeline, context, data and expert parallel; the batch ----

void translate_layout(Job& j) {
  const Args& a = j.a;
  const int64_t tp_in = a.i("--tensor-model-parallel-size"), pp_in = a.i("--pipeline-model-parallel-size");
  j.cp = a.i("--context-parallel-size");
  if (tp_in < 1 || pp_in < 1 || j.cp < 1) {
    j.error("--tensor-model-parallel-size / --pipeline-model-parallel-size / --context-parallel-size", "must be >= 1");
    return;
  }
  // Megatron's validate_args: TP = min(TP, world), PP = min(PP, world / TP), then world % (TP x PP x CP) == 0.
  j.tp = std::min<int64_t>(tp_in, j.world);
  if (j.tp < tp_in)
    j.note(j.given("--tensor-model-parallel-size"), "Megatron lowers it to the world size, " + str(j.tp));
  if (j.world % j.tp != 0) {
    j.error(j.given("--tensor-model-parallel-size"), "world size " + str(j.world) + " is not divisible by it (Megatron refuses)");
    return;
  }
  j.pp = std::min<int64_t>(pp_in, j.world / j.tp);
  if (j.pp < pp_in)
    j.note(j.given("--pipeline-model-parallel-size"), "Megatron lowers it to min(" + str(pp_in) + ", world " +
           str(j.world) + " / TP " + str(j.tp) + ") = " + str(j.pp) + " (validate_args): pipeline_stage " + str(j.pp));
  if (j.world % (j.tp * j.pp * j.cp) != 0) {
    j.error("--tensor-model-parallel-size", "world size " + str(j.world) + " is not divisible by TP " + str(j.tp) +
            " x PP " + str(j.pp) + " x CP " + str(j.cp) + " (Megatron refuses)");
    return;
  }
  j.dp = j.world / (j.tp * j.pp * j.cp);

  const auto micro = a.opt_int("--micro-batch-size");
  if (!micro || *micro < 1) {
    j.error("--micro-batch-size", micro ? "must be > 0" : "required (Megatron asserts it is given)");
    return;
  }
  j.micro = *micro;
  j.global = a.has("--global-batch-size") ? a.i("--global-batch-size") : j.micro * j.dp;
  if (j.global < 1 || j.global % (j.micro * j.dp) != 0) {
    j.error(j.given("--global-batch-size"), "not a positive multiple of micro batch " + str(j.micro) + " x data parallel " +
            str(j.dp) + " = " + str(j.micro * j.dp) + " (Megatron's micro-batch calculator refuses it)");
    return;
  }
  j.gas = j.global / (j.micro * j.dp);
  j.runner_config["batch_size"] = j.micro;
  if (j.pp == 1) j.runner_config["gradient_accumulation_steps"] = j.gas;

  YAML::Node pc = j.parallel_config;
  pc["data_parallel"] = j.dp;
  pc["model_parallel"] = j.tp;
  pc["pipeline_stage"] = j.pp;
  pc["context_parallel"] = j.cp;
  // Megatron's embedding and LM head are always split by vocabulary over tensor parallel.
  pc["vocab_emb_dp"] = j.tp == 1;
  const bool sp = a.flag("--sequence-parallel");
  if (sp && j.tp == 1) j.note("--sequence-parallel", "Megatron turns it off at tensor parallel 1 (validate_args)");
  pc["use_seq_parallel"] = sp && j.tp > 1;
  pc["micro_batch_num"] = j.pp > 1 ? j.gas : 1;  // the micro-batches of a step under a pipeline
  if (a.flag("--use-distributed-optimizer")) j.parallel["enable_parallel_optimizer"] = true;
  if (a.has("--distributed-timeout-minutes")) j.parallel["hang_timeout"] = num(60.0 * a.f("--distributed-timeout-minutes"));

  if (j.cp > 1) {
    const std::string algo = a.s("--context-parallel-algo");
    if (algo.empty() || algo == "megatron_cp_algo") {
      pc["context_parallel_algo"] = "colossalai_cp";  // Megatron's ring attention with the causal load balance
    } else if (algo == "ulysses_cp_algo") {
      pc["context_parallel_algo"] = "ulysses_cp";
    } else if (algo == "hybrid_cp_algo") {
      pc["context_parallel_algo"] = "hybrid_cp";
      const int64_t u = a.has("--ulysses-degree-in-cp") ? a.i("--ulysses-degree-in-cp") : 0;
      if (u < 1 || j.cp % u != 0 || j.cp / u < 2)  // MindSpeed: a ring of at least 2 Ulysses groups
        j.error("--context-parallel-algo hybrid_cp_algo", "needs --ulysses-degree-in-cp U dividing --context-parallel-size " +
                str(j.cp) + " with a ring of 2 or more groups (MindSpeed asserts it)");
      else pc["ulysses_degree_in_cp"] = u;
    } else {
      j.error(j.given("--context-parallel-algo"), "MindSpeed's adaptive context parallelism is not built (megatron_cp_algo, "
              "ulysses_cp_algo and hybrid_cp_algo are)");
    }
  } else if (a.has("--context-parallel-algo") || a.has("--ulysses-degree-in-cp")) {
    j.note(a.has("--context-parallel-algo") ? "--context-parallel-algo" : "--ulysses-degree-in-cp",
           "no effect without --context-parallel-size > 1");
  }

  j.ep = a.i("--expert-model-parallel-size");
  if (j.ep < 1) j.error(j.given("--expert-model-parallel-size"), "must be >= 1");
  if (j.ep > 1) {
    if (j.dp % j.ep != 0)
      j.error(j.given("--expert-model-parallel-size"), "data parallel " + str(j.dp) +
              " is not divisible by it (Megatron's parallel_state refuses)");
    if (j.cp > 1)
      j.error(j.given("--expert-model-parallel-size"), "with --context-parallel-size " + str(j.cp) +
              ": Megatron core_r0.6.0 refuses expert and context parallelism together");
    if (a.flag("--fp16")) j.error(j.given("--expert-model-parallel-size"), "with --fp16: Megatron refuses expert parallelism in fp16");
  }
  pc["expert_parallel"] = j.ep;
}

// ---- the vocabulary: the tokenizer's size, Megatron's padding, the end-of-document id ----

void translate_vocabulary(Job& j) {
  const Args& a = j.a;
  if (j.task && !a.has("--tokenizer-type")) {
    j.error("--task", "tasks/main.py has no default tokenizer (pretrain_gpt.py's is GPT2BPETokenizer): give --tokenizer-type");
    return;
  }
  const std::string tok = a.s("--tokenizer-type");
  if (tok == "GPT2BPETokenizer") {
    for (const char* f : {"--vocab-file", "--merge-file"})
      if (!a.has(f)) j.error(f, "required by --tokenizer-type GPT2BPETokenizer (Megatron asserts it)");
    j.vocab = 50257;  // GPT-2's encoder.json; end of text 50256
    j.eod = 50256;
    if (a.has("--vocab-size"))
      j.note(j.given("--vocab-size"), "read by --tokenizer-type NullTokenizer only; the GPT-2 BPE's own 50257 tokens are used" +
             std::string(a.i("--vocab-size") == 50257 ? "" : " (not " + str(a.i("--vocab-size")) + ")"));
    if (a.has("--vocab-file") && a.has("--merge-file")) {  // what predict and LAMBADA encode with
      j.processor["tokenizer"]["type"] = "GPT2Tokenizer";
      j.processor["tokenizer"]["vocab_file"] = a.s("--vocab-file");
      j.processor["tokenizer"]["merge_file"] = a.s("--merge-file");
    }
  } else if (tok == "NullTokenizer") {
    if (!a.has("--vocab-size") || a.i("--vocab-size") < 1) {
      j.error("--tokenizer-type NullTokenizer", "needs --vocab-size N > 0 (Megatron asserts it)");
      return;
    }
    j.vocab = a.i("--vocab-size") + 1;  // Megatron's _NullTokenizer adds the end-of-document id N
    j.eod = a.i("--vocab-size");
    for (const char* f : {"--vocab-file", "--merge-file"})
      if (a.has(f)) j.note(f, "not read by --tokenizer-type NullTokenizer");
  } else {
    j.error(j.given("--tokenizer-type"), "its vocabulary size is in the tokenizer's files, which the translator does not "
            "read; translated: GPT2BPETokenizer (50257 tokens) and NullTokenizer with --vocab-size");
    return;
  }
  if (a.has("--tokenizer-model")) j.note("--tokenizer-model", "read by the SentencePiece tokenizer types only");
  if (a.i("--vocab-extra-ids") > 0) j.note(j.given("--vocab-extra-ids"), "read by the WordPiece and SentencePiece types only");
  // Megatron pads to a multiple of divisible_by x TP; our layout pads to 128 x TP (vocab split over tensor
  // parallel, vocab_emb_dp False) or 128 (one rank). The shapes must agree.
  const int64_t by = a.i("--make-vocab-size-divisible-by");
  if (by < 1) {
    j.error(j.given("--make-vocab-size-divisible-by"), "must be >= 1");
    return;
  }
  auto pad = [&](int64_t multiple) { return (j.vocab + multiple - 1) / multiple * multiple; };
  const int64_t megatron = pad(by * j.tp), ours = pad(128 * j.tp);
  if (megatron != ours) {
    j.error(j.given("--make-vocab-size-divisible-by"), "Megatron pads the " + str(j.vocab) + "-token vocabulary to " +
            str(megatron) + " (a multiple of " + str(by) + " x TP " + str(j.tp) + "); gridformer pads it to a multiple of 128 "
            "x model_parallel, " + str(ours) + ", so the embedding and LM head would have other shapes; use a divisor that "
            "gives " + str(ours) + " (128 does)");
    return;
  }
  j.t.padded_vocab_size = megatron;
  if (megatron > j.vocab)
    j.differ("vocabulary padding (" + str(j.vocab) + " -> " + str(megatron) + "): Megatron's LM head trains the " +
             str(megatron - j.vocab) + " padding logits as classes of the softmax; gridformer masks them out, so its loss "
             "is the " + str(j.vocab) + "-token one and does not depend on tensor parallel (they differ by the padding's "
             "share of the softmax)");
}

}  // namespace megatron_args

MegatronTranslation translate_megatron_args(const std::vector<std::string>& args,
                                            const std::map<std::string, std::string>& env, int world_size) {
  using namespace megatron_args;
  MegatronTranslation t;
  Args a;
  if (world_size < 1) t.errors.push_back("world size " + std::to_string(world_size) + ": must be >= 1");
  const bool values_ok = parse(args, a, t);
  if (!values_ok || world_size < 1) return t;
  Job j{a, world_size, t};
  j.task = a.has("--task");
  j.training = !j.task && !a.flag("--skip-train");
  j.fp16 = a.flag("--fp16");
  j.bf16 = a.flag("--bf16");
  j.top["seed"] = a.i("--seed");
  j.top["run_mode"] = j.training ? "train" : "eval";
  j.top["log_format"] = "megatron";  // the step lines as Megatron's training_log prints them, for its users' parsers
  translate_layout(j);
  translate_vocabulary(j);
  translate_model(j);
  translate_experts(j);
  translate_precision(j);
  translate_recompute(j);
  translate_schedule(j);
  translate_data(j);
  translate_output(j);
  translate_task(j);
  translate_environment(j, env);
  if (!t.errors.empty()) return t;

  YAML::Node root = j.top;
  const std::pair<const char*, YAML::Node*> sections[] = {
      {"runner_config", &j.runner_config}, {"runner_wrapper", &j.runner_wrapper}, {"parallel", &j.parallel},
      {"parallel_config", &j.parallel_config}, {"moe_config", &j.moe_config}, {"recompute_config", &j.recompute_config},
      {"trainer", &j.trainer}, {"train_dataset", &j.train_dataset}, {"eval_dataset", &j.eval_dataset},
      {"model", &j.model}, {"lr_schedule", &j.lr_schedule}, {"optimizer", &j.optimizer}, {"callbacks", &j.callbacks},
      {"processor", &j.processor}};
  for (const auto& [key, node] : sections)
    if (node->size() > 0) root[key] = *node;
  YAML::Emitter out;
  out << root;
  t.yaml = std::string(out.c_str()) + "\n";
  return t;
}

}  // namespace gf
