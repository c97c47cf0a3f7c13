// gridformer: one binary, subcommands train | predict | config | plan | tokenize | convert.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <cmath>
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

#include "runner/cli/env_defaults.h"
#include "runner/cli/omp_threads.h"
#include "runner/cli/tokenize_cli.h"
#include "core/io/checkpoint.h"
#include "core/math/gemm.h"
#include "parallel/communicator.h"
#include "parallel/watchdog.h"
#include "models/weights/hf_config.h"
#include "runner/config/arch_section.h"
#include "runner/config/config.h"
#include "runner/cli/convert.h"
#include "runner/cli/replay.h"
#include "runner/infer/generate.h"
#include "runner/config/layout_check.h"
#include "runner/cli/megatron_cli.h"
#include "runner/report/run_info.h"
#include "runner/train/batch_source.h"
#include "runner/train/output_paths.h"
#include "runner/report/plan.h"
#include "runner/report/logging.h"
#include "runner/report/machine_probe.h"
#include "runner/report/metrics_log.h"
#include "runner/launch/rank_agreement.h"
#include "runner/launch/rank_table.h"
#include "runner/train/stop_signals.h"
#include "runner/train/trainer.h"

namespace {

// Exit statuses (README "Exit status"): 0 done; 1 a failure during training; 2 a problem found
// before training (usage, config, layout, rank table, output_dir, data, weights); 3 a NaN/Inf loss;
// 6 a hang (parallel.hang_timeout, gf::hang::kExitStatus); 130/143 stopped by SIGINT/SIGTERM.
constexpr int kSetupError = 2;

// What an exception says, as one line for the user: out-of-memory and filesystem errors get what to do.
std::string describe(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return "out of memory: the model, batch or data does not fit in this host's memory; lower "
           "runner_config.batch_size or the model size, raise parallel_config.model_parallel, or run fewer ranks per host";
  if (const auto* f = dynamic_cast<const std::filesystem::filesystem_error*>(&e))
    return fmt::format("{}: {}", f->path1().string(), f->code().message());
  return e.what();
}

// The rank table (--rank_table, else $RANK_TABLE_FILE as in MindFormers; neither: no table). Every rank loads and
// validates it and the ranks agree on the outcome (hosts may see different files). Returns "" when there is no
// table or it fits, else the problem (the same text on every rank).
std::string check_rank_table(std::string path, const gf::Communicator& world) {
  if (path.empty())
    if (const char* e = std::getenv("RANK_TABLE_FILE"); e && *e) path = e;
  if (path.empty()) return "";
  std::string problem;
  gf::RankTable table;
  try {
    table = gf::load_rank_table(path);
    if (table.rank_count() != world.size())
      problem = fmt::format("rank table {} has {} rank(s) but {} rank(s) are running; start {} ranks (mpirun -np {}, or "
                            "RANK_SIZE {} for run_distribute.sh), or use a table for {} (rank_table --device_num \"[0,{})\")",
                            path, table.rank_count(), world.size(), table.rank_count(), table.rank_count(),
                            table.rank_count(), world.size(), world.size());
  } catch (const std::exception& e) {
    problem = e.what();
  }
  problem = gf::first_problem(world, problem);
  if (problem.empty()) {
    const gf::RankLocation here = table.locate(world.rank());
    spdlog::info("rank table {}: {} ranks on {} server(s); this rank: server {} device {}", path, table.rank_count(),
                 table.servers.size(), here.server_id, here.device.device_id);
  }
  return problem;
}

// Everything a run needs is checked on every rank before any work: the config, the output directory, the rank
// table, the layout. Returns "" or the one problem every rank agrees on (rank 0 prints it).
std::string check_before_work(const std::string& config_path, const std::vector<std::string>& sets,
                              const std::string& rank_table, const gf::Communicator& world, gf::Config& cfg,
                              bool predicting = false) {
  const int rank = world.rank();
  std::string problem;
  try {
    cfg = gf::load_config(config_path, sets);
    if (cfg.run_mode == gf::RunMode::kPredict && !predicting)
      problem = "run_mode: predict generates text from prompts: run `gridformer predict --config " + config_path +
                " --predict_data \"TEXT\"` (or --predict_file FILE), as MindFormers' run_mindformer.py --predict_data";
  } catch (const std::exception& e) {
    problem = describe(e);
  }
  if (problem = gf::first_problem(world, problem); !problem.empty()) return problem;
  try {
    gf::setup_logging(cfg.output_dir, rank, rank == 0);
  } catch (const std::exception& e) {
    problem = fmt::format("output_dir `{}`: cannot create the log directory ({}); set output_dir to a directory this "
                          "user can write (--set output_dir=...)", cfg.output_dir, describe(e));
  }
  if (problem = gf::first_problem(world, problem); !problem.empty()) return problem;
  if (!predicting) problem = gf::unwritable_output(cfg, rank);
  if (problem = gf::first_problem(world, problem); !problem.empty()) return problem;
  for (const auto& w : cfg.warnings) if (rank == 0) spdlog::warn("{}", w);
  for (const auto& w : gf::layout_warnings(cfg, world.size())) if (rank == 0) spdlog::warn("{}", w);
  if (problem = check_rank_table(rank_table, world); !problem.empty()) return problem;
  return gf::layout_error_message(cfg, world.size());  // the same arithmetic on every rank
}

struct LambadaRequest {
  std::string path;  // --lambada_data ("": none)
  bool strict = false;
};

// A rank's start, for train and predict (inside an MpiEnvironment): console logging, the threads, the
// config and layout checked on every rank (check_before_work), the ParallelContext of the layout.
// Empty after a problem, which rank 0 has printed.
std::unique_ptr<gf::ParallelContext> start_rank(const std::string& config_path, const std::vector<std::string>& sets,
                                                const std::string& rank_table, bool predicting, gf::Config& cfg,
                                                int& threads) {
  gf::Communicator world = gf::Communicator::world();
  const int rank = world.rank();
  gf::setup_console_logging(rank);
  threads = gf::threads_per_rank();
  omp_set_num_threads(threads);
  gf::gemm_set_threads(threads);
  if (const std::string problem = check_before_work(config_path, sets, rank_table, world, cfg, predicting);
      !problem.empty()) {
    if (rank == 0) spdlog::error("{}", problem);
    return nullptr;
  }
  const auto& p = cfg.parallel;
  world.set_mpi_collectives(p.mpi_collectives);  // every group split from the world inherits it
  // parallel.hang_timeout: from here on a wait without progress ends the job with a report (status 6). The report's
  // lines go to the rank's log, and to the console from every rank (only rank 0's log has a console).
  gf::hang::set_report_sink([rank](const std::string& line) {
    spdlog::error("{}", line);
    spdlog::default_logger()->flush();
    if (rank != 0) std::fprintf(stderr, "[rank %d] %s\n", rank, line.c_str());
  });
  gf::hang::install(p.hang_timeout);
  return std::make_unique<gf::ParallelContext>(gf::ParallelContext::build(
      std::move(world), gf::ProcessGrid({{gf::GridAxis::kTp, static_cast<int>(p.model_parallel)},
                                         {gf::GridAxis::kCp, static_cast<int>(p.context_parallel)},
                                         {gf::GridAxis::kDp, static_cast<int>(p.data_parallel)},
                                         {gf::GridAxis::kPp, static_cast<int>(p.pipeline_stage)},
                                         {gf::GridAxis::kEp, static_cast<int>(p.expert_parallel)}}),
      p.context_parallel_algo == "hybrid_cp" ? static_cast<int>(p.ulysses_degree_in_cp) : 1));
}

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

// `gridformer replay` (runner/cli/replay.h): the checkpoint's config and state, the steps re-run one by one with
// the model's finite checks on, each compared with the run's metrics (on every rank alike: the per-rank losses
// are all-reduced), then the verdict. Status 0: every step has the run's bits; 7: a step's bits differ; 2: set-up.
struct ReplayPass {
  std::vector<gf::StepCompare> steps;
  std::string first_nonfinite;  // "rank R: what", of the first step that was not finite
  int64_t nonfinite_step = 0;
  bool low_precision = false;  // the pass computed in bf16/fp16
};

// One pass: a trainer resumed from the checkpoint (fp32: computing in fp32), its steps up to the last asked for
// or the first that is not finite. Returns false after a set-up problem (printed by rank 0).
bool replay_pass(const gf::ReplayPlan& p, const std::map<int64_t, gf::RunStep>& run, bool fp32, ReplayPass& out) {
  std::vector<std::string> sets = p.sets;
  if (fp32) sets.push_back("model.model_config.compute_dtype=float32");
  gf::Config cfg;
  int threads = 1;
  const std::unique_ptr<gf::ParallelContext> ctx = start_rank(p.config_path, sets, "", false, cfg, threads);
  if (!ctx) return false;
  out.low_precision = cfg.compute_dtype != gf::ComputeDtype::kFloat32;
  cfg.checkpoint.enabled = false;  // the replay writes nothing into the run's checkpoints
  cfg.do_eval = false;
  std::unique_ptr<gf::Trainer> trainer;
  std::string problem;
  try {
    trainer = std::make_unique<gf::Trainer>(cfg, *ctx, gf::apply_machine_probe(threads));
  } catch (const std::exception& e) {
    problem = describe(e);
  }
  const int rank = ctx->world_rank();
  if (problem = gf::first_problem(ctx->world(), problem); !problem.empty()) {
    if (rank == 0) spdlog::error("{}", problem);
    return false;
  }
  if (rank == 0)
    spdlog::info("replaying steps {}-{} from {} (step {}){}, compared with {}", p.checkpoint_step + 1, p.last,
                 p.checkpoint, p.checkpoint_step, fp32 ? " in fp32" : "", p.metrics);
  trainer->set_finite_check(true);
  for (int64_t step = p.checkpoint_step + 1; step <= p.last; ++step) {
    const gf::StepResult r = trainer->train_step(step);
    gf::StepCompare c = gf::compare_step(step, run, r.loss, r.grad_norm, trainer->rank_losses(r));
    if (rank == 0) spdlog::info("{}{}", fp32 ? "fp32: " : "", c.line);
    const bool stop = c.nonfinite;  // the run stopped here (status 3): so does the replay
    out.steps.push_back(std::move(c));
    if (!stop) continue;
    out.nonfinite_step = step;
    const std::vector<std::string> found = ctx->world().gather_strings(trainer->first_nonfinite(), 0);
    for (size_t k = 0; k < found.size() && out.first_nonfinite.empty(); ++k)
      if (!found[k].empty()) out.first_nonfinite = fmt::format("rank {}: {}", k, found[k]);
    break;
  }
  return true;
}

int run_replay(const gf::ReplayRequest& req, int argc, char** argv) {
  gf::MpiEnvironment mpi(&argc, &argv);
  const gf::Communicator world = gf::Communicator::world();
  gf::setup_console_logging(world.rank());
  gf::ReplayPlan p;
  std::string problem;
  try {
    p = gf::plan_replay(req);
  } catch (const std::exception& e) {
    problem = describe(e);
  }
  if (problem = gf::first_problem(world, problem); !problem.empty()) {
    if (world.rank() == 0) spdlog::error("{}", problem);
    return kSetupError;
  }
  const bool rank0 = world.rank() == 0;
  if (!p.damage.empty()) {
    if (rank0)
      spdlog::warn("the checkpoint differs from what was saved: {}; replayed as it is, so that the damage's effect on "
                   "the steps shows", p.damage);
    gf::ckpt::set_crc_checks(false);
  }
  const std::map<int64_t, gf::RunStep> run = gf::read_run_steps(p.metrics);
  ReplayPass main_pass, fp32_pass;
  const bool ok = replay_pass(p, run, false, main_pass);
  const auto differ = std::find_if(main_pass.steps.begin(), main_pass.steps.end(),
                                   [&](const gf::StepCompare& c) { return c.recorded && !c.same && c.step >= p.first; });
  // A step that was not finite with the run's bits: a deterministic fault. In bf16/fp16, again in fp32.
  const bool low_precision = main_pass.low_precision;
  const bool ok32 = !ok || differ != main_pass.steps.end() || main_pass.nonfinite_step == 0 || !low_precision ||
                    replay_pass(p, run, true, fp32_pass);
  std::remove(p.config_path.c_str());
  if (!ok || !ok32) return kSetupError;
  int status = 0;
  std::string verdict;
  if (differ != main_pass.steps.end()) {
    status = 7;
    const std::string ranks =
        differ->ranks.empty() ? std::string() : fmt::format("; the ranks whose own loss differs: {}", fmt::join(differ->ranks, ", "));
    verdict = p.damage.empty()
                  ? fmt::format("DIFFERENT bits from step {}: the same state, data and order gave other numbers, so the "
                                "machine (a transient fault: memory, a core, the network), not the data or the arithmetic{}",
                                differ->step, ranks)
                  : fmt::format("DIFFERENT bits from step {}{}: the checkpoint's bits changed after its save ({}), which the "
                                "steps replayed from it show",
                                differ->step, ranks, p.damage);
  } else {
    verdict = fmt::format("same bits in every compared step ({}-{}): the steps are deterministic, so a fault seen in them is "
                          "the data's or the arithmetic's, not the machine's", p.first, p.last);
    if (main_pass.nonfinite_step > 0)
      verdict += fmt::format("; step {} is not finite again: the first output that is not: {}", main_pass.nonfinite_step,
                             main_pass.first_nonfinite.empty() ? "none found by the layer checks (the optimizer's or the norm's)"
                                                               : main_pass.first_nonfinite);
    if (!fp32_pass.steps.empty())
      verdict += fmt::format("; in fp32: {}", fp32_pass.nonfinite_step > 0
                                                   ? fmt::format("step {} is not finite either, first at {}", fp32_pass.nonfinite_step,
                                                                 fp32_pass.first_nonfinite)
                                                   : std::string("the steps are finite (the fault is the low precision's)"));
  }
  if (rank0) {
    spdlog::info("replay verdict: {}", verdict);
    nlohmann::json j = {{"checkpoint", p.checkpoint}, {"checkpoint_step", p.checkpoint_step}, {"first", p.first},
                        {"last", p.last}, {"metrics", p.metrics}, {"verdict", verdict}, {"status", status},
                        {"damage", p.damage}, {"first_nonfinite", main_pass.first_nonfinite},
                        {"fp32_first_nonfinite", fp32_pass.first_nonfinite}};
    for (const gf::StepCompare& c : main_pass.steps) j["steps"].push_back({{"step", c.step}, {"same", c.same}, {"line", c.line}});
    std::filesystem::create_directories(req.output_dir);
    std::ofstream(std::filesystem::path(req.output_dir) / "replay.json") << j.dump(1) << "\n";
  }
  return status;
}

// `gridformer predict`: set-up as for training, then generation (runner/infer/generate.h).
int run_predict(const std::string& config_path, const std::vector<std::string>& sets, const std::string& rank_table,
                const gf::PredictRequest& req, int argc, char** argv) {
  gf::MpiEnvironment mpi(&argc, &argv);
  gf::Config cfg;
  int threads = 1;
  const std::unique_ptr<gf::ParallelContext> started = start_rank(config_path, sets, rank_table, true, cfg, threads);
  if (!started) return kSetupError;
  gf::ParallelContext& ctx = *started;
  const int rank = ctx.world_rank();
  gf::apply_machine_probe(threads);  // the fp32 GEMM backend
  if (rank == 0)
    spdlog::info("{} thread(s) per rank, {}; OpenBLAS kernels {}", threads, gf::omp_wait_text(), gf::openblas_kernels_text());
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
  try {
    predictor->run();
  } catch (const std::exception& e) {
    spdlog::error("{}{}", ctx.world().size() == 1 ? "" : fmt::format("on rank {}: ", rank), describe(e));
    spdlog::default_logger()->flush();
    if (ctx.world().size() == 1) return 1;
    gf::MpiEnvironment::abort(1);
  }
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
  // tokenize
  gf::data::TokenizerFiles tok_files;
  bool decode = false;
  // convert
  gf::ConvertOptions conv;
  // replay
  gf::ReplayRequest replay;
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
                    "(the model's Hugging Face names; load_checkpoint reads it)");
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
  return plan;
}

