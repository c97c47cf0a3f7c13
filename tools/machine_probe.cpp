// machine_probe: times this machine's GEMMs once, for the runs to read (runner/report/machine_probe.h).
// fp32 products of the model's typical shapes on every fp32 backend (OpenBLAS, Eigen, oneDNN's
// sgemm when built with it) and, when built with oneDNN, the bf16 matmul (on inputs already in
// bf16, the primitive alone), at one thread count, in a few hundred ms. Every fp32 backend's
// products are checked against exact ones first (a backend with a wrong kernel is never chosen).
// Then the hardware's limits from our own kernels (core/math/cpu_peak.h: the fp32 FMA peak, the
// AVX-512 BF16 and AMX peaks, the triad bandwidth; about a second). Writes a JSON file: the CPU,
// the threads, GFLOP/s per backend (FLOP-weighted over the products) and per product, the fastest
// correct fp32 backend (the runs' default), the GEMM ceilings for fp32 and bf16 (the fastest
// product; the runs' MFU peak) and the limits.
//
//   machine_probe [--out FILE] [--threads N] [--budget-ms 500] [--shapes NN:2048x1024x256,...]
//                 [--if-stale] [--print]
//
// --out: default where the runs look, $GF_MACHINE_PROBE or <this binary's dir>/../machine_probe.json
// (build/machine_probe.json). --threads: default $OMP_NUM_THREADS, else every core (one rank per
// host). --if-stale: do nothing when the file exists, parses and names this CPU and the OpenBLAS
// kernels this environment selects (OPENBLAS_CORETYPE; scripts/setup.sh), and had kQuietCoresShare (0.8)
// of the cores. Like gridformer, the probe
// first sets the environment defaults of runner/cli/env_defaults.h (the OpenMP spin, and OpenBLAS's
// kernels where it took a lower family than the CPU runs), so it measures what a run gets.
// --shapes: op:MxNxK with op NN, NT, TN or TT (C[M,N] = op(A) op(B), dense, alpha 1, beta 0).
//
// GF_MACHINE_PROBE_FAULT=<backend> adds 1 to one entry of that backend's products before the check
// (tests/integration/machine_probe.sh shows such a backend is refused).
//
// Timing: one untimed call per product and backend (first-call work: oneDNN primitives, packing
// buffers; it also sets the pace), then up to 3 rounds in which each backend in turn (order
// rotating) runs the product enough times to fill its share of the budget; a figure is the best
// round (a ceiling, and the figure least lowered by other processes' bursts). The wall clock is
// used, so other processes on the cores lower every figure: the file records the load average and
// the share of the cores the probe had (CPU time / (wall x threads); spinning threads count, so
// it is an upper bound); below 0.8 (kQuietCoresShare) it measures again (at most 3 attempts, a second
// apart, keeping the one with the largest share: "attempts" in the file), warns if none reached 0.8, and
// re-running it replaces the file. A run divides by no peak of a file below 0.8 (runner/report/machine_probe.h).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "core/math/cpu_peak.h"
#include "core/math/gemm.h"
#include "core/math/gemm_bf16.h"
#include "runner/cli/env_defaults.h"
#include "runner/report/machine_probe.h"
#include "runner/report/run_info.h"

namespace {

using gf::Trans;

struct Shape {
  Trans ta = Trans::kNo, tb = Trans::kNo;
  int64_t M = 0, N = 0, K = 0;
  std::string what;
  std::string op() const { return std::string(ta == Trans::kYes ? "T" : "N") + (tb == Trans::kYes ? "T" : "N"); }
  std::string text() const { return fmt::format("{}:{}x{}x{}", op(), M, N, K); }
  double flops() const { return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K); }
};

// The model's products (bench/bench_gemm.cpp lists every product of a step; these are the large
// ones that make up most of its FLOPs; attention's small per-head products are left out).
std::vector<Shape> default_shapes() {
  const Trans n = Trans::kNo, t = Trans::kYes;
  return {{n, n, 2048, 1024, 256, "gpt2-tiny mlp.c_fc forward"},
          {n, t, 2048, 256, 1024, "gpt2-tiny mlp.c_fc input gradient"},
          {t, n, 256, 1024, 2048, "gpt2-tiny mlp.c_fc weight gradient"},
          {n, n, 1024, 3072, 768, "gpt2-124M mlp.c_fc forward"},
          {n, t, 2048, 4096, 256, "4096 columns of gpt2-tiny's LM-head logits"}};
}

