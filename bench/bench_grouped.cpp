// The experts' products of one MoE layer (core/ops/grouped_linear.h): the grouped call (one OpenMP
// loop over (expert, row block) tiles, or (expert, block of dW rows) for the weight gradient, each
// product single-threaded) against the per-expert loop (ops::linear_* per expert, each product
// multithreaded), forward, backward-input and backward-weight, fp32 and bf16.
//
//   build/bin/bench_grouped [--threads 2] [--rounds 5] [--min-ms 40] [--dtypes fp32,bf16]
//                           [--mlps gpt2,mixtral] [--passes fwd,dx,dw] [--gemm blas|eigen]
//                           [--tiles 256] [--weight-tiles 256] [--hot 3] [--seed 1] [--clock wall|cpu]
//                           [--min-cores 0.9 --attempts 6] [--experts 8] [--routings 1]
//
// Shapes: moe-tiny, hidden C 256, FFN F 1024, 8 experts, B 8 x T 256 tokens routed top-2, so
// R = 4096 rows, split over the experts by a seeded multinomial in which expert 0 is --hot times as
// likely as each other one (printed). Two expert MLPs: GPT-2 style, up C -> F and down F -> C in
// Conv1D's [in, out] layout with biases; Mixtral style, gate|up C -> 2F and down F -> C in
// nn.Linear's [out, in] layout without biases. Under bf16 the experts' weights have their bf16
// copy (made once, as the model refreshes it once per step) and the backward passes get dy's bf16
// copy (converted once, as linear_bwd converts it once for both of its products); x is converted
// in the call, as the ops do. --experts changes the number of experts (the rows stay 4096);
// --routings N draws N routings (seeds seed, seed + 1, ...) and gives each call the next one, as
// training reroutes every step: expert row counts, hence GEMM shapes, then change from call to
// call, and first-call work (oneDNN creates and caches a primitive per new shape and thread) is
// timed as a training run meets it.
//
// For each product, pass and dtype: one untimed call of each variant (first-call work: oneDNN
// primitives, buffers), then --rounds rounds in which every variant (the loop, then the grouped
// call at each tile size of --tiles, or of --weight-tiles, rows of dW per tile, for dW; order
// rotating from round to round) runs back to back enough times to take >= --min-ms; the time per
// call is the median over rounds. --clock cpu times with the process's CPU clock (with --threads 1:
// the kernels' own speed, little disturbed by other processes on a shared machine).
// GFLOP/s count 2 R in out per call; "loop/grouped" is the loop's time over the grouped call's (the
// first tile size's), > 1 when the grouped call is faster. The MLP totals weigh the passes by time.
// "cores we had": CPU time / (wall time x threads) over the row's timing, an upper bound (threads
// spinning at barriers count as busy); well below 1, other processes held our cores, and the
// per-expert loop's many short parallel products suffer more from that than the grouped call.
// With --min-cores F a row is timed again, up to --attempts times in all, until it had >= F (the
// last timing is printed, with the number of tries when more than one).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/math/gemm.h"
#include "core/math/gemm_bf16.h"
#include "core/math/mixed_precision.h"
#include "core/ops/grouped_linear.h"