CLI::App* add_replay(CLI::App& app, Cli& c) {
  auto* rep = app.add_subcommand(
      "replay", "re-run steps of a run from one of its checkpoints (same samples, dropout masks and order) and compare "
                "each step's loss, gradient norm and per-rank losses bit for bit with the run's metrics.jsonl: same bits "
                "(a deterministic fault: the data or the arithmetic; a step that is not finite is traced to the first "
                "layer output that is not, and re-run in fp32 when the run was in bf16/fp16) or different bits (the "
                "machine, status 7, with the ranks that differ). Run under mpirun with the run's rank count");
  rep->add_option("--checkpoint", c.replay.checkpoint, "one of the run's checkpoints (its directory, the run's "
                                                        "checkpoint/ or output_dir: the latest)")->required();
  rep->add_option("--steps", c.replay.steps, "N or N-M: the steps to compare (the checkpoint's step < N; the steps "
                                             "between are run too)")->required();
  rep->add_option("--set", c.replay.sets, "override a key of the checkpoint's config (repeatable)");
  rep->add_option("--metrics", c.replay.metrics, "the run's metrics.jsonl (default: the one of the output_dir the "
                                                 "checkpoint is in, else of the config's output_dir)");
  rep->add_option("--output_dir", c.replay.output_dir, "the replay's log and replay.json (default output/replay)");
  return rep;
}