Shape parse_shape(const std::string& s) {
  static const std::regex pattern(R"(^\s*([NT])([NT]):(\d{1,6})x(\d{1,6})x(\d{1,6})\s*$)");
  std::smatch m;
  if (!std::regex_match(s, m, pattern))
    throw std::runtime_error("--shapes: \"" + s + "\" is not op:MxNxK with op NN, NT, TN or TT (e.g. NN:1024x3072x768)");
  Shape sh{m[1] == "T" ? Trans::kYes : Trans::kNo, m[2] == "T" ? Trans::kYes : Trans::kNo, std::stoll(m[3]),
           std::stoll(m[4]), std::stoll(m[5]), "given"};
  if (sh.M <= 0 || sh.N <= 0 || sh.K <= 0) throw std::runtime_error("--shapes: \"" + s + "\" has a zero size");
  return sh;
}

enum Backend { kBlas, kEigen, kOnednn, kBf16, kBackends };
const char* const kName[] = {"blas", "eigen", "onednn", "bf16"};
bool is_fp32(Backend be) { return be != kBf16; }

struct Operands {
  std::vector<float> a, b, c;
  std::vector<gf::bf16> a16, b16;
  int64_t lda = 0, ldb = 0;
};

// Values in [-0.1, 0.1) from a multiplicative hash of the index (cheaper than a random generator;
// a GEMM's speed does not depend on its values, as long as they are normal floats).
void fill(std::vector<float>& v, uint32_t seed) {
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t h = (static_cast<uint32_t>(i) + seed) * 2654435761u;
    v[i] = (static_cast<float>(h >> 8) / 16777216.0f - 0.5f) * 0.2f;
  }
}

Operands make_operands(const Shape& s) {
  Operands o;
  o.a.resize(static_cast<size_t>(s.M * s.K));
  o.b.resize(static_cast<size_t>(s.K * s.N));
  o.c.assign(static_cast<size_t>(s.M * s.N), 0.0f);
  fill(o.a, 1);
  fill(o.b, 2);
  for (float x : o.a) o.a16.push_back(gf::float_to_bf16(x));
  for (float x : o.b) o.b16.push_back(gf::float_to_bf16(x));
  o.lda = s.ta == Trans::kYes ? s.M : s.K;  // A stored M x K, or K x M when transposed
  o.ldb = s.tb == Trans::kYes ? s.K : s.N;  // B stored K x N, or N x K when transposed
  return o;
}

gf::GemmBackend fp32_backend(Backend be) {
  return be == kBlas ? gf::GemmBackend::kBlas : be == kEigen ? gf::GemmBackend::kEigen : gf::GemmBackend::kOnednn;
}

void call(Backend be, const Shape& s, Operands& o) {
  if (be == kBf16)
    gf::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, 1.0f, o.a16.data(), o.lda, o.b16.data(), o.ldb, 0.0f, o.c.data(), s.N);
  else
    gf::gemm(fp32_backend(be), s.ta, s.tb, s.M, s.N, s.K, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
             o.c.data(), s.N);
}

// The check every fp32 backend passes before it may be chosen (some of Debian's OpenBLAS kernels
// compute wrong products on some CPUs): entries of C against a double-precision dot product of the
// same fp32 inputs. Any summation order of a length-K fp32 dot product is within
// gamma_K * sum_k |a_k b_k| of the exact value, gamma_K = K u / (1 - K u), u = 2^-24 (Higham,
// "Accuracy and Stability of Numerical Algorithms", 3.1; FMAs only tighten it), and the double
// reference is exact to far below that, so an entry outside the bound is a wrong kernel, not
// rounding. Checked: `samples` entries spread over C (every corner included).
struct Check {
  bool ok = true;
  double worst_ratio = 0.0;  // max |C - exact| / bound over the entries checked
  std::string where;         // the first entry out of bounds
};

