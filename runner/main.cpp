// gridformer: one binary, subcommands train | config | tokenize.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <unistd.h>
#include <thread>

#include "core/data/tokenize_cli.h"
#include "core/gemm.h"
#include "parallel/communicator.h"
#include "runner/config.h"
#include "runner/layout_check.h"
#include "runner/logging.h"
#include "runner/rank_table.h"
#include "runner/trainer.h"

namespace {

// Threads per rank: OMP_NUM_THREADS if set, else the cores shared evenly among this host's ranks.
int threads_per_rank() {
  if (const char* e = std::getenv("OMP_NUM_THREADS"); e && std::atoi(e) > 0) return std::atoi(e);
  int local = 1;
  if (const char* e = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); e && std::atoi(e) > 0) local = std::atoi(e);
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, hw / local);
}

// The rank table (--rank_table, else $RANK_TABLE_FILE as in MindFormers; neither: no table). Every rank loads and
// validates it and the ranks agree on the outcome (hosts may see different files): on a problem rank 0 prints one
// error line, the first failing rank's, and every rank gets 2. Returns 0 when there is no table or it fits.
int check_rank_table(std::string path, const gf::Communicator& world) {
  if (path.empty())
    if (const char* e = std::getenv("RANK_TABLE_FILE"); e && *e) path = e;
  if (path.empty()) return 0;
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
  double last_bad = problem.empty() ? -1.0 : static_cast<double>(world.size() - world.rank());  // max = first bad rank
  world.allreduce_max(&last_bad, 1);
  if (last_bad < 0) {
    const gf::RankLocation here = table.locate(world.rank());
    spdlog::info("rank table {}: {} ranks on {} server(s); this rank: server {} device {}", path, table.rank_count(),
                 table.servers.size(), here.server_id, here.device.device_id);
    return 0;
  }
  const int first_bad = world.size() - static_cast<int>(last_bad);
  int64_t length = static_cast<int64_t>(problem.size());
  world.broadcast(&length, sizeof length, first_bad);
  problem.resize(static_cast<size_t>(length));
  world.broadcast(problem.data(), length, first_bad);
  if (world.rank() == 0) spdlog::error("{}{}", first_bad == 0 ? "" : fmt::format("on rank {}: ", first_bad), problem);
  return 2;
}

