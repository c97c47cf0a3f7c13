// Whether a loop is worth an OpenMP team: the one predicate behind the `if (...)` clause of every
// `#pragma omp parallel` of the ops, the optimizer, the blocks and generation.
//
// Why a threshold at all: a parallel region costs a fork and a barrier (about 1-2 us on a quiet
// machine), and when another process holds a core the barrier waits until the descheduled thread
// gets a time slice again (milliseconds). A decode step of a tiny model (rows of 64 floats) is a few
// dozen such loops of a microsecond each: on 2 threads beside a busy process it ran thousands of
// times slower than on one thread (bench/README.md, "Decode beside a busy process"). Below the
// threshold a loop runs on the calling thread, with no region at all (`if (false)` makes libgomp
// run the body on the encountering thread).
//
// Why it changes no number: every loop gated by it computes each element (row, column block) with
// the same code whichever thread runs it, so one thread gives the bits that two give (what
// tests/core/threads_test.cpp checks). Loops whose sums depend on the thread count must not use it.
// Loops that call a GEMM per item (attention's heads, grouped experts) must not either: outside a
// region the GEMM could use several threads itself, with another blocking.
//
// Units of work: one element of a streaming pass (read, an add or a multiply, write). An element
// that takes a transcendental function (exp, tanh, erf: GELU, SwiGLU, softmax, cross-entropy) counts
// kTranscendentalWork units; core/math/gemm.cpp counts 4 weights of a matrix-vector product and 16
// multiply-adds of a GEMM as a unit. The threshold, measured 2026-11-27 on the 2-vCPU AMD EPYC
// (AVX-512, GCC 12, libgomp, OMP_WAIT_POLICY unset) by bench/parallel_threshold.cpp, one thread
// against two (medians of 7 batches of >= 2 ms, both CPUs >= 95% idle before the run):
//   x[i] += y[i]:     2^12 elements 3.3 us on 1 thread, 5.4 on 2 (0.62x); 2^13 4.5 vs 4.8 (0.93x);
//                     2^14 7.0 vs 6.4 (1.11x); 2^15 12.3 vs 9.0 (1.36x); 2^16 22.8 vs 14.3 (1.59x);
//                     2^20 358 vs 177 (2.03x);
//   x[i] = tanh(...): 2^9 5.6 vs 5.3 (1.05x); 2^10 9.2 vs 7.5 (1.22x); 2^11 20.1 vs 14.0 (1.43x);
//                     2^12 39 vs 20 (2.0x);
// two threads pay from about 2^14 streaming elements and 2^9-2^10 tanh (libm's, 24 adds' time
// each; Eigen's vectorised tanh and exp, which GELU and cross-entropy use, cost less). The
// threshold is set a little above the break-even, at 2^15, where two threads give 1.36x: below it
// a region gains at most a few microseconds on a quiet machine and loses a time slice on a busy
// one. A transcendental counts 16.
#pragma once
#include <omp.h>

#include <cstdint>

namespace gf {

inline constexpr int64_t kParallelMinWork = int64_t{1} << 15;
inline constexpr int64_t kTranscendentalWork = 16;

// True when `work` units are enough for a team and no team is running already (inside one, a nested
// region would get one thread anyway).
inline bool parallel_worth(int64_t work) { return work >= kParallelMinWork && !omp_in_parallel(); }

}  // namespace gf
