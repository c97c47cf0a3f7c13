// Which of OpenBLAS's kernel families a process should run. OpenBLAS (Debian's 0.3.21, built for
// every x86-64 CPU: DYNAMIC_ARCH) picks its kernels from the CPU's family and model number when it
// loads. A CPU newer than the library is not in its table and gets the SSE3 kernels of 2004
// ("Prescott"): on the 16-core AMX Xeon lent to this project the probe measured them at 147 GFLOP/s
// against 510 for oneDNN's sgemm (bench/README.md, "Speed against the machine's limits"), a
// quarter of what the AVX-512 kernels of the same library reach on an older CPU. The kernels are
// chosen by what the CPU can execute, which cpuid says directly; OPENBLAS_CORETYPE, read when the
// library loads, forces a family (runner/cli/env_defaults.h sets it before OpenBLAS loads again).
#pragma once
#include <string>

namespace gf {

// The vector extensions OpenBLAS's x86-64 kernel families need.
struct CpuVectorIsa {
  bool avx2_fma = false;     // AVX2 and FMA3: "Haswell" (also what "Zen" runs)
  bool avx512 = false;       // AVX-512 F, CD, BW, DQ and VL: "SkylakeX"
  bool avx512_bf16 = false;  // and AVX512_BF16: "Cooperlake" (its sgemm is SkylakeX's; bf16 kernels besides)
};

// This CPU's (cpuid, through the compiler's __builtin_cpu_supports; all false off x86-64).
CpuVectorIsa cpu_vector_isa();

// The best of OpenBLAS 0.3.21's x86-64 families that `isa` can execute: "Cooperlake", "SkylakeX",
// "Haswell", or "" when only the SSE families fit.
std::string best_openblas_kernels(const CpuVectorIsa& isa);
// What a family best_openblas_kernels names needs, in the log's words: "AVX-512 BF16", "AVX-512", "AVX2".
std::string openblas_kernels_need(const std::string& family);

// The family to force in place of `chosen` (openblas_get_corename() with no OPENBLAS_CORETYPE), or ""
// to keep OpenBLAS's own choice: a family is forced only when the CPU can run a better tier than the
// chosen one (tiers: SSE families < AVX ones such as "Sandybridge" or "Bulldozer" < AVX2 "Haswell",
// "Zen", "Excavator" < "SkylakeX" < "Cooperlake"). A name this table does not know is kept: a later
// OpenBLAS may name families that are better than any here.
std::string openblas_kernels_upgrade(const std::string& chosen, const CpuVectorIsa& isa);

}  // namespace gf
