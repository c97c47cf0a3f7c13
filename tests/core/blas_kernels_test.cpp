// Which OpenBLAS kernel family a process asks for (core/math/blas_kernels.h).
#include "core/math/blas_kernels.h"

#include <gtest/gtest.h>

namespace gf {
namespace {

constexpr CpuVectorIsa kSse{false, false, false};
constexpr CpuVectorIsa kAvx2{true, false, false};
constexpr CpuVectorIsa kAvx512{true, true, false};
constexpr CpuVectorIsa kAvx512Bf16{true, true, true};

TEST(BlasKernels, BestFamilyIsTheHighestTheCpuRuns) {
  EXPECT_EQ(best_openblas_kernels(kSse), "");
  EXPECT_EQ(best_openblas_kernels(kAvx2), "Haswell");
  EXPECT_EQ(best_openblas_kernels(kAvx512), "SkylakeX");
  EXPECT_EQ(best_openblas_kernels(kAvx512Bf16), "Cooperlake");
  EXPECT_EQ(openblas_kernels_need("Cooperlake"), "AVX-512 BF16");
  EXPECT_EQ(openblas_kernels_need("SkylakeX"), "AVX-512");
  EXPECT_EQ(openblas_kernels_need("Haswell"), "AVX2");
}

TEST(BlasKernels, AnSseFamilyOnANewerCpuIsUpgraded) {
  // Debian's OpenBLAS 0.3.21 on the 16-core AMX Xeon: "Prescott".
  EXPECT_EQ(openblas_kernels_upgrade("Prescott", kAvx512Bf16), "Cooperlake");
  EXPECT_EQ(openblas_kernels_upgrade("Prescott", kAvx512), "SkylakeX");
  EXPECT_EQ(openblas_kernels_upgrade("Nehalem", kAvx2), "Haswell");
  EXPECT_EQ(openblas_kernels_upgrade("Unknown", kAvx2), "Haswell");
  EXPECT_EQ(openblas_kernels_upgrade("Sandybridge", kAvx2), "Haswell");  // AVX below AVX2
  EXPECT_EQ(openblas_kernels_upgrade("Haswell", kAvx512), "SkylakeX");   // e.g. a Zen 4 taken for a Zen
  EXPECT_EQ(openblas_kernels_upgrade("Zen", kAvx512Bf16), "Cooperlake");
  EXPECT_EQ(openblas_kernels_upgrade("SkylakeX", kAvx512Bf16), "Cooperlake");
}

TEST(BlasKernels, OpenBlasOwnChoiceStandsWhenItIsAsGoodOrUnknownToUs) {
  EXPECT_EQ(openblas_kernels_upgrade("Cooperlake", kAvx512Bf16), "");
  EXPECT_EQ(openblas_kernels_upgrade("SkylakeX", kAvx512), "");
  EXPECT_EQ(openblas_kernels_upgrade("Haswell", kAvx2), "");
  EXPECT_EQ(openblas_kernels_upgrade("Zen", kAvx2), "");
  EXPECT_EQ(openblas_kernels_upgrade("Excavator", kAvx2), "");
  EXPECT_EQ(openblas_kernels_upgrade("Prescott", kSse), "");          // nothing better to run
  EXPECT_EQ(openblas_kernels_upgrade("SapphireRapids", kAvx512Bf16), "");  // a later OpenBLAS's name
  EXPECT_EQ(openblas_kernels_upgrade("Cooperlake", kAvx2), "");        // never downgraded
}

TEST(BlasKernels, ThisCpuIsConsistent) {
  const CpuVectorIsa isa = cpu_vector_isa();
  if (isa.avx512_bf16) {
    EXPECT_TRUE(isa.avx512);
  }
  if (isa.avx512) {  // a CPU with AVX-512 F/CD/BW/DQ/VL has AVX2 and FMA (every one made has)
    EXPECT_TRUE(isa.avx2_fma);
  }
}

}  // namespace
}  // namespace gf
