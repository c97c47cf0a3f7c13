#include "runner/infer/generate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <omp.h>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/io/checkpoint.h"
#include "core/math/team_tuner.h"
#include "core/data/text_tokenizer.h"
#include "models/generator.h"
#include "models/registry.h"
#include "runner/report/metrics_log.h"
#include "runner/infer/sampling.h"
#include "runner/train/trainer.h"

namespace gf {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<int32_t> parse_ids(const std::string& s, const std::string& what) {
  std::istringstream in(s);
  std::vector<int32_t> ids;
  std::string w;
  while (in >> w) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != w.size() || v < 0 || v > INT32_MAX)
      throw std::runtime_error(what + ": `" + w + "` is not a token id (non-negative integers, space-separated)");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// stdout, in prompt order: the first unfinished sequence streams its tokens as they come; when it
// ends, the next one's prompt and what it has so far follow, and it streams in turn.
class Printer {
 public:
  Printer(bool active, const data::TextTokenizer* tok, int64_t eos) : active_(active), tok_(tok), eos_(eos) {}
  void add(const std::vector<int32_t>* prompt, const std::vector<int32_t>* generated, const bool* done) {
    seqs_.push_back({prompt, generated, done, 0, false});
  }
  void flush() {
    if (!active_) return;
    while (cursor_ < seqs_.size()) {
      Seq& s = seqs_[cursor_];
      if (tok_ != nullptr) {
        write_text(s);
      } else {
        if (!s.started) write(*s.prompt, 0, s.prompt->size(), true);
        write(*s.generated, s.printed, s.generated->size(), false);
      }
      s.started = true;
      s.printed = s.generated->size();
      if (!*s.done) break;
      std::fputs("\n", stdout);
      ++cursor_;
    }
    std::fflush(stdout);
  }

 private:
  struct Seq {
    const std::vector<int32_t>* prompt;
    const std::vector<int32_t>* generated;
    const bool* done;
    size_t printed;
    bool started;
    size_t text_printed = 0;  // bytes of the decoded text printed
  };
  // Token ids, space-separated (no tokenizer).
  void write(const std::vector<int32_t>& ids, size_t from, size_t to, bool prompt) {
    for (size_t i = from; i < to; ++i) {
      if (!prompt && ids[i] == eos_) continue;  // the end-of-text token ends the text; it is not printed
      std::fprintf(stdout, "%s%d", (i == 0 && prompt) ? "" : " ", ids[i]);
    }
  }
  // Text: the prompt and what is generated (without end-of-text tokens) decoded together, and what
  // is new since the last flush printed. A SentencePiece piece decodes differently at the start of a
  // text than after others (its leading space), so pieces are not decoded one by one; GPT-2's bytes
  // come out the same either way.
  void write_text(Seq& s) {
    std::vector<int32_t> ids(*s.prompt);
    for (int32_t id : *s.generated)
      if (id != eos_) ids.push_back(id);
    const std::string text = tok_->decode(ids);
    if (text.size() > s.text_printed) std::fwrite(text.data() + s.text_printed, 1, text.size() - s.text_printed, stdout);
    s.text_printed = std::max(s.text_printed, text.size());
  }
  bool active_;
  const data::TextTokenizer* tok_;
  int64_t eos_;
  std::vector<Seq> seqs_;
  size_t cursor_ = 0;
};


}  // namespace

