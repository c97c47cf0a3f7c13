// The threads of a rank: how many, and how they wait at a barrier (runner/cli/omp_threads.h).
#include "runner/cli/omp_threads.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace gf {

// How long an OpenMP thread spins at a barrier before it sleeps. libgomp spins GOMP_SPINCOUNT `pause`s,
// 300000 by default: 8 ms on the 2-vCPU EPYC (26 ns a pause), 15-20 ms on a Xeon (about 140 cycles a
// pause), longer than a scheduler time slice. When another process holds a core, a thread that has
// finished its part spins through that slice while its teammate waits for the core: GPT-2's decode
// with its real vocabulary beside a busy PyTorch process ran at 0.09 of its quiet one-thread speed
// (bench/README.md, "Decode beside a busy process"). gridformer's default is a spin of 10000 pauses
// (0.26 ms here, under a time slice), measured to take that case to 0.71 and to leave training speed
// on a quiet machine as it was. OMP_WAIT_POLICY (active: spin long; passive: sleep at once) or
// GOMP_SPINCOUNT in the environment wins.
//
// libgomp reads its environment once, in its constructor, before main; the C library sets up
// `environ` only after the executable's .preinit_array has run, so the variable cannot be set from
// there either. main therefore re-executes the binary (its path, the same arguments, a few ms)
// with the variable set, before anything else; if that fails it goes on with libgomp's default.
namespace {
constexpr const char* kDefaultSpinCount = "10000";
constexpr const char* kDefaultSpinMark = "GF_DEFAULT_SPINCOUNT";  // set with it: the log can say whose it is
}  // namespace

void default_omp_spin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;  // the user's (or set already)
  // The binary's own path, not /proc/self/exe: the kernel names a process after the file it executes,
  // and `pgrep gridformer`, `top` and `killall` should keep seeing "gridformer".
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || self.empty()) return;
  if (setenv("GOMP_SPINCOUNT", kDefaultSpinCount, 1) != 0 || setenv(kDefaultSpinMark, "1", 1) != 0) return;
  execv(self.c_str(), argv);
  unsetenv("GOMP_SPINCOUNT");  // not re-executed: libgomp runs with its own default, and the log says so
  unsetenv(kDefaultSpinMark);
}

// The setup log's words for the barrier wait in force.
std::string omp_wait_text() {
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (std::getenv(kDefaultSpinMark) && spin && std::string(spin) == kDefaultSpinCount && !std::getenv("OMP_WAIT_POLICY"))
    return fmt::format("OpenMP spin {} (gridformer's default GOMP_SPINCOUNT)", kDefaultSpinCount);
  if (const char* w = std::getenv("OMP_WAIT_POLICY")) return fmt::format("OMP_WAIT_POLICY={}", w);
  if (spin) return fmt::format("GOMP_SPINCOUNT={}", spin);
  return "OpenMP wait: libgomp's default (300000 spins)";
}

// Threads per rank: OMP_NUM_THREADS if set, else the cores shared evenly among this host's ranks.
int threads_per_rank() {
  if (const char* e = std::getenv("OMP_NUM_THREADS"); e && std::atoi(e) > 0) return std::atoi(e);
  int local = 1;
  if (const char* e = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); e && std::atoi(e) > 0) local = std::atoi(e);
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, hw / local);
}

std::string environment_help() {
  return fmt::format(
      "Environment: OMP_NUM_THREADS threads per rank (default: the host's cores shared among its ranks); "
      "OMP_WAIT_POLICY or GOMP_SPINCOUNT how an OpenMP thread waits at a barrier (default: GOMP_SPINCOUNT={}, "
      "set by gridformer re-executing itself once); GF_GEMM=blas|eigen|onednn the fp32 GEMM backend (default: the "
      "machine probe's choice); GF_MACHINE_PROBE=FILE|off the probe's results (default: machine_probe.json in the "
      "directory above the binary's); RANK_TABLE_FILE a MindFormers rank table (as --rank_table).",
      kDefaultSpinCount);
}

}  // namespace gf