CLI::App* add_tokenize(CLI::App& app, Cli& c) {
  auto* tok = app.add_subcommand("tokenize", "each stdin line -> its ids space-separated (or back with --decode), with "
                                             "GPT-2 BPE, BERT WordPiece or SentencePiece (--tokenizer-type)");
  tok->add_option("--vocab-file", c.tok_files.vocab_file,
                  "gpt2-vocab.json (encoder.json), or a BERT vocab.txt for the WordPiece types")->check(CLI::ExistingFile);
  tok->add_option("--merge-file", c.tok_files.merge_file, "gpt2-merges.txt (vocab.bpe); GPT2BPETokenizer only")
      ->check(CLI::ExistingFile);
  tok->add_option("--tokenizer-model", c.tok_files.tokenizer_model,
                  "SentencePiece tokenizer.model (SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer), or a "
                  "Hugging Face tokenizer.json or its directory (HuggingFaceTokenizer)")->check(CLI::ExistingPath);
  tok->add_option("--tokenizer-type", c.tok_files.type,
                  "Megatron's name: GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, SentencePieceTokenizer, "
                  "GPTSentencePieceTokenizer, Llama2Tokenizer or HuggingFaceTokenizer (--tokenizer-model tokenizer.json)")->capture_default_str();
  tok->add_flag("--decode", c.decode, "read ids, print text");
  return tok;
}