// The model for generation: built with the training layout's tensor and expert split, but for one
// token per row (its training activations are not used), and its weights loaded.
std::unique_ptr<CausalLM> build_for_generation(const Config& cfg, const ParallelContext& ctx) {
  ModelConfig m = cfg.model;
  m.seq_length = 1;  // the trainer's activation buffers: one row (the generator plans its own)
  ModelLayout layout = model_layout(cfg);
  layout.sequence_parallel = false;
  layout.recompute = RecomputePolicy::kNone;
  std::unique_ptr<CausalLM> model;
  if (ctx.size(GridAxis::kPp) > 1) {
    // This rank's stage: the layers the config's pipeline split gives it (one chunk).
    const std::vector<int64_t>& layers = cfg.parallel.stage_layers;
    if (cfg.parallel.pipeline_chunks > 1 || static_cast<int>(layers.size()) != ctx.size(GridAxis::kPp))
      throw std::runtime_error("predict runs one model chunk per pipeline stage: turn "
                               "parallel.pipeline_config.pipeline_interleave off for generation");
    const std::vector<int64_t> bounds = layer_bounds(layers);
    const auto stage = static_cast<size_t>(ctx.index(GridAxis::kPp));
    StageOptions st;
    st.layer_begin = bounds[stage];
    st.layer_end = bounds[stage + 1];
    const ModelEntry& entry = find_model(m.arch, m.type);
    model = std::make_unique<TransformerLM>(entry.spec(m), entry.names, m, layout, 1, ctx, st);
  } else {
    model = build_model(m, layout, 1, ctx);
  }
  const std::string& path = cfg.load_checkpoint;
  if (path.empty()) {
    model->init_weights(static_cast<uint64_t>(cfg.seed));
    spdlog::warn("no load_checkpoint: generating from the seed's random weights (seed {}); set load_checkpoint "
                 "(--load_checkpoint) to a checkpoint, Hugging Face weights or a --save-weights file",
                 cfg.seed);
  } else if (is_peft_adapter_dir(path)) {  // PEFT's adapter directory: its base, then its adapters
    load_peft_adapters(*model, cfg, path);
  } else if (cfg.model.lora.on) {  // LoRA: the base the checkpoint names (or the base itself), then its adapters
    const std::string base = lora_base_of(path);
    if (base.empty()) {
      if (ckpt::is_checkpoint(path) && !ckpt::Reader::open(path).state().value("lora", nlohmann::json()).is_null())
        throw std::runtime_error(path + " names no base model (its run trained over the seed's random initialisation)");
      load_lora_base(*model, cfg, path);
      model->init_weights(static_cast<uint64_t>(cfg.seed));
      spdlog::warn("LoRA: {} is a base model: generating with the adapters' initial values (B = 0: the base itself)", path);
    } else {
      load_lora_base(*model, cfg, base);
      ckpt::Reader r = ckpt::Reader::open(path);
      read_checkpoint_weights(r, *model, cfg);
      spdlog::info("loaded LoRA adapters from checkpoint {} (step {})", r.dir(), r.state().value("step", int64_t{0}));
    }
  } else if (ckpt::is_checkpoint(path)) {
    ckpt::Reader r = ckpt::Reader::open(path);
    read_checkpoint_weights(r, *model, cfg);
    spdlog::info("loaded weights from checkpoint {} (step {})", r.dir(), r.state().value("step", int64_t{0}));
  } else {
    const std::string note = model->load_hf_checkpoint(path);
    spdlog::info("loaded weights from {}{}", path, note.empty() ? "" : " (" + note + ")");
  }
  return model;
}

// The tokenizer of processor.tokenizer (MindFormers' type mapped to Megatron's, core/data/text_tokenizer.h:
// GPT2Tokenizer with vocab_file and merge_file, LlamaTokenizer with vocab_file: tokenizer.model), or the
// GPT-2 BPE of the given files.
std::unique_ptr<data::TextTokenizer> text_tokenizer(const GenerationConfig& gc, const std::string& vocab_given,
                                                    const std::string& merges_given, const std::string& what) {
  const bool ids_hint = what == "predict encodes text";
  data::TokenizerFiles f;
  if (!vocab_given.empty() || !merges_given.empty()) {
    f.vocab_file = vocab_given.empty() ? gc.vocab_file : vocab_given;
    f.merge_file = merges_given.empty() ? gc.merge_file : merges_given;
  } else {
    f.type = gc.tokenizer_type.empty() ? "GPT2BPETokenizer" : data::tokenizer_type_from_mindformers(gc.tokenizer_type);
    if (f.type.empty())
      throw std::runtime_error("processor.tokenizer.type " + gc.tokenizer_type + ": " + what +
                               " with GPT2Tokenizer (vocab_file, merge_file) or LlamaTokenizer (vocab_file: tokenizer.model), "
                               "or Megatron's type names" +
                               (ids_hint ? std::string("; or give token ids with --predict_ids") : std::string()));
    const bool sentencepiece = f.type.find("SentencePiece") != std::string::npos || f.type == "Llama2Tokenizer" ||
                               f.type == "HuggingFaceTokenizer";  // vocab_file names the model file
    (sentencepiece ? f.tokenizer_model : f.vocab_file) = gc.vocab_file;
    f.merge_file = gc.merge_file;
    if (sentencepiece && f.tokenizer_model.empty())
      throw std::runtime_error(what + " with processor.tokenizer.type " + gc.tokenizer_type +
                               ": set processor.tokenizer.vocab_file to its tokenizer.model" +
                               (ids_hint ? std::string(", or give token ids with --predict_ids") : std::string()));
  }
  if (f.type == "GPT2BPETokenizer" && (f.vocab_file.empty() || f.merge_file.empty()))
    throw std::runtime_error(what + " with the GPT-2 BPE: set processor.tokenizer.vocab_file and merge_file" +
                             (ids_hint ? std::string(" (or --vocab_file and --merge_file), or give token ids with --predict_ids")
                                       : std::string()));
  return data::make_tokenizer(f);
}


