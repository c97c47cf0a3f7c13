#include "core/math/gemm_bf16.h"
#include "core/math/progress.h"
#include "core/trace/trace.h"

#include "core/math/parallel_memory.h"
#include "core/math/parallel_worth.h"

#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#ifdef GF_WITH_DNNL
#include <oneapi/dnnl/dnnl.hpp>

#include <unordered_map>
#endif

namespace gf {

void convert_to_bf16(bf16* dst, const float* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    bf16* d = dst + r * cols;
    for (int64_t c = 0; c < cols; ++c) d[c] = float_to_bf16(s[c]);
  }
}

namespace {

// C = beta * C (cblas: beta == 0 writes zeros without reading C).
void scale_c(float* C, int64_t M, int64_t N, int64_t ldc, float beta) {
#pragma omp parallel for schedule(static) if (parallel_worth(M * N))
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) C[r * ldc + c] = beta == 0.0f ? 0.0f : beta * C[r * ldc + c];
}

// What the primitive does not do: empty products, K == 0 or alpha == 0 (C = beta C).
// Returns false when nothing is left to compute.
[[maybe_unused]] bool needs_product(int64_t M, int64_t N, int64_t K, float alpha, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return false;
  if (K == 0 || alpha == 0.0f) {
    if (beta != 1.0f) scale_c(C, M, N, ldc, beta);
    return false;
  }
  return true;
}

}  // namespace

#ifdef GF_WITH_DNNL

namespace {

using dnnl::memory;

// oneDNN 2.6 picks its AMX/AVX-512 brgemm matmul only for dense operands (row stride = width)
// and a compile-time output scale: a strided A, B or C, or a runtime scale (DNNL_RUNTIME_F32_VAL),
// sends it to "gemm:jit", several times slower here. So the primitive always sees dense
// operands, and alpha's value is part of its key (constant per shape in the model: 1, or
// attention's 1/sqrt(D)).
struct PrimKey {
  bool ta, tb;
  int64_t M, N, K;
  uint32_t alpha_bits;
  bool accumulate;  // beta != 0 and C dense: oneDNN's sum post-op adds the product to C
  bool bias = false;  // a bias row added in the accumulator (DNNL_ARG_BIAS)
  bool dst_bf16 = false;  // the output written in bf16 (rounded from the fp32 accumulator) instead of fp32
  bool operator==(const PrimKey&) const = default;
};

// One call site's shape: what the caller passes (strides, alpha, beta != 0, float or bf16 inputs).
struct CallKey {
  bool bf16_in, ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  uint32_t alpha_bits;
  bool beta_nonzero;
  bool bias = false;
  bool dst_bf16 = false;
  bool operator==(const CallKey&) const = default;
};

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

struct PrimKeyHash {
  size_t operator()(const PrimKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (const uint64_t v : {uint64_t(k.ta), uint64_t(k.tb), uint64_t(k.M), uint64_t(k.N), uint64_t(k.K),
                             uint64_t(k.alpha_bits), uint64_t(k.accumulate), uint64_t(k.bias), uint64_t(k.dst_bf16)})
      h = mix(h, v);
    return static_cast<size_t>(h);
  }
};

struct CallKeyHash {
  size_t operator()(const CallKey& k) const {
    uint64_t h = 1469598103934665603ull;
    for (const uint64_t v : {uint64_t(k.bf16_in), uint64_t(k.ta), uint64_t(k.tb), uint64_t(k.M), uint64_t(k.N),
                             uint64_t(k.K), uint64_t(k.lda), uint64_t(k.ldb), uint64_t(k.ldc), uint64_t(k.alpha_bits),
                             uint64_t(k.beta_nonzero), uint64_t(k.bias), uint64_t(k.dst_bf16)})
      h = mix(h, v);
    return static_cast<size_t>(h);
  }
};

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<void, AlignedFree>;

AlignedBytes aligned_bytes(size_t n) {
  if (n == 0) return AlignedBytes(nullptr);
  void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);
  if (p == nullptr) throw std::bad_alloc();
  return AlignedBytes(p);
}

// One cached matmul: the primitive, its scratchpad, and memory objects whose data handles are
// pointed at the operands on each call; dnnl_primitive_execute takes the prepared argument array,
// so a call allocates no buffer on our side.
// oneDNN 2.6 has no bf16 matmul below AVX-512 (AVX2 machines): then `available` is false and the
// product runs on the fp32 GEMM over the bf16-rounded inputs widened back to float, the same
// arithmetic (products of bf16 values are exact in fp32, sums in fp32).
struct Matmul {
  bool available = true;
  std::string impl;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  AlignedBytes scratch;
  memory src, wei, dst, pad, bias;
  dnnl_exec_arg_t args[5];
  int nargs = 4;
};

