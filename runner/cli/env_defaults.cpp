#include "runner/cli/env_defaults.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/math/blas_kernels.h"
#include "runner/report/machine_probe.h"

namespace gf {

void default_environment(char** argv) {
  std::vector<std::pair<const char*, std::string>> set;
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    set.emplace_back("GOMP_SPINCOUNT", kDefaultSpinCount);
    set.emplace_back(kDefaultSpinMark, "1");
  }
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    const std::string own = blas_core_name();
    const std::string better = openblas_kernels_upgrade(own, cpu_vector_isa());
    if (!better.empty()) {
      set.emplace_back("OPENBLAS_CORETYPE", better);
      set.emplace_back(kOpenblasOwnChoice, own);
    }
  }
  if (set.empty()) return;
  // The binary's own path, not /proc/self/exe: the kernel names a process after the file it executes,
  // and `pgrep gridformer`, `top` and `killall` should keep seeing "gridformer".
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || self.empty()) return;
  bool ok = true;
  for (const auto& [name, value] : set) ok = ok && setenv(name, value.c_str(), 1) == 0;
  if (ok) execv(self.c_str(), argv);
  for (const auto& kv : set) unsetenv(kv.first);  // not re-executed: the libraries keep their own defaults
}

std::string openblas_kernels_text() {
  const std::string now = blas_core_name();
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  const char* own = std::getenv(kOpenblasOwnChoice);
  if (forced && own) {
    const std::string why = fmt::format("gridformer's OPENBLAS_CORETYPE for this CPU's {}; OpenBLAS's own choice was {}",
                                        openblas_kernels_need(forced), own);
    if (now != forced) return fmt::format("{} (asked for {}: {})", now, forced, why);
    return fmt::format("{} ({})", now, why);
  }
  if (forced) return fmt::format("{} (OPENBLAS_CORETYPE={})", now, forced);
  return fmt::format("{} (OpenBLAS's own choice)", now);
}

}  // namespace gf