std::vector<ClozeItem> read_lambada_for(const Config& cfg, const std::string& path, bool strict) {
  const auto tok = text_tokenizer(cfg.generation, "", "", "LAMBADA is tokenized");
  std::vector<ClozeItem> items = read_lambada(path, *tok, strict);
  for (const ClozeItem& it : items)
    for (const int32_t t : it.context)
      if (t >= cfg.model.vocab_size)
        throw std::runtime_error("LAMBADA file " + path + " line " + std::to_string(it.line) + ": token id " +
                                 std::to_string(t) + " is outside the model's vocabulary (vocab_size " +
                                 std::to_string(cfg.model.vocab_size) + ")");
  return items;
}

ClozeResult evaluate_lambada(const CausalLM& model, const ParallelContext& ctx, const Config& cfg,
                             const std::vector<ClozeItem>& items, const std::string& path) {
  const auto* lm = dynamic_cast<const TransformerLM*>(&model);
  if (lm == nullptr || !lm->whole_model())
    throw std::runtime_error("LAMBADA runs the whole model on each rank: pipeline_stage > 1 is not supported; "
                             "evaluate with pipeline_stage: 1");
  const int64_t max_len = cfg.model.seq_length, chunk = std::min<int64_t>(64, max_len);
  Generator::Options go;
  go.slots = 1;
  go.capacity = max_len;
  go.max_rows = go.max_logit_rows = chunk;
  Generator gen(*lm, ctx, go);
  const auto t0 = Clock::now();
  const GreedyFn greedy = [&](const std::vector<std::vector<int32_t>>& batch, std::vector<std::vector<int32_t>>& argmax) {
    argmax.assign(batch.size(), {});
    std::vector<int64_t> seq(static_cast<size_t>(chunk), 0), pos(static_cast<size_t>(chunk)),
        rows(static_cast<size_t>(chunk));
    for (size_t i = 0; i < batch.size(); ++i) {
      const std::vector<int32_t>& x = batch[i];
      const int64_t n = static_cast<int64_t>(x.size());
      for (int64_t a = 0; a < n; a += chunk) {
        const int64_t m = std::min(chunk, n - a);
        for (int64_t r = 0; r < m; ++r) pos[r] = a + r, rows[r] = r;
        const float* logits = gen.forward(x.data() + a, seq.data(), pos.data(), m, rows.data(), m);
        for (int64_t r = 0; r < m; ++r) {
          const float* row = logits + r * gen.vocab();
          argmax[i].push_back(static_cast<int32_t>(std::max_element(row, row + gen.vocab()) - row));
        }
      }
    }
  };
  const ClozeResult r = cloze_accuracy(items, greedy, max_len, 8, path);
  spdlog::info("lambada: accuracy {:.4f} ({}/{}) on {} in {:.1f} s", r.accuracy(), r.correct, r.items, path,
               seconds_since(t0));
  if (cfg.megatron_log && ctx.world_rank() == 0) {
    // Megatron-LM's result box (tasks/zeroshot_gpt/evaluate.py evaluate_and_print_results at 285068c, eval_metric
    // 'accuracy'), printed as its print_rank_0 prints it, for the log parsers of tasks/main.py's users.
    const std::string line = fmt::format(
        " validation results on LAMBADA | number correct: {:.4E} | total examples: {:.4E} | avg accuracy: {:.4E}",
        static_cast<double>(r.correct), static_cast<double>(r.items), r.accuracy());
    const std::string rule(line.size() + 1, '-');
    std::printf("%s\n%s\n%s\n", rule.c_str(), line.c_str(), rule.c_str());
    std::fflush(stdout);
  }
  return r;
}