// One call shape: its primitive and the dense buffers it needs (bf16 copies of A and B unless the
// caller's bf16 operands are dense already; an f32 product buffer when C is strided).
struct Plan {
  Matmul* mm = nullptr;
  AlignedBytes a, b, c;
  AlignedBytes fa, fb;  // float copies of the rounded operands, when the matmul is not available
};

struct ThreadCache {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<PrimKey, std::unique_ptr<Matmul>, PrimKeyHash> matmuls;
  std::unordered_map<CallKey, std::unique_ptr<Plan>, CallKeyHash> plans;
};

// Per thread: attention calls the GEMM from inside an OpenMP loop over heads, and oneDNN streams
// and our buffers are not to be shared between concurrent calls.
ThreadCache& cache() {
  thread_local ThreadCache c;
  return c;
}

// A dense rows x cols operand, stored transposed (cols x rows, row-major) when trans.
memory::desc dense_desc(bool trans, int64_t rows, int64_t cols, memory::data_type dt) {
  return memory::desc({rows, cols}, dt, trans ? memory::dims{1, rows} : memory::dims{cols, 1});
}

std::unique_ptr<Matmul> make_matmul(ThreadCache& tc, const PrimKey& k) {
  auto mm = std::make_unique<Matmul>();
  const auto bf = memory::data_type::bf16;
  const memory::desc a = dense_desc(k.ta, k.M, k.K, bf), b = dense_desc(k.tb, k.K, k.N, bf);
  const memory::desc c = dense_desc(false, k.M, k.N, k.dst_bf16 ? bf : memory::data_type::f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const float alpha = std::bit_cast<float>(k.alpha_bits);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (k.accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  try {
    mm->pd = k.bias ? dnnl::matmul::primitive_desc(
                          dnnl::matmul::desc(a, b, memory::desc({1, k.N}, memory::data_type::f32, memory::dims{k.N, 1}), c),
                          attr, tc.engine)
                    : dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, tc.engine);
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
    mm->available = false;
    mm->impl = "none on this CPU (" + gemm_bf16_backend_info() + "): fp32 GEMM on the bf16-rounded inputs";
    return mm;
  }
  mm->impl = mm->pd.impl_info_str();
  mm->prim = dnnl::matmul(mm->pd);
  const memory::desc pad_md = mm->pd.scratchpad_desc();
  mm->scratch = aligned_bytes(pad_md.get_size());
  mm->src = memory(a, tc.engine, nullptr);
  mm->wei = memory(b, tc.engine, nullptr);
  mm->dst = memory(c, tc.engine, nullptr);
  mm->pad = memory(pad_md, tc.engine, mm->scratch.get());
  mm->args[0] = {DNNL_ARG_SRC, mm->src.get()};
  mm->args[1] = {DNNL_ARG_WEIGHTS, mm->wei.get()};
  mm->args[2] = {DNNL_ARG_DST, mm->dst.get()};
  mm->args[3] = {DNNL_ARG_SCRATCHPAD, mm->pad.get()};
  if (k.bias) {
    mm->bias = memory(mm->pd.bias_desc(), tc.engine, nullptr);
    mm->args[4] = {DNNL_ARG_BIAS, mm->bias.get()};
    mm->nargs = 5;
  }
  return mm;
}

// Stored shapes: A is M x K (K x M transposed), B is K x N (N x K transposed).
int64_t a_rows(const CallKey& k) { return k.ta ? k.K : k.M; }
int64_t a_cols(const CallKey& k) { return k.ta ? k.M : k.K; }
int64_t b_rows(const CallKey& k) { return k.tb ? k.N : k.K; }
int64_t b_cols(const CallKey& k) { return k.tb ? k.K : k.N; }

Plan& plan_for(ThreadCache& tc, const CallKey& k) {
  auto it = tc.plans.find(k);
  if (it != tc.plans.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  if (!k.bf16_in || k.lda != a_cols(k)) plan->a = aligned_bytes(sizeof(bf16) * static_cast<size_t>(k.M * k.K));
  if (!k.bf16_in || k.ldb != b_cols(k)) plan->b = aligned_bytes(sizeof(bf16) * static_cast<size_t>(k.K * k.N));
  const bool dense_c = k.ldc == k.N;
  if (!dense_c) plan->c = aligned_bytes(sizeof(float) * static_cast<size_t>(k.M * k.N));
  const PrimKey pk{k.ta, k.tb, k.M, k.N, k.K, k.alpha_bits, dense_c && k.beta_nonzero, k.bias && dense_c, k.dst_bf16};
  auto mit = tc.matmuls.find(pk);
  if (mit == tc.matmuls.end()) mit = tc.matmuls.emplace(pk, make_matmul(tc, pk)).first;
  plan->mm = mit->second.get();
  if (!plan->mm->available) {
    plan->fa = aligned_bytes(sizeof(float) * static_cast<size_t>(k.M * k.K));
    plan->fb = aligned_bytes(sizeof(float) * static_cast<size_t>(k.K * k.N));
    // A bf16 output is computed in fp32 first, then rounded.
    if (k.dst_bf16) plan->c = aligned_bytes(sizeof(float) * static_cast<size_t>(k.M * k.N));
  }
  return *tc.plans.emplace(k, std::move(plan)).first->second;
}

CallKey call_key(bool bf16_in, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                 int64_t ldc, float alpha, float beta) {
  return CallKey{bf16_in, ta == Trans::kYes, tb == Trans::kYes, M, N, K, lda, ldb, ldc,
                 std::bit_cast<uint32_t>(alpha), beta != 0.0f};
}

void check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success)
    throw std::runtime_error(std::string("oneDNN: ") + what + " failed (status " + std::to_string(s) + ")");
}

