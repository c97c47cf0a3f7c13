// The machine's-limits kernels (core/math/cpu_peak.h): each runs the work it counts (its
// accumulators sum to the closed form: every lane gains a known power of two per step, exact in
// fp32), reports a positive rate on a CPU with the ISA, and says why not on one without. No speed
// is asserted (speed belongs to bench/); only that the counting is right.
#include <gtest/gtest.h>

#include "core/math/cpu_peak.h"

namespace gf {
namespace {

void expect_counted(const KernelPeak& k, const char* what) {
  if (k.flops == 0.0) {
    EXPECT_FALSE(k.why_not.empty()) << what << ": no figure and no reason";
    std::cout << "[ info ] " << what << ": " << k.why_not << "\n";
    return;
  }
  EXPECT_GT(k.flops, 0.0) << what;
  EXPECT_FALSE(k.isa.empty()) << what;
  EXPECT_GT(k.work_per_rep, 0.0) << what;
  EXPECT_EQ(k.checksum, k.expected_checksum) << what << " (" << k.isa << ")";
  std::cout << "[ info ] " << what << " (" << k.isa << "): " << k.flops * 1e-9 << " G/s\n";
}

TEST(CpuPeak, KernelsRunTheWorkTheyCount) {
  for (const int threads : {1, 2}) {
    expect_counted(measure_fp32_fma_peak(threads, 0.02), "fp32 FMA");
    expect_counted(measure_bf16_dot_peak(threads, 0.02), "AVX-512 BF16");
    expect_counted(measure_amx_bf16_peak(threads, 0.02), "AMX BF16");
    const KernelPeak t = measure_triad_bandwidth(threads, 1 << 20, 0.02);
    EXPECT_EQ(t.checksum, t.expected_checksum);
    EXPECT_GT(t.flops, 0.0);
  }
}

}  // namespace
}  // namespace gf
