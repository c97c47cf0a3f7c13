// gridformer: one binary, subcommands train | predict | config | plan | tokenize | convert.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <cmath>
#include <functional>
#include <cstdlib>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <iostream>
#include <unistd.h>
#include <thread>

#include "runner/cli/probe_network.h"
#include "runner/cli/env_defaults.h"
#include "runner/cli/rank_start.h"
#include "runner/cli/omp_threads.h"
#include "runner/cli/tokenize_cli.h"
#include "runner/cli/serve_cli.h"
#include "core/io/checkpoint.h"
#include "core/math/gemm.h"
#include "parallel/communicator.h"
#include "parallel/watchdog.h"
#include "models/weights/hf_config.h"
#include "runner/config/arch_section.h"
#include "runner/config/config.h"
#include "runner/cli/config_cli.h"
#include "runner/cli/convert.h"
#include "runner/cli/replay.h"
#include "runner/infer/generate.h"
#include "runner/infer/harness_run.h"
#include "runner/cli/megatron_cli.h"
#include "runner/report/run_info.h"
#include "runner/train/output_paths.h"
#include "runner/report/logging.h"
#include "runner/report/machine_probe.h"
#include "runner/report/metrics_log.h"
#include "runner/launch/rank_agreement.h"
#include "runner/launch/rank_table.h"
#include "runner/train/stop_signals.h"
#include "runner/train/trainer.h"

