// Progress points: where long compute lets its thread's communication move.
//
// MPI moves a non-blocking message only inside an MPI call. A pipeline stage's activation is a
// rendezvous message (larger than the shared-memory eager limit): without a single-copy mechanism
// (CMA) the sender pushes the data only once it has seen the receiver's reply, that is at its next
// MPI call, and a stage that posts its send and goes on computing calls MPI next between layers.
// Every hop of the pipeline then waited up to a layer's compute (on a 16-core Xeon, 4 threads a
// stage, 8 768-wide layers: pp4's 1F1B measured 45% bubble against the analytic 27%,
// bench/parallel_cores.py).
//
// A Scope installs a hook on its thread (the one that runs MPI); point() calls it, at most once a
// `min_interval_s`, outside OpenMP parallel regions. The GEMM entry points are such points: a layer
// runs several, so the hook runs every millisecond or so instead of once a layer. Nothing computed
// changes: the hook only tests requests.
#pragma once
#include <functional>

namespace gf::progress {

class Scope {
 public:
  explicit Scope(std::function<void()> hook, double min_interval_s = 50e-6);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::function<void()> hook_;
  double interval_s_;
  const void* prev_;
};

namespace detail {
extern thread_local const void* tl_scope;
void call();
}  // namespace detail

// Calls this thread's hook if a Scope is installed, the last call is older than its interval and the
// thread is not inside an OpenMP parallel region. Costs a thread-local load when none is installed.
inline void point() {
  if (detail::tl_scope != nullptr) [[unlikely]]
    detail::call();
}

}  // namespace gf::progress
