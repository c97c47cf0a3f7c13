// What gridformer sets in its own environment before the libraries that read it have loaded, by
// re-executing the binary once (the same path, arguments and pid) first thing in main:
//   - GOMP_SPINCOUNT=10000, unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (runner/cli/omp_threads.cpp
//     says why: a barrier must not spin through another process's time slice);
//   - OPENBLAS_CORETYPE, unless set, when OpenBLAS took kernels of a lower tier than this CPU runs
//     (core/math/blas_kernels.h: a CPU newer than the library gets its 2004 SSE3 kernels).
// libgomp and OpenBLAS read these in their constructors, before main, and the C library sets up
// `environ` only after the executable's .preinit_array has run, so the variables cannot be set from
// inside the process in time. If the re-execution fails the process goes on as it was, and the
// setup log names what is in force.
#pragma once
#include <string>

namespace gf {

inline constexpr const char* kDefaultSpinCount = "10000";
inline constexpr const char* kDefaultSpinMark = "GF_DEFAULT_SPINCOUNT";  // set with it: the log can say whose it is
// Set with gridformer's OPENBLAS_CORETYPE: the family OpenBLAS had chosen itself.
inline constexpr const char* kOpenblasOwnChoice = "GF_OPENBLAS_OWN_CHOICE";

// First thing in main (gridformer's and machine_probe's, so that a probe measures the kernels a run
// gets): returns only if nothing was to be set or the re-execution failed.
void default_environment(char** argv);

// The setup log's words for OpenBLAS's kernels: "Cooperlake (OpenBLAS's own choice)",
// "SkylakeX (gridformer's OPENBLAS_CORETYPE for this CPU's AVX-512; OpenBLAS's own choice was
// Prescott)", "Haswell (OPENBLAS_CORETYPE=Haswell)".
std::string openblas_kernels_text();

}  // namespace gf