struct Predictor::State {
  Config cfg;
  const ParallelContext* ctx;
  PredictRequest req;
  std::unique_ptr<data::TextTokenizer> tok;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> limit;
  int64_t batch = 1;
  SamplingOptions so;
  std::unique_ptr<CausalLM> model;
  std::unique_ptr<Generator> gen;
  Generator::Options go;
  // Of run(): what each prompt has generated, whether it is done, and the rows of the next model call
  // (logit_of: the prompt of each logits row).
  std::vector<std::vector<int32_t>> generated;
  std::unique_ptr<bool[]> done;
  std::vector<int32_t> tokens;
  std::vector<int64_t> seq, pos, logit_rows, logit_of;
  // The team size of a call of one row (a decode step of one sequence), measured (core/math/team_tuner.h).
  TeamTuner one_row_team{omp_get_max_threads()};
  int64_t one_row_calls = 0;

  std::vector<int32_t> full(int64_t i) const;
  int64_t run_call();
  int64_t step(int64_t b0, int64_t nb, const std::function<int64_t(int64_t)>& from);
  void report(const PredictStats& st) const;
};

Predictor::~Predictor() = default;

Predictor::Predictor(const Config& cfg, const ParallelContext& ctx, const PredictRequest& req)
    : s_(std::make_unique<State>()) {
  s_->cfg = cfg;
  s_->ctx = &ctx;
  s_->req = req;
  const GenerationConfig& gc = cfg.generation;
  std::vector<std::vector<int32_t>>& prompts = s_->prompts;
  std::vector<int64_t>& limit = s_->limit;
  SamplingOptions& so = s_->so;
  // The prompts.
  std::vector<std::string> texts = req.texts;
  if (!req.file.empty()) {
    std::ifstream in(req.file);
    if (!in) throw std::runtime_error("--predict_file " + req.file + ": cannot be read");
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;  // blank lines separate nothing: skipped
      texts.push_back(line);
    }
    if (n == 0) throw std::runtime_error("--predict_file " + req.file + ": no prompt in it (one prompt a line)");
  }
  if (!req.vocab_file.empty() || !req.merge_file.empty() || !gc.vocab_file.empty() || !texts.empty())
    s_->tok = text_tokenizer(gc, req.vocab_file, req.merge_file, "predict encodes text");
  const std::unique_ptr<data::TextTokenizer>& tok = s_->tok;
  for (const std::string& t : texts) prompts.push_back(tok->encode(t));
  for (size_t i = 0; i < req.ids.size(); ++i)
    prompts.push_back(parse_ids(req.ids[i], "--predict_ids #" + std::to_string(i + 1)));
  if (prompts.empty())
    throw std::runtime_error("no prompt: give --predict_data TEXT (repeatable), --predict_file FILE or --predict_ids IDS");
  const int64_t V = cfg.model.vocab_size;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty())
      throw std::runtime_error("prompt " + std::to_string(i + 1) + " is empty: a prompt needs at least one token");
    for (const int32_t t : prompts[i])
      if (t >= V)
        throw std::runtime_error("prompt " + std::to_string(i + 1) + ": token id " + std::to_string(t) +
                                 " is outside the model's vocabulary (vocab_size " + std::to_string(V) + ")");
  }
  // The lengths: prompt + generated tokens, within the learned positions.
  const int64_t learned = find_model(cfg.model.arch, cfg.model.type).spec(cfg.model).positions;  // 0: rotary only
  const int64_t pos_limit = learned > 0 ? learned : INT64_MAX;
  limit.assign(prompts.size(), 0);
  int64_t capacity = 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t L = static_cast<int64_t>(prompts[i].size());
    if (L >= pos_limit)
      throw std::runtime_error("prompt " + std::to_string(i + 1) + " has " + std::to_string(L) +
                               " tokens: the model has " + std::to_string(pos_limit) +
                               " positions (max_position_embeddings), so none is left to generate; shorten it");
    int64_t lim = req.max_new_tokens > 0 ? L + req.max_new_tokens : gc.max_decode_length;
    if (lim <= L)
      throw std::runtime_error("prompt " + std::to_string(i + 1) + " has " + std::to_string(L) +
                               " tokens and max_decode_length (prompt + generated tokens) is " + std::to_string(lim) +
                               ": nothing would be generated; raise model_config.max_decode_length "
                               "(--max_decode_length) or give --max_new_tokens");
    lim = std::min(lim, pos_limit);
    limit[i] = lim;
    capacity = std::max(capacity, lim);
  }
  const int64_t n = static_cast<int64_t>(prompts.size());
  const int64_t batch = s_->batch = req.batch > 0 ? std::min(req.batch, n) : n;
  so.do_sample = gc.do_sample;
  so.top_k = gc.top_k;
  so.top_p = gc.top_p;
  so.temperature = req.temperature.value_or(gc.temperature);
  if (!(so.temperature > 0.0)) throw std::runtime_error("--temperature must be > 0");
  so.repetition_penalty = gc.repetition_penalty;
  so.seed = static_cast<uint64_t>(cfg.seed);
  s_->model = build_for_generation(cfg, ctx);
  const auto* lm = dynamic_cast<const TransformerLM*>(s_->model.get());
  if (lm == nullptr) throw std::logic_error("predict: the model is not a TransformerLM");
  Generator::Options& go = s_->go;
  go.slots = batch;
  go.capacity = capacity;
  go.max_rows = req.max_rows > 0 ? std::max(req.max_rows, batch) : std::max(batch, capacity);
  go.max_logit_rows = batch;
  s_->gen = std::make_unique<Generator>(*lm, ctx, go);
  const Generator& gen = *s_->gen;
  spdlog::info("predict: {} prompt(s) in batches of {}, up to {} tokens each (prompt + generated), {} ({}); "
               "KV cache {:.1f} MiB ({} bytes), buffers {:.1f} MiB",
               n, batch, capacity, gc.use_past ? "KV cache (use_past)" : "prefix recomputed (use_past: False)",
               so.do_sample ? fmt::format("sampling: top_k {}, top_p {}, temperature {}, seed {}", so.top_k, so.top_p,
                                          so.temperature, cfg.seed)
                            : std::string("greedy"),
               gen.cache_bytes() / 1048576.0, gen.cache_bytes(), gen.bytes() / 1048576.0);
}

