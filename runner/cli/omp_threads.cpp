// The threads of a rank: how many, and how they wait at a barrier (runner/cli/omp_threads.h).
#include "runner/cli/omp_threads.h"

#include "runner/cli/env_defaults.h"
#include "runner/report/machine_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
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
// runner/cli/env_defaults.cpp sets it, re-executing the binary before libgomp loads again.

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
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, hw / ranks_on_this_host());
}

std::string environment_help() {
  return fmt::format(
      "Environment: OMP_NUM_THREADS threads per rank (default: the host's cores shared among its ranks); "
      "OMP_WAIT_POLICY or GOMP_SPINCOUNT how an OpenMP thread waits at a barrier (default: GOMP_SPINCOUNT={}, "
      "set by gridformer re-executing itself once); OPENBLAS_CORETYPE OpenBLAS's kernels (default: OpenBLAS's own "
      "choice, unless this CPU runs a better family than the one it took, such as the SSE3 kernels it gives a CPU "
      "newer than itself: then gridformer sets it, the same way); GF_GEMM=blas|eigen|onednn the fp32 GEMM backend (default: the "
      "machine probe's choice); GF_MACHINE_PROBE=FILE|off the probe's results (default: machine_probe.json in the "
      "directory above the binary's); RANK_TABLE_FILE a MindFormers rank table (as --rank_table).",
      kDefaultSpinCount);
}

}  // namespace gf
