#include "runner/cli/rank_start.h"

#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/math/gemm.h"
#include "parallel/watchdog.h"
#include "runner/cli/omp_threads.h"
#include "runner/config/layout_check.h"
#include "runner/launch/rank_agreement.h"
#include "runner/launch/rank_table.h"
#include "runner/report/logging.h"
#include "runner/train/output_paths.h"
#include "core/trace/fault.h"

namespace gf::cli {

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
                              bool predicting) {
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
  // Every group split from the world inherits it (unless the suite injects the fault of its not being wired).
  if (!gf::injected_fault("collectives-unwired")) world.set_mpi_collectives(p.mpi_collectives);
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

}  // namespace gf::cli
