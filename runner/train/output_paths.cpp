#include "runner/train/output_paths.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include <unistd.h>

namespace gf {

namespace fs = std::filesystem;

std::string checkpoint_directory(const Config& cfg) {
  return cfg.checkpoint.directory.empty() ? (fs::path(cfg.output_dir) / "checkpoint").string() : cfg.checkpoint.directory;
}

std::vector<std::pair<std::string, std::string>> output_directories(const Config& cfg) {
  std::vector<std::pair<std::string, std::string>> dirs{{"output_dir (--set output_dir=DIR)", cfg.output_dir}};
  if (cfg.checkpoint.enabled)
    dirs.emplace_back(cfg.checkpoint.directory.empty() ? "the checkpoints (CheckpointMonitor's default, <output_dir>/checkpoint)"
                                                       : "the checkpoints (CheckpointMonitor's directory key)",
                      checkpoint_directory(cfg));
  if (!cfg.tensorboard_dir.empty()) dirs.emplace_back("TensorBoard's events (" + cfg.tensorboard_dir_from + ")", cfg.tensorboard_dir);
  if (cfg.profile.enabled) dirs.emplace_back("the step timeline (profile: True, <output_dir>/profile)", (fs::path(cfg.output_dir) / "profile").string());
  return dirs;
}

std::string unwritable_output(const Config& cfg, int rank) {
  for (const auto& [what, dir] : output_directories(cfg)) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::string reason = ec ? ec.message() : "";
    if (reason.empty()) {
      const fs::path probe = fs::path(dir) / (".gridformer_write_check." + std::to_string(::getpid()) + "." + std::to_string(rank));
      bool written = static_cast<bool>(std::ofstream(probe) << "x");
      if (written) written = fs::remove(probe, ec) && !ec;
      if (!written) reason = ec ? ec.message() : "a file cannot be created there";
    }
    if (!reason.empty())
      return what + ": `" + dir + "` cannot be written (" + reason + "), where the run would fail at its first write; nothing " +
             "has run: make it writable, or point the key at a directory this user can write";
  }
  return "";
}

}  // namespace gf
