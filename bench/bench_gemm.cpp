// Every matrix product of one GPT-2 training step (tensor parallel 1, as models/arch/gpt2.cpp,
// core/ops/linear.cpp and core/ops/attention.cpp call core/math/gemm.h), timed on each backend:
//   blas   OpenBLAS fp32 (gemm(GemmBackend::kBlas, ...))
//   eigen  Eigen 3.4 fp32 (gemm(GemmBackend::kEigen, ...))
//   bf16   oneDNN bf16 matmul from float inputs (gemm_bf16(float...): the conversion to bf16 is timed)
//   bf16*  oneDNN bf16 matmul from inputs already in bf16 (gemm_bf16(bf16...): the primitive alone)
//
//   build/bin/bench_gemm [--threads 2] [--rounds 5] [--min-ms 25] [--models gpt2-tiny,gpt2-124M]
//                        [--clock wall|cpu]
//   build/bin/bench_gemm --shape 2048x2048x2048,1024x3072x768 [--threads 2] [--rounds 5] [--min-ms 25]
//
// For each product: one untimed call per backend (first-call work: oneDNN primitives, buffers),
// then --rounds rounds; in each round every backend runs the product back to back enough times to
// take >= --min-ms (the backends' order rotates from round to round), and the per-call time is the
// median over rounds. Attention's per-head products run as the model runs them: B*H calls in an
// OpenMP loop over heads, each call single-threaded. GFLOP/s count 2*M*N*K per call. The step
// totals weigh each product by its FLOPs: total FLOPs / sum over products of count * time.
// --clock cpu times with the process's CPU clock instead of the wall clock: with --threads 1 that
// is the kernels' own speed on one core, little disturbed by other processes on a shared machine
// (time spent descheduled is not counted); with more threads it would count spinning as work.
// --shape M x N x K[,...] times plain NN products C[M,N] = A[M,K] B[K,N] (alpha 1, beta 0, dense)
// on the four backends instead of the model's products, the same way, and prints one line per
// shape, `shape MxNxK blas G eigen G bf16 G bf16* G` (GFLOP/s), for bench/targets.py's GEMM ceiling.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/math/gemm.h"
#include "core/math/gemm_bf16.h"

