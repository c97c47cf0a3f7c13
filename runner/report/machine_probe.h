// The machine probe: what tools/machine_probe.cpp measured on this machine, and what a run takes
// from it. The tool times the fp32 GEMM backends (OpenBLAS, Eigen, oneDNN) and oneDNN's bf16 matmul on the
// model's typical products at one thread count (a few hundred ms), and writes a JSON file next to
// the build (build/machine_probe.json; scripts/setup.sh runs it after building when the file is
// missing or names another CPU). A run reads it to
//   - pick the fp32 GEMM backend default (the probe's faster one; GF_GEMM still overrides), and
//   - take the MFU peak per rank: the hardware's peak for the compute dtype that the probe measured
//     with our own kernels (the fp32 FMA peak; for bfloat16 the AMX or AVX-512 BF16 peak), scaled to
//     the rank's thread count, so that MFU is PaLM's and Megatron's model FLOPs over the hardware's
//     peak and cannot pass 100%; runner_config.peak_tflops > 0 still overrides. The probe's GEMM
//     ceiling (its fastest product) is logged beside it as a figure of its own.
// Without the file (a binary run from elsewhere, or the probe never run) a run keeps the built-in
// defaults (OpenBLAS, and a nominal peak from the CPU's instruction set: builtin_peak) and says so in
// its log. A probe of another CPU, or of other OpenBLAS kernels (OPENBLAS_CORETYPE picks them: on a
// 2-vCPU AMD EPYC its Haswell kernels ran at 0.55x its SkylakeX ones, which reversed the
// OpenBLAS/Eigen order), is ignored the same way.
//
// Where a run looks: $GF_MACHINE_PROBE if set (a path; "off" for no probe), else
// <directory of the running binary>/../machine_probe.json (build/bin/.. = build/).
//
// The file's fields that a run reads: "cpu", "date", "threads", "fp32_backend" ("blas" | "eigen" |
// "onednn"), "gflops" {"blas", "eigen", "onednn" (version 2), "bf16"}, "peak_tflops" {"float32",
// "bfloat16" (null when oneDNN was not built)}: the GEMM ceilings, "blas_core" (optional), and from
// version 2 "limits" {"fp32_fma_tflops", "bf16_tflops", "triad_gbs", ...}: the hardware's peaks from
// our own kernels. The tool writes more (per-product figures, the correctness check of every fp32
// backend, load, versions).
#pragma once
#include <nlohmann/json.hpp>

#include "core/math/mixed_precision.h"

#include <optional>
#include <string>