Check check_product(const Shape& s, const Operands& o, int samples) {
  Check r;
  const double u = std::ldexp(1.0, -24), gamma = s.K * u / (1.0 - s.K * u);
  auto a_at = [&](int64_t i, int64_t k) { return s.ta == Trans::kYes ? o.a[k * o.lda + i] : o.a[i * o.lda + k]; };
  auto b_at = [&](int64_t k, int64_t j) { return s.tb == Trans::kYes ? o.b[j * o.ldb + k] : o.b[k * o.ldb + j]; };
  for (int t = 0; t < samples; ++t) {
    // corners first, then a multiplicative-hash spread
    const uint64_t h = static_cast<uint64_t>(t) * 11400714819323198485ull;
    const int64_t i = t == 0 || t == 1 ? 0 : t == 2 || t == 3 ? s.M - 1 : static_cast<int64_t>(h % s.M);
    const int64_t j = t == 0 || t == 2 ? 0 : t == 1 || t == 3 ? s.N - 1 : static_cast<int64_t>((h >> 32) % s.N);
    double exact = 0.0, mag = 0.0;
    for (int64_t k = 0; k < s.K; ++k) {
      const double p = static_cast<double>(a_at(i, k)) * static_cast<double>(b_at(k, j));
      exact += p;
      mag += std::fabs(p);
    }
    const double err = std::fabs(static_cast<double>(o.c[i * s.N + j]) - exact), bound = gamma * mag;
    const double ratio = bound > 0 ? err / bound : (err > 0 ? 1e30 : 0.0);
    r.worst_ratio = std::max(r.worst_ratio, ratio);
    if (!(err <= bound) && r.ok) {
      r.ok = false;
      r.where = fmt::format("C[{},{}] = {} where the exact product is {} (bound {:.3g})", i, j, o.c[i * s.N + j], exact,
                            bound);
    }
  }
  return r;
}

