#include "core/math/cpu_peak.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/math/aligned_buffer.h"

namespace gf {

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The increment every accumulator lane adds per step: a power of two, so the sums stay exact while
// a lane's value is below 2^24 increments (the loops keep their step counts under that per call).
constexpr float kStep = 1.0f / 65536.0f;
// Steps per call: a lane gains at most 32 increments per step (AMX), so 2^18 steps stay exact.
constexpr int64_t kStepsPerCall = int64_t{1} << 18;

// Values the compiler cannot see, so no loop is folded away.
volatile float g_one = 1.0f;
volatile float g_step = kStep;

// Runs `kernel(steps)` (returning its accumulators' sum) on `threads` threads at once, `calls` times
// per repetition, 3 repetitions; returns the best repetition's seconds and the last checksum of
// thread 0.
template <typename Kernel>
double time_on_threads(int threads, int calls, Kernel kernel, double& checksum) {
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    double t0 = 0.0, t1 = 0.0, sum = 0.0;
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
#pragma omp master
      t0 = now();
      double s = 0.0;
      for (int c = 0; c < calls; ++c) s = kernel(kStepsPerCall);
#pragma omp barrier
#pragma omp master
      {
        t1 = now();
        sum = s;
      }
    }
    best = std::min(best, t1 - t0);
    checksum = sum;
  }
  return best;
}

// Calls per repetition that make a repetition last about `seconds` / 3, from one timed call.
template <typename Kernel>
int calls_for(double seconds, Kernel kernel) {
  const double t0 = now();
  (void)kernel(kStepsPerCall);
  const double one = std::max(now() - t0, 1e-6);
  return std::clamp(static_cast<int>(seconds / 3.0 / one), 1, 1 << 16);
}

template <typename Kernel>
KernelPeak run_peak(const char* isa, int threads, double seconds, double flops_per_step, double expected, Kernel kernel) {
  KernelPeak p;
  p.isa = isa;
  const int calls = calls_for(seconds, kernel);
  const double sec = time_on_threads(threads, calls, kernel, p.checksum);
  p.work_per_rep = flops_per_step * static_cast<double>(kStepsPerCall) * calls;
  p.flops = p.work_per_rep * threads / sec;
  p.expected_checksum = expected;
  return p;
}

// 16 independent accumulators: twice the FMA latency (4 cycles) times the issue rate (2 per cycle).
constexpr int kAcc = 16;
// AVX2 has 16 vector registers, not AVX-512's 32: 16 accumulators and the two operands do not fit, and the spills to
// the stack halved the figure (an AMD EPYC with AVX2 alone, Zen's 2 FMA pipes of latency 5: 16 accumulators 34-45
// GFLOP/s, 10-14 about 91, the GEMM ceiling 85 beside it). 12: the 10 that latency x issue rate needs, with room.
constexpr int kAccAvx2 = 12;

// The accumulators' lanes summed in double (stored, not _mm512_reduce_add_ps, whose
// _mm256_undefined_pd trips GCC 12's -Wuninitialized).
__attribute__((target("avx512f"))) double sum_lanes(const __m512 (&acc)[kAcc]) {
  alignas(64) float lanes[16];
  double sum = 0.0;
  for (const auto& a : acc) {
    _mm512_store_ps(lanes, a);
    for (float v : lanes) sum += v;
  }
  return sum;
}

__attribute__((target("avx512f"))) double fma_avx512(int64_t steps) {
  const __m512 x = _mm512_set1_ps(g_one), y = _mm512_set1_ps(g_step);
  __m512 acc[kAcc];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 16
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  return sum_lanes(acc);
}

__attribute__((target("avx2,fma"))) double fma_avx2(int64_t steps) {
  const __m256 x = _mm256_set1_ps(g_one), y = _mm256_set1_ps(g_step);
  __m256 acc[kAccAvx2];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 16
    for (int i = 0; i < kAccAvx2; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  double sum = 0.0;
  alignas(32) float lanes[8];
  for (auto& a : acc) {
    _mm256_store_ps(lanes, a);
    for (float v : lanes) sum += v;
  }
  return sum;
}

// bf16 1.0 and kStep (both exact in bf16: powers of two).
uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

__attribute__((target("avx512f,avx512bf16"))) double dot_bf16(int64_t steps) {
  const __m512bh x = (__m512bh)_mm512_set1_epi16(static_cast<short>(bf16_bits(g_one)));
  const __m512bh y = (__m512bh)_mm512_set1_epi16(static_cast<short>(bf16_bits(g_step)));
  __m512 acc[kAcc];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
#pragma GCC unroll 16
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  }
  return sum_lanes(acc);
}

bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d & (1u << 22)) != 0 && (d & (1u << 24)) != 0;  // AMX-BF16, AMX-TILE
}

// Linux hands out the AMX tile data state only on request (per process, from kernel 5.16).
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Four accumulator tiles (tmm0-3, 16x16 fp32) fed by two A tiles (tmm4-5, 16 rows of 32 bf16) and
// two B tiles (tmm6-7, 16 rows of 16 bf16 pairs): four independent tdpbf16ps per step, each
// 16 x 16 x 32 multiply-adds. A is all ones and B all kStep, so every fp32 lane gains 32 kStep.
__attribute__((target("amx-tile,amx-bf16"))) double amx_bf16(int64_t steps) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  alignas(64) float c[16 * 16] = {};
  std::fill(a, a + 16 * 32, bf16_bits(g_one));
  std::fill(b, b + 16 * 32, bf16_bits(g_step));
  _tile_loadconfig(&cfg);
  _tile_loadd(0, c, 64);
  _tile_loadd(1, c, 64);
  _tile_loadd(2, c, 64);
  _tile_loadd(3, c, 64);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  for (int64_t s = 0; s < steps; ++s) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  double sum = 0.0;
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64);
  for (float v : out) sum += v;
  _tile_stored(1, out, 64);
  for (float v : out) sum += v;
  _tile_stored(2, out, 64);
  for (float v : out) sum += v;
  _tile_stored(3, out, 64);
  for (float v : out) sum += v;
  _tile_release();
  return sum;
}

}  // namespace

KernelPeak measure_fp32_fma_peak(int threads, double seconds) {
  const double steps = static_cast<double>(kStepsPerCall);
  if (__builtin_cpu_supports("avx512f"))
    return run_peak("avx512f", threads, seconds, kAcc * 16 * 2.0, kAcc * 16 * steps * kStep, fma_avx512);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return run_peak("avx2", threads, seconds, kAccAvx2 * 8 * 2.0, kAccAvx2 * 8 * steps * kStep, fma_avx2);
  KernelPeak p;
  p.why_not = "the CPU has neither AVX-512 nor AVX2+FMA";
  return p;
}

KernelPeak measure_bf16_dot_peak(int threads, double seconds) {
  if (!__builtin_cpu_supports("avx512bf16")) {
    KernelPeak p;
    p.why_not = "the CPU has no AVX-512 BF16";
    return p;
  }
  // vdpbf16ps: 16 lanes, each 2 bf16 multiply-adds (4 FLOPs), per accumulator and step.
  return run_peak("avx512_bf16", threads, seconds, kAcc * 16 * 4.0,
                  kAcc * 16 * 2.0 * static_cast<double>(kStepsPerCall) * kStep, dot_bf16);
}

KernelPeak measure_amx_bf16_peak(int threads, double seconds) {
  KernelPeak p;
  if (!cpu_has_amx_bf16()) {
    p.why_not = "the CPU has no AMX-BF16";
    return p;
  }
  if (!request_amx_permission()) {
    p.why_not = "Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
    return p;
  }
  // Four tdpbf16ps per step, each 16 x 16 x 32 multiply-adds; 4 x 256 lanes gain 32 kStep each.
  return run_peak("amx_bf16", threads, seconds, 4 * 16 * 16 * 32 * 2.0,
                  4 * 256 * 32.0 * static_cast<double>(kStepsPerCall) * kStep, amx_bf16);
}

KernelPeak measure_triad_bandwidth(int threads, long floats_per_array, double seconds) {
  KernelPeak p;
  p.isa = "triad";
  const auto n = static_cast<int64_t>(floats_per_array);
  AlignedBuffer<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n));
  float *pa = a.data(), *pb = b.data(), *pc = c.data();
  // First touch by the threads that will use each part (the pages land on their nodes).
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 0.0f;
    pb[i] = 1.0f;
    pc[i] = 2.0f;
  }
  const float s = g_step;
  auto pass = [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
  };
  double t0 = now();
  pass();
  const double one = std::max(now() - t0, 1e-6);
  const int passes = std::clamp(static_cast<int>(seconds / 3.0 / one), 1, 1000);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    t0 = now();
    for (int k = 0; k < passes; ++k) pass();
    best = std::min(best, now() - t0);
  }
  p.work_per_rep = 12.0 * static_cast<double>(n) * passes;
  p.flops = p.work_per_rep / best;
  p.checksum = static_cast<double>(pa[0]) + pa[n - 1];
  p.expected_checksum = 2.0 * (1.0 + 2.0 * static_cast<double>(kStep));
  return p;
}

}  // namespace gf