void copy_rows(bf16* dst, const bf16* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows * cols))
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * cols, src + r * ld, sizeof(bf16) * static_cast<size_t>(cols));
}

// The caller's bf16 operands, or the plan's dense copies of the strided ones.
std::pair<const bf16*, const bf16*> dense_operands(const CallKey& k, Plan& plan, const bf16* A, const bf16* B) {
  if (plan.a) {
    copy_rows(static_cast<bf16*>(plan.a.get()), A, a_rows(k), a_cols(k), k.lda);
    A = static_cast<const bf16*>(plan.a.get());
  }
  if (plan.b) {
    copy_rows(static_cast<bf16*>(plan.b.get()), B, b_rows(k), b_cols(k), k.ldb);
    B = static_cast<const bf16*>(plan.b.get());
  }
  return {A, B};
}

// C = beta C + P for a strided C and the dense product P.
void add_product(float* C, int64_t ldc, const float* P, int64_t M, int64_t N, float beta) {
#pragma omp parallel for schedule(static) if (parallel_worth(M * N))
  for (int64_t r = 0; r < M; ++r) {
    float* c = C + r * ldc;
    const float* p = P + r * N;
    if (beta == 0.0f)
      for (int64_t j = 0; j < N; ++j) c[j] = p[j];
    else if (beta == 1.0f)
      for (int64_t j = 0; j < N; ++j) c[j] += p[j];
    else
      for (int64_t j = 0; j < N; ++j) c[j] = beta * c[j] + p[j];
  }
}

// Runs the plan's primitive on dense bf16 operands a and b, into C.
void widen(float* dst, const bf16* src, int64_t n) {
#pragma omp parallel for schedule(static) if (parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void warn_no_matmul(const std::string& impl) {
  static std::once_flag once;
  std::call_once(once, [&] { std::fprintf(stderr, "warning: gemm_bf16: oneDNN bf16 matmul: %s\n", impl.c_str()); });
}

// The fp32 GEMM on the dense bf16 operands widened to float.
void execute_fallback(const CallKey& k, Plan& plan, const bf16* a, const bf16* b, float beta, float* C) {
  warn_no_matmul(plan.mm->impl);
  auto* fa = static_cast<float*>(plan.fa.get());
  auto* fb = static_cast<float*>(plan.fb.get());
  widen(fa, a, k.M * k.K);
  widen(fb, b, k.K * k.N);
  gemm(k.ta ? Trans::kYes : Trans::kNo, k.tb ? Trans::kYes : Trans::kNo, k.M, k.N, k.K,
       std::bit_cast<float>(k.alpha_bits), fa, a_cols(k), fb, b_cols(k), beta, C, k.ldc);
}

