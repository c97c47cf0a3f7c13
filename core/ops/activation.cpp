#include "core/ops/activation.h"
#include "core/trace/trace.h"

#include "core/math/gemm_bf16.h"
#include "core/math/parallel_worth.h"

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace gf::ops {
namespace {

template <typename T>
struct GeluNew {
  static constexpr T k = T(0.7978845608028654), c = T(0.044715);
};

// The activations run as Eigen expressions over blocks of kBlock elements, the blocks split over the
// threads: body(first element, elements).
template <int64_t kBlock, typename Body>
void in_blocks(int64_t n, const Body& body) {
#pragma omp parallel for schedule(static) if (parallel_worth(n * kTranscendentalWork))
  for (int64_t b = 0; b < n; b += kBlock) body(b, std::min(kBlock, n - b));
}

// The forwards run over blocks of kFwdBlock elements, the blocks split over the threads.
constexpr int64_t kFwdBlock = 4096;

// GPT-2's gelu_new through Eigen's vectorised tanh: one block of m elements.
template <typename T>
void gelu_new_fwd_block(T* y, const T* x, int64_t m) {
  using A = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const A> xs(x, m);
  Eigen::Map<A> ys(y, m);
  ys = T(0.5) * xs * (T(1) + (GeluNew<T>::k * (xs + GeluNew<T>::c * xs.cube())).tanh());
}

// Backward blocks hold at most kBwdBlock elements where they keep a block-sized temporary.
constexpr int64_t kBwdBlock = 2048;

// A backward's store: d += v (accumulate) or d = v. Into zeros the two give the same values (a
// contracted d + a * b is fma(a, b, 0), the rounded product), but for the sign of a zero.
template <typename D, typename V>
void put(D& d, const V& v, bool accumulate) {
  if (accumulate) d += v;
  else d = v;
}

template <typename T>
void gelu_new_bwd_block(T* dx, const T* dy, const T* x, int64_t m, bool acc) {
  using A = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const A> xs(x, m), g(dy, m);
  Eigen::Map<A> d(dx, m);
  // Fixed maximum size: lives on the stack, no allocation inside the step.
  const Eigen::Array<T, Eigen::Dynamic, 1, Eigen::ColMajor, kBwdBlock, 1> t =
      (GeluNew<T>::k * (xs + GeluNew<T>::c * xs.cube())).tanh();
  put(d,
      g * (T(0.5) * (T(1) + t) +
           T(0.5) * xs * (T(1) - t.square()) * GeluNew<T>::k * (T(1) + T(3) * GeluNew<T>::c * xs.square())),
      acc);
}

// Exact GELU (hidden_act: gelu, MindFormers' GPT-2) through Eigen's vectorised erf, and fast_gelu
// through its vectorised exp, in blocks per thread: std::erf and std::exp one element at a time cost
// about ten times as much (bench/bench_ops).
template <typename T>
void gelu_fwd_block(T* y, const T* x, int64_t m) {
  using A = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const A> xs(x, m);
  Eigen::Map<A> ys(y, m);
  ys = T(0.5) * xs * (T(1) + (xs * T(0.7071067811865476)).erf());
}

template <typename T>
void gelu_bwd_block(T* dx, const T* dy, const T* x, int64_t m, bool acc) {
  using A = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const A> xs(x, m), g(dy, m);
  Eigen::Map<A> d(dx, m);
  put(d,
      g * (T(0.5) * (T(1) + (xs * T(0.7071067811865476)).erf()) +
           xs * T(0.3989422804014327) * (T(-0.5) * xs.square()).exp()),
      acc);
}

template <typename T>
void fast_gelu_fwd_block(T* y, const T* x, int64_t m) {
  using A = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const A> xs(x, m);
  Eigen::Map<A> ys(y, m);
  ys = xs / (T(1) + (T(-1.702) * xs).exp());
}

// One block of activation a's forward.
template <typename T>
void fwd_block(Activation a, T* y, const T* x, int64_t m) {
  switch (a) {
    case Activation::kGelu: return gelu_fwd_block(y, x, m);
    case Activation::kGeluNew: return gelu_new_fwd_block(y, x, m);
    case Activation::kFastGelu: return fast_gelu_fwd_block(y, x, m);
  }
}

template <typename T>
void fast_gelu_bwd_block(T* dx, const T* dy, const T* x, int64_t m, bool acc) {
  using A = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const A> xs(x, m), g(dy, m);
  Eigen::Map<A> d(dx, m);
  const Eigen::Array<T, Eigen::Dynamic, 1, Eigen::ColMajor, kBwdBlock, 1> sg = T(1) / (T(1) + (T(-1.702) * xs).exp());
  put(d, g * (sg + T(1.702) * xs * sg * (T(1) - sg)), acc);
}

// One block of activation a's backward (m <= kBwdBlock for gelu_new and fast_gelu).
template <typename T>
void bwd_block(Activation a, T* dx, const T* dy, const T* x, int64_t m, bool acc) {
  switch (a) {
    case Activation::kGelu: return gelu_bwd_block(dx, dy, x, m, acc);
    case Activation::kGeluNew: return gelu_new_bwd_block(dx, dy, x, m, acc);
    case Activation::kFastGelu: return fast_gelu_bwd_block(dx, dy, x, m, acc);
  }
}

}  // namespace

Activation parse_activation(std::string_view name) {
  if (name == "gelu") return Activation::kGelu;
  if (name == "gelu_new") return Activation::kGeluNew;
  if (name == "fast_gelu") return Activation::kFastGelu;
  throw std::invalid_argument("unknown hidden_act '" + std::string(name) +
                              "'; known: gelu, gelu_new, fast_gelu");
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kGelu: return "gelu";
    case Activation::kGeluNew: return "gelu_new";
    case Activation::kFastGelu: return "fast_gelu";
  }
  return "?";
}