// The prompts' sequence so far: the prompt and what has been generated.
std::vector<int32_t> Predictor::State::full(int64_t i) const {
  std::vector<int32_t> all = prompts[i];
  all.insert(all.end(), generated[i].begin(), generated[i].end());
  return all;
}

// One call of the model over the rows gathered since the last; each prompt whose last row was in
// it gets its next token (chosen on the last pipeline stage, which tells the others). Returns how many.
int64_t Predictor::State::run_call() {
  if (tokens.empty()) return 0;
  // One row: matrix-vector products and per-row / per-head loops, each output made whole by one
  // thread, so its result is the same on any team; its team size is measured, not assumed.
  const bool one_row = tokens.size() == 1;
  const float* logits;
  {
    const TeamScope team(one_row ? one_row_team.threads() : 0);
    const auto t0 = Clock::now();
    logits = gen->forward(tokens.data(), seq.data(), pos.data(), static_cast<int64_t>(tokens.size()),
                          logit_rows.data(), static_cast<int64_t>(logit_rows.size()));
    if (one_row) {
      one_row_team.record(seconds_since(t0));
      ++one_row_calls;
    }
  }
  std::vector<int32_t> next(logit_of.size());
  if (gen->last_stage())
    for (size_t j = 0; j < logit_of.size(); ++j) {
      const int64_t i = logit_of[j];
      std::vector<float> row(logits + j * gen->vocab(), logits + (j + 1) * gen->vocab());
      next[j] = next_token(row, full(i), so, static_cast<uint64_t>(i), generated[i].size());
    }
  const int stages = ctx->size(GridAxis::kPp);
  if (stages > 1 && !next.empty())
    ctx->group(GridAxis::kPp).broadcast(next.data(), static_cast<int64_t>(next.size() * sizeof(int32_t)), stages - 1);
  for (size_t j = 0; j < logit_of.size(); ++j) {
    const int64_t i = logit_of[j];
    generated[i].push_back(next[j]);
    const int64_t len = static_cast<int64_t>(prompts[i].size() + generated[i].size());
    if (next[j] == cfg.generation.eos_token_id || len >= limit[i]) done[i] = true;
  }
  tokens.clear();
  seq.clear();
  pos.clear();
  logit_rows.clear();
  logit_of.clear();
  return static_cast<int64_t>(next.size());
}

// One step of the prompts [b0, b0 + nb): for each unfinished one, its tokens from position from(i)
// on go through the model (in calls of at most max_rows rows), and its next token is chosen from the
// logits of its last one. Returns the tokens made.
int64_t Predictor::State::step(int64_t b0, int64_t nb, const std::function<int64_t(int64_t)>& from) {
  int64_t made = 0;
  for (int64_t i = b0; i < b0 + nb; ++i) {
    if (done[i]) continue;
    const std::vector<int32_t> all = full(i);
    const int64_t len = static_cast<int64_t>(all.size());
    for (int64_t p = from(i); p < len; ++p) {
      if (static_cast<int64_t>(tokens.size()) == go.max_rows) made += run_call();
      tokens.push_back(all[p]);
      seq.push_back(i - b0);
      pos.push_back(p);
      if (p == len - 1) {
        logit_rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
        logit_of.push_back(i);
      }
    }
  }
  return made + run_call();
}

