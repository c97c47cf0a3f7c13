// Unfused causal attention (core/ops/attention.h, T x T probabilities kept) against the fused one
// (core/ops/flash_attention.h, tiles and an online softmax) on gpt2-tiny-like shapes.
//
//   build/bin/bench_attention [--runs N] [--threads N] [--tiles RxC[,RxC...]] [--shapes B:T:H:D[,...]]
//                             [--dropout P[,P...]] [--products fp32|bf16|both] [--unfused 0|1]
//   build/bin/bench_attention --window W[,W...] [--shapes B:T:H:D[,...]] [--runs N] [--threads N]
//
// --window: the fused kernel over the whole causal prefix against the same kernel with a sliding window
// of W keys (AttentionShape::key_lo = i - W + 1; the kernel skips the key tiles left of the band), both
// without dropout, interleaved; prints medians, the ratio, and the ratio of score products the band
// leaves (T(T+1)/2 against W(W+1)/2 + (T-W)W). Default shape there: 1:8192:4:64.
//
// Defaults: 9 runs, all OpenMP threads, the default tiles (FlashTiles), shapes 8:256:4:64 and 8:1024:4:64 (gpt2-tiny:
// batch 8, 4 heads of 64, at its trained T = 256 and at 1024), dropout 0 and 0.1. Each run times
// forward, backward and both, for the unfused path and then each tile size (interleaved, so load
// from other processes hits both alike); the table shows medians and the ratio unfused / fused
// (> 1: the fused path is faster). Memory: what each path keeps for backward plus its scratch.
// --unfused 0 leaves the unfused path out (for a profiler's view of the fused kernel alone; no ratios).
// GFLOP/s counts the causal pairs' products only (2 in forward, 5 in backward, 2*D flops a pair each).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/math/aligned_buffer.h"
#include "core/ops/attention.h"
#include "core/ops/flash_attention.h"