int run_train(const std::string& config_path, const std::vector<std::string>& sets, const std::string& rank_table,
              const std::string& save_weights, int argc, char** argv) {
  gf::MpiEnvironment mpi(&argc, &argv);
  gf::Communicator world = gf::Communicator::world();
  const int rank = world.rank();
  gf::setup_console_logging(rank);
  gf::Config cfg;
  try {
    cfg = gf::load_config(config_path, sets);
  } catch (const std::exception& e) {
    if (rank == 0) std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  const int threads = threads_per_rank();
  omp_set_num_threads(threads);
  gf::gemm_set_threads(threads);
  gf::setup_logging(cfg.output_dir, rank, rank == 0);
  for (const auto& w : cfg.warnings) if (rank == 0) spdlog::warn("{}", w);
  for (const auto& w : gf::layout_warnings(cfg, world.size())) if (rank == 0) spdlog::warn("{}", w);
  if (const int status = check_rank_table(rank_table, world); status != 0) return status;
  const auto& p = cfg.parallel;
  if (const auto problems = gf::layout_problems(cfg, world.size()); !problems.empty()) {
    if (rank == 0) {
      std::string msg = fmt::format("the parallel layout does not fit {} rank(s):", world.size());
      for (const auto& s : problems) msg += "\n  " + s;
      const std::string fit = gf::suggest_layout(cfg, world.size());
      msg += fit.empty() ? fmt::format("\n  no layout of {} rank(s) splits this model; start a different number of ranks",
                                       world.size())
                         : fmt::format("\n  a layout that fits {} rank(s): parallel_config: {{{}}}", world.size(), fit);
      spdlog::error("{}", msg);
    }
    return 2;
  }
  int status = 0;
  const int world_size = world.size();
  try {
    gf::ParallelContext ctx = gf::ParallelContext::build(
        std::move(world), gf::ProcessGrid(static_cast<int>(p.model_parallel), static_cast<int>(p.data_parallel),
                                          static_cast<int>(p.pipeline_stage)));
    spdlog::info("rank {} of {}, pid {}, {} thread(s)", ctx.world_rank, ctx.world.size(), getpid(), threads);
    gf::install_stop_handlers();
    if (cfg.run_mode == "predict")
      throw std::runtime_error("run_mode: predict (text generation) is not built yet; use run_mode: train, finetune or eval");
    gf::Trainer trainer(cfg, ctx);
    if (cfg.run_mode == "eval") {
      const double loss = trainer.evaluate();
      spdlog::info("eval: loss {:.6f}, perplexity {:.3f} over {} batches of the validation data", loss, std::exp(loss),
                   cfg.eval_data.eval_iters);
    } else {
      status = trainer.run();
      if (status == 0 && !save_weights.empty()) trainer.save_weights(save_weights);
    }
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    spdlog::default_logger()->flush();
    if (world_size == 1) return 1;
    gf::MpiEnvironment::abort(1);
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gridformer: trains GPT-2 from MindFormers-style YAML, on one rank or several under mpirun (data, tensor and sequence parallel, ZeRO-1)"};
  app.require_subcommand(1);
  std::string config_path;
  std::vector<std::string> sets;
  std::string rank_table;

  auto* train = app.add_subcommand("train", "train the model the config describes (run under mpirun for several ranks)");
  train->add_option("--config", config_path, "YAML config (MindFormers layout)")->required()->check(CLI::ExistingFile);
  train->add_option("--set", sets, "override a key: --set runner_config.train_steps=5 (repeatable)");
  std::string save_weights;
  train->add_option("--save-weights", save_weights,
                    "after training, write the full weights (gathered from every rank) to this .safetensors file "
                    "(Hugging Face GPT-2 names; load_checkpoint reads it)");
  train->add_option("--rank_table", rank_table,
                    "MindFormers/HCCL rank table JSON; its rank count must equal the number of ranks (default: "
                    "$RANK_TABLE_FILE; neither: no table)");

  auto* config = app.add_subcommand("config", "print the resolved config (defaults filled in) as YAML, or the problems in it");
  config->add_option("--config", config_path, "YAML config")->required()->check(CLI::ExistingFile);
  config->add_option("--set", sets, "override a key (repeatable)");

  std::string vocab, merges;
  bool decode = false;
  auto* tok = app.add_subcommand("tokenize", "GPT-2 BPE: each stdin line -> its ids space-separated (or back with --decode)");
  tok->add_option("--vocab-file", vocab, "gpt2-vocab.json (encoder.json)")->required()->check(CLI::ExistingFile);
  tok->add_option("--merge-file", merges, "gpt2-merges.txt (vocab.bpe)")->required()->check(CLI::ExistingFile);
  tok->add_flag("--decode", decode, "read ids, print text");

  CLI11_PARSE(app, argc, argv);

  if (*config) {
    try {
      const gf::Config cfg = gf::load_config(config_path, sets);
      for (const auto& w : cfg.warnings) std::cerr << "warning: " << w << "\n";
      if (const auto unbuilt = gf::unbuilt_parallelism(cfg); !unbuilt.empty()) {
        std::cerr << "error: " << config_path << ": " << unbuilt.size() << " problem(s) in the config:";
        for (const auto& u : unbuilt) std::cerr << "\n  " << u;
        std::cerr << "\n";
        return 2;
      }
      std::cout << gf::dump_resolved(cfg);
      return 0;
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 2;
    }
  }
  if (*tok) return gf::data::run_tokenize(vocab, merges, decode, std::cin, std::cout);
  return run_train(config_path, sets, rank_table, save_weights, argc, argv);
}
