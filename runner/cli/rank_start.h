// A rank's start-up for the CLI's subcommands that run on every rank (train, predict, replay): exit statuses, what an
// exception says to the user, the rank table's check, everything checked on every rank before any work, and the
// ParallelContext of the layout (runner/cli/rank_start.cpp).
#pragma once
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/parallel_context.h"
#include "runner/cli/replay.h"
#include "runner/config/config.h"

namespace gf::cli {

// Exit statuses (README "Exit status"): 0 done; 1 a failure during training; 2 a problem found
// before training (usage, config, layout, rank table, output_dir, data, weights); 3 a NaN/Inf loss;
// 6 a hang (parallel.hang_timeout, gf::hang::kExitStatus); 130/143 stopped by SIGINT/SIGTERM.
constexpr int kSetupError = 2;

// What an exception says, as one line for the user: out-of-memory and filesystem errors get what to do.
std::string describe(const std::exception& e);
// The rank table (--rank_table, else $RANK_TABLE_FILE): "" when there is none or it fits, else the problem (the
// same text on every rank).
std::string check_rank_table(std::string path, const gf::Communicator& world);
// Everything a run needs, checked on every rank before any work: "" or the one problem every rank agrees on.
std::string check_before_work(const std::string& config_path, const std::vector<std::string>& sets,
                              const std::string& rank_table, const gf::Communicator& world, gf::Config& cfg,
                              bool predicting = false);
// A rank's start (inside an MpiEnvironment); empty after a problem, which rank 0 has printed.
std::unique_ptr<gf::ParallelContext> start_rank(const std::string& config_path, const std::vector<std::string>& sets,
                                                const std::string& rank_table, bool predicting, gf::Config& cfg,
                                                int& threads);
// `gridformer replay` (runner/cli/replay_run.cpp): its status.
int run_replay(const gf::ReplayRequest& req, int argc, char** argv);

}  // namespace gf::cli
