#include "core/math/blas_kernels.h"

#include <array>
#include <string_view>

namespace gf {

CpuVectorIsa cpu_vector_isa() {
  CpuVectorIsa isa;
#if defined(__x86_64__)
  __builtin_cpu_init();
  isa.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  isa.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
  isa.avx512_bf16 = isa.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  return isa;
}

std::string best_openblas_kernels(const CpuVectorIsa& isa) {
  if (isa.avx512_bf16 && isa.avx512) return "Cooperlake";
  if (isa.avx512) return "SkylakeX";
  if (isa.avx2_fma) return "Haswell";
  return "";
}

std::string openblas_kernels_need(const std::string& family) {
  if (family == "Cooperlake") return "AVX-512 BF16";
  if (family == "SkylakeX") return "AVX-512";
  if (family == "Haswell") return "AVX2";
  return "";
}

namespace {

// OpenBLAS 0.3.21's x86-64 family names (openblas_get_corename()) and the vector tier of their
// kernels: 0 SSE*, 1 AVX (or AMD's FMA4 generation), 2 AVX2 + FMA3, 3 AVX-512, 4 AVX-512 + BF16.
struct Family {
  std::string_view name;
  int tier;
};
constexpr std::array<Family, 26> kFamilies{{
    {"Unknown", 0},    {"Katmai", 0},      {"Coppermine", 0},   {"Northwood", 0},    {"Prescott", 0},
    {"Banias", 0},     {"Atom", 0},        {"Core2", 0},        {"Penryn", 0},       {"Dunnington", 0},
    {"Nehalem", 0},    {"Athlon", 0},      {"Opteron", 0},      {"Opteron_SSE3", 0}, {"Barcelona", 0},
    {"Nano", 0},       {"Bobcat", 0},      {"Sandybridge", 1},  {"Bulldozer", 1},    {"Piledriver", 1},
    {"Steamroller", 1}, {"Haswell", 2},    {"Zen", 2},          {"Excavator", 2},    {"SkylakeX", 3},
    {"Cooperlake", 4},
}};

int tier_of(std::string_view name) {
  for (const Family& f : kFamilies)
    if (f.name == name) return f.tier;
  return -1;
}

}  // namespace

std::string openblas_kernels_upgrade(const std::string& chosen, const CpuVectorIsa& isa) {
  const std::string best = best_openblas_kernels(isa);
  if (best.empty()) return "";
  const int have = tier_of(chosen);
  if (have < 0) return "";  // a family this table does not know: OpenBLAS's choice stands
  return tier_of(best) > have ? best : "";
}

}  // namespace gf