namespace gf {

struct MachineProbe {
  std::string path;  // where it was read from
  std::string cpu, date;
  std::string blas_core;  // OpenBLAS's kernels when measured ("" in a file without the field)
  int threads = 0;
  std::string fp32_backend;  // "blas", "eigen" or "onednn"
  double gflops_blas = 0.0, gflops_eigen = 0.0, gflops_bf16 = 0.0;  // FLOP-weighted over the products
  double gflops_onednn = 0.0;  // 0: not measured (a version-1 file, or built without oneDNN)
  double peak_tflops_fp32 = 0.0;
  double peak_tflops_bf16 = 0.0;  // 0: not measured (built without oneDNN)
  // The hardware's limits from our own kernels (core/math/cpu_peak.h; version 2 files, 0 before):
  // the fp32 FMA peak, the bf16 peak (AMX where measured, else AVX-512 BF16) and the triad.
  double fma_tflops_fp32 = 0.0, fma_tflops_bf16 = 0.0, triad_gbs = 0.0;
  std::string fma_isa_fp32, fma_isa_bf16;
  // The share of the cores' time the probe had while it measured ("cores_share"; 1 in a file without it): below
  // kQuietCoresShare other processes held the cores, and every figure is low.
  double cores_share = 1.0;
};

// The share of the cores a probe must have had for its peaks to be the hardware's: below it the tool measures
// again (tools/machine_probe.cpp), --if-stale measures again, and a run divides by no peak of that probe (on a
// 2-vCPU AMX Xeon with four compilers running the probe had 0.19 of the cores and measured an FMA peak of 0.063
// TFLOP/s, a seventh of the quiet machine's, and a quick start run at a quiet moment would have logged MFU ~500%).
inline constexpr double kQuietCoresShare = 0.8;

// OpenBLAS's kernel family in this process (openblas_get_corename(): "Haswell", "SkylakeX", "Zen",
// ...; the environment's OPENBLAS_CORETYPE forces one).
std::string blas_core_name();

// The probe's fields from its JSON document; throws std::runtime_error naming a missing or bad field.
MachineProbe machine_probe_from_json(const nlohmann::json& j);

// Where a run looks for the file: $GF_MACHINE_PROBE, else <binary dir>/../machine_probe.json.
// Empty when GF_MACHINE_PROBE is "off".
std::string machine_probe_path();
// The ranks sharing this host: Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, or 1 where it is not set.
int ranks_on_this_host();
// The probe at `path` if it was measured on this CPU with this process's OpenBLAS kernels (nothing else is set);
// otherwise none, and *note (if given) says why.
std::optional<MachineProbe> machine_probe_for_this_cpu(const std::string& path, std::string* note = nullptr);
// The directory-relative default for a binary at `exe` (exe's directory /.. /machine_probe.json).
std::string machine_probe_path_for(const std::string& exe);

// What a run uses, and why (for the log and metrics.jsonl's run_start line).
struct MachineSetup {
  std::optional<MachineProbe> probe;  // set when a probe for this CPU was read
  std::string probe_path;             // where the run looked ("" when GF_MACHINE_PROBE=off)
  std::string probe_note;             // without a probe: why not ("no file at ...", "another CPU", "other kernels")
  std::string cpu;                    // this machine's CPU
  int threads = 0;                    // this rank's threads
  std::string gemm_backend;           // the fp32 GEMM backend the run uses
  std::string gemm_reason;            // why: GF_GEMM, the probe's measurement, or the built-in default
};

// Reads the probe for a rank running `threads` threads (a probe of another CPU is ignored) and sets
// the process's fp32 GEMM backend from it unless GF_GEMM is set. Never throws for a missing or bad
// file (it is noted in probe_note); throws std::invalid_argument for an unknown GF_GEMM value.
MachineSetup apply_machine_probe(int threads);
// The same from a given path (no environment lookup of the path; GF_GEMM still read).
MachineSetup apply_machine_probe_at(const std::string& path, int threads);

// The MFU peak per rank and where it comes from, for the log line "MFU relative to ...".
struct PeakChoice {
  double tflops = 0.0;
  // "the FMA peak (fp32, avx512f) measured by machine_probe on <CPU> (<date>)", "set by
  // runner_config.peak_tflops", "the built-in nominal peak ...": what the peak is and why.
  std::string source;
  bool measured = false;  // the probe's measured hardware peak
  // The probe's GEMM ceiling for the compute dtype (its fastest product), per rank, and which
  // product: logged beside the peak as a figure of its own, not divided by. 0: no probe.
  double gemm_ceiling_tflops = 0.0;
  std::string gemm_ceiling_what;
};
// config_peak > 0 wins. Else, from a probe that had at least kQuietCoresShare of the cores, its hardware peak for
// compute_dtype (core/math/cpu_peak.h:
// float32 and the emulated float16 the fp32 FMA peak; bfloat16 the bf16 peak, AMX where measured
// else AVX-512 BF16, or the fp32 FMA peak on a CPU with neither) scaled by threads / the probe's
// threads. Else (no probe, a version-1 probe without hardware figures, or a probe that measured a busy machine) the
// built-in nominal peak
// for this CPU's instruction set times the rank's threads.
PeakChoice choose_peak(double config_peak, ComputeDtype compute_dtype, const MachineSetup& machine);
// The log line's text after "MFU relative to ": the peak, what it is, and the GEMM ceiling if any.
std::string describe_peak(const PeakChoice& peak);

// The instructions the built-in peak counts (cpuid): the widest fp32 FMA and the bf16 ones.
struct PeakIsa {
  bool avx512f = false, avx2_fma = false, avx512_bf16 = false, amx_bf16 = false;
};
PeakIsa this_cpu_peak_isa();
// The built-in MFU peak per thread, for a run without a probe's measured peak: the FLOPs per cycle of
// one core's widest instructions for the dtype at kBuiltinPeakGhz, a nominal peak above what a core
// reaches, so that MFU stays under 100% with nothing measured (server AVX-512 and AMX parts run their
// vector units below 5 GHz; a desktop part boosting past it could pass it, and then the run's warning
// of an MFU above 100% says to run the probe):
//   fp32 (and float16): AVX-512 2 FMA units x 16 lanes x 2 FLOP = 64 FLOP/cycle (0.32 TFLOP/s),
//     AVX2+FMA 32 (0.16), otherwise 16 (0.08: SSE's 4 lanes, a multiply and an add unit);
//   bfloat16: AMX tdpbf16ps, 16x16x32 multiply-adds per 16 cycles = 1024 FLOP/cycle (5.12),
//     AVX-512 BF16 vdpbf16ps, 2 units x 16 lanes x 2 pairs x 2 FLOP = 128 (0.64), otherwise fp32's.
// Measured against it (machine_probe, per thread): a 2-vCPU AMX Xeon 0.239 fp32 and 3.40 AMX, a
// 2-vCPU EPYC 0.22 fp32 and 0.44 AVX-512 BF16.
struct BuiltinPeak {
  double tflops_per_thread = 0.0;
  double flop_per_cycle = 0.0;
  std::string isa;  // "avx512f", "avx2", "sse", "amx_bf16", "avx512_bf16"
};
inline constexpr double kBuiltinPeakGhz = 5.0;
BuiltinPeak builtin_peak(ComputeDtype compute_dtype, const PeakIsa& isa);

// Under compute_dtype bfloat16: a warning when the probe measured this CPU's bf16 products slower than its
// fp32 ones (measured on a 2-vCPU Xeon VM of CPU model 207, whose CPUID shows AVX-512 BF16 but no AMX:
// vdpbf16ps at 0.166 TFLOP/s against 0.34 of fp32 FMAs, oneDNN's bf16 matmul at 0.16 against its sgemm's
// 0.28), naming both GEMM ceilings and the hardware peaks; "" when bf16 is not slower, or without a probe
// or a bf16 figure.
std::string bf16_slower_note(ComputeDtype compute_dtype, const MachineSetup& machine);

}  // namespace gf
