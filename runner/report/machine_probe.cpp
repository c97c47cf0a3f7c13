#include "runner/report/machine_probe.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <omp.h>

#include "core/math/gemm.h"
#include "runner/report/run_info.h"

extern "C" char* openblas_get_corename(void);  // OpenBLAS's (cblas.h is gf_core's private include)

namespace gf {

namespace {

template <typename T>
T field(const nlohmann::json& j, const char* path_a, const char* path_b = nullptr) {
  const nlohmann::json* v = &j;
  for (const char* key : {path_a, path_b}) {
    if (key == nullptr) break;
    if (!v->is_object() || !v->contains(key))
      throw std::runtime_error(fmt::format("no field \"{}{}{}\"", path_a, path_b ? "." : "", path_b ? path_b : ""));
    v = &(*v)[key];
  }
  try {
    return v->get<T>();
  } catch (const std::exception&) {
    throw std::runtime_error(fmt::format("field \"{}{}{}\" has the wrong type", path_a, path_b ? "." : "",
                                         path_b ? path_b : ""));
  }
}

std::string trim_number(double v) { return fmt::format("{:.3g}", v); }

}  // namespace

std::string blas_core_name() {
  const char* c = openblas_get_corename();
  return c != nullptr ? c : "unknown";
}

MachineProbe machine_probe_from_json(const nlohmann::json& j) {
  MachineProbe p;
  p.cpu = field<std::string>(j, "cpu");
  if (j.contains("blas_core")) p.blas_core = field<std::string>(j, "blas_core");
  p.date = field<std::string>(j, "date");
  p.threads = field<int>(j, "threads");
  p.fp32_backend = field<std::string>(j, "fp32_backend");
  if (p.fp32_backend != "blas" && p.fp32_backend != "eigen" && p.fp32_backend != "onednn")
    throw std::runtime_error("fp32_backend is \"" + p.fp32_backend + "\", not blas, eigen or onednn");
  if (!gemm_backend_available(gemm_backend_from_name(p.fp32_backend)))
    throw std::runtime_error("fp32_backend is " + p.fp32_backend + ", which this build lacks");
  if (p.threads <= 0) throw std::runtime_error("threads must be > 0");
  p.gflops_blas = field<double>(j, "gflops", "blas");
  p.gflops_eigen = field<double>(j, "gflops", "eigen");
  p.peak_tflops_fp32 = field<double>(j, "peak_tflops", "float32");
  if (!(p.peak_tflops_fp32 > 0)) throw std::runtime_error("peak_tflops.float32 must be > 0");
  if (j.contains("gflops") && j["gflops"].contains("bf16") && j["gflops"]["bf16"].is_number())
    p.gflops_bf16 = j["gflops"]["bf16"].get<double>();
  if (j.contains("peak_tflops") && j["peak_tflops"].contains("bfloat16") && j["peak_tflops"]["bfloat16"].is_number())
    p.peak_tflops_bf16 = j["peak_tflops"]["bfloat16"].get<double>();
  if (j["gflops"].contains("onednn") && j["gflops"]["onednn"].is_number()) p.gflops_onednn = j["gflops"]["onednn"].get<double>();
  if (j.contains("limits") && j["limits"].is_object()) {
    const nlohmann::json& l = j["limits"];
    auto number = [&](const char* k) { return l.contains(k) && l[k].is_number() ? l[k].get<double>() : 0.0; };
    auto text = [&](const char* k) { return l.contains(k) && l[k].is_string() ? l[k].get<std::string>() : std::string(); };
    p.fma_tflops_fp32 = number("fp32_fma_tflops");
    p.fma_tflops_bf16 = number("bf16_tflops");
    p.triad_gbs = number("triad_gbs");
    p.fma_isa_fp32 = text("fp32_fma_isa");
    p.fma_isa_bf16 = text("bf16_isa");
  }
  if (j.contains("cores_share") && j["cores_share"].is_number()) p.cores_share = j["cores_share"].get<double>();
  return p;
}

std::string machine_probe_path_for(const std::string& exe) {
  const std::filesystem::path dir = std::filesystem::path(exe).parent_path();
  return (dir / ".." / "machine_probe.json").lexically_normal().string();
}

int ranks_on_this_host() {
  const char* e = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return e && std::atoi(e) > 0 ? std::atoi(e) : 1;
}

std::string machine_probe_path() {
  if (const char* e = std::getenv("GF_MACHINE_PROBE"); e && *e) return std::string(e) == "off" ? std::string() : e;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "machine_probe.json";
  return machine_probe_path_for(exe.string());
}

MachineSetup apply_machine_probe(int threads) { return apply_machine_probe_at(machine_probe_path(), threads); }

std::optional<MachineProbe> machine_probe_for_this_cpu(const std::string& path, std::string* note) {
  std::string why;
  std::optional<MachineProbe> out;
  const std::string cpu = cpu_model_name();
  if (path.empty()) {
    why = "GF_MACHINE_PROBE=off";
  } else if (std::ifstream in(path); !in) {
    why = "no machine probe at " + path + " (run build/bin/machine_probe, or set GF_MACHINE_PROBE)";
  } else {
    try {
      MachineProbe p = machine_probe_from_json(nlohmann::json::parse(in));
      p.path = path;
      if (p.cpu != cpu)
        why = fmt::format("the machine probe at {} was measured on \"{}\", this CPU is \"{}\": ignored "
                          "(re-run build/bin/machine_probe here)", path, p.cpu, cpu);
      else if (!p.blas_core.empty() && p.blas_core != blas_core_name())
        why = fmt::format("the machine probe at {} measured OpenBLAS's {} kernels, this run has its {} "
                          "(OPENBLAS_CORETYPE): ignored (re-run build/bin/machine_probe in this environment)",
                          path, p.blas_core, blas_core_name());
      else
        out = std::move(p);
    } catch (const std::exception& e) {
      why = fmt::format("the machine probe at {} is unreadable ({}): ignored (re-run build/bin/machine_probe)", path,
                        e.what());
    }
  }
  if (note) *note = why;
  return out;
}

MachineSetup apply_machine_probe_at(const std::string& path, int threads) {
  MachineSetup m;
  m.cpu = cpu_model_name();
  m.threads = threads;
  m.probe_path = path;
  m.probe = machine_probe_for_this_cpu(path, &m.probe_note);
  const char* env = std::getenv("GF_GEMM");
  const bool from_env = env != nullptr && *env != '\0';
  if (!from_env && m.probe) gemm_set_backend(gemm_backend_from_name(m.probe->fp32_backend));
  m.gemm_backend = gemm_backend_name(gemm_backend());  // throws for an unknown GF_GEMM
  const std::string measured =
      m.probe ? fmt::format("machine_probe measured blas{} {}{} eigen {}{} GFLOP/s at {} thread(s) on {} ({})",
                            m.probe->blas_core.empty() ? std::string() : " (" + m.probe->blas_core + ")",
                            trim_number(m.probe->gflops_blas), m.probe->gflops_onednn > 0 ? "," : " and",
                            trim_number(m.probe->gflops_eigen),
                            m.probe->gflops_onednn > 0 ? " and onednn " + trim_number(m.probe->gflops_onednn)
                                                       : std::string(),
                            m.probe->threads, m.probe->cpu, m.probe->date)
              : std::string();
  if (from_env)
    m.gemm_reason = fmt::format("GF_GEMM={} in the environment{}", env, m.probe ? "; " + measured : std::string());
  else if (m.probe)
    m.gemm_reason = "the faster one here: " + measured;
  else
    m.gemm_reason = "the built-in default (" + m.probe_note + ")";
  return m;
}

PeakIsa this_cpu_peak_isa() {
  PeakIsa isa;
#if defined(__x86_64__) || defined(__i386__)
  isa.avx512f = __builtin_cpu_supports("avx512f");
  isa.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  isa.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  isa.amx_bf16 = __builtin_cpu_supports("amx-bf16");
#endif
  return isa;
}

BuiltinPeak builtin_peak(ComputeDtype compute_dtype, const PeakIsa& isa) {
  BuiltinPeak b;
  if (compute_dtype == ComputeDtype::kBFloat16 && isa.amx_bf16) {
    b.flop_per_cycle = 1024.0;
    b.isa = "amx_bf16";
  } else if (compute_dtype == ComputeDtype::kBFloat16 && isa.avx512_bf16) {
    b.flop_per_cycle = 128.0;
    b.isa = "avx512_bf16";
  } else if (isa.avx512f) {
    b.flop_per_cycle = 64.0;
    b.isa = "avx512f";
  } else if (isa.avx2_fma) {
    b.flop_per_cycle = 32.0;
    b.isa = "avx2";
  } else {
    b.flop_per_cycle = 16.0;
    b.isa = "sse";
  }
  b.tflops_per_thread = b.flop_per_cycle * kBuiltinPeakGhz * 1e9 / 1e12;
  return b;
}

PeakChoice choose_peak(double config_peak, ComputeDtype compute_dtype, const MachineSetup& machine) {
  PeakChoice c;
  const bool bf16 = compute_dtype == ComputeDtype::kBFloat16;
  // The probe's GEMM ceiling: a figure of its own beside the peak, whichever peak is chosen.
  if (machine.probe) {
    const MachineProbe& p = *machine.probe;
    const int threads = machine.threads > 0 ? machine.threads : p.threads;
    const bool bf16_gemm = bf16 && p.peak_tflops_bf16 > 0.0;
    c.gemm_ceiling_tflops = (bf16_gemm ? p.peak_tflops_bf16 : p.peak_tflops_fp32) * threads / p.threads;
    c.gemm_ceiling_what = bf16_gemm ? "machine_probe's fastest bf16 product, oneDNN"
                                    : "machine_probe's fastest fp32 product, " + p.fp32_backend;
  }
  if (config_peak > 0.0) {
    c.tflops = config_peak;
    c.source = "set by runner_config.peak_tflops";
    return c;
  }
  const char* fp16_note = compute_dtype == ComputeDtype::kFloat16 ? "; float16 runs on the fp32 GEMM" : "";
  // A hardware peak below a rate the same probe reached (its fastest fp32 product) was measured while something else
  // ran, whatever share of the cores the probe saw: not a peak to divide by.
  const bool consistent = machine.probe && machine.probe->fma_tflops_fp32 >= machine.probe->peak_tflops_fp32;
  if (machine.probe && machine.probe->fma_tflops_fp32 > 0.0 && machine.probe->cores_share >= kQuietCoresShare &&
      consistent) {
    const MachineProbe& p = *machine.probe;
    const int threads = machine.threads > 0 ? machine.threads : p.threads;
    const bool bf16_hw = bf16 && p.fma_tflops_bf16 > 0.0;
    const double at_probe = bf16_hw ? p.fma_tflops_bf16 : p.fma_tflops_fp32;
    c.tflops = at_probe * threads / p.threads;
    c.measured = true;
    const std::string what =
        bf16_hw ? fmt::format("the bf16 peak ({})", p.fma_isa_bf16)
                : fmt::format("the FMA peak (fp32, {}{}{})", p.fma_isa_fp32,
                              bf16 ? "; this CPU has no bf16 instructions (AMX, AVX-512 BF16): bfloat16 runs on fp32 FMAs"
                                   : "",
                              fp16_note);
    c.source = fmt::format("{} measured by machine_probe on {} ({}){}", what, p.cpu, p.date,
                           threads == p.threads ? std::string()
                                                : fmt::format(", {} TFLOP/s at the probe's {} thread(s) scaled to "
                                                              "this rank's {}", trim_number(at_probe), p.threads, threads));
    return c;
  }
  // No probe's hardware peak: the nominal one of this CPU's instructions.
  const int threads = machine.threads > 0 ? machine.threads : std::max(1, omp_get_max_threads());
  const BuiltinPeak b = builtin_peak(compute_dtype, this_cpu_peak_isa());
  c.tflops = b.tflops_per_thread * threads;
  std::string why = machine.probe_note;
  if (machine.probe && machine.probe->fma_tflops_fp32 > 0.0 && machine.probe->cores_share >= kQuietCoresShare)
    why = fmt::format("the machine probe at {} measured an FMA peak ({} TFLOP/s) below its own fastest fp32 product "
                      "({} TFLOP/s): other processes ran while it measured, so its peaks are too low to divide by: "
                      "re-run build/bin/machine_probe on a quiet machine",
                      machine.probe->path, trim_number(machine.probe->fma_tflops_fp32),
                      trim_number(machine.probe->peak_tflops_fp32));
  else if (machine.probe && machine.probe->fma_tflops_fp32 > 0.0)
    why = fmt::format("the machine probe at {} had {} of the cores (other processes ran while it measured), so its "
                      "peaks are too low to divide by: re-run build/bin/machine_probe on a quiet machine",
                      machine.probe->path, trim_number(machine.probe->cores_share));
  else if (machine.probe)
    why = fmt::format("the machine probe at {} has no hardware peaks (a version-1 file): re-run build/bin/machine_probe",
                      machine.probe->path);
  c.source = fmt::format("the built-in nominal peak, {} TFLOP/s per thread ({} FLOP/cycle of {} at {} GHz, above "
                         "what a core reaches{}) x {} thread(s), since no machine probe measured this CPU's ({})",
                         trim_number(b.tflops_per_thread), b.flop_per_cycle, b.isa, kBuiltinPeakGhz, fp16_note, threads,
                         why);
  return c;
}

std::string describe_peak(const PeakChoice& peak) {
  std::string s = fmt::format("{:.4g} TFLOP/s per rank, {}", peak.tflops, peak.source);
  if (peak.gemm_ceiling_tflops > 0.0)
    s += fmt::format("; the GEMM ceiling ({}) is {} TFLOP/s per rank, {:.0f}% of that peak", peak.gemm_ceiling_what,
                     trim_number(peak.gemm_ceiling_tflops), 100.0 * peak.gemm_ceiling_tflops / peak.tflops);
  return s;
}

std::string bf16_slower_note(ComputeDtype compute_dtype, const MachineSetup& machine) {
  if (compute_dtype != ComputeDtype::kBFloat16 || !machine.probe) return {};
  const MachineProbe& p = *machine.probe;
  if (!(p.peak_tflops_bf16 > 0.0) || p.peak_tflops_bf16 >= p.peak_tflops_fp32) return {};
  const std::string hw =
      p.fma_tflops_bf16 > 0.0 && p.fma_tflops_fp32 > 0.0
          ? fmt::format("; the hardware's peaks (machine_probe's own kernels): {} {} TFLOP/s, {} {}",
                        p.fma_isa_bf16, trim_number(p.fma_tflops_bf16), p.fma_isa_fp32, trim_number(p.fma_tflops_fp32))
          : std::string();
  return fmt::format("bfloat16 computes slower than float32 on this CPU: machine_probe measured bf16 products at {} "
                     "TFLOP/s against {} for fp32 ({}) at {} thread(s) on {} ({}){}. Here bfloat16 saves activation "
                     "memory, not time: model.model_config.compute_dtype: float32 runs the products faster",
                     trim_number(p.peak_tflops_bf16), trim_number(p.peak_tflops_fp32), p.fp32_backend, p.threads, p.cpu,
                     p.date, hw);
}

}  // namespace gf