namespace {

using gf::cli::check_before_work;
using gf::cli::describe;
using gf::cli::kSetupError;
using gf::cli::run_replay;
using gf::cli::start_rank;

struct LambadaRequest {
  std::string path;  // --lambada_data ("": none)
  bool strict = false;
};

int run_train(const std::string& config_path, const std::vector<std::string>& sets, const std::string& rank_table,
              const std::string& save_weights, const LambadaRequest& lambada, int argc, char** argv) {
  gf::MpiEnvironment mpi(&argc, &argv);
  gf::Config cfg;
  int threads = 1;
  const std::unique_ptr<gf::ParallelContext> started = start_rank(config_path, sets, rank_table, false, cfg, threads);
  if (!started) return kSetupError;
  gf::ParallelContext& ctx = *started;
  const int rank = ctx.world_rank(), world_size = ctx.world().size();
  spdlog::info("rank {} of {}, pid {}, {} thread(s), {}; OpenBLAS kernels {}", ctx.world_rank(), ctx.world().size(),
               getpid(), threads, gf::omp_wait_text(), gf::openblas_kernels_text());
  // Building the trainer (model, weights, data) runs no collective, so a rank that fails here can still agree
  // with the others: one message, status 2 on every rank.
  std::unique_ptr<gf::Trainer> trainer;
  std::vector<gf::ClozeItem> lambada_items;
  std::string problem;
  try {
    if (!lambada.path.empty()) {
      if (cfg.parallel.pipeline_stage > 1)
        throw std::runtime_error("--lambada_data: LAMBADA runs the whole model on each rank; pipeline_stage " +
                                 std::to_string(cfg.parallel.pipeline_stage) + " is not supported there (use 1)");
      lambada_items = gf::read_lambada_for(cfg, lambada.path, lambada.strict);
    }
    trainer = std::make_unique<gf::Trainer>(cfg, ctx, gf::apply_machine_probe(threads));  // fp32 GEMM backend, MFU peak
  } catch (const std::exception& e) {
    problem = describe(e);
  }
  if (problem = gf::first_problem(ctx.world(), problem); !problem.empty()) {
    if (rank == 0) spdlog::error("{}", problem);
    return kSetupError;
  }
  gf::install_stop_handlers();
  int status = 0;
  try {
    nlohmann::json eval_line;
    if (cfg.run_mode == gf::RunMode::kEval) {
      const double loss = trainer->evaluate();
      spdlog::info("eval: loss {:.6f}, perplexity {:.3f} over {} batches of the validation data", loss, std::exp(loss),
                   trainer->eval_batches());
      eval_line = {{"event", "eval"}, {"eval_loss", loss}, {"ppl", std::exp(loss)}};
    } else {
      status = trainer->run();
      if (status == 0 && !save_weights.empty()) trainer->save_weights(save_weights);
    }
    // LAMBADA after the evaluation, or after training's last step.
    if (status == 0 && !lambada_items.empty()) {
      const gf::ClozeResult r = gf::evaluate_lambada(trainer->model(), ctx, cfg, lambada_items, lambada.path);
      if (eval_line.is_null()) eval_line = {{"event", "eval"}, {"step", trainer->total_steps()}};
      eval_line["lambada_accuracy"] = r.accuracy();
      eval_line["lambada_correct"] = r.correct;
      eval_line["lambada_items"] = r.items;
      eval_line["lambada_strict"] = lambada.strict;
    }
    if (rank == 0 && !eval_line.is_null()) gf::MetricsLog(std::filesystem::path(cfg.output_dir) / "metrics.jsonl").write(eval_line);
  } catch (const std::exception& e) {
    // Past set-up the other ranks may be inside a collective: this rank says what failed and stops them all.
    spdlog::error("{}{}", world_size == 1 ? "" : fmt::format("on rank {}: ", rank), describe(e));
    spdlog::default_logger()->flush();
    if (world_size == 1) return 1;
    gf::MpiEnvironment::abort(1);
  }
  return status;
}


// Set-up as for training without the trainer (MPI, the config, this rank's context, the machine probe's GEMM
// backend), then `body`; an exception out of it is logged with the rank and ends the run with `failed` (under
// MPI, every rank).
int on_ranks(const std::string& config_path, const std::vector<std::string>& sets, const std::string& rank_table,
             int argc, char** argv, int failed, const std::function<int(gf::Config&, gf::ParallelContext&)>& body) {
  gf::MpiEnvironment mpi(&argc, &argv);
  gf::Config cfg;
  int threads = 1;
  const std::unique_ptr<gf::ParallelContext> started = start_rank(config_path, sets, rank_table, true, cfg, threads);
  if (!started) return kSetupError;
  gf::ParallelContext& ctx = *started;
  gf::apply_machine_probe(threads);  // the fp32 GEMM backend
  if (ctx.world_rank() == 0)
    spdlog::info("{} thread(s) per rank, {}; OpenBLAS kernels {}", threads, gf::omp_wait_text(), gf::openblas_kernels_text());
  try {
    return body(cfg, ctx);
  } catch (const std::exception& e) {
    spdlog::error("{}{}", ctx.world().size() == 1 ? "" : fmt::format("on rank {}: ", ctx.world_rank()), describe(e));
    spdlog::default_logger()->flush();
    if (ctx.world().size() == 1) return failed;
    gf::MpiEnvironment::abort(failed);
  }
  return failed;
}

int predict_on(gf::Config& cfg, gf::ParallelContext& ctx, const gf::PredictRequest& req);

// `gridformer predict`: set-up as for training, then generation (runner/infer/generate.h).
int run_predict(const std::string& config_path, const std::vector<std::string>& sets, const std::string& rank_table,
                const gf::PredictRequest& req, int argc, char** argv) {
  return on_ranks(config_path, sets, rank_table, argc, argv, 1, [&](gf::Config& cfg, gf::ParallelContext& ctx) {
    return predict_on(cfg, ctx, req);
  });
}

// predict's body: everything that can be refused is checked on every rank before any collective, then generation.
int predict_on(gf::Config& cfg, gf::ParallelContext& ctx, const gf::PredictRequest& req) {
  const int rank = ctx.world_rank();
  std::unique_ptr<gf::Predictor> predictor;
  std::string problem;
  try {
    predictor = std::make_unique<gf::Predictor>(cfg, ctx, req);  // no collective: the ranks agree below
  } catch (const std::exception& e) {
    problem = describe(e);
  }
  if (problem = gf::first_problem(ctx.world(), problem); !problem.empty()) {
    if (rank == 0) spdlog::error("{}", problem);
    return kSetupError;
  }
  predictor->run();
  return 0;
}

// A --set value as a double-quoted YAML string (any path stays a string).
std::string yaml_quoted(const std::string& s) {
  std::string q = "\"";
  for (const char ch : s) q += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
  return q + "\"";
}

// Every subcommand's options, as CLI11 fills them.
struct Cli {
  std::string config_path, rank_table;
  std::vector<std::string> sets;
  // train
  std::string save_weights, tensorboard_dir;
  LambadaRequest lambada;
  // predict: the decoding options are overrides of model_config's keys (predict_overrides)
  gf::PredictRequest preq;
  std::string load_ckpt, use_past;
  int64_t max_decode_length = 0, top_k = -1, seed = -1;
  double top_p = 0.0, repetition_penalty = 0.0;
  bool do_sample = false;
  // config, plan
  int ranks = 0;
  gf::cli::ConfigPlanRequest plan;  // plan's own options (config_path, sets and ranks are copied in when it runs)
  // tokenize
  gf::data::TokenizerFiles tok_files;
  bool decode = false;
  // convert
  gf::ConvertOptions conv;
  // replay
  gf::ReplayRequest replay;
  // eval
  gf::HarnessOptions harness;
  // serve
  gf::ServeCli serve;
  // probe
  gf::cli::NetworkProbeRequest probe;
  // config --from-hf; config --from-megatron
  std::string from_hf;
  bool from_megatron = false;
};

CLI::App* add_train(CLI::App& app, Cli& c) {
  auto* train = app.add_subcommand("train", "train the model the config describes (run under mpirun for several ranks)");
  train->add_option("--config", c.config_path, "YAML config (MindFormers layout)")->required()->check(CLI::ExistingFile);
  train->add_option("--set", c.sets, "override a key: --set runner_config.train_steps=5 (repeatable)");
  train->add_option("--save-weights", c.save_weights,
                    "after training, write the full weights (gathered from every rank) to this .safetensors file "
                    "(the model's Hugging Face names; load_checkpoint reads it; a LoRA run: its adapters alone)");
  train->add_option("--tensorboard-dir", c.tensorboard_dir,
                    "write TensorBoard event files (the scalars of metrics.jsonl: loss, lr, grad norm, throughput, "
                    "eval loss, ...) to this directory; as the config's tensorboard_dir (Megatron's name), which it "
                    "replaces; view with `tensorboard --logdir DIR`");
  train->add_option("--lambada_data", c.lambada.path,
                    "also report LAMBADA cloze accuracy on this JSON-lines file of {\"text\": ...} (Megatron's "
                    "zero-shot LAMBADA; docs/evaluation.md): in run_mode eval after loss and perplexity, in training "
                    "after the last step")->check(CLI::ExistingFile);
  train->add_flag("--strict_lambada", c.lambada.strict,
                  "whole-word matching (Megatron's --strict-lambada): the last word's every token, not the last token");
  train->add_option("--rank_table", c.rank_table,
                    "MindFormers/HCCL rank table JSON; its rank count must equal the number of ranks (default: "
                    "$RANK_TABLE_FILE; neither: no table)");
  train->add_option("--load_checkpoint", c.load_ckpt,
                    "the weights to start from (the config's load_checkpoint, as MindFormers' run_mindformer.py "
                    "--load_checkpoint): one of our checkpoints (its directory, a run's checkpoint/ or output_dir), Hugging "
                    "Face safetensors or a MindSpore .ckpt; with --set resume_training=True the whole run continues");
  return train;
}

CLI::App* add_eval(CLI::App& app, Cli& c) {
  auto* ev = app.add_subcommand("eval", "score lm-evaluation-harness's tasks (hellaswag, arc_easy, arc_challenge, piqa, "
                                        "winogrande, lambada_openai, wikitext) zero-shot, as the harness does, from local "
                                        "JSONL files; results as its JSON and table (docs/evaluation.md)");
  ev->add_option("--config", c.config_path, "YAML config (MindFormers layout)")->required()->check(CLI::ExistingFile);
  ev->add_option("--set", c.sets, "override a key (repeatable)");
  ev->add_option("--load_checkpoint", c.load_ckpt, "the weights (as predict's; a LoRA run's checkpoint: its base, then "
                                                   "the adapters)");
  ev->add_option("--tasks", c.harness.tasks, "comma-separated task names")->required();
  ev->add_option("--data", c.harness.data, "a directory of <task>.jsonl files in the Hugging Face datasets' fields")
      ->required()->check(CLI::ExistingDirectory);
  ev->add_option("--output", c.harness.output, "write the harness's results JSON here (samples_<task>.jsonl beside it)");
  ev->add_option("--batch_size", c.harness.batch, "requests scored side by side in one model call (default 8)")
      ->check(CLI::PositiveNumber);
  ev->add_option("--rank_table", c.rank_table, "MindFormers/HCCL rank table JSON (as train's)");
  return ev;
}

// `gridformer eval`: set-up as for predict, then the harness's tasks (runner/infer/harness_run.h).
int run_eval(const std::string& config_path, const std::vector<std::string>& sets, const std::string& rank_table,
             const gf::HarnessOptions& opt, int argc, char** argv) {
  return on_ranks(config_path, sets, rank_table, argc, argv, kSetupError,
                  [&](gf::Config& cfg, gf::ParallelContext& ctx) { return gf::run_harness(cfg, ctx, opt); });
}

CLI::App* add_predict(CLI::App& app, Cli& c) {
  auto* pred = app.add_subcommand(
      "predict", "generate text from prompts (run_mode: predict): the text on stdout, the log on stderr; under mpirun "
                 "with model_parallel the heads and vocabulary are split");
  pred->add_option("--config", c.config_path, "YAML config (MindFormers layout)")->required()->check(CLI::ExistingFile);
  pred->add_option("--set", c.sets, "override a key (repeatable)");
  pred->add_option("--load_checkpoint", c.load_ckpt,
                   "the weights: one of our checkpoints (or a run's checkpoint/ or output_dir), Hugging Face "
                   "safetensors, a MindSpore .ckpt or a --save-weights file (default: the config's load_checkpoint; "
                   "none: the seed's random weights)");
  pred->add_option("--predict_data", c.preq.texts, "a prompt (repeatable)");
  pred->add_option("--predict_file", c.preq.file, "a file of prompts, one a line")->check(CLI::ExistingFile);
  pred->add_option("--predict_ids", c.preq.ids, "a prompt as token ids, space-separated (repeatable)");
  pred->add_option("--max_decode_length", c.max_decode_length,
                   "prompt + generated tokens per prompt (model_config.max_decode_length)")->check(CLI::PositiveNumber);
  pred->add_option("--max_new_tokens", c.preq.max_new_tokens, "generated tokens per prompt (instead of max_decode_length)")
      ->check(CLI::PositiveNumber);
  pred->add_option("--predict_batch_size", c.preq.batch, "prompts decoded together (default: all)")
      ->check(CLI::PositiveNumber);
  pred->add_flag("--do_sample", c.do_sample, "sample (model_config.do_sample: True) instead of greedy decoding");
  pred->add_option("--top_k", c.top_k, "sample among the k most likely tokens (0: all; model_config.top_k)")
      ->check(CLI::NonNegativeNumber);
  pred->add_option("--top_p", c.top_p, "sample among the most likely tokens whose probability reaches p (model_config.top_p)")
      ->check(CLI::Range(1e-9, 1.0));
  pred->add_option("--temperature", c.preq.temperature, "divide the logits by this before sampling (default 1.0)")
      ->check(CLI::PositiveNumber);
  pred->add_option("--repetition_penalty", c.repetition_penalty,
                   "CTRL's penalty on tokens already in the sequence (1.0: none; model_config.repetition_penalty)")
      ->check(CLI::PositiveNumber);
  pred->add_option("--seed", c.seed, "the sampling seed (the config's seed)")->check(CLI::NonNegativeNumber);
  pred->add_option("--use_past", c.use_past, "true: the KV cache; false: recompute the prefix for every token "
                                             "(model_config.use_past)")->check(CLI::IsMember({"true", "false", "True", "False"}));
  pred->add_option("--ids_out", c.preq.ids_out, "also write each prompt's and continuation's token ids as JSON lines");
  pred->add_option("--vocab_file", c.preq.vocab_file, "GPT-2 vocabulary JSON (default: processor.tokenizer.vocab_file)")
      ->check(CLI::ExistingFile);
  pred->add_option("--merge_file", c.preq.merge_file, "GPT-2 merges (default: processor.tokenizer.merge_file)")
      ->check(CLI::ExistingFile);
  pred->add_option("--rank_table", c.rank_table, "MindFormers/HCCL rank table JSON (as for train)");
  return pred;
}

CLI::App* add_config(CLI::App& app, Cli& c) {
  auto* config = app.add_subcommand("config", "print the resolved config (defaults filled in) as YAML, or the problems in it");
  config->add_option("--config", c.config_path, "YAML config (required unless --from-hf)")->check(CLI::ExistingFile);
  config->add_option("--from-hf", c.from_hf,
                     "print instead the model section (model:, and moe_config: for Mixtral) that describes the model of "
                     "a Hugging Face directory's config.json (or that file), to paste into a config; seq_length is the "
                     "position table's length capped at 4096")
      ->check(CLI::ExistingPath);
  config->add_option("--set", c.sets, "override a key (repeatable)");
  config->add_option("--ranks", c.ranks,
                     "the launchers' pre-flight: also check the parallel layout against N ranks, and the data as train "
                     "opens it (without --ranks a data problem is a warning), as the ranks do at start "
                     "(run_distribute.sh passes RANK_SIZE); a problem: its message, status 2")
      ->check(CLI::Range(1, 1 << 24));
  config->add_flag("--from-megatron", c.from_megatron,
                   "print the config that means the Megatron-LM / MindSpeed job whose pretrain_gpt.py arguments follow "
                   "(all the words after this flag; --ranks N for its world size, else the launcher's); what "
                   "`gridformer pretrain_gpt` with the same arguments trains");
  config->allow_extras();
  return config;
}

CLI::App* add_pretrain_gpt(CLI::App& app) {
  auto* m = app.add_subcommand(
      "pretrain_gpt", "a Megatron-LM / MindSpeed job as written: the arguments of pretrain_gpt.py (torchrun ... "
                      "pretrain_gpt.py ARGS becomes mpirun -np N gridformer pretrain_gpt ARGS), with Megatron's meaning and "
                      "defaults, translated to the config `gridformer config --from-megatron ARGS` prints, then trained; "
                      "log lines as Megatron's (docs/megatron.md)");
  m->prefix_command();
  return m;
}

CLI::App* add_plan(CLI::App& app, Cli& c) {
  auto* plan = app.add_subcommand("plan", "what each rank will hold (parameters, gradients, optimizer state, weight copy, "
                                          "activations), computed from the config without building anything");
  plan->add_option("--config", c.config_path, "YAML config")->required()->check(CLI::ExistingFile);
  plan->add_option("--set", c.sets, "override a key (repeatable)");
  plan->add_option("--ranks", c.ranks, "the number of ranks (default: data_parallel x model_parallel x pipeline_stage)")
      ->check(CLI::Range(1, 1 << 24));
  plan->add_option("--memory-per-rank", c.plan.memory_per_rank,
                   "the memory a rank has (64GB, 512GiB): says whether the largest rank fits; status 2 when it does not");
  plan->add_flag("--search", c.plan.search, "every layout of the model for --ranks ranks (on --hosts hosts) (dp x mp x pp x cp, "
                 "SP, the cp algorithm, ep, ZeRO 0-3, the pipeline schedule and micro-batches, the micro batch; full "
                 "recompute where the layout does not fit otherwise), the global batch kept: the fastest by modelled step "
                 "time among those that fit --memory-per-rank, each as config keys to paste");
  plan->add_option("--top", c.plan.top, "with --search: how many layouts to print")->check(CLI::Range(1, 1000))->capture_default_str();
  plan->add_option("--hosts", c.plan.hosts, "the hosts the ranks run on, ranks / hosts consecutive ranks each: a group "
                   "that spans two of them sends at --network-gbs")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  auto* gbs = plan->add_option("--network-gbs", c.plan.network_gbs, "with --hosts: the bandwidth between two hosts, GB/s")
      ->check(CLI::PositiveNumber);
  auto* lat = plan->add_option("--network-latency-us", c.plan.network_latency_us, "with --network-gbs: a message's latency "
                               "between two hosts, microseconds (default 0: none)")->check(CLI::NonNegativeNumber)->needs(gbs);
  plan->add_option("--network-probe", c.plan.network_probe, "with --hosts: the bandwidth and latency between two hosts as "
                   "`gridformer probe --network` measured them (its JSON file)")->check(CLI::ExistingFile)->excludes(gbs)
      ->excludes(lat);
  plan->add_flag("--json", c.plan.json, "the plan's figures as one JSON object on stdout (bytes per rank and kind, FLOPs, "
                                        "the verdict) instead of the text");
  return plan;
}

CLI::App* add_replay(CLI::App& app, Cli& c) { return gf::add_replay_command(app, c.replay); }

CLI::App* add_tokenize(CLI::App& app, Cli& c) { return gf::data::add_tokenize_command(app, c.tok_files, c.decode); }

CLI::App* add_convert(CLI::App& app, Cli& c) { return gf::add_convert_command(app, c.conv); }


// `gridformer pretrain_gpt ARGS...`: the translated config, trained as `train` trains any config.
int run_pretrain_gpt(const std::vector<std::string>& args, int argc, char** argv) {
  const int world = gf::launcher_world_size(), rank = gf::launcher_rank();
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  const std::string path = ((ec ? std::filesystem::path(".") : tmp) /
                            ("gridformer_megatron." + std::to_string(::getpid()) + ".yaml")).string();
  std::vector<std::string> options;
  if (const std::string problems = gf::translate_megatron_job(args, world, rank == 0, path, options); !problems.empty()) {
    if (rank == 0) std::cerr << "error: the Megatron arguments cannot run here:\n" << problems << "\n";
    return kSetupError;
  }
  LambadaRequest lambada;
  for (size_t i = 0; i < options.size(); ++i) {
    if (options[i] == "--lambada_data" && i + 1 < options.size()) lambada.path = options[++i];
    if (options[i] == "--strict_lambada") lambada.strict = true;
  }
  const int status = run_train(path, {}, "", "", lambada, argc, argv);
  std::filesystem::remove(path, ec);
  return status;
}

// predict's decoding options as overrides of model_config's keys, so the config checks them.
std::vector<std::string> predict_overrides(const Cli& c) {
  std::vector<std::string> sets = c.sets;
  const std::string k = "model.model_config.";
  if (!c.load_ckpt.empty()) sets.push_back("load_checkpoint=" + yaml_quoted(c.load_ckpt));
  if (c.max_decode_length > 0) sets.push_back(k + "max_decode_length=" + std::to_string(c.max_decode_length));
  if (c.do_sample) sets.push_back(k + "do_sample=True");
  if (c.top_k >= 0) sets.push_back(k + "top_k=" + std::to_string(c.top_k));
  if (c.top_p > 0) sets.push_back(k + "top_p=" + fmt::format("{}", c.top_p));
  if (c.repetition_penalty > 0) sets.push_back(k + "repetition_penalty=" + fmt::format("{}", c.repetition_penalty));
  if (c.seed >= 0) sets.push_back("seed=" + std::to_string(c.seed));
  if (!c.use_past.empty())
    sets.push_back(k + "use_past=" + std::string(c.use_past == "true" || c.use_past == "True" ? "True" : "False"));
  return sets;
}

}  // namespace