// One run of the primitive on dense a and b into dst (fp32, or bf16 for a dst_bf16 key), with the bias
// where the primitive takes one.
void run(ThreadCache& tc, Matmul& mm, const bf16* a, const bf16* b, void* dst, const float* bias) {
  check(dnnl_memory_set_data_handle_v2(mm.src.get(), const_cast<bf16*>(a), nullptr), "set src");
  check(dnnl_memory_set_data_handle_v2(mm.wei.get(), const_cast<bf16*>(b), nullptr), "set weights");
  check(dnnl_memory_set_data_handle_v2(mm.dst.get(), dst, nullptr), "set dst");
  if (mm.nargs == 5) check(dnnl_memory_set_data_handle_v2(mm.bias.get(), const_cast<float*>(bias), nullptr), "set bias");
  check(dnnl_primitive_execute(mm.prim.get(), tc.stream.get(), mm.nargs, mm.args), "matmul execute");
  check(dnnl_stream_wait(tc.stream.get()), "stream wait");
}

void execute(ThreadCache& tc, const CallKey& k, Plan& plan, const bf16* a, const bf16* b, float beta, float* C,
             const float* bias = nullptr) {
  Matmul& mm = *plan.mm;
  if (bias && !(mm.available && mm.nargs == 5)) {  // no fused bias: C = bias, then C += the product
    parallel_broadcast_rows(C, k.M, k.N, k.ldc, bias);
    CallKey k1 = k;
    k1.bias = false;
    k1.beta_nonzero = true;
    return execute(tc, k1, plan_for(tc, k1), a, b, 1.0f, C);
  }
  if (!mm.available) return execute_fallback(k, plan, a, b, beta, C);
  const bool dense_c = plan.c == nullptr;
  if (dense_c && beta != 0.0f && beta != 1.0f) scale_c(C, k.M, k.N, k.ldc, beta);  // the sum post-op adds 1 x C
  float* dst = dense_c ? C : static_cast<float*>(plan.c.get());
  run(tc, mm, a, b, dst, bias);
  if (!dense_c) add_product(C, k.ldc, dst, k.M, k.N, beta);
}

}  // namespace

bool gemm_bf16_available() { return true; }

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  GF_OP_SPAN("gemm", "gemm bf16");
  progress::point();  // core/math/progress.h
  if (!needs_product(M, N, K, alpha, beta, C, ldc)) return;
  ThreadCache& tc = cache();
  const CallKey k = call_key(false, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta);
  Plan& plan = plan_for(tc, k);
  auto* a = static_cast<bf16*>(plan.a.get());
  auto* b = static_cast<bf16*>(plan.b.get());
  convert_to_bf16(a, A, a_rows(k), a_cols(k), lda);
  convert_to_bf16(b, B, b_rows(k), b_cols(k), ldb);
  execute(tc, k, plan, a, b, beta, C);
}

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t lda,
               const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  GF_OP_SPAN("gemm", "gemm bf16");
  progress::point();  // core/math/progress.h
  if (!needs_product(M, N, K, alpha, beta, C, ldc)) return;
  ThreadCache& tc = cache();
  const CallKey k = call_key(true, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta);
  Plan& plan = plan_for(tc, k);
  const auto [a, b] = dense_operands(k, plan, A, B);
  execute(tc, k, plan, a, b, beta, C);
}

void gemm_bf16_bias(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t lda,
                    const bf16* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  GF_OP_SPAN("gemm", "gemm bf16 bias");
  progress::point();
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {  // C = bias
    parallel_broadcast_rows(C, M, N, ldc, bias);
    return;
  }
  ThreadCache& tc = cache();
  CallKey k = call_key(true, ta, tb, M, N, K, lda, ldb, ldc, alpha, 0.0f);
  k.bias = true;
  Plan& plan = plan_for(tc, k);
  const auto [a, b] = dense_operands(k, plan, A, B);
  execute(tc, k, plan, a, b, 0.0f, C, bias);
}

