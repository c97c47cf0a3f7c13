// The machine probe file as a run reads it: its fields, where it is looked for, a probe of another
// CPU or an unreadable one ignored, the GEMM backend it picks unless GF_GEMM says otherwise, and
// the MFU peak (runner_config.peak_tflops first, then the probe's hardware peak for the compute
// dtype, scaled to the rank's threads, then the built-in nominal peak of the CPU's instructions),
// with the probe's GEMM ceiling beside it, never divided by.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "core/math/gemm.h"
#include "runner/report/machine_probe.h"
#include "runner/report/run_info.h"

namespace gf {
namespace {

nlohmann::json probe_json(const std::string& cpu, const std::string& backend = "eigen") {
  return {{"tool", "machine_probe"}, {"version", 1}, {"cpu", cpu}, {"date", "2026-11-23T10:00:00Z"}, {"threads", 2},
          {"fp32_backend", backend}, {"gflops", {{"blas", 200.0}, {"eigen", 250.0}, {"bf16", 600.0}}},
          {"peak_tflops", {{"float32", 0.26}, {"bfloat16", 0.7}}}};
}

// Writes `text` to a fresh file under the test's temporary directory.
std::string write_temp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("gf_machine_probe_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

// Restores the process-wide GEMM backend whatever a test sets.
struct KeepBackend {
  GemmBackend before = gemm_backend();
  ~KeepBackend() { gemm_set_backend(before); }
};

TEST(MachineProbe, ReadsItsFields) {
  const MachineProbe p = machine_probe_from_json(probe_json("Some CPU"));
  EXPECT_EQ(p.cpu, "Some CPU");
  EXPECT_EQ(p.threads, 2);
  EXPECT_EQ(p.fp32_backend, "eigen");
  EXPECT_DOUBLE_EQ(p.gflops_blas, 200.0);
  EXPECT_DOUBLE_EQ(p.gflops_eigen, 250.0);
  EXPECT_DOUBLE_EQ(p.peak_tflops_fp32, 0.26);
  EXPECT_DOUBLE_EQ(p.peak_tflops_bf16, 0.7);
  nlohmann::json no_bf16 = probe_json("Some CPU");
  no_bf16["peak_tflops"]["bfloat16"] = nullptr;
  EXPECT_EQ(machine_probe_from_json(no_bf16).peak_tflops_bf16, 0.0);
}

TEST(MachineProbe, AMissingOrBadFieldIsNamed) {
  nlohmann::json j = probe_json("Some CPU");
  j.erase("threads");
  try {
    machine_probe_from_json(j);
    ADD_FAILURE() << "a probe without threads was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("\"threads\""), std::string::npos) << e.what();
  }
  j = probe_json("Some CPU", "mkl");
  EXPECT_THROW(machine_probe_from_json(j), std::runtime_error);
  j = probe_json("Some CPU");
  j["peak_tflops"]["float32"] = "fast";
  EXPECT_THROW(machine_probe_from_json(j), std::runtime_error);
}

TEST(MachineProbe, LooksNextToTheBuildOfTheBinary) {
  EXPECT_EQ(machine_probe_path_for("/work/main/build/bin/gridformer"), "/work/main/build/machine_probe.json");
}

// A version-2 file: the hardware's limits from the probe's own kernels beside the GEMM ceilings.
nlohmann::json probe_v2_json(const std::string& cpu) {
  nlohmann::json j = probe_json(cpu);
  j["version"] = 2;
  j["limits"] = {{"fp32_fma_tflops", 0.43}, {"fp32_fma_isa", "avx512f"}, {"bf16_tflops", 0.87},
                 {"bf16_isa", "avx512_bf16"}, {"triad_gbs", 70.3}};
  return j;
}

TEST(MachineProbe, APeakFromTheConfigWins) {
  MachineSetup m;
  m.threads = 2;
  m.probe = machine_probe_from_json(probe_v2_json("Some CPU"));
  const PeakChoice c = choose_peak(0.5, ComputeDtype::kFloat32, m);
  EXPECT_DOUBLE_EQ(c.tflops, 0.5);
  EXPECT_EQ(c.source, "set by runner_config.peak_tflops");
  EXPECT_FALSE(c.measured);
  EXPECT_DOUBLE_EQ(c.gemm_ceiling_tflops, 0.26);  // still reported beside it
}

// MFU is the model's FLOPs over the hardware's peak of the compute dtype (PaLM's, Megatron's): the
// probe's FMA peak for fp32 (and the emulated fp16), its bf16 peak for bf16, never the GEMM ceiling.
TEST(MachineProbe, TheHardwarePeakOfTheComputeDtypeScaledToTheRanksThreads) {
  MachineSetup m;
  m.threads = 2;
  m.probe = machine_probe_from_json(probe_v2_json("Some CPU"));
  PeakChoice c = choose_peak(0.0, ComputeDtype::kFloat32, m);
  EXPECT_DOUBLE_EQ(c.tflops, 0.43);
  EXPECT_TRUE(c.measured);
  EXPECT_EQ(c.source, "the FMA peak (fp32, avx512f) measured by machine_probe on Some CPU (2026-11-23T10:00:00Z)");
  EXPECT_DOUBLE_EQ(c.gemm_ceiling_tflops, 0.26);
  EXPECT_EQ(c.gemm_ceiling_what, "machine_probe's fastest fp32 product, eigen");
  c = choose_peak(0.0, ComputeDtype::kBFloat16, m);
  EXPECT_DOUBLE_EQ(c.tflops, 0.87);
  EXPECT_EQ(c.source.rfind("the bf16 peak (avx512_bf16) measured by machine_probe on Some CPU", 0), 0u) << c.source;
  EXPECT_DOUBLE_EQ(c.gemm_ceiling_tflops, 0.7);
  c = choose_peak(0.0, ComputeDtype::kFloat16, m);  // emulated on the fp32 GEMM
  EXPECT_DOUBLE_EQ(c.tflops, 0.43);
  EXPECT_NE(c.source.find("float16 runs on the fp32 GEMM"), std::string::npos) << c.source;
  m.threads = 1;  // one of the probe's two threads
  c = choose_peak(0.0, ComputeDtype::kFloat32, m);
  EXPECT_DOUBLE_EQ(c.tflops, 0.215);
  EXPECT_DOUBLE_EQ(c.gemm_ceiling_tflops, 0.13);
  EXPECT_NE(c.source.find("0.43 TFLOP/s at the probe's 2 thread(s) scaled to this rank's 1"), std::string::npos)
      << c.source;
  m.probe->fma_tflops_bf16 = 0.0;  // a CPU without AMX or AVX-512 BF16: bf16 runs on the fp32 FMAs
  c = choose_peak(0.0, ComputeDtype::kBFloat16, m);
  EXPECT_DOUBLE_EQ(c.tflops, 0.215);
  EXPECT_NE(c.source.find("this CPU has no bf16 instructions"), std::string::npos) << c.source;
  EXPECT_EQ(describe_peak(choose_peak(0.0, ComputeDtype::kFloat32, m)),
            "0.215 TFLOP/s per rank, the FMA peak (fp32, avx512f) measured by machine_probe on Some CPU "
            "(2026-11-23T10:00:00Z), 0.43 TFLOP/s at the probe's 2 thread(s) scaled to this rank's 1; the GEMM ceiling "
            "(machine_probe's fastest fp32 product, eigen) is 0.13 TFLOP/s per rank, 60% of that peak");
}

// The built-in nominal peak: the FLOPs per cycle of one core's widest instructions at 5 GHz.
TEST(MachineProbe, TheBuiltInPeakOfEachInstructionSet) {
  PeakIsa none, avx2, avx512, cooper, amx;
  avx2.avx2_fma = true;
  avx512 = avx2;
  avx512.avx512f = true;
  cooper = avx512;
  cooper.avx512_bf16 = true;
  amx = cooper;
  amx.amx_bf16 = true;
  EXPECT_DOUBLE_EQ(builtin_peak(ComputeDtype::kFloat32, none).tflops_per_thread, 0.08);
  EXPECT_DOUBLE_EQ(builtin_peak(ComputeDtype::kFloat32, avx2).tflops_per_thread, 0.16);
  EXPECT_DOUBLE_EQ(builtin_peak(ComputeDtype::kFloat32, amx).tflops_per_thread, 0.32);  // fp32: the FMAs
  EXPECT_DOUBLE_EQ(builtin_peak(ComputeDtype::kFloat16, amx).tflops_per_thread, 0.32);
  EXPECT_DOUBLE_EQ(builtin_peak(ComputeDtype::kBFloat16, avx512).tflops_per_thread, 0.32);
  EXPECT_DOUBLE_EQ(builtin_peak(ComputeDtype::kBFloat16, cooper).tflops_per_thread, 0.64);
  EXPECT_DOUBLE_EQ(builtin_peak(ComputeDtype::kBFloat16, amx).tflops_per_thread, 5.12);
  EXPECT_EQ(builtin_peak(ComputeDtype::kBFloat16, amx).isa, "amx_bf16");
  // Above what the probe's kernels measured per thread: the 2-vCPU AMX Xeon (fp32 0.478, AMX 6.807
  // at 2 threads) and the 2-vCPU EPYC (fp32 0.44, AVX-512 BF16 0.88).
  EXPECT_GT(builtin_peak(ComputeDtype::kFloat32, amx).tflops_per_thread, 0.478 / 2);
  EXPECT_GT(builtin_peak(ComputeDtype::kBFloat16, amx).tflops_per_thread, 6.807 / 2);
  EXPECT_GT(builtin_peak(ComputeDtype::kBFloat16, cooper).tflops_per_thread, 0.88 / 2);
}

TEST(MachineProbe, WithoutAProbeTheBuiltInPeak) {
  MachineSetup m;
  m.threads = 2;
  m.probe_note = "no machine probe at /nowhere";
  const PeakChoice c = choose_peak(0.0, ComputeDtype::kFloat32, m);
  const BuiltinPeak b = builtin_peak(ComputeDtype::kFloat32, this_cpu_peak_isa());
  EXPECT_DOUBLE_EQ(c.tflops, 2 * b.tflops_per_thread);
  EXPECT_FALSE(c.measured);
  EXPECT_EQ(c.gemm_ceiling_tflops, 0.0);
  EXPECT_EQ(c.source.rfind("the built-in nominal peak, ", 0), 0u) << c.source;
  EXPECT_NE(c.source.find("FLOP/cycle of " + b.isa + " at 5 GHz"), std::string::npos) << c.source;
  EXPECT_NE(c.source.find("no machine probe at /nowhere"), std::string::npos) << c.source;
  // A version-1 probe has no hardware peaks: the built-in one, and the probe's GEMM ceiling beside it.
  m.probe = machine_probe_from_json(probe_json("Some CPU"));
  m.probe->path = "/old/machine_probe.json";
  const PeakChoice v1 = choose_peak(0.0, ComputeDtype::kFloat32, m);
  EXPECT_DOUBLE_EQ(v1.tflops, 2 * b.tflops_per_thread);
  EXPECT_NE(v1.source.find("the machine probe at /old/machine_probe.json has no hardware peaks"), std::string::npos)
      << v1.source;
  EXPECT_DOUBLE_EQ(v1.gemm_ceiling_tflops, 0.26);
}

TEST(MachineProbe, AppliedOnlyForThisCpuAndSetsTheBackendUnlessGfGemmIsSet) {
  const KeepBackend keep;
  const char* env = std::getenv("GF_GEMM");
  const bool env_set = env != nullptr && *env != '\0';
  const std::string cpu = cpu_model_name();
  for (const std::string backend : {"eigen", "blas"}) {
    const std::string path = write_temp("probe_" + backend + ".json", probe_json(cpu, backend).dump());
    const MachineSetup m = apply_machine_probe_at(path, 2);
    ASSERT_TRUE(m.probe.has_value()) << m.probe_note;
    EXPECT_EQ(m.probe->path, path);
    if (env_set) {
      EXPECT_EQ(m.gemm_backend, gemm_backend_name(gemm_backend()));
      EXPECT_NE(m.gemm_reason.find("GF_GEMM="), std::string::npos) << m.gemm_reason;
    } else {
      EXPECT_EQ(m.gemm_backend, backend);
      EXPECT_EQ(gemm_backend_name(gemm_backend()), backend);
      EXPECT_NE(m.gemm_reason.find("machine_probe measured blas 200 and eigen 250 GFLOP/s"), std::string::npos)
          << m.gemm_reason;
    }
  }
  // Another CPU's probe is ignored, and so is an unreadable one; the backend stays as it was.
  gemm_set_backend(keep.before);
  const std::string other = write_temp("other.json", probe_json("Another CPU 9000").dump());
  MachineSetup m = apply_machine_probe_at(other, 2);
  EXPECT_FALSE(m.probe.has_value());
  EXPECT_NE(m.probe_note.find("measured on \"Another CPU 9000\""), std::string::npos) << m.probe_note;
  EXPECT_EQ(gemm_backend(), keep.before);
  // A probe of other OpenBLAS kernels (OPENBLAS_CORETYPE) is ignored; one of these kernels is taken.
  nlohmann::json kernels = probe_json(cpu);
  kernels["blas_core"] = "NotAnOpenBlasCore";
  m = apply_machine_probe_at(write_temp("kernels.json", kernels.dump()), 2);
  EXPECT_FALSE(m.probe.has_value());
  EXPECT_NE(m.probe_note.find("measured OpenBLAS's NotAnOpenBlasCore kernels, this run has its " + blas_core_name()),
            std::string::npos)
      << m.probe_note;
  kernels["blas_core"] = blas_core_name();
  m = apply_machine_probe_at(write_temp("kernels.json", kernels.dump()), 2);
  ASSERT_TRUE(m.probe.has_value()) << m.probe_note;
  EXPECT_EQ(m.probe->blas_core, blas_core_name());
  gemm_set_backend(keep.before);
  m = apply_machine_probe_at(write_temp("bad.json", "{not json"), 2);
  EXPECT_FALSE(m.probe.has_value());
  EXPECT_NE(m.probe_note.find("unreadable"), std::string::npos) << m.probe_note;
  m = apply_machine_probe_at("/nonexistent/machine_probe.json", 2);
  EXPECT_FALSE(m.probe.has_value());
  EXPECT_NE(m.probe_note.find("no machine probe at /nonexistent/machine_probe.json"), std::string::npos);
  if (!env_set) {
    EXPECT_NE(m.gemm_reason.find("the built-in default"), std::string::npos) << m.gemm_reason;
  }
}

// Version 2: oneDNN's fp32 figure, onednn as the chosen backend, and the hardware's limits, which
// the MFU divides by (the GEMM ceiling named beside them).
TEST(MachineProbe, VersionTwoFieldsAndTheHardwarePeakInTheMfuSource) {
  nlohmann::json j = probe_v2_json("Some CPU");
  j["fp32_backend"] = gemm_backend_available(GemmBackend::kOnednn) ? "onednn" : "blas";
  j["gflops"]["onednn"] = 390.0;
  MachineSetup m;
  m.threads = 1;
  m.probe = machine_probe_from_json(j);
  EXPECT_DOUBLE_EQ(m.probe->gflops_onednn, 390.0);
  EXPECT_DOUBLE_EQ(m.probe->fma_tflops_fp32, 0.43);
  EXPECT_DOUBLE_EQ(m.probe->fma_tflops_bf16, 0.87);
  EXPECT_DOUBLE_EQ(m.probe->triad_gbs, 70.3);
  EXPECT_EQ(m.probe->fma_isa_bf16, "avx512_bf16");
  PeakChoice c = choose_peak(0.0, ComputeDtype::kFloat32, m);
  EXPECT_DOUBLE_EQ(c.tflops, 0.215);  // the FMA peak, scaled to one of the probe's two threads
  EXPECT_DOUBLE_EQ(c.gemm_ceiling_tflops, 0.13);
  EXPECT_NE(describe_peak(c).find("the GEMM ceiling (machine_probe's fastest fp32 product, "), std::string::npos)
      << describe_peak(c);
  c = choose_peak(0.0, ComputeDtype::kBFloat16, m);
  EXPECT_DOUBLE_EQ(c.tflops, 0.435);
  // A version-1 file has none of them: onednn unmeasured, the peak the built-in one.
  m.probe = machine_probe_from_json(probe_json("Some CPU"));
  EXPECT_EQ(m.probe->gflops_onednn, 0.0);
  EXPECT_FALSE(choose_peak(0.0, ComputeDtype::kFloat32, m).measured);
}

// A probe that had under kQuietCoresShare of the cores measured other processes' leftovers: its peaks (here a
// seventh of the hardware's, as a 2-vCPU Xeon's probe beside four compilers measured) are not divided by, or a run
// on the quiet machine would log MFU far above 100%; the run takes the built-in nominal peak and says why. A file
// without the field (older tools) counts as quiet.
TEST(MachineProbe, ABusyProbesPeaksAreNotDividedBy) {
  nlohmann::json j = probe_v2_json("Some CPU");
  MachineSetup m;
  m.threads = 2;
  m.probe = machine_probe_from_json(j);
  EXPECT_DOUBLE_EQ(m.probe->cores_share, 1.0);
  EXPECT_TRUE(choose_peak(0.0, ComputeDtype::kFloat32, m).measured);
  j["cores_share"] = 0.79;
  m.probe = machine_probe_from_json(j);
  m.probe->path = "/busy/machine_probe.json";
  EXPECT_DOUBLE_EQ(m.probe->cores_share, 0.79);
  for (ComputeDtype dt : {ComputeDtype::kFloat32, ComputeDtype::kBFloat16}) {
    const PeakChoice c = choose_peak(0.0, dt, m);
    EXPECT_FALSE(c.measured);
    EXPECT_DOUBLE_EQ(c.tflops, 2 * builtin_peak(dt, this_cpu_peak_isa()).tflops_per_thread);
    EXPECT_NE(c.source.find("the machine probe at /busy/machine_probe.json had 0.79 of the cores (other processes ran "
                            "while it measured), so its peaks are too low to divide by: re-run build/bin/machine_probe "
                            "on a quiet machine"),
              std::string::npos)
        << c.source;
  }
  j["cores_share"] = kQuietCoresShare;
  m.probe = machine_probe_from_json(j);
  EXPECT_TRUE(choose_peak(0.0, ComputeDtype::kFloat32, m).measured);
}

// A CPU whose bf16 products are slower than its fp32 ones (AVX-512 BF16 without AMX: 0.161 against 0.314
// TFLOP/s measured on a 2-vCPU Xeon VM, CPU model 207) gets a warning under bf16 compute; others do not.
TEST(MachineProbe, Bf16SlowerThanFp32IsSaidUnderBf16Only) {
  MachineSetup m;
  m.threads = 2;
  EXPECT_EQ(bf16_slower_note(ComputeDtype::kBFloat16, m), "");  // no probe: nothing measured to say
  nlohmann::json j = probe_json("Some Xeon", "onednn");
  j["peak_tflops"] = {{"float32", 0.314}, {"bfloat16", 0.161}};
  m.probe = machine_probe_from_json(j);
  const std::string note = bf16_slower_note(ComputeDtype::kBFloat16, m);
  EXPECT_NE(note.find("bf16 products at 0.161 TFLOP/s against 0.314 for fp32 (onednn) at 2 thread(s) on Some Xeon"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("compute_dtype: float32"), std::string::npos) << note;
  EXPECT_EQ(note.find("hardware's peaks"), std::string::npos) << note;  // a version-1 file has none
  m.probe->fma_tflops_bf16 = 0.166;
  m.probe->fma_tflops_fp32 = 0.34;
  m.probe->fma_isa_bf16 = "avx512_bf16";
  m.probe->fma_isa_fp32 = "avx512f";
  EXPECT_NE(bf16_slower_note(ComputeDtype::kBFloat16, m).find("avx512_bf16 0.166 TFLOP/s, avx512f 0.34"),
            std::string::npos);
  EXPECT_EQ(bf16_slower_note(ComputeDtype::kFloat32, m), "");
  EXPECT_EQ(bf16_slower_note(ComputeDtype::kFloat16, m), "");
  m.probe->peak_tflops_bf16 = 0.7;  // faster (AVX-512 BF16 on an EPYC, AMX on a Xeon): nothing to say
  EXPECT_EQ(bf16_slower_note(ComputeDtype::kBFloat16, m), "");
  m.probe->peak_tflops_bf16 = 0.0;  // built without oneDNN: bf16 runs the fp32 GEMM
  EXPECT_EQ(bf16_slower_note(ComputeDtype::kBFloat16, m), "");
}

TEST(RunInfo, HashTimeAndCommit) {
  EXPECT_EQ(fnv1a64_hex(""), "cbf29ce484222325");
  EXPECT_EQ(fnv1a64_hex("a"), "af63dc4c8601ec8c");
  EXPECT_NE(fnv1a64_hex("seed: 1\n"), fnv1a64_hex("seed: 2\n"));
  const std::string t = iso8601_utc_now();
  EXPECT_EQ(t.size(), 20u) << t;
  EXPECT_EQ(t[10], 'T');
  EXPECT_EQ(t.back(), 'Z');
  EXPECT_FALSE(std::string(build_git_commit()).empty());
}

}  // namespace
}  // namespace gf