// The summary line, and on rank 0 --ids_out and metrics.jsonl's predict line.
void Predictor::State::report(const PredictStats& st) const {
  const double pps = st.prompt_seconds > 0 ? st.prompt_tokens / st.prompt_seconds : 0.0;
  const double dps = st.decode_seconds > 0 ? st.decode_tokens / st.decode_seconds : 0.0;
  spdlog::info("predict: {} prompts, {} prompt tokens in {:.3f} s ({:.1f} tokens/s), {} decode tokens in {:.3f} s "
               "({:.1f} tokens/s)",
               st.prompts, st.prompt_tokens, st.prompt_seconds, pps, st.decode_tokens, st.decode_seconds, dps);
  if (one_row_calls > 0 && omp_get_max_threads() > 1)
    spdlog::info("predict: one-row model calls (a sequence's decode steps) measured for their team size: {} of {} "
                 "thread(s) at the end, {} switch(es) over {} calls, {} of them probes of the other size",
                 one_row_team.current(), omp_get_max_threads(), one_row_team.switches(), one_row_calls,
                 one_row_team.probe_calls());
  if (ctx->world_rank() != 0) return;
  if (!req.ids_out.empty()) {
    std::ofstream out(req.ids_out);
    if (!out) throw std::runtime_error("--ids_out " + req.ids_out + ": cannot be written");
    for (size_t i = 0; i < prompts.size(); ++i)
      out << nlohmann::json{{"prompt", prompts[i]}, {"generated", generated[i]}}.dump() << "\n";
  }
  MetricsLog metrics(std::filesystem::path(cfg.output_dir) / "metrics.jsonl");
  metrics.write(nlohmann::json{{"event", "predict"},
                               {"prompts", st.prompts},
                               {"batch", st.batch},
                               {"use_past", cfg.generation.use_past},
                               {"prompt_tokens", st.prompt_tokens},
                               {"prompt_seconds", st.prompt_seconds},
                               {"prompt_tokens_per_s", pps},
                               {"decode_tokens", st.decode_tokens},
                               {"decode_seconds", st.decode_seconds},
                               {"decode_tokens_per_s", dps}});
}

PredictStats Predictor::run() {
  State& s = *s_;
  const int64_t n = static_cast<int64_t>(s.prompts.size()), batch = s.batch;
  s.generated.assign(static_cast<size_t>(n), {});
  // std::vector<bool> has no addressable elements: the printer holds pointers to each flag.
  s.done.reset(new bool[static_cast<size_t>(n)]());
  Printer printer(s.ctx->world_rank() == 0, s.tok.get(), s.cfg.generation.eos_token_id);
  for (int64_t i = 0; i < n; ++i) printer.add(&s.prompts[i], &s.generated[i], &s.done[i]);
  PredictStats st;
  st.prompts = n;
  st.batch = batch;
  for (int64_t b0 = 0; b0 < n; b0 += batch) {
    const int64_t nb = std::min(batch, n - b0);
    auto t0 = Clock::now();
    for (int64_t i = b0; i < b0 + nb; ++i) st.prompt_tokens += static_cast<int64_t>(s.prompts[i].size());
    s.step(b0, nb, [](int64_t) { return int64_t{0}; });  // the prompts, and each one's first token
    st.prompt_seconds += seconds_since(t0);
    printer.flush();
    t0 = Clock::now();
    for (;;) {
      bool any = false;
      for (int64_t i = b0; i < b0 + nb; ++i) any = any || !s.done[i];
      if (!any) break;
      // With the cache only the newest token goes in; without it the whole sequence again.
      st.decode_tokens += s.cfg.generation.use_past ? s.step(b0, nb, [&](int64_t i) {
        return static_cast<int64_t>(s.prompts[i].size() + s.generated[i].size()) - 1;
      })
                                                    : s.step(b0, nb, [](int64_t) { return int64_t{0}; });
      printer.flush();
    }
    st.decode_seconds += seconds_since(t0);
  }
  printer.flush();
  s.report(st);
  return st;
}

}  // namespace gf