// Odd sizes that reach every kernel's edge handling, in all four transposes.
std::vector<Shape> check_shapes() {
  std::vector<Shape> v;
  for (const Trans ta : {Trans::kNo, Trans::kYes})
    for (const Trans tb : {Trans::kNo, Trans::kYes}) v.push_back({ta, tb, 67, 131, 259, "edge check"});
  return v;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double seconds_per_call(Backend be, const Shape& s, Operands& o, int reps) {
  const double t0 = now();
  for (int r = 0; r < reps; ++r) call(be, s, o);
  return (now() - t0) / reps;
}

double load_average() {
  double l[3] = {0, 0, 0};
  return getloadavg(l, 3) < 1 ? -1.0 : l[0];
}

nlohmann::json probe(const std::vector<Shape>& shapes, int threads, double budget_ms) {
  std::vector<Backend> backends = {kBlas, kEigen};
  if (gf::gemm_backend_available(gf::GemmBackend::kOnednn)) backends.push_back(kOnednn);
  if (gf::gemm_bf16_available()) backends.push_back(kBf16);
  const double wall0 = now(), load0 = load_average();
  std::vector<Operands> ops;
  std::vector<std::vector<double>> pace(shapes.size(), std::vector<double>(kBackends, 0.0));
  double pace_sum = 0.0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    ops.push_back(make_operands(shapes[i]));
    for (Backend be : backends) {
      // Untimed for the figures (first-call work: oneDNN primitives, packing buffers), but an
      // upper bound on the pace, which is all the calls-per-sample count needs.
      pace[i][be] = std::max(seconds_per_call(be, shapes[i], ops[i], 1), 1e-7);
      pace_sum += pace[i][be];
    }
  }
  // Rounds and calls per sample that fill what is left of the budget (at least one of each). The
  // share of the cores is taken over the rounds alone (making operands is single-threaded).
  const double rounds_wall0 = now(), rounds_cpu0 = cpu_seconds();
  const double left = std::max(0.0, budget_ms * 1e-3 - (now() - wall0));
  const int rounds = std::clamp(static_cast<int>(left / pace_sum), 1, 3);
  const double share = left / rounds / static_cast<double>(shapes.size() * backends.size());
  std::vector<std::vector<std::vector<double>>> t(shapes.size(), std::vector<std::vector<double>>(kBackends));
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < shapes.size(); ++i)
      for (size_t k = 0; k < backends.size(); ++k) {
        const Backend be = backends[(k + static_cast<size_t>(r)) % backends.size()];
        const int reps = std::max(1, static_cast<int>(share / pace[i][be]));
        t[i][be].push_back(seconds_per_call(be, shapes[i], ops[i], reps));
      }
  const double rounds_wall = now() - rounds_wall0, rounds_cpu = cpu_seconds() - rounds_cpu0;
  nlohmann::json j;
  double total_flops = 0.0, total_s[kBackends] = {}, best[kBackends] = {};
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    nlohmann::json row = {{"op", s.op()}, {"M", s.M}, {"N", s.N}, {"K", s.K}, {"what", s.what}};
    total_flops += s.flops();
    for (Backend be : backends) {
      const double sec = *std::min_element(t[i][be].begin(), t[i][be].end());  // the best round
      total_s[be] += sec;
      const double gf = s.flops() / sec * 1e-9;
      best[be] = std::max(best[be], gf);
      row["gflops"][kName[be]] = std::round(gf * 10) / 10;
    }
    if (gf::gemm_bf16_available())
      row["bf16_impl"] = gf::gemm_bf16_impl(s.ta, s.tb, s.M, s.N, s.K, s.ta == Trans::kYes ? s.M : s.K,
                                            s.tb == Trans::kYes ? s.K : s.N, s.N, 1.0f, 0.0f, /*bf16_inputs=*/true);
    j["products"].push_back(row);
  }
  const double wall = now() - wall0;
  auto weighted = [&](Backend be) { return std::round(total_flops / total_s[be] * 1e-9 * 10) / 10; };
  // Every fp32 backend's products checked against the exact ones (the timed shapes, sampled, and
  // the edge shapes in full rows); a backend that fails is not chosen, whatever its speed.
  std::vector<Shape> checked = shapes;
  for (const Shape& e : check_shapes()) checked.push_back(e);
  Backend winner = kBackends;
  const char* fault_env = std::getenv("GF_MACHINE_PROBE_FAULT");
  const std::string fault = fault_env != nullptr ? fault_env : "";
  for (Backend be : backends) {
    if (!is_fp32(be)) continue;
    Check worst;
    for (const Shape& s : checked) {
      Operands o = make_operands(s);
      call(be, s, o);
      if (fault == kName[be]) o.c[0] += 1.0f;  // GF_MACHINE_PROBE_FAULT: the test of this check
      const Check c = check_product(s, o, 64);
      worst.worst_ratio = std::max(worst.worst_ratio, c.worst_ratio);
      if (!c.ok && worst.ok) {
        worst.ok = false;
        worst.where = s.text() + ": " + c.where;
      }
    }
    j["check"][kName[be]] = {{"ok", worst.ok}, {"worst_error_over_bound", std::round(worst.worst_ratio * 1e4) / 1e4}};
    if (!worst.ok) {
      j["check"][kName[be]]["wrong"] = worst.where;
      std::cerr << "machine_probe: the " << kName[be] << " backend computes wrong products here (" << worst.where
                << "): it is not chosen\n";
      continue;
    }
    if (winner == kBackends || weighted(be) > weighted(winner)) winner = be;
  }
  if (winner == kBackends) throw std::runtime_error("no fp32 GEMM backend computes correct products on this machine");
  j["check_why"] = "64 entries of every product (corners included) against a double dot product of the same fp32 "
                   "inputs, bound gamma_K * sum|a b| (gamma_K = K 2^-24 / (1 - K 2^-24))";
  j["tool"] = "machine_probe";
  j["version"] = 2;
  j["cpu"] = gf::cpu_model_name();
  j["date"] = gf::iso8601_utc_now();
  j["threads"] = threads;
  j["git_commit"] = gf::build_git_commit();
  j["blas_core"] = gf::blas_core_name();
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  j["openblas_coretype_env"] = coretype != nullptr ? nlohmann::json(coretype) : nlohmann::json(nullptr);
  j["openblas_kernels"] = gf::openblas_kernels_text();
  j["gflops"] = {{"blas", weighted(kBlas)}, {"eigen", weighted(kEigen)}};
  j["gflops"]["onednn"] = gf::gemm_backend_available(gf::GemmBackend::kOnednn) ? nlohmann::json(weighted(kOnednn))
                                                                                 : nlohmann::json(nullptr);
  j["gflops"]["bf16"] = gf::gemm_bf16_available() ? nlohmann::json(weighted(kBf16)) : nlohmann::json(nullptr);
  j["fp32_backend"] = kName[winner];
  j["fp32_backend_why"] = "the highest FLOP-weighted GFLOP/s over the products (total FLOPs / total time, best "
                          "rounds) among the backends whose products passed the check";
  j["peak_tflops"] = {{"float32", std::round(best[winner]) / 1000.0}};
  j["peak_tflops"]["bfloat16"] =
      gf::gemm_bf16_available() ? nlohmann::json(std::round(best[kBf16]) / 1000.0) : nlohmann::json(nullptr);
  j["peak_why"] = "the fastest product's GFLOP/s (best round) on the fp32 backend chosen, and on oneDNN bf16 (bf16 inputs)";
  j["bf16_backend"] = gf::gemm_bf16_backend_info();
  // The hardware's limits, from our own kernels (core/math/cpu_peak.h), after the GEMMs so that
  // their figures are taken first; the bf16 peak is AMX's where the CPU has it.
  const gf::KernelPeak fma = gf::measure_fp32_fma_peak(threads, 0.15);
  const gf::KernelPeak dot = gf::measure_bf16_dot_peak(threads, 0.15);
  const gf::KernelPeak amx = gf::measure_amx_bf16_peak(threads, 0.15);
  const gf::KernelPeak triad = gf::measure_triad_bandwidth(threads, 1L << 24, 0.3);
  for (const gf::KernelPeak* k : {&fma, &dot, &amx, &triad})
    if (k->flops > 0 && k->checksum != k->expected_checksum)
      throw std::runtime_error(fmt::format("the {} kernel summed to {} where {} was due: it did not run as counted",
                                           k->isa, k->checksum, k->expected_checksum));
  const gf::KernelPeak& bf16_peak = amx.flops > 0 ? amx : dot;
  auto tf = [](const gf::KernelPeak& k) { return k.flops > 0 ? nlohmann::json(std::round(k.flops * 1e-9) / 1000.0) : nlohmann::json(nullptr); };
  j["limits"] = {{"fp32_fma_tflops", tf(fma)},
                 {"fp32_fma_isa", fma.isa},
                 {"bf16_tflops", tf(bf16_peak)},
                 {"bf16_isa", bf16_peak.isa},
                 {"avx512_bf16_tflops", tf(dot)},
                 {"amx_bf16_tflops", tf(amx)},
                 {"triad_gbs", std::round(triad.flops * 1e-9 * 10) / 10},
                 {"why", "our register-blocked kernels on every thread at once (core/math/cpu_peak.h): independent "
                         "vector FMAs, vdpbf16ps, AMX tdpbf16ps; STREAM's triad over 3 x 64 MiB counting 12 bytes "
                         "per element; best of 3"}};
  if (!fma.why_not.empty()) j["limits"]["fp32_fma_why_not"] = fma.why_not;
  if (!dot.why_not.empty()) j["limits"]["avx512_bf16_why_not"] = dot.why_not;
  if (!amx.why_not.empty()) j["limits"]["amx_why_not"] = amx.why_not;
  j["rounds"] = rounds;
  j["budget_ms"] = budget_ms;
  j["elapsed_ms"] = std::round(wall * 1000);
  j["load_average_start"] = load0;
  j["load_average_end"] = load_average();
  j["cores_share"] = std::round(rounds_cpu / (rounds_wall * threads) * 100) / 100;
  return j;
}

