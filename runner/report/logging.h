// Logging: rank 0 to the console, every rank to <output_dir>/log/rank_N/gridformer.log (spdlog).
#pragma once
#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace gf {

// Installs the default logger for this rank. Safe to call again (replaces it).
void setup_logging(const std::string& output_dir, int rank, bool console);
// A console-only logger, before the config (and so the output dir) is known.
void setup_console_logging(int rank);

}  // namespace gf
