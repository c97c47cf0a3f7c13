#include "runner/report/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <filesystem>
#include <vector>

namespace gf {

void setup_console_logging(int rank) {
  std::vector<spdlog::sink_ptr> sinks;
  if (rank == 0) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  auto logger = std::make_shared<spdlog::logger>("gridformer", sinks.begin(), sinks.end());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
}

void setup_logging(const std::string& output_dir, int rank, bool console) {
  std::vector<spdlog::sink_ptr> sinks;
  if (console) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  const auto dir = std::filesystem::path(output_dir) / "log" / ("rank_" + std::to_string(rank));
  std::filesystem::create_directories(dir);
  sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>((dir / "gridformer.log").string(), false));
  auto logger = std::make_shared<spdlog::logger>("gridformer", sinks.begin(), sinks.end());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [rank " + std::to_string(rank) + "] [%^%l%$] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace gf
