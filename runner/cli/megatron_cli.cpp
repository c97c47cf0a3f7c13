#include "runner/cli/megatron_cli.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>

#include "runner/config/megatron_args.h"

namespace gf {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != v && *end == '\0' && n >= 0 && n < (1 << 24) ? static_cast<int>(n) : fallback;
}

// The environment Megatron's arguments and torchrun read (the translator notes or checks each one set).
std::map<std::string, std::string> megatron_environment() {
  std::map<std::string, std::string> env;
  for (const char* k : {"CUDA_DEVICE_MAX_CONNECTIONS", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})
    if (const char* v = std::getenv(k); v != nullptr && *v != '\0') env[k] = v;
  return env;
}

}  // namespace

int launcher_world_size() {
  for (const char* k : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"})
    if (const int n = env_int(k, 0); n > 0) return n;
  return 1;
}

int launcher_rank() {
  for (const char* k : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"})
    if (const int r = env_int(k, -1); r >= 0) return r;
  return 0;
}

std::string translate_megatron_job(const std::vector<std::string>& args, int world_size, bool print,
                                   const std::string& yaml_path, std::vector<std::string>& train_options) {
  const MegatronTranslation t = translate_megatron_args(args, megatron_environment(), world_size);
  if (print) {
    for (const std::string& n : t.notes) std::cerr << "megatron: no effect here: " << n << "\n";
    for (const std::string& d : t.differences) std::cerr << "megatron: differs from Megatron-LM: " << d << "\n";
  }
  if (!t.errors.empty()) {
    std::string problems;
    for (const std::string& e : t.errors) problems += (problems.empty() ? "" : "\n") + e;
    return problems;
  }
  std::ofstream out(yaml_path, std::ios::trunc);
  out << "# Translated by gridformer from Megatron-LM arguments (gridformer config --from-megatron prints it)\n" << t.yaml;
  if (!out.flush()) return yaml_path + ": cannot write the translated config";
  train_options = t.cli_options;
  return "";
}

int run_config_from_megatron(const std::vector<std::string>& args, int ranks) {
  const int world = ranks > 0 ? ranks : launcher_world_size();
  const MegatronTranslation t = translate_megatron_args(args, megatron_environment(), world);
  for (const std::string& n : t.notes) std::cerr << "note: " << n << "\n";
  for (const std::string& d : t.differences) std::cerr << "differs from Megatron-LM: " << d << "\n";
  if (!t.errors.empty()) {
    for (const std::string& e : t.errors) std::cerr << "error: " << e << "\n";
    return 2;
  }
  std::cout << "# From Megatron-LM arguments on " << world << " rank(s) (gridformer config --from-megatron); "
            << "`gridformer pretrain_gpt` with the same arguments trains this config\n"
            << t.yaml;
  for (size_t i = 0; i < t.cli_options.size(); ++i)
    std::cerr << (i == 0 ? "gridformer train options this YAML cannot hold: " : " ") << t.cli_options[i]
              << (i + 1 == t.cli_options.size() ? "\n" : "");
  return 0;
}

}  // namespace gf
