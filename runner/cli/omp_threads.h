// A rank's OpenMP threads: gridformer's default barrier wait (a short spin, set by re-executing the
// binary once before anything else), the setup log's words for the wait in force, the thread count,
// and the Environment footer of --help.
#pragma once
#include <string>

namespace gf {

// First thing in main: unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set, re-executes the binary with
// GOMP_SPINCOUNT=10000 (returns only if it did not; then libgomp keeps its own default).
void default_omp_spin(char** argv);
// "OpenMP spin 10000 (gridformer's default GOMP_SPINCOUNT)", "OMP_WAIT_POLICY=passive", ...
std::string omp_wait_text();
// OMP_NUM_THREADS if set, else the cores shared evenly among this host's ranks.
int threads_per_rank();
// The Environment footer of `gridformer --help`.
std::string environment_help();

}  // namespace gf
