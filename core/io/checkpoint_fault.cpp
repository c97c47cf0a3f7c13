// The crash tests' kill points (core/io/checkpoint.h: fault_point).
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/io/checkpoint.h"

namespace gf::ckpt {

namespace {
int64_t g_fault_step = -1;
}

void set_fault_step(int64_t step) { g_fault_step = step; }

void fault_point(const char* point) {
  const char* want = std::getenv("GF_CHECKPOINT_FAULT");
  if (want == nullptr || std::strcmp(want, point) != 0) return;
  const char* step = std::getenv("GF_CHECKPOINT_FAULT_STEP");
  if (step != nullptr && std::to_string(g_fault_step) != step) return;
  std::raise(SIGKILL);
}

}  // namespace gf::ckpt