namespace {

using namespace gf::bench;
using gf::ComputeDtype;
using gf::Weight;
using gf::ops::GroupedTiles;

constexpr int64_t kC = 256, kF = 1024, kTokens = 8 * 256, kTopK = 2;

struct Options {
  int threads = 2, rounds = 5;
  double min_ms = 40;
  std::vector<std::string> dtypes = {"fp32", "bf16"}, mlps = {"gpt2", "mixtral"}, passes = {"fwd", "dx", "dw"};
  std::string gemm = "blas";
  std::vector<int64_t> tiles = {GroupedTiles{}.rows}, weight_tiles = {GroupedTiles{}.weight_rows};
  double hot = 3;
  uint32_t seed = 1;
  bool cpu_clock = false;
  double min_cores = 0;  // --min-cores: time a row again while it had less of the cores than this
  int attempts = 1;
  int64_t experts = 8;
  int routings = 1;  // --routings N: N routings (seeds seed, seed + 1, ...), a new one each call
};

bool g_cpu_clock = false;

double now_seconds() {
  if (!g_cpu_clock) return wall_seconds();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

std::vector<int64_t> int_list(const std::string& s) {
  std::vector<int64_t> v;
  for (const std::string& t : split(s)) v.push_back(std::stoll(t));
  return v;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
    const std::string v = argv[++i];
    if (arg == "--threads") o.threads = std::max(1, std::stoi(v));
    else if (arg == "--rounds") o.rounds = std::max(1, std::stoi(v));
    else if (arg == "--min-ms") o.min_ms = std::stod(v);
    else if (arg == "--dtypes") o.dtypes = split(v);
    else if (arg == "--mlps") o.mlps = split(v);
    else if (arg == "--passes") o.passes = split(v);
    else if (arg == "--gemm") o.gemm = v;
    else if (arg == "--tiles") o.tiles = int_list(v);
    else if (arg == "--weight-tiles") o.weight_tiles = int_list(v);
    else if (arg == "--hot") o.hot = std::stod(v);
    else if (arg == "--seed") o.seed = static_cast<uint32_t>(std::stoul(v));
    else if (arg == "--clock" && (v == "wall" || v == "cpu")) o.cpu_clock = v == "cpu";
    else if (arg == "--min-cores") o.min_cores = std::stod(v);
    else if (arg == "--attempts") o.attempts = std::max(1, std::stoi(v));
    else if (arg == "--experts") o.experts = std::max(1, std::stoi(v));
    else if (arg == "--routings") o.routings = std::max(1, std::stoi(v));
    else
      throw std::runtime_error("unknown argument " + arg +
                               " (--threads --rounds --min-ms --dtypes --mlps --passes --gemm --tiles --weight-tiles "
                               "--hot --seed --clock wall|cpu --min-cores --attempts --experts --routings)");
  }
  if (o.gemm != "blas" && o.gemm != "eigen") throw std::runtime_error("--gemm blas|eigen, not " + o.gemm);
  return o;
}

// One linear layer of the experts: in -> out for every expert, the weights stacked.
struct Layer {
  std::string name;
  int64_t in, out;
  bool out_in, bias;
};

std::vector<Layer> layers_of(const std::string& mlp) {
  if (mlp == "gpt2") return {{"gpt2 up C->F", kC, kF, false, true}, {"gpt2 down F->C", kF, kC, false, true}};
  if (mlp == "mixtral")
    return {{"mixtral gate|up C->2F", kC, 2 * kF, true, false}, {"mixtral down F->C", kF, kC, true, false}};
  throw std::runtime_error("unknown --mlps entry " + mlp + " (gpt2, mixtral)");
}

std::vector<float> random_vec(int64_t n, std::mt19937& g, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

// Buffers of one layer at one dtype.
struct Buffers {
  std::vector<float> x, w, b, dy, y, dx, dw, db;
  std::vector<std::byte> w_low, dy_low;
  Weight weight{nullptr};
};

Buffers make_buffers(const Layer& l, ComputeDtype d, int64_t experts, int64_t rows, std::mt19937& g) {
  Buffers s;
  const int64_t stride = l.in * l.out, E = experts;
  s.x = random_vec(rows * l.in, g, 1.0f);
  s.w = random_vec(E * stride, g, 0.02f);
  s.b = random_vec(E * l.out, g, 0.02f);
  s.dy = random_vec(rows * l.out, g, 1e-3f);
  s.y.resize(static_cast<size_t>(rows * l.out));
  s.dx.resize(static_cast<size_t>(rows * l.in));
  s.dw.assign(static_cast<size_t>(E * stride), 0.0f);
  s.db.assign(static_cast<size_t>(E * l.out), 0.0f);
  if (d == ComputeDtype::kFloat32) {
    s.weight = Weight(s.w.data());
  } else {
    s.w_low.resize(static_cast<size_t>(E * stride * gf::low_copy_element_bytes(d)));
    gf::make_low_copy(d, s.w_low.data(), s.w.data(), E * stride);
    s.dy_low.resize(static_cast<size_t>(rows * l.out * gf::low_copy_element_bytes(d)));
    gf::make_low_copy(d, s.dy_low.data(), s.dy.data(), rows * l.out);
    s.weight = Weight(s.w.data(), d, s.w_low.data());
  }
  s.weight = s.weight.transposed_layout(l.out_in);
  return s;
}

// One pass of one layer: the loop (tile < 0) or the grouped call with that tile size.
void run_pass(const std::string& pass, const Layer& l, Buffers& s, const std::vector<int64_t>& offsets,
              int64_t tile) {
  const int64_t stride = l.in * l.out, E = static_cast<int64_t>(offsets.size()) - 1;
  const float* b = l.bias ? s.b.data() : nullptr;
  float* db = l.bias ? s.db.data() : nullptr;
  const void* dyl = s.dy_low.empty() ? nullptr : s.dy_low.data();
  const int64_t* off = offsets.data();
  // The tile size under test; the other dimension's (unused by this pass) at its default.
  GroupedTiles t;
  (pass == "dw" ? t.weight_rows : t.rows) = tile;
  if (pass == "fwd") {
    if (tile < 0) gf::ops::grouped_linear_fwd_loop(s.y.data(), s.x.data(), s.weight, stride, b, off, E, l.in, l.out);
    else gf::ops::grouped_linear_fwd(s.y.data(), s.x.data(), s.weight, stride, b, off, E, l.in, l.out, t);
  } else if (pass == "dx") {
    if (tile < 0)
      gf::ops::grouped_linear_bwd_input_loop(s.dx.data(), s.dy.data(), s.weight, stride, off, E, l.in, l.out, dyl);
    else
      gf::ops::grouped_linear_bwd_input(s.dx.data(), s.dy.data(), s.weight, stride, off, E, l.in, l.out, dyl, t);
  } else if (pass == "dw") {
    if (tile < 0)
      gf::ops::grouped_linear_bwd_weight_loop(s.dw.data(), db, s.dy.data(), s.x.data(), s.weight, stride, off, E,
                                              l.in, l.out, dyl);
    else
      gf::ops::grouped_linear_bwd_weight(s.dw.data(), db, s.dy.data(), s.x.data(), s.weight, stride, off, E, l.in,
                                         l.out, dyl, t);
  } else {
    throw std::runtime_error("unknown --passes entry " + pass + " (fwd, dx, dw)");
  }
}

// Rows per expert: R = tokens x top-k draws from a multinomial, expert 0 `hot` times as likely.
std::vector<int64_t> expert_offsets(int64_t experts, double hot, uint32_t seed) {
  std::vector<double> p(static_cast<size_t>(experts), 1.0);
  p[0] = hot;
  std::discrete_distribution<int> pick(p.begin(), p.end());
  std::mt19937 g(seed);
  std::vector<int64_t> counts(static_cast<size_t>(experts), 0);
  for (int64_t i = 0; i < kTokens * kTopK; ++i) ++counts[pick(g)];
  std::vector<int64_t> offsets{0};
  for (const int64_t c : counts) offsets.push_back(offsets.back() + c);
  return offsets;
}

// Median seconds per call of each variant (0: the loop; 1..: the grouped call per tile size).
std::vector<double> time_variants(const std::vector<std::function<void()>>& vs, const Options& o) {
  for (const auto& v : vs) v();  // untimed first calls
  double t0 = now_seconds();
  vs[0]();
  const int reps = std::max(1, static_cast<int>(std::ceil(o.min_ms * 1e-3 / std::max(now_seconds() - t0, 1e-6))));
  std::vector<std::vector<double>> t(vs.size());
  for (int r = 0; r < o.rounds; ++r)
    for (size_t i = 0; i < vs.size(); ++i) {
      const size_t k = (i + r) % vs.size();
      t0 = now_seconds();
      for (int rep = 0; rep < reps; ++rep) vs[k]();
      t[k].push_back((now_seconds() - t0) / reps);
    }
  std::vector<double> med;
  for (auto& v : t) med.push_back(median(v));
  return med;
}

// Each variant goes through the routings in the same order, one per call.
void bench(const Options& o, const std::vector<std::vector<int64_t>>& routings) {
  const int64_t R = routings[0].back();
  const size_t nr = routings.size();
  std::printf("\n| dtype | layer | pass | in x out | loop GFLOP/s |");
  const bool sweep = o.tiles.size() > 1 || o.weight_tiles.size() > 1;
  const size_t nv = std::max(o.tiles.size(), o.weight_tiles.size());
  for (size_t i = 0; i < nv; ++i) {
    const std::string rows = i < o.tiles.size() ? std::to_string(o.tiles[i]) : "-";
    const std::string cols = i < o.weight_tiles.size() ? std::to_string(o.weight_tiles[i]) : "-";
    if (sweep) std::printf(" grouped %s/%s |", rows.c_str(), cols.c_str());
    else std::printf(" grouped GFLOP/s |");
  }
  std::printf(" loop ms | grouped ms | loop/grouped | cores we had |\n|---|---|---|---|---:|");
  for (size_t i = 0; i < nv; ++i) std::printf("---:|");
  std::printf("---:|---:|---:|---:|\n");
  for (const std::string& dt : o.dtypes) {
    const ComputeDtype d = dt == "fp32" ? ComputeDtype::kFloat32 : dt == "bf16" ? ComputeDtype::kBFloat16
                                                                  : throw std::runtime_error("--dtypes fp32,bf16");
    for (const std::string& mlp : o.mlps) {
      double loop_total = 0, grouped_total = 0;
      for (const Layer& l : layers_of(mlp)) {
        std::mt19937 g(o.seed + 7);
        Buffers s = make_buffers(l, d, o.experts, R, g);
        for (const std::string& pass : o.passes) {
          const std::vector<int64_t>& sizes = pass == "dw" ? o.weight_tiles : o.tiles;
          std::vector<std::function<void()>> vs{
              [&, k = size_t{0}]() mutable { run_pass(pass, l, s, routings[k++ % nr], -1); }};
          for (const int64_t t : sizes)
            vs.push_back([&, t, k = size_t{0}]() mutable { run_pass(pass, l, s, routings[k++ % nr], t); });
          // Timed again (up to --attempts times in all) while other processes held our cores.
          std::vector<double> sec;
          double cores = 0;
          int tries = 0;
          do {
            const double cpu0 = cpu_seconds(), wall0 = wall_seconds();
            sec = time_variants(vs, o);
            cores = (cpu_seconds() - cpu0) / ((wall_seconds() - wall0) * o.threads);
          } while (++tries < o.attempts && cores < o.min_cores);
          const double flops = 2.0 * R * l.in * l.out;
          std::printf("| %s | %s | %s | %lldx%lld | %.1f |", dt.c_str(), l.name.c_str(), pass.c_str(),
                      (long long)l.in, (long long)l.out, flops / sec[0] * 1e-9);
          for (size_t i = 1; i <= nv; ++i) {
            if (i < sec.size()) std::printf(" %.1f |", flops / sec[i] * 1e-9);
            else std::printf(" |");
          }
          std::printf(" %.2f | %.2f | %.2f | %.2f%s |\n", sec[0] * 1e3, sec[1] * 1e3, sec[0] / sec[1], cores,
                      tries > 1 ? (" (" + std::to_string(tries) + " tries)").c_str() : "");
          std::fflush(stdout);
          loop_total += sec[0];
          grouped_total += sec[1];
        }
      }
      std::printf("| %s | **%s MLP, all passes** | | | | ", dt.c_str(), mlp.c_str());
      for (size_t i = 0; i < nv; ++i) std::printf("| ");
      std::printf("**%.2f** | **%.2f** | **%.2f** | |\n", loop_total * 1e3, grouped_total * 1e3,
                  loop_total / grouped_total);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_args(argc, argv);
    g_cpu_clock = o.cpu_clock;
    omp_set_num_threads(o.threads);
    gf::gemm_set_threads(o.threads);
    gf::gemm_set_backend(o.gemm == "eigen" ? gf::GemmBackend::kEigen : gf::GemmBackend::kBlas);
    std::vector<std::vector<int64_t>> routings;
    for (int i = 0; i < o.routings; ++i) routings.push_back(expert_offsets(o.experts, o.hot, o.seed + i));
    const std::vector<int64_t>& offsets = routings[0];
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0) load[0] = -1;
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    std::printf("bench_grouped: %s, %d cores; %d threads; fp32 GEMM %s%s%s; %s; %d rounds, >= %.0f ms per sample, "
                "%s clock; load average %.2f at start\n",
                cpu_model().c_str(), omp_get_num_procs(), o.threads, o.gemm.c_str(),
                coretype ? ", OPENBLAS_CORETYPE=" : "", coretype ? coretype : "", gf::gemm_bf16_backend_info().c_str(),
                o.rounds, o.min_ms, o.cpu_clock ? "process CPU" : "wall", load[0]);
    std::printf("moe-tiny: C %lld, F %lld, %lld experts, %lld tokens x top-%lld = %lld rows; rows per expert%s:",
                (long long)kC, (long long)kF, (long long)o.experts, (long long)kTokens, (long long)kTopK,
                (long long)offsets.back(), o.routings > 1 ? " (first routing)" : "");
    for (int64_t e = 0; e < o.experts; ++e) std::printf(" %lld", (long long)(offsets[e + 1] - offsets[e]));
    std::printf(" (expert 0 %.3gx as likely, seed %u)\n", o.hot, o.seed);
    if (o.routings > 1)
      std::printf("%d routings (seeds %u-%u), a new one each call, in the same order for every variant\n", o.routings,
                  o.seed, o.seed + o.routings - 1);
    const double cpu0 = cpu_seconds(), wall0 = wall_seconds();
    bench(o, routings);
    const double wall = wall_seconds() - wall0;
    if (getloadavg(load, 3) < 0) load[0] = -1;
    // Spinning threads count as busy, so this is an upper bound on the cores we really had.
    std::printf("\nCPU time / (wall time x %d threads): %.2f. %.0f s; load average %.2f at the end. GFLOP/s = "
                "2 R in out / median time per call; loop/grouped > 1: the grouped call is faster.\n",
                o.threads, (cpu_seconds() - cpu0) / (wall * o.threads), wall, load[0]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grouped: %s\n", e.what());
    return 1;
  }
  return 0;
}
