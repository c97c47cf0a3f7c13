// The machine's limits, measured by kernels of our own (tools/machine_probe.cpp writes them into
// the machine probe; bench/ reports each figure as a share of them):
//   - the fp32 FMA peak: a register-blocked loop of independent vector FMAs (AVX-512 where the CPU
//     has it, else AVX2+FMA), nothing loaded or stored, so it runs at the FMA units' issue rate;
//   - the bf16 peak: the same with AVX-512 BF16's dot product (vdpbf16ps: 32 bf16 pairs per
//     instruction into 16 fp32 lanes), and with AMX (tdpbf16ps on 16x32 by 32x16 bf16 tiles) where
//     the CPU has it and Linux grants the tile state (arch_prctl ARCH_REQ_XCOMP_PERM);
//   - the memory bandwidth: STREAM's triad a[i] = b[i] + s c[i] over arrays far larger than the
//     caches, counting 12 bytes per element as STREAM does (the write-allocate read is not counted).
// Each runs on `threads` OpenMP threads at once (one copy per thread) and reports the best of a few
// repetitions in FLOP/s (or bytes/s) for all threads together. A kernel the CPU lacks reports 0.
#pragma once
#include <string>

namespace gf {

struct KernelPeak {
  double flops = 0.0;  // FLOP/s (bytes/s for the triad), all threads together, best repetition
  std::string isa;     // "avx512f", "avx2", "avx512_bf16", "amx_bf16", ... ("" when unavailable)
  std::string why_not; // when unavailable: why (the CPU lacks it, the kernel refused the tile state)
  // The FLOPs (or bytes) of one repetition on one thread, and what each kernel's accumulators sum
  // to (the check that the loop ran as counted: every accumulator is a known closed form).
  double work_per_rep = 0.0;
  double checksum = 0.0, expected_checksum = 0.0;
};

// seconds: roughly how long each measurement may take (3 repetitions share it).
KernelPeak measure_fp32_fma_peak(int threads, double seconds);
KernelPeak measure_bf16_dot_peak(int threads, double seconds);  // AVX-512 BF16
KernelPeak measure_amx_bf16_peak(int threads, double seconds);  // AMX tiles
// STREAM triad over `floats_per_array` floats per array (three arrays, shared by the threads).
KernelPeak measure_triad_bandwidth(int threads, long floats_per_array, double seconds);

}  // namespace gf
