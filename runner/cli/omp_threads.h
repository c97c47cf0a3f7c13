// A rank's OpenMP threads: the setup log's words for the barrier wait in force (gridformer's default,
// a short spin, is set by runner/cli/env_defaults.h), the thread count,
// and the Environment footer of --help.
#pragma once
#include <string>

namespace gf {

// "OpenMP spin 10000 (gridformer's default GOMP_SPINCOUNT)", "OMP_WAIT_POLICY=passive", ...
std::string omp_wait_text();
// OMP_NUM_THREADS if set, else the cores shared evenly among this host's ranks.
int threads_per_rank();
// The Environment footer of `gridformer --help`.
std::string environment_help();

}  // namespace gf
