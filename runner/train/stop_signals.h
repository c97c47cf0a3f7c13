// SIGINT and SIGTERM are taken by one thread of their own, never by a thread that computes.
//
// Why: oneDNN's JIT fp32 GEMM kernels (jit_avx512_common_gemm_f32 and its AVX2 twin, oneDNN up to
// 3.11.0: uxlfoundation/oneDNN#4845, fixed by #4855) point rsp at a heap workspace while they run.
// A signal handled on such a thread writes its frame there, into the heap: glibc later aborts
// ("malloc(): unaligned tcache chunk detected", "corrupted size vs. prev_size"). With Debian's
// oneDNN 2.6.3 as the fp32 backend, a SIGTERM during a step aborted 27 of 100 one-thread runs.
//
// So route_stop_signals(), first in main() before any thread exists, blocks SIGINT and SIGTERM;
// every thread created later (OpenMP's, Open MPI's, ours) inherits the mask, and one thread waits
// for them with sigwait(). A process forked from ours gets them unblocked again (pthread_atfork),
// so a child such as the launcher Open MPI starts for a singleton behaves as before.
//
// What a signal does there:
//   - before install_stop_handlers() (every subcommand but a training run's loop): the default
//     action, the process ends by the signal as it would without us;
//   - after it: the first one sets g_stop_signal (the training loop stops after its step, with a
//     checkpoint); a second one ends the process at once with status 128 + signal.
#pragma once
#include <atomic>

namespace gf {

// The stop request: 0, or the signal (SIGINT, SIGTERM) that asked for it.
extern std::atomic<int> g_stop_signal;

// First thing in main(): blocks SIGINT and SIGTERM in this thread (and so in every later one) and
// starts the thread that takes them. Calling it again does nothing.
void route_stop_signals();

// From here on a signal asks the training loop to stop (see above) instead of ending the process.
void install_stop_handlers();

}  // namespace gf
