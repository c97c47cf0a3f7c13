// Faults the test suite injects to show that its checks fail when they must (the Proof issue;
// tests/integration/proof_faults.sh): GF_FAULT=NAME turns one on; without the variable nothing changes.
//   collectives-unwired   parallel.collectives: mpi never reaches the communicators (runner/cli/rank_start.cpp)
//   zero-unit-dropped     ZeRO-2/3: the first unit's reduce-scattered gradient slice is discarded on every rank
//                         (parallel/grad_sync.cpp), a bug both stages share
//   resume-drops-moment   a resume leaves AdamW's second moment (exp_avg_sq) at zero instead of reading it
//                         (runner/train/checkpointing.cpp)
#pragma once
#include <cstdlib>
#include <cstring>

namespace gf {

inline bool injected_fault(const char* name) {
  static const char* const want = std::getenv("GF_FAULT");
  return want != nullptr && std::strcmp(want, name) == 0;
}

}  // namespace gf