namespace {

using namespace gf::bench;

using gf::bf16;
using gf::Trans;

struct Model {
  std::string name;
  int64_t B, T, C, L, H, V;  // V: the padded vocabulary (50257 -> 50304, a multiple of 128)
};

const Model kModels[] = {
    {"gpt2-tiny", 8, 256, 256, 4, 4, 50304},
    {"gpt2-124M", 4, 256, 768, 12, 12, 50304},
};

// One operand (or the output) of a product: its buffer size and, for the per-head products, where
// head (b, h) starts: base + b * b_stride + h * h_stride.
struct Operand {
  int64_t size, b_stride = 0, h_stride = 0, base = 0;
  int64_t at(int64_t b, int64_t h) const { return base + b * b_stride + h * h_stride; }
};

struct Product {
  std::string name;
  Trans ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  int64_t count;     // calls of this product per step (layers)
  int64_t B = 0, H = 0;  // per-head: B*H calls in an OpenMP loop
  Operand a, b, c;
  double flops() const { return 2.0 * M * N * K * (H > 0 ? B * H : 1); }  // per call of the product
};

// The products of one step, from the model code.
std::vector<Product> step_products(const Model& m) {
  const int64_t N = m.B * m.T, C = m.C, F = 4 * C, T = m.T, D = C / m.H, V = m.V, L = m.L;
  const Trans n = Trans::kNo, t = Trans::kYes;
  std::vector<Product> ps;
  // linear_fwd: y[n,out] = x[n,in] W[in,out] (+ bias, so beta 1); linear_bwd: dx[n,in] += dy W^T,
  // dW[in,out] += x^T dy.
  auto linear = [&](const std::string& name, int64_t in, int64_t out) {
    ps.push_back({name + " fwd", n, n, N, out, in, in, out, out, 1.f, 1.f, L, 0, 0, {N * in}, {in * out}, {N * out}});
    ps.push_back({name + " dx", n, t, N, in, out, out, out, in, 1.f, 1.f, L, 0, 0, {N * out}, {in * out}, {N * in}});
    ps.push_back({name + " dW", t, n, in, out, N, in, out, out, 1.f, 1.f, L, 0, 0, {N * in}, {N * out}, {in * out}});
  };
  linear("attn.c_attn", C, 3 * C);
  linear("attn.c_proj", C, C);
  linear("mlp.c_fc", C, F);
  linear("mlp.c_proj", F, C);
  // attention_fwd / attention_bwd, per (b, h): q, k, v live in qkv [B*T, 3C] (row stride 3C),
  // probs in [B*H, T, T], y and dy in [B*T, C].
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const Operand qkv_q{N * 3 * C, T * 3 * C, D, 0}, qkv_k{N * 3 * C, T * 3 * C, D, C}, qkv_v{N * 3 * C, T * 3 * C, D, 2 * C};
  const Operand probs{m.B * m.H * T * T, m.H * T * T, T * T, 0}, y{N * C, T * C, D, 0};
  auto head = [&](const std::string& name, Trans ta, Trans tb, int64_t M, int64_t Nn, int64_t K, int64_t lda,
                  int64_t ldb, int64_t ldc, float alpha, float beta, Operand a, Operand b, Operand c) {
    ps.push_back({name, ta, tb, M, Nn, K, lda, ldb, ldc, alpha, beta, L, m.B, m.H, a, b, c});
  };
  head("attn S=QK^T (per head)", n, t, T, T, D, 3 * C, 3 * C, T, scale, 0.f, qkv_q, qkv_k, probs);
  head("attn Y=PV (per head)", n, n, T, D, T, T, 3 * C, C, 1.f, 0.f, probs, qkv_v, y);
  head("attn dV+=P^T dY (per head)", t, n, T, D, T, T, C, 3 * C, 1.f, 1.f, probs, y, qkv_v);
  head("attn dP=dY V^T (per head)", n, t, T, T, D, C, 3 * C, T, 1.f, 0.f, y, qkv_v, probs);
  head("attn dQ+=dS K (per head)", n, n, T, D, T, T, 3 * C, 3 * C, 1.f, 1.f, probs, qkv_k, qkv_q);
  head("attn dK+=dS^T Q (per head)", t, n, T, D, T, T, 3 * C, 3 * C, 1.f, 1.f, probs, qkv_q, qkv_k);
  // The LM head tied to wte [V, C]: logits = h wte^T; dh = dlogits wte; dwte += dlogits^T h.
  ps.push_back({"lm_head logits", n, t, N, V, C, C, C, V, 1.f, 0.f, 1, 0, 0, {N * C}, {V * C}, {N * V}});
  ps.push_back({"lm_head dh", n, n, N, C, V, V, C, C, 1.f, 0.f, 1, 0, 0, {N * V}, {V * C}, {N * C}});
  ps.push_back({"lm_head dwte", t, n, V, C, N, V, C, C, 1.f, 1.f, 1, 0, 0, {N * V}, {N * C}, {V * C}});
  return ps;
}

enum Backend { kBlas, kEigen, kBf16, kBf16Pre, kNumBackends };
const char* const kBackendName[] = {"blas", "eigen", "bf16", "bf16*"};

struct Buffers {
  std::vector<float> a, b, c;
  std::vector<bf16> a16, b16;
};

Buffers make_buffers(const Product& p, std::mt19937& g) {
  std::normal_distribution<float> d(0.0f, 0.1f);
  Buffers buf;
  auto fill = [&](std::vector<float>& v, int64_t n) {
    v.resize(static_cast<size_t>(n));
    for (auto& x : v) x = d(g);
  };
  fill(buf.a, p.a.size);
  fill(buf.b, p.b.size);
  fill(buf.c, p.c.size);
  buf.a16.resize(buf.a.size());
  buf.b16.resize(buf.b.size());
  for (size_t i = 0; i < buf.a.size(); ++i) buf.a16[i] = gf::float_to_bf16(buf.a[i]);
  for (size_t i = 0; i < buf.b.size(); ++i) buf.b16[i] = gf::float_to_bf16(buf.b[i]);
  return buf;
}

void call(Backend be, const Product& p, Buffers& buf, int64_t b, int64_t h) {
  const int64_t oa = p.a.at(b, h), ob = p.b.at(b, h), oc = p.c.at(b, h);
  float* c = buf.c.data() + oc;
  switch (be) {
    case kBlas:
    case kEigen:
      gf::gemm(be == kBlas ? gf::GemmBackend::kBlas : gf::GemmBackend::kEigen, p.ta, p.tb, p.M, p.N, p.K, p.alpha,
               buf.a.data() + oa, p.lda, buf.b.data() + ob, p.ldb, p.beta, c, p.ldc);
      break;
    case kBf16:
      gf::gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, p.alpha, buf.a.data() + oa, p.lda, buf.b.data() + ob, p.ldb, p.beta, c,
                    p.ldc);
      break;
    default:
      gf::gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, p.alpha, buf.a16.data() + oa, p.lda, buf.b16.data() + ob, p.ldb,
                    p.beta, c, p.ldc);
  }
}

// One call of the product: the per-head ones as attention runs them.
void run_once(Backend be, const Product& p, Buffers& buf) {
  if (p.H == 0) {
    call(be, p, buf, 0, 0);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < p.B * p.H; ++bh) call(be, p, buf, bh / p.H, bh % p.H);
}