void gemm_bf16_to_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                       const bf16* B, int64_t ldb, const float* bias, bf16* C) {
  GF_OP_SPAN("gemm", bias ? "gemm bf16 bias" : "gemm bf16");
  progress::point();
  if (M == 0 || N == 0) return;
  if (K == 0) {  // C = bias (or 0), rounded
#pragma omp parallel for schedule(static) if (parallel_worth(M * N))
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = 0; c < N; ++c) C[r * N + c] = float_to_bf16(bias ? bias[c] : 0.0f);
    return;
  }
  ThreadCache& tc = cache();
  CallKey k = call_key(true, ta, tb, M, N, K, lda, ldb, N, 1.0f, 0.0f);
  k.bias = bias != nullptr;
  k.dst_bf16 = true;
  Plan& plan = plan_for(tc, k);
  const auto [a, b] = dense_operands(k, plan, A, B);
  Matmul& mm = *plan.mm;
  if (!mm.available) {  // the fp32 product of the same operands, then rounded
    auto* c = static_cast<float*>(plan.c.get());
    if (bias) parallel_broadcast_rows(c, M, N, N, bias);
    execute_fallback(k, plan, a, b, bias ? 1.0f : 0.0f, c);
    convert_to_bf16(C, c, M, N, N);
    return;
  }
  run(tc, mm, a, b, C, bias);
}

std::string gemm_bf16_impl(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                           int64_t ldc, float alpha, float beta, bool bf16_inputs) {
  const CallKey k = call_key(bf16_inputs, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta);
  return plan_for(cache(), k).mm->impl;
}

std::string gemm_bf16_backend_info() {
  const dnnl_version_t* v = dnnl::version();
  const int isa = static_cast<int>(dnnl::get_effective_cpu_isa());
  std::string name = "isa#" + std::to_string(isa);
  for (const auto& [value, label] : {std::pair{dnnl_cpu_isa_all, "all"}, {dnnl_cpu_isa_sse41, "sse41"},
                                     {dnnl_cpu_isa_avx, "avx"}, {dnnl_cpu_isa_avx2, "avx2"},
                                     {dnnl_cpu_isa_avx512_core, "avx512_core"},
                                     {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
                                     {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
                                     {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
                                     {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"}})
    if (isa == static_cast<int>(value)) name = label;
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         ", effective ISA " + name;
}

void gemm_bf16_clear_cache() {
  cache().plans.clear();
  cache().matmuls.clear();
}

#else  // built without oneDNN

namespace {
void warn_fallback() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::fprintf(stderr, "warning: gemm_bf16: built without oneDNN (GF_WITH_DNNL=OFF); running the fp32 GEMM instead\n");
  });
}
}  // namespace

bool gemm_bf16_available() { return false; }

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  GF_OP_SPAN("gemm", "gemm bf16");
  warn_fallback();
  gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// bf16 -> float is exact, so this fallback computes what the oneDNN path does (up to the order of
// the fp32 accumulation); it allocates the float copies.
void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t lda,
               const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  GF_OP_SPAN("gemm", "gemm bf16");
  warn_fallback();
  if (M == 0 || N == 0) return;
  // Stored extents: the last row of a strided matrix ends at its width, not at the stride.
  const int64_t na = ta == Trans::kYes ? (K - 1) * lda + M : (M - 1) * lda + K;
  const int64_t nb = tb == Trans::kYes ? (N - 1) * ldb + K : (K - 1) * ldb + N;
  std::unique_ptr<float[]> a(new float[static_cast<size_t>(na > 0 ? na : 1)]);
  std::unique_ptr<float[]> b(new float[static_cast<size_t>(nb > 0 ? nb : 1)]);
  for (int64_t i = 0; i < na; ++i) a[i] = bf16_to_float(A[i]);
  for (int64_t i = 0; i < nb; ++i) b[i] = bf16_to_float(B[i]);
  gemm(ta, tb, M, N, K, alpha, a.get(), lda, b.get(), ldb, beta, C, ldc);
}

void gemm_bf16_bias(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A, int64_t lda,
                    const bf16* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  parallel_broadcast_rows(C, M, N, ldc, bias);
  gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, 1.0f, C, ldc);
}

void gemm_bf16_to_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                       const bf16* B, int64_t ldb, const float* bias, bf16* C) {
  if (M == 0 || N == 0) return;
  std::unique_ptr<float[]> c(new float[static_cast<size_t>(M * N)]);
  if (bias) parallel_broadcast_rows(c.get(), M, N, N, bias);
  gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, bias ? 1.0f : 0.0f, c.get(), N);
  convert_to_bf16(C, c.get(), M, N, N);
}

std::string gemm_bf16_impl(Trans, Trans, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float, bool) {
  return "fp32 fallback (built without oneDNN)";
}

std::string gemm_bf16_backend_info() { return "built without oneDNN: bf16 products run the fp32 GEMM"; }

void gemm_bf16_clear_cache() {}

#endif

}  // namespace gf