CLI::App* add_convert(CLI::App& app, Cli& c) {
  auto* convert = app.add_subcommand("convert", "weights between our checkpoints, Hugging Face safetensors (one file or "
                                                "shards with model.safetensors.index.json) and one full .safetensors file");
  convert->add_option("--from", c.conv.from, "one of our checkpoints (its directory, a run's checkpoint/ or output_dir), "
                                             "or Hugging Face weights (a .safetensors file, or a directory with "
                                             "model.safetensors or model.safetensors.index.json)")->required();
  convert->add_option("--to", c.conv.to, "a directory, or a .safetensors file for one full file")->required();
  convert->add_option("--format", c.conv.format, "hf | checkpoint (default: the other kind than --from's)");
  convert->add_option("--max-shard-size", c.conv.max_shard_size, "Hugging Face shards up to this size (default 5GB)");
  convert->add_option("--dtype", c.conv.dtype, "Hugging Face output dtype: float32 (default), bfloat16, float16");
  convert->add_flag("--overwrite", c.conv.overwrite, "write into an existing non-empty --to (README: Converting weights)");
  return convert;
}

// The layout's problems for `ranks` ranks (all of them when ranks > 0, else those that hold whatever the
// rank count), as the message `config` and `plan` print; empty when there are none.
std::string layout_message(const gf::Config& cfg, const std::string& config_path, int ranks) {
  std::string msg = ranks > 0 ? gf::layout_error_message(cfg, ranks) : "";
  if (const auto problems = gf::config_layout_problems(cfg); msg.empty() && !problems.empty()) {
    msg = config_path + ": " + std::to_string(problems.size()) + " problem(s) in the config:";
    for (const auto& u : problems) msg += "\n  " + u;
  }
  return msg;
}