bool g_cpu_clock = false;

double now_seconds() {
  if (!g_cpu_clock) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

double seconds_of(Backend be, const Product& p, Buffers& buf, int reps) {
  const double t0 = now_seconds();
  for (int r = 0; r < reps; ++r) run_once(be, p, buf);
  return (now_seconds() - t0) / reps;
}



std::string shape_of(const Product& p) {
  std::ostringstream s;
  s << (p.ta == Trans::kYes ? 'T' : 'N') << (p.tb == Trans::kYes ? 'T' : 'N') << ' ' << p.M << 'x' << p.N << 'x'
    << p.K;
  if (p.H > 0) s << " x" << p.B * p.H;
  return s.str();
}

struct Options {
  int threads = 2, rounds = 5;
  double min_ms = 25;
  std::vector<std::string> models = {"gpt2-tiny", "gpt2-124M"};
  std::vector<std::string> shapes;  // --shape: plain NN products instead of the models' steps
};

// Median seconds per call of `p` on each backend: one untimed call per backend, then o.rounds
// rounds in which each backend (order rotating) runs the product enough times to take >= min_ms.
void time_product(const Product& p, const Options& o, std::mt19937& g, double sec[kNumBackends]) {
  Buffers buf = make_buffers(p, g);
  for (int be = 0; be < kNumBackends; ++be) seconds_of(Backend(be), p, buf, 1);  // untimed first calls
  // Calls per sample so that one sample takes >= min_ms at OpenBLAS's pace.
  const double pace = std::max(seconds_of(kBlas, p, buf, 1), 1e-6);
  const int reps = std::max(1, static_cast<int>(std::ceil(o.min_ms * 1e-3 / pace)));
  std::vector<double> t[kNumBackends];
  for (int r = 0; r < o.rounds; ++r)
    for (int i = 0; i < kNumBackends; ++i) {
      const int be = (i + r) % kNumBackends;
      t[be].push_back(seconds_of(Backend(be), p, buf, reps));
    }
  for (int be = 0; be < kNumBackends; ++be) sec[be] = median(t[be]);
}

// --shape: C[M,N] = A[M,K] B[K,N], dense, alpha 1, beta 0.
void bench_shape(const std::string& shape, const Options& o) {
  int64_t M = 0, N = 0, K = 0;
  char x1 = 0, x2 = 0;
  std::istringstream in(shape);
  if (!(in >> M >> x1 >> N >> x2 >> K) || x1 != 'x' || x2 != 'x' || M <= 0 || N <= 0 || K <= 0 || !in.eof())
    throw std::runtime_error("--shape expects MxNxK, not " + shape);
  const Trans n = Trans::kNo;
  const Product p{shape, n, n, M, N, K, K, N, N, 1.f, 0.f, 1, 0, 0, {M * K}, {K * N}, {M * N}};
  std::mt19937 g(1234);
  double sec[kNumBackends];
  time_product(p, o, g, sec);
  std::printf("shape %lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
  for (int be = 0; be < kNumBackends; ++be) std::printf(" %s %.1f", kBackendName[be], p.flops() / sec[be] * 1e-9);
  std::printf("\n");
  std::fflush(stdout);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--threads") o.threads = std::max(1, std::stoi(value()));
    else if (arg == "--rounds") o.rounds = std::max(1, std::stoi(value()));
    else if (arg == "--min-ms") o.min_ms = std::stod(value());
    else if (arg == "--clock") {
      const std::string c = value();
      if (c != "wall" && c != "cpu") throw std::runtime_error("--clock wall|cpu, not " + c);
      g_cpu_clock = c == "cpu";
    }
    else if (arg == "--shape") {
      std::stringstream ss(value());
      for (std::string s; std::getline(ss, s, ',');) o.shapes.push_back(s);
    } else if (arg == "--models") {
      o.models.clear();
      std::stringstream ss(value());
      for (std::string s; std::getline(ss, s, ',');) o.models.push_back(s);
    } else throw std::runtime_error("unknown argument " + arg + " (--threads N --rounds N --min-ms X --models a,b --shape MxNxK,... --clock wall|cpu)");
  }
  return o;
}

void bench_model(const Model& m, const Options& o) {
  const auto ps = step_products(m);
  std::printf("\n## %s (B %lld, T %lld, C %lld, L %lld, H %lld, V %lld): GFLOP/s per product, median of %d rounds\n\n",
              m.name.c_str(), (long long)m.B, (long long)m.T, (long long)m.C, (long long)m.L, (long long)m.H,
              (long long)m.V, o.rounds);
  std::printf("| product | op M x N x K | calls/step | GFLOP/step | blas | eigen | bf16 | bf16* | eigen/blas | bf16/blas | oneDNN impl |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  std::mt19937 g(1234);
  const double cpu0 = cpu_seconds();
  const auto wall0 = std::chrono::steady_clock::now();
  double total_flops = 0, total_s[kNumBackends] = {0};
  for (const Product& p : ps) {
    double sec[kNumBackends];
    time_product(p, o, g, sec);
    const double f = p.flops();
    double gfs[kNumBackends];
    for (int be = 0; be < kNumBackends; ++be) {
      gfs[be] = f / sec[be] * 1e-9;
      total_s[be] += sec[be] * p.count;
    }
    total_flops += f * p.count;
    const std::string impl = gf::gemm_bf16_impl(p.ta, p.tb, p.M, p.N, p.K, p.lda, p.ldb, p.ldc, p.alpha, p.beta);
    const std::string impl_pre =
        gf::gemm_bf16_impl(p.ta, p.tb, p.M, p.N, p.K, p.lda, p.ldb, p.ldc, p.alpha, p.beta, /*bf16_inputs=*/true);
    std::printf("| %s | %s | %lld | %.2f | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %s%s%s |\n", p.name.c_str(),
                shape_of(p).c_str(), (long long)p.count, f * p.count * 1e-9, gfs[kBlas], gfs[kEigen], gfs[kBf16],
                gfs[kBf16Pre], gfs[kEigen] / gfs[kBlas], gfs[kBf16] / gfs[kBlas], impl.c_str(),
                impl_pre == impl ? "" : " (bf16*: ", impl_pre == impl ? "" : (impl_pre + ")").c_str());
    std::fflush(stdout);
  }
  std::printf("| **step total (FLOP-weighted)** | | | %.1f | **%.0f** | **%.0f** | **%.0f** | **%.0f** | **%.2f** | **%.2f** | |\n",
              total_flops * 1e-9, total_flops / total_s[kBlas] * 1e-9, total_flops / total_s[kEigen] * 1e-9,
              total_flops / total_s[kBf16] * 1e-9, total_flops / total_s[kBf16Pre] * 1e-9,
              total_s[kBlas] / total_s[kEigen], total_s[kBlas] / total_s[kBf16]);
  std::printf("\nGEMM seconds per step: blas %.3f, eigen %.3f, bf16 %.3f, bf16* %.3f; blas/eigen time ratio %.2f\n",
              total_s[kBlas], total_s[kEigen], total_s[kBf16], total_s[kBf16Pre], total_s[kEigen] / total_s[kBlas]);
  // Spinning threads count as busy, so this is an upper bound on the cores we really had; well
  // below 1 means other processes held our cores (every figure above is then low, and threaded
  // kernels with fine-grained synchronisation suffer most).
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  std::printf("CPU time / (wall time x %d threads) over this model: %.2f\n", o.threads,
              (cpu_seconds() - cpu0) / (wall * o.threads));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_args(argc, argv);
    omp_set_num_threads(o.threads);
    gf::gemm_set_threads(o.threads);
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0) load[0] = -1;
    std::printf("bench_gemm: %d threads (Eigen %d), %d rounds, >= %.0f ms per sample, %s clock; %s; load average %.2f at start\n",
                o.threads, gf::gemm_eigen_threads(), o.rounds, o.min_ms, g_cpu_clock ? "process CPU" : "wall",
                gf::gemm_bf16_backend_info().c_str(), load[0]);
    if (g_cpu_clock && o.threads > 1)
      std::printf("warning: --clock cpu with %d threads counts threads spinning at barriers as work\n", o.threads);
    const auto t0 = std::chrono::steady_clock::now();
    if (!o.shapes.empty()) {
      for (const std::string& shape : o.shapes) bench_shape(shape, o);
      if (getloadavg(load, 3) < 0) load[0] = -1;
      std::printf("(GFLOP/s = 2*M*N*K / median time per call over %d rounds; %.0f s; load average %.2f at the end)\n",
                  o.rounds, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), load[0]);
      return 0;
    }
    for (const std::string& name : o.models) {
      const auto it = std::find_if(std::begin(kModels), std::end(kModels), [&](const Model& m) { return m.name == name; });
      if (it == std::end(kModels)) throw std::runtime_error("unknown model " + name + " (gpt2-tiny, gpt2-124M)");
      bench_model(*it, o);
    }
    if (getloadavg(load, 3) < 0) load[0] = -1;
    std::printf("\n(%.0f s; load average %.2f at the end. GFLOP/s = 2*M*N*K per call / median time; bf16 includes\n"
                "converting A and B to bf16 on each call, bf16* is the primitive on inputs already in bf16.)\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), load[0]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