int default_threads() {
  if (const char* e = std::getenv("OMP_NUM_THREADS"); e && std::atoi(e) > 0) return std::atoi(e);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// True when `path` holds a probe that parses and names this CPU and OpenBLAS's kernels here.
bool up_to_date(const std::string& path) {
  std::ifstream in(path);
  if (!in) return false;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    const gf::MachineProbe p = gf::machine_probe_from_json(j);
    // version 1 files lack oneDNN's fp32 figure and the hardware's limits: measured again
    // and so is one measured on a busy machine (its peaks too low for a run to divide by)
    return j.value("version", 0) >= 2 && p.cpu == gf::cpu_model_name() && p.blas_core == gf::blas_core_name() &&
           p.cores_share >= gf::kQuietCoresShare;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  gf::default_environment(argv);  // the OpenMP wait and OpenBLAS kernels a gridformer run gets (may re-execute)
  CLI::App app{"machine_probe: times the fp32 GEMM backends and the bf16 matmul on the model's products and writes "
               "the result where gridformer runs read it (the fp32 backend default and the MFU peak)"};
  std::string out = gf::machine_probe_path();
  int threads = default_threads();
  double budget_ms = 500;
  std::string shapes_text;
  bool if_stale = false, print = false;
  app.add_option("--out", out, "the JSON file (default: $GF_MACHINE_PROBE, else <binary dir>/../machine_probe.json)");
  app.add_option("--threads", threads, "threads (default: $OMP_NUM_THREADS, else every core)")->check(CLI::PositiveNumber);
  app.add_option("--budget-ms", budget_ms, "time to spend measuring, roughly (at least one call per product and backend)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--shapes", shapes_text, "products instead of the model's: op:MxNxK,... (op NN, NT, TN, TT)");
  app.add_flag("--if-stale", if_stale, "do nothing if the file exists, parses and names this CPU and OpenBLAS kernels");
  app.add_flag("--print", print, "also print the JSON on stdout");
  // Bad arguments (the options, --shapes) are bad input: status 2, as gridformer's; a failed probe is 1.
  std::vector<Shape> shapes = default_shapes();
  try {
    app.parse(argc, argv);
    if (!shapes_text.empty()) {
      shapes.clear();
      std::stringstream ss(shapes_text);
      for (std::string item; std::getline(ss, item, ',');) shapes.push_back(parse_shape(item));
    }
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "machine_probe: " << e.what() << " (machine_probe --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "machine_probe: " << e.what() << "\n";
    return 2;
  }
  try {
    if (out.empty()) throw std::runtime_error("GF_MACHINE_PROBE=off and no --out: nowhere to write");
    if (if_stale && up_to_date(out)) {
      std::cout << "machine_probe: " << out << " is up to date for this CPU (" << gf::cpu_model_name()
                << ", OpenBLAS " << gf::blas_core_name() << ")\n";
      return 0;
    }
    omp_set_num_threads(threads);
    gf::gemm_set_threads(threads);
    // A measurement that had under 0.8 of the cores (other processes running) can pick the wrong
    // backend (seen here: onednn measured below Eigen beside a build). Measured again, up to twice,
    // a second apart; the one that had the most of the cores is kept, and the file says how many.
    nlohmann::json j = probe(shapes, threads, budget_ms);
    int attempts = 1;
    while (attempts < 3 && j["cores_share"].get<double>() < gf::kQuietCoresShare) {
      std::cout << fmt::format("machine_probe: only {} of the cores were ours (load average {:.2f}): measuring again\n",
                               j["cores_share"].get<double>(), j["load_average_start"].get<double>());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      nlohmann::json again = probe(shapes, threads, budget_ms);
      ++attempts;
      if (again["cores_share"].get<double>() > j["cores_share"].get<double>()) j = std::move(again);
    }
    j["attempts"] = attempts;
    const std::filesystem::path path(out);
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    const std::string tmp = out + ".tmp";
    std::ofstream(tmp) << j.dump(1) << "\n";
    std::filesystem::rename(tmp, path);
    std::cout << fmt::format("machine_probe: {} at {} thread(s): blas ({}) {} eigen {} onednn {} bf16 {} GFLOP/s; fp32 "
                             "backend {}, GEMM ceiling {} TFLOP/s fp32, {} bf16; hardware peak {} TFLOP/s fp32 ({}), "
                             "{} bf16 ({}), triad {} GB/s ({} ms, {} of the cores) -> {}\n",
                             j["cpu"].get<std::string>(), threads, j["blas_core"].get<std::string>(),
                             j["gflops"]["blas"].dump(), j["gflops"]["eigen"].dump(), j["gflops"]["onednn"].dump(),
                             j["gflops"]["bf16"].dump(), j["fp32_backend"].get<std::string>(),
                             j["peak_tflops"]["float32"].dump(), j["peak_tflops"]["bfloat16"].dump(),
                             j["limits"]["fp32_fma_tflops"].dump(), j["limits"]["fp32_fma_isa"].get<std::string>(),
                             j["limits"]["bf16_tflops"].dump(), j["limits"]["bf16_isa"].get<std::string>(),
                             j["limits"]["triad_gbs"].dump(), j["elapsed_ms"].dump(), j["cores_share"].dump(), out);
    if (j["cores_share"].get<double>() < gf::kQuietCoresShare)
      std::cout << fmt::format("machine_probe: warning: other processes held the cores ({} of {} thread(s)' time was "
                               "ours, load average {:.2f}): every figure is low and the backend choice may be off, "
                               "and runs take the built-in nominal MFU peak rather than these; re-run "
                               "build/bin/machine_probe when the machine is quiet\n",
                               j["cores_share"].get<double>(), threads, j["load_average_start"].get<double>());
    if (print) std::cout << j.dump(1) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "machine_probe: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