// `config --from-hf DIR`: the model section of a Hugging Face config.json, checked by reading it back.
int run_config_from_hf(const std::string& path) {
  try {
    const std::filesystem::path file =
        std::filesystem::is_directory(path) ? std::filesystem::path(path) / "config.json" : std::filesystem::path(path);
    std::ifstream in(file);
    if (!in) throw std::runtime_error(file.string() + ": cannot read (a Hugging Face model directory holds config.json)");
    nlohmann::json hf;
    try {
      hf = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(file.string() + ": not JSON (" + e.what() + ")");
    }
    const gf::ModelConfig m = gf::model_config_from_hf(hf, file.string());
    const gf::ArchConfigSection* section = gf::find_arch_section(m.type);
    if (section == nullptr || !section->model_yaml)
      throw std::runtime_error(file.string() + ": " + m.type + "'s model section cannot be written out");
    const std::string yaml = section->model_yaml(m);
    // Read back, the section must describe the model config.json describes.
    const gf::Config back = gf::load_config_string(yaml + "train_dataset: {data_loader: {type: RandomTokens}}\n", {},
                                                   "the model section of " + file.string());
    const gf::HfConfigCheck check = gf::check_hf_config(hf, back.model, file.string());
    if (!check.errors.empty() || !check.warnings.empty())
      throw std::logic_error("the model section written for " + file.string() + " does not read back as it: " +
                             (check.errors.empty() ? check.warnings : check.errors).front());
    std::cout << "# From " << file.string() << " (gridformer config --from-hf); paste over your config's model section.\n"
              << yaml;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << describe(e) << "\n";
    return kSetupError;
  }
}