template <typename T>
void activation_fwd(Activation a, T* y, const T* x, int64_t n) {
  GF_OP_SPAN("elementwise", "activation fwd");
  in_blocks<kFwdBlock>(n, [&](int64_t b, int64_t m) { fwd_block(a, y + b, x + b, m); });
}

template <typename T>
void activation_bwd(Activation a, T* dx, const T* dy, const T* x, int64_t n, bool accumulate) {
  GF_OP_SPAN("elementwise", "activation bwd");
  // Exact GELU keeps no block-sized temporary and takes larger blocks.
  if (a == Activation::kGelu)
    return in_blocks<kFwdBlock>(n, [&](int64_t b, int64_t m) { bwd_block(a, dx + b, dy + b, x + b, m, accumulate); });
  in_blocks<kBwdBlock>(n, [&](int64_t b, int64_t m) { bwd_block(a, dx + b, dy + b, x + b, m, accumulate); });
}

void activation_fwd_bf16(Activation a, bf16* y, const bf16* x, int64_t n) {
  GF_OP_SPAN("elementwise", "activation fwd");
  in_blocks<kFwdBlock>(n, [&](int64_t b, int64_t m) {
    alignas(64) float xf[kFwdBlock];
    alignas(64) float t[kFwdBlock];
    widen_bf16(xf, x + b, m);
    fwd_block(a, t, xf, m);
    round_to_bf16(y + b, t, m);
  });
}

void activation_bwd_bf16(Activation a, bf16* dx, const bf16* dy, const bf16* x, int64_t n) {
  GF_OP_SPAN("elementwise", "activation bwd");
  in_blocks<kBwdBlock>(n, [&](int64_t b, int64_t m) {
    alignas(64) float xf[kBwdBlock];
    alignas(64) float dyf[kBwdBlock];
    alignas(64) float t[kBwdBlock];
    widen_bf16(xf, x + b, m);
    widen_bf16(dyf, dy + b, m);
    bwd_block(a, t, dyf, xf, m, false);
    round_to_bf16(dx + b, t, m);
  });
}

template <typename T>
void activation_fwd_block(Activation a, T* y, const T* x, int64_t n) {
  static_assert(kActivationBlock <= kBwdBlock && kActivationBlock <= kFwdBlock);
  if (n > kActivationBlock) throw std::invalid_argument("activation_fwd_block: more than kActivationBlock elements");
  fwd_block(a, y, x, n);
}

template <typename T>
void activation_bwd_block(Activation a, T* dx, const T* dy, const T* x, int64_t n, bool accumulate) {
  if (n > kActivationBlock) throw std::invalid_argument("activation_bwd_block: more than kActivationBlock elements");
  bwd_block(a, dx, dy, x, n, accumulate);
}

template void activation_fwd_block<float>(Activation, float*, const float*, int64_t);
template void activation_fwd_block<double>(Activation, double*, const double*, int64_t);
template void activation_bwd_block<float>(Activation, float*, const float*, const float*, int64_t, bool);
template void activation_bwd_block<double>(Activation, double*, const double*, const double*, int64_t, bool);
template void activation_fwd<float>(Activation, float*, const float*, int64_t);
template void activation_fwd<double>(Activation, double*, const double*, int64_t);
template void activation_bwd<float>(Activation, float*, const float*, const float*, int64_t, bool);
template void activation_bwd<double>(Activation, double*, const double*, const double*, int64_t, bool);

}  // namespace gf::ops