int main(int argc, char** argv) {
  gf::default_environment(argv);  // may re-execute the binary: first of all
  gf::route_stop_signals();    // before any thread: SIGINT/SIGTERM never land on one that computes
  CLI::App app{"gridformer: trains GPT-2, Llama and their Mixture-of-Experts forms (GPT-2 MoE, Mixtral) from MindFormers-style YAML, on one rank or several under mpirun (data, tensor, sequence, context, pipeline and expert parallel, ZeRO-1/2/3 and hybrid sharding, gradient accumulation)"};
  app.require_subcommand(1);
  app.footer(gf::environment_help());
  app.set_version_flag("--version", std::string("gridformer ") + gf::build_git_commit());
  Cli c;
  add_train(app, c);
  CLI::App* pred = add_predict(app, c);
  CLI::App* config = add_config(app, c);
  CLI::App* plan = add_plan(app, c);
  CLI::App* tok = add_tokenize(app, c);
  CLI::App* convert = add_convert(app, c);
  CLI::App* replay = add_replay(app, c);
  CLI::App* ev = add_eval(app, c);
  CLI::App* serve = gf::add_serve(app, c.serve);
  CLI::App* probe = gf::cli::add_probe_command(app, c.probe);
  CLI::App* megatron = add_pretrain_gpt(app);
  // The environment paragraph is the top-level help's; each subcommand's help ends with an example instead.
  const std::pair<CLI::App*, const char*> examples[] = {
      {app.get_subcommand("train"), "example: gridformer train --config configs/gpt2/run_gpt2_tiny.yaml --set runner_config.train_steps=5"},
      {pred, "example: gridformer predict --config configs/gpt2/run_gpt2_tiny.yaml --load_checkpoint output --predict_data \"The\""},
      {config, "example: gridformer config --config configs/reference/run_gpt2_13b.yaml --ranks 32"},
      {plan, "example: gridformer plan --config configs/reference/run_gpt2_13b.yaml --ranks 32"},
      {tok, "example: echo Hello | gridformer tokenize --vocab-file data/gpt2/gpt2-vocab.json --merge-file data/gpt2/gpt2-merges.txt"},
      {convert, "example: gridformer convert --from output --to hf_model --dtype bfloat16"},
      {replay, "example: mpirun -np 2 gridformer replay --checkpoint output --steps 21-25"},
      {ev, "example: gridformer eval --config configs/gpt2/run_gpt2_tiny.yaml --load_checkpoint output --tasks "
           "hellaswag,arc_easy --data tests/data/harness --output eval/results.json"},
      {serve, "example: gridformer serve --config configs/gpt2/run_gpt2_tiny.yaml --load_checkpoint output --port 8000"},
      {probe, "example: mpirun -np 2 --host node1,node2 gridformer probe --network --out network_probe.json"},
      {megatron, "example: mpirun -np 2 gridformer pretrain_gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 ... "
                 "(docs/megatron.md)"}};
  for (const auto& [sub, example] : examples) sub->footer(std::string(example) + "\n(gridformer --help: the environment variables)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "error: " << e.what() << " (gridformer --help, gridformer SUBCOMMAND --help)\n";
    return kSetupError;
  }
  if (*megatron) return run_pretrain_gpt(megatron->remaining(), argc, argv);
  if (*config && c.from_megatron) return gf::run_config_from_megatron(config->remaining(), c.ranks);
  if (*config && !config->remaining().empty()) {
    std::cerr << "error: config: unexpected argument(s) " << config->remaining().front()
              << " (Megatron-LM arguments go after --from-megatron)\n";
    return kSetupError;
  }
  if (*config && !c.from_hf.empty()) return gf::cli::run_config_from_hf(c.from_hf);
  if ((*config || *plan) && c.config_path.empty()) {
    std::cerr << "error: --config is required" << (*config ? " (or --from-hf DIR)" : "") << "\n";
    return kSetupError;
  }
  if (*config || *plan) {
    c.plan.config_path = c.config_path;
    c.plan.sets = c.sets;
    c.plan.ranks = c.ranks;
    return gf::cli::run_config_or_plan(c.plan, plan->parsed());
  }
  if (*probe) return gf::cli::run_probe(c.probe, argc, argv);
  if (*pred) return run_predict(c.config_path, predict_overrides(c), c.rank_table, c.preq, argc, argv);
  if (*tok) return gf::data::run_tokenize(c.tok_files, c.decode, std::cin, std::cout);
  if (*convert) {
    c.conv.dtype_given = convert->count("--dtype") > 0;
    return gf::run_convert(c.conv);
  }
  if (*replay) return run_replay(c.replay, argc, argv);
  if (*ev) {
    std::vector<std::string> sets = c.sets;
    if (!c.load_ckpt.empty()) sets.push_back("load_checkpoint=" + yaml_quoted(c.load_ckpt));
    return run_eval(c.config_path, sets, c.rank_table, c.harness, argc, argv);
  }
  if (*serve) {
    std::vector<std::string> sets = c.serve.sets;
    if (!c.serve.load_ckpt.empty()) sets.push_back("load_checkpoint=" + yaml_quoted(c.serve.load_ckpt));
    return on_ranks(c.serve.config_path, sets, "", argc, argv, kSetupError,
                    [&](gf::Config& cfg, gf::ParallelContext& ctx) { return gf::run_serve(cfg, ctx, c.serve.opt); });
  }
  // --tensorboard-dir is an override of tensorboard_dir, so the resolved config (and its hash) records it;
  // double-quoted YAML keeps any path a string.
  if (!c.tensorboard_dir.empty()) c.sets.push_back("tensorboard_dir=" + yaml_quoted(c.tensorboard_dir));
  if (!c.load_ckpt.empty()) c.sets.push_back("load_checkpoint=" + yaml_quoted(c.load_ckpt));
  return run_train(c.config_path, c.sets, c.rank_table, c.save_weights, c.lambada, argc, argv);
}