namespace {

using namespace gf::bench;

using gf::AlignedBuffer;
using namespace gf::ops;
using Clock = std::chrono::steady_clock;

struct Shape {
  int64_t B, T, H, D;
};

struct Options {
  int runs = 9;
  int threads = 0;
  std::vector<FlashTiles> tiles{FlashTiles{}};
  std::vector<bool> bf16{false};  // --products fp32|bf16|both: the fused path's products (FlashWorkspace::bf16_products)
  std::vector<Shape> shapes{{8, 256, 4, 64}, {8, 1024, 4, 64}};
  std::vector<float> dropout{0.0f, 0.1f};
  std::vector<int64_t> windows;  // --window: the windowed comparison instead
  bool shapes_given = false;
  bool unfused = true;
};


Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--runs") o.runs = std::stoi(v);
    else if (k == "--threads") o.threads = std::stoi(v);
    else if (k == "--unfused") o.unfused = std::stoi(v) != 0;
    else if (k == "--tiles") {
      o.tiles.clear();
      for (const auto& t : split(v, ',')) {
        const auto x = t.find('x');
        o.tiles.push_back({std::stoll(t.substr(0, x)), std::stoll(t.substr(x + 1))});
      }
    } else if (k == "--products") {
      o.bf16 = v == "bf16" ? std::vector<bool>{true} : v == "both" ? std::vector<bool>{false, true} : std::vector<bool>{false};
    } else if (k == "--window") {
      std::stringstream ss(v);
      for (std::string w; std::getline(ss, w, ',');) o.windows.push_back(std::stoll(w));
    } else if (k == "--shapes") {
      o.shapes_given = true;
      o.shapes.clear();
      for (const auto& t : split(v, ',')) {
        const auto p = split(t, ':');
        o.shapes.push_back({std::stoll(p.at(0)), std::stoll(p.at(1)), std::stoll(p.at(2)), std::stoll(p.at(3))});
      }
    } else if (k == "--dropout") {
      o.dropout.clear();
      for (const auto& t : split(v, ',')) o.dropout.push_back(std::stof(t));
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }


struct Times {
  std::vector<double> fwd, bwd;
};

void bench_shape(const Shape& sh, float rate, const Options& o) {
  const int64_t C = sh.H * sh.D, nqkv = sh.B * sh.T * 3 * C, ny = sh.B * sh.T * C;
  const AttentionShape s{sh.B, sh.T, sh.H, sh.D, 0, 0, sh.H};
  const DropoutKey drop{rate, 1, 2};
  AlignedBuffer<float> qkv(nqkv), dy(ny), y(ny), dqkv(nqkv), probs(o.unfused ? sh.B * sh.H * sh.T * sh.T : 1), lse(sh.B * sh.H * sh.T);
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < nqkv; ++i) qkv[i] = nd(g);
  for (int64_t i = 0; i < ny; ++i) dy[i] = nd(g);
  const int threads = omp_get_max_threads();
  std::vector<AlignedBuffer<float>> ws_buf;
  std::vector<FlashWorkspace<float>> ws;
  for (const FlashTiles& t : o.tiles)
    for (const bool b : o.bf16) {
      ws_buf.emplace_back(static_cast<size_t>(threads * flash_workspace_per_thread(s, t)));
      ws.push_back({ws_buf.back().data(), threads, t, b});
    }
  Times unfused;
  std::vector<Times> fused(ws.size());
  for (int run = 0; run <= o.runs; ++run) {  // run 0 warms up and is not kept
    auto t0 = Clock::now();
    if (o.unfused) attention_fwd(y.data(), probs.data(), qkv.data(), s, drop);
    const double f = seconds_since(t0);
    t0 = Clock::now();
    if (o.unfused) attention_bwd(dqkv.data(), dy.data(), qkv.data(), probs.data(), s, drop);
    const double b = seconds_since(t0);
    if (run > 0) unfused.fwd.push_back(f), unfused.bwd.push_back(b);
    for (size_t k = 0; k < ws.size(); ++k) {
      t0 = Clock::now();
      flash_attention_fwd(y.data(), lse.data(), qkv.data(), s, drop, ws[k]);
      const double ff = seconds_since(t0);
      t0 = Clock::now();
      flash_attention_bwd(dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s, drop, ws[k]);
      const double fb = seconds_since(t0);
      if (run > 0) fused[k].fwd.push_back(ff), fused[k].bwd.push_back(fb);
    }
  }
  std::vector<double> u_sum(unfused.fwd.size());
  for (size_t i = 0; i < u_sum.size(); ++i) u_sum[i] = unfused.fwd[i] + unfused.bwd[i];
  const double uf = median(unfused.fwd), ub = median(unfused.bwd), ut = median(u_sum);
  // Unfused: probs kept for backward, plus per-thread scratch (T*T with dropout in forward, 2*T*T in backward).
  const double mib = 1024.0 * 1024.0;
  const double u_mem = 4.0 * static_cast<double>(sh.B * sh.H * sh.T * sh.T + threads * 2 * sh.T * sh.T);
  std::printf("B %lld T %lld H %lld D %lld dropout %.2f, %d threads\n", static_cast<long long>(sh.B),
              static_cast<long long>(sh.T), static_cast<long long>(sh.H), static_cast<long long>(sh.D), rate, threads);
  if (o.unfused)
    std::printf("  %-19s fwd %8.3f ms  bwd %8.3f ms  fwd+bwd %8.3f ms  memory %9.2f MiB\n", "unfused", 1e3 * uf, 1e3 * ub,
                1e3 * ut, u_mem / mib);
  for (size_t k = 0; k < ws.size(); ++k) {
    std::vector<double> sum(fused[k].fwd.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = fused[k].fwd[i] + fused[k].bwd[i];
    const double ff = median(fused[k].fwd), fb = median(fused[k].bwd), ft = median(sum);
    const double f_mem = 4.0 * static_cast<double>(sh.B * sh.H * sh.T + ws_buf[k].size());
    char name[40];
    std::snprintf(name, sizeof name, "flash %lldx%lld%s", static_cast<long long>(ws[k].tiles.rows),
                  static_cast<long long>(ws[k].tiles.cols), ws[k].bf16_products ? " bf16" : "");
    // Useful work: the causal pairs' products, 2 in forward (S = QK^T, PV) and 5 in backward (S again, dP, dV, dQ, dK).
    const double pairs = static_cast<double>(sh.B * sh.H) * static_cast<double>(sh.T) * static_cast<double>(sh.T + 1) / 2;
    const double gflop_f = 2 * 2 * pairs * static_cast<double>(sh.D) * 1e-9, gflop_b = 2.5 * gflop_f;
    std::printf("  %-19s fwd %8.3f ms  bwd %8.3f ms  fwd+bwd %8.3f ms  memory %9.2f MiB  GFLOP/s fwd %.0f bwd %.0f",
                name, 1e3 * ff, 1e3 * fb, 1e3 * ft, f_mem / mib, gflop_f / ff, gflop_b / fb);
    if (o.unfused) std::printf("  unfused/flash: fwd %.2fx bwd %.2fx fwd+bwd %.2fx", uf / ff, ub / fb, ut / ft);
    std::printf("\n");
  }
}

void bench_window(const Shape& sh, int64_t W, const Options& o) {
  const int64_t C = sh.H * sh.D, nqkv = sh.B * sh.T * 3 * C, ny = sh.B * sh.T * C;
  AttentionShape full{sh.B, sh.T, sh.H, sh.D, 0, 0, sh.H};
  AttentionShape band = full;
  std::vector<int32_t> lo(static_cast<size_t>(sh.B * sh.T));
  for (int64_t b = 0; b < sh.B; ++b)
    for (int64_t i = 0; i < sh.T; ++i) lo[static_cast<size_t>(b * sh.T + i)] = static_cast<int32_t>(std::max<int64_t>(0, i - W + 1));
  band.key_lo = lo.data();
  const DropoutKey drop{0.0f, 1, 2};
  AlignedBuffer<float> qkv(nqkv), dy(ny), y(ny), dqkv(nqkv), lse(sh.B * sh.H * sh.T);
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t i = 0; i < nqkv; ++i) qkv[i] = nd(g);
  for (int64_t i = 0; i < ny; ++i) dy[i] = nd(g);
  const int threads = omp_get_max_threads();
  const FlashTiles t = o.tiles.front();
  AlignedBuffer<float> ws_buf(static_cast<size_t>(threads * flash_workspace_per_thread(full, t)));
  const FlashWorkspace<float> ws{ws_buf.data(), threads, t};
  Times a, b;
  for (int run = 0; run <= o.runs; ++run) {  // run 0 warms up and is not kept
    for (int which = 0; which < 2; ++which) {
      const AttentionShape& s = which == 0 ? full : band;
      auto t0 = Clock::now();
      flash_attention_fwd(y.data(), lse.data(), qkv.data(), s, drop, ws);
      const double f = seconds_since(t0);
      t0 = Clock::now();
      flash_attention_bwd(dqkv.data(), dy.data(), qkv.data(), y.data(), lse.data(), s, drop, ws);
      const double bw = seconds_since(t0);
      if (run > 0) (which == 0 ? a : b).fwd.push_back(f), (which == 0 ? a : b).bwd.push_back(bw);
    }
  }
  auto total = [](const Times& x) {
    std::vector<double> v(x.fwd.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = x.fwd[i] + x.bwd[i];
    return median(v);
  };
  const double T = static_cast<double>(sh.T), w = static_cast<double>(std::min(W, sh.T));
  const double pairs_full = T * (T + 1) / 2, pairs_band = w * (w + 1) / 2 + (T - w) * w;
  const double mib = 1024.0 * 1024.0;
  std::printf("B %lld T %lld H %lld D %lld, window %lld, tiles %lldx%lld, %d threads\n", static_cast<long long>(sh.B),
              static_cast<long long>(sh.T), static_cast<long long>(sh.H), static_cast<long long>(sh.D),
              static_cast<long long>(W), static_cast<long long>(t.rows), static_cast<long long>(t.cols), threads);
  std::printf("  %-16s fwd %9.2f ms  bwd %9.2f ms  fwd+bwd %9.2f ms  memory %7.2f MiB\n", "causal (full)",
              1e3 * median(a.fwd), 1e3 * median(a.bwd), 1e3 * total(a),
              4.0 * static_cast<double>(sh.B * sh.H * sh.T + ws_buf.size()) / mib);
  std::printf("  %-16s fwd %9.2f ms  bwd %9.2f ms  fwd+bwd %9.2f ms  memory %7.2f MiB  full/window: fwd+bwd %.2fx "
              "(score products %.2fx fewer)\n",
              "sliding window", 1e3 * median(b.fwd), 1e3 * median(b.bwd), 1e3 * total(b),
              (4.0 * static_cast<double>(sh.B * sh.H * sh.T + ws_buf.size()) + 4.0 * static_cast<double>(lo.size())) / mib,
              total(a) / total(b), pairs_full / pairs_band);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  if (!o.windows.empty()) {
    if (!o.shapes_given) o.shapes = {{1, 8192, 4, 64}};
    std::printf("CPU: %s\nmedians of %d runs (after one warm-up), full and windowed interleaved in each run\n",
                cpu_model().c_str(), o.runs);
    for (const Shape& sh : o.shapes)
      for (int64_t w : o.windows) bench_window(sh, w, o);
    return 0;
  }
  std::printf("medians of %d runs (after one warm-up), unfused and fused interleaved in each run\n", o.runs);
  for (const Shape& sh : o.shapes)
    for (float rate : o.dropout) bench_shape(sh, rate, o);
  return 0;
}