// `config` (plan false) prints the resolved config; `plan` what each rank will hold. Both check the layout first.
int run_config_or_plan(const Cli& c, bool plan) {
  try {
    const gf::Config cfg = gf::load_config(c.config_path, c.sets);
    for (const auto& w : cfg.warnings) std::cerr << "warning: " << w << "\n";
    const int n = !plan || c.ranks > 0 ? c.ranks
                                       : static_cast<int>(cfg.parallel.ranks());
    if (const std::string msg = layout_message(cfg, c.config_path, n); !msg.empty()) {
      std::cerr << "error: " << msg << "\n";
      return 2;
    }
    // The data as train opens it: a problem is the pre-flight's error under --ranks (what run_distribute.sh
    // and msrun_launcher.sh run before starting any rank), a warning otherwise (the config still prints).
    if (const std::string data = plan ? "" : gf::data_problem(cfg); !data.empty()) {
      if (c.ranks > 0) {
        std::cerr << "error: " << data << "\n";
        return kSetupError;
      }
      std::cerr << "warning: train would refuse this config's data: " << data << "\n";
    }
    std::cout << (plan ? gf::plan_report(cfg, n) : gf::dump_resolved(cfg));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << describe(e) << "\n";
    return kSetupError;
  }
}

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
  if (*config && !c.from_hf.empty()) return run_config_from_hf(c.from_hf);
  if ((*config || *plan) && c.config_path.empty()) {
    std::cerr << "error: --config is required" << (*config ? " (or --from-hf DIR)" : "") << "\n";
    return kSetupError;
  }
  if (*config) return run_config_or_plan(c, false);
  if (*plan) return run_config_or_plan(c, true);
  if (*pred) return run_predict(c.config_path, predict_overrides(c), c.rank_table, c.preq, argc, argv);
  if (*tok) return gf::data::run_tokenize(c.tok_files, c.decode, std::cin, std::cout);
  if (*convert) return gf::run_convert(c.conv);
  if (*replay) return run_replay(c.replay, argc, argv);
  // --tensorboard-dir is an override of tensorboard_dir, so the resolved config (and its hash) records it;
  // double-quoted YAML keeps any path a string.
  if (!c.tensorboard_dir.empty()) c.sets.push_back("tensorboard_dir=" + yaml_quoted(c.tensorboard_dir));
  if (!c.load_ckpt.empty()) c.sets.push_back("load_checkpoint=" + yaml_quoted(c.load_ckpt));
  return run_train(c.config_path, c.sets, c.rank_table, c.save_weights, c.lambada, argc, argv);
}
